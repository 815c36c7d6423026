"""An ONNX graph as a torch.nn.Module, for the PyTorch peers of bench/peers/run.sh.

The module runs the ONNX nodes in order with the torch functions PyTorch's own modules call
(F.linear, F.conv2d, ...), so eager mode costs what the equivalent nn.Module costs, and
torch.jit.trace records exactly those calls for the TorchScript peer.

What is known when the module is built is not recomputed per call: Constant nodes become buffers,
and the inputs that ONNX passes as tensors but PyTorch takes as Python values (Reshape's shape,
Squeeze's axes, Clip's bounds, a scalar operand of Add or Pow, ...) are read once when they are
constants, as an nn.Module's code would hold them. A graph with ops the translator lacks raises
UnsupportedOp naming all of them (`.ops`) before anything runs.
"""
import functools

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn.functional as F


class UnsupportedOp(Exception):
    """The graph uses ONNX ops (or an op in a form) the translator has no PyTorch equivalent for;
    `ops` lists the op types, for a one-line note."""

    def __init__(self, msg, ops=()):
        super().__init__(msg)
        self.ops = list(ops)


# ONNX TensorProto element types that torch 1.13 has (no uint16/32/64, no strings).
TORCH_DTYPES = {
    onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.INT8: torch.int8, onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32, onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.BOOL: torch.bool,
}


def _attrs(node):
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _ints(v):
    """A shape, axes or split given as a constant (numpy) or computed (tensor): Python ints."""
    return [int(t) for t in np.asarray(v.tolist() if isinstance(v, torch.Tensor) else v).reshape(-1)]


def _tensor(v, like=None):
    """A static input (numpy) where a tensor is needed."""
    if isinstance(v, torch.Tensor) or v is None:
        return v
    t = torch.as_tensor(np.asarray(v))
    return t.to(like.dtype) if like is not None and t.is_floating_point() and like.is_floating_point() else t


def _axis(axis, rank):
    return axis + rank if axis < 0 else axis


# ---- convolution and pooling: 1-D, 2-D and 3-D alike

def _pads(x, a, kernel, strides, dilations):
    """(symmetric padding per spatial dim, F.pad's tuple for the rest or None). ONNX pads are
    [x1_begin, x2_begin, ..., x1_end, x2_end]; auto_pad SAME_* is resolved on this input's shape."""
    nd = len(kernel)
    auto = a.get("auto_pad", "NOTSET")
    if auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small = total // 2
            begin.append(small if auto == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        pads = begin + end
    else:
        pads = list(a.get("pads", [0] * (2 * nd)))
    begin, end = pads[:nd], pads[nd:]
    if begin == end:
        return tuple(begin), None
    flat = []
    for b, e in zip(reversed(begin), reversed(end)):  # F.pad: the last dimension first
        flat += [b, e]
    return (0,) * nd, tuple(flat)


def _conv(i, a):
    x, w, b = i[0], i[1], i[2] if len(i) > 2 else None
    nd = w.dim() - 2
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(nd)
    if fn is None:
        raise UnsupportedOp(f"Conv with {nd} spatial dimensions", ["Conv"])
    strides, dil = tuple(a.get("strides", (1,) * nd)), tuple(a.get("dilations", (1,) * nd))
    sym, asym = _pads(x, a, tuple(w.shape[2:]), strides, dil)
    if asym:
        x = F.pad(x, asym)
    return fn(x, w, b, stride=strides, padding=sym, dilation=dil, groups=a.get("group", 1))


def _max_pool(i, a):
    x = i[0]
    if a.get("_n_out", 1) > 1:
        raise UnsupportedOp("MaxPool's Indices output", ["MaxPool"])
    k = tuple(a["kernel_shape"])
    nd = len(k)
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}.get(nd)
    if fn is None:
        raise UnsupportedOp(f"MaxPool with {nd} spatial dimensions", ["MaxPool"])
    strides, dil = tuple(a.get("strides", (1,) * nd)), tuple(a.get("dilations", (1,) * nd))
    sym, asym = _pads(x, a, k, strides, dil)
    if asym or any(p > kk // 2 for p, kk in zip(sym, k)):  # PyTorch pads at most half a kernel
        flat = asym or tuple(p for s in reversed(sym) for p in (s, s))
        x, sym = F.pad(x, flat, value=float("-inf")), (0,) * nd
    return fn(x, k, stride=strides, padding=sym, dilation=dil, ceil_mode=bool(a.get("ceil_mode", 0)))


def _avg_pool(i, a):
    x = i[0]
    k = tuple(a["kernel_shape"])
    nd = len(k)
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}.get(nd)
    if fn is None:
        raise UnsupportedOp(f"AveragePool with {nd} spatial dimensions", ["AveragePool"])
    strides = tuple(a.get("strides", (1,) * nd))
    sym, asym = _pads(x, a, k, strides, (1,) * nd)
    include = bool(a.get("count_include_pad", 0))
    if asym:
        if not include:
            raise UnsupportedOp("AveragePool with asymmetric pads that are not counted", ["AveragePool"])
        x, sym = F.pad(x, asym), (0,) * nd
    return fn(x, k, stride=strides, padding=sym, ceil_mode=bool(a.get("ceil_mode", 0)), count_include_pad=include)


def _global_pool(x, reduce):
    if reduce == "mean" and x.dim() == 4:
        return F.adaptive_avg_pool2d(x, 1)  # what nn.AdaptiveAvgPool2d(1) calls
    dims = tuple(range(2, x.dim()))
    return x.mean(dim=dims, keepdim=True) if reduce == "mean" else x.amax(dim=dims, keepdim=True)


# ---- dense layers and normalisation

def _gemm(i, a):
    x, w, b = i[0], i[1], i[2] if len(i) > 2 else None
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


def _layer_norm(i, a):
    x, scale, bias = i[0], i[1], i[2] if len(i) > 2 else None
    axis = _axis(a.get("axis", -1), x.dim())
    eps = a.get("epsilon", 1e-5)
    shape = tuple(x.shape[axis:])
    if tuple(scale.shape) == shape and (bias is None or tuple(bias.shape) == shape):
        y = F.layer_norm(x, shape, scale, bias, eps)  # what nn.LayerNorm calls
    else:  # scale and bias that only broadcast to the normalised shape
        y = F.layer_norm(x, shape, None, None, eps) * scale
        if bias is not None:
            y = y + bias
    if a.get("_n_out", 1) == 1:
        return y
    dims = tuple(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    inv_std = torch.rsqrt(x.var(dim=dims, unbiased=False, keepdim=True) + eps)
    return y, mean, inv_std


def _batch_norm(i, a):
    if a.get("training_mode", 0):
        raise UnsupportedOp("BatchNormalization in training mode", ["BatchNormalization"])
    x, scale, bias, mean, var = i[:5]
    return F.batch_norm(x, mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))


def _softmax(i, a, fn):
    x = i[0]
    if a["_opset"] >= 13:
        return fn(x, dim=a.get("axis", -1))
    # before opset 13: the input as a 2-D matrix split at `axis`, normalised over its rows
    axis = _axis(a.get("axis", 1), x.dim())
    return fn(x.reshape(int(np.prod(x.shape[:axis])), -1), dim=1).reshape(x.shape)


# ---- element-wise

def _div(i, a):
    x, y = i[0], i[1]
    x_int = not (x.is_floating_point() if isinstance(x, torch.Tensor) else isinstance(x, float))
    y_int = not (y.is_floating_point() if isinstance(y, torch.Tensor) else isinstance(y, float))
    if x_int and y_int:  # ONNX integer division truncates
        return torch.div(_tensor(x), y, rounding_mode="trunc")
    return x / y


def _clip(i, a):
    x = i[0]
    if a["_opset"] < 11:
        lo, hi = a.get("min"), a.get("max")
    else:
        lo, hi = (i[1] if len(i) > 1 else None), (i[2] if len(i) > 2 else None)
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        return torch.clamp(x, _tensor(lo, x), _tensor(hi, x))
    lo = None if lo is None else float(np.asarray(lo)) if x.is_floating_point() else int(np.asarray(lo))
    hi = None if hi is None else float(np.asarray(hi)) if x.is_floating_point() else int(np.asarray(hi))
    if lo is None and hi is None:
        return x
    return torch.clamp(x, lo, hi)


def _hard_sigmoid(x, a):
    alpha, beta = a.get("alpha", 0.2), a.get("beta", 0.5)
    if abs(alpha - 1 / 6) < 1e-6 and beta == 0.5:
        return F.hardsigmoid(x)  # nn.Hardsigmoid exports as alpha 1/6
    return torch.clamp(x * alpha + beta, 0, 1)


def _selu(x, a):
    alpha, gamma = a.get("alpha", 1.67326319217681884765625), a.get("gamma", 1.05070102214813232421875)
    if abs(alpha - 1.6732632) < 1e-6 and abs(gamma - 1.0507010) < 1e-6:
        return F.selu(x)
    return gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))


def _variadic(i, fn):
    return functools.reduce(fn, i)


# ---- reductions

def _reduce_axes(i, a):
    """A Reduce*'s axes: an input from opset 18 (ReduceSum: 13), an attribute before."""
    if len(i) > 1 and i[1] is not None:
        return _ints(i[1])
    return list(a["axes"]) if "axes" in a else []


def _reduce(i, a, kind):
    x = i[0]
    axes = _reduce_axes(i, a)
    keep = bool(a.get("keepdims", 1))
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.dim()))
    dims = tuple(_axis(d, x.dim()) for d in axes)
    if kind == "Mean":
        return x.mean(dim=dims, keepdim=keep)
    if kind == "Sum":
        return x.sum(dim=dims, keepdim=keep)
    if kind == "Max":
        return x.amax(dim=dims, keepdim=keep)
    if kind == "Min":
        return x.amin(dim=dims, keepdim=keep)
    if kind == "SumSquare":
        return (x * x).sum(dim=dims, keepdim=keep)
    if kind == "L1":
        return x.abs().sum(dim=dims, keepdim=keep)
    if kind == "L2":
        return torch.sqrt((x * x).sum(dim=dims, keepdim=keep))
    if kind == "LogSumExp":
        return torch.logsumexp(x, dim=dims, keepdim=keep)
    if kind == "Prod":  # torch.prod takes one dimension at a time
        for d in sorted(dims, reverse=True):
            x = x.prod(dim=d, keepdim=keep)
        return x
    raise UnsupportedOp(f"Reduce{kind}", [f"Reduce{kind}"])


def _arg(i, a, fn):
    x = i[0]
    axis, keep = _axis(a.get("axis", 0), x.dim()), bool(a.get("keepdims", 1))
    if a.get("select_last_index", 0):  # ties go to the last index: search the reversed axis
        return x.shape[axis] - 1 - fn(x.flip(axis), dim=axis, keepdim=keep)
    return fn(x, dim=axis, keepdim=keep)


# ---- shapes

def _flatten(i, a):
    x = i[0]
    axis = _axis(a.get("axis", 1), x.dim())
    if axis == 1 and x.dim() >= 2:
        return x.flatten(1)  # what nn.Flatten calls
    return x.reshape(int(np.prod(x.shape[:axis])) if axis else 1, -1)


def _reshape(i, a):
    x, shape = i[0], _ints(i[1])
    if not a.get("allowzero", 0):  # 0: this dimension of the input
        shape = [x.shape[k] if s == 0 else s for k, s in enumerate(shape)]
    return x.reshape(shape)


def _squeeze(i, a):
    x = i[0]
    axes = _ints(i[1]) if len(i) > 1 and i[1] is not None else a.get("axes")
    if axes is None:
        return x.squeeze()
    for d in sorted((_axis(d, x.dim()) for d in axes), reverse=True):
        x = x.squeeze(d)
    return x


def _unsqueeze(i, a):
    x = i[0]
    axes = _ints(i[1]) if len(i) > 1 and i[1] is not None else list(a["axes"])
    rank = x.dim() + len(axes)
    for d in sorted(_axis(d, rank) for d in axes):
        x = x.unsqueeze(d)
    return x


def _split(i, a):
    x = i[0]
    axis = _axis(a.get("axis", 0), x.dim())
    sizes = _ints(i[1]) if len(i) > 1 and i[1] is not None else a.get("split")
    if not sizes:
        n = a.get("num_outputs", a["_n_out"])
        size = -(-x.shape[axis] // n)  # equal parts, the last one smaller when it does not divide
        sizes = [min(size, x.shape[axis] - k * size) for k in range(n)]
    return tuple(torch.split(x, list(sizes), dim=axis))


def _gather(i, a):
    x, idx = i[0], i[1]
    axis = _axis(a.get("axis", 0), x.dim())
    if not isinstance(idx, torch.Tensor) and np.ndim(idx) == 0:
        return x.select(axis, int(idx))
    idx = _tensor(idx)
    if idx.dim() == 0:
        return x.select(axis, int(idx))
    flat = idx.reshape(-1)
    flat = torch.where(flat < 0, flat + x.shape[axis], flat)
    out = torch.index_select(x, axis, flat)
    return out.reshape(tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1:]))


def _slice(i, a):
    x = i[0]
    if a["_opset"] < 10:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes, steps = list(a.get("axes", range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = _ints(i[1]), _ints(i[2])
        axes = _ints(i[3]) if len(i) > 3 and i[3] is not None else list(range(len(starts)))
        steps = _ints(i[4]) if len(i) > 4 and i[4] is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, x.dim())
        n = x.shape[axis]
        start, end = start + n if start < 0 else start, end + n if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), n), min(max(end, 0), n)
            x = x.narrow(axis, start, max(end - start, 0)) if step == 1 else \
                x[(slice(None),) * axis + (slice(start, end, step),)]
        else:  # PyTorch slices have no negative step: gather the indices
            start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
            x = torch.index_select(x, axis, torch.arange(start, end, step, dtype=torch.int64))
    return x


def _expand(i, a):
    x = i[0]
    return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(_ints(i[1]))))


def _pad(i, a):
    x = i[0]
    mode = a.get("mode", "constant")
    if a["_opset"] < 11:
        pads, value = list(a["pads"]), a.get("value", 0.0)
    else:
        pads = _ints(i[1])
        v = i[2] if len(i) > 2 else None
        value = 0.0 if v is None else float(np.asarray(v.tolist() if isinstance(v, torch.Tensor) else v))
    rank = x.dim()
    axes = _ints(i[3]) if len(i) > 3 and i[3] is not None else list(range(rank))
    axes = [_axis(d, rank) for d in axes]
    begin = dict(zip(axes, pads[:len(axes)]))
    end = dict(zip(axes, pads[len(axes):]))
    flat = []
    for d in reversed(range(rank)):
        flat += [begin.get(d, 0), end.get(d, 0)]
    while len(flat) > 2 and flat[-2:] == [0, 0]:  # F.pad's reflect/replicate take only the trailing dims
        flat = flat[:-2]
    torch_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}.get(mode)
    if torch_mode is None:
        raise UnsupportedOp(f"Pad mode {mode}", ["Pad"])
    return F.pad(x, tuple(flat), mode=torch_mode, value=value) if torch_mode == "constant" else \
        F.pad(x, tuple(flat), mode=torch_mode)


def _cast(i, a):
    dtype = TORCH_DTYPES.get(a["to"])
    if dtype is None:
        raise UnsupportedOp(f"Cast to {onnx.TensorProto.DataType.Name(a['to'])}", ["Cast"])
    return i[0].to(dtype)


def _constant_of_shape(i, a):
    value = a.get("value")
    arr = onnx.numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    return torch.full(_ints(i[0]), arr.reshape(-1)[0].item(), dtype=torch.from_numpy(arr.copy()).dtype)


def _range(i, a):
    start, limit, delta = (v.item() if isinstance(v, torch.Tensor) else np.asarray(v).item() for v in i[:3])
    dtype = i[0].dtype if isinstance(i[0], torch.Tensor) else torch.from_numpy(np.asarray(i[0]).copy()).dtype
    return torch.arange(start, limit, delta, dtype=dtype)


def _cumsum(i, a):
    if a.get("exclusive", 0) or a.get("reverse", 0):
        raise UnsupportedOp("CumSum exclusive or reverse", ["CumSum"])
    x = i[0]
    return torch.cumsum(x, dim=_axis(_ints(i[1])[0], x.dim()))


def _dropout(i, a):
    x = i[0]
    return x if a.get("_n_out", 1) == 1 else (x, torch.ones_like(x, dtype=torch.bool))


def _binary(fn):
    return lambda i, a: fn(i[0], i[1])


def _unary(fn):
    return lambda i, a: fn(i[0])


# op type -> (handler(inputs, attrs), indices of inputs read as Python values when they are constants).
# attrs carries the node's attributes, "_opset" (the model's default-domain opset) and "_n_out".
OPS = {
    "Gemm": (_gemm, ()),
    "MatMul": (_binary(torch.matmul), ()),
    "Conv": (_conv, ()),
    "MaxPool": (_max_pool, ()),
    "AveragePool": (_avg_pool, ()),
    "GlobalAveragePool": (lambda i, a: _global_pool(i[0], "mean"), ()),
    "GlobalMaxPool": (lambda i, a: _global_pool(i[0], "max"), ()),
    "BatchNormalization": (_batch_norm, ()),
    "LayerNormalization": (_layer_norm, ()),
    "Einsum": (lambda i, a: torch.einsum(a["equation"], *i), ()),
    # activations
    "Relu": (_unary(F.relu), ()),
    "Tanh": (_unary(torch.tanh), ()),
    "Sigmoid": (_unary(torch.sigmoid), ()),
    "Elu": (lambda i, a: F.elu(i[0], a.get("alpha", 1.0)), ()),
    "Celu": (lambda i, a: F.celu(i[0], a.get("alpha", 1.0)), ()),
    "Selu": (lambda i, a: _selu(i[0], a), ()),
    "LeakyRelu": (lambda i, a: F.leaky_relu(i[0], a.get("alpha", 0.01)), ()),
    "PRelu": (lambda i, a: torch.where(i[0] >= 0, i[0], i[0] * i[1]), ()),
    "Softplus": (_unary(F.softplus), ()),
    "Softsign": (_unary(F.softsign), ()),
    "HardSigmoid": (lambda i, a: _hard_sigmoid(i[0], a), ()),
    "HardSwish": (_unary(F.hardswish), ()),
    "Mish": (_unary(F.mish), ()),
    "Gelu": (lambda i, a: F.gelu(i[0], approximate="tanh" if a.get("approximate") == "tanh" else "none"), ()),
    "Softmax": (lambda i, a: _softmax(i, a, F.softmax), ()),
    "LogSoftmax": (lambda i, a: _softmax(i, a, F.log_softmax), ()),
    # element-wise math; a constant 0-d operand is a Python number, as in `x / 255.0`
    "Add": (lambda i, a: i[0] + i[1], (0, 1)),
    "Sub": (lambda i, a: i[0] - i[1], (0, 1)),
    "Mul": (lambda i, a: i[0] * i[1], (0, 1)),
    "Div": (_div, (0, 1)),
    "Pow": (_binary(torch.pow), (1,)),
    "Mod": (lambda i, a: (torch.fmod if a.get("fmod", 0) else torch.remainder)(i[0], i[1]), ()),
    "Min": (lambda i, a: _variadic(i, torch.minimum), ()),
    "Max": (lambda i, a: _variadic(i, torch.maximum), ()),
    "Sum": (lambda i, a: _variadic(i, torch.add), ()),
    "Mean": (lambda i, a: _variadic(i, torch.add) / len(i), ()),
    "Exp": (_unary(torch.exp), ()),
    "Log": (_unary(torch.log), ()),
    "Sqrt": (_unary(torch.sqrt), ()),
    "Reciprocal": (_unary(torch.reciprocal), ()),
    "Neg": (_unary(torch.neg), ()),
    "Abs": (_unary(torch.abs), ()),
    "Sign": (_unary(torch.sign), ()),
    "Floor": (_unary(torch.floor), ()),
    "Ceil": (_unary(torch.ceil), ()),
    "Round": (_unary(torch.round), ()),
    "Erf": (_unary(torch.erf), ()),
    "Sin": (_unary(torch.sin), ()),
    "Cos": (_unary(torch.cos), ()),
    "Clip": (_clip, (1, 2)),
    "IsNaN": (_unary(torch.isnan), ()),
    "IsInf": (_unary(torch.isinf), ()),
    # comparisons and logic
    "Equal": (_binary(torch.eq), ()),
    "Greater": (_binary(torch.gt), ()),
    "Less": (_binary(torch.lt), ()),
    "GreaterOrEqual": (_binary(torch.ge), ()),
    "LessOrEqual": (_binary(torch.le), ()),
    "Not": (_unary(torch.logical_not), ()),
    "And": (_binary(torch.logical_and), ()),
    "Or": (_binary(torch.logical_or), ()),
    "Xor": (_binary(torch.logical_xor), ()),
    "Where": (lambda i, a: torch.where(i[0], i[1], i[2]), ()),
    # reductions
    **{f"Reduce{k}": ((lambda k: lambda i, a: _reduce(i, a, k))(k), (1,))
       for k in ("Mean", "Sum", "Max", "Min", "Prod", "SumSquare", "L1", "L2", "LogSumExp")},
    "ArgMax": (lambda i, a: _arg(i, a, torch.argmax), ()),
    "ArgMin": (lambda i, a: _arg(i, a, torch.argmin), ()),
    "CumSum": (_cumsum, (1,)),
    # shapes and types
    "Identity": (lambda i, a: i[0], ()),
    "Dropout": (_dropout, ()),
    "Cast": (_cast, ()),
    "Flatten": (_flatten, ()),
    "Reshape": (_reshape, (1,)),
    "Transpose": (lambda i, a: i[0].permute(a.get("perm", list(range(i[0].dim() - 1, -1, -1)))), ()),
    "Squeeze": (_squeeze, (1,)),
    "Unsqueeze": (_unsqueeze, (1,)),
    "Concat": (lambda i, a: torch.cat(list(i), dim=a["axis"]), ()),
    "Split": (_split, (1,)),
    "Gather": (_gather, (1,)),
    "Slice": (_slice, (1, 2, 3, 4)),
    "Expand": (_expand, (1,)),
    "Tile": (lambda i, a: i[0].repeat(_ints(i[1])), (1,)),
    "Pad": (_pad, (1, 2, 3)),
    "Shape": (lambda i, a: torch.tensor(tuple(i[0].shape)[a.get("start", 0):a.get("end", None)], dtype=torch.int64), ()),
    "Size": (lambda i, a: torch.tensor(i[0].numel(), dtype=torch.int64), ()),
    "ConstantOfShape": (_constant_of_shape, (0,)),
    "Range": (_range, (0, 1, 2)),
}


def _constant_value(node):
    """A Constant node's value as numpy."""
    a = node.attribute[0] if node.attribute else None
    if a is None:
        raise UnsupportedOp(f"Constant node '{node.name}' without a value", ["Constant"])
    if a.name == "value":
        return onnx.numpy_helper.to_array(a.t)
    if a.name == "value_float":
        return np.array(a.f, np.float32)
    if a.name == "value_floats":
        return np.array(list(a.floats), np.float32)
    if a.name == "value_int":
        return np.array(a.i, np.int64)
    if a.name == "value_ints":
        return np.array(list(a.ints), np.int64)
    raise UnsupportedOp(f"Constant with {a.name}", ["Constant"])


def _scalar(arr):
    """A 0-d constant as the Python number PyTorch code would write; None for anything else."""
    return arr.item() if isinstance(arr, np.ndarray) and arr.ndim == 0 and arr.dtype != np.bool_ else None


class OnnxModule(torch.nn.Module):
    def __init__(self, path):
        super().__init__()
        model = onnx.load(path)
        g = model.graph
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        missing = {}
        for n in g.node:
            key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
            if key != "Constant" and key not in OPS:
                missing.setdefault(key, n.name)
        if missing:
            ops = sorted(missing)
            where = ", ".join(f"{op} (node '{missing[op]}')" for op in ops)
            raise UnsupportedOp(f"{path}: the translator has no ONNX op{'s' if len(ops) > 1 else ''} {where}", ops)

        consts = {}  # name -> numpy value of every initializer and Constant output
        for init in g.initializer:
            consts[init.name] = onnx.numpy_helper.to_array(init)
        for n in g.node:
            if n.op_type == "Constant":
                consts[n.output[0]] = _constant_value(n)
        init_names = {i.name for i in g.initializer}
        self.input_names = [i.name for i in g.input if i.name not in init_names]
        self.output_names = [o.name for o in g.output]
        for name in self.input_names:
            consts.pop(name, None)  # an input that shadows an initializer is an input

        # Every constant a node reads as a tensor is a buffer (freeze() makes them constants of the
        # TorchScript graph); those read as Python values live in `_static`, outside the module's state.
        self._buffer_keys = {}  # constant's name -> buffer attribute
        self._static = {"": None}  # "" is an absent optional input
        self._nodes = []
        for n in g.node:
            if n.op_type == "Constant":
                continue
            fn, static = OPS[n.op_type]
            ins = []
            for k, name in enumerate(n.input):
                if name not in consts:
                    ins.append(name)
                    continue
                value = consts[name] if k in static else None
                if value is not None and n.op_type in ("Add", "Sub", "Mul", "Div", "Pow"):
                    value = _scalar(value)  # a tensor operand stays a tensor
                if value is None:
                    self._buffer(name, consts[name])
                    ins.append(name)
                else:
                    key = f"\0static{len(self._static)}"
                    self._static[key] = value
                    ins.append(key)
            attrs = _attrs(n)
            attrs["_opset"] = opset
            attrs["_n_out"] = sum(1 for o in n.output if o)
            self._nodes.append((fn, ins, list(n.output), attrs))
        for name in self.output_names:
            if name in consts:
                self._buffer(name, consts[name])

    def _buffer(self, name, value):
        if name not in self._buffer_keys:
            key = f"c{len(self._buffer_keys)}"
            self.register_buffer(key, torch.from_numpy(np.array(value)))
            self._buffer_keys[name] = key

    def forward(self, *inputs):
        env = dict(self._static)
        for name, key in self._buffer_keys.items():
            env[name] = getattr(self, key)
        env.update(zip(self.input_names, inputs))
        for fn, ins, outs, attrs in self._nodes:
            y = fn([env[i] for i in ins], attrs)
            if isinstance(y, (tuple, list)):
                for name, v in zip(outs, y):
                    if name:
                        env[name] = v
            else:
                env[outs[0]] = y
        outs = tuple(env[o] for o in self.output_names)
        return outs[0] if len(outs) == 1 else outs
