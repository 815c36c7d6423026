#!/bin/sh
# README.md's commands for examples/embed_c, then a check of both programs' output against the
# reference interpreter on the same observation.
# usage: run_example.sh POLICYC CC SOURCE_DIR WORK_DIR [BACKEND (cpp)]
set -eu
policyc=$1 cc=$2 src=$3 work=$4 backend=${5:-cpp}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
cp "$src/examples/embed_c/main.c" "$src/examples/embed_c/any_model.c" .
"$policyc" compile "$src/examples/models/ppo_mlp.onnx" -o ppo_mlp.so --header ppo_mlp.h --backend "$backend"
"$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror main.c ./ppo_mlp.so -o ppo_demo
"$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror -I "$src/runtime/include" any_model.c ./ppo_mlp.so -o any_model
./ppo_demo | tee demo.txt
./any_model | tee any_model.txt

# The fixed observation of both programs, through the interpreter.
python3 - "$policyc" "$src" <<'PY'
import struct, subprocess, sys
policyc, src = sys.argv[1], sys.argv[2]
obs = [0.1 * ((i % 11) - 5) for i in range(17)]
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 17), }"
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open("obs.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<17f", *obs))
subprocess.run([policyc, "run", src + "/examples/models/ppo_mlp.onnx", "--backend", "interp", "--input", "obs=obs.npy",
                "--output-dir", "ref"], check=True, stdout=subprocess.DEVNULL)

def npy(path):
    data = open(path, "rb").read()
    start = 10 + struct.unpack("<H", data[8:10])[0]
    return list(struct.unpack("<%df" % ((len(data) - start) // 4), data[start:]))

ref = {"action_dist_inputs": npy("ref/action_dist_inputs.npy"), "vf": npy("ref/vf.npy")}
demo = {}
for line in open("demo.txt"):
    name, values = line.split(":")
    demo[name] = [float(v) for v in values.split()]
generic = {}
for line in open("any_model.txt").readlines()[1:]:
    name, values = line.split(" = ")
    generic[name.split(":")[0]] = [float(v) for v in values.split() if v != "..."]
for name, want in ref.items():
    for got in (demo[name], generic[name]):
        for g, w in zip(got, want):
            if abs(g - w) > 1e-4 + 1e-4 * abs(w):
                sys.exit("%s: %g differs from the interpreter's %g" % (name, g, w))
print("ppo_demo and any_model match the interpreter")
PY
