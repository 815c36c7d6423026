#!/usr/bin/env bash
# A pass's FileCheck test on a small .pir graph: runs the passes the file's `# PASSES:` line names
# (`policyc dump FILE --passes P --stage optimized`) and checks the printed graph against the
# file's own CHECK lines. The .pir parser reads the CHECK lines as comments.
#   run.sh POLICYC FILE.pir FILECHECK
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 POLICYC FILE.pir FILECHECK" >&2
  exit 2
fi
passes=$(sed -n 's/^# PASSES: *//p' "$2")
if [[ -z $passes ]]; then
  echo "$2: no '# PASSES:' line" >&2
  exit 2
fi
"$1" dump "$2" --passes "$passes" --stage optimized | "$3" "$2"
