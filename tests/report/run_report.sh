#!/usr/bin/env bash
# The debug report as a person sees it: a profiled `policyc bench --debug-dir` of MODEL, then its
# index.html opened in headless Chromium (tests/report/check_html.py): no console error, no broken
# link, a screenshot that shows something.
#
#   run_report.sh POLICYC MODEL [BACKEND]
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 POLICYC MODEL [BACKEND]" >&2
  exit 2
fi
policyc=$1
model=$2
backend=${3:-llvm}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export POLICYC_CACHE_DIR="$dir/cache"
"$policyc" bench "$model" --backend "$backend" --batch 1,4 --threads 1,2 --min-time 0 --min-calls 5 --warmup 1 \
  --profile --debug-dir "$dir/debug" >/dev/null
for f in index.html graph_optimized.svg kernels.svg profile.json; do
  [[ -s "$dir/debug/$f" ]] || { echo "run_report.sh: the debug directory has no $f" >&2; exit 1; }
done
grep -q 'id="profile"' "$dir/debug/index.html" || { echo "run_report.sh: the report shows no profile" >&2; exit 1; }
/usr/bin/python3 "$here/check_html.py" "$dir/debug/index.html" --screenshot "$dir/screenshot.png" --timeout 120
