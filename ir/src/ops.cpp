// The operator table, expanded from ops.def, and attribute completion against it.
#include "policyc/ir/ops.h"

#include <limits>
#include <unordered_map>

#include "op_impls.h"
#include "policyc/ir/error.h"
#include "policyc/support/sizes.h"

namespace policyc::ir {
namespace {

#define A_INT(n, d) AttrSpec{n, AttrKind::Int, AttrValue{int64_t{d}}}
#define A_FLOAT(n, d) AttrSpec{n, AttrKind::Float, AttrValue{double{d}}}
#define A_STRING(n, d) AttrSpec{n, AttrKind::String, AttrValue{std::string{d}}}
#define A_INTS(n) AttrSpec{n, AttrKind::Ints, AttrValue{std::vector<int64_t>{}}}
#define A_FLOATS(n) AttrSpec{n, AttrKind::Floats, AttrValue{std::vector<double>{}}}
#define A_REQUIRED(n, kind) AttrSpec{n, AttrKind::kind, std::nullopt}

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> ops = {
#define POLICYC_OP(id, name, minIn, maxIn, numOut, fusion, shapeFn, refFn, ...) \
  OpInfo{Op::id, name, minIn, maxIn, numOut, FusionKind::fusion, {__VA_ARGS__}, &impl::shapeFn, &impl::refFn},
#include "policyc/ir/ops.def"
#undef POLICYC_OP
  };
  return ops;
}

}  // namespace

const char* fusionKindName(FusionKind kind) {
  switch (kind) {
    case FusionKind::Elementwise: return "elementwise";
    case FusionKind::Injective: return "injective";
    case FusionKind::Reduction: return "reduction";
    case FusionKind::Window: return "window";
    case FusionKind::GemmLike: return "gemm-like";
    case FusionKind::Opaque: return "opaque";
  }
  return "?";
}

const AttrSpec* OpInfo::findAttr(std::string_view attrName) const {
  for (const AttrSpec& spec : attrs) {
    if (spec.name == attrName) return &spec;
  }
  return nullptr;
}

const OpInfo& opInfo(Op op) { return table().at(static_cast<size_t>(op)); }

std::span<const OpInfo> allOps() { return table(); }

const OpInfo* findOp(std::string_view name) {
  static const std::unordered_map<std::string_view, const OpInfo*> byName = [] {
    std::unordered_map<std::string_view, const OpInfo*> m;
    for (const OpInfo& info : table()) m.emplace(info.name, &info);
    return m;
  }();
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

AttrMap completeAttrs(const OpInfo& info, AttrMap given) {
  for (auto& [name, value] : given) {
    const AttrSpec* spec = info.findAttr(name);
    if (!spec) fail("{} has no attribute '{}'", info.name, name);
    AttrKind kind = attrKindOf(value);
    if (kind == spec->kind) continue;
    // Integers written where floats are declared are accepted (alpha=1 means 1.0).
    if (spec->kind == AttrKind::Float && kind == AttrKind::Int) {
      value = static_cast<double>(std::get<int64_t>(value));
    } else if (spec->kind == AttrKind::Floats && kind == AttrKind::Ints) {
      const auto& ints = std::get<std::vector<int64_t>>(value);
      value = std::vector<double>(ints.begin(), ints.end());
    } else if (spec->kind == AttrKind::Ints && kind == AttrKind::Floats &&
               std::get<std::vector<double>>(value).empty()) {
      value = std::vector<int64_t>{};  // "[]" parses as an empty float list
    } else {
      fail("{} attribute '{}' must be {}, got {}", info.name, name, attrKindName(spec->kind), attrKindName(kind));
    }
  }
  for (const AttrSpec& spec : info.attrs) {
    if (given.count(std::string(spec.name))) continue;
    if (!spec.defaultValue) fail("{} requires attribute '{}'", info.name, spec.name);
    given.emplace(std::string(spec.name), *spec.defaultValue);
  }
  return given;
}

std::vector<TensorType> inferOutputTypes(Op op, std::span<const TensorType> inputs, const AttrMap& attrs,
                                         int numOutputs) {
  const OpInfo& info = opInfo(op);
  int n = static_cast<int>(inputs.size());
  if (n < info.minInputs || (info.maxInputs >= 0 && n > info.maxInputs)) {
    if (info.minInputs == info.maxInputs) fail("{} takes {} inputs, got {}", info.name, info.minInputs, n);
    if (info.maxInputs < 0) fail("{} takes at least {} inputs, got {}", info.name, info.minInputs, n);
    fail("{} takes {} to {} inputs, got {}", info.name, info.minInputs, info.maxInputs, n);
  }
  if (info.numOutputs >= 0 && numOutputs != info.numOutputs) {
    fail("{} has {} output(s), got {}", info.name, info.numOutputs, numOutputs);
  }
  if (numOutputs < 1) fail("{} needs at least one output", info.name);
  std::vector<TensorType> out = info.inferTypes(OpCall{op, inputs, attrs, numOutputs});
  if (static_cast<int>(out.size()) != numOutputs) {
    fail("internal: shape function of {} gave {} outputs for {}", info.name, out.size(), numOutputs);
  }
  // Every inferred type is within the limits before anything builds on it: shape functions add
  // and multiply dims, and may do so safely only on dims of at most 2^31 - 1.
  for (const TensorType& t : out) {
    if (static_cast<int64_t>(t.rank()) > sizes::kMaxRank) fail("{}: the result {} has more than {} dimensions", info.name, t.str(), sizes::kMaxRank);
    if (!sizes::numel(evalShape(t.shape, 1))) fail("{}: the result {} has more than 2^31-1 elements per batch row", info.name, t.str());
  }
  return out;
}

}  // namespace policyc::ir
