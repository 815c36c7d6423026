// Checked size arithmetic (sizes.h).
#include "policyc/support/sizes.h"

namespace policyc::sizes {

std::optional<int64_t> add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> numel(std::span<const int64_t> dims, int64_t limit) {
  // Any zero makes the product zero, whatever the other dims are; negative dims are invalid.
  // Every dim is bounded on its own too: a zero elsewhere must not let a dim of 2^62 through to
  // shape arithmetic (concat, pad, windows) that adds dims.
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0 || d > limit) return std::nullopt;
    empty = empty || d == 0;
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (empty) break;
    std::optional<int64_t> next = mul(n, d);
    if (!next || *next > limit) return std::nullopt;
    n = *next;
  }
  return empty ? 0 : n;
}

std::optional<size_t> bytes(int64_t numel, size_t elementSize) {
  if (numel < 0) return std::nullopt;
  size_t r = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), elementSize, &r)) return std::nullopt;
  return r;
}

std::string limitsSummary() {
  return "at most " + std::to_string(kMaxRank) + " dimensions and 2^31-1 elements per tensor, 2^31-1 rows per batch, " +
         std::to_string(kMaxNodes) + " nodes and 8 GiB of weights per graph";
}

}  // namespace policyc::sizes
