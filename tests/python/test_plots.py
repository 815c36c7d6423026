"""Tests of bench/plot.py, bench/progress.py and bench/peers/torch_baseline.py (a plain script: exit 0
when every check passes, 1 with the failing check's message otherwise).

    /usr/bin/python3 tests/python/test_plots.py [POLICYC]

plot.py runs on synthetic inputs shaped like what their writers produce (bench/peers/peers.py's
CSV; `policyc bench --json`, with and without a baseline, and with --compare-backends), then on its
error paths. With the policyc CLI (POLICYC, else build/tools/policyc) and examples/models/ppo_mlp.onnx
present, torch_baseline.py times PyTorch on the model and `policyc bench --baseline` reads its CSV.
"""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"
PLOT = REPO / "bench/plot.py"
PEERS = REPO / "bench/peers/peers.py"
BASELINE = REPO / "bench/peers/torch_baseline.py"
MODEL = REPO / "examples/models/ppo_mlp.onnx"
POLICYC = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("POLICYC_CLI", REPO / "build/tools/policyc"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}"

# peers.py's CSV columns, in its order (the rows dict it hands csv.DictWriter)
PEERS_COLUMNS = ["model", "threads", "batch", "peer", "median_us", "p10_us", "p90_us", "samples_per_s",
                 "max_abs_diff", "roofline_us", "roofline_avx512_us"]
PEER_NAMES = ["eager", "torchscript", "ort", "policyc"]

checks = 0


class Failure(Exception):
    pass


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        raise Failure(msg)


def run(args, timeout=300, env=None):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


def plot(*args):
    return run([PY, PLOT, *args])


def ok(p, what):
    check(p.returncode == 0, f"{what}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}")


def svg_ids(path):
    """{id: element} of an SVG file, which must parse as XML with an <svg> root."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise Failure(f"{path} is not well-formed XML: {e}") from None
    check(root.tag == SVG + "svg", f"{path}: root element is {root.tag}, not <svg>")
    return {e.get("id"): e for e in root.iter() if e.get("id")}


def has_path(element):
    """Whether the element draws something: a <path> (lines, bands, bars) or a <use> of a marker path."""
    return any(e.tag in (SVG + "path", SVG + "use") for e in element.iter())


def one_error_line(p, what):
    check(p.returncode == 2, f"{what}: exit {p.returncode}, expected 2 (stderr: {p.stderr.strip()})")
    lines = p.stderr.strip().splitlines()
    check(len(lines) == 1 and lines[0].startswith("plot.py: error: "),
          f"{what}: expected one line 'plot.py: error: ...' on stderr, got {p.stderr!r}")


def leftovers(d):
    return sorted(f.name for f in Path(d).iterdir()) if Path(d).exists() else []


# ---- synthetic inputs

def peers_rows():
    """Two models ('ppo mlp' has a space: its file names must not), two thread counts; policyc
    slower than ort at one point (a speed-up below 1)."""
    rows = []
    for model, batches in (("ppo mlp", [1, 4, 16]), ("fusion_micro", [16384])):
        for t in (1, 2):
            for b in batches:
                for k, peer in enumerate(PEER_NAMES):
                    med = {"eager": 60.0, "torchscript": 45.0, "ort": 8.0, "policyc": 3.0}[peer] * (1 + b / 8) / t
                    if model == "ppo mlp" and t == 2 and b == 16 and peer == "ort":
                        med = 0.5 * 3.0 * (1 + b / 8) / t
                    rows.append({"model": model, "threads": t, "batch": b, "peer": peer, "median_us": round(med, 3),
                                 "p10_us": round(0.95 * med, 3), "p90_us": round(1.2 * med, 3),
                                 "samples_per_s": round(b * 1e6 / med, 1), "max_abs_diff": "0",
                                 "roofline_us": round(1.0 + b / 16, 3), "roofline_avx512_us": ""})
    return rows


def write_csv(path, rows, columns=PEERS_COLUMNS):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def bench_row(batch, threads, median, baseline=None):
    """A row as tools/bench.cpp's rowJson writes it (flops: a model with a profile table)."""
    row = {"batch": batch, "threads": threads, "calls": 1000, "median_us": median, "p10_us": median * 0.97,
           "p90_us": median * 1.1, "mean_us": median * 1.02, "samples_per_s": batch * 1e6 / median,
           "flops": 287232.0 * batch}
    if baseline is not None:
        row["baseline_samples_per_s"] = baseline
    return row


def bench_json(baseline):
    rows = []
    for b in (1, 4, 64):
        for t in (1, 2):
            # The baseline CSV may lack a point: its rows then have no baseline_samples_per_s.
            base = b * 1e6 / (70.0 + b) if baseline and b != 64 else None
            rows.append(bench_row(b, t, 3.0 + 2.0 * b / t, base))
    return {"model": "ppo_mlp", "so": "/tmp/ppo_mlp-0.so", "target": "native", "profiled": False,
            "weight_bytes": 575000, "rows": rows}


def compare_json():
    j = {"model": "ppo_mlp", "target": "native", "profiled": False, "backends": {}}
    for name, scale in (("cpp", 1.0), ("llvm", 0.9)):
        j["backends"][name] = {"so": f"/tmp/ppo_mlp-{name}.so",
                               "rows": [bench_row(b, t, scale * (3.0 + b)) for b in (1, 16) for t in (1, 2)]}
    return j


# ---- the checks

def test_peers(tmp):
    d = tmp / "peers"
    d.mkdir()
    write_csv(d / "peers.csv", peers_rows())
    out = d / "plots"
    p = plot("peers", "--csv", d / "peers.csv", "--out", out, "--format", "svg,png")
    ok(p, "plot.py peers")
    written = p.stdout.split()
    expected = [f"{kind}.{fmt}" for kind in ("latency_ppo_mlp_1t", "latency_ppo_mlp_2t", "speedup_ppo_mlp",
                                             "latency_fusion_micro_1t", "latency_fusion_micro_2t", "speedup_fusion_micro")
                for fmt in ("svg", "png")]
    check(sorted(Path(w).name for w in written) == sorted(expected),
          f"plot.py peers printed {written}, expected the paths of {expected}")
    check(leftovers(out) == sorted(expected), f"plot.py peers left {leftovers(out)} in {out}")
    for w in written:
        check(Path(w).is_file(), f"plot.py peers printed {w}, which does not exist")
    for name in expected:
        f = out / name
        if name.endswith(".png"):
            check(f.read_bytes()[:8] == PNG_SIGNATURE, f"{f} does not start with the PNG signature")
            continue
        ids = svg_ids(f)
        if name.startswith("latency_"):
            for peer in PEER_NAMES:
                line = ids.get(f"peer-{peer}")
                check(line is not None and has_path(line), f"{f}: no drawn line for peer {peer} (id peer-{peer})")
            check("roofline" in ids, f"{f}: no roofline line")
            if "ppo_mlp" in name:  # several batch sizes: p10-p90 as a band
                for peer in PEER_NAMES:
                    check(f"peer-{peer}-band" in ids, f"{f}: no p10-p90 band for {peer}")
            else:  # a single batch size: as error bars
                for peer in PEER_NAMES:
                    check(f"peer-{peer}-range" in ids, f"{f}: no p10-p90 error bar for {peer}")
        else:
            batches = [1, 4, 16] if "ppo_mlp" in name else [16384]
            for t in (1, 2):
                check(f"parity-{t}t" in ids, f"{f}: no line at 1.0 in the {t}-thread panel")
                for peer in PEER_NAMES[:-1]:
                    for b in batches:
                        bar = ids.get(f"bar-{peer}-{t}t-{b}")
                        check(bar is not None and has_path(bar), f"{f}: no bar for policyc vs {peer}, {t} threads, batch {b}")
            check(not any(i.startswith("bar-policyc") for i in ids), f"{f}: a bar of policyc against itself")
    # Same input, same bytes: ids come from svg.hashsalt, and no date is written.
    again = d / "again"
    ok(plot("peers", "--csv", d / "peers.csv", "--out", again), "plot.py peers, second run")
    for name in expected:
        if name.endswith(".svg"):
            check((again / name).read_bytes() == (out / name).read_bytes(), f"{name} differs between two runs")
    # Without policyc there is nothing to compare with: latency plots only, and a note.
    write_csv(d / "nopolicyc.csv", [r for r in peers_rows() if r["peer"] != "policyc"])
    p = plot("peers", "--csv", d / "nopolicyc.csv", "--out", d / "nopolicyc")
    ok(p, "plot.py peers without policyc rows")
    check(not any("speedup_" in f for f in leftovers(d / "nopolicyc")) and len(leftovers(d / "nopolicyc")) == 4,
          f"plot.py peers without policyc wrote {leftovers(d / 'nopolicyc')}")
    check("no speed-up plot" in p.stderr, f"no note about the missing speed-up plot: {p.stderr!r}")
    print(f"ok: plot.py peers wrote {len(expected)} plots (SVG lines, bands, bars; PNG signature; reproducible SVG)")


def test_bench(tmp):
    d = tmp / "bench"
    d.mkdir()
    for name, j in (("base", bench_json(True)), ("plain", bench_json(False)), ("compare", compare_json())):
        (d / f"{name}.json").write_text(json.dumps(j, indent=2))
    for fmt in ("svg", "png", "pdf"):
        out = d / f"base.{fmt}"
        p = plot("bench", "--json", d / "base.json", "--out", out)
        ok(p, f"plot.py bench --out {out.name}")
        check(p.stdout.split() == [str(out)], f"plot.py bench printed {p.stdout!r}, expected {out}")
    check((d / "base.png").read_bytes()[:8] == PNG_SIGNATURE, "base.png does not start with the PNG signature")
    check((d / "base.pdf").read_bytes()[:5] == b"%PDF-", "base.pdf does not start with %PDF-")
    ids = svg_ids(d / "base.svg")
    for t in (1, 2):
        for key in (f"latency-compiled-{t}t", f"latency-compiled-{t}t-band", f"throughput-compiled-{t}t", f"baseline-{t}t"):
            check(key in ids and has_path(ids[key]), f"base.svg: nothing drawn with id {key}")
    ok(plot("bench", "--json", d / "plain.json", "--out", d / "plain.svg"), "plot.py bench without a baseline")
    ids = svg_ids(d / "plain.svg")
    check("latency-compiled-1t" in ids and "latency-compiled-2t" in ids, "plain.svg: no latency lines")
    check(not any(i.startswith(("throughput", "baseline")) for i in ids), "plain.svg: a throughput panel without a baseline")
    ok(plot("bench", "--json", d / "compare.json", "--out", d / "compare.svg"), "plot.py bench on --compare-backends JSON")
    ids = svg_ids(d / "compare.svg")
    for backend in ("cpp", "llvm"):
        for t in (1, 2):
            for key in (f"latency-{backend}-{t}t", f"throughput-{backend}-{t}t"):
                check(key in ids and has_path(ids[key]), f"compare.svg: nothing drawn with id {key}")
    print("ok: plot.py bench (baseline panel, no-baseline single panel, --compare-backends; svg/png/pdf)")


def test_errors(tmp):
    d = tmp / "errors"
    d.mkdir()
    out = d / "out"
    one_error_line(plot("peers", "--csv", d / "missing.csv", "--out", out), "peers, missing CSV")
    check(leftovers(out) == [], f"peers with a missing CSV left {leftovers(out)}")
    write_csv(d / "empty.csv", [])
    one_error_line(plot("peers", "--csv", d / "empty.csv", "--out", out), "peers, a CSV with no rows")
    (d / "bad.csv").write_text("model,threads\nx,1\n")
    one_error_line(plot("peers", "--csv", d / "bad.csv", "--out", out), "peers, CSV without the peers columns")
    rows = peers_rows()
    rows[3]["median_us"] = "fast"
    write_csv(d / "nan.csv", rows)
    p = plot("peers", "--csv", d / "nan.csv", "--out", out)
    one_error_line(p, "peers, a non-numeric median")
    check("line 5" in p.stderr, f"the error does not name the CSV line: {p.stderr!r}")
    check(leftovers(out) == [], f"peers with bad CSVs left {leftovers(out)}")
    write_csv(d / "good.csv", peers_rows())
    one_error_line(plot("peers", "--csv", d / "good.csv", "--out", out, "--format", "svg,jpg"), "peers, --format jpg")
    check(leftovers(out) == [], f"peers with --format jpg left {leftovers(out)}")

    (d / "rows.json").write_text(json.dumps(bench_json(True)))
    for bad in ("F.jpg", "F", "F.svg.txt"):
        one_error_line(plot("bench", "--json", d / "rows.json", "--out", d / bad), f"bench --out {bad}")
        check(not (d / bad).exists(), f"bench --out {bad} wrote the file")
    one_error_line(plot("bench", "--json", d / "missing.json", "--out", d / "m.svg"), "bench, missing JSON")
    check(not (d / "m.svg").exists(), "bench with a missing JSON wrote m.svg")
    (d / "truncated.json").write_text(json.dumps(bench_json(True))[:200])
    one_error_line(plot("bench", "--json", d / "truncated.json", "--out", d / "t.svg"), "bench, truncated JSON")
    norows = bench_json(False)
    del norows["rows"]  # what the writer leaves when it timed nothing
    (d / "norows.json").write_text(json.dumps(norows))
    p = plot("bench", "--json", d / "norows.json", "--out", d / "n.svg")
    one_error_line(p, "bench, no rows")
    check("no rows" in p.stderr, f"the error does not say 'no rows': {p.stderr!r}")
    (d / "emptyrows.json").write_text(json.dumps(dict(bench_json(False), rows=[])))
    one_error_line(plot("bench", "--json", d / "emptyrows.json", "--out", d / "n.svg"), "bench, empty rows")
    (d / "list.json").write_text("[1, 2]")
    one_error_line(plot("bench", "--json", d / "list.json", "--out", d / "n.svg"), "bench, a JSON list")
    # A failed run leaves an earlier plot as it was.
    ok(plot("bench", "--json", d / "rows.json", "--out", d / "keep.svg"), "bench, a good plot")
    before = (d / "keep.svg").read_bytes()
    one_error_line(plot("bench", "--json", d / "truncated.json", "--out", d / "keep.svg"), "bench over an existing plot")
    check((d / "keep.svg").read_bytes() == before, "a failed run changed the existing keep.svg")
    stray = [f for f in leftovers(d) if f.endswith(".tmp") or f in ("t.svg", "n.svg")]
    check(stray == [], f"failed runs left {stray}")
    one_error_line(plot("bench", "--json", d / "rows.json"), "bench without --out")
    one_error_line(plot(), "no subcommand")
    print("ok: plot.py errors (missing/bad/empty inputs, bad extension or format: one line, exit 2, no file)")


def test_progress():
    sys.path.insert(0, str(REPO / "bench"))
    from progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    plain = io.StringIO()
    p = Progress(4, "peers", plain)
    p.step("m batch 1 eager")
    p.step("m batch 1,4,16 policyc", n=3)
    p.close()
    check(plain.getvalue() == "peers 1/4 m batch 1 eager\npeers 4/4 m batch 1,4,16 policyc\n",
          f"Progress without a terminal wrote {plain.getvalue()!r}")
    tty = Tty()
    with Progress(4, "peers", tty) as p:
        p.step("m batch 1 eager")
        p.step("m batch 4 eager")
        p.clear()
        p.step("m batch 16 ort", n=2)
    text = tty.getvalue()
    check(text.count("\n") == 1 and text.endswith("peers [##########] 4/4 m batch 16 ort\n"),
          f"Progress on a terminal wrote {text!r}")
    # the count is the step running; the bar, the steps done before it
    check("\r\x1b[Kpeers [##........] 2/4 m batch 4 eager" in text and "\r\x1b[Kpeers [#####.....] 4/4 m batch 16 ort" in text,
          f"Progress on a terminal drew {text!r}")
    tty = Tty()
    try:
        with Progress(4, "", tty) as p:
            p.step("a")
            raise KeyError("x")
    except KeyError:
        pass
    check(tty.getvalue().endswith("[..........] 1/4 a\n"), f"Progress after a failure wrote {tty.getvalue()!r}")
    print("ok: progress.Progress (plain lines, a redrawn bar on a terminal, a clean line after a failure)")


def test_peers_imports():
    p = run([PY, PEERS, "--help"], timeout=120)
    ok(p, "peers.py --help")
    check("--csv" in p.stdout, f"peers.py --help printed {p.stdout!r}")
    p = run([PY, BASELINE, "--help"], timeout=120)
    ok(p, "torch_baseline.py --help")
    print("ok: peers.py --help and torch_baseline.py --help")


def test_torch_baseline(tmp):
    if not POLICYC.is_file() or not MODEL.is_file():
        print(f"skipped: torch_baseline.py and `policyc bench --baseline` ({POLICYC} or {MODEL} missing)")
        return
    d = tmp / "baseline"
    d.mkdir()
    t = d / "torch.csv"
    p = run([PY, BASELINE, MODEL, "--batch", "1,4", "--threads", "1", "--min-time", "0.05", "--min-calls", "20",
             "--warmup", "5", "--csv", t])
    ok(p, "torch_baseline.py")
    progress = [line for line in p.stderr.splitlines() if line.strip()]
    check(len(progress) == 2, f"torch_baseline.py: expected one progress line per point, got {progress}")
    with open(t, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    check(reader.fieldnames == ["batch", "threads", "samples_per_s", "median_us"], f"{t}: header {reader.fieldnames}")
    check(len(rows) == 2, f"{t}: {len(rows)} rows, expected 2")
    check([(r["batch"], r["threads"]) for r in rows] == [("1", "1"), ("4", "1")], f"{t}: points {rows}")
    for r in rows:
        check(float(r["samples_per_s"]) > 0 and float(r["median_us"]) > 0, f"{t}: non-positive figures in {r}")

    # `policyc bench --baseline` reads it (CsvBaseline: columns by name, extra columns ignored).
    j = d / "bench.json"
    p = run([POLICYC, "bench", MODEL, "--batch", "1,4", "--threads", "1", "--min-time", "0.05", "--min-calls", "20",
             "--warmup", "5", "--baseline", t, "--json", j], timeout=600)
    ok(p, "policyc bench --baseline torch.csv")
    bench = json.loads(j.read_text())
    got = [(r["batch"], r.get("baseline_samples_per_s")) for r in bench["rows"]]
    want = [(int(r["batch"]), float(r["samples_per_s"])) for r in rows]
    check(got == want, f"policyc bench read the baseline as {got}, expected {want}")
    out = d / "bench.svg"
    ok(plot("bench", "--json", j, "--out", out), "plot.py bench on policyc bench's JSON")
    ids = svg_ids(out)
    check("latency-compiled-1t" in ids and "baseline-1t" in ids, f"{out}: no latency or baseline line")
    print(f"ok: torch_baseline.py wrote {len(rows)} points; policyc bench --baseline read them; plot.py bench plotted the run")


def main():
    try:
        with tempfile.TemporaryDirectory(prefix="policyc-test-plots-") as tmp:
            tmp = Path(tmp)
            test_peers(tmp)
            test_bench(tmp)
            test_errors(tmp)
            test_progress()
            test_peers_imports()
            test_torch_baseline(tmp)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print(f"test_plots: all {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
