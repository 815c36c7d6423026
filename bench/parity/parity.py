#!/usr/bin/python3
"""The backend parity guard: every example and zoo model and every one-op graph of make_ops.py through
both backends, compiled with --profile, timed by `policyc bench --compare-backends` (both builds
in one process, their calls interleaved a few milliseconds at a time, so that a change of the
machine's speed hits both alike); then per kernel the two backends' microseconds per call side
by side (a kernel of either more than 1.25x the other's fails the bar), and for the ops timed at
several widths whether the time grows linearly with the width (a doubling of the width may cost
at most 2 x 1.25 the time). A model with a kernel over the bar, and every width of a sweep over
it, is timed --confirm more times, and each kernel's time is the least of its medians: on a
shared machine another process only ever adds time, so one unlucky run does not fail the bar. Prints a markdown report (docs/performance.md, "Backend parity") and
exits 1 when a bar fails.

    parity.py POLICYC OUT_DIR [--batch 1,64] [--min-time 0.3] [--confirm 2] [--reuse] [MODEL.onnx ...]
"""
import argparse
import json
import os
import re
import subprocess
import sys

BAR = 1.25
NOISE_US = 0.5  # below this both backends' times are mostly the timer's own cost


def bench(policyc, model, batches, min_time, out, reuse, round=0):
    """Both backends' builds of `model` timed in one process, their calls interleaved
    (`policyc bench --compare-backends`): {backend: that build's result}."""
    suffix = f".r{round}" if round else ""
    path = os.path.join(out, f"{os.path.splitext(os.path.basename(model))[0]}{suffix}.json")
    if not (reuse and os.path.exists(path)):
        cmd = [policyc, "bench", model, "--compare-backends", "--profile", "--batch", batches, "--min-time", str(min_time),
               "--min-calls", "50", "--warmup", "20", "--json", path]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise SystemExit(f"parity: {' '.join(cmd)} failed:\n{r.stdout}")
    with open(path) as f:
        return json.load(f)["backends"]


def kernels(result):
    """{(batch, kernel name): (kind, us per call)}"""
    return {(row["batch"], k["name"]): (k["kind"], k["us_per_call"]) for row in result["rows"] for k in row.get("kernels", [])}


def least(runs):
    """Per kernel, the least time of several runs' kernels() (keys of the first run)."""
    return {key: (kind, min(r[key][1] for r in runs if key in r)) for key, (kind, _) in runs[0].items()}


def over_bar(cpp, llvm):
    """Whether a kernel of both backends is over the bar (and not timer noise)."""
    for key in set(cpp) & set(llvm):
        c, l = cpp[key][1], llvm[key][1]
        if max(c, l) >= NOISE_US and max(c, l) > BAR * min(c, l):
            return True
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("policyc")
    ap.add_argument("out")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--confirm", type=int, default=2, help="more runs of a model with a kernel over the bar (the least time counts)")
    ap.add_argument("--reuse", action="store_true", help="report from the JSON of an earlier run where there is one")
    a = ap.parse_intermixed_args()
    os.makedirs(a.out, exist_ok=True)
    failures = []
    rows = []
    times = {}  # (op, batch) -> {width: (cpp, llvm)}
    runs = {}  # model path -> per backend, the kernels() of each run
    names = {m: os.path.splitext(os.path.basename(m))[0] for m in a.models}

    def again(model):
        """--confirm more runs of `model` (the least time of each kernel counts)."""
        for r in range(len(runs[model]["cpp"]), len(runs[model]["cpp"]) + a.confirm):
            print(f"parity: {names[model]} again ({r} of {a.confirm})", file=sys.stderr, flush=True)
            more = bench(a.policyc, model, a.batch, a.min_time, a.out, a.reuse, r)
            for b in ("cpp", "llvm"):
                runs[model][b].append(kernels(more[b]))

    for model in a.models:
        print(f"parity: {names[model]}", file=sys.stderr, flush=True)
        first = bench(a.policyc, model, a.batch, a.min_time, a.out, a.reuse)
        runs[model] = {b: [kernels(first[b])] for b in ("cpp", "llvm")}
        if over_bar(runs[model]["cpp"][0], runs[model]["llvm"][0]):
            again(model)

    def sweeps():
        """(op, batch) -> {width: (cpp, llvm)} of the one-op graphs timed at several widths, and
        per (op, batch) the models behind it."""
        found, models = {}, {}
        for model in a.models:
            m = re.fullmatch(r"(.+)_(\d+)", names[model])
            cpp = least(runs[model]["cpp"])
            if not m or len(cpp) // len(a.batch.split(",")) != 1:
                continue
            llvm = least(runs[model]["llvm"])
            for (batch, _), (_, c) in cpp.items():
                found.setdefault((m.group(1), batch), {})[int(m.group(2))] = (c, next(l for (b, _), (_, l) in llvm.items() if b == batch))
                models.setdefault((m.group(1), batch), set()).add(model)
        return {key: w for key, w in found.items() if len(w) >= 2}, models

    def steps(byWidth):
        """The worst per-doubling growth of each backend's time over a sweep's widths."""
        ws = sorted(byWidth)
        per = {b: [] for b in (0, 1)}
        for lo, hi in zip(ws, ws[1:]):
            for b in (0, 1):
                t0, t1 = byWidth[lo][b], byWidth[hi][b]
                if max(t0, t1) >= NOISE_US:
                    per[b].append((t1 / t0) ** (1 / ((hi // lo).bit_length() - 1)) if t0 > 0 else float("inf"))
        return [max(per[b]) if per[b] else 0.0 for b in (0, 1)]

    # A sweep over the bar in its first runs: its models timed --confirm more times, as a kernel's.
    first, models = sweeps()
    for key, byWidth in sorted(first.items()):
        if any(w > 2 * BAR for w in steps(byWidth)):
            for model in sorted(models[key]):
                if len(runs[model]["cpp"]) == 1:
                    again(model)
    times, _ = sweeps()

    for model in a.models:
        name = names[model]
        cpp, llvm = least(runs[model]["cpp"]), least(runs[model]["llvm"])
        rounds = len(runs[model]["cpp"])
        for key in sorted(set(cpp) & set(llvm)):
            batch, kernel = key
            kind, c = cpp[key]
            _, l = llvm[key]
            ratio = l / c if c > 0 else float("inf")
            slow = max(ratio, 1 / ratio if ratio > 0 else float("inf"))
            noise = max(c, l) < NOISE_US
            verdict = "below timer resolution" if noise else ("ok" if slow <= BAR else f"FAIL: {'llvm' if ratio > 1 else 'cpp'} slower")
            if not noise and slow > BAR:
                failures.append(f"{name} batch {batch} {kernel}: cpp {c:.2f} us, llvm {l:.2f} us")
            rows.append((name if rounds == 1 else f"{name} (best of {rounds})", batch, kernel, kind, c, l, ratio, verdict))
        missing = (set(cpp) ^ set(llvm))
        if missing:
            failures.append(f"{name}: kernels in one backend only: {sorted(k for _, k in missing)}")

    print(f"Per kernel, microseconds per call (median run time split by the profiler), batch {a.batch}; "
          f"the bar: neither backend more than {BAR}x the other (kernels under {NOISE_US} us in both are timer noise). "
          f"Both builds ran in one process, their calls interleaved. A model with a kernel over the bar in its first run "
          f"(or in a width sweep over it) was timed {a.confirm} more times, and the least of each kernel's medians counts (\"best of N\").\n")
    print("| model | batch | kernel | kind | cpp us | llvm us | llvm/cpp | |")
    print("|---|---:|---|---|---:|---:|---:|---|")
    for name, batch, kernel, kind, c, l, ratio, verdict in rows:
        print(f"| {name} | {batch} | {kernel} | {kind} | {c:.2f} | {l:.2f} | {ratio:.2f} | {verdict} |")
    print(f"\nTime against width (one-op graphs): each doubling of the width may cost at most {2 * BAR}x.\n")
    print("| op | batch | widths | cpp us | llvm us | worst step cpp | worst step llvm | |")
    print("|---|---:|---|---|---|---:|---:|---|")
    for (op, batch), byWidth in sorted(times.items()):
        ws = sorted(byWidth)
        worst = steps(byWidth)
        linear = all(w <= 2 * BAR for w in worst)
        if not linear:
            failures.append(f"{op} batch {batch}: time grows faster than the width (worst step cpp {worst[0]:.2f}x, llvm {worst[1]:.2f}x)")
        print(f"| {op} | {batch} | {','.join(map(str, ws))} | {', '.join(f'{byWidth[w][0]:.2f}' for w in ws)} | "
              f"{', '.join(f'{byWidth[w][1]:.2f}' for w in ws)} | {worst[0]:.2f}x | {worst[1]:.2f}x | {'linear' if linear else 'FAIL'} |")
    print()
    if failures:
        print(f"{len(failures)} bar(s) failed:")
        for f in failures:
            print(f"- {f}")
        return 1
    print("every kernel within the bar, every width sweep linear")
    return 0


if __name__ == "__main__":
    sys.exit(main())
