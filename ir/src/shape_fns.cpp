// Shape functions of the operator table: output types from input types and attributes.
//
// Every function follows the ONNX operator of the same name (opset 13+, attributes in place of
// constant inputs, conventions documented in ops.def) and propagates the symbolic `batch` dim.
// A shape that is not expressible with static dims and a plain `batch` (2*batch, batch*16) is
// rejected: the compiler only handles shapes linear in batch with coefficient one.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "op_impls.h"
#include "policyc/ir/error.h"
#include "policyc/support/sizes.h"

namespace policyc::ir::impl {
namespace {

std::string_view opName(const OpCall& call) { return opInfo(call.op).name; }

void requireFloat(const OpCall& call, const TensorType& type, std::string_view what) {
  if (!isFloat(type.dtype)) {
    fail("{}: {} must be f32 or f64, got {}", opName(call), what, dtypeName(type.dtype));
  }
}

void requireSameDType(const OpCall& call, const TensorType& a, const TensorType& b, std::string_view whatA,
                      std::string_view whatB) {
  if (a.dtype != b.dtype) {
    fail("{}: {} and {} must have the same dtype, got {} and {}", opName(call), whatA, whatB, dtypeName(a.dtype),
         dtypeName(b.dtype));
  }
}

void requireNotBool(const OpCall& call, const TensorType& type) {
  if (type.dtype == DType::Bool) fail("{}: bool operands are not supported", opName(call));
}

void requireRank(const OpCall& call, const TensorType& type, size_t rank, std::string_view what) {
  if (type.rank() != rank) fail("{}: {} must have rank {}, got {}", opName(call), what, rank, type.str());
}

// A dim that must be static (spatial dims of windows, channel counts, ...).
int64_t staticDim(const OpCall& call, Dim dim, std::string_view what) {
  if (dim.isBatch()) fail("{}: {} must be static, got batch", opName(call), what);
  return dim.value();
}

// A product of dims as static * batch^power.
struct DimProduct {
  int64_t statics = 1;
  int power = 0;
  void mul(Dim d) {
    if (d.isBatch()) {
      ++power;
    } else {
      std::optional<int64_t> next = sizes::mul(statics, d.value());
      if (!next) fail("a product of dims overflows 64 bits");
      statics = *next;
    }
  }
  std::string str() const {
    if (power == 0) return std::to_string(statics);
    std::string b = power == 1 ? "batch" : fmt::format("batch^{}", power);
    return statics == 1 ? b : fmt::format("{}*{}", statics, b);
  }
};

DimProduct productOf(const Shape& shape, size_t begin, size_t end) {
  DimProduct p;
  for (size_t i = begin; i < end; ++i) p.mul(shape[i]);
  return p;
}

// The single Dim a product stands for, when it is expressible.
Dim dimOfProduct(const OpCall& call, const DimProduct& p, const Shape& input) {
  if (p.power == 0) return Dim(p.statics);
  if (p.power == 1 && p.statics == 1) return Dim::batch();
  fail("{}: a dim of the result would be {} for input {}; the result is not linear in batch", opName(call), p.str(),
       shapeStr(input));
}

// Numpy broadcasting with the op's name in the error.
Shape broadcast(const OpCall& call, const Shape& a, const Shape& b) {
  try {
    return broadcastShapes(a, b);
  } catch (const Error& e) {
    fail("{}: {}", opName(call), e.what());
  }
}

// Whether `from` broadcasts to exactly `to` (unidirectional broadcasting, as ONNX calls it).
bool broadcastsTo(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    Dim f = from[from.size() - 1 - i];
    if (f != Dim(1) && f != to[to.size() - 1 - i]) return false;
  }
  return true;
}

std::vector<int64_t> normalizeAxes(const OpCall& call, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, rank);
    if (std::find(out.begin(), out.end(), n) != out.end()) fail("{}: axis {} appears twice", opName(call), a);
    out.push_back(n);
  }
  return out;
}

// Attribute lists of the windowed ops, defaulted and checked against the spatial rank.
std::vector<int64_t> spatialList(const OpCall& call, const char* name, size_t n, int64_t fallback, size_t factor = 1) {
  std::vector<int64_t> v = windowAttr(call.attrs, name, n * factor, fallback);
  if (v.size() != n * factor) {
    fail("{}: {} has {} values, expected {} for {} spatial dims", opName(call), name, v.size(), n * factor, n);
  }
  return v;
}

// Output extent of a sliding window along one spatial axis (conv and pools).
int64_t windowOutput(const OpCall& call, size_t axis, int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                     int64_t padBegin, int64_t padEnd, bool ceilMode) {
  // Every term within 2^31 - 1 keeps the arithmetic below far from overflowing int64.
  for (auto [name, v] : {std::pair<const char*, int64_t>{"kernel_shape", kernel}, {"strides", stride}, {"dilations", dilation},
                         {"pads", padBegin}, {"pads", padEnd}}) {
    if (v > sizes::kMaxElements) fail("{}: {} must be at most 2^31-1, got {}", opName(call), name, v);
  }
  if (kernel < 1) fail("{}: kernel_shape must be positive, got {}", opName(call), kernel);
  if (stride < 1) fail("{}: strides must be positive, got {}", opName(call), stride);
  if (dilation < 1) fail("{}: dilations must be positive, got {}", opName(call), dilation);
  if (padBegin < 0 || padEnd < 0) fail("{}: pads must not be negative, got {} and {}", opName(call), padBegin, padEnd);
  int64_t extent = dilation * (kernel - 1) + 1;
  int64_t span = in + padBegin + padEnd - extent;
  if (span < 0) {
    fail("{}: window of extent {} does not fit spatial axis {} of size {} with pads {}+{}", opName(call), extent, axis,
         in, padBegin, padEnd);
  }
  int64_t out = span / stride + 1;
  // ceil_mode: one more window when the last one would stop short of the padded end, unless
  // that window would start in the end padding (onnx/onnx#5741, as onnxruntime does).
  if (ceilMode && span % stride != 0) {
    ++out;
    if ((out - 1) * stride >= in + padBegin) --out;
  }
  return out;
}

}  // namespace

Shape broadcastShapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right; missing leading dims act as 1.
    Dim da = i < rank - a.size() ? Dim(1) : a[i - (rank - a.size())];
    Dim db = i < rank - b.size() ? Dim(1) : b[i - (rank - b.size())];
    if (da == db) {
      out[i] = da;
    } else if (da == Dim(1)) {
      out[i] = db;
    } else if (db == Dim(1)) {
      out[i] = da;
    } else {
      fail("shapes {} and {} do not broadcast ({} vs {})", shapeStr(a), shapeStr(b), da.str(), db.str());
    }
  }
  return out;
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) fail("axis {} is out of range for rank {}", axis, rank);
  return axis < 0 ? axis + rank : axis;
}

SliceRange sliceRange(int64_t start, int64_t end, int64_t step, int64_t size) {
  if (size == 0) return {0, 0};
  // Negative starts and ends count from the end (INT64_MIN + size cannot overflow).
  if (start < 0) start += size;
  if (end < 0) end += size;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, size);
    end = std::clamp<int64_t>(end, 0, size);
    return {start, end > start ? (end - start - 1) / step + 1 : 0};
  }
  start = std::clamp<int64_t>(start, 0, size - 1);
  end = std::clamp<int64_t>(end, -1, size - 1);
  if (start <= end) return {start, 0};
  if (step == std::numeric_limits<int64_t>::min()) return {start, 1};
  return {start, (start - end - 1) / -step + 1};
}

bool isFullSlice(int64_t start, int64_t end, int64_t step) {
  // Exporters write "to the end" as INT32_MAX, INT64_MAX or similar: any bound past 2^31 - 1
  // covers every batch size.
  constexpr int64_t kHuge = std::numeric_limits<int32_t>::max();
  if (step == 1) return (start == 0 || start <= -kHuge) && end >= kHuge;
  if (step == -1) return (start == -1 || start >= kHuge) && end <= -kHuge;
  return false;
}

// ---- linear algebra and convolution

std::vector<TensorType> inferGemm(const OpCall& call) {
  const TensorType& a = call.inputs[0];
  const TensorType& b = call.inputs[1];
  requireRank(call, a, 2, "A");
  requireRank(call, b, 2, "B");
  requireSameDType(call, a, b, "A", "B");
  requireNotBool(call, a);
  bool transA = attrInt(call.attrs, "trans_a") != 0;
  bool transB = attrInt(call.attrs, "trans_b") != 0;
  Dim m = a.shape[transA ? 1 : 0];
  Dim ka = a.shape[transA ? 0 : 1];
  Dim kb = b.shape[transB ? 1 : 0];
  Dim n = b.shape[transB ? 0 : 1];
  if (ka != kb) {
    fail("gemm: inner dims differ: A {}{} has K={}, B {}{} has K={}", a.str(), transA ? " (transposed)" : "", ka.str(),
         b.str(), transB ? " (transposed)" : "", kb.str());
  }
  TensorType out{a.dtype, {m, n}};
  if (call.inputs.size() == 3) {
    const TensorType& c = call.inputs[2];
    requireSameDType(call, a, c, "A", "C");
    if (!broadcastsTo(c.shape, out.shape)) fail("gemm: C {} does not broadcast to the result {}", c.str(), out.str());
  }
  return {out};
}

// linear(x [..., K], w [N, K], b [N]?) -> [..., N].
std::vector<TensorType> inferLinear(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const TensorType& w = call.inputs[1];
  requireSameDType(call, x, w, "X", "W");
  requireNotBool(call, x);
  if (x.rank() == 0) fail("linear: X must have rank >= 1, got {}", x.str());
  requireRank(call, w, 2, "W [N, K]");
  Dim k = x.shape.back();
  if (w.shape[1] != k) {
    fail("linear: X {} has K={}, but W {} is [N, K] with K={}", x.str(), k.str(), w.str(), w.shape[1].str());
  }
  Dim n = w.shape[0];
  if (call.inputs.size() == 3) {
    const TensorType& b = call.inputs[2];
    requireSameDType(call, x, b, "X", "B");
    if (b.shape != Shape{n}) fail("linear: B must be [{}], got {}", n.str(), b.str());
  }
  Shape out = x.shape;
  out.back() = n;
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferMatMul(const OpCall& call) {
  const TensorType& a = call.inputs[0];
  const TensorType& b = call.inputs[1];
  requireSameDType(call, a, b, "A", "B");
  requireNotBool(call, a);
  if (a.rank() == 0 || b.rank() == 0) fail("matmul: operands must have rank >= 1, got {} and {}", a.str(), b.str());
  // 1-D operands: A gets a leading 1, B a trailing 1, both removed from the result.
  Shape sa = a.shape;
  Shape sb = b.shape;
  if (a.rank() == 1) sa = Shape{Dim(1), a.shape[0]};
  if (b.rank() == 1) sb.push_back(Dim(1));
  Dim ka = sa[sa.size() - 1];
  Dim kb = sb[sb.size() - 2];
  if (ka != kb) fail("matmul: inner dims differ: {} has K={}, {} has K={}", a.str(), ka.str(), b.str(), kb.str());
  Shape batchA(sa.begin(), sa.end() - 2);
  Shape batchB(sb.begin(), sb.end() - 2);
  Shape out = broadcast(call, batchA, batchB);
  if (a.rank() != 1) out.push_back(sa[sa.size() - 2]);
  if (b.rank() != 1) out.push_back(sb[sb.size() - 1]);
  return {TensorType{a.dtype, out}};
}

std::vector<TensorType> inferConv(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const TensorType& w = call.inputs[1];
  requireFloat(call, x, "X");
  requireSameDType(call, x, w, "X", "W");
  if (x.rank() < 3) fail("conv: X must be (N, C, spatial...) with at least one spatial dim, got {}", x.str());
  if (w.rank() != x.rank()) fail("conv: W {} must have the rank of X {}", w.str(), x.str());
  size_t nsp = x.rank() - 2;
  int64_t group = attrInt(call.attrs, "group");
  if (group < 1) fail("conv: group must be positive, got {}", group);
  int64_t channels = staticDim(call, x.shape[1], "input channels");
  int64_t outChannels = staticDim(call, w.shape[0], "W's output channels");
  int64_t wChannels = staticDim(call, w.shape[1], "W's input channels");
  if (channels != wChannels * group) {
    fail("conv: input channels {} do not match weight's {} x group {}", channels, wChannels, group);
  }
  if (outChannels % group != 0) fail("conv: output channels {} are not divisible by group {}", outChannels, group);
  std::vector<int64_t> kernel = attrInts(call.attrs, "kernel_shape");
  if (kernel.empty()) {
    for (size_t i = 0; i < nsp; ++i) kernel.push_back(staticDim(call, w.shape[2 + i], "W's kernel dims"));
  } else if (kernel.size() != nsp) {
    fail("conv: kernel_shape has {} values, expected {} for {} spatial dims", kernel.size(), nsp, nsp);
  } else {
    for (size_t i = 0; i < nsp; ++i) {
      if (w.shape[2 + i] != Dim(kernel[i])) {
        fail("conv: kernel_shape {} does not match W {}", fmt::join(kernel, "x"), w.str());
      }
    }
  }
  if (call.inputs.size() == 3) {
    const TensorType& bias = call.inputs[2];
    requireSameDType(call, x, bias, "X", "B");
    if (bias.shape != Shape{Dim(outChannels)}) fail("conv: B must be [{}], got {}", outChannels, bias.str());
  }
  std::vector<int64_t> strides = spatialList(call, "strides", nsp, 1);
  std::vector<int64_t> dilations = spatialList(call, "dilations", nsp, 1);
  std::vector<int64_t> pads = spatialList(call, "pads", nsp, 0, 2);
  Shape out{x.shape[0], Dim(outChannels)};
  for (size_t i = 0; i < nsp; ++i) {
    int64_t in = staticDim(call, x.shape[2 + i], "spatial dims");
    out.push_back(windowOutput(call, i, in, kernel[i], strides[i], dilations[i], pads[i], pads[nsp + i], false));
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferPool(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  // ONNX MaxPool takes 8-bit integers too (frames before they are cast); averaging needs floats.
  if (call.op == Op::AvgPool || x.dtype == DType::Bool || x.dtype == DType::I32 || x.dtype == DType::I64) {
    requireFloat(call, x, "X");
  }
  if (x.rank() < 3)
    fail("{}: X must be (N, C, spatial...) with at least one spatial dim, got {}", opName(call), x.str());
  size_t nsp = x.rank() - 2;
  const std::vector<int64_t>& kernel = attrInts(call.attrs, "kernel_shape");
  if (kernel.size() != nsp) {
    fail("{}: kernel_shape has {} values, expected {} for {} spatial dims", opName(call), kernel.size(), nsp, nsp);
  }
  std::vector<int64_t> strides = spatialList(call, "strides", nsp, 1);
  std::vector<int64_t> dilations = spatialList(call, "dilations", nsp, 1);
  std::vector<int64_t> pads = spatialList(call, "pads", nsp, 0, 2);
  bool ceilMode = attrInt(call.attrs, "ceil_mode") != 0;
  Shape out{x.shape[0], x.shape[1]};
  for (size_t i = 0; i < nsp; ++i) {
    int64_t in = staticDim(call, x.shape[2 + i], "spatial dims");
    out.push_back(windowOutput(call, i, in, kernel[i], strides[i], dilations[i], pads[i], pads[nsp + i], ceilMode));
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferGlobalPool(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireFloat(call, x, "X");
  if (x.rank() < 3)
    fail("{}: X must be (N, C, spatial...) with at least one spatial dim, got {}", opName(call), x.str());
  Shape out{x.shape[0], x.shape[1]};
  out.resize(x.rank(), Dim(1));
  return {TensorType{x.dtype, out}};
}

// ---- normalisation

std::vector<TensorType> inferBatchNorm(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireFloat(call, x, "X");
  if (x.rank() < 2) fail("batch_norm: X must be (N, C, ...), got {}", x.str());
  Dim channels = x.shape[1];
  static constexpr const char* kNames[] = {"X", "scale", "B", "mean", "var"};
  for (size_t i = 1; i < 5; ++i) {
    const TensorType& p = call.inputs[i];
    requireSameDType(call, x, p, "X", kNames[i]);
    if (p.shape != Shape{channels}) fail("batch_norm: {} must be [{}], got {}", kNames[i], channels.str(), p.str());
  }
  return {x};
}

std::vector<TensorType> inferLayerNorm(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireFloat(call, x, "X");
  int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = normalizeAxis(attrInt(call.attrs, "axis"), rank);
  Shape normalized(x.shape.begin() + axis, x.shape.end());
  static constexpr const char* kNames[] = {"X", "scale", "B"};
  for (size_t i = 1; i < call.inputs.size(); ++i) {
    const TensorType& p = call.inputs[i];
    requireSameDType(call, x, p, "X", kNames[i]);
    if (!broadcastsTo(p.shape, normalized)) {
      fail("layer_norm: {} {} does not broadcast to the normalized shape {}", kNames[i], p.str(), shapeStr(normalized));
    }
  }
  return {x};
}

// ---- elementwise with broadcasting

std::vector<TensorType> inferBroadcast(const OpCall& call) {
  const TensorType& a = call.inputs[0];
  const TensorType& b = call.inputs[1];
  requireSameDType(call, a, b, "A", "B");
  requireNotBool(call, a);
  return {TensorType{a.dtype, broadcast(call, a.shape, b.shape)}};
}

// Pow allows an exponent of another numeric dtype; the result has the base's dtype.
std::vector<TensorType> inferPow(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const TensorType& y = call.inputs[1];
  requireNotBool(call, x);
  requireNotBool(call, y);
  return {TensorType{x.dtype, broadcast(call, x.shape, y.shape)}};
}

std::vector<TensorType> inferCompare(const OpCall& call) {
  const TensorType& a = call.inputs[0];
  const TensorType& b = call.inputs[1];
  requireSameDType(call, a, b, "A", "B");
  if (a.dtype == DType::Bool && call.op != Op::Equal) fail("{}: bool operands are not supported", opName(call));
  return {TensorType{DType::Bool, broadcast(call, a.shape, b.shape)}};
}

std::vector<TensorType> inferLogical(const OpCall& call) {
  const TensorType& a = call.inputs[0];
  const TensorType& b = call.inputs[1];
  if (a.dtype != DType::Bool || b.dtype != DType::Bool) {
    fail("{}: operands must be bool, got {} and {}", opName(call), dtypeName(a.dtype), dtypeName(b.dtype));
  }
  return {TensorType{DType::Bool, broadcast(call, a.shape, b.shape)}};
}

std::vector<TensorType> inferMod(const OpCall& call) {
  std::vector<TensorType> out = inferBroadcast(call);
  if (isFloat(out[0].dtype) && attrInt(call.attrs, "fmod") == 0) {
    fail("{}: {} operands need fmod=1 (fmod=0 is the integer remainder)", opName(call), dtypeName(out[0].dtype));
  }
  return out;
}

std::vector<TensorType> inferExpand(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  Shape shape;
  for (int64_t d : attrInts(call.attrs, "shape")) {
    if (d < -1) fail("{}: shape {} has a negative dim", opName(call), attrValueStr(attrInts(call.attrs, "shape")));
    shape.push_back(d == -1 ? Dim::batch() : Dim(d));
  }
  if (!broadcastsTo(x.shape, shape)) {
    fail("{}: {} does not broadcast to {}", opName(call), shapeStr(x.shape), shapeStr(shape));
  }
  return {TensorType{x.dtype, shape}};
}

std::vector<TensorType> inferWhere(const OpCall& call) {
  const TensorType& cond = call.inputs[0];
  const TensorType& x = call.inputs[1];
  const TensorType& y = call.inputs[2];
  if (cond.dtype != DType::Bool) fail("where: the condition must be bool, got {}", dtypeName(cond.dtype));
  requireSameDType(call, x, y, "X", "Y");
  return {TensorType{x.dtype, broadcast(call, cond.shape, broadcast(call, x.shape, y.shape))}};
}

// ---- elementwise unary

std::vector<TensorType> inferUnary(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  if (call.op != Op::Identity && call.op != Op::Dropout) requireNotBool(call, x);
  return {x};
}

// Float-only unary ops; softmax and log_softmax (also here) check their axis.
std::vector<TensorType> inferUnaryFloat(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireFloat(call, x, "X");
  if (call.op == Op::Softmax || call.op == Op::LogSoftmax) {
    normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(x.rank()));
  }
  return {x};
}

// silu, gelu, hard_swish: float-only, shape-preserving.
std::vector<TensorType> inferActivation(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireFloat(call, x, "X");
  return {x};
}

std::vector<TensorType> inferNot(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  if (x.dtype != DType::Bool) fail("not: X must be bool, got {}", dtypeName(x.dtype));
  return {x};
}

std::vector<TensorType> inferCast(const OpCall& call) {
  const std::string& to = attrString(call.attrs, "to");
  std::optional<DType> dtype = parseDType(to);
  if (!dtype) fail("cast: unknown dtype '{}'", to);
  return {TensorType{*dtype, call.inputs[0].shape}};
}

// ---- reductions

std::vector<TensorType> inferReduce(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireNotBool(call, x);
  int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes = normalizeAxes(call, attrInts(call.attrs, "axes"), rank);
  bool keepdims = attrInt(call.attrs, "keepdims") != 0;
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    bool reduced = axes.empty() || std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) {
      out.push_back(x.shape[i]);
    } else if (keepdims) {
      out.push_back(Dim(1));
    }
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferArgMax(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  requireNotBool(call, x);
  int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = normalizeAxis(attrInt(call.attrs, "axis"), rank);
  if (x.shape[axis] == Dim(0)) fail("argmax: axis {} has size 0", axis);
  Shape out = x.shape;
  if (attrInt(call.attrs, "keepdims") != 0) {
    out[axis] = Dim(1);
  } else {
    out.erase(out.begin() + axis);
  }
  return {TensorType{DType::I64, out}};
}

// ---- data movement

std::vector<TensorType> inferFlatten(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = attrInt(call.attrs, "axis");
  // Flatten accepts axis == rank (everything goes to the first dim).
  if (axis < -rank || axis > rank) fail("flatten: axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  Dim outer = dimOfProduct(call, productOf(x.shape, 0, static_cast<size_t>(axis)), x.shape);
  Dim inner = dimOfProduct(call, productOf(x.shape, static_cast<size_t>(axis), x.rank()), x.shape);
  return {TensorType{x.dtype, {outer, inner}}};
}

std::vector<TensorType> inferReshape(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const std::vector<int64_t>& target = attrInts(call.attrs, "shape");
  Shape out(target.size());
  DimProduct known;
  int inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == 0) {
      if (i >= x.rank())
        fail("reshape: shape {} copies dim {} (0) but the input {} has rank {}", fmt::join(target, ","), i, x.str(),
             x.rank());
      out[i] = x.shape[i];
    } else if (t == -1) {
      if (inferred >= 0) fail("reshape: shape [{}] has more than one -1", fmt::join(target, ","));
      inferred = static_cast<int>(i);
      continue;
    } else if (t < -1) {
      fail("reshape: invalid dim {} in shape [{}]", t, fmt::join(target, ","));
    } else {
      out[i] = Dim(t);
    }
    known.mul(out[i]);
  }
  DimProduct total = productOf(x.shape, 0, x.rank());
  if (inferred >= 0) {
    int power = total.power - known.power;
    if (known.statics == 0) fail("reshape: cannot infer the -1 dim of [{}] next to a zero dim", fmt::join(target, ","));
    if (power < 0 || total.statics % known.statics != 0) {
      fail("reshape: cannot reshape {} ({} elements) into [{}]", x.str(), total.str(), fmt::join(target, ","));
    }
    int64_t rest = total.statics / known.statics;
    if (power == 0) {
      out[inferred] = Dim(rest);
    } else if (power == 1 && rest == 1) {
      out[inferred] = Dim::batch();
    } else {
      DimProduct dim{rest, power};
      fail("reshape: the -1 dim of [{}] would be {} for input {}; the result is not linear in batch",
           fmt::join(target, ","), dim.str(), x.str());
    }
  } else if (known.statics != total.statics || known.power != total.power) {
    fail("reshape: cannot reshape {} ({} elements) into {} ({} elements)", x.str(), total.str(), shapeStr(out),
         known.str());
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferTranspose(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  std::vector<int64_t> perm = attrInts(call.attrs, "perm");
  int64_t rank = static_cast<int64_t>(x.rank());
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank) {
    fail("transpose: perm [{}] has {} values for rank {}", fmt::join(perm, ","), perm.size(), rank);
  }
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      fail("transpose: perm [{}] is not a permutation of 0..{}", fmt::join(perm, ","), rank - 1);
    seen[p] = true;
    out.push_back(x.shape[p]);
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferConcat(const OpCall& call) {
  const TensorType& first = call.inputs[0];
  int64_t rank = static_cast<int64_t>(first.rank());
  int64_t axis = normalizeAxis(attrInt(call.attrs, "axis"), rank);
  DimProduct sum{0, 0};  // a sum here: statics + power * batch
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const TensorType& t = call.inputs[i];
    if (t.dtype != first.dtype) {
      fail("concat: input {} has dtype {}, input 0 has {}", i, dtypeName(t.dtype), dtypeName(first.dtype));
    }
    if (t.rank() != first.rank()) fail("concat: input {} {} has another rank than input 0 {}", i, t.str(), first.str());
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis && t.shape[d] != first.shape[d]) {
        fail("concat: input {} {} differs from input 0 {} in dim {} (concat axis {})", i, t.str(), first.str(), d,
             axis);
      }
    }
    Dim d = t.shape[axis];
    if (d.isBatch()) {
      ++sum.power;
    } else {
      sum.statics += d.value();  // each at most 2^31 - 1 (every type's dims are), at most 2^20 inputs
    }
  }
  Shape out = first.shape;
  if (sum.power == 0) {
    out[axis] = Dim(sum.statics);
  } else if (sum.power == 1 && sum.statics == 0) {
    out[axis] = Dim::batch();
  } else {
    fail("concat: the concatenated dim would be {}{}batch; the result is not linear in batch",
         sum.statics ? std::to_string(sum.statics) + "+" : "", sum.power == 1 ? "" : std::to_string(sum.power) + "*");
  }
  return {TensorType{first.dtype, out}};
}

std::vector<TensorType> inferSplit(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  int64_t axis = normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(x.rank()));
  const std::vector<int64_t>& split = attrInts(call.attrs, "split");
  int n = call.numOutputs;
  Dim d = x.shape[axis];
  std::vector<TensorType> outs(static_cast<size_t>(n), x);
  if (d.isBatch()) {
    if (n == 1 && split.empty()) return outs;
    fail("split: cannot split the batch dim (axis {} of {})", axis, x.str());
  }
  int64_t size = d.value();
  std::vector<Dim> parts;
  if (split.empty()) {
    // Equal parts; as in ONNX Split-18, when size is not divisible the last part is smaller.
    int64_t chunk = (size + n - 1) / n;
    int64_t last = size - chunk * (n - 1);
    if (last < 1 && size != 0) fail("split: dim {} of size {} does not split into {} parts", axis, size, n);
    for (int i = 0; i < n; ++i) parts.push_back(Dim(i + 1 < n ? chunk : last));
  } else {
    if (static_cast<int>(split.size()) != n)
      fail("split: split [{}] has {} sizes for {} outputs", fmt::join(split, ","), split.size(), n);
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) fail("split: negative size in split [{}]", fmt::join(split, ","));
      if (s > size) fail("split: size {} in split [{}] is larger than dim {} of {}", s, fmt::join(split, ","), axis, x.str());
      sum += s;  // at most 2^20 outputs of at most 2^31 each: no overflow
      parts.push_back(Dim(s));
    }
    if (sum != size)
      fail("split: sizes [{}] sum to {}, but dim {} of {} is {}", fmt::join(split, ","), sum, axis, x.str(), size);
  }
  for (int i = 0; i < n; ++i) outs[i].shape[axis] = parts[i];
  return outs;
}

std::vector<TensorType> inferSlice(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  int64_t rank = static_cast<int64_t>(x.rank());
  const std::vector<int64_t>& starts = attrInts(call.attrs, "starts");
  const std::vector<int64_t>& ends = attrInts(call.attrs, "ends");
  std::vector<int64_t> axes = attrInts(call.attrs, "axes");
  std::vector<int64_t> steps = attrInts(call.attrs, "steps");
  if (ends.size() != starts.size()) fail("slice: {} starts but {} ends", starts.size(), ends.size());
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size()) fail("slice: {} axes for {} starts", axes.size(), starts.size());
  if (steps.size() != starts.size()) fail("slice: {} steps for {} starts", steps.size(), starts.size());
  axes = normalizeAxes(call, axes, rank);
  Shape out = x.shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (steps[i] == 0) fail("slice: step of axis {} is 0", axes[i]);
    Dim d = x.shape[axes[i]];
    if (d.isBatch()) {
      if (!isFullSlice(starts[i], ends[i], steps[i])) {
        fail("slice: axis {} is batch and only a full slice of it is supported, got {}:{}:{}", axes[i], starts[i],
             ends[i], steps[i]);
      }
      continue;
    }
    out[axes[i]] = Dim(sliceRange(starts[i], ends[i], steps[i], d.value()).length);
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferSqueeze(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes = normalizeAxes(call, attrInts(call.attrs, "axes"), rank);
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    bool listed = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (axes.empty()) {
      if (x.shape[i] == Dim(1)) continue;
    } else if (listed) {
      if (x.shape[i] != Dim(1)) fail("squeeze: axis {} of {} has size {}, not 1", i, x.str(), x.shape[i].str());
      continue;
    }
    out.push_back(x.shape[i]);
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferUnsqueeze(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const std::vector<int64_t>& given = attrInts(call.attrs, "axes");
  int64_t outRank = static_cast<int64_t>(x.rank() + given.size());
  std::vector<int64_t> axes = normalizeAxes(call, given, outRank);
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < outRank; ++i) {
    if (std::find(axes.begin(), axes.end(), i) != axes.end()) {
      out.push_back(Dim(1));
    } else {
      out.push_back(x.shape[next++]);
    }
  }
  return {TensorType{x.dtype, out}};
}

std::vector<TensorType> inferGather(const OpCall& call) {
  const TensorType& data = call.inputs[0];
  const TensorType& indices = call.inputs[1];
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64) {
    fail("gather: indices must be i32 or i64, got {}", dtypeName(indices.dtype));
  }
  if (data.rank() == 0) fail("gather: data must have rank >= 1, got {}", data.str());
  int64_t axis = normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(data.rank()));
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  return {TensorType{data.dtype, out}};
}

std::vector<TensorType> inferGatherElements(const OpCall& call) {
  const TensorType& data = call.inputs[0];
  const TensorType& indices = call.inputs[1];
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64) {
    fail("gather_elements: indices must be i32 or i64, got {}", dtypeName(indices.dtype));
  }
  if (data.rank() == 0 || indices.rank() != data.rank()) {
    fail("gather_elements: data {} and indices {} must have the same rank, at least 1", data.str(), indices.str());
  }
  const int64_t axis = normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(data.rank()));
  for (size_t d = 0; d < data.rank(); ++d) {
    if (static_cast<int64_t>(d) == axis) continue;
    const Dim a = data.shape[d], b = indices.shape[d];
    const bool fits = a.isBatch() ? b.isBatch() : (!b.isBatch() && b.value() <= a.value());
    if (!fits) fail("gather_elements: indices {} exceed data {} along axis {}", indices.str(), data.str(), d);
  }
  if (data.shape[static_cast<size_t>(axis)].isBatch()) fail("gather_elements: axis {} of {} is the batch", axis, data.str());
  return {TensorType{data.dtype, indices.shape}};
}

std::vector<TensorType> inferPad(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const std::vector<int64_t>& pads = attrInts(call.attrs, "pads");
  const std::string& mode = attrString(call.attrs, "mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    fail("pad: mode must be constant, reflect or edge, got '{}'", mode);
  }
  size_t rank = x.rank();
  if (pads.size() != 2 * rank) fail("pad: pads has {} values, expected {} for {}", pads.size(), 2 * rank, x.str());
  Shape out = x.shape;
  for (size_t i = 0; i < rank; ++i) {
    int64_t begin = pads[i];
    int64_t end = pads[rank + i];
    if (begin == 0 && end == 0) continue;
    for (int64_t v : {begin, end}) {
      if (v > sizes::kMaxElements || v < -sizes::kMaxElements) fail("pad: pads of axis {} must be within +-(2^31-1), got {}+{}", i, begin, end);
    }
    Dim d = x.shape[i];
    if (d.isBatch()) fail("pad: axis {} is batch and cannot be padded ({}+{})", i, begin, end);
    int64_t size = d.value();
    int64_t padded = size + begin + end;
    if (padded < 0) fail("pad: axis {} of size {} with pads {}+{} has a negative size", i, size, begin, end);
    if (mode == "reflect" && (begin >= size || end >= size)) {
      fail("pad: reflect pads {}+{} must be smaller than axis {}'s size {}", begin, end, i, size);
    }
    if (mode == "edge" && size == 0 && padded > 0) fail("pad: edge mode cannot pad the empty axis {}", i);
    out[i] = Dim(padded);
  }
  return {TensorType{x.dtype, out}};
}

}  // namespace policyc::ir::impl
