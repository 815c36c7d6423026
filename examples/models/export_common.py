"""Export steps shared by make_models.py and examples/zoo/make_zoo.py: seeded reference inputs, ONNX export with a dynamic batch, validation, reference .npy files and manifest entries."""

# Both generators must write byte-identical files on every run, so everything here is deterministic
# given the spec, the module and its weights; the generators own seeding, model tweaks and reports.

import hashlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")  # torch.onnx is chatty about constant folding, custom symbolics, dynamic shapes

REPO = Path(__file__).resolve().parents[2]

# One key order for the entries of every manifest, so that both read alike; a generator leaves out
# the fields it does not record (make_models.py has no "kind" or "params").
ENTRY_KEYS = ("name", "kind", "onnx", "opset", "params", "inputs", "outputs", "ops", "reference")


class ResidualBlock(nn.Module):
    """IMPALA residual block: x + conv(relu(conv(relu(x)))), 3x3 convs keeping the channel count."""

    def __init__(self, ch):
        super().__init__()
        self.conv0 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


def deterministic_torch(*dirs):
    """One CPU thread and deterministic kernels, so that reruns write the same bytes; creates `dirs`."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)


def make_inputs(spec, batch, tag="reference", namespace=""):
    """Random inputs for spec["inputs"] at `batch`, seeded by namespace/name/tag/batch so that each
    generator (namespace) and each use (tag: reference, export, calibration) gets its own stream."""
    seed = int(hashlib.sha256(f"{namespace}{spec['name']}/{tag}/b{batch}".encode()).hexdigest()[:8], 16)
    rng = np.random.default_rng(seed)
    arrs = {}
    for name, dtype, shape in spec["inputs"]:
        if dtype == "uint8":  # uniform noise, each image in its own random brightness range
            lo = rng.integers(0, 128, size=batch)
            hi = rng.integers(lo + 64, 257)
            arrs[name] = np.stack([rng.integers(l, h, size=shape, dtype=np.uint8) for l, h in zip(lo, hi)])
        else:
            arrs[name] = rng.standard_normal([batch] + shape).astype(np.float32)
    if "tweak_inputs" in spec:
        arrs = spec["tweak_inputs"](arrs, batch, rng)
    # the .npy files are read by the C++ tests, which expect little-endian, C-ordered data
    return {k: np.ascontiguousarray(v.astype(v.dtype.newbyteorder("<"))) for k, v in arrs.items()}


def op_types(model):
    return sorted({n.op_type for n in model.graph.node})


def export_onnx(model, spec, example, onnx_path, postprocess=None):
    """Exports `model` (already in eval mode) at spec["opset"] with every input and output dynamic on
    axis 0, applies postprocess(spec, onnx_model) if given, and saves it with the class docstring's
    first line as its doc_string."""
    in_names = [i[0] for i in spec["inputs"]]
    out_names = spec["outputs"]
    buf = io.BytesIO()
    torch.onnx.export(
        model, tuple(torch.from_numpy(example[n]) for n in in_names), buf,
        opset_version=spec["opset"],
        input_names=in_names, output_names=out_names,
        dynamic_axes={n: {0: "batch"} for n in in_names + out_names},
        do_constant_folding=True,
        training=spec.get("training", torch.onnx.TrainingMode.EVAL),
    )
    onnx_model = onnx.load_from_string(buf.getvalue())
    if postprocess is not None:
        postprocess(spec, onnx_model)
    onnx_model.doc_string = (spec["cls"].__doc__ or "").strip().split("\n")[0]
    onnx.save(onnx_model, str(onnx_path))
    # TrainingMode.PRESERVE exports whatever mode the module is in: it must have been eval()
    assert model.training is False


def validate_onnx(onnx_path, opset):
    """Checks the saved file as a reader would see it (full checker, strict shape inference, the
    default-domain opset). Returns (model, model with inferred shapes)."""
    reloaded = onnx.load(str(onnx_path))
    onnx.checker.check_model(reloaded, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(reloaded, strict_mode=True)
    got = {o.domain: o.version for o in reloaded.opset_import}.get("", None)
    assert got == opset, (onnx_path.name, got)
    return reloaded, inferred


def write_references(model, spec, ref_dir, batches, namespace="", check=None):
    """Runs `model` on the reference inputs of each batch and writes in_b{B}_<input>.npy and
    out_b{B}_<output>.npy into ref_dir, after removing the old ones. check(spec, batch, outputs),
    if given, sees the outputs of each batch by name. Returns the manifest's "reference" dict and
    [(output, dtype, shape with "batch")] of the last batch."""
    name = spec["name"]
    in_names = [i[0] for i in spec["inputs"]]
    out_names = spec["outputs"]
    ref_dir.mkdir(parents=True, exist_ok=True)
    for old in ref_dir.glob("*.npy"):  # an output that was renamed or dropped must not linger
        old.unlink()
    reference = {}
    out_meta = None
    for batch in batches:
        arrs = make_inputs(spec, batch, namespace=namespace)
        with torch.no_grad():
            outs = model(*[torch.from_numpy(arrs[n].copy()) for n in in_names])
        outs = {n: o.numpy() for n, o in zip(out_names, outs)}
        ref = {"inputs": {}, "outputs": {}}
        for n in in_names:
            p = ref_dir / f"in_b{batch}_{n}.npy"
            np.save(p, arrs[n])
            ref["inputs"][n] = str(p.relative_to(REPO))
        for n in out_names:
            o = outs[n]
            assert o.dtype in (np.float32, np.int64), (name, n, o.dtype)
            assert o.shape[0] == batch and np.all(np.isfinite(o)), (name, n)
            o = np.ascontiguousarray(o.astype(o.dtype.newbyteorder("<")))
            p = ref_dir / f"out_b{batch}_{n}.npy"
            np.save(p, o)
            ref["outputs"][n] = str(p.relative_to(REPO))
        if check is not None:
            check(spec, batch, outs)
        reference[str(batch)] = ref
        out_meta = [(n, str(outs[n].dtype), ["batch"] + list(outs[n].shape[1:])) for n in out_names]
    return reference, out_meta


def io_signature(spec, inferred, out_meta):
    """The manifest's "inputs" and "outputs": the declared inputs and the outputs PyTorch produced,
    each checked against ONNX's own shape inference."""
    name = spec["name"]
    inputs, outputs = [], []
    graph_in = {v.name: v for v in inferred.graph.input}
    for n, dtype, shape in spec["inputs"]:
        t = graph_in[n].type.tensor_type
        assert onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type] == np.dtype(dtype), (name, n)
        inputs.append({"name": n, "dtype": dtype, "shape": ["batch"] + shape})
    graph_out = {v.name: v for v in inferred.graph.output}
    for n, dtype, shape in out_meta:
        t = graph_out[n].type.tensor_type
        assert onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type] == np.dtype(dtype), (name, n)
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        assert dims == shape, (name, n, dims, shape)
        outputs.append({"name": n, "dtype": dtype, "shape": shape})
    return inputs, outputs


def manifest_entry(**fields):
    unknown = set(fields) - set(ENTRY_KEYS)
    assert not unknown, unknown
    return {k: fields[k] for k in ENTRY_KEYS if k in fields}


def export_spec(spec, model, onnx_dir, data_dir, batches, namespace="", example_tag="reference",
                postprocess=None, check=None, fields=None):
    """Everything one spec needs once its module is built, seeded and in eval mode: export to
    onnx_dir/<name>.onnx from a batch-3 example, validation, reference data in data_dir/<name>/ and
    the manifest entry, with `fields` (e.g. kind, params) added. Returns (entry, {path: bytes})
    for the files written, paths relative to the repository."""
    name = spec["name"]
    example = make_inputs(spec, 3, tag=example_tag, namespace=namespace)
    onnx_path = onnx_dir / f"{name}.onnx"
    export_onnx(model, spec, example, onnx_path, postprocess)
    reloaded, inferred = validate_onnx(onnx_path, spec["opset"])
    ref_dir = data_dir / name
    reference, out_meta = write_references(model, spec, ref_dir, batches, namespace, check)
    inputs, outputs = io_signature(spec, inferred, out_meta)
    entry = manifest_entry(name=name, onnx=str(onnx_path.relative_to(REPO)), opset=spec["opset"],
                           inputs=inputs, outputs=outputs, ops=op_types(reloaded), reference=reference,
                           **(fields or {}))
    sizes = {str(p.relative_to(REPO)): p.stat().st_size for p in [onnx_path, *ref_dir.glob("*.npy")]}
    return entry, sizes


def write_manifest(path, generator, batches, entries):
    """Writes the manifest the C++ tests read; returns its size in bytes."""
    manifest = {"generator": generator, "batches": list(batches), "models": entries}
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return path.stat().st_size
