#!/usr/bin/env python3
"""Runs compiled policies (.so files) through their C ABI with ctypes and numpy alone, no policyc
install: for a machine the models were built for but policyc does not run on (a rollout node, a
CPU with AVX512_BF16 for `--target x86-64-v4-bf16`). Per model: its outputs against a reference
(.npz from `--save`, an ONNX file run by ONNX Runtime in fp32, or another .so), and the median time
per call with the models' calls interleaved round by round.

    bench/so_run.py A.so [B.so ...] [--onnx MODEL.onnx] [--ref A.so] [--inputs IN.npz] [--expect OUT.npz]
        [--batch 1,64] [--threads 1] [--rounds 7] [--calls 200] [--seed 0] [--save-inputs IN.npz]

Accuracy lines give, per output, the mean and max |diff| against the reference and the mean |diff|
as a percentage of the reference's RMS (policyc check --precision's budget: 5% bf16, 10% int8),
argmax agreement for 2-D float outputs; --expect with --tolerance checks max |diff| <= atol +
rtol |want| and exits 1 when it does not hold.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np

DTYPES = {0: np.float32, 1: np.float64, 2: np.int32, 3: np.int64, 4: np.uint8, 5: np.int8, 6: np.bool_}


class TensorDesc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64))]


RUN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_int32)
WORKSPACE = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_int64)


class ModelStruct(ctypes.Structure):
    # policyc_model (runtime/include/policyc/runtime/policyc_model.h), up to the precision field.
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32), ("name", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("num_inputs", ctypes.c_int32), ("inputs", ctypes.POINTER(TensorDesc)),
                ("num_outputs", ctypes.c_int32), ("outputs", ctypes.POINTER(TensorDesc)), ("workspace_bytes", WORKSPACE),
                ("run", RUN), ("source_hash", ctypes.c_char_p), ("num_weights", ctypes.c_int32),
                ("weights", ctypes.c_void_p), ("set_weights", ctypes.c_void_p), ("get_weights", ctypes.c_void_p),
                ("precision", ctypes.c_char_p)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("nodes", ctypes.c_char_p), ("kind", ctypes.c_char_p),
                ("flops_static", ctypes.c_double), ("flops_per_row", ctypes.c_double),
                ("bytes_static", ctypes.c_double), ("bytes_per_row", ctypes.c_double)]


class ProfileStruct(ctypes.Structure):
    # policyc_profile: per-kernel totals of a model compiled with --profile.
    _fields_ = [("num_kernels", ctypes.c_int32), ("instrumented", ctypes.c_int32), ("kernels", ctypes.POINTER(KernelInfo)),
                ("weight_bytes", ctypes.c_int64), ("kernel_ns", ctypes.POINTER(ctypes.c_uint64)),
                ("kernel_calls", ctypes.POINTER(ctypes.c_uint64)), ("trace", ctypes.c_void_p), ("trace_capacity", ctypes.c_int64),
                ("trace_count", ctypes.c_void_p), ("reset", ctypes.CFUNCTYPE(None))]


class Model:
    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(os.path.abspath(path))
        fn = self.lib.policyc_model_descriptor
        fn.restype = ctypes.POINTER(ModelStruct)
        self.m = fn().contents
        size = self.m.struct_size
        self.precision = self.m.precision.decode() if size >= ctypes.sizeof(ModelStruct) else "fp32"
        self.target = self.m.target.decode()

        def descs(ptr, n):
            return [(ptr[i].name.decode(), DTYPES[ptr[i].dtype], [ptr[i].shape[d] for d in range(ptr[i].rank)]) for i in range(n)]

        self.inputs = descs(self.m.inputs, self.m.num_inputs)
        self.outputs = descs(self.m.outputs, self.m.num_outputs)
        self._ws = {}
        fn = self.lib.policyc_profile_data
        fn.restype = ctypes.POINTER(ProfileStruct)
        self.profile = fn().contents

    def kernel_times(self, top):
        """The `top` kernels by time: (µs per call, name, kind) since the last reset."""
        p = self.profile
        rows = [(p.kernel_ns[i] / max(1, p.kernel_calls[i]) / 1e3, p.kernels[i].name.decode(), p.kernels[i].kind.decode())
                for i in range(p.num_kernels)]
        return sorted(rows, reverse=True)[:top]

    def run(self, feeds, batch, threads=1):
        ins = [np.ascontiguousarray(feeds[name], dtype=dt) for name, dt, _ in self.inputs]
        outs = [np.empty([batch if d == -1 else d for d in shape], dtype=dt) for _, dt, shape in self.outputs]
        if batch not in self._ws:
            n = self.m.workspace_bytes(batch)
            raw = np.empty(n + 64, dtype=np.uint8)
            self._ws[batch] = (raw, raw.ctypes.data + (-raw.ctypes.data) % 64)
        ip = (ctypes.c_void_p * len(ins))(*[a.ctypes.data for a in ins])
        op = (ctypes.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
        ws = self._ws[batch]
        # The call keeps the arrays its pointers point into alive.
        self._call = lambda keep=(ins, outs, ws): self.m.run(ip, op, batch, keep[2][1], threads)
        rc = self._call()
        if rc != 0:
            raise RuntimeError(f"{self.path}: run returned {rc}")
        return outs


def random_inputs(model, batch, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dt, shape in model.inputs:
        shape = [batch if d == -1 else d for d in shape]
        if dt == np.uint8:
            feeds[name] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        elif np.issubdtype(dt, np.integer):
            feeds[name] = rng.integers(0, 4, size=shape).astype(dt)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dt)
    return feeds


def compare(name, got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    d = np.abs(got - want)
    rms = float(np.sqrt(np.mean(want ** 2))) or 1.0
    line = f"    {name:<14} mean |diff| {d.mean():.3g}  max |diff| {d.max():.3g}  ({100 * d.mean() / rms:.2f}% of rms {rms:.3g})"
    if want.ndim == 2 and want.shape[1] > 1:
        agree = float(np.mean(np.argmax(got, axis=1) == np.argmax(want, axis=1)))
        line += f"  argmax agreement {100 * agree:.1f}%"
    return line, d, want


def timed(fns, rounds, calls):
    """Median µs per call of each fn, the fns interleaved round by round (p10, p90 of the rounds)."""
    times = [[] for _ in fns]
    for f in fns:
        for _ in range(max(3, calls // 10)):
            f()
    for _ in range(rounds):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            times[i].append((time.perf_counter() - t0) / calls * 1e6)
    return [(statistics.median(t), np.percentile(t, 10), np.percentile(t, 90)) for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--onnx", help="the model file: ONNX Runtime (fp32) is the reference and a peer in the timings")
    ap.add_argument("--ref", help="a .so whose outputs are the reference")
    ap.add_argument("--inputs", help=".npz of the inputs (else random, --seed)")
    ap.add_argument("--expect", help=".npz of the expected outputs (by output name)")
    ap.add_argument("--tolerance", default="1e-5,1e-5", help="rtol,atol for --expect")
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args()

    models = [Model(p) for p in args.models]
    ref = Model(args.ref) if args.ref else None
    ort = None
    if args.onnx:
        try:
            import onnxruntime as ortlib
            so = ortlib.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            ort = ortlib.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"])
        except ImportError:
            print("note: onnxruntime is not installed here: no ONNX Runtime reference or timing")
    ok = True
    rtol, atol = (float(v) for v in args.tolerance.split(","))
    for batch in [int(b) for b in args.batch.split(",")]:
        feeds = dict(np.load(args.inputs)) if args.inputs else random_inputs(models[0], batch, args.seed)
        batch = next(iter(feeds.values())).shape[0] if args.inputs else batch
        print(f"batch {batch}, {args.threads} thread(s)")
        want = None
        if args.expect:
            want = dict(np.load(args.expect))
        elif ref:
            want = dict(zip([o[0] for o in ref.outputs], ref.run(feeds, batch, args.threads)))
        elif ort:
            names = [o.name for o in ort.get_outputs()]
            want = dict(zip(names, ort.run(None, {i.name: feeds[i.name] for i in ort.get_inputs()})))
        fns, labels = [], []
        for m in models:
            outs = m.run(feeds, batch, args.threads)
            print(f"  {os.path.basename(m.path)}  (target {m.target}, precision {m.precision})")
            if want is not None:
                for (name, _, _), got in zip(m.outputs, outs):
                    if name not in want:
                        continue
                    line, d, w = compare(name, got, want[name])
                    if args.expect:
                        held = bool(np.all(d <= atol + rtol * np.abs(w)))
                        line += "  within tolerance" if held else "  OUTSIDE TOLERANCE"
                        ok = ok and held
                    print(line)
            fns.append(m._call)
            labels.append(os.path.basename(m.path))
        if ort:
            ort_feeds = {i.name: feeds[i.name] for i in ort.get_inputs()}
            fns.append(lambda: ort.run(None, ort_feeds))
            labels.append("onnxruntime " + __import__("onnxruntime").__version__)
        if not args.no_time:
            for m in models:
                if m.profile.instrumented:
                    m.profile.reset()
            for label, (med, p10, p90) in zip(labels, timed(fns, args.rounds, args.calls)):
                print(f"  time {label:<40} median {med:9.1f} us  p10 {p10:9.1f}  p90 {p90:9.1f}")
            for m in models:
                if m.profile.instrumented:
                    print(f"  kernels of {os.path.basename(m.path)} (mean us per call, compiled with --profile):")
                    for us, name, kind in m.kernel_times(12):
                        print(f"    {us:9.1f}  {kind:<10} {name}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
