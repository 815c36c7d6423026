#!/usr/bin/env bash
# Times policyc on hostile sizes (docs/performance.md, "Hostile sizes"): a 50,000-node Relu chain,
# a 1,000-input Concat and a 2,000-layer MLP: import + dump, the optimised graph, the .pir
# round trip, a JIT-compiled run (the debug directory's compile_times.txt), and the C++ backend's
# build (wall time and peak memory). Needs build/tools/policyc and /usr/bin/python3 with onnx.
#   bench/hostile/run.sh [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
policyc="$root/build/tools/policyc"
out="${1:-$root/build/bench-hostile}"
mkdir -p "$out"
/usr/bin/python3 "$root/bench/hostile/make_models.py" "$out"
export POLICYC_CACHE_DIR="$out/cache"

timed() {  # timed LABEL COMMAND...: wall seconds and peak resident memory of one command
  local label="$1"
  shift
  /usr/bin/time -f "%e %M" -o "$out/time.txt" "$@" > /dev/null 2> "$out/stderr.txt" || { cat "$out/stderr.txt" >&2; exit 1; }
  read -r seconds kb < "$out/time.txt"
  printf '| %-28s | %-34s | %8.2f | %6d |\n' "$model" "$label" "$seconds" $((kb / 1024))
}

printf '| %-28s | %-34s | %8s | %6s |\n' model step "wall s" "MiB"
printf '|%s|%s|%s|%s|\n' "------------------------------" "------------------------------------" "----------:" "-------:"
for model in chain50000 concat1000 mlp2000; do
  m="$out/$model.onnx"
  timed "import + dump (.pir text)" "$policyc" dump "$m"
  timed "dump --stage optimized" "$policyc" dump "$m" --stage optimized
  timed "dump --stage post-fusion" "$policyc" dump "$m" --stage post-fusion
  "$policyc" dump "$m" -o "$out/$model.pir" 2> /dev/null
  timed "parse + print the .pir" "$policyc" dump "$out/$model.pir"
  rm -rf "$out/debug-$model"
  timed "run --backend llvm (JIT)" "$policyc" run "$m" --random --debug-dir "$out/debug-$model"
  timed "compile --backend cpp" "$policyc" compile "$m" --backend cpp -o "$out/$model.so"
done
echo
for model in chain50000 concat1000 mlp2000; do
  echo "$model, JIT compile stages (compile_times.txt):"
  sed 's/^/    /' "$out/debug-$model/compile_times.txt"
done
