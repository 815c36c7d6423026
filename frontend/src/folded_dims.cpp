// Values whose ONNX shape has a dim that is a multiple of the batch size ([T, 4*batch, 16], as
// nn.MultiheadAttention's export makes them): held as IR values with the batch as a dim of its own
// ([T, batch, 4, 16]), and the ops attention applies to them (Reshape, Transpose, MatMul, Gemm,
// Softmax, elementwise) worked out on the IR dims. Any other op meeting one is an error naming it.
#include <algorithm>
#include <deque>

#include "import_context.h"
#include "onnx_tensor.h"
#include "policyc/support/sizes.h"

namespace policyc::frontend {
namespace {

// The IR dims of `v` grouped by ONNX dim (one each unless folded).
std::vector<ir::Shape> groupsOf(const ImportedValue& v) {
  std::vector<ir::Shape> out;
  if (v.isRuntime()) {
    const ir::Shape& shape = v.value->type().shape;
    if (!v.isFolded()) {
      for (const ir::Dim& d : shape) out.push_back({d});
      return out;
    }
    size_t at = 0;
    for (int n : v.folds) {
      out.emplace_back(shape.begin() + static_cast<std::ptrdiff_t>(at), shape.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(n)));
      at += static_cast<size_t>(n);
    }
    return out;
  }
  for (const ir::Dim& d : v.type().shape) out.push_back({d});
  return out;
}

// `v` with its folds dropped: its IR value as the ops of the IR see it.
ImportedValue unfolded(const ImportedValue& v) {
  ImportedValue r = v;
  r.folds.clear();
  return r;
}

// `result` folded as `folds` says, or left plain where every ONNX dim is one IR dim.
ImportedValue withFolds(ImportedValue result, std::vector<int> folds) {
  if (std::any_of(folds.begin(), folds.end(), [](int n) { return n != 1; })) result.folds = std::move(folds);
  return result;
}

ImportedValue reshapeIr(NodeContext& ctx, const ImportedValue& v, const ir::Shape& to, const std::string& name) {
  const ir::Shape from = v.isRuntime() ? v.value->type().shape : v.type().shape;
  if (from == to) return unfolded(v);
  std::optional<std::vector<int64_t>> target = reshapeTarget(from, to);
  if (!target) ctx.fail("internal: no reshape of {} to {} keeps the batch dims", ir::shapeStr(from), ir::shapeStr(to));
  return ctx.emit(ir::Op::Reshape, {unfolded(v)}, {{"shape", *target}}, name);
}

// Operands lined up for broadcasting: ONNX dims aligned from the right, where one operand folds a
// dim into several IR dims the others must have 1 there (widened to as many 1s) or the same IR
// dims. The last `core` dims of each operand are its own (a matmul's rows and columns) and must
// not be folded. Returns the operands as plain IR values and the result's folds.
std::pair<std::vector<ImportedValue>, std::vector<int>> alignFolded(NodeContext& ctx,
                                                                    const std::vector<ImportedValue>& inputs,
                                                                    size_t core) {
  std::vector<std::vector<ir::Shape>> groups;
  size_t rank = 0;
  for (const ImportedValue& in : inputs) {
    groups.push_back(groupsOf(in));
    rank = std::max(rank, groups.back().size());
  }
  auto shapes = [&] {
    std::vector<std::string> s;
    for (const ImportedValue& in : inputs) s.push_back(onnxDimsStr(in.dims()));
    return fmt::format("{}", fmt::join(s, " and "));
  };
  std::vector<std::optional<ir::Shape>> fold(rank);  // per result dim: the IR dims of a folded one
  for (const std::vector<ir::Shape>& g : groups) {
    if (g.size() < core) ctx.fail("operands {}: each needs at least {} dims here", shapes(), core);
    for (size_t j = 0; j < g.size(); ++j) {
      if (g[j].size() == 1) continue;
      if (j + core >= g.size()) {
        ctx.fail("operands {}: a multiple of the batch size among the last {} dims is not supported", shapes(), core);
      }
      std::optional<ir::Shape>& f = fold[rank - g.size() + j];
      if (f && *f != g[j]) ctx.fail("operands {} do not broadcast", shapes());
      f = g[j];
    }
  }
  std::vector<ImportedValue> operands;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<ir::Shape>& g = groups[k];
    ir::Shape shape;
    for (size_t j = 0; j < g.size(); ++j) {
      const std::optional<ir::Shape>& f = fold[rank - g.size() + j];
      if (f && g[j].size() == 1 && j + core < g.size()) {
        if (g[j].front() != ir::Dim(1)) ctx.fail("operands {} do not broadcast", shapes());
        shape.insert(shape.end(), f->size(), ir::Dim(1));
      } else {
        shape.insert(shape.end(), g[j].begin(), g[j].end());
      }
    }
    const std::string base = inputs[k].name.empty() ? std::string("operand") : inputs[k].name;
    operands.push_back(reshapeIr(ctx, inputs[k], shape, ctx.freshName(base + "_unfolded")));
  }
  std::vector<int> folds;
  for (const std::optional<ir::Shape>& f : fold) folds.push_back(f ? static_cast<int>(f->size()) : 1);
  return {std::move(operands), std::move(folds)};
}

// The ONNX axis `axis` of a value with `folds` as its IR axis; it must not be folded itself.
int64_t irAxis(NodeContext& ctx, const ImportedValue& v, int64_t axis) {
  const auto rank = static_cast<int64_t>(v.folds.size());
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for {}", axis, onnxDimsStr(v.dims()));
  if (axis < 0) axis += rank;
  if (v.folds[static_cast<size_t>(axis)] != 1) {
    ctx.fail("axis {} of {} is a multiple of the batch size, which this op cannot take", axis, onnxDimsStr(v.dims()));
  }
  int64_t at = 0;
  for (int64_t i = 0; i < axis; ++i) at += v.folds[static_cast<size_t>(i)];
  return at;
}

}  // namespace

std::optional<std::vector<int64_t>> reshapeTarget(const ir::Shape& from, const ir::Shape& to) {
  const auto batches = [](const ir::Shape& s) { return std::count_if(s.begin(), s.end(), [](ir::Dim d) { return d.isBatch(); }); };
  const auto count = batches(to);
  if (count != batches(from)) return std::nullopt;
  std::vector<int64_t> out;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i].isStatic()) {
      out.push_back(to[i].value());
    } else if (count == 1) {
      out.push_back(-1);
    } else if (i < from.size() && from[i].isBatch()) {
      out.push_back(0);
    } else {
      return std::nullopt;
    }
  }
  return out;
}

std::vector<ImportedValue> NodeContext::emitFolded(ir::Op op, const std::vector<ImportedValue>& inputs,
                                                   ir::AttrMap attrs, std::vector<std::string> names) {
  const ImportedValue& x = inputs.front();
  const ir::OpInfo& info = ir::opInfo(op);
  switch (op) {
    case ir::Op::Identity:
    case ir::Op::Dropout:
      return {withFolds(emit(op, {unfolded(x)}, std::move(attrs), names.front()), x.folds)};
    case ir::Op::Transpose: {
      std::vector<ir::Shape> g = groupsOf(x);
      std::vector<int64_t> perm = ir::attrInts(attrs, "perm");
      if (perm.empty()) {
        for (size_t i = g.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      }
      if (perm.size() != g.size()) fail("perm has {} values for {}", perm.size(), onnxDimsStr(x.dims()));
      std::vector<int64_t> first(g.size());  // the IR axis each ONNX axis starts at
      for (size_t i = 1; i < g.size(); ++i) first[i] = first[i - 1] + static_cast<int64_t>(g[i - 1].size());
      std::vector<int64_t> irPerm;
      std::vector<int> folds;
      std::vector<bool> seen(g.size(), false);
      for (int64_t p : perm) {
        if (p < 0 || p >= static_cast<int64_t>(g.size()) || seen[static_cast<size_t>(p)]) {
          fail("perm [{}] is not a permutation of {} axes", fmt::join(perm, ","), g.size());
        }
        seen[static_cast<size_t>(p)] = true;
        const size_t n = g[static_cast<size_t>(p)].size();
        for (size_t k = 0; k < n; ++k) irPerm.push_back(first[static_cast<size_t>(p)] + static_cast<int64_t>(k));
        folds.push_back(static_cast<int>(n));
      }
      return {withFolds(emit(op, {unfolded(x)}, {{"perm", irPerm}}, names.front()), folds)};
    }
    case ir::Op::Softmax:
    case ir::Op::LogSoftmax: {
      const int64_t axis = irAxis(*this, x, ir::attrInt(attrs, "axis"));
      return {withFolds(emit(op, {unfolded(x)}, {{"axis", axis}}, names.front()), x.folds)};
    }
    case ir::Op::MatMul: {
      // A [..., rows, K] times a matrix: A's rows may fold the batch (a linear layer over
      // [T*batch, E]); the IR's matmul takes A's IR dims before K as they are.
      const ImportedValue& w = inputs[1];
      if (x.isFolded() && x.folds.back() == 1 && !w.isFolded() && w.dims().size() == 2) {
        return {withFolds(emit(op, {unfolded(x), w}, std::move(attrs), names.front()), x.folds)};
      }
      auto [operands, folds] = alignFolded(*this, inputs, 2);
      return {withFolds(emit(op, operands, std::move(attrs), names.front()), folds)};
    }
    default: break;
  }
  if (info.fusion == ir::FusionKind::Elementwise && op != ir::Op::BatchNorm && names.size() == 1) {
    auto [operands, folds] = alignFolded(*this, inputs, 0);
    return {withFolds(emit(op, operands, std::move(attrs), names.front()), folds)};
  }
  for (const ImportedValue& in : inputs) {
    if (in.isFolded()) fail("{}", describeKindProblem(in));
  }
  fail("internal: emitFolded without a folded input");
}

ImportedValue reshapeFolded(NodeContext& ctx, const ImportedValue& x, std::vector<OnnxDim> target,
                            const std::string& name) {
  const std::vector<OnnxDim> have = x.dims();
  auto cannot = [&](std::string_view why) {
    std::vector<std::string> t;
    for (const OnnxDim& d : target) t.push_back(d.batch ? (d.coef == 1 ? "batch" : fmt::format("{}*batch", d.coef)) : std::to_string(d.coef));
    ctx.fail("cannot reshape {} to [{}]: {}", onnxDimsStr(have), fmt::join(t, ","), why);
  };
  // 0 copies the input's dim, -1 is what is left over.
  std::optional<size_t> inferred;
  for (size_t i = 0; i < target.size(); ++i) {
    OnnxDim& d = target[i];
    if (d.batch && d.coef < 1) cannot("a multiple of the batch size must be positive");
    if (d.batch) continue;
    if (d.coef == 0) {
      if (i >= have.size()) cannot("a 0 copies a dim the input does not have");
      d = have[i];
    } else if (d.coef == -1) {
      if (inferred) cannot("more than one -1");
      inferred = i;
    } else if (d.coef < 0) {
      cannot("a negative dim");
    }
  }
  // Empty dims have no refinement; the products below stay within int64 (a tensor's dims are
  // bounded by the IR's limits, a target's are checked).
  for (const OnnxDim& d : have) {
    if (d.coef < 1) cannot("an empty dim is not supported here");
  }
  for (size_t i = 0; i < target.size(); ++i) {
    if (i != inferred && (target[i].coef < 1 || target[i].coef > kMaxImportElements)) cannot("a dim is empty or too large");
  }
  if (inferred) {
    OnnxDim total, known;
    int totalBatch = 0, knownBatch = 0;
    for (const OnnxDim& d : have) {
      std::optional<int64_t> p = sizes::mul(total.coef, d.coef);
      if (!p) cannot("the input is too large");
      total.coef = *p;
      totalBatch += d.batch;
    }
    for (size_t i = 0; i < target.size(); ++i) {
      if (i == *inferred) continue;
      std::optional<int64_t> p = sizes::mul(known.coef, target[i].coef);
      if (!p) cannot("the shape is too large");
      known.coef = *p;
      knownBatch += target[i].batch;
    }
    if (known.coef == 0 || total.coef % known.coef != 0 || totalBatch - knownBatch < 0 || totalBatch - knownBatch > 1) {
      cannot("the -1 would not be a size");
    }
    target[*inferred] = OnnxDim{total.coef / known.coef, totalBatch - knownBatch == 1};
  }

  // Walk the input's IR dims and the target's dims together, splitting where one is a multiple of
  // the other: the common refinement, which a row-major reshape cannot tell from either side.
  const ir::Shape in = x.isRuntime() ? x.value->type().shape : x.type().shape;
  std::deque<OnnxDim> pieces;
  for (const ir::Dim& d : in) pieces.push_back(d.isBatch() ? OnnxDim{1, true} : OnnxDim{d.value(), false});
  ir::Shape out;
  std::vector<int> folds;
  for (const OnnxDim& t : target) {
    OnnxDim need = t;
    ir::Shape group;
    while (need != OnnxDim{1, false}) {
      while (!pieces.empty() && pieces.front() == OnnxDim{1, false}) pieces.pop_front();
      if (pieces.empty()) cannot("the sizes do not match");
      OnnxDim& p = pieces.front();
      if (p.batch) {
        if (!need.batch) cannot("it would split the batch size");
        group.push_back(ir::Dim::batch());
        need.batch = false;
        pieces.pop_front();
      } else if (need.coef % p.coef == 0) {
        group.push_back(ir::Dim(p.coef));
        need.coef /= p.coef;
        pieces.pop_front();
      } else if (p.coef % need.coef == 0 && !need.batch) {
        group.push_back(ir::Dim(need.coef));
        p.coef /= need.coef;
        need.coef = 1;
      } else {
        cannot("the dims do not split into each other");
      }
    }
    // Static dims next to each other in a group are one IR dim; a group without the batch is one dim.
    ir::Shape merged;
    for (const ir::Dim& d : group) {
      if (d.isStatic() && !merged.empty() && merged.back().isStatic()) merged.back() = ir::Dim(merged.back().value() * d.value());
      else merged.push_back(d);
    }
    if (merged.empty()) merged.push_back(ir::Dim(1));
    out.insert(out.end(), merged.begin(), merged.end());
    folds.push_back(static_cast<int>(merged.size()));
  }
  for (const OnnxDim& p : pieces) {
    if (p != OnnxDim{1, false}) cannot("the sizes do not match");
  }
  std::optional<std::vector<int64_t>> irTarget = reshapeTarget(in, out);
  if (!irTarget) cannot("the batch dims do not line up");
  return withFolds(ctx.emit(ir::Op::Reshape, {unfolded(x)}, {{"shape", *irTarget}}, name), folds);
}

}  // namespace policyc::frontend
