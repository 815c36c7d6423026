"""bench/peers/run.sh's driver: one ONNX file per model through PyTorch eager, TorchScript, ONNX
Runtime and policyc, side by side in one run, with the machine's roofline.

Every peer gets the same inputs and thread count; each is timed the same way (warm-up calls, then
calls timed one by one until both --min-calls and --min-time are reached; median, p10, p90), and
its outputs are checked against PyTorch eager. Prints one table per model and thread count
(batch sizes as rows, peers as columns, policyc's speedup over each) and writes CSV.
"""
import argparse
import csv
import json
import os
import platform
import subprocess
import time
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.helper
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # bench/: progress.py
from onnx_torch import OnnxModule  # noqa: E402
from progress import Progress  # noqa: E402

PEERS = ("eager", "torchscript", "ort", "policyc")
RTOL = ATOL = 1e-4


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def quantiles(us):
    """(median, p10, p90) of per-call microseconds, with policyc bench's rounding of the index."""
    us = sorted(us)
    at = lambda q: us[int(q * (len(us) - 1) + 0.5)]  # noqa: E731
    return at(0.5), at(0.1), at(0.9)


def time_calls(call, args):
    for _ in range(args.warmup):
        call()
    us = []
    start = time.perf_counter()
    while len(us) < args.min_calls or time.perf_counter() - start < args.min_time:
        t0 = time.perf_counter()
        call()
        us.append((time.perf_counter() - t0) * 1e6)
    return us


# ---- models and inputs

NP_DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT64: np.int64}


def model_inputs(path, batch, seed=0):
    """Random inputs for every graph input, dim_param dimensions set to `batch`."""
    g = onnx.load(path).graph
    inits = {i.name for i in g.initializer}
    rng = np.random.default_rng(seed)
    out = []
    for i in g.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [batch if d.dim_param or not d.dim_value else d.dim_value for d in t.shape.dim]
        dtype = NP_DTYPES.get(t.elem_type)
        if dtype is None:
            raise SystemExit(f"peers: {path}: input '{i.name}' has an element type the peers do not generate")
        a = rng.integers(0, 256, dims).astype(dtype) if dtype == np.uint8 else rng.standard_normal(dims).astype(dtype)
        out.append((i.name, a))
    return out


def fusion_model(path, rows=16384, cols=512):
    """The Inductor CPU tutorial's fusion example, (x0 + x1 + x2) * x3 + x4, x1/x3/x4 broadcast rows."""
    h = onnx.helper
    f = onnx.TensorProto.FLOAT
    ins = [h.make_tensor_value_info(n, f, ["batch", cols] if n in ("x0", "x2") else [1, cols]) for n in ("x0", "x1", "x2", "x3", "x4")]
    nodes = [h.make_node("Add", ["x0", "x1"], ["a"]), h.make_node("Add", ["a", "x2"], ["b"]),
             h.make_node("Mul", ["b", "x3"], ["c"]), h.make_node("Add", ["c", "x4"], ["y"])]
    graph = h.make_graph(nodes, "fusion_micro", ins, [h.make_tensor_value_info("y", f, ["batch", cols])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)


def identity_model(path):
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1])
    graph = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), path)


# ---- the peers; each returns {batch: (us list, outputs list)}

def run_torch(path, batches, inputs, threads, args, script, step=None):
    """`step(batch)`, when given, is called as each batch size starts (the progress bar)."""
    torch.set_num_threads(threads)
    module = OnnxModule(path).eval()
    res = {}
    with torch.inference_mode():
        for b in batches:
            if step:
                step(b)
            xs = [torch.from_numpy(a) for _, a in inputs[b]]
            fn = module
            if script:
                with torch.jit.optimized_execution(True):
                    fn = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(module, xs)))
            outs = fn(*xs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            res[b] = (time_calls(lambda: fn(*xs), args), [o.numpy().copy() for o in outs])
    return res


def run_ort(path, batches, inputs, threads, args, work, identity):
    spec = {"model": str(path), "threads": threads, "min_time": args.min_time, "min_calls": args.min_calls,
            "warmup": args.warmup, "identity": str(identity), "points": []}
    dtypes = {np.float32: "float32", np.uint8: "uint8", np.int64: "int64"}
    for b in batches:
        d = Path(tempfile.mkdtemp(dir=work))
        ins = []
        for k, (name, a) in enumerate(inputs[b]):
            f = d / f"in{k}.bin"
            a.tofile(f)
            ins.append({"name": name, "dtype": dtypes[a.dtype.type], "dims": list(a.shape), "file": str(f)})
        spec["points"].append({"batch": b, "inputs": ins, "out_dir": str(d)})
    spec_file = Path(tempfile.mkstemp(dir=work, suffix=".json")[1])
    spec_file.write_text(json.dumps(spec))
    p = subprocess.run(["node", str(HERE / "ort_peer.js"), str(spec_file)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"peers: ONNX Runtime failed on {path}:\n{p.stderr.strip()}")
    r = json.loads(p.stdout)
    np_of = {"float32": np.float32, "uint8": np.uint8, "int64": np.int64}
    res = {}
    for pt in r["points"]:
        outs = [np.fromfile(o["file"], np_of[o["type"]]).reshape(o["dims"]) for o in pt["outputs"].values()]
        res[pt["batch"]] = (pt["us"], outs)
    return res, r.get("identity_us")


def run_policyc(path, batches, inputs, threads, args, work):
    """Timed by `policyc bench` (the C++ loop, no binding); outputs through the Python binding."""
    out_json = Path(tempfile.mkstemp(dir=work, suffix=".json")[1])
    cmd = [args.policyc, "bench", str(path), "--batch", ",".join(map(str, batches)), "--threads", str(threads),
           "--min-time", str(args.min_time), "--min-calls", str(args.min_calls), "--warmup", str(args.warmup),
           "--json", str(out_json)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"peers: {' '.join(cmd)} failed:\n{p.stderr.strip()}")
    bench = json.loads(out_json.read_text())
    import policyc
    policy = policyc.load(bench["so"])
    policy.threads = threads
    res, flops = {}, {}
    for row in bench["rows"]:
        b = row["batch"]
        outs = policy(*[a for _, a in inputs[b]])
        # The bench JSON has quantiles, not samples: three points reproduce them exactly.
        res[b] = ([row["p10_us"], row["median_us"], row["p90_us"]], [np.asarray(o) for o in outs])
        flops[b] = row.get("flops", 0.0)
    return res, flops, bench.get("weight_bytes", 0)


# ---- the roofline

def roofline(args, work):
    f = Path(work) / "roofline.json"
    p = subprocess.run([args.roofline, "--json", str(f)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"peers: {args.roofline} failed:\n{p.stderr.strip()}")
    log(p.stdout.rstrip())
    return json.loads(f.read_text())


def bound_us(roof, flops, data_bytes, peak):
    """max(FLOPs / peak, bytes / bandwidth of the level that holds them), in microseconds."""
    if data_bytes <= roof["l2_bytes"]:
        bw = roof["bw_l2_gbps"]
    elif data_bytes <= roof["l3_bytes"]:
        bw = roof["bw_l3_gbps"]
    else:
        bw = roof["bw_dram_gbps"]
    return max(flops / peak, data_bytes / bw) / 1e3


# ---- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="ONNX files, or 'fusion' (default: the three reference policies and fusion)")
    ap.add_argument("--batch", default="1,4,16,64,256", help="batch sizes (comma-separated)")
    ap.add_argument("--threads", default="1,2", help="thread counts (comma-separated)")
    ap.add_argument("--peers", default=",".join(PEERS), help="which of " + ",".join(PEERS))
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed calls per point (default 1)")
    ap.add_argument("--min-calls", type=int, default=10, help="timed calls per point at least (default 10)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before each point (default 5)")
    ap.add_argument("--csv", default="peers.csv", help="write every point here (default peers.csv)")
    ap.add_argument("--policyc", default=str(REPO / "build/tools/policyc"))
    ap.add_argument("--roofline", default=str(REPO / "build/bench/policyc_roofline"))
    args = ap.parse_args()
    models = args.models or [str(REPO / f"examples/models/{m}.onnx") for m in ("ppo_mlp", "atari_cnn", "impala_cnn")] + ["fusion"]
    batches = [int(b) for b in args.batch.split(",")]
    threads_list = [int(t) for t in args.threads.split(",")]
    peers = args.peers.split(",")
    for p in peers:
        if p not in PEERS:
            raise SystemExit(f"peers: unknown peer '{p}'; choose from {', '.join(PEERS)}")
    if "eager" not in peers:
        raise SystemExit("peers: 'eager' is the reference the others are checked against; keep it in --peers")
    work = tempfile.mkdtemp(prefix="policyc-peers-")
    torch.set_num_interop_threads(1)

    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    log(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; PyTorch {torch.__version__} "
        f"(BLAS {blas}); ONNX Runtime {'onnxruntime-node 1.20.1' if 'ort' in peers else 'not run'}")
    roof = roofline(args, work)
    identity = Path(work) / "identity.onnx"
    identity_model(identity)

    rows, failures = [], []
    # One step per (model, threads, batch, peer); fusion runs one batch size only.
    n_points = sum(1 if m == "fusion" else len(batches) for m in models) * len(threads_list) * len(peers)
    with Progress(n_points, "peers") as bar:
        for model in models:
            name = Path(model).stem
            model_batches = batches
            if model == "fusion":
                name, model = "fusion_micro", str(Path(work) / "fusion_micro.onnx")
                fusion_model(model)
                model_batches = [16384]
            inputs = {b: model_inputs(model, b) for b in model_batches}
            in_bytes = {b: sum(a.nbytes for _, a in inputs[b]) for b in model_batches}
            for t in threads_list:
                threads = f"{t} thread{'s' if t > 1 else ''}"
                bar.clear()
                log(f"{name}, {threads}: " + ", ".join(peers))
                # ONNX Runtime and policyc time every batch size in one subprocess: one step for all.
                step = lambda peer, bs: bar.step(f"{name} batch {','.join(map(str, bs))} {peer}, {threads}", n=len(bs))  # noqa: E731
                results, ort_identity = {}, None
                results["eager"] = run_torch(model, model_batches, inputs, t, args, script=False, step=lambda b: step("eager", [b]))
                if "torchscript" in peers:
                    results["torchscript"] = run_torch(model, model_batches, inputs, t, args, script=True,
                                                       step=lambda b: step("torchscript", [b]))
                if "ort" in peers:
                    step("ort", model_batches)
                    results["ort"], ort_identity = run_ort(model, model_batches, inputs, t, args, work, identity)
                flops, weight_bytes = {}, 0
                if "policyc" in peers:
                    step("policyc", model_batches)
                    results["policyc"], flops, weight_bytes = run_policyc(model, model_batches, inputs, t, args, work)
                bar.clear()
                print(f"\n{name}, {t} thread{'s' if t > 1 else ''}: median µs per call (p10-p90); policyc's speedup over each peer")
                head = f"{'batch':>6} {'roofline':>9}" + "".join(f" {p:>22}" for p in peers)
                if "policyc" in peers:
                    head += "".join(f" {'vs ' + p:>9}" for p in peers if p != "policyc") + f" {'/roofline':>9} {'/roof512':>9}"
                print(head)
                for b in model_batches:
                    ref = results["eager"][b][1]
                    out_bytes = sum(o.nbytes for o in ref)
                    data = weight_bytes + in_bytes[b] + out_bytes
                    bound = bound_us(roof, flops.get(b, 0.0), data, roof["peak_gflops"]) if flops else None
                    bound512 = bound_us(roof, flops.get(b, 0.0), data, roof["peak_avx512_gflops"]) if flops and roof["peak_avx512_gflops"] else None
                    line = f"{b:>6} {bound if bound else float('nan'):>9.1f}"
                    med = {}
                    for p in peers:
                        us, outs = results[p][b]
                        m, p10, p90 = quantiles(us)
                        med[p] = m
                        diff = max(float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))) if o.size else 0.0
                                   for o, r in zip(outs, ref))
                        ok = len(outs) == len(ref) and all(o.shape == r.shape and np.allclose(o, r, rtol=RTOL, atol=ATOL)
                                                           for o, r in zip(outs, ref))
                        if not ok:
                            failures.append(f"{name} batch {b}, {t} threads: {p} differs from eager (max |diff| {diff:.3g})")
                        cell = f"{m:.1f} ({p10:.0f}-{p90:.0f})" + ("" if ok else " MISMATCH")
                        line += f" {cell:>22}"
                        rows.append({"model": name, "threads": t, "batch": b, "peer": p, "median_us": round(m, 3),
                                     "p10_us": round(p10, 3), "p90_us": round(p90, 3), "samples_per_s": round(b * 1e6 / m, 1),
                                     "max_abs_diff": f"{diff:.3g}", "roofline_us": round(bound, 3) if bound else "",
                                     "roofline_avx512_us": round(bound512, 3) if bound512 else ""})
                    if "policyc" in peers:
                        line += "".join(f" {med[p] / med['policyc']:>8.2f}x" for p in peers if p != "policyc")
                        line += f" {med['policyc'] / bound if bound else float('nan'):>8.2f}x"
                        line += f" {med['policyc'] / bound512 if bound512 else float('nan'):>8.2f}x"
                    print(line, flush=True)
                if ort_identity:
                    m, p10, p90 = quantiles(ort_identity)
                    print(f"ONNX Runtime binding's own cost per call (Identity on [1,1]): {m:.1f} µs (p10 {p10:.1f}, p90 {p90:.1f})")
    print(f"\nroofline: peak {roof['peak_gflops']:.1f} GFLOP/s with AVX2 (/roofline), "
          f"{roof['peak_avx512_gflops']:.1f} with AVX-512 (/roof512); read bandwidth L2 {roof['bw_l2_gbps']:.0f}, "
          f"L3 {roof['bw_l3_gbps']:.0f}, DRAM {roof['bw_dram_gbps']:.0f} GB/s; a point's bound is "
          "max(FLOPs / peak, (weights + inputs + outputs) bytes / bandwidth of the level that holds them)")
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.csv}")
    if failures:
        print("\n".join(["", "outputs that differ from PyTorch eager (rtol = atol = 1e-4):"] + failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
