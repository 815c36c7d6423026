"""policyc: compile small neural-network policies ahead of time and call them on numpy arrays.

    import numpy as np, policyc
    policy = policyc.compile("examples/models/ppo_mlp.onnx")    # or policyc.load("ppo_mlp.so")
    logits, value = policy(np.zeros((1, 17), np.float32))
    policy.run_dict(obs=np.zeros((8, 17), np.float32))           # {"action_dist_inputs": ..., "vf": ...}

Errors: ValueError for inputs that do not match the model (names, dtypes, shapes), RuntimeError
for a model that cannot be compiled (the message names the log and, with debug_dir, the dumps).
"""
import os
import tempfile

from ._policyc import Policy, compile, load  # noqa: F401  (re-exported)

__all__ = ["Policy", "compile", "load", "from_torch"]


def from_torch(module, example_inputs, input_names=None, output_names=None, opset=17, **compile_options):
    """Exports a torch.nn.Module with torch.onnx.export (batch dimension 0 dynamic) and compiles it.

    example_inputs: a tensor or a tuple of tensors with the batch first. compile_options go to
    policyc.compile (backend, fuse, mode, target, threads, debug_dir, extern_kernels, tune_batch). The
    exported .onnx is kept next to the compiled model in the cache only while compiling.
    """
    import torch  # imported here: policyc itself does not need torch

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if input_names is None:
        input_names = ["input_%d" % i for i in range(len(example_inputs))]
    with torch.no_grad():
        probe = module(*example_inputs)
    n_out = len(probe) if isinstance(probe, (tuple, list)) else 1
    if output_names is None:
        output_names = ["output_%d" % i for i in range(n_out)]
    dynamic = {name: {0: "batch"} for name in list(input_names) + list(output_names)}
    was_training = module.training
    module.eval()
    try:
        with tempfile.TemporaryDirectory(prefix="policyc-torch-") as tmp:
            path = os.path.join(tmp, (type(module).__name__ or "model") + ".onnx")
            torch.onnx.export(module, example_inputs, path, input_names=list(input_names),
                              output_names=list(output_names), dynamic_axes=dynamic, opset_version=opset)
            return compile(path, **compile_options)
    finally:
        module.train(was_training)
