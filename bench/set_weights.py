#!/usr/bin/python3
"""New weights without recompiling, measured: per model, a fresh compile (what a recompile costs;
the cache bypassed), Policy.set_weights of every weight (median, p10, p90), and what updatable
weights cost per call (the C ABI run, median, against a default compile of the same model).

    PYTHONPATH=build/python /usr/bin/python3 bench/set_weights.py [MODEL.onnx ...] [--backend llvm] [--markdown]
"""
import argparse
import os
import tempfile
import time

import numpy as np

import policyc


def percentiles(samples):
    s = sorted(samples)
    return s[len(s) // 2], s[len(s) // 10], s[(9 * len(s)) // 10]


def timed_compile(path, backend, updatable):
    """Seconds of a compile that cannot come from the cache (a fresh cache directory)."""
    saved = os.environ.get("POLICYC_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="policyc-bench-cache-") as cache:
        os.environ["POLICYC_CACHE_DIR"] = cache
        try:
            start = time.perf_counter()
            policy = policyc.compile(path, backend=backend, updatable_weights=updatable)
            seconds = time.perf_counter() - start
            # Loaded from the cache directory that is about to go: load it again from bytes
            # into the caller's cache.
            data = policy.to_bytes()
        finally:
            if saved is None:
                del os.environ["POLICYC_CACHE_DIR"]
            else:
                os.environ["POLICYC_CACHE_DIR"] = saved
    return seconds, policyc.load_bytes(data)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    models = os.path.join(root, "examples", "models")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=[os.path.join(models, m + ".onnx") for m in ("ppo_mlp", "atari_cnn", "impala_cnn")])
    parser.add_argument("--backend", default="llvm", choices=["llvm", "cpp"])
    parser.add_argument("--updates", type=int, default=50, help="timed set_weights calls per model")
    parser.add_argument("--calls", type=int, default=2000, help="timed runs per batch size for the per-call cost")
    parser.add_argument("--markdown", action="store_true", help="a table for docs/performance.md")
    args = parser.parse_args()

    rows = []
    for path in args.models:
        name = os.path.splitext(os.path.basename(path))[0]
        compile_s, policy = timed_compile(path, args.backend, True)
        _, fixed = timed_compile(path, args.backend, False)
        weights = policy.get_weights()
        floats = sum(v.size for v in weights.values())
        rng = np.random.default_rng(0)
        new = [{k: (v + rng.standard_normal(v.shape).astype(np.float32) * 1e-3) for k, v in weights.items()} for _ in range(2)]
        policy.set_weights(new[1])  # warm
        samples = []
        for i in range(args.updates):
            t0 = time.perf_counter()
            policy.set_weights(new[i % 2])
            samples.append((time.perf_counter() - t0) * 1e3)
        update = percentiles(samples)
        # The first call after an update also pays for what the kernels redo lazily (oneDNN layers
        # reorder their copy of the weight): that call at batch 1 against a steady one.
        one = tuple(np.zeros([1 if d is None else d for d in i["shape"]], i["dtype"]) for i in policy.inputs)
        first, steady = [], []
        for i in range(min(args.updates, 20)):
            policy.set_weights(new[i % 2])
            t0 = time.perf_counter()
            policy(*one)
            t1 = time.perf_counter()
            policy(*one)
            t2 = time.perf_counter()
            first.append((t1 - t0) * 1e3)
            steady.append((t2 - t1) * 1e3)
        first_extra = max(percentiles(first)[0] - percentiles(steady)[0], 0.0)
        per_call = {}
        for batch in (1, 64):
            inputs = tuple(np.zeros([batch if d is None else d for d in i["shape"]], i["dtype"]) for i in policy.inputs)
            calls = max(args.calls // batch, 50)
            per_call[batch] = (policy._abi_call_ns(inputs, calls) / 1e3, fixed._abi_call_ns(inputs, calls) / 1e3)
        rows.append((name, floats, compile_s, update, first_extra, per_call))

    if args.markdown:
        print("| model | weights (floats) | recompile s | set_weights ms median (p10-p90) | first call after it, extra ms "
              "| speedup over a recompile | run b1 us updatable / default | run b64 us updatable / default |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, floats, compile_s, (m, lo, hi), extra, pc in rows:
            print("| %s | %d | %.2f | %.3f (%.3f-%.3f) | %.3f | %.0fx | %.1f / %.1f | %.0f / %.0f |"
                  % (name, floats, compile_s, m, lo, hi, extra, compile_s * 1e3 / (m + extra), pc[1][0], pc[1][1], pc[64][0],
                     pc[64][1]))
    else:
        for name, floats, compile_s, (m, lo, hi), extra, pc in rows:
            print("%-12s %9d floats: recompile %.2f s, set_weights %.3f ms (p10 %.3f, p90 %.3f) + %.3f ms in the next call = "
                  "%.0fx faster; run b1 %.1f us (default compile %.1f), b64 %.0f us (%.0f)"
                  % (name, floats, compile_s, m, lo, hi, extra, compile_s * 1e3 / (m + extra), pc[1][0], pc[1][1], pc[64][0],
                     pc[64][1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
