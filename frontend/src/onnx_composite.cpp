// ONNX operators that are compositions of IR ops (as ONNX's own function bodies define many of
// them): Reciprocal is a div, ReduceL2 a sqrt of a reduce_sum of squares, Trilu a where over a
// constant mask. Fusion puts each composition back into one kernel, so none needs an op of its own
// in the IR, the interpreter or the backends.
#include <algorithm>
#include <cmath>
#include <limits>

#include "onnx_ops.h"
#include "onnx_tensor.h"

namespace policyc::frontend {

using ir::AttrMap;
using ir::DType;
using ir::Op;

namespace {

// Builds one node's composition: every intermediate value gets a fresh name derived from the
// node's output, the last one the output's own name.
class Composer {
 public:
  explicit Composer(NodeContext& ctx) : ctx_(ctx), out_(ctx.outputName(0)) {}

  // An intermediate value named OUT_<what>.
  ImportedValue op(Op op, const std::vector<ImportedValue>& ins, std::string_view what, AttrMap attrs = {}) {
    return ctx_.emit(op, ins, std::move(attrs), ctx_.freshName(fmt::format("{}_{}", out_, what)));
  }
  // The node's output.
  void result(Op op, const std::vector<ImportedValue>& ins, AttrMap attrs = {}) {
    ctx_.setOutput(0, ctx_.emit(op, ins, std::move(attrs), out_));
  }
  // A scalar constant of x's dtype.
  ImportedValue scalarLike(const ImportedValue& x, double v) {
    ir::Tensor c(x.type().dtype, {});
    c.setAsDouble(0, v);
    return constant(std::move(c), "const");
  }
  const std::string& name() const { return out_; }
  // An intermediate constant named OUT_<what>.
  ImportedValue constant(ir::Tensor t, std::string_view what) {
    return ImportedValue::constant(std::move(t), ctx_.freshName(fmt::format("{}_{}", out_, what)), ctx_.provenance());
  }
  // The node's output, known at import.
  void constantResult(ir::Tensor t) { ctx_.setOutput(0, ImportedValue::constant(std::move(t), out_, ctx_.provenance())); }

 private:
  NodeContext& ctx_;
  std::string out_;
};

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

}  // namespace policyc::frontend
