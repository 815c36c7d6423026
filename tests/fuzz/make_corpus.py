#!/usr/bin/python3
"""Writes the fuzzers' seed corpora into tests/fuzz/corpus/<harness>/ (committed; rerun to refresh).

onnx_import: small models of every operator family the importer converts; pir_parser: the same
graphs as .pir text (weights inline); npy_reader: arrays of every dtype, rank and header version;
so_checks: a hand-written model's shared object (and cuts of it) for the ELF checks, and
descriptor seeds. Needs /usr/bin/python3 with numpy and onnx, a C compiler, and build/tools/policyc.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
POLICYC = os.path.join(ROOT, "build", "tools", "policyc")


def out(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def model(name, nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def w(name, shape, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def models():
    x4 = vi("x", ["batch", 4])
    y = vi("y", None)
    yield "mlp", model("mlp", [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Tanh", ["h"], ["y"])],
                       [x4], [y], [w("w", (3, 4)), w("b", (3,))])
    for op in ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Softplus", "Erf", "Sqrt", "Log", "Elu", "LeakyRelu", "Selu"]:
        yield op.lower(), model(op, [helper.make_node(op, ["x"], ["y"])], [x4], [y])
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Min", "Max", "Equal", "Less", "Greater"]:
        yield op.lower(), model(op, [helper.make_node(op, ["x", "c"], ["y"])], [x4], [y], [w("c", (4,), 1)])
    yield "softmax", model("softmax", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [x4], [y])
    yield "logsoftmax", model("ls", [helper.make_node("LogSoftmax", ["x"], ["y"], axis=1)], [x4], [y])
    yield "argmax", model("am", [helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], [x4], [vi("y", None, TensorProto.INT64)])
    yield "reduce", model("rm", [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])], [x4], [y])
    yield "clip", model("clip", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [x4], [y],
                        [numpy_helper.from_array(np.float32(-1), "lo"), numpy_helper.from_array(np.float32(1), "hi")])
    img = vi("img", ["batch", 2, 6, 6])
    yield "conv", model("conv", [helper.make_node("Conv", ["img", "k", "kb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
                                 helper.make_node("Relu", ["c"], ["y"])], [img], [y], [w("k", (3, 2, 3, 3)), w("kb", (3,))])
    yield "maxpool", model("mp", [helper.make_node("MaxPool", ["img"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], [img], [y])
    yield "avgpool", model("ap", [helper.make_node("AveragePool", ["img"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], [img], [y])
    yield "gap", model("gap", [helper.make_node("GlobalAveragePool", ["img"], ["y"])], [img], [y])
    yield "bn", model("bn", [helper.make_node("BatchNormalization", ["img", "s", "bb", "m", "v"], ["y"])], [img], [y],
                      [w("s", (2,)), w("bb", (2,)), w("m", (2,)), numpy_helper.from_array(np.ones(2, np.float32), "v")])
    yield "flatten", model("fl", [helper.make_node("Flatten", ["img"], ["y"], axis=1)], [img], [y])
    yield "reshape", model("rs", [helper.make_node("Reshape", ["img", "shape"], ["y"])], [img], [y],
                           [numpy_helper.from_array(np.array([-1, 72], np.int64), "shape")])
    yield "transpose", model("tp", [helper.make_node("Transpose", ["img"], ["y"], perm=[0, 2, 3, 1])], [img], [y])
    yield "concat", model("cat", [helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], [x4], [y])
    yield "split", model("sp", [helper.make_node("Split", ["x"], ["a", "b"], axis=1)], [x4], [vi("a", None), vi("b", None)])
    yield "slice", model("sl", [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])], [x4], [y],
                         [numpy_helper.from_array(np.array([1], np.int64), n) if n != "en" else numpy_helper.from_array(np.array([3], np.int64), n)
                          for n in ["st", "en", "ax"]])
    yield "pad", model("pad", [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], [x4], [y],
                       [numpy_helper.from_array(np.array([0, 1, 0, 2], np.int64), "pads")])
    yield "gather", model("ga", [helper.make_node("Gather", ["t", "i"], ["y"], axis=0)], [vi("i", ["batch", 2], TensorProto.INT64)], [y],
                          [w("t", (5, 3))])
    yield "cast", model("cast", [helper.make_node("Cast", ["u"], ["y"], to=TensorProto.FLOAT)], [vi("u", ["batch", 4], TensorProto.UINT8)], [y])
    yield "where", model("wh", [helper.make_node("Greater", ["x", "c"], ["m"]), helper.make_node("Where", ["m", "x", "c"], ["y"])], [x4], [y],
                         [w("c", (4,), 2)])
    yield "matmul", model("mm", [helper.make_node("MatMul", ["x", "m"], ["y"])], [x4], [y], [w("m", (4, 2))])
    yield "layernorm", model("ln", [helper.make_node("LayerNormalization", ["x", "g", "bb"], ["y"], axis=-1)], [x4], [y],
                             [w("g", (4,)), w("bb", (4,))], opset=17)
    yield "shape_subgraph", model("shp", [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                                          helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
                                          helper.make_node("Concat", ["n1", "minus1"], ["ns"], axis=0),
                                          helper.make_node("Reshape", ["x", "ns"], ["y"])], [x4], [y],
                                  [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
                                   numpy_helper.from_array(np.array([-1], np.int64), "minus1")])
    # Older opsets, which go through ONNX's checker and version converter (shapes given, as the
    # checker wants): legacy broadcasting, Reshape's and Pad's attributes that became inputs.
    yield "opset6_add_broadcast", model("old_add", [helper.make_node("Add", ["x", "c"], ["h"], broadcast=1),
                                                    helper.make_node("Relu", ["h"], ["y"])],
                                        [x4], [vi("y", ["batch", 4])], [w("c", (4,), 3)], opset=6)
    yield "opset9_conv_pad", model("old_conv", [helper.make_node("Pad", ["img"], ["p"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.0),
                                                helper.make_node("Conv", ["p", "k"], ["y"])],
                                   [img], [vi("y", ["batch", 3, 6, 6])], [w("k", (3, 2, 3, 3))], opset=9)
    yield "opset7_prelu", model("old_prelu", [helper.make_node("PRelu", ["img", "sl"], ["y"])], [img], [vi("y", ["batch", 2, 6, 6])],
                                [w("sl", (2, 1, 1), 4)], opset=7)
    yield "opset17_new_ops", model("new_ops", [helper.make_node("Trilu", ["x"], ["t"], upper=0), helper.make_node("Cos", ["t"], ["c"]),
                                               helper.make_node("ReduceLogSumExp", ["c"], ["y"], axes=[1])],
                                   [vi("x", ["batch", 4, 4])], [y], opset=17)
    yield from newer_ops(x4, img, y)


def newer_ops(x4, img, y):
    """Operators composed of IR ops at import: attention's einsum and batch-multiple shape
    arithmetic, resizes, transposed convolutions, selections and scatters."""
    seq = vi("s", ["batch", 3, 4])
    yield "einsum", model("es", [helper.make_node("Einsum", ["s", "s"], ["y"], equation="bik,bjk->bij")], [seq], [y], opset=12)
    yield "batch_times_heads", model("bh", [
        helper.make_node("Shape", ["s"], ["sh"]), helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        helper.make_node("Mul", ["n", "three0"], ["n3"]), helper.make_node("Unsqueeze", ["n3", "ax0"], ["n31"]),
        helper.make_node("Concat", ["n31", "two1", "two1"], ["ns"], axis=0),
        helper.make_node("Reshape", ["s", "ns"], ["r"]), helper.make_node("Softmax", ["r"], ["r2"], axis=-1),
        helper.make_node("Reshape", ["r2", "back"], ["y"])], [seq], [y],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(3, np.int64), "three0"),
         numpy_helper.from_array(np.array([0], np.int64), "ax0"),
         numpy_helper.from_array(np.array([2], np.int64), "two1"), numpy_helper.from_array(np.array([-1, 3, 4], np.int64), "back")])
    yield "resize", model("rz", [helper.make_node("Resize", ["img", "", "sc"], ["y"], mode="linear")], [img], [y],
                          [numpy_helper.from_array(np.array([1, 1, 1.5, 0.5], np.float32), "sc")])
    yield "convtranspose", model("ct", [helper.make_node("ConvTranspose", ["img", "k"], ["y"], strides=[2, 2], pads=[1, 1, 0, 0])],
                                 [img], [y], [w("k", (2, 3, 3, 3))])
    yield "topk", model("tk", [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=1)], [x4], [y, vi("i", None, TensorProto.INT64)],
                        [numpy_helper.from_array(np.array([2], np.int64), "k")])
    yield "cumsum", model("cs", [helper.make_node("CumSum", ["x", "ax"], ["y"], exclusive=1)], [x4], [y],
                          [numpy_helper.from_array(np.array(1, np.int64), "ax")], opset=14)
    yield "scatternd", model("sn", [helper.make_node("ScatterND", ["t", "i", "u"], ["y"], reduction="add")], [vi("u", [2, 3])], [y],
                             [w("t", (4, 3)), numpy_helper.from_array(np.array([[1], [1]], np.int64), "i")], opset=16)


def main():
    for name, m in models():
        data = m.SerializeToString()
        out("onnx_import", name + ".onnx", data)
        path = os.path.join(CORPUS, "onnx_import", name + ".onnx")
        if os.path.exists(POLICYC):
            text = subprocess.run([POLICYC, "dump", path], capture_output=True).stdout
            if text and b"@" not in text:
                out("pir_parser", name + ".pir", text)
    rng = np.random.default_rng(0)
    for dtype in [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.bool_]:
        for shape in [(), (3,), (2, 5), (1, 0, 4), (2, 1, 2, 1)]:
            a = (rng.standard_normal(shape) * 10).astype(dtype)
            path = os.path.join(CORPUS, "npy_reader", f"{np.dtype(dtype).name}_{'x'.join(map(str, shape)) or 'scalar'}.npy")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            np.save(path, a)
    with open(os.path.join(CORPUS, "npy_reader", "v2.npy"), "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype=np.float32).reshape(2, 3), version=(2, 0))
    np.save(os.path.join(CORPUS, "npy_reader", "fortran.npy"), np.asfortranarray(np.ones((2, 3), np.float32)))
    so = os.path.join(CORPUS, "affine.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-Os", "-s", "-I", os.path.join(ROOT, "runtime", "include"),
                    os.path.join(ROOT, "tests", "data", "abi", "affine_model.c"), "-o", so], check=True)
    with open(so, "rb") as f:
        elf = f.read()
    os.remove(so)
    out("so_checks", "elf_whole", b"\x00" + elf)
    for cut in [64, 512, len(elf) // 2]:
        out("so_checks", f"elf_cut_{cut}", b"\x00" + elf[:cut])
    for i in range(4):
        out("so_checks", f"descriptor_{i}", b"\x01" + rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
    print("wrote", sum(len(fs) for _, _, fs in os.walk(CORPUS)), "seed files into", CORPUS, file=sys.stderr)


if __name__ == "__main__":
    main()
