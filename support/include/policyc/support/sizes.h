// Checked size arithmetic and the limits every reader of model files, the compiler and the runtime
// enforce (docs/security.md): element counts, byte sizes, shape arithmetic (padding, windows),
// batch and workspace sizes all go through these, so a hostile size is an error, never a wrap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace policyc::sizes {

// The most dimensions a tensor may have.
inline constexpr int64_t kMaxRank = 16;
// The most elements one tensor may hold (for a tensor with a batch dimension: one batch row, and
// the whole tensor at a run's batch size). 2^31 - 1 keeps every element index an int32 too.
inline constexpr int64_t kMaxElements = (int64_t{1} << 31) - 1;
// The largest batch size a run may have.
inline constexpr int64_t kMaxBatch = (int64_t{1} << 31) - 1;
// The most nodes a graph may have.
inline constexpr int64_t kMaxNodes = int64_t{1} << 20;
// The most bytes of weights (params) a graph may hold in all.
inline constexpr int64_t kMaxWeightBytes = int64_t{1} << 33;

// a + b, a - b and a * b over int64, nullopt when the exact result does not fit.
std::optional<int64_t> add(int64_t a, int64_t b);
std::optional<int64_t> sub(int64_t a, int64_t b);
std::optional<int64_t> mul(int64_t a, int64_t b);

// The number of elements of a shape: nullopt when a dim is negative or over `limit`, or the
// product exceeds `limit` (kMaxElements by default). The empty shape has one element.
std::optional<int64_t> numel(std::span<const int64_t> dims, int64_t limit = kMaxElements);
// numel * elementSize as size_t; nullopt on overflow.
std::optional<size_t> bytes(int64_t numel, size_t elementSize);

// "2^31 - 1 elements", ... for messages.
std::string limitsSummary();

}  // namespace policyc::sizes
