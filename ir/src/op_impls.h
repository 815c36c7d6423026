// Internal: the shape functions and reference kernels named by ops.def.
#pragma once

#include "policyc/ir/ops.h"

namespace policyc::ir::impl {

#define POLICYC_OP(id, name, minIn, maxIn, numOut, fusion, shapeFn, refFn, ...) \
  std::vector<TensorType> shapeFn(const OpCall& call);                          \
  void refFn(const RefCall& call);
#include "policyc/ir/ops.def"
#undef POLICYC_OP

// Shared by shape functions and kernels: numpy broadcasting of two shapes.
Shape broadcastShapes(const Shape& a, const Shape& b);  // throws policyc::Error when incompatible
// An axis in [-rank, rank) made non-negative; throws policyc::Error when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank);

// One axis of a slice after ONNX's clamping: the first index read and the number of elements.
struct SliceRange {
  int64_t start;
  int64_t length;
};
SliceRange sliceRange(int64_t start, int64_t end, int64_t step, int64_t size);
// Whether start:end:step selects a whole axis of any size, in order or reversed (batch axes).
bool isFullSlice(int64_t start, int64_t end, int64_t step);

}  // namespace policyc::ir::impl
