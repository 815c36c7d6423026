// The operator table: one row per operator (ops.def), read by the parser, printer, verifier,
// shape inference and the reference interpreter.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "policyc/ir/attr.h"
#include "policyc/ir/types.h"

namespace policyc::ir {

enum class Op : uint16_t {
#define POLICYC_OP(id, ...) id,
#include "policyc/ir/ops.def"
#undef POLICYC_OP
};

// How fusion may treat an op (read by the optimizer, not by the IR itself).
enum class FusionKind : uint8_t { Elementwise, Injective, Reduction, Window, GemmLike, Opaque };
const char* fusionKindName(FusionKind kind);

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  std::optional<AttrValue> defaultValue;  // nullopt: required
};

// What a shape function sees: the input types, the attributes (defaults filled in) and the
// number of outputs the node declares (only variadic-output ops care).
struct OpCall {
  Op op;
  std::span<const TensorType> inputs;
  const AttrMap& attrs;
  int numOutputs = 1;
};
using ShapeFn = std::vector<TensorType> (*)(const OpCall&);

// The interpreter's tensor: every element held as a double whatever the dtype (exact for all
// dtypes but i64 values beyond 2^53), rounded to the dtype after each operator.
struct RefTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<double> data;
  int64_t numel() const { return staticNumel(shape); }
};

// What a reference kernel sees: outputs arrive with dtype and shape set and data sized.
struct RefCall {
  Op op;
  std::span<const RefTensor* const> inputs;
  const AttrMap& attrs;
  std::span<RefTensor> outputs;
};
using RefKernel = void (*)(const RefCall&);

struct OpInfo {
  Op op;
  std::string_view name;
  int minInputs;
  int maxInputs;   // -1: variadic
  int numOutputs;  // -1: variadic
  FusionKind fusion;
  std::vector<AttrSpec> attrs;
  ShapeFn inferTypes;
  RefKernel reference;

  const AttrSpec* findAttr(std::string_view attrName) const;
};

const OpInfo& opInfo(Op op);
const OpInfo* findOp(std::string_view name);  // by text name ("gemm"); nullptr if unknown
std::span<const OpInfo> allOps();

// Checks given attributes against the op's declaration (unknown names, kinds, missing required
// ones; an Int given where a Float is declared is converted) and fills in defaults.
// Throws policyc::Error naming the attribute.
AttrMap completeAttrs(const OpInfo& info, AttrMap given);

// Runs the op's shape function; throws policyc::Error on invalid input types or attributes.
std::vector<TensorType> inferOutputTypes(Op op, std::span<const TensorType> inputs, const AttrMap& attrs,
                                         int numOutputs = 1);

}  // namespace policyc::ir
