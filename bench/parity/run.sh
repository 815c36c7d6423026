#!/usr/bin/env bash
# The backend parity guard (docs/performance.md, "Backend parity"): the example models, the policy
# zoo (examples/zoo, unless --no-zoo) and one-op graphs of every op kind (reductions and softmax at
# widths 64..4096) through both backends with --profile; per-kernel times compared (no kernel of
# either backend over 1.25x the other's) and every width sweep checked for linear growth. Prints a
# markdown report; exit 1 when a bar fails.
#   bench/parity/run.sh [OUT_DIR] [--no-zoo] [--batch 1,64] [--min-time 0.3] [--confirm 2] [--reuse]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
out="$POLICYC_ROOT/build/bench-parity"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  out="$1"
  shift
fi
zoo=("$POLICYC_ROOT"/examples/zoo/*.onnx)
args=()
for a in "$@"; do
  if [ "$a" = --no-zoo ]; then zoo=(); else args+=("$a"); fi
done
ensure_packages
build_tree "$POLICYC_ROOT/build" -DCMAKE_BUILD_TYPE=Release >&2
mkdir -p "$out/ops"
/usr/bin/python3 "$POLICYC_ROOT/bench/parity/make_ops.py" "$out/ops"
export POLICYC_CACHE_DIR="$out/cache"
exec /usr/bin/python3 "$POLICYC_ROOT/bench/parity/parity.py" "$POLICYC_ROOT/build/tools/policyc" "$out/json" "${args[@]}" \
  "$POLICYC_ROOT"/examples/models/*.onnx "${zoo[@]}" "$out"/ops/*.onnx
