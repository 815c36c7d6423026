"""Plots of policyc's benchmark results: the peers comparison (bench/peers) and `policyc bench --json`.

    plot.py peers --csv PEERS.csv --out DIR [--format svg,png]
        For each model and thread count of the CSV that bench/peers/peers.py writes,
        DIR/latency_<model>_<threads>t.<fmt>: median microseconds per call against the batch size
        (log-log, the p10-p90 range as a band), one line per peer; and for each model
        DIR/speedup_<model>.<fmt>: policyc's speed-up over every other peer per batch size
        (grouped bars, one panel per thread count).

    plot.py bench --json ROWS.json --out F.svg|F.png|F.pdf
        From `policyc bench --json`: latency against the batch size (log-log, one line per thread
        count, p10-p90 band) and, when the rows carry a baseline's figures, a second panel with the
        throughput of the compiled model and of the baseline. The JSON of --compare-backends gets
        one line per backend and thread count, and the backends' throughputs side by side.

Every path written is printed, one per line. Errors (a missing or malformed input, no rows) are one
line on stderr and exit status 2; a file is written whole or not at all (a temporary file in the
same directory, then renamed over the target).
"""
import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # atomic_file.py beside this script
from atomic_file import write_atomic  # noqa: E402

import matplotlib

matplotlib.use("Agg")  # files only: no display, and no GUI toolkit to import
# Reproducible SVGs: element ids are hashes salted with this instead of a random salt, and text
# stays text (no glyph paths, which depend on the fonts found on the machine).
matplotlib.rcParams["svg.hashsalt"] = "policyc-plot"
matplotlib.rcParams["svg.fonttype"] = "none"
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator  # noqa: E402

PROG = "plot.py"
FORMATS = ("svg", "png", "pdf")
# Creation dates would make every run's file differ; PNG carries no date to begin with.
METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": None}
KNOWN_PEERS = ("eager", "torchscript", "ort", "policyc")  # peers.py's order: the same colour in every plot
SELF = "policyc"


class PlotError(Exception):
    """A problem with the input or the output path: reported as one line, exit status 2."""


# ---- helpers

def safe_name(name):
    """A model name as a file-name part: [A-Za-z0-9_.-] only (names come from files and may hold anything)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


def gid(*parts):
    """An SVG element id for an artist, so that a plot's lines can be found in the file (the tests do)."""
    return "-".join(re.sub(r"[^A-Za-z0-9_.-]", "_", str(p)) for p in parts)


def threads_label(t):
    return f"{t} thread{'s' if t != 1 else ''}"


def number(value, what, where, positive=False, integer=False):
    try:
        v = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise PlotError(f"{where}: '{what}' is not {'an integer' if integer else 'a number'}: {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v) or (positive and v <= 0):
        raise PlotError(f"{where}: '{what}' must be a {'positive ' if positive else ''}finite number, got {value!r}")
    return v


def batch_axis(ax, batches):
    """Batch sizes on a log2 axis, each labelled with its value (1, 4, 16, ... rather than 2^k)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(batches)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("batch size")


def compact(v):
    """1.5, 20, 300, 4k, 50k, 2M: tick labels short enough for a log axis with ticks at 1, 2 and 5."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def log_y(ax, label):
    """A log y axis labelled at 1, 2 and 5 of each decade: benchmark figures often span less than a
    decade, where matplotlib's default would label a single tick or none."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: compact(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(label)
    ax.grid(True, which="both", linewidth=0.4, alpha=0.5)


def series(ax, xs, med, lo, hi, color, label, name, linestyle="-"):
    """A median line with its p10-p90 range: a band for two points or more, error bars for a single one
    (a band one point wide would not show)."""
    line, = ax.plot(xs, med, marker="o", markersize=4, color=color, linestyle=linestyle, label=label, gid=name)
    if lo is not None and hi is not None:
        if len(xs) > 1:
            ax.fill_between(xs, lo, hi, color=color, alpha=0.18, linewidth=0, gid=name + "-band")
        else:
            ax.errorbar(xs, med, yerr=[[med[0] - lo[0]], [hi[0] - med[0]]], fmt="none", ecolor=color, capsize=3,
                        gid=name + "-range")
    return line


def save(fig, path, fmt):
    """Writes the figure whole or not at all (atomic_file): a failure leaves no partial file, and a
    reader never sees half a plot."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: fig.savefig(f, format=fmt, metadata=METADATA[fmt]))
    except OSError as e:
        raise PlotError(f"cannot write '{path}': {e.strerror or e}") from None
    finally:
        plt.close(fig)
    print(path, flush=True)


# ---- plot.py peers

def read_peers_csv(path):
    """{model: {threads: {peer: {batch: (median, p10, p90)}}}}, {model: {threads: {batch: roofline_us}}},
    and the peers in order of first appearance."""
    try:
        f = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise PlotError(f"cannot read '{path}': {e.strerror or e}") from None
    with f:
        try:
            reader = csv.DictReader(f)
            header = reader.fieldnames
            if not header:
                raise PlotError(f"'{path}' is empty: expected the CSV that bench/peers/peers.py writes")
            missing = [c for c in ("model", "threads", "batch", "peer", "median_us") if c not in header]
            if missing:
                raise PlotError(f"'{path}': the header lacks {', '.join(missing)} "
                                f"(expected the CSV that bench/peers/peers.py writes), got '{','.join(header)}'")
            has_range = "p10_us" in header and "p90_us" in header
            data, roof, peers = {}, {}, []
            for row in reader:
                where = f"'{path}' line {reader.line_num}"
                if None in row or any(row[c] is None for c in header):
                    raise PlotError(f"{where}: {len(header)} columns expected")
                model, peer = row["model"], row["peer"]
                if not model or not peer:
                    raise PlotError(f"{where}: empty 'model' or 'peer'")
                t = number(row["threads"], "threads", where, positive=True, integer=True)
                b = number(row["batch"], "batch", where, positive=True, integer=True)
                med = number(row["median_us"], "median_us", where, positive=True)
                lo = hi = None
                if has_range and row["p10_us"] != "" and row["p90_us"] != "":
                    lo = number(row["p10_us"], "p10_us", where, positive=True)
                    hi = number(row["p90_us"], "p90_us", where, positive=True)
                data.setdefault(model, {}).setdefault(t, {}).setdefault(peer, {})[b] = (med, lo, hi)
                if row.get("roofline_us"):
                    roof.setdefault(model, {}).setdefault(t, {})[b] = number(row["roofline_us"], "roofline_us", where,
                                                                             positive=True)
                if peer not in peers:
                    peers.append(peer)
        except csv.Error as e:
            raise PlotError(f"'{path}' is not valid CSV: {e}") from None
        except UnicodeDecodeError:
            raise PlotError(f"'{path}' is not a text (UTF-8) CSV file") from None
    if not data:
        raise PlotError(f"'{path}' has no rows")
    return data, roof, peers


def file_names(models):
    """A distinct safe file-name part per model: names that differ only in unsafe characters get
    _2, _3, ... rather than overwriting each other's plots."""
    out, used = {}, set()
    for m in models:
        base = safe_name(m)
        name, k = base, 2
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        out[m] = name
    return out


def plot_latency(model, t, by_peer, roof, colors):
    fig, ax = plt.subplots(figsize=(7, 4.6))
    batches = sorted({b for points in by_peer.values() for b in points})
    for k, (peer, points) in enumerate(by_peer.items()):
        xs = sorted(points)
        if len(batches) == 1:
            # One batch size (fusion_micro): the peers' ranges side by side rather than on top of each other.
            xs = [b * 2 ** (0.08 * (k - (len(by_peer) - 1) / 2)) for b in xs]
            points = dict(zip(xs, points.values()))
        med = [points[b][0] for b in xs]
        ranged = all(points[b][1] is not None for b in xs)
        lo = [points[b][1] for b in xs] if ranged else None
        hi = [points[b][2] for b in xs] if ranged else None
        series(ax, xs, med, lo, hi, colors[peer], peer, gid("peer", peer))
    if roof:
        xs = sorted(roof)
        ax.plot(xs, [roof[b] for b in xs], color="0.45", linestyle="--", linewidth=1, marker="_", markersize=14,
                label="roofline bound", gid="roofline")
    batch_axis(ax, batches)
    if len(batches) == 1:
        ax.set_xlim(batches[0] / 2 ** 0.5, batches[0] * 2 ** 0.5)  # else the dodge fills the whole width
    log_y(ax, "µs per call (median, p10–p90 range)")
    ax.set_title(f"{model}, {threads_label(t)}: latency per call")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_speedup(model, by_threads, colors):
    """Grouped bars of median(peer) / median(policyc), one panel per thread count; None when policyc
    has no point in common with another peer."""
    panels = []
    for t in sorted(by_threads):
        by_peer = by_threads[t]
        mine = by_peer.get(SELF, {})
        others = [p for p in by_peer if p != SELF]
        batches = sorted(b for b in mine if any(b in by_peer[p] for p in others))
        if batches:
            panels.append((t, batches, others, mine, by_peer))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.5, 4.2 * len(panels)), 4.6), sharey=True, squeeze=False)
    ratios = []
    for ax, (t, batches, others, mine, by_peer) in zip(axes[0], panels):
        width = 0.8 / max(len(others), 1)
        for k, peer in enumerate(others):
            xs, hs = [], []
            for i, b in enumerate(batches):
                if b in by_peer[peer]:
                    xs.append(i - 0.4 + width * (k + 0.5))
                    hs.append(by_peer[peer][b][0] / mine[b][0])
            ratios += hs
            # Bars grow from 1.0 (parity) on a log axis: a 2x win and a 2x loss look alike in size.
            bars = ax.bar(xs, [h - 1 for h in hs], bottom=1, width=width * 0.92, color=colors[peer],
                          label=f"vs {peer}")
            for bar, b in zip(bars, [b for b in batches if b in by_peer[peer]]):
                bar.set_gid(gid("bar", peer, f"{t}t", b))
            for x, h in zip(xs, hs):
                ax.annotate(f"{h:.3g}", (x, h), xytext=(0, 2 if h >= 1 else -2), textcoords="offset points",
                            ha="center", va="bottom" if h >= 1 else "top", fontsize=6)
        ax.axhline(1.0, color="black", linewidth=1, gid=gid("parity", f"{t}t"))
        ax.set_xticks(range(len(batches)))
        pad = max(0.0, (3 - len(batches)) / 2)  # bars as wide as in a three-batch plot, not the whole panel
        ax.set_xlim(-0.6 - pad, len(batches) - 0.4 + pad)
        ax.set_xticklabels([str(b) for b in batches])
        ax.set_xlabel("batch size")
        ax.set_title(threads_label(t), fontsize=10)
    ax0 = axes[0][0]
    log_y(ax0, "policyc's speed-up (peer's median / policyc's)")
    ax0.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    for ax in axes[0]:  # horizontal lines only: a vertical one would cut through the groups
        ax.grid(False, axis="x")
        ax.grid(True, axis="y", which="both", linewidth=0.4, alpha=0.5)
    lo, hi = min(ratios + [1.0]), max(ratios + [1.0])
    ax0.set_ylim(lo / 1.35, hi * 1.35)  # room for the value above (or below) each bar
    # One legend under the panels, where no bar can be behind it.
    handles = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(f"{model}: policyc's speed-up over each peer (above 1: policyc faster)", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def cmd_peers(args):
    formats = []
    for fmt in args.format.split(","):
        fmt = fmt.strip().lower().lstrip(".")
        if fmt not in FORMATS:
            raise PlotError(f"--format: '{fmt}' is not one of {', '.join(FORMATS)}")
        if fmt not in formats:
            formats.append(fmt)
    data, roof, peers = read_peers_csv(args.csv)
    order = [p for p in KNOWN_PEERS if p in peers] + [p for p in peers if p not in KNOWN_PEERS]
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {p: palette[i % len(palette)] for i, p in enumerate(order)}
    names = file_names(data)
    out = Path(args.out)
    for model, by_threads in data.items():
        # peers in a fixed order, so that legends read alike in every plot
        by_threads = {t: {p: by_threads[t][p] for p in order if p in by_threads[t]} for t in by_threads}
        for t in sorted(by_threads):
            fig = plot_latency(model, t, by_threads[t], roof.get(model, {}).get(t), colors)
            for fmt in formats:
                save(fig, out / f"latency_{names[model]}_{t}t.{fmt}", fmt)
        fig = plot_speedup(model, by_threads, colors)
        if fig is None:
            print(f"{PROG}: note: {model}: no {SELF} rows beside another peer's, so no speed-up plot", file=sys.stderr)
            continue
        for fmt in formats:
            save(fig, out / f"speedup_{names[model]}.{fmt}", fmt)


# ---- plot.py bench

def read_bench_json(path):
    """(title, {backend or "": [rows]}) from `policyc bench --json` (rows as dicts of floats), or from
    `policyc bench --compare-backends --json` (one entry per backend)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PlotError(f"cannot read '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise PlotError(f"'{path}' is not a text (UTF-8) JSON file") from None
    try:
        j = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlotError(f"'{path}' is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if not isinstance(j, dict):
        raise PlotError(f"'{path}': expected the object `policyc bench --json` writes, got a JSON {type(j).__name__}")
    if "rows" in j:
        groups = {"": j["rows"]}
    elif "backends" in j:
        if not isinstance(j["backends"], dict) or not j["backends"]:
            raise PlotError(f"'{path}': 'backends' is not an object of backends")
        groups = {}
        for name, b in j["backends"].items():
            if not isinstance(b, dict) or "rows" not in b:
                raise PlotError(f"'{path}': backend '{name}' has no 'rows'")
            groups[name] = b["rows"]
    elif "model" in j or "so" in j:
        raise PlotError(f"'{path}' has no rows")  # the writer leaves 'rows' out when it timed nothing
    elif "traceEvents" in j:
        raise PlotError(f"'{path}' is a Chrome trace (`policyc bench --trace`), not the rows of `policyc bench --json`")
    else:
        raise PlotError(f"'{path}' has neither 'rows' nor 'backends': not the output of `policyc bench --json`")
    out = {}
    for name, rows in groups.items():
        label = f"'{path}'" + (f" backend '{name}'" if name else "")
        if rows is None or rows == []:
            raise PlotError(f"{label} has no rows")
        if not isinstance(rows, list):
            raise PlotError(f"{label}: 'rows' is not a list")
        parsed = {}
        for i, r in enumerate(rows):
            where = f"{label} row {i}"
            if not isinstance(r, dict):
                raise PlotError(f"{where} is not an object")
            for k in ("batch", "threads", "median_us", "samples_per_s"):
                if k not in r:
                    raise PlotError(f"{where} lacks '{k}'")
            row = {"batch": number(r["batch"], "batch", where, positive=True, integer=True),
                   "threads": number(r["threads"], "threads", where, positive=True, integer=True),
                   "median_us": number(r["median_us"], "median_us", where, positive=True),
                   "samples_per_s": number(r["samples_per_s"], "samples_per_s", where, positive=True)}
            if "p10_us" in r and "p90_us" in r:
                row["p10_us"] = number(r["p10_us"], "p10_us", where, positive=True)
                row["p90_us"] = number(r["p90_us"], "p90_us", where, positive=True)
            if r.get("baseline_samples_per_s") is not None:
                row["baseline"] = number(r["baseline_samples_per_s"], "baseline_samples_per_s", where, positive=True)
            parsed[(row["threads"], row["batch"])] = row  # a repeated point: the last one counts
        out[name] = sorted(parsed.values(), key=lambda r: (r["threads"], r["batch"]))
    model = j.get("model")
    title = str(model) if model else Path(path).stem
    if j.get("target"):
        title += f" ({j['target']})"
    if j.get("profiled"):
        title += ", profiled"
    return title, out


def cmd_bench(args):
    fmt = Path(args.out).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise PlotError(f"--out '{args.out}': the extension must be .svg, .png or .pdf")
    title, groups = read_bench_json(args.json)
    compare = len(groups) > 1 or "" not in groups
    has_base = any("baseline" in r for rows in groups.values() for r in rows)
    panels = 2 if (has_base or compare) else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.6), squeeze=False)
    lat = axes[0][0]
    threads = sorted({r["threads"] for rows in groups.values() for r in rows})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {t: palette[i % len(palette)] for i, t in enumerate(threads)}
    styles = ["-", "--", ":", "-."]
    batches = {r["batch"] for rows in groups.values() for r in rows}
    for g, (backend, rows) in enumerate(groups.items()):
        for t in threads:
            pts = [r for r in rows if r["threads"] == t]
            if not pts:
                continue
            xs = [r["batch"] for r in pts]
            ranged = all("p10_us" in r for r in pts)
            label = (f"{backend}, " if backend else "") + threads_label(t)
            series(lat, xs, [r["median_us"] for r in pts], [r["p10_us"] for r in pts] if ranged else None,
                   [r["p90_us"] for r in pts] if ranged else None, color[t], label,
                   gid("latency", backend or "compiled", f"{t}t"), styles[g % len(styles)])
    batch_axis(lat, batches)
    log_y(lat, "µs per call (median, p10–p90 range)")
    lat.set_title("latency per call", fontsize=10)
    lat.legend(fontsize=8)
    if panels == 2:
        thr = axes[0][1]
        for g, (backend, rows) in enumerate(groups.items()):
            for t in threads:
                pts = [r for r in rows if r["threads"] == t]
                if not pts:
                    continue
                name = backend or "compiled"
                thr.plot([r["batch"] for r in pts], [r["samples_per_s"] for r in pts], marker="o", markersize=4,
                         color=color[t], linestyle=styles[g % len(styles)], label=f"{name}, {threads_label(t)}",
                         gid=gid("throughput", name, f"{t}t"))
                base = [r for r in pts if "baseline" in r]
                if base:
                    # the baseline's name is not in the JSON (`policyc bench` prints it only)
                    thr.plot([r["batch"] for r in base], [r["baseline"] for r in base], marker="s", markersize=4,
                             color=color[t], linestyle="--", alpha=0.75, label=f"baseline, {threads_label(t)}",
                             gid=gid("baseline", f"{t}t"))
        batch_axis(thr, batches)
        log_y(thr, "samples per second")
        thr.set_title("throughput: " + (" vs ".join(groups) if compare else "compiled vs baseline"), fontsize=10)
        thr.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    save(fig, args.out, fmt)


# ---- main

class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (`plot.py: error: ...`), like every other error."""

    def error(self, message):
        print(f"{PROG}: error: {message} (see {PROG} --help)", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{peers,bench}")
    p = sub.add_parser("peers", help="latency and speed-up plots from bench/peers/peers.py's CSV")
    p.add_argument("--csv", required=True, help="the CSV peers.py wrote (its --csv)")
    p.add_argument("--out", required=True, help="directory for the plots (made if missing)")
    p.add_argument("--format", default="svg", help="comma-separated: svg, png, pdf (default svg)")
    b = sub.add_parser("bench", help="latency (and throughput against a baseline) from `policyc bench --json`")
    b.add_argument("--json", required=True, help="the file `policyc bench --json` wrote")
    b.add_argument("--out", required=True, help="F.svg, F.png or F.pdf")
    args = ap.parse_args(argv)
    try:
        (cmd_peers if args.cmd == "peers" else cmd_bench)(args)
    except PlotError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
