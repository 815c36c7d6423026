#!/usr/bin/env bash
# Benchmarks policyc against PyTorch eager, TorchScript and ONNX Runtime in one run, with this
# machine's roofline; one table per model and thread count, a CSV, and plots of it beside the CSV
# (bench/plot.py peers: latency_<model>_<threads>t and speedup_<model>, .svg and .png).
#
#   bench/peers/run.sh [MODEL.onnx ... | fusion] [--zoo] [--batch 1,4,16,64,256] [--threads 1,2]
#                      [--peers eager,torchscript,ort,policyc] [--min-time 1] [--csv peers.csv]
#                      [--markdown FILE.md] [--summary-csv FILE.csv] [--policyc-flags '--target x86-64-v3']
#
# Any ONNX file, any subset of the peers; --zoo adds every model of tests/data/zoo/manifest.json
# and a summary across the models (each peer's median and its ratio to policyc's per batch size,
# geometric means; printed, as CSV beside --csv, and with --markdown as a Markdown table):
#
#   bench/peers/run.sh --zoo --peers ort,policyc --batch 1,64 --threads 1 --markdown zoo.md
#
# Installs what is missing: Debian's python3-torch and libopenblas0 (PyTorch's BLAS is whatever
# libblas.so.3 is selected; OpenBLAS rather than the reference BLAS), Node.js, and the npm package
# onnxruntime-node@1.20.1 (--ignore-scripts: its tarball already holds libonnxruntime.so) in the
# policyc cache directory. Builds policyc if needed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

ensure_packages
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  log "installing Node.js and npm"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
ORT_VERSION=1.20.1
ORT_PREFIX="${POLICYC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/policyc}/peers/ort-$ORT_VERSION"
if [ ! -f "$ORT_PREFIX/node_modules/onnxruntime-node/package.json" ]; then
  log "installing onnxruntime-node@$ORT_VERSION into $ORT_PREFIX"
  mkdir -p "$ORT_PREFIX"
  npm install --prefix "$ORT_PREFIX" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "onnxruntime-node@$ORT_VERSION" >/dev/null
fi
export POLICYC_ORT_NODE="$ORT_PREFIX/node_modules/onnxruntime-node"

build_tree "$POLICYC_ROOT/build" -DCMAKE_BUILD_TYPE=Release
export PYTHONPATH="$POLICYC_ROOT/build/python${PYTHONPATH:+:$PYTHONPATH}"

# The CSV's path, as peers.py will read it (--csv FILE or --csv=FILE; default peers.csv), for the plots.
csv=peers.csv
prev=
for arg in "$@"; do
  case "$arg" in
    -h|--help) exec /usr/bin/python3 "$POLICYC_ROOT/bench/peers/peers.py" "$@" ;;  # nothing to plot
    --csv=*) csv=${arg#--csv=} ;;
  esac
  [ "$prev" = --csv ] && csv=$arg
  prev=$arg
done
# Plot only a CSV this run wrote: peers.py writes none when no peer ran at all, and an older file
# of the same name is not this run's.
before=$(stat -c %y -- "$csv" 2>/dev/null || true)
status=0
/usr/bin/python3 "$POLICYC_ROOT/bench/peers/peers.py" "$@" || status=$?
after=$(stat -c %y -- "$csv" 2>/dev/null || true)
if [ -n "$after" ] && [ "$after" != "$before" ]; then
  # peers.py's status comes first (1: outputs that differ, or a peer that failed, written to the
  # CSV all the same); a failure to plot fails the run only when the benchmark itself passed.
  plot_status=0
  /usr/bin/python3 "$POLICYC_ROOT/bench/plot.py" peers --csv "$csv" --out "$(dirname -- "$csv")" --format svg,png ||
    plot_status=$?
  [ "$status" -ne 0 ] || status=$plot_status
fi
exit "$status"
