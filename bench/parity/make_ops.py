#!/usr/bin/python3
"""Writes the one-op graphs bench/parity/run.sh times through both backends (ONNX, batch dynamic):
every op kind of the op table at a policy-sized shape, and the reductions and softmax at the
widths 64, 256, 1024 and 4096 (their time must grow linearly with the width)."""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

F = TensorProto.FLOAT
WIDTHS = (64, 256, 1024, 4096)


def save_model(out, name, nodes, inputs, inits=(), out_type=F, opset=13):
    g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", out_type, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    save(m, os.path.join(out, name + ".onnx"))


def vec(name, *shape):
    return helper.make_tensor_value_info(name, F, ["batch", *shape])


def const(rng, name, *shape, scale=0.1):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    w = 256
    # Pointwise: unary, then binary against a second input of the same shape.
    for op, attrs in [("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("Exp", {}), ("Log", {}), ("Sqrt", {}), ("Abs", {}),
                      ("Neg", {}), ("Erf", {}), ("Softplus", {}), ("Elu", {"alpha": 1.0}), ("Selu", {}),
                      ("LeakyRelu", {"alpha": 0.01}), ("HardSigmoid", {}), ("Sin", {}), ("Cos", {}), ("Atan", {}),
                      ("Floor", {}), ("Ceil", {}), ("Round", {}), ("Reciprocal", {}), ("Softsign", {})]:
        save_model(out, op.lower(), [helper.make_node(op, ["x"], ["y"], **attrs)], [vec("x", w)])
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Min", "Max"]:
        save_model(out, op.lower(), [helper.make_node(op, ["x", "z"], ["y"])], [vec("x", w), vec("z", w)])
    save_model(out, "mod", [helper.make_node("Mod", ["x", "z"], ["y"], fmod=1)], [vec("x", w), vec("z", w)])
    # Reductions and normalisations over the last axis, at every width.
    for width in WIDTHS:
        x = [vec("x", width)]
        save_model(out, f"softmax_{width}", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], x)
        save_model(out, f"log_softmax_{width}", [helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)], x)
        for op in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp"]:
            nodes = [helper.make_node(op, ["x"], ["y"], axes=[-1], keepdims=1)] if op != "ReduceSum" else \
                [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)]
            inits = [numpy_helper.from_array(np.array([-1], np.int64), "axes")] if op == "ReduceSum" else []
            save_model(out, f"{op.lower()}_{width}", nodes, x, inits)
        for op in ["ArgMax", "ArgMin"]:
            save_model(out, f"{op.lower()}_{width}", [helper.make_node(op, ["x"], ["y"], axis=-1, keepdims=1)], x,
                       out_type=TensorProto.INT64)
        ln = [const(rng, "g", width), const(rng, "b", width)]
        save_model(out, f"layer_norm_{width}", [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)], x,
                   [const(rng, "g", width), const(rng, "b", width)], opset=17)
        # The global average pool of a [batch, 1, s, s] feature map with s*s = width: one channel,
        # so that at batch 64 its largest input is 1 MB like the other sweeps' and stays in a
        # core's L2. With 16 channels (16 MB) the last step measured the memory, not the kernel
        # (3.8x per doubling in one run, 2.3x in another, the same code); with 4 (4 MB) it did on
        # a Sapphire Rapids host (2 MB of L2 a core, an L3 at 26 GB/s a core: 2.9x, both backends).
        s = int(round(width ** 0.5))
        save_model(out, f"global_avg_pool_{s * s}", [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [vec("x", 1, s, s)])
    # Linear algebra, pooling, normalisation and data movement at policy sizes.
    save_model(out, "linear_256x256", [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [vec("x", 256)],
               [const(rng, "w", 256, 256), const(rng, "b", 256)])
    save_model(out, "matmul_64x64", [helper.make_node("MatMul", ["x", "w"], ["y"])], [vec("x", 64)], [const(rng, "w", 64, 64)])
    img = [vec("x", 16, 21, 21)]
    save_model(out, "conv3x3_16_32", [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], img,
               [const(rng, "w", 32, 16, 3, 3), const(rng, "b", 32)])
    save_model(out, "conv_depthwise", [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16)],
               img, [const(rng, "w", 16, 1, 3, 3)])
    save_model(out, "max_pool3x3s2", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], img)
    save_model(out, "avg_pool2x2", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], img)
    save_model(out, "batch_norm", [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], img,
               [const(rng, "s", 16), const(rng, "b", 16), const(rng, "m", 16), numpy_helper.from_array(np.ones(16, np.float32), "v")])
    save_model(out, "transpose", [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], img)
    save_model(out, "concat", [helper.make_node("Concat", ["x", "z"], ["y"], axis=1)], [vec("x", 128), vec("z", 128)])
    save_model(out, "slice", [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])], [vec("x", 256)],
               [numpy_helper.from_array(np.array([16], np.int64), n) if n == "st" else
                numpy_helper.from_array(np.array([200 if n == "en" else 1], np.int64), n) for n in ("st", "en", "ax")])
    save_model(out, "pad", [helper.make_node("Pad", ["x", "p"], ["y"])], img,
               [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")])
    save_model(out, "gather", [helper.make_node("Gather", ["t", "i"], ["y"], axis=0)],
               [helper.make_tensor_value_info("i", TensorProto.INT64, ["batch", 8])], [const(rng, "t", 1000, 32)])
    # A 3x3 conv the heuristic runs as winograd_f23 (conv3x3_16_32's 11 tiles across do not divide 32).
    save_model(out, "conv3x3_32_32_winograd",
               [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], [vec("x", 32, 16, 16)],
               [const(rng, "w", 32, 32, 3, 3), const(rng, "b", 32)])


if __name__ == "__main__":
    main(sys.argv[1])
