"""policyc: compile small neural-network policies ahead of time and call them on numpy arrays.

    import numpy as np, policyc
    policy = policyc.compile("examples/models/ppo_mlp.onnx")    # or policyc.load("ppo_mlp.so")
    logits, value = policy(np.zeros((1, 17), np.float32))
    policy.run_dict(obs=np.zeros((8, 17), np.float32))           # {"action_dist_inputs": ..., "vf": ...}

Errors: ValueError for inputs that do not match the model (names, dtypes, shapes), RuntimeError
for a model that cannot be compiled (the message names the log and, with debug_dir, the dumps).
"""
import hashlib
import json
import os
import re
import struct
import tempfile

from . import _policyc
from ._policyc import Policy, compile, load  # noqa: F401  (re-exported)

__all__ = ["Policy", "compile", "load", "load_bytes", "from_torch"]

# ---- a compiled policy as bytes: Policy.to_bytes(), policyc.load_bytes(), pickle
#
# The bytes are MAGIC, a 4-byte little-endian length, a JSON header (format, ABI version, name,
# target, the CPU extensions the code may use, signature, threads, the .so's size and SHA-256),
# then the .so itself, then (a policy with updatable weights) the weights as the sender has them
# now — the .so holds those it was compiled with — little-endian float32, each weight's name,
# shape and offset in the header, all of them under one SHA-256. Loading checks all of it before anything runs: a host without the
# instruction set gets an error, never an illegal instruction; the .so goes into the compile
# cache under its hash through a temporary file and a rename, and is hashed again before it is
# loaded, so a half-written or damaged entry is never loaded.

_MAGIC = b"POLICYC-POLICY\x00"
_FORMAT = 1


def _to_bytes(self):
    """The compiled policy as bytes (see policyc.load_bytes): the .so with what it needs to load."""
    with open(self.path, "rb") as f:
        so = f.read()
    header = {
        "format": _FORMAT,
        "abi_version": _policyc.ABI_VERSION,
        "name": self.name,
        "target": self.target,
        # For --target native: this machine's extensions (a policy is pickled where it was compiled).
        "cpu_features": _policyc._target_cpu_features(self.target),
        "inputs": [dict(i, dtype=str(i["dtype"])) for i in self.inputs],
        "outputs": [dict(o, dtype=str(o["dtype"])) for o in self.outputs],
        "threads": self.threads,
        "size": len(so),
        "sha256": hashlib.sha256(so).hexdigest(),
    }
    blob = b""
    if self.weights:
        parts, entries = [], []
        for name, value in self.get_weights().items():
            data = value.astype("<f4").tobytes()
            entries.append({"name": name, "shape": list(value.shape), "offset": sum(len(p) for p in parts), "size": len(data)})
            parts.append(data)
        blob = b"".join(parts)
        header["weights"] = {"entries": entries, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    text = json.dumps(header, sort_keys=True).encode()
    return _MAGIC + struct.pack("<I", len(text)) + text + so + blob


def _parse(data):
    data = bytes(data)
    if not data.startswith(_MAGIC):
        raise ValueError("not a compiled policy (Policy.to_bytes() output): the bytes start with %r" % data[:16])
    if len(data) < len(_MAGIC) + 4:
        raise ValueError("a truncated compiled policy: no header")
    (n,) = struct.unpack_from("<I", data, len(_MAGIC))
    start = len(_MAGIC) + 4
    if start + n > len(data):
        raise ValueError("a truncated compiled policy: the header needs %d bytes, %d are there" % (n, len(data) - start))
    try:
        header = json.loads(data[start:start + n].decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("a damaged compiled policy: its header is not JSON (%s)" % e) from None
    rest = data[start + n:]
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ValueError("a compiled policy of format %r; this policyc reads format %d" %
                         (header.get("format") if isinstance(header, dict) else None, _FORMAT))
    if header.get("abi_version") != _policyc.ABI_VERSION:
        raise ValueError("a compiled policy of ABI version %r; this policyc loads version %d: compile it again with this "
                         "policyc" % (header.get("abi_version"), _policyc.ABI_VERSION))
    size = header.get("size")
    if not isinstance(size, int) or size > len(rest) or hashlib.sha256(rest[:size]).hexdigest() != header.get("sha256"):
        raise ValueError("a damaged compiled policy: its shared object does not match the size and SHA-256 it was sent with")
    so, blob = rest[:size], rest[size:]
    weights = header.get("weights")
    if weights is None and blob:
        raise ValueError("a damaged compiled policy: %d bytes follow its shared object" % len(blob))
    if weights is not None:
        if (not isinstance(weights, dict) or weights.get("size") != len(blob)
                or hashlib.sha256(blob).hexdigest() != weights.get("sha256")):
            raise ValueError("a damaged compiled policy: its weights do not match the size and SHA-256 they were sent with")
    return header, so, blob


def _weights_of(header, blob):
    """{name: float32 array} of the weights that came with the bytes (checked by _parse)."""
    import numpy as np

    out = {}
    for e in header["weights"]["entries"]:
        shape, offset, size = tuple(int(d) for d in e["shape"]), int(e["offset"]), int(e["size"])
        if offset < 0 or size < 0 or offset + size > len(blob) or size != 4 * int(np.prod(shape, dtype=np.int64)):
            raise ValueError("a damaged compiled policy: weight %r lies outside its weights" % (e.get("name"),))
        out[str(e["name"])] = np.frombuffer(blob, "<f4", size // 4, offset).reshape(shape).astype(np.float32)
    return out


def _cached_so(header, so):
    """The .so in the cache under its hash: written whole (temporary file, fsync, rename) unless a
    whole copy is already there."""
    digest = header["sha256"]
    directory = os.path.join(_policyc._cache_dir(), "loaded")
    os.makedirs(directory, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(header.get("name", "model")))[:64] or "model"
    path = os.path.join(directory, "%s-%s.so" % (name, digest[:32]))
    if os.path.exists(path):
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == digest:
                return path
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".incoming-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(so)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    with open(path, "rb") as f:  # what is loaded is what was sent
        if hashlib.sha256(f.read()).hexdigest() != digest:
            raise RuntimeError("the cache entry %s changed while it was written" % path)
    return path


def load_bytes(data, threads=None):
    """A Policy from Policy.to_bytes() output (or a pickle's): checked (format, ABI version, size,
    SHA-256, and that this CPU has every instruction-set extension the code may use), written into
    the compile cache under its hash and loaded. threads: the sender's unless given."""
    header, so, blob = _parse(data)
    have = set(_policyc._host_cpu_features())
    missing = [f for f in header.get("cpu_features", []) if f not in have]
    if missing:
        raise RuntimeError("policy %r was compiled for target %r and may use %s, which this CPU lacks; compile it with "
                           "target='x86-64-v3' (or 'generic') to run it on a mixed fleet" %
                           (header.get("name"), header.get("target"), ", ".join(missing)))
    policy = load(_cached_so(header, so), threads if threads is not None else int(header.get("threads", 1)))
    if "weights" in header:
        policy.set_weights(_weights_of(header, blob))  # the sender's weights now, not those compiled in
    return policy


def _reduce(self):
    return (load_bytes, (self.to_bytes(),))


Policy.to_bytes = _to_bytes
Policy.__reduce__ = _reduce


def from_torch(module, example_inputs, input_names=None, output_names=None, opset=17, **compile_options):
    """Exports a torch.nn.Module with torch.onnx.export (batch dimension 0 dynamic) and compiles it.

    example_inputs: a tensor or a tuple of tensors with the batch first. compile_options go to
    policyc.compile (backend, fuse, mode, target, threads, debug_dir, extern_kernels, tune_batch,
    precision, keep_fp32, row_block_bytes). The
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
