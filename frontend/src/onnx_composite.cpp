// ONNX operators that are compositions of IR ops (as ONNX's own function bodies define many of
// them): Reciprocal is a div, ReduceL2 a sqrt of a reduce_sum of squares, Trilu a where over a
// constant mask. Fusion puts each composition back into one kernel, so none needs an op of its own
// in the IR, the interpreter or the backends.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>

#include "onnx_ops.h"
#include "onnx_tensor.h"

namespace policyc::frontend {

using ir::AttrMap;
using ir::DType;
using ir::Op;

namespace {

const ImportedValue& floatInput(NodeContext& ctx, size_t i) {
  const ImportedValue& x = ctx.input(i);
  if (!ir::isFloat(x.type().dtype)) {
    ctx.fail("{} takes a float input, got {} ('{}')", ctx.opType(), ir::dtypeName(x.type().dtype), x.name);
  }
  return x;
}

// The values of `x` in a type whose negation is exact: x itself for floats, f64 for integers
// (exact up to 2^53, the interpreter's own limit for i64).
ImportedValue negatable(Composer& c, const ImportedValue& x) {
  const DType t = x.type().dtype;
  if (t == DType::Bool) return x;  // the reduction's shape function names the unsupported dtype
  if (ir::isFloat(t)) return x;
  return c.op(Op::Cast, {x}, "f64", {{"to", std::string(ir::dtypeName(DType::F64))}});
}

// A static dim of `t`, or an error naming the node and the type.
int64_t staticDim(NodeContext& ctx, const ir::TensorType& t, size_t d, std::string_view why) {
  if (t.shape.at(d).isBatch()) ctx.fail("{} needs a static dim {} of {} ({})", ctx.opType(), d, t.str(), why);
  return t.shape[d].value();
}

// Constants this file builds at import are bounded as ConstantOfShape's are: a hostile model
// cannot make the importer allocate gigabytes.
void checkConstantSize(NodeContext& ctx, int64_t rows, int64_t cols, std::string_view what) {
  if (rows > 0 && cols > kMaxImportElements / rows) {
    ctx.fail("{} of {}x{} is too large (a constant of more than 2^26 elements)", what, rows, cols);
  }
}

// Tile concatenates copies: at most this many of one axis.
constexpr int64_t kMaxTileRepeats = 1024;

}  // namespace

// ---- elementwise

void convertReciprocal(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  c.result(Op::Div, {c.scalarLike(x, 1.0), x});
}

// Sum then one division by the count (as ONNX Runtime computes it).
void convertMean(NodeContext& ctx) {
  Composer c(ctx);
  std::vector<ImportedValue> ins = allInputs(ctx);
  if (ins.size() == 1) {
    c.result(Op::Identity, ins);
    return;
  }
  ImportedValue sum = chainBinary(ctx, Op::Add, ins, ctx.freshName(c.name() + "_sum"));
  c.result(Op::Div, {sum, c.scalarLike(sum, static_cast<double>(ins.size()))});
}

// x < 0 ? slope * x : x, the slope broadcast to x.
void convertPRelu(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  ImportedValue slope = ctx.input(1);
  // Before opset 7 a slope of one value per channel applied along axis 1 (PyTorch's nn.PReLU(C)
  // exported so); ONNX's converter leaves the node as it is, so the slope is laid along axis 1 here.
  const ir::TensorType xt = x.type(), st = slope.type();
  if (ctx.sourceOpset() < 7 && st.rank() == 1 && xt.rank() > 2 && !xt.shape[1].isBatch() &&
      st.shape[0] == xt.shape[1] && !(st.shape[0] == xt.shape.back())) {
    std::vector<int64_t> axes;
    for (size_t d = 1; d + 1 < xt.rank(); ++d) axes.push_back(static_cast<int64_t>(d));
    slope = c.op(Op::Unsqueeze, {slope}, "per_channel", {{"axes", axes}});
  }
  ImportedValue negative = c.op(Op::Less, {x, c.scalarLike(x, 0)}, "negative");
  c.result(Op::Where, {negative, c.op(Op::Mul, {slope, x}, "scaled"), x});
}

// x > alpha ? x : 0.
void convertThresholdedRelu(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  ImportedValue above = c.op(Op::Greater, {x, c.scalarLike(x, ctx.attrFloat("alpha", 1.0))}, "above");
  c.result(Op::Where, {above, x, c.scalarLike(x, 0)});
}

// x / (1 + |x|).
void convertSoftsign(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  ImportedValue denominator = c.op(Op::Add, {c.scalarLike(x, 1), c.op(Op::Abs, {x}, "abs")}, "denominator");
  c.result(Op::Div, {x, denominator});
}

// x < -lambd ? x + bias : x > lambd ? x - bias : 0.
void convertShrink(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const double lambd = ctx.attrFloat("lambd", 0.5), bias = ctx.attrFloat("bias", 0.0);
  ImportedValue below = c.op(Op::Less, {x, c.scalarLike(x, -lambd)}, "below");
  ImportedValue above = c.op(Op::Greater, {x, c.scalarLike(x, lambd)}, "above");
  ImportedValue upper = c.op(Op::Where, {above, c.op(Op::Sub, {x, c.scalarLike(x, bias)}, "minus_bias"), c.scalarLike(x, 0)}, "upper");
  c.result(Op::Where, {below, c.op(Op::Add, {x, c.scalarLike(x, bias)}, "plus_bias"), upper});
}

// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), ONNX's function body.
void convertCelu(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  ImportedValue alpha = c.scalarLike(x, ctx.attrFloat("alpha", 1.0));
  ImportedValue zero = c.scalarLike(x, 0);
  ImportedValue e = c.op(Op::Exp, {c.op(Op::Div, {x, alpha}, "scaled")}, "exp");
  ImportedValue negative = c.op(Op::Mul, {alpha, c.op(Op::Sub, {e, c.scalarLike(x, 1)}, "expm1")}, "negative");
  c.result(Op::Add, {c.op(Op::Max, {x, zero}, "positive_part"), c.op(Op::Min, {negative, zero}, "negative_part")});
}

// Mish (opset 18): x * tanh(softplus(x)).
void convertMish(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  c.result(Op::Mul, {x, c.op(Op::Tanh, {c.op(Op::Softplus, {x}, "softplus")}, "tanh")});
}

// Gelu (opset 20): approximate "none" is the IR's gelu (with erf); "tanh" is
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ONNX's function body.
void convertGelu(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const std::string approximate = ctx.attrString("approximate").value_or("none");
  if (approximate == "none") return c.result(Op::Gelu, {x});
  if (approximate != "tanh") ctx.fail("approximate='{}' is not supported (none or tanh)", approximate);
  ImportedValue cube = c.op(Op::Mul, {c.op(Op::Mul, {x, x}, "square"), x}, "cube");
  ImportedValue inner = c.op(Op::Add, {x, c.op(Op::Mul, {c.scalarLike(x, 0.044715), cube}, "cubic")}, "inner");
  ImportedValue t = c.op(Op::Tanh, {c.op(Op::Mul, {c.scalarLike(x, std::sqrt(2.0 / M_PI)), inner}, "scaled")}, "tanh");
  ImportedValue half = c.op(Op::Mul, {c.scalarLike(x, 0.5), x}, "half");
  c.result(Op::Mul, {half, c.op(Op::Add, {c.scalarLike(x, 1), t}, "one_plus")});
}

// 1, -1 or 0 in x's dtype (NaN stays NaN).
void convertSign(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const DType t = x.type().dtype;
  ImportedValue zero = c.scalarLike(x, 0);
  ImportedValue positive = c.op(Op::Greater, {x, zero}, "positive");
  if (t == DType::U8) {
    c.result(Op::Cast, {positive}, {{"to", std::string(ir::dtypeName(t))}});
    return;
  }
  ImportedValue negative = c.op(Op::Less, {x, zero}, "negative");
  ImportedValue minusOrZero = c.op(Op::Where, {negative, c.scalarLike(x, -1), zero}, "minus_or_zero");
  if (!ir::isFloat(t)) {
    c.result(Op::Where, {positive, c.scalarLike(x, 1), minusOrZero});
    return;
  }
  ImportedValue sign = c.op(Op::Where, {positive, c.scalarLike(x, 1), minusOrZero}, "sign");
  c.result(Op::Where, {c.op(Op::Equal, {x, x}, "ordered"), sign, x});
}

// x != x: NaN is the one value unequal to itself (the backends compile without fast-math).
void convertIsNaN(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  c.result(Op::Not, {c.op(Op::Equal, {x, x}, "ordered")});
}

void convertIsInf(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const bool positive = ctx.attrInt("detect_positive", 1) != 0, negative = ctx.attrInt("detect_negative", 1) != 0;
  const double inf = std::numeric_limits<double>::infinity();
  if (positive && negative) {
    c.result(Op::Equal, {c.op(Op::Abs, {x}, "abs"), c.scalarLike(x, inf)});
  } else if (positive || negative) {
    c.result(Op::Equal, {x, c.scalarLike(x, positive ? inf : -inf)});
  } else {
    // Detecting neither: false everywhere, as a comparison with NaN is.
    c.result(Op::Equal, {x, c.scalarLike(x, std::numeric_limits<double>::quiet_NaN())});
  }
}

// ---- reductions

namespace {

AttrMap reduceAttrs(const ReduceSpec& r, int64_t keepdims) { return {{"axes", r.axes}, {"keepdims", keepdims}}; }

// Reduce(f(x)) then g: ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum.
void reduceComposite(NodeContext& ctx, bool absolute, bool square, Op finish) {
  Composer c(ctx);
  ReduceSpec r = reduceSpec(ctx);
  if (r.noop) ctx.fail("noop_with_empty_axes=1 is not supported by {}", ctx.opType());
  ImportedValue x = ctx.input(0);
  if (absolute) x = c.op(Op::Abs, {x}, "abs");
  if (square) x = c.op(Op::Mul, {x, x}, "square");
  if (finish == Op::Identity) {
    c.result(Op::ReduceSum, {x}, reduceAttrs(r, r.keepdims));
    return;
  }
  c.result(finish, {c.op(Op::ReduceSum, {x}, "sum", reduceAttrs(r, r.keepdims))});
}

}  // namespace

void convertReduceL1(NodeContext& ctx) { reduceComposite(ctx, true, false, Op::Identity); }
void convertReduceL2(NodeContext& ctx) { reduceComposite(ctx, false, true, Op::Sqrt); }
void convertReduceSumSquare(NodeContext& ctx) { reduceComposite(ctx, false, true, Op::Identity); }
void convertReduceLogSum(NodeContext& ctx) { reduceComposite(ctx, false, false, Op::Log); }

// log(sum(exp(x - max))) + max: the maximum taken out so that exp cannot overflow.
void convertReduceLogSumExp(NodeContext& ctx) {
  Composer c(ctx);
  ReduceSpec r = reduceSpec(ctx);
  if (r.noop) ctx.fail("noop_with_empty_axes=1 is not supported by {}", ctx.opType());
  const ImportedValue& x = floatInput(ctx, 0);
  ImportedValue maxKept = c.op(Op::ReduceMax, {x}, "max", reduceAttrs(r, 1));
  ImportedValue e = c.op(Op::Exp, {c.op(Op::Sub, {x, maxKept}, "shifted")}, "exp");
  ImportedValue logSum = c.op(Op::Log, {c.op(Op::ReduceSum, {e}, "sum", reduceAttrs(r, r.keepdims))}, "log_sum");
  ImportedValue m = r.keepdims ? maxKept : c.op(Op::ReduceMax, {x}, "max_dropped", reduceAttrs(r, 0));
  c.result(Op::Add, {logSum, m});
}

// min(x) = -max(-x), exactly (negation is exact in the type negatable() picks); integers come
// back to their dtype.
void convertReduceMin(NodeContext& ctx) {
  Composer c(ctx);
  ReduceSpec r = reduceSpec(ctx);
  const ImportedValue& x = ctx.input(0);
  if (r.noop) {
    c.result(Op::Identity, {x});
    return;
  }
  const DType t = x.type().dtype;
  ImportedValue negated = c.op(Op::Neg, {negatable(c, x)}, "negated");
  ImportedValue maxOfNegated = c.op(Op::ReduceMax, {negated}, "max_of_negated", reduceAttrs(r, r.keepdims));
  if (ir::isFloat(t)) {
    c.result(Op::Neg, {maxOfNegated});
    return;
  }
  c.result(Op::Cast, {c.op(Op::Neg, {maxOfNegated}, "min")}, {{"to", std::string(ir::dtypeName(t))}});
}

// argmin(x) = argmax(-x): the same first (or last) index, NaN counting as the smallest value as
// numpy's argmin does (argmax counts it as the largest).
void convertArgMin(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  AttrMap attrs;
  attrs["axis"] = ctx.attrInt("axis", 0);
  attrs["keepdims"] = ctx.attrInt("keepdims", 1);
  attrs["select_last_index"] = ctx.attrInt("select_last_index", 0);
  c.result(Op::ArgMax, {c.op(Op::Neg, {negatable(c, x)}, "negated")}, std::move(attrs));
}

void convertGlobalMaxPool(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const size_t rank = x.type().rank();
  if (rank < 3) ctx.fail("GlobalMaxPool takes an input of rank 3 or more (N, C, spatial...), got {}", x.type().str());
  std::vector<int64_t> axes;
  for (size_t d = 2; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  c.result(Op::ReduceMax, {x}, {{"axes", axes}, {"keepdims", int64_t{1}}});
}

// One-hot of the first maximum along `axis`: argmax compared with the indices of the axis.
void convertHardmax(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const ir::TensorType t = x.type();
  const auto rank = static_cast<int64_t>(t.rank());
  int64_t axis = ctx.attrInt("axis", ctx.opset() < 13 ? 1 : -1);
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for {}", axis, t.str());
  if (axis < 0) axis += rank;
  // Before opset 13 the input is coerced to 2-D at `axis`; that equals this form only when the
  // axis is the last one.
  if (ctx.opset() < 13 && axis != rank - 1) {
    ctx.fail("Hardmax at opset {} over axis {} of {} (a 2-D coercion) is not supported; export at opset 13 or later",
             ctx.opset(), axis, t.str());
  }
  const int64_t n = staticDim(ctx, t, static_cast<size_t>(axis), "the axis of the maximum");
  checkConstantSize(ctx, n, 1, "Hardmax's indices");
  ImportedValue best = c.op(Op::ArgMax, {x}, "argmax", {{"axis", axis}, {"keepdims", int64_t{1}}});
  // [n, 1, ...]: one index per position of the axis, broadcast over the axes after it.
  std::vector<int64_t> shape(static_cast<size_t>(rank - axis), 1);
  shape[0] = n;
  ir::Tensor iota(DType::I64, shape);
  for (int64_t i = 0; i < n; ++i) iota.setAsDouble(i, static_cast<double>(i));
  ImportedValue hit = c.op(Op::Equal, {best, c.constant(std::move(iota), "indices")}, "hit");
  c.result(Op::Cast, {hit}, {{"to", std::string(ir::dtypeName(t.dtype))}});
}

// ---- shapes and constants

// The upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes, through a constant mask.
void convertTrilu(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const ir::TensorType t = x.type();
  if (t.rank() < 2) ctx.fail("Trilu takes an input of rank 2 or more, got {}", t.str());
  const int64_t rows = staticDim(ctx, t, t.rank() - 2, "the rows of the triangle");
  const int64_t cols = staticDim(ctx, t, t.rank() - 1, "the columns of the triangle");
  checkConstantSize(ctx, rows, cols, "Trilu's mask");
  const double k = ctx.hasInput(1) ? scalarInput(ctx, 1, "k") : 0.0;
  const bool upper = ctx.attrInt("upper", 1) != 0;
  ir::Tensor mask(DType::Bool, {rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double diagonal = static_cast<double>(j - i);
      mask.setAsDouble(i * cols + j, upper ? diagonal >= k : diagonal <= k);
    }
  }
  c.result(Op::Where, {c.constant(std::move(mask), "mask"), x, c.scalarLike(x, 0)});
}

// Copies along each axis: a concat of the value with itself per repeated axis (the batch axis
// repeats once).
void convertTile(NodeContext& ctx) {
  Composer c(ctx);
  ImportedValue x = ctx.input(0);
  const ir::TensorType t = x.type();
  std::vector<int64_t> repeats = ctx.constantInts(1, "repeats");
  if (repeats.size() != t.rank()) ctx.fail("repeats has {} values for an input of rank {} ({})", repeats.size(), t.rank(), t.str());
  std::vector<size_t> tiled;
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0) ctx.fail("repeats[{}] is {}; repeats must not be negative", d, repeats[d]);
    if (repeats[d] == 1) continue;
    if (t.shape[d].isBatch()) ctx.fail("Tile repeats the batch dim of {} {} times, which policyc does not support", t.str(), repeats[d]);
    if (repeats[d] == 0) ctx.fail("Tile with repeats[{}] = 0 (an empty result) is not supported", d);
    if (repeats[d] > kMaxTileRepeats) {
      ctx.fail("Tile repeats axis {} {} times; policyc tiles by concatenation, at most {} copies per axis", d, repeats[d],
               kMaxTileRepeats);
    }
    tiled.push_back(d);
  }
  if (tiled.empty()) {
    c.result(Op::Identity, {x});
    return;
  }
  for (size_t i = 0; i < tiled.size(); ++i) {
    const size_t d = tiled[i];
    std::vector<ImportedValue> copies(static_cast<size_t>(repeats[d]), x);
    AttrMap attrs{{"axis", static_cast<int64_t>(d)}};
    if (i + 1 == tiled.size()) {
      c.result(Op::Concat, copies, std::move(attrs));
    } else {
      x = c.op(Op::Concat, copies, fmt::format("tiled_{}", d), std::move(attrs));
    }
  }
}

// A constant: start, start + delta, ... below limit (above it for a negative delta).
void convertRange(NodeContext& ctx) {
  Composer c(ctx);
  const DType t = ctx.inputType(0).dtype;
  for (size_t i = 0; i < 3; ++i) {
    static constexpr const char* kRoles[] = {"start", "limit", "delta"};
    const ImportedValue& v = ctx.input(i);
    if (!v.isConstant()) {
      ctx.fail("{} (input '{}') must be a constant: the length of Range's output would depend on data known only at "
               "run time, which policyc does not support",
               kRoles[i], v.name);
    }
  }
  const double start = scalarInput(ctx, 0, "start"), limit = scalarInput(ctx, 1, "limit"), delta = scalarInput(ctx, 2, "delta");
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta)) {
    ctx.fail("Range({}, {}, {}) has no finite number of elements", start, limit, delta);
  }
  const double count = std::max(std::ceil((limit - start) / delta), 0.0);
  if (count > static_cast<double>(kMaxImportElements)) {
    ctx.fail("Range({}, {}, {}) is too large (a constant of more than 2^26 elements)", start, limit, delta);
  }
  const auto n = static_cast<int64_t>(count);
  ir::Tensor range(t, {n});
  for (int64_t i = 0; i < n; ++i) range.setAsDouble(i, start + static_cast<double>(i) * delta);
  c.constantResult(std::move(range));
}

// The number of elements, known at compile time unless the value has a batch dim.
void convertSize(NodeContext& ctx) {
  Composer c(ctx);
  const ir::TensorType t = ctx.inputType(0);
  int64_t n = 1;
  for (const ir::Dim& d : t.shape) {
    if (d.isBatch()) ctx.fail("Size of {} depends on the batch size, which policyc does not support", t.str());
    n *= d.value();
  }
  ir::Tensor size(DType::I64, {});
  size.setAsDouble(0, static_cast<double>(n));
  c.constantResult(std::move(size));
}

void convertCastLike(NodeContext& ctx) {
  Composer c(ctx);
  c.result(Op::Cast, {ctx.input(0)}, {{"to", std::string(ir::dtypeName(ctx.inputType(1).dtype))}});
}

// A constant: ones on the k-th diagonal of a 2-D shape like the input's.
void convertEyeLike(NodeContext& ctx) {
  Composer c(ctx);
  const ir::TensorType t = ctx.inputType(0);
  if (t.rank() != 2) ctx.fail("EyeLike takes a 2-D input, got {}", t.str());
  const int64_t rows = staticDim(ctx, t, 0, "the output is a constant");
  const int64_t cols = staticDim(ctx, t, 1, "the output is a constant");
  DType dtype = t.dtype;
  if (std::optional<int64_t> given = ctx.attrInt("dtype")) {
    std::optional<DType> d = dtypeFromOnnx(static_cast<int32_t>(*given));
    if (!d) ctx.fail("EyeLike to {} is not supported", onnxTypeName(static_cast<int32_t>(*given)));
    dtype = *d;
  }
  checkConstantSize(ctx, rows, cols, "EyeLike's output");
  const int64_t k = ctx.attrInt("k", 0);
  ir::Tensor eye(dtype, {rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t j = i + k;
    if (j >= 0 && j < cols) eye.setAsDouble(i * cols + j, 1.0);
  }
  c.constantResult(std::move(eye));
}


// ---- recurrent layers: LSTM, GRU, RNN (ONNX's equations, unrolled over a sequence whose length
// is known at compile time; each step is linear layers and elementwise ops, which fusion joins)

namespace {

enum class Cell { Lstm, Gru, Rnn };

constexpr int64_t kMaxUnrolledSteps = 1024;

// One activation of the `activations` attribute, with its alpha/beta when it takes them.
struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
};

class Recurrent {
 public:
  Recurrent(NodeContext& ctx, Cell cell) : ctx_(ctx), c_(ctx), cell_(cell) {}

  void convert() {
    const ImportedValue& x = floatInput(ctx_, 0);
    const ir::TensorType xt = x.type();
    if (xt.rank() != 3) ctx_.fail("X must be rank 3, got {}", xt.str());
    layout_ = ctx_.attrInt("layout", 0);
    if (layout_ != 0 && layout_ != 1) ctx_.fail("layout={} is not 0 or 1", layout_);
    const size_t seqAxis = layout_ == 0 ? 0 : 1;
    seq_ = staticDim(ctx_, xt, seqAxis, "the sequence is unrolled at compile time");
    // Each step is a few dozen nodes: a hostile length must not make the graph enormous.
    if (seq_ > kMaxUnrolledSteps) ctx_.fail("a sequence of {} steps is longer than policyc unrolls (at most {})", seq_, kMaxUnrolledSteps);
    hidden_ = ctx_.attrInt("hidden_size", 0);
    // W's shape must match gates * hidden_size: a larger value cannot be right (and must not overflow).
    if (hidden_ < 1 || hidden_ > kMaxImportElements) ctx_.fail("attribute hidden_size must be between 1 and {}, got {}", kMaxImportElements, hidden_);
    const std::string direction = ctx_.attrString("direction").value_or("forward");
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
      ctx_.fail("direction='{}' is not forward, reverse or bidirectional", direction);
    }
    dirs_ = direction == "bidirectional" ? 2 : 1;
    clip_ = ctx_.attrFloat("clip");
    if (cell_ == Cell::Lstm) inputForget_ = ctx_.attrInt("input_forget", 0) != 0;
    if (cell_ == Cell::Gru) linearBeforeReset_ = ctx_.attrInt("linear_before_reset", 0) != 0;
    readActivations();
    checkSequenceLengths();

    std::vector<std::vector<ImportedValue>> ys(static_cast<size_t>(dirs_));  // per direction, per step (in time order)
    std::vector<ImportedValue> lastH, lastC;
    for (int64_t d = 0; d < dirs_; ++d) {
      const bool reverse = direction == "reverse" || d == 1;
      const Direction dir = directionOf(d);
      ImportedValue h = stateOf(5, d, "initial_h", x), cstate;
      if (cell_ == Cell::Lstm) cstate = stateOf(6, d, "initial_c", x);
      std::vector<ImportedValue> steps(static_cast<size_t>(seq_));
      for (int64_t i = 0; i < seq_; ++i) {
        const int64_t t = reverse ? seq_ - 1 - i : i;
        ImportedValue xs = step(x, seqAxis, t, fmt::format("x{}_{}", d, t));
        advance(d, dir, xs, h, cstate, fmt::format("{}_{}", d, t));
        steps[static_cast<size_t>(t)] = h;
      }
      ys[static_cast<size_t>(d)] = std::move(steps);
      lastH.push_back(h);
      lastC.push_back(cstate);
    }
    // Y [S, D, B, H] (layout 1: [B, S, D, H]); Y_h, Y_c [D, B, H] (layout 1: [B, D, H]).
    const int64_t dirAxis = layout_ == 0 ? 0 : 1;
    if (ctx_.outputUsed(0)) {
      std::vector<ImportedValue> perStep;
      for (int64_t t = 0; t < seq_; ++t) {
        std::vector<ImportedValue> perDir;
        for (int64_t d = 0; d < dirs_; ++d) perDir.push_back(ys[static_cast<size_t>(d)][static_cast<size_t>(t)]);
        perStep.push_back(unsqueeze(stack(perDir, dirAxis, fmt::format("y{}", t)), layout_ == 0 ? 0 : 1, fmt::format("y{}_seq", t)));
      }
      output(0, perStep, layout_ == 0 ? 0 : 1);
    }
    if (ctx_.numOutputs() > 1 && ctx_.outputUsed(1)) output(1, {stack(lastH, dirAxis, "h_dirs")}, -1);
    if (cell_ == Cell::Lstm && ctx_.numOutputs() > 2 && ctx_.outputUsed(2)) output(2, {stack(lastC, dirAxis, "c_dirs")}, -1);
  }

 private:
  int gates() const { return cell_ == Cell::Lstm ? 4 : cell_ == Cell::Gru ? 3 : 1; }

  void readActivations() {
    const std::vector<std::string> defaults = cell_ == Cell::Lstm  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                              : cell_ == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                   : std::vector<std::string>{"Tanh"};
    std::vector<std::string> names = ctx_.attrStrings("activations").value_or(std::vector<std::string>{});
    if (names.empty()) {
      for (int64_t d = 0; d < dirs_; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
    }
    if (names.size() != defaults.size() * static_cast<size_t>(dirs_)) {
      ctx_.fail("activations lists {} functions; {} direction(s) take {}", names.size(), dirs_, defaults.size() * static_cast<size_t>(dirs_));
    }
    const std::vector<double> alphas = ctx_.attrFloats("activation_alpha").value_or(std::vector<double>{});
    const std::vector<double> betas = ctx_.attrFloats("activation_beta").value_or(std::vector<double>{});
    size_t a = 0, b = 0;
    for (const std::string& n : names) {
      Activation act{n, 0, 0};
      // ONNX's operator defaults where the lists run out.
      auto next = [](const std::vector<double>& list, size_t& i, double fallback) { return i < list.size() ? list[i++] : fallback; };
      if (n == "LeakyRelu") act.alpha = next(alphas, a, 0.01);
      else if (n == "ThresholdedRelu" || n == "Elu") act.alpha = next(alphas, a, 1.0);
      else if (n == "HardSigmoid") act.alpha = next(alphas, a, 0.2), act.beta = next(betas, b, 0.5);
      else if (n == "ScaledTanh" || n == "Affine") act.alpha = next(alphas, a, 1.0), act.beta = next(betas, b, n == "Affine" ? 0.0 : 1.0);
      else if (n != "Sigmoid" && n != "Tanh" && n != "Relu" && n != "Softsign" && n != "Softplus") {
        ctx_.fail("activation '{}' is not supported", n);
      }
      acts_.push_back(act);
    }
  }

  // sequence_lens: every sequence the whole length (shorter ones would need masking per row).
  void checkSequenceLengths() {
    if (!ctx_.hasInput(4)) return;
    const ir::Tensor& lens = ctx_.constantInput(4, "sequence_lens");
    for (int64_t i = 0; i < lens.numel(); ++i) {
      if (lens.getAsInt(i) != seq_) ctx_.fail("sequence_lens holds {}: only sequences of the whole length {} are supported", lens.getAsInt(i), seq_);
    }
  }

  ImportedValue apply(const Activation& a, const ImportedValue& v, const std::string& what) {
    ImportedValue in = clip_ ? c_.op(Op::Clip, {v}, what + "_clip", {{"min", -*clip_}, {"max", *clip_}}) : v;
    if (a.name == "Sigmoid") return c_.op(Op::Sigmoid, {in}, what);
    if (a.name == "Tanh") return c_.op(Op::Tanh, {in}, what);
    if (a.name == "Relu") return c_.op(Op::Relu, {in}, what);
    if (a.name == "Softplus") return c_.op(Op::Softplus, {in}, what);
    if (a.name == "LeakyRelu") return c_.op(Op::LeakyRelu, {in}, what, {{"alpha", a.alpha}});
    if (a.name == "Elu") return c_.op(Op::Elu, {in}, what, {{"alpha", a.alpha}});
    if (a.name == "HardSigmoid") return c_.op(Op::HardSigmoid, {in}, what, {{"alpha", a.alpha}, {"beta", a.beta}});
    if (a.name == "Softsign") {
      return c_.op(Op::Div, {in, c_.op(Op::Add, {c_.scalarLike(in, 1), c_.op(Op::Abs, {in}, what + "_abs")}, what + "_den")}, what);
    }
    if (a.name == "ThresholdedRelu") {
      return c_.op(Op::Where, {c_.op(Op::Greater, {in, c_.scalarLike(in, a.alpha)}, what + "_above"), in, c_.scalarLike(in, 0)}, what);
    }
    if (a.name == "ScaledTanh") {
      ImportedValue t = c_.op(Op::Tanh, {c_.op(Op::Mul, {in, c_.scalarLike(in, a.beta)}, what + "_in")}, what + "_tanh");
      return c_.op(Op::Mul, {t, c_.scalarLike(in, a.alpha)}, what);
    }
    return c_.op(Op::Add, {c_.op(Op::Mul, {in, c_.scalarLike(in, a.alpha)}, what + "_scaled"), c_.scalarLike(in, a.beta)}, what);  // Affine
  }
  const Activation& act(int64_t d, int k) const { return acts_[static_cast<size_t>(d) * acts_.size() / static_cast<size_t>(dirs_) + static_cast<size_t>(k)]; }

  // Rows [from, to) of a [rows, cols] value.
  ImportedValue rows(const ImportedValue& v, int64_t from, int64_t to, const std::string& what) {
    return c_.op(Op::Slice, {v}, what, {{"starts", std::vector<int64_t>{from}}, {"ends", std::vector<int64_t>{to}}, {"axes", std::vector<int64_t>{0}}});
  }
  // Element t of `axis`, that axis dropped.
  ImportedValue step(const ImportedValue& v, size_t axis, int64_t t, const std::string& what) {
    const auto a = static_cast<int64_t>(axis);
    ImportedValue s = c_.op(Op::Slice, {v}, what + "_slice",
                            {{"starts", std::vector<int64_t>{t}}, {"ends", std::vector<int64_t>{t + 1}}, {"axes", std::vector<int64_t>{a}}});
    return c_.op(Op::Squeeze, {s}, what, {{"axes", std::vector<int64_t>{a}}});
  }
  ImportedValue unsqueeze(const ImportedValue& v, int64_t axis, const std::string& what) {
    return c_.op(Op::Unsqueeze, {v}, what, {{"axes", std::vector<int64_t>{axis}}});
  }
  // [B, H] values stacked along a new `axis`.
  ImportedValue stack(const std::vector<ImportedValue>& vs, int64_t axis, const std::string& what) {
    std::vector<ImportedValue> parts;
    for (size_t i = 0; i < vs.size(); ++i) parts.push_back(unsqueeze(vs[i], axis, fmt::format("{}_{}", what, i)));
    return parts.size() == 1 ? parts[0] : c_.op(Op::Concat, parts, what, {{"axis", axis}});
  }
  // Output i: the parts concatenated along `axis` (one part: itself), under the output's name.
  void output(size_t i, const std::vector<ImportedValue>& parts, int64_t axis) {
    const std::string name = ctx_.outputName(i);
    if (parts.size() == 1) {
      ctx_.setOutput(i, ctx_.emit(Op::Identity, {parts[0]}, {}, name));
    } else {
      ctx_.setOutput(i, ctx_.emit(Op::Concat, parts, {{"axis", axis}}, name));
    }
  }

  // W or R of direction d: [gates * H, cols].
  ImportedValue weightOf(size_t input, int64_t d, const char* role) {
    const ImportedValue& w = ctx_.input(input);
    const ir::TensorType t = w.type();
    if (t.rank() != 3 || t.shape[0] != ir::Dim(dirs_) || t.shape[1] != ir::Dim(gates() * hidden_)) {
      ctx_.fail("{} must be [{}, {}, *], got {}", role, dirs_, gates() * hidden_, t.str());
    }
    return step(w, 0, d, fmt::format("{}{}", role, d));
  }
  // The bias halves of direction d ([gates * H] each; zeros when B is omitted).
  std::pair<std::optional<ImportedValue>, std::optional<ImportedValue>> biasOf(int64_t d) {
    if (!ctx_.hasInput(3)) return {std::nullopt, std::nullopt};
    const ImportedValue& b = ctx_.input(3);
    const int64_t gh = gates() * hidden_;
    if (b.type().rank() != 2 || b.type().shape[0] != ir::Dim(dirs_) || b.type().shape[1] != ir::Dim(2 * gh)) {
      ctx_.fail("B must be [{}, {}], got {}", dirs_, 2 * gh, b.type().str());
    }
    ImportedValue bd = step(b, 0, d, fmt::format("B{}", d));
    return {rows(bd, 0, gh, fmt::format("Wb{}", d)), rows(bd, gh, 2 * gh, fmt::format("Rb{}", d))};
  }
  // initial_h / initial_c of direction d as [B, H] (zeros when omitted).
  ImportedValue stateOf(size_t input, int64_t d, const char* role, const ImportedValue& x) {
    if (ctx_.hasInput(input)) {
      const ImportedValue& s = ctx_.input(input);
      const size_t dirAxis = layout_ == 0 ? 0 : 1;
      if (s.type().rank() != 3) ctx_.fail("{} must be rank 3, got {}", role, s.type().str());
      return step(s, dirAxis, d, fmt::format("{}{}", role, d));
    }
    // Zeros of [B, H], B taken from x's shape; with a dynamic batch a batch fill (as
    // ConstantOfShape makes), which the importer expands where it must exist as a value.
    const ir::TensorType xt = x.type();
    const ir::Dim batch = xt.shape[layout_ == 0 ? 1 : 0];
    ImportedValue z = c_.constant(ir::Tensor(xt.dtype, {batch.isStatic() ? batch.value() : 1, hidden_}), fmt::format("{}{}_zeros", role, d));
    if (batch.isBatch()) {
      z.kind = ImportedValue::Kind::BatchFill;
      z.fillShape = {batch, ir::Dim(hidden_)};
    }
    return z;
  }
  ImportedValue linear(const ImportedValue& v, const ImportedValue& w, const std::optional<ImportedValue>& b, const std::string& what) {
    std::vector<ImportedValue> ins{v, w};
    if (b) ins.push_back(*b);
    return c_.op(Op::Linear, ins, what);
  }
  // The n gates ([B, H] each) of a [B, n * H] value: one split, whose parts are views of it (no
  // copy), as the cell form an exporter writes for LSTMCell/GRUCell has.
  std::vector<ImportedValue> gates(const ImportedValue& v, int n, const std::string& what) {
    std::vector<std::string> names;
    for (int k = 0; k < n; ++k) names.push_back(ctx_.freshName(fmt::format("{}_{}_{}", c_.name(), what, k)));
    return ctx_.emit(Op::Split, {v}, {{"axis", int64_t{1}}, {"split", std::vector<int64_t>(static_cast<size_t>(n), hidden_)}}, names);
  }

  // What one direction reads at every step, built once: W, R, the bias halves, the peepholes.
  struct Direction {
    ImportedValue w, r;
    std::optional<ImportedValue> wb, rb;
    std::vector<ImportedValue> peeps;  // LSTM with P: i, o, f as [1, H]
  };
  Direction directionOf(int64_t d) {
    Direction dir{weightOf(1, d, "W"), weightOf(2, d, "R"), std::nullopt, std::nullopt, {}};
    std::tie(dir.wb, dir.rb) = biasOf(d);
    if (cell_ == Cell::Lstm && ctx_.hasInput(7)) {
      // [3H] as [1, 3H] split into i, o, f, each broadcast over the batch
      ImportedValue p = step(ctx_.input(7), 0, d, fmt::format("P{}", d));
      dir.peeps = gates(c_.op(Op::Unsqueeze, {p}, fmt::format("P{}_row", d), {{"axes", std::vector<int64_t>{0}}}), 3, fmt::format("peep{}", d));
    }
    return dir;
  }

  // One time step of direction d: h (and c) updated in place.
  void advance(int64_t d, const Direction& dir, const ImportedValue& xs, ImportedValue& h, ImportedValue& c, const std::string& tag) {
    const ImportedValue& r = dir.r;
    const std::optional<ImportedValue>& rb = dir.rb;
    ImportedValue xw = linear(xs, dir.w, dir.wb, "xw" + tag);
    if (cell_ == Cell::Rnn) {
      h = apply(act(d, 0), c_.op(Op::Add, {xw, linear(h, r, rb, "hr" + tag)}, "pre" + tag), "h" + tag);
      return;
    }
    if (cell_ == Cell::Lstm) {
      std::vector<ImportedValue> pre = gates(c_.op(Op::Add, {xw, linear(h, r, rb, "hr" + tag)}, "pre" + tag), 4, "gates" + tag);
      auto peep = [&](const ImportedValue& v, int k, const ImportedValue& state, const std::string& what) {
        if (dir.peeps.empty()) return v;
        return c_.op(Op::Add, {v, c_.op(Op::Mul, {dir.peeps[static_cast<size_t>(k)], state}, what + "_peep")}, what + "_with_peep");
      };
      // Gate order i, o, f, c; peepholes i, o, f.
      ImportedValue i = apply(act(d, 0), peep(pre[0], 0, c, "i" + tag), "i" + tag);
      ImportedValue f = inputForget_ ? c_.op(Op::Sub, {c_.scalarLike(i, 1), i}, "f" + tag)
                                     : apply(act(d, 0), peep(pre[2], 2, c, "f" + tag), "f" + tag);
      ImportedValue g = apply(act(d, 1), pre[3], "g" + tag);
      c = c_.op(Op::Add, {c_.op(Op::Mul, {f, c}, "fc" + tag), c_.op(Op::Mul, {i, g}, "ig" + tag)}, "c" + tag);
      ImportedValue o = apply(act(d, 0), peep(pre[1], 1, c, "o" + tag), "o" + tag);
      h = c_.op(Op::Mul, {o, apply(act(d, 2), c, "hc" + tag)}, "h" + tag);
      return;
    }
    // GRU: gates z, r, h. With linear_before_reset (PyTorch's GRU) one linear of h gives all three.
    const int64_t H = hidden_;
    std::vector<ImportedValue> x3 = gates(xw, 3, "xg" + tag);
    ImportedValue hz, hrr, hh;
    if (linearBeforeReset_) {
      std::vector<ImportedValue> h3 = gates(linear(h, r, rb, "hr" + tag), 3, "hg" + tag);
      hz = h3[0], hrr = h3[1], hh = h3[2];
    } else {
      ImportedValue rZr = rows(r, 0, 2 * H, "R_zr" + tag);
      std::optional<ImportedValue> rbZr;
      if (rb) rbZr = rows(*rb, 0, 2 * H, "Rb_zr" + tag);
      std::vector<ImportedValue> h2 = gates(linear(h, rZr, rbZr, "hr" + tag), 2, "hg" + tag);
      hz = h2[0], hrr = h2[1];
    }
    ImportedValue z = apply(act(d, 0), c_.op(Op::Add, {x3[0], hz}, "z_pre" + tag), "z" + tag);
    ImportedValue rg = apply(act(d, 0), c_.op(Op::Add, {x3[1], hrr}, "r_pre" + tag), "r" + tag);
    if (linearBeforeReset_) {
      hh = c_.op(Op::Mul, {rg, hh}, "hh" + tag);
    } else {
      std::optional<ImportedValue> rbH;
      if (rb) rbH = rows(*rb, 2 * H, 3 * H, "Rb_h" + tag);
      hh = linear(c_.op(Op::Mul, {rg, h}, "rh" + tag), rows(r, 2 * H, 3 * H, "R_h" + tag), rbH, "hh" + tag);
    }
    ImportedValue n = apply(act(d, 1), c_.op(Op::Add, {x3[2], hh}, "n_pre" + tag), "n" + tag);
    // (1 - z) n + z h = n + z (h - n)
    h = c_.op(Op::Add, {n, c_.op(Op::Mul, {z, c_.op(Op::Sub, {h, n}, "h_minus_n" + tag)}, "zd" + tag)}, "h" + tag);
  }

  NodeContext& ctx_;
  Composer c_;
  Cell cell_;
  int64_t layout_ = 0, seq_ = 0, hidden_ = 0, dirs_ = 1;
  std::optional<double> clip_;
  bool inputForget_ = false, linearBeforeReset_ = false;
  std::vector<Activation> acts_;
};

}  // namespace

void convertLstm(NodeContext& ctx) { Recurrent(ctx, Cell::Lstm).convert(); }
void convertGru(NodeContext& ctx) { Recurrent(ctx, Cell::Gru).convert(); }
void convertRnn(NodeContext& ctx) { Recurrent(ctx, Cell::Rnn).convert(); }


// ---- quantization: QuantizeLinear and DequantizeLinear as float arithmetic. A quantized model's
// int8 weights dequantize at import (a DequantizeLinear of constants folds into an f32 param), so
// its layers run in f32; the QuantizeLinear/DequantizeLinear pairs on activations run as
// round-and-clamp in f32, which gives the values an int8 kernel would.

namespace {

// A per-tensor (scalar) or per-axis (1-D) scale or zero point, shaped to broadcast over x.
ImportedValue alongAxis(NodeContext& ctx, Composer& c, const ImportedValue& v, const ir::TensorType& x, std::string_view what) {
  const ir::TensorType t = v.type();
  if (t.rank() == 0 || (t.rank() == 1 && t.shape[0] == ir::Dim(1))) return v;
  if (t.rank() != 1) ctx.fail("{} must be a scalar or 1-D, got {}", what, t.str());
  const auto rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for {}", axis, x.str());
  if (axis < 0) axis += rank;
  if (x.shape[static_cast<size_t>(axis)] != t.shape[0]) ctx.fail("{} has {} values for axis {} of {}", what, t.shape[0].str(), axis, x.str());
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = t.shape[0].value();
  return c.op(Op::Reshape, {v}, std::string(what) + "_along_axis", {{"shape", shape}});
}

}  // namespace

// y = (x - zero_point) * scale in f32.
void convertDequantizeLinear(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const ir::TensorType xt = x.type();
  if (xt.dtype != DType::I8 && xt.dtype != DType::U8 && xt.dtype != DType::I32) {
    ctx.fail("x must be int8, uint8 or int32, got {}", ir::dtypeName(xt.dtype));
  }
  const ImportedValue& scale = ctx.input(1);
  if (scale.type().dtype != DType::F32) ctx.fail("x_scale must be f32, got {}", ir::dtypeName(scale.type().dtype));
  const std::string f32(ir::dtypeName(DType::F32));
  ImportedValue xf = c.op(Op::Cast, {x}, "float", {{"to", f32}});
  if (const ImportedValue* zp = ctx.optionalInput(2)) {
    if (zp->type().dtype != xt.dtype) ctx.fail("x_zero_point must be {} as x is, got {}", ir::dtypeName(xt.dtype), ir::dtypeName(zp->type().dtype));
    ImportedValue zf = c.op(Op::Cast, {alongAxis(ctx, c, *zp, xt, "x_zero_point")}, "zero_point", {{"to", f32}});
    xf = c.op(Op::Sub, {xf, zf}, "centred");
  }
  c.result(Op::Mul, {xf, alongAxis(ctx, c, scale, xt, "x_scale")});
}

// y = saturate(round(x / scale) + zero_point), halves to even, in the zero point's dtype (uint8
// without one).
void convertQuantizeLinear(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const ir::TensorType xt = x.type();
  const ImportedValue& scale = ctx.input(1);
  if (scale.type().dtype != xt.dtype) ctx.fail("y_scale must be {} as x is, got {}", ir::dtypeName(xt.dtype), ir::dtypeName(scale.type().dtype));
  const ImportedValue* zp = ctx.optionalInput(2);
  const DType to = zp ? zp->type().dtype : DType::U8;
  if (to != DType::I8 && to != DType::U8) ctx.fail("y_zero_point must be int8 or uint8, got {}", ir::dtypeName(to));
  ImportedValue q = c.op(Op::Round, {c.op(Op::Div, {x, alongAxis(ctx, c, scale, xt, "y_scale")}, "scaled")}, "rounded");
  if (zp) {
    const std::string ft(ir::dtypeName(xt.dtype));
    q = c.op(Op::Add, {q, c.op(Op::Cast, {alongAxis(ctx, c, *zp, xt, "y_zero_point")}, "zero_point", {{"to", ft}})}, "shifted");
  }
  const double lo = to == DType::I8 ? -128 : 0, hi = to == DType::I8 ? 127 : 255;
  ImportedValue clamped = c.op(Op::Clip, {q}, "saturated", {{"min", lo}, {"max", hi}});
  c.result(Op::Cast, {clamped}, {{"to", std::string(ir::dtypeName(to))}});
}

}  // namespace policyc::frontend

namespace policyc::frontend {

// DynamicQuantizeLinear: the scale and zero point from the tensor's range (widened to hold 0), as
// ONNX's function body computes them; then QuantizeLinear's rounding into uint8. Three outputs.
void convertDynamicQuantizeLinear(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const ir::TensorType xt = x.type();
  std::vector<int64_t> all;
  for (size_t d = 0; d < xt.rank(); ++d) all.push_back(static_cast<int64_t>(d));
  const AttrMap whole{{"axes", all}, {"keepdims", int64_t{0}}};
  ImportedValue zero = c.scalarLike(x, 0);
  ImportedValue hi = c.op(Op::Max, {c.op(Op::ReduceMax, {x}, "max", whole), zero}, "hi");
  ImportedValue lo = c.op(Op::Neg, {c.op(Op::ReduceMax, {c.op(Op::Neg, {x}, "neg")}, "negmax", whole)}, "min");
  lo = c.op(Op::Min, {lo, zero}, "lo");
  ImportedValue scale = c.op(Op::Div, {c.op(Op::Sub, {hi, lo}, "range"), c.scalarLike(x, 255)}, "scale");
  const std::string u8(ir::dtypeName(DType::U8));
  ImportedValue zp = c.op(Op::Clip, {c.op(Op::Round, {c.op(Op::Sub, {zero, c.op(Op::Div, {lo, scale}, "lo_scaled")}, "zp_exact")}, "zp_rounded")},
                          "zp_saturated", {{"min", 0.0}, {"max", 255.0}});
  ImportedValue q = c.op(Op::Add, {c.op(Op::Round, {c.op(Op::Div, {x, scale}, "scaled")}, "rounded"), zp}, "shifted");
  q = c.op(Op::Clip, {q}, "saturated", {{"min", 0.0}, {"max", 255.0}});
  ctx.setOutput(0, ctx.emit(Op::Cast, {q}, {{"to", u8}}, ctx.outputName(0)));
  if (ctx.numOutputs() > 1) ctx.setOutput(1, ctx.emit(Op::Identity, {scale}, {}, ctx.outputName(1)));
  if (ctx.numOutputs() > 2) ctx.setOutput(2, ctx.emit(Op::Cast, {zp}, {{"to", u8}}, ctx.outputName(2)));
}

namespace {

// An int8/uint8 operand minus its zero point, in f32 (exact: both are small integers).
ImportedValue centred(NodeContext& ctx, Composer& c, size_t i, size_t zpInput, std::string_view what,
                      const std::function<ImportedValue(const ImportedValue&)>& shapeZeroPoint) {
  const ImportedValue& v = ctx.input(i);
  const DType t = v.type().dtype;
  if (t != DType::I8 && t != DType::U8) ctx.fail("{} must be int8 or uint8, got {}", what, ir::dtypeName(t));
  const std::string f32(ir::dtypeName(DType::F32));
  ImportedValue f = c.op(Op::Cast, {v}, std::string(what) + "_f32", {{"to", f32}});
  const ImportedValue* zp = ctx.optionalInput(zpInput);
  if (!zp) return f;
  if (zp->type().dtype != t) ctx.fail("{}'s zero point must be {} as {} is", what, ir::dtypeName(t), what);
  ImportedValue z = c.op(Op::Cast, {shapeZeroPoint(*zp)}, std::string(what) + "_zero_point", {{"to", f32}});
  return c.op(Op::Sub, {f, z}, std::string(what) + "_centred");
}

}  // namespace

// MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) into int32. Computed in f32, exact while
// every partial sum stays below 2^24 in magnitude (K up to 258 at full int8 range).
void convertMatMulInteger(NodeContext& ctx) {
  Composer c(ctx);
  const ir::TensorType at = ctx.input(0).type(), bt = ctx.input(1).type();
  if (at.rank() < 2 || bt.rank() < 2) ctx.fail("MatMulInteger takes operands of rank 2 or more, got {} and {}", at.str(), bt.str());
  // a_zero_point: a scalar or one per row of A ([M] -> [M, 1]); b_zero_point: a scalar or one per
  // column of B ([N], broadcasting as it is).
  ImportedValue a = centred(ctx, c, 0, 2, "A", [&](const ImportedValue& zp) {
    const ir::TensorType zt = zp.type();
    if (zt.rank() == 1 && zt.shape[0] != ir::Dim(1)) return c.op(Op::Unsqueeze, {zp}, "a_zero_point_rows", {{"axes", std::vector<int64_t>{1}}});
    return zp;
  });
  ImportedValue b = centred(ctx, c, 1, 3, "B", [](const ImportedValue& zp) { return zp; });
  ImportedValue y = c.op(Op::MatMul, {a, b}, "f32");
  c.result(Op::Cast, {y}, {{"to", std::string(ir::dtypeName(DType::I32))}});
}

// ConvInteger: a convolution of (x - x_zero_point) with (w - w_zero_point) into int32, in f32 as
// MatMulInteger; the attributes are Conv's.
void convertConvInteger(NodeContext& ctx) {
  Composer c(ctx);
  ImportedValue x = centred(ctx, c, 0, 2, "x", [](const ImportedValue& zp) { return zp; });
  const ir::TensorType wt = ctx.input(1).type();
  ImportedValue w = centred(ctx, c, 1, 3, "w", [&](const ImportedValue& zp) {
    // One zero point per output channel: [M] -> [M, 1, 1, ...].
    const ir::TensorType zt = zp.type();
    if (zt.rank() != 1 || zt.shape[0] == ir::Dim(1)) return zp;
    std::vector<int64_t> axes;
    for (size_t d = 1; d < wt.rank(); ++d) axes.push_back(static_cast<int64_t>(d));
    return c.op(Op::Unsqueeze, {zp}, "w_zero_point_channels", {{"axes", axes}});
  });
  AttrMap attrs = convAttributes(ctx, x.type(), w.type());
  ImportedValue y = c.op(Op::Conv, {x, w}, "f32", std::move(attrs));
  c.result(Op::Cast, {y}, {{"to", std::string(ir::dtypeName(DType::I32))}});
}

// ---- normalisation

// InstanceNormalization: each (sample, channel) normalised over its spatial dims, then scale and
// bias per channel.
void convertInstanceNormalization(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const ir::TensorType xt = x.type();
  if (xt.rank() < 3) ctx.fail("InstanceNormalization takes [N, C, D1, ...], got {}", xt.str());
  std::vector<int64_t> spatial, channelShape = {xt.shape[1].isBatch() ? -1 : xt.shape[1].value()};
  for (size_t d = 2; d < xt.rank(); ++d) {
    spatial.push_back(static_cast<int64_t>(d));
    channelShape.push_back(1);
  }
  const AttrMap over{{"axes", spatial}, {"keepdims", int64_t{1}}};
  ImportedValue mean = c.op(Op::ReduceMean, {x}, "mean", over);
  ImportedValue centredX = c.op(Op::Sub, {x, mean}, "centred");
  ImportedValue var = c.op(Op::ReduceMean, {c.op(Op::Mul, {centredX, centredX}, "squared")}, "var", over);
  ImportedValue denom = c.op(Op::Sqrt, {c.op(Op::Add, {var, c.scalarLike(x, ctx.attrFloat("epsilon", 1e-5))}, "var_eps")}, "std");
  ImportedValue normed = c.op(Op::Div, {centredX, denom}, "normed");
  ImportedValue scale = c.op(Op::Reshape, {ctx.input(1)}, "scale_channels", {{"shape", channelShape}});
  ImportedValue bias = c.op(Op::Reshape, {ctx.input(2)}, "bias_channels", {{"shape", channelShape}});
  c.result(Op::Add, {c.op(Op::Mul, {normed, scale}, "scaled"), bias});
}

// MeanVarianceNormalization: (x - mean) / sqrt(var) over `axes` (default N, H, W), as ONNX's
// function body: var = E[x²] - E[x]², and no epsilon.
void convertMeanVarianceNormalization(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const std::vector<int64_t> axes = ctx.attrInts("axes").value_or(std::vector<int64_t>{0, 2, 3});
  const AttrMap over{{"axes", axes}, {"keepdims", int64_t{1}}};
  ImportedValue mean = c.op(Op::ReduceMean, {x}, "mean", over);
  ImportedValue meanOfSquares = c.op(Op::ReduceMean, {c.op(Op::Mul, {x, x}, "squared")}, "mean_sq", over);
  ImportedValue var = c.op(Op::Sub, {meanOfSquares, c.op(Op::Mul, {mean, mean}, "mean_squared")}, "var");
  c.result(Op::Div, {c.op(Op::Sub, {x, mean}, "centred"), c.op(Op::Sqrt, {var}, "std")});
}

// LRN: x / (bias + alpha / size * sum of x² over the size channels around each)^beta; the window
// sum as shifted slices of the zero-padded squares, added in order.
void convertLrn(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const ir::TensorType xt = x.type();
  if (xt.rank() < 3 || xt.shape[1].isBatch()) ctx.fail("LRN takes [N, C, D1, ...] with static C, got {}", xt.str());
  const std::optional<int64_t> size = ctx.attrInt("size");
  if (!size || *size < 1) ctx.fail("attribute size must be given and positive");
  if (*size > 1024) ctx.fail("a window of {} channels is too large (at most 1024)", *size);
  const double alpha = ctx.attrFloat("alpha", 1e-4), beta = ctx.attrFloat("beta", 0.75), bias = ctx.attrFloat("bias", 1.0);
  const int64_t channels = xt.shape[1].value();
  const int64_t before = (*size - 1) / 2, after = *size - 1 - before;
  ImportedValue sq = c.op(Op::Mul, {x, x}, "squared");
  std::vector<int64_t> pads(2 * xt.rank(), 0);
  pads[1] = before;
  pads[1 + xt.rank()] = after;
  ImportedValue padded = c.op(Op::Pad, {sq}, "padded", {{"pads", pads}});
  ImportedValue sum;
  for (int64_t k = 0; k < *size; ++k) {
    ImportedValue s = c.op(Op::Slice, {padded}, fmt::format("window{}", k),
                           {{"starts", std::vector<int64_t>{k}}, {"ends", std::vector<int64_t>{k + channels}}, {"axes", std::vector<int64_t>{1}}});
    sum = k == 0 ? s : c.op(Op::Add, {sum, s}, fmt::format("sum{}", k));
  }
  ImportedValue base = c.op(Op::Add, {c.scalarLike(x, bias), c.op(Op::Mul, {sum, c.scalarLike(x, alpha / static_cast<double>(*size))}, "scaled")}, "base");
  c.result(Op::Div, {x, c.op(Op::Pow, {base, c.scalarLike(x, beta)}, "denominator")});
}

}  // namespace policyc::frontend

namespace policyc::frontend {

namespace {

// TopK takes one argmax per element it returns: at most this many.
constexpr int64_t kMaxTopK = 64;

}  // namespace

// TopK: k rounds of argmax along the axis, each taking the value it found out of the running
// (replaced by -inf); ties go to the lower index, as ONNX asks. largest=0 works on -x. Floats
// only (an integer has no value below every other to take a found one out with).
void convertTopK(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = floatInput(ctx, 0);
  const ir::TensorType t = x.type();
  const ir::Tensor& kt = ctx.constantInput(1, "K");
  if (kt.numel() != 1) ctx.fail("K (input '{}') must hold one value", ctx.input(1).name);
  const int64_t k = kt.getAsInt(0);
  const auto rank = static_cast<int64_t>(t.rank());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for {}", axis, t.str());
  if (axis < 0) axis += rank;
  const int64_t n = staticDim(ctx, t, static_cast<size_t>(axis), "the axis TopK selects along");
  if (k < 1 || k > n) ctx.fail("K = {} must be between 1 and the axis' {}", k, n);
  if (k > kMaxTopK) ctx.fail("K = {}: policyc selects by one argmax per element, at most {}", k, kMaxTopK);
  const bool largest = ctx.attrInt("largest", 1) != 0;
  ctx.ignoreAttr("sorted");  // the rounds give them sorted, which ONNX allows either way
  const AttrMap along{{"axis", axis}};
  ImportedValue scores = largest ? x : c.op(Op::Neg, {x}, "negated");
  std::vector<int64_t> positionsShape(static_cast<size_t>(rank), 1);
  positionsShape[static_cast<size_t>(axis)] = n;
  ir::Tensor positions(DType::I64, positionsShape);
  for (int64_t i = 0; i < n; ++i) positions.data<int64_t>()[i] = i;
  ImportedValue pos = c.constant(std::move(positions), "positions");
  ImportedValue gone = c.scalarLike(x, -std::numeric_limits<double>::infinity());
  std::vector<ImportedValue> indices, values;
  for (int64_t r = 0; r < k; ++r) {
    ImportedValue best = c.op(Op::ArgMax, {scores}, fmt::format("index{}", r), {{"axis", axis}, {"keepdims", int64_t{1}}});
    indices.push_back(best);
    values.push_back(c.op(Op::GatherElements, {x, best}, fmt::format("value{}", r), along));
    if (r + 1 < k) {
      ImportedValue taken = c.op(Op::Equal, {pos, best}, fmt::format("taken{}", r));
      scores = c.op(Op::Where, {taken, gone, scores}, fmt::format("rest{}", r));
    }
  }
  ctx.setOutput(0, ctx.emit(Op::Concat, values, along, ctx.outputName(0)));
  if (ctx.numOutputs() > 1) ctx.setOutput(1, ctx.emit(Op::Concat, indices, along, ctx.outputName(1)));
}

// GatherND with indices known at import: each index tuple addresses one slice of the data's
// leading dims (after batch_dims), so the data flattened over those dims and one gather of the
// tuples' flat positions do it; batch_dims pair the indices' leading dims with the data's.
void convertGatherND(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& data = ctx.input(0);
  const ir::TensorType dt = data.type();
  const ir::Tensor& idx = ctx.constantInput(1, "indices");
  const std::vector<int64_t>& is = idx.shape();
  const int64_t b = ctx.attrInt("batch_dims", 0);
  if (is.empty()) ctx.fail("indices must have rank 1 or more");
  const int64_t q = static_cast<int64_t>(is.size()), r = static_cast<int64_t>(dt.rank()), m = is.back();
  if (b < 0 || b >= std::min(q, r)) ctx.fail("batch_dims {} must be below the ranks of indices ({}) and data ({})", b, q, r);
  if (m < 1 || b + m > r) ctx.fail("index tuples of {} values do not fit {} after {} batch dims", m, dt.str(), b);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < r; ++d) dims.push_back(staticDim(ctx, dt, static_cast<size_t>(d), "GatherND's data"));
  for (int64_t d = 0; d < b; ++d) {
    if (is[static_cast<size_t>(d)] != dims[static_cast<size_t>(d)]) ctx.fail("batch dim {} of indices and data differ", d);
  }
  // data as [B, prod(indexed dims), rest...] where B is the product of the batch dims.
  int64_t batch = 1, indexed = 1;
  for (int64_t d = 0; d < b; ++d) batch *= dims[static_cast<size_t>(d)];
  for (int64_t d = b; d < b + m; ++d) indexed *= dims[static_cast<size_t>(d)];
  std::vector<int64_t> flatShape = {batch, indexed};
  std::vector<int64_t> rest(dims.begin() + b + m, dims.end());
  flatShape.insert(flatShape.end(), rest.begin(), rest.end());
  ImportedValue flat = c.op(Op::Reshape, {data}, "flat", {{"shape", flatShape}});
  // Flat positions [B, tuples per batch]: a gather along axis 1 of each batch row, as one gather of
  // [B * tuples] positions into [B * indexed] rows.
  int64_t tuples = 1;
  for (int64_t d = b; d + 1 < q; ++d) tuples *= is[static_cast<size_t>(d)];
  ir::Tensor flatIndex(DType::I64, {batch * tuples});
  for (int64_t g = 0; g < batch; ++g) {
    for (int64_t j = 0; j < tuples; ++j) {
      int64_t at = 0;
      for (int64_t e = 0; e < m; ++e) {
        const int64_t size = dims[static_cast<size_t>(b + e)];
        int64_t v = idx.getAsInt((g * tuples + j) * m + e);
        if (v < -size || v >= size) ctx.fail("index {} is out of range for a dim of {}", v, size);
        if (v < 0) v += size;
        at = at * size + v;
      }
      flatIndex.data<int64_t>()[g * tuples + j] = g * indexed + at;
    }
  }
  std::vector<int64_t> rowsShape = {batch * indexed};
  rowsShape.insert(rowsShape.end(), rest.begin(), rest.end());
  ImportedValue rows = c.op(Op::Reshape, {flat}, "rows", {{"shape", rowsShape}});
  ImportedValue picked = c.op(Op::Gather, {rows, c.constant(std::move(flatIndex), "positions")}, "picked", {{"axis", int64_t{0}}});
  std::vector<int64_t> outShape(is.begin(), is.end() - 1);
  outShape.insert(outShape.end(), rest.begin(), rest.end());
  c.result(Op::Reshape, {picked}, {{"shape", outShape}});
}

}  // namespace policyc::frontend

namespace policyc::frontend {

namespace {

// A scatter writes an update element into one element of the data; duplicates are applied one
// round at a time in update order: at most this many updates of one element.
constexpr int64_t kMaxScatterRounds = 64;

std::vector<int64_t> staticDims(NodeContext& ctx, const ir::TensorType& t, std::string_view what) {
  std::vector<int64_t> dims;
  for (const ir::Dim& d : t.shape) {
    if (d.isBatch()) ctx.fail("{} {} has the batch dim; a scatter with indices known at import needs static shapes", what, t.str());
    dims.push_back(d.value());
  }
  return dims;
}

// data with updates written where `targets` says (the flat data position of each flat update
// element), combined by `reduction`, in the order of the updates: rounds of a gather of the
// updates and a where, the i-th update of every element in round i.
void scatterFlat(NodeContext& ctx, Composer& c, const ImportedValue& data, const ImportedValue& updates,
                 const std::vector<int64_t>& dataDims, const std::vector<int64_t>& targets) {
  const std::string reduction = ctx.attrString("reduction").value_or("none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min") {
    ctx.fail("reduction '{}' is not supported", reduction);
  }
  int64_t n = 1;
  for (int64_t d : dataDims) n *= d;  // a tensor's dims: their product is within the IR's limits
  if (n > kMaxImportElements || static_cast<int64_t>(targets.size()) > kMaxImportElements) {
    ctx.fail("a scatter into {} elements is too large (at most 2^26 with indices known at import)", n);
  }
  std::vector<std::vector<int64_t>> rounds;  // rounds[r][p]: the update index, or -1
  std::vector<int64_t> seen(static_cast<size_t>(n), 0);
  for (size_t j = 0; j < targets.size(); ++j) {
    const int64_t r = seen[static_cast<size_t>(targets[j])]++;
    if (r >= kMaxScatterRounds) ctx.fail("one element is updated more than {} times", kMaxScatterRounds);
    if (static_cast<size_t>(r) == rounds.size()) rounds.emplace_back(static_cast<size_t>(n), -1);
    rounds[static_cast<size_t>(r)][static_cast<size_t>(targets[j])] = static_cast<int64_t>(j);
  }
  ImportedValue y = c.op(Op::Reshape, {data}, "flat", {{"shape", std::vector<int64_t>{n}}});
  ImportedValue u = c.op(Op::Reshape, {updates}, "updates_flat", {{"shape", std::vector<int64_t>{static_cast<int64_t>(targets.size())}}});
  for (size_t r = 0; r < rounds.size(); ++r) {
    ir::Tensor src(DType::I64, {n}), mask(DType::Bool, {n});
    for (int64_t p = 0; p < n; ++p) {
      const int64_t j = rounds[r][static_cast<size_t>(p)];
      src.data<int64_t>()[p] = std::max<int64_t>(j, 0);
      mask.setAsDouble(p, j >= 0 ? 1.0 : 0.0);
    }
    ImportedValue g = c.op(Op::Gather, {u, c.constant(std::move(src), fmt::format("source{}", r))}, fmt::format("round{}", r),
                           {{"axis", int64_t{0}}});
    if (reduction != "none") {
      const Op op = reduction == "add" ? Op::Add : reduction == "mul" ? Op::Mul : reduction == "max" ? Op::Max : Op::Min;
      g = c.op(op, {y, g}, fmt::format("combined{}", r));
    }
    y = c.op(Op::Where, {c.constant(std::move(mask), fmt::format("written{}", r)), g, y}, fmt::format("after{}", r));
  }
  c.result(Op::Reshape, {y}, {{"shape", dataDims}});
}

}  // namespace

// ScatterElements (and opset 9-10's Scatter): update element u goes to u's position with its
// `axis` coordinate replaced by indices[u]. Indices known at import, static shapes.
void convertScatterElements(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& data = ctx.input(0);
  const ImportedValue& updates = ctx.input(2);
  const std::vector<int64_t> dims = staticDims(ctx, data.type(), "data");
  const ir::Tensor& idx = ctx.constantInput(1, "indices");
  if (idx.shape() != staticDims(ctx, updates.type(), "updates")) ctx.fail("indices {} and updates {} differ in shape", idx.type().str(), updates.type().str());
  const auto rank = static_cast<int64_t>(dims.size());
  if (static_cast<int64_t>(idx.shape().size()) != rank) ctx.fail("indices {} must have the data's rank {}", idx.type().str(), rank);
  int64_t axis = ctx.attrInt("axis", 0);
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for rank {}", axis, rank);
  if (axis < 0) axis += rank;
  std::vector<int64_t> targets;
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);
  for (int64_t j = 0; j < idx.numel(); ++j) {
    int64_t rem = j;
    for (int64_t d = rank - 1; d >= 0; --d) {
      at[static_cast<size_t>(d)] = rem % idx.shape()[static_cast<size_t>(d)];
      rem /= idx.shape()[static_cast<size_t>(d)];
    }
    const int64_t size = dims[static_cast<size_t>(axis)];
    int64_t v = idx.getAsInt(j);
    if (v < -size || v >= size) ctx.fail("index {} is out of range for axis {} of size {}", v, axis, size);
    at[static_cast<size_t>(axis)] = v < 0 ? v + size : v;
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (at[static_cast<size_t>(d)] >= dims[static_cast<size_t>(d)]) ctx.fail("indices {} do not fit data of {}", idx.type().str(), data.type().str());
      flat = flat * dims[static_cast<size_t>(d)] + at[static_cast<size_t>(d)];
    }
    targets.push_back(flat);
  }
  scatterFlat(ctx, c, data, updates, dims, targets);
}

// ScatterND: each index tuple of indices' last dim addresses a slice of the data, which the
// matching slice of updates replaces (or is combined with). Indices known at import.
void convertScatterND(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& data = ctx.input(0);
  const ImportedValue& updates = ctx.input(2);
  const std::vector<int64_t> dims = staticDims(ctx, data.type(), "data");
  const std::vector<int64_t> udims = staticDims(ctx, updates.type(), "updates");
  const ir::Tensor& idx = ctx.constantInput(1, "indices");
  const std::vector<int64_t>& is = idx.shape();
  if (is.empty()) ctx.fail("indices must have rank 1 or more");
  const int64_t k = is.back(), r = static_cast<int64_t>(dims.size());
  if (k < 1 || k > r) ctx.fail("index tuples of {} values do not fit data of rank {}", k, r);
  std::vector<int64_t> want(is.begin(), is.end() - 1);
  want.insert(want.end(), dims.begin() + k, dims.end());
  if (udims != want) ctx.fail("updates {} must be {}", updates.type().str(), ir::attrValueStr(want));
  int64_t slice = 1;
  for (int64_t d = k; d < r; ++d) slice *= dims[static_cast<size_t>(d)];
  const int64_t tuples = k == 0 ? 0 : idx.numel() / k;
  std::vector<int64_t> targets;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t base = 0;
    for (int64_t e = 0; e < k; ++e) {
      const int64_t size = dims[static_cast<size_t>(e)];
      int64_t v = idx.getAsInt(t * k + e);
      if (v < -size || v >= size) ctx.fail("index {} is out of range for a dim of {}", v, size);
      base = base * size + (v < 0 ? v + size : v);
    }
    for (int64_t s = 0; s < slice; ++s) targets.push_back(base * slice + s);
  }
  scatterFlat(ctx, c, data, updates, dims, targets);
}

}  // namespace policyc::frontend

namespace policyc::frontend {

namespace {

// The requantization of an exact f32 accumulator: round(acc * scale_a * scale_b / y_scale) +
// y_zero_point, saturated to the zero point's int8/uint8 (uint8 without one).
void requantize(NodeContext& ctx, Composer& c, ImportedValue acc, const ImportedValue& scaleA, const ImportedValue& scaleB,
                size_t yScale, size_t yZeroPoint) {
  const ImportedValue* zp = ctx.optionalInput(yZeroPoint);
  const DType to = zp ? zp->type().dtype : DType::U8;
  if (to != DType::I8 && to != DType::U8) ctx.fail("y_zero_point must be int8 or uint8, got {}", ir::dtypeName(to));
  const std::string f32(ir::dtypeName(DType::F32));
  ImportedValue scaled = c.op(Op::Div, {c.op(Op::Mul, {c.op(Op::Mul, {acc, scaleA}, "scaled_a"), scaleB}, "scaled_ab"), ctx.input(yScale)},
                              "scaled");
  ImportedValue q = c.op(Op::Round, {scaled}, "rounded");
  if (zp) q = c.op(Op::Add, {q, c.op(Op::Cast, {*zp}, "y_zero_point", {{"to", f32}})}, "shifted");
  const double lo = to == DType::I8 ? -128 : 0, hi = to == DType::I8 ? 127 : 255;
  q = c.op(Op::Clip, {q}, "saturated", {{"min", lo}, {"max", hi}});
  c.result(Op::Cast, {q}, {{"to", std::string(ir::dtypeName(to))}});
}

}  // namespace

// QLinearMatMul: the int8 matmul of the centred operands (exact in f32 below 2^24), requantized;
// a's scale and zero point per tensor or per row, b's per tensor or per column.
void convertQLinearMatMul(NodeContext& ctx) {
  Composer c(ctx);
  auto rows = [&](const ImportedValue& v) {
    const ir::TensorType t = v.type();
    return t.rank() == 1 && t.shape[0] != ir::Dim(1) ? c.op(Op::Unsqueeze, {v}, "per_row", {{"axes", std::vector<int64_t>{1}}}) : v;
  };
  ImportedValue a = centred(ctx, c, 0, 2, "a", rows);
  ImportedValue b = centred(ctx, c, 3, 5, "b", [](const ImportedValue& v) { return v; });
  ImportedValue acc = c.op(Op::MatMul, {a, b}, "acc");
  requantize(ctx, c, acc, rows(ctx.input(1)), ctx.input(4), 6, 7);
}

// QLinearConv: the convolution of the centred operands plus the int32 bias, requantized; w's
// scale and zero point per tensor or per output channel.
void convertQLinearConv(NodeContext& ctx) {
  Composer c(ctx);
  const ir::TensorType wt = ctx.input(3).type();
  auto channels = [&](const ImportedValue& v, size_t rank, size_t at) {
    const ir::TensorType t = v.type();
    if (t.rank() != 1 || t.shape[0] == ir::Dim(1)) return v;
    std::vector<int64_t> axes;
    for (size_t d = 0; d < rank; ++d) {
      if (d != at) axes.push_back(static_cast<int64_t>(d));
    }
    return c.op(Op::Unsqueeze, {v}, "per_channel", {{"axes", axes}});
  };
  ImportedValue x = centred(ctx, c, 0, 2, "x", [](const ImportedValue& v) { return v; });
  ImportedValue w = centred(ctx, c, 3, 5, "w", [&](const ImportedValue& v) { return channels(v, wt.rank(), 0); });
  ImportedValue acc = c.op(Op::Conv, {x, w}, "acc", convAttributes(ctx, x.type(), w.type()));
  if (const ImportedValue* bias = ctx.optionalInput(8)) {
    if (bias->type().dtype != DType::I32) ctx.fail("B must be int32, got {}", ir::dtypeName(bias->type().dtype));
    ImportedValue bf = c.op(Op::Cast, {*bias}, "bias_f32", {{"to", std::string(ir::dtypeName(DType::F32))}});
    acc = c.op(Op::Add, {acc, channels(bf, wt.rank(), 1)}, "acc_bias");
  }
  requantize(ctx, c, acc, ctx.input(1), channels(ctx.input(4), wt.rank(), 1), 6, 7);
}

}  // namespace policyc::frontend
