#!/usr/bin/python3
"""Reduced precision on the fixtures and the zoo: each policy's accuracy (`policyc check --precision`
against the fp32 interpreter: mean |diff| against the budget, argmax agreement of discrete heads) and,
for the --speed models, the time per call and the .so's size against fp32, in one process with the
precisions' calls interleaved round by round (docs/precision.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/precision.py [--policyc build/tools/policyc]
        [--precisions bf16-weights,int8-weights] [--speed atari_cnn,impala_cnn,ppo_mlp] [--batches 1,64]
        [--rounds 7] [--calls 300] [--observations 1000] [--only NAME,...] [--out FILE.md]
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def models(only):
    """(name, path) of the fixtures, then of the zoo's policies (examples/zoo/README.md)."""
    out = []
    fixtures = os.path.join(ROOT, "examples", "models")
    for f in sorted(os.listdir(fixtures)):
        if f.endswith(".onnx"):
            out.append((f[:-5], os.path.join(fixtures, f)))
    with open(os.path.join(ROOT, "tests", "data", "zoo", "manifest.json")) as f:
        for m in json.load(f)["models"]:
            out.append((m["name"], os.path.join(ROOT, m["onnx"])))
    return [(n, p) for n, p in out if not only or n in only]


def accuracy(policyc, path, precision, observations):
    """What `policyc check --precision` prints, parsed: layers narrowed, and per output its figures."""
    r = subprocess.run([policyc, "check", path, "--precision", precision, "--batch", str(observations)],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
    layers = re.search(r"(\d+) of (\d+) linear/conv layers narrowed", r.stdout)
    outputs = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s+(\S+)\s+\S+\s+mean \|diff\| (\S+)\s+max \|diff\| (\S+)\s+\(rms (\S+), budget (\S+)\)"
                     r"(?:\s+argmax agreement (\S+)% of (\d+) rows(?: \(95% interval [^)]*\))?)?\s+(PASS|FAIL)", line)
        if m:
            outputs.append({"name": m.group(1), "mean": float(m.group(2)), "max": float(m.group(3)),
                            "rms": float(m.group(4)), "agreement": None if m.group(6) is None else float(m.group(6)),
                            "pass": m.group(8) == "PASS"})
    return {"narrowed": int(layers.group(1)) if layers else 0, "layers": int(layers.group(2)) if layers else 0,
            "outputs": outputs, "pass": r.returncode == 0}


def speed(path, precisions, batches, rounds, calls):
    """Median ns per call (the C ABI run) per (precision, batch), rounds interleaved; .so sizes."""
    import policyc
    compiled = {p: policyc.compile(path, precision=p) for p in precisions}
    sizes = {p: os.path.getsize(c.path) for p, c in compiled.items()}
    rng = np.random.default_rng(0)
    result = {}
    for b in batches:
        inputs = []
        for spec in compiled[precisions[0]].inputs:
            shape = [b if d is None else d for d in spec["shape"]]
            dtype = np.dtype(spec["dtype"])
            if dtype.kind == "f":
                inputs.append(rng.standard_normal(shape).astype(dtype))
            else:
                inputs.append(rng.integers(0, 2 if dtype.kind == "b" else 100, shape).astype(dtype))
        samples = {p: [] for p in precisions}
        for _ in range(rounds):
            for p in precisions:
                samples[p].append(compiled[p]._abi_call_ns(tuple(inputs), calls))
        for p in precisions:
            result[(p, b)] = float(np.median(samples[p]))
    return result, sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policyc", default=os.path.join(ROOT, "build", "tools", "policyc"))
    parser.add_argument("--precisions", default="bf16-weights,int8-weights")
    parser.add_argument("--speed", default="atari_cnn,impala_cnn,ppo_mlp,sb3_nature_cnn,wide_mlp")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--observations", type=int, default=1000)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    precisions = [p for p in args.precisions.split(",") if p]
    only = set(n for n in args.only.split(",") if n)
    lines = []

    def emit(line):
        print(line, flush=True)
        lines.append(line)

    emit("| policy | precision | layers narrowed | output: mean \\|diff\\| / rms, argmax agreement | within budget |")
    emit("|---|---|---|---|---|")
    for name, path in models(only):
        for p in precisions:
            a = accuracy(args.policyc, path, p, args.observations)
            if "error" in a:
                emit("| %s | %s | — | error: %s | — |" % (name, p, a["error"]))
                continue
            figures = []
            for o in a["outputs"]:
                rel = o["mean"] / o["rms"] if o["rms"] > 0 else 0.0
                text = "%s %.2g (%.2f%%)" % (o["name"], o["mean"], rel * 100)
                if o["agreement"] is not None:
                    text += ", %.1f%% agree" % o["agreement"]
                figures.append(text)
            emit("| %s | %s | %d of %d | %s | %s |" % (name, p, a["narrowed"], a["layers"], "; ".join(figures) or "—",
                                                      "yes" if a["pass"] else "**no**"))
    speedy = [(n, p) for n, p in models(set(args.speed.split(",")))]
    if speedy:
        batches = [int(b) for b in args.batches.split(",")]
        emit("")
        emit("| policy | batch | fp32 µs | " + " | ".join("%s µs (×)" % p for p in precisions) + " | .so KiB: fp32 / "
             + " / ".join(precisions) + " |")
        emit("|---|---|---|" + "---|" * len(precisions) + "---|")
        for name, path in speedy:
            t, sizes = speed(path, ["fp32"] + precisions, batches, args.rounds, args.calls)
            for b in batches:
                cells = ["%.1f (%.2f×)" % (t[(p, b)] / 1e3, t[("fp32", b)] / t[(p, b)]) for p in precisions]
                emit("| %s | %d | %.1f | %s | %s |" % (name, b, t[("fp32", b)] / 1e3, " | ".join(cells),
                                                       " / ".join("%d" % (sizes[p] // 1024) for p in ["fp32"] + precisions)))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
