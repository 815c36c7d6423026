"""bench/peers/run.sh's driver: ONNX files through PyTorch eager, TorchScript, ONNX Runtime and
policyc, side by side in one run, with the machine's roofline.

Any ONNX file: every graph input gets random values of the dtype and shape it declares (the first
dimension is the batch; float inputs are normal, uint8 0-255, int8 its range, other integers small
non-negative values, or indices in range where they feed a Gather of a constant; bool inputs fair
coin flips). Every peer gets the same inputs and thread count; each is timed the same way (warm-up
calls, then calls timed one by one until both --min-calls and --min-time are reached; median, p10,
p90), and its outputs are checked against a reference peer (eager, else ONNX Runtime, else
TorchScript): float outputs within rtol = atol = 1e-4, integer and bool outputs exactly.

A peer that cannot run a model is a note and the others still run: eager and TorchScript are
skipped when the translator (onnx_torch.py) lacks one of the model's ops; any other failure of a
peer is a note too, and makes the exit status 1, as outputs that differ do (the CSV is written
all the same).

Prints one table per model and thread count (batch sizes as rows, peers as columns, policyc's
speedup over each) and writes every point as CSV (--csv). With --zoo (every model of
tests/data/zoo/manifest.json) or --markdown, a summary follows: one row per model with each peer's
median and its ratio to policyc's per batch size, and the geometric mean of the ratios; also as
CSV (--summary-csv) and as a Markdown table (--markdown).
"""
import argparse
import csv
import json
import math
import os
import platform
import shlex
import subprocess
import time
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # bench/: progress.py
from onnx_torch import OnnxModule, UnsupportedOp  # noqa: E402
from progress import Progress  # noqa: E402

PEERS = ("eager", "torchscript", "ort", "policyc")
REFERENCE_ORDER = ("eager", "ort", "torchscript", "policyc")  # the first that ran is what the others are checked against
LABELS = {"eager": "eager", "torchscript": "TorchScript", "ort": "ORT", "policyc": "policyc"}
ZOO_MANIFEST = REPO / "tests/data/zoo/manifest.json"
RTOL = ATOL = 1e-4


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def first_line(text):
    """The line of an error worth a one-line note: the first 'Error:' line of a stack trace (Node.js
    prints the throwing source line first), else the first non-empty line."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    for ln in lines:
        if "Error:" in ln or "error:" in ln:
            return ln
    return lines[0] if lines else "(no message)"


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

T = onnx.TensorProto
NP_DTYPES = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.FLOAT16: np.float16, T.BOOL: np.bool_,
             T.UINT8: np.uint8, T.INT8: np.int8, T.UINT16: np.uint16, T.INT16: np.int16,
             T.UINT32: np.uint32, T.INT32: np.int32, T.UINT64: np.uint64, T.INT64: np.int64}
SMALL_INT = 8  # integer inputs of unknown meaning: small non-negative values, valid as most indices and counts


def graph_inputs(g):
    inits = {i.name for i in g.initializer}
    return [i for i in g.input if i.name not in inits]


def fixed_batch(path):
    """The batch size the model fixes (every input's first dimension a number, all the same), or None."""
    firsts = set()
    for i in graph_inputs(onnx.load(path, load_external_data=False).graph):
        dims = i.type.tensor_type.shape.dim
        if not dims or dims[0].dim_param or not dims[0].dim_value:
            return None
        firsts.add(dims[0].dim_value)
    return firsts.pop() if len(firsts) == 1 else None


def index_bounds(g):
    """{input name: n} for integer inputs used as the indices of a Gather of a constant with n rows
    on the gathered axis: values in [0, n) keep the lookup in range."""
    consts = {i.name: tuple(i.dims) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = tuple(n.attribute[0].t.dims)
    out = {}
    for n in g.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[0] in consts:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            shape = consts[n.input[0]]
            if shape and -len(shape) <= axis < len(shape):
                out[n.input[1]] = min(out.get(n.input[1], shape[axis]), shape[axis])
    return out


def model_inputs(path, batch, seed=0):
    """Random inputs for every graph input: the first dimension `batch` (unless the model fixes it),
    any other symbolic dimension `batch` when it names a batch dimension, 1 otherwise."""
    g = onnx.load(path, load_external_data=False).graph
    ins = graph_inputs(g)
    batch_names = {i.type.tensor_type.shape.dim[0].dim_param for i in ins if i.type.tensor_type.shape.dim} - {""}
    bounds = index_bounds(g)
    rng = np.random.default_rng(seed)
    out = []
    for i in ins:
        t = i.type.tensor_type
        dims = []
        for k, d in enumerate(t.shape.dim):
            if d.dim_value:
                dims.append(d.dim_value)
            else:
                dims.append(batch if k == 0 or d.dim_param in batch_names else 1)
        dtype = NP_DTYPES.get(t.elem_type)
        if dtype is None:
            raise SystemExit(f"peers: {path}: input '{i.name}' has element type "
                             f"{T.DataType.Name(t.elem_type)}, which the peers do not generate")
        if dtype == np.bool_:
            a = rng.random(dims) < 0.5
        elif np.issubdtype(dtype, np.floating):
            a = rng.standard_normal(dims).astype(dtype)
        elif dtype in (np.uint8, np.int8):  # pixels, quantised values: the whole range
            info = np.iinfo(dtype)
            a = rng.integers(info.min, info.max + 1, dims).astype(dtype)
        else:
            a = rng.integers(0, max(bounds.get(i.name, SMALL_INT), 1), dims).astype(dtype)
        out.append((i.name, a))
    return out


def output_names(path):
    return [o.name for o in onnx.load(path, load_external_data=False).graph.output]


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


def zoo_models():
    try:
        manifest = json.loads(ZOO_MANIFEST.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"peers: --zoo: cannot read {ZOO_MANIFEST}: {e}")
    return [str(REPO / m["onnx"]) for m in manifest["models"]]


# ---- the peers; each returns {batch: (us list, {output name: array})} for the batch sizes it ran
# and, for the first that failed, a PeerFailure carrying what ran before it.

class PeerFailure(Exception):
    def __init__(self, msg, done=None):
        super().__init__(msg)
        self.done = done or {}


def run_torch(module, names, batches, inputs, threads, args, script, step):
    """`step(batch)` is called as each batch size starts (the progress bar)."""
    torch.set_num_threads(threads)
    res = {}
    with torch.inference_mode():
        for b in batches:
            step(b)
            try:
                xs = [torch.from_numpy(a) for _, a in inputs[b]]
                fn = module
                if script:
                    # The trace holds this batch's shapes as constants (Reshape's target, say): it
                    # is traced per batch size, so the warnings that say so are noise here.
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        with torch.jit.optimized_execution(True):
                            fn = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(module, xs)))
                outs = fn(*xs)
                outs = outs if isinstance(outs, tuple) else (outs,)
                res[b] = (time_calls(lambda: fn(*xs), args), {n: o.numpy().copy() for n, o in zip(names, outs)})
            except Exception as e:
                raise PeerFailure(f"failed at batch {b}: {first_line(e) if str(e) else type(e).__name__}", res) from None
    return res


ORT_TYPES = {np.float32: "float32", np.float64: "float64", np.float16: "float16", np.bool_: "bool",
             np.uint8: "uint8", np.int8: "int8", np.uint16: "uint16", np.int16: "int16",
             np.uint32: "uint32", np.int32: "int32", np.uint64: "uint64", np.int64: "int64"}
NP_OF_ORT = {v: k for k, v in ORT_TYPES.items()}


def run_ort(path, batches, inputs, threads, args, work, identity):
    """Every batch size in one Node.js process; `identity` (a path or None) also times the binding alone."""
    spec = {"model": str(path), "threads": threads, "min_time": args.min_time, "min_calls": args.min_calls,
            "warmup": args.warmup, "points": []}
    if identity:
        spec["identity"] = str(identity)
    for b in batches:
        d = Path(tempfile.mkdtemp(dir=work))
        ins = []
        for k, (name, a) in enumerate(inputs[b]):
            f = d / f"in{k}.bin"
            a.tofile(f)
            ins.append({"name": name, "dtype": ORT_TYPES[a.dtype.type], "dims": list(a.shape), "file": str(f)})
        spec["points"].append({"batch": b, "inputs": ins, "out_dir": str(d)})
    spec_file = Path(tempfile.mkstemp(dir=work, suffix=".json")[1])
    spec_file.write_text(json.dumps(spec))
    p = subprocess.run(["node", str(HERE / "ort_peer.js"), str(spec_file)], capture_output=True, text=True)
    if p.returncode != 0:
        raise PeerFailure(first_line(p.stderr))
    r = json.loads(p.stdout)
    res, errors = {}, []
    for pt in r["points"]:
        if "error" in pt:
            errors.append(f"batch {pt['batch']}: {pt['error']}")
            continue
        outs = {}
        for name, o in pt["outputs"].items():
            dtype = NP_OF_ORT.get(o["type"])
            if dtype is None:
                raise PeerFailure(f"output '{name}' has type {o['type']}", res)
            outs[name] = np.fromfile(o["file"], dtype).reshape(o["dims"])
        res[pt["batch"]] = (pt["us"], outs)
    if errors:
        raise PeerFailure("failed at " + "; ".join(errors), res)
    return res, r.get("identity_us")


def run_policyc(path, batches, inputs, threads, args, work):
    """Timed by `policyc bench` (the C++ loop, no binding); outputs through the Python binding."""
    out_json = Path(tempfile.mkstemp(dir=work, suffix=".json")[1])
    cmd = [args.policyc, "bench", str(path), "--batch", ",".join(map(str, batches)), "--threads", str(threads),
           "--min-time", str(args.min_time), "--min-calls", str(args.min_calls), "--warmup", str(args.warmup),
           "--json", str(out_json)] + shlex.split(args.policyc_flags)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise PeerFailure(first_line(p.stderr or p.stdout))
    bench = json.loads(out_json.read_text())
    import policyc
    policy = policyc.load(bench["so"])
    policy.threads = threads
    res, flops = {}, {}
    for row in bench["rows"]:
        b = row["batch"]
        try:
            outs = policy.run_dict(**dict(inputs[b]))
        except Exception as e:
            raise PeerFailure(f"the binding failed at batch {b}: {first_line(e)}", res) from None
        # The bench JSON has quantiles, not samples: three points reproduce them exactly.
        res[b] = ([row["p10_us"], row["median_us"], row["p90_us"]], {n: np.asarray(o) for n, o in outs.items()})
        flops[b] = row.get("flops", 0.0)
    return res, flops, bench.get("weight_bytes", 0)


# ---- checking outputs

def compare(outs, ref, names):
    """(max |diff| over float outputs, [what differs, one phrase per output]) of one peer's outputs
    against the reference's, output by output in the graph's order."""
    worst, problems = 0.0, []
    for name in names:
        if name not in outs or name not in ref:
            problems.append(f"output '{name}' missing")
            continue
        o, r = np.asarray(outs[name]), np.asarray(ref[name])
        if o.shape != r.shape:
            problems.append(f"output '{name}' has shape {list(o.shape)}, not {list(r.shape)}")
            worst = math.inf
            continue
        if o.size == 0:
            continue
        exact = not (np.issubdtype(o.dtype, np.floating) and np.issubdtype(r.dtype, np.floating))
        if exact:  # integer or bool outputs (greedy actions, masks): every element equal
            bad = int(np.count_nonzero(o != r))
            if bad:
                problems.append(f"output '{name}' differs in {bad} of {o.size} elements (exact)")
            continue
        diff = np.abs(o.astype(np.float64) - r.astype(np.float64))
        finite = np.isfinite(diff)
        worst = max(worst, float(diff[finite].max()) if finite.any() else 0.0)
        if not np.allclose(o, r, rtol=RTOL, atol=ATOL, equal_nan=True):
            bad = int(np.count_nonzero(~np.isclose(o, r, rtol=RTOL, atol=ATOL, equal_nan=True)))
            problems.append(f"output '{name}' differs in {bad} of {o.size} elements "
                            f"(max |diff| {float(diff[finite].max()) if finite.any() else math.nan:.3g})")
    return worst, problems


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


# ---- the summary across models

def fmt_us(v):
    return "" if v is None else f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(medians, models, peers, batches, threads_list):
    """Rows of the summary: per model (and thread count), per batch size every peer's median and
    its ratio to policyc's; then per thread count the geometric mean of each ratio over the models
    that have both figures. Returns (columns [(key, heading)], rows [dict], geometric-mean rows)."""
    others = [p for p in peers if p != "policyc"]
    ratio = "policyc" in peers
    cols = []
    for b in batches:
        for p in ([p for p in peers if p == "policyc"] + others):
            cols.append((("us", p, b), f"{LABELS[p]} µs (batch {b})"))
            if ratio and p != "policyc":
                cols.append((("ratio", p, b), f"{LABELS[p]} / policyc (batch {b})"))
    rows, means = [], []
    for t in threads_list:
        ratios = {}
        for name in models:
            row = {"model": name, "threads": t}
            for b in batches:
                mine = medians.get((name, t, b, "policyc"))
                for p in peers:
                    m = medians.get((name, t, b, p))
                    row[("us", p, b)] = m
                    if ratio and p != "policyc":
                        r = m / mine if m and mine else None
                        row[("ratio", p, b)] = r
                        if r:
                            ratios.setdefault((p, b), []).append(r)
            rows.append(row)
        if ratio:
            mean = {"model": "geometric mean", "threads": t}
            for (p, b), rs in ratios.items():
                mean[("ratio", p, b)] = geomean(rs)
                mean[("n", p, b)] = len(rs)
            means.append(mean)
    return cols, rows, means


def print_summary(cols, rows, means, models, threads_list):
    many = len(threads_list) > 1
    width = max([len("geometric mean")] + [len(m) for m in models])
    print("\nsummary: median µs per call" + ("; X / policyc above 1: policyc faster" if means else ""))
    head = f"{'model':<{width}}" + (f" {'threads':>7}" if many else "")
    keys = [k for k, _ in cols]
    heads = [h.replace(" µs", "").replace(" (batch ", " b").replace(")", "") for _, h in cols]
    widths = [max(len(h), 8) for h in heads]
    print(head + "".join(f" {h:>{w}}" for h, w in zip(heads, widths)))
    for row in rows + means:
        line = f"{row['model']:<{width}}" + (f" {row['threads']:>7}" if many else "")
        for k, w in zip(keys, widths):
            v = row.get(k)
            cell = "-" if v is None and row["model"] != "geometric mean" else "" if v is None else \
                f"{v:.2f}x" if k[0] == "ratio" else fmt_us(v)
            line += f" {cell:>{w}}"
        print(line)
    for mean in means:
        short = sorted({f"{mean[k]} of {len(models)}" for k in mean if k[0] == "n" and mean[k] < len(models)})
        if short:
            print(f"(geometric means over the models with both figures: {', '.join(short)})")


def write_summary_csv(path, cols, rows, means, many):
    keys = [k for k, _ in cols]
    heads = [f"{k[1]}_median_us_b{k[2]}" if k[0] == "us" else f"{k[1]}_over_policyc_b{k[2]}" for k in keys]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["model"] + (["threads"] if many else []) + heads)
        for row in rows + means:
            cells = []
            for k in keys:
                v = row.get(k)
                cells.append("" if v is None else f"{v:.4f}" if k[0] == "ratio" else f"{v:.3f}")
            w.writerow([row["model"]] + ([row["threads"]] if many else []) + cells)


def write_markdown(path, cols, rows, means, many, args, peers):
    keys = [k for k, _ in cols]
    lines = []
    others = [LABELS[p] for p in peers if p != "policyc"]
    ts = sorted({r["threads"] for r in rows})
    what = (f"Median µs per call, {' and '.join(map(str, ts))} thread{'s' if ts != [1] else ''} "
            f"(bench/peers/run.sh --min-time {args.min_time:g})")
    if "policyc" in peers and others:
        what += f"; {', '.join(f'{o} / policyc' for o in others)} above 1: policyc faster"
    lines.append(what + ".")
    lines.append("")
    lines.append("| model |" + (" threads |" if many else "") + "".join(f" {h} |" for _, h in cols))
    lines.append("| --- |" + (" ---: |" if many else "") + " ---: |" * len(cols))
    for row in rows:
        cells = []
        for k in keys:
            v = row.get(k)
            cells.append("—" if v is None else f"{v:.2f}×" if k[0] == "ratio" else fmt_us(v))
        lines.append(f"| `{row['model']}` |" + (f" {row['threads']} |" if many else "") + "".join(f" {c} |" for c in cells))
    n_models = len({r["model"] for r in rows})
    for mean in means:
        cells = []
        for k in keys:
            v = mean.get(k)
            n = mean.get(("n", k[1], k[2]), 0)
            cells.append("" if k[0] != "ratio" or v is None else
                         f"**{v:.2f}×**" + (f" ({n} of {n_models})" if n < n_models else ""))
        lines.append("| **geometric mean** |" + (f" {mean['threads']} |" if many else "") + "".join(f" {c} |" for c in cells))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="ONNX files, or 'fusion' (default: the three reference policies and fusion)")
    ap.add_argument("--zoo", action="store_true", help=f"every model of {ZOO_MANIFEST.relative_to(REPO)} (after the files given)")
    ap.add_argument("--batch", default="1,4,16,64,256", help="batch sizes (comma-separated)")
    ap.add_argument("--threads", default="1,2", help="thread counts (comma-separated)")
    ap.add_argument("--peers", default=",".join(PEERS), help="any of " + ",".join(PEERS) + " (comma-separated)")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed calls per point (default 1)")
    ap.add_argument("--min-calls", type=int, default=10, help="timed calls per point at least (default 10)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before each point (default 5)")
    ap.add_argument("--csv", default="peers.csv", help="write every point here (default peers.csv)")
    ap.add_argument("--markdown", help="write the summary across models here as a Markdown table (implies the summary)")
    ap.add_argument("--summary-csv", help="write the summary here (default: beside --csv, NAME_summary.csv, when there is a summary)")
    ap.add_argument("--policyc", default=str(REPO / "build/tools/policyc"))
    ap.add_argument("--policyc-flags", default="",
                    help="more options of `policyc bench`, one string (e.g. '--target x86-64-v3'): what policyc's "
                         "column measures")
    ap.add_argument("--roofline", default=str(REPO / "build/bench/policyc_roofline"))
    args = ap.parse_args()
    models = list(args.models)
    if args.zoo:
        models += zoo_models()
    if not models:
        models = [str(REPO / f"examples/models/{m}.onnx") for m in ("ppo_mlp", "atari_cnn", "impala_cnn")] + ["fusion"]
    try:
        batches = [int(b) for b in args.batch.split(",")]
        threads_list = [int(t) for t in args.threads.split(",")]
    except ValueError:
        raise SystemExit("peers: --batch and --threads are comma-separated integers")
    peers = []
    for p in args.peers.split(","):
        p = p.strip()
        if p not in PEERS:
            raise SystemExit(f"peers: unknown peer '{p}'; choose from {', '.join(PEERS)}")
        if p not in peers:
            peers.append(p)
    peers = [p for p in PEERS if p in peers]  # tables and the CSV in one order whatever the option's
    want_summary = args.zoo or bool(args.markdown)
    work = tempfile.mkdtemp(prefix="policyc-peers-")
    torch.set_num_interop_threads(1)

    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    log(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; PyTorch {torch.__version__} "
        f"(BLAS {blas}); ONNX Runtime {'onnxruntime-node 1.20.1' if 'ort' in peers else 'not run'}; "
        f"peers {', '.join(peers)}")
    roof = roofline(args, work)
    identity = Path(work) / "identity.onnx"
    identity_model(identity)

    rows, mismatches, failures = [], [], []
    medians, names_run = {}, []  # (model, threads, batch, peer) -> median µs, for the summary
    identity_done = set()  # thread counts whose ORT binding cost is printed (once each)
    # One step per (model, threads, batch, peer); fusion runs one batch size only.
    n_points = sum(1 if m == "fusion" else len(batches) for m in models) * len(threads_list) * len(peers)
    with Progress(n_points, "peers") as bar:
        def note(msg, failure=True):
            bar.clear()
            log(f"note: {msg}")
            if failure:
                failures.append(msg)

        for model in models:
            name = Path(model).stem
            model_batches = batches
            if model == "fusion":
                name, model = "fusion_micro", str(Path(work) / "fusion_micro.onnx")
                fusion_model(model)
                model_batches = [16384]
            n_steps = len(model_batches) * len(threads_list) * len(peers)
            try:
                fixed = fixed_batch(model)
                if fixed is not None and model_batches != [fixed]:
                    note(f"{name}: the model fixes its batch at {fixed}: only that batch size runs", failure=False)
                    model_batches = [fixed]
                out_names = output_names(model)
                inputs = {b: model_inputs(model, b) for b in model_batches}
            except (Exception, SystemExit) as e:
                note(f"{name}: skipped: {first_line(e.code if isinstance(e, SystemExit) else e).removeprefix('peers: ')}")
                bar.step(f"{name} skipped", n=n_steps)
                continue
            names_run.append(name)
            in_bytes = {b: sum(a.nbytes for _, a in inputs[b]) for b in model_batches}
            module = None
            torch_peers = ", ".join(p for p in ("eager", "torchscript") if p in peers)
            if torch_peers:
                try:
                    module = OnnxModule(model).eval()
                except UnsupportedOp as e:
                    missing = e.ops or ["?"]
                    note(f"{name}: {torch_peers}: skipped: the translator has no ONNX op"
                         f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}", failure=False)
                except Exception as e:
                    note(f"{name}: {torch_peers}: the translator failed: {first_line(e)}")
                for in_name, a in inputs[model_batches[0]] if module is not None else ():
                    try:
                        torch.from_numpy(a[:0])
                    except TypeError:
                        note(f"{name}: {torch_peers}: skipped: PyTorch has no dtype {a.dtype} (input '{in_name}')",
                             failure=False)
                        module = None
                        break
            for t in threads_list:
                threads = f"{t} thread{'s' if t > 1 else ''}"
                bar.clear()
                log(f"{name}, {threads}: " + ", ".join(peers))

                def step(peer, bs):
                    bar.step(f"{name} batch {','.join(map(str, bs))} {peer}, {threads}", n=len(bs))

                results, ort_identity, flops, weight_bytes = {}, None, {}, 0
                for peer in peers:
                    stepped = []  # batch sizes whose steps were taken, so that a failure steps the rest

                    def step_one(b, peer=peer, stepped=stepped):
                        stepped.append(b)
                        step(peer, [b])

                    try:
                        if peer in ("eager", "torchscript"):
                            if module is None:
                                raise PeerFailure("skipped")
                            results[peer] = run_torch(module, out_names, model_batches, inputs, t, args,
                                                      script=peer == "torchscript", step=step_one)
                        elif peer == "ort":
                            step(peer, model_batches)
                            stepped += model_batches
                            results[peer], ort_identity = run_ort(model, model_batches, inputs, t, args, work,
                                                                  identity if t not in identity_done else None)
                        else:
                            step(peer, model_batches)
                            stepped += model_batches
                            results[peer], flops, weight_bytes = run_policyc(model, model_batches, inputs, t, args, work)
                    except PeerFailure as e:
                        if e.done:
                            results[peer] = e.done
                        if str(e) != "skipped":  # tools' messages that name themselves are not prefixed twice
                            note(f"{name}, {threads}: " + (str(e) if str(e).startswith(f"{peer}: ") else f"{peer}: {e}"))
                    except Exception as e:  # a bug of this script's or a tool's odd output: one line still
                        note(f"{name}, {threads}: {peer}: {type(e).__name__}: {first_line(e)}")
                    rest = [b for b in model_batches if b not in stepped]
                    if rest:
                        bar.step(f"{name} batch {','.join(map(str, rest))} {peer} skipped, {threads}", n=len(rest))
                bar.clear()
                ran = [p for p in peers if p in results and results[p]]
                print(f"\n{name}, {threads}: median µs per call (p10-p90)"
                      + ("; policyc's speedup over each peer" if "policyc" in peers and len(peers) > 1 else ""))
                if not ran:
                    print("(no peer ran)")
                    continue
                head = f"{'batch':>6} {'roofline':>9}" + "".join(f" {p:>22}" for p in peers)
                if "policyc" in peers:
                    head += "".join(f" {'vs ' + p:>9}" for p in peers if p != "policyc") + f" {'/roofline':>9} {'/roof512':>9}"
                print(head)
                refs_used = set()
                for b in model_batches:
                    # the reference of this batch size: the first peer in REFERENCE_ORDER that has it
                    ref_peer = next((p for p in REFERENCE_ORDER if b in results.get(p, {})), None)
                    ref = results[ref_peer][b][1] if ref_peer else None
                    refs_used.add(ref_peer)
                    out_bytes = sum(np.asarray(o).nbytes for o in ref.values()) if ref else 0
                    data = weight_bytes + in_bytes[b] + out_bytes
                    bound = bound_us(roof, flops.get(b, 0.0), data, roof["peak_gflops"]) if flops else None
                    bound512 = bound_us(roof, flops.get(b, 0.0), data, roof["peak_avx512_gflops"]) if flops and roof["peak_avx512_gflops"] else None
                    line = f"{b:>6} {bound:>9.1f}" if bound else f"{b:>6} {'-':>9}"
                    med = {}
                    for p in peers:
                        if p not in results or b not in results[p]:
                            line += f" {'-':>22}"
                            continue
                        us, outs = results[p][b]
                        m, p10, p90 = quantiles(us)
                        med[p] = m
                        medians[(name, t, b, p)] = m
                        diff, problems = (0.0, []) if ref is None or p == ref_peer else compare(outs, ref, out_names)
                        for what in problems:
                            mismatches.append(f"{name} batch {b}, {threads}: {p} against {ref_peer}: {what}")
                        cell = f"{m:.1f} ({p10:.0f}-{p90:.0f})" + (" MISMATCH" if problems else "")
                        line += f" {cell:>22}"
                        rows.append({"model": name, "threads": t, "batch": b, "peer": p, "median_us": round(m, 3),
                                     "p10_us": round(p10, 3), "p90_us": round(p90, 3), "samples_per_s": round(b * 1e6 / m, 1),
                                     "max_abs_diff": f"{diff:.3g}", "roofline_us": round(bound, 3) if bound else "",
                                     "roofline_avx512_us": round(bound512, 3) if bound512 else ""})
                    if "policyc" in peers:
                        mine = med.get("policyc")
                        line += "".join(f" {med[p] / mine:>8.2f}x" if mine and p in med else f" {'-':>9}"
                                        for p in peers if p != "policyc")
                        line += f" {mine / bound:>8.2f}x" if mine and bound else f" {'-':>9}"
                        line += f" {mine / bound512:>8.2f}x" if mine and bound512 else f" {'-':>9}"
                    print(line, flush=True)
                if refs_used - {"eager", None} and len(ran) > 1:
                    print(f"(outputs checked against {', '.join(sorted(refs_used - {None}))})")
                if ort_identity:
                    identity_done.add(t)
                    m, p10, p90 = quantiles(ort_identity)
                    print(f"ONNX Runtime binding's own cost per call (Identity on [1,1]), {threads}: "
                          f"{m:.1f} µs (p10 {p10:.1f}, p90 {p90:.1f})")
    if want_summary and names_run:
        cols, srows, means = summary(medians, names_run, peers, batches, threads_list)
        many = len(threads_list) > 1
        print_summary(cols, srows, means, names_run, threads_list)
        summary_csv = args.summary_csv or str(Path(args.csv).with_name(Path(args.csv).stem + "_summary.csv"))
        write_summary_csv(summary_csv, cols, srows, means, many)
        print(f"wrote {summary_csv}")
        if args.markdown:
            write_markdown(args.markdown, cols, srows, means, many, args, peers)
            print(f"wrote {args.markdown}")
    print(f"\nroofline: peak {roof['peak_gflops']:.1f} GFLOP/s with AVX2 (/roofline), "
          f"{roof['peak_avx512_gflops']:.1f} with AVX-512 (/roof512); read bandwidth L2 {roof['bw_l2_gbps']:.0f}, "
          f"L3 {roof['bw_l3_gbps']:.0f}, DRAM {roof['bw_dram_gbps']:.0f} GB/s; a point's bound is "
          "max(FLOPs / peak, (weights + inputs + outputs) bytes / bandwidth of the level that holds them)")
    if rows:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.csv}")
    status = 0
    if mismatches:
        print("\n".join(["", f"outputs that differ (float: rtol = atol = {RTOL:g}; integer and bool: exactly):"]
                        + mismatches), file=sys.stderr)
        status = 1
    if failures:
        print(f"\n{len(failures)} peer run{'s' if len(failures) > 1 else ''} failed (the notes above)", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
