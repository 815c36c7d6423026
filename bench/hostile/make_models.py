#!/usr/bin/python3
"""Writes the hostile-size models bench/hostile/run.sh times: a chain of N Relu nodes, a Concat of
M inputs, and an MLP of L Linear+Tanh layers (ONNX), into the directory given."""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def save_model(path, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, os.path.splitext(os.path.basename(path))[0], inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    save(m, path)


def main(out, chain=50000, concat=1000, layers=2000):
    os.makedirs(out, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"r{i - 1}"], [f"r{i}"]) for i in range(chain)]
    save_model(os.path.join(out, f"chain{chain}.onnx"), nodes, [x], [helper.make_tensor_value_info(f"r{chain - 1}", TensorProto.FLOAT, None)])
    ins = [helper.make_tensor_value_info(f"i{j}", TensorProto.FLOAT, ["batch", 4]) for j in range(concat)]
    save_model(os.path.join(out, f"concat{concat}.onnx"), [helper.make_node("Concat", [f"i{j}" for j in range(concat)], ["y"], axis=1)],
               ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.25, f"w{i}"),
                  numpy_helper.from_array(np.zeros(16, np.float32), f"b{i}")]
        nodes += [helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"], transB=1), helper.make_node("Tanh", [f"g{i}"], [f"t{i}"])]
        prev = f"t{i}"
    save_model(os.path.join(out, f"mlp{layers}.onnx"), nodes, [x], [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)


if __name__ == "__main__":
    main(sys.argv[1])
