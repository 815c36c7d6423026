#!/usr/bin/env bash
# Golden test of the debug directory: `policyc compile MODEL --backend cpp --debug-dir D` writes exactly the files
# listed in <model>.debug_dir.files, and D/output_code.cpp carries the provenance comments that
# <model>.output_code.check expects (FileCheck).
#
#   run_debug_dir.sh POLICYC MODEL FILES CHECKFILE [FILECHECK]
set -euo pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: $0 POLICYC MODEL FILES CHECKFILE [FILECHECK]" >&2
  exit 2
fi
policyc=$1
model=$2
files=$3
check=$4
filecheck=${5:-${FILECHECK:-/usr/lib/llvm-19/bin/FileCheck}}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$policyc" compile "$model" --backend cpp -o "$dir/model.so" --debug-dir "$dir/debug" >/dev/null
(cd "$dir/debug" && ls -1 | LC_ALL=C sort) | diff -u "$files" -
"$filecheck" "$check" --input-file "$dir/debug/output_code.cpp"
# Both graphs reload and run.
"$policyc" run "$dir/debug/graph_optimized.pir" --random >/dev/null
"$policyc" run "$dir/debug/graph_imported.pir" --random >/dev/null
