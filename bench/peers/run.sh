#!/usr/bin/env bash
# Benchmarks policyc against PyTorch eager, TorchScript and ONNX Runtime in one run, with this
# machine's roofline; one table per model and thread count, and a CSV.
#
#   bench/peers/run.sh [MODEL.onnx ... | fusion] [--batch 1,4,16,64,256] [--threads 1,2]
#                      [--peers eager,torchscript,ort,policyc] [--min-time 1] [--csv peers.csv]
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
exec /usr/bin/python3 "$POLICYC_ROOT/bench/peers/peers.py" "$@"
