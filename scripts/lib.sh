# Shared by scripts/demo and scripts/test: install what is missing (Debian 12, as root) and build.
# Sourced, not run.

POLICYC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Every Debian package the build and the test suite need (see README.md, the end of "Layout").
POLICYC_PACKAGES=(
  g++ cmake ninja-build
  llvm-19-dev llvm-19-tools libzstd-dev lld-19
  libdnnl-dev ocl-icd-opencl-dev
  libfmt-dev catch2 libcli11-dev nlohmann-json3-dev
  libonnx-dev libprotobuf-dev libonnx-testdata
  python3-dev python3-numpy python3-onnx pybind11-dev
  python3-torch  # the rollout example and from_torch compare with PyTorch
  python3-distributed  # examples/distributed: rollouts on Dask's distributed scheduler
  libopenblas0   # PyTorch's BLAS (libblas.so.3) for the peer benchmarks, instead of the reference BLAS
  graphviz       # the debug directory's pictures (dot -Tsvg) and `policyc dump --format svg`
  python3-matplotlib  # bench/plot.py: `policyc bench --plot` and the peers' plots
  chromium       # the test that opens the debug report in a headless browser
  pkgconf        # the install test builds examples/embed_c with `pkg-config --cflags --libs policyc`
)

# What scripts/fuzz (and CI's fuzzing) adds: Debian's clang with its libFuzzer and sanitizer runtimes.
POLICYC_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_packages() {
  install_missing "${POLICYC_PACKAGES[@]}"
}
ensure_fuzz_packages() {
  install_missing "${POLICYC_FUZZ_PACKAGES[@]}"
}

install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing ${#missing[@]} missing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# build_tree DIR [cmake options...]: configure (once, or again when options are given), then
# build everything with Ninja.
build_tree() {
  local dir="$1"
  shift
  if [ ! -f "$dir/build.ninja" ] || [ $# -gt 0 ]; then
    log "configuring $dir"
    cmake -S "$POLICYC_ROOT" -B "$dir" -G Ninja "$@" >/dev/null
  fi
  log "building $dir"
  cmake --build "$dir" -- -j"$(nproc)"
}
