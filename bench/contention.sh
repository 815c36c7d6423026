#!/usr/bin/env bash
# Measures how policyc's threads fare on a shared machine: each model at --threads 1 and 2, first on a
# quiet machine, then with a busy loop pinned to one core (another process wanting that core all the
# time, as rollout workers sharing a host do), and prints one table: the medians and p90s, the
# 2-thread/1-thread ratios under load (goal: median <= 1.0, p90 <= 1.5) and the quiet 2-thread
# speedup (goal at batch 64: >= 1.7 on two cores).
#
#   bench/contention.sh [MODEL.onnx ...] [--batch 1,64] [--min-time 1] [--rounds 3] [--busy-core 1]
#                       [--markdown F.md] [--policyc PATH] [-- extra policyc bench options, e.g. --no-extern]
#
# --policyc PATH: a policyc binary other than build/tools/policyc (a copy built from another
# commit, to compare two in one session).
#
# The quiet and the loaded runs alternate, --rounds times; each figure is the median over the
# rounds (a shared host drifts by 10-20% within minutes: alternating spreads that drift over both).
# Default models: examples/models/atari_cnn.onnx and impala_cnn.onnx. Builds policyc if needed
# (not with --policyc).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

models=()
batch=1,64
min_time=1
rounds=3
busy_core=1
markdown=
policyc_bin=
extra=()
while (($#)); do
  case "$1" in
    --batch) batch=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --busy-core) busy_core=$2; shift 2 ;;
    --markdown) markdown=$2; shift 2 ;;
    --policyc) policyc_bin=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n 2,17p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "contention.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
((${#models[@]})) || models=("$POLICYC_ROOT/examples/models/atari_cnn.onnx" "$POLICYC_ROOT/examples/models/impala_cnn.onnx")
if (($(nproc) < 2)); then
  echo "contention.sh: needs at least two cores (this machine has $(nproc))" >&2
  exit 2
fi

ensure_packages
if [ -n "$policyc_bin" ]; then
  [ -x "$policyc_bin" ] || { echo "contention.sh: --policyc $policyc_bin is not an executable" >&2; exit 2; }
  policyc=$policyc_bin
else
  build_tree "$POLICYC_ROOT/build" -DCMAKE_BUILD_TYPE=Release
  policyc="$POLICYC_ROOT/build/tools/policyc"
fi

work=$(mktemp -d)
busy_pid=
cleanup() {
  [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# One bench run per model, condition and round, its rows as JSON (compiled once: the cache serves
# the rest).
run_bench() {  # condition round model
  local name
  name=$(basename "$3" .onnx)
  log "$name, $1, round $2 of $rounds"
  "$policyc" bench "$3" --batch "$batch" --threads 1,2 --min-time "$min_time" --min-calls 20 \
    --json "$work/$name.$1.$2.json" "${extra[@]}" >/dev/null
}
for ((r = 1; r <= rounds; r++)); do
  for m in "${models[@]}"; do run_bench quiet "$r" "$m"; done
  taskset -c "$busy_core" sh -c 'while :; do :; done' &
  busy_pid=$!
  sleep 0.5
  for m in "${models[@]}"; do run_bench busy "$r" "$m"; done
  kill "$busy_pid"
  wait "$busy_pid" 2>/dev/null || true
  busy_pid=
done

/usr/bin/python3 - "$work" "$rounds" "$markdown" "${models[@]}" <<'EOF'
import json, os, statistics, sys
work, rounds, markdown, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def rows(name, cond):
    """(batch, threads) -> (median over rounds of the median, of the p90)."""
    runs = []
    for r in range(1, rounds + 1):
        with open(os.path.join(work, f"{name}.{cond}.{r}.json")) as f:
            runs.append({(x["batch"], x["threads"]): x for x in json.load(f)["rows"]})
    return {k: (statistics.median(run[k]["median_us"] for run in runs), statistics.median(run[k]["p90_us"] for run in runs))
            for k in runs[0]}
head = ("| model | batch | quiet 1t median | quiet 2t median | quiet speedup | busy 1t median / p90 "
        "| busy 2t median / p90 | busy 2t/1t median | busy 2t/1t p90 |")
lines = [head, "|" + " --- |" * 2 + " ---: |" * 7]
for m in models:
    name = os.path.basename(m)[:-5] if m.endswith(".onnx") else os.path.basename(m)
    q, b = rows(name, "quiet"), rows(name, "busy")
    for batch in sorted({k[0] for k in q}):
        q1, q2, b1, b2 = q[(batch, 1)], q[(batch, 2)], b[(batch, 1)], b[(batch, 2)]
        lines.append(f"| {name} | {batch} | {q1[0]:.0f} | {q2[0]:.0f} | {q1[0] / q2[0]:.2f}x | {b1[0]:.0f} / {b1[1]:.0f} | "
                     f"{b2[0]:.0f} / {b2[1]:.0f} | {b2[0] / b1[0]:.2f} | {b2[1] / b1[1]:.2f} |")
text = "\n".join(lines) + "\n"
print(f"times in microseconds, each the median of {rounds} rounds; 'busy': a busy loop pinned to one of the cores")
print(text, end="")
if markdown:
    with open(markdown, "w") as f:
        f.write(text)
EOF
