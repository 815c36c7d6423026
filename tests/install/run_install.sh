#!/usr/bin/env bash
# `cmake --install BUILD --prefix P` into a temporary prefix, then everything a user of the
# installed policyc does: the command line from P/bin, examples/embed_c built with
# find_package(policyc) (policyc::runtime) and with pkg-config, and `import policyc` from the
# directory P's Python searches (site.getsitepackages([P])), all without the build or source tree.
#
#   run_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

for f in bin/policyc libexec/policyc/policyc-onnx-upgrade lib/libpolicyc_runtime.a include/policyc/runtime/policyc_model.h include/policyc/runtime/loader.h \
         lib/cmake/policyc/policycConfig.cmake lib/cmake/policyc/policycTargets.cmake lib/pkgconfig/policyc.pc \
         share/policyc/bench/plot.py share/policyc/bench/peers/torch_baseline.py; do
  [[ -f "$prefix/$f" ]] || { echo "run_install.sh: $f was not installed" >&2; exit 1; }
done

# The installed compiler, from a directory with nothing of the source tree.
cd "$work"
export POLICYC_CACHE_DIR="$work/cache"
mkdir -p "$work/model"
"$prefix/bin/policyc" --version
"$prefix/bin/policyc" compile "$src/examples/models/ppo_mlp.onnx" -o "$work/model/ppo_mlp.so" --header "$work/model/ppo_mlp.h" >/dev/null
# An opset-9 model goes through the installed helper (ONNX's version converter in a process of its own).
/usr/bin/python3 - "$work/old_opset.onnx" <<'PY'
import sys
from onnx import TensorProto, helper, save
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Add", ["h", "x"], ["y"])], "old", [x], [y])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]), sys.argv[1])
PY
"$prefix/bin/policyc" compile "$work/old_opset.onnx" -o "$work/model/old_opset.so" >/dev/null

# find_package(policyc) -> policyc::runtime, in a project of its own.
cmake -S "$src/examples/embed_c" -B "$work/embed" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DPOLICYC_MODEL="$work/model/ppo_mlp.so" >"$work/embed.log"
cmake --build "$work/embed" >>"$work/embed.log"
"$work/embed/any_model" | tee "$work/any_model.txt"
"$work/embed/ppo_demo" | tee "$work/ppo_demo.txt"
grep -q "vf: f32\[1,1\]" "$work/any_model.txt"
grep -q "^vf: " "$work/ppo_demo.txt"

# pkg-config, the same program.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -std=c99 -Wall -Werror $(pkg-config --cflags policyc) "$src/examples/embed_c/any_model.c" "$work/model/ppo_mlp.so" \
  $(pkg-config --libs policyc) -o "$work/any_model_pc"
cmp <("$work/any_model_pc") "$work/any_model.txt"

# The Python module where the prefix's Python looks for packages.
site=$(/usr/bin/python3 - "$prefix" <<'PY'
import os, site, sys
dirs = [d for d in site.getsitepackages([sys.argv[1]]) if os.path.isdir(os.path.join(d, "policyc"))]
print(dirs[0] if len(dirs) == 1 else "")
PY
)
[[ -n "$site" ]] || { echo "run_install.sh: the Python module is in none (or several) of the prefix's site directories" >&2; exit 1; }
PYTHONPATH="$site" /usr/bin/python3 - "$src" "$site" "$work/old_opset.onnx" <<'PY'
import sys
import numpy as np
import policyc
assert policyc.__file__.startswith(sys.argv[2] + "/policyc/"), policyc.__file__  # the installed one, not the build's
p = policyc.compile(sys.argv[1] + "/examples/models/ppo_mlp.onnx")
out = p(np.zeros((2, 17), np.float32))
assert out[0].shape == (2, 12) and out[1].shape == (2, 1), [o.shape for o in out]
old = policyc.compile(sys.argv[3])
x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
assert np.array_equal(old(x)[0], np.maximum(x, 0) + x)
print("python:", policyc.__file__)
PY
echo "run_install.sh: OK ($prefix)"
