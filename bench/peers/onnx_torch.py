"""An ONNX graph as a torch.nn.Module, for the PyTorch peers of bench/peers/run.sh.

The module runs the ONNX nodes in order with the torch functions PyTorch's own modules call
(F.linear, F.conv2d, ...), so eager mode costs what the equivalent nn.Module costs, and
torch.jit.trace records exactly those calls for the TorchScript peer.
"""
import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F


class UnsupportedOp(Exception):
    pass


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads2d(pads):
    """ONNX [top, left, bottom, right] -> (symmetric (h, w) or None, F.pad's (left, right, top, bottom))."""
    if not pads:
        return (0, 0), None
    t, l, b, r = pads
    if t == b and l == r:
        return (t, l), None
    return (0, 0), (l, r, t, b)


def _conv(x, w, b, a):
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise UnsupportedOp("Conv with auto_pad")
    sym, asym = _pads2d(a.get("pads"))
    if asym:
        x = F.pad(x, asym)
    return F.conv2d(x, w, b, stride=tuple(a.get("strides", (1, 1))), padding=sym,
                    dilation=tuple(a.get("dilations", (1, 1))), groups=a.get("group", 1))


def _max_pool(x, a):
    k = tuple(a["kernel_shape"])
    sym, asym = _pads2d(a.get("pads"))
    if asym:
        x = F.pad(x, asym, value=float("-inf"))
    return F.max_pool2d(x, k, stride=tuple(a.get("strides", k)), padding=sym, ceil_mode=bool(a.get("ceil_mode", 0)))


def _gemm(x, w, b, a):
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if a.get("transA", 0):
        x = x.t()
    if a.get("transB", 0) and alpha == 1.0 and (b is None or beta == 1.0):
        return F.linear(x, w, b)  # what nn.Linear calls
    y = x @ (w.t() if a.get("transB", 0) else w)
    if alpha != 1.0:
        y = y * alpha
    if b is not None:
        y = y + (b * beta if beta != 1.0 else b)
    return y


def _flatten(x, a):
    axis = a.get("axis", 1)
    return x.reshape(int(np.prod(x.shape[:axis])) if axis else 1, -1)


OPS = {
    "Gemm": lambda i, a: _gemm(i[0], i[1], i[2] if len(i) > 2 else None, a),
    "MatMul": lambda i, a: torch.matmul(i[0], i[1]),
    "Conv": lambda i, a: _conv(i[0], i[1], i[2] if len(i) > 2 else None, a),
    "MaxPool": lambda i, a: _max_pool(i[0], a),
    "AveragePool": lambda i, a: F.avg_pool2d(i[0], tuple(a["kernel_shape"]), tuple(a.get("strides", a["kernel_shape"]))),
    "GlobalAveragePool": lambda i, a: F.adaptive_avg_pool2d(i[0], 1),
    "Relu": lambda i, a: F.relu(i[0]),
    "Tanh": lambda i, a: torch.tanh(i[0]),
    "Sigmoid": lambda i, a: torch.sigmoid(i[0]),
    "Add": lambda i, a: i[0] + i[1],
    "Sub": lambda i, a: i[0] - i[1],
    "Mul": lambda i, a: i[0] * i[1],
    "Div": lambda i, a: i[0] / i[1],
    "Flatten": lambda i, a: _flatten(i[0], a),
    "Softmax": lambda i, a: F.softmax(i[0], dim=a.get("axis", -1)),
    "Identity": lambda i, a: i[0],
}


class OnnxModule(torch.nn.Module):
    def __init__(self, path):
        super().__init__()
        model = onnx.load(path)
        g = model.graph
        self._names = {}
        for k, init in enumerate(g.initializer):
            key = f"w{k}"
            self.register_buffer(key, torch.from_numpy(onnx.numpy_helper.to_array(init).copy()))
            self._names[init.name] = key
        init_names = set(self._names)
        self.input_names = [i.name for i in g.input if i.name not in init_names]
        self.output_names = [o.name for o in g.output]
        self._nodes = []
        for n in g.node:
            if n.op_type not in OPS:
                raise UnsupportedOp(f"{path}: ONNX op {n.op_type} (node '{n.name}') has no PyTorch equivalent in the peer")
            self._nodes.append((OPS[n.op_type], list(n.input), list(n.output), _attrs(n)))

    def forward(self, *inputs):
        env = dict(zip(self.input_names, inputs))
        for name, key in self._names.items():
            env[name] = getattr(self, key)
        for fn, ins, outs, attrs in self._nodes:
            env[outs[0]] = fn([env[i] if i else None for i in ins], attrs)
        outs = tuple(env[o] for o in self.output_names)
        return outs[0] if len(outs) == 1 else outs
