// Concrete tensors: construction and element access through double.
#include "policyc/ir/tensor.h"

#include <cmath>
#include <limits>

#include "policyc/ir/error.h"
#include "policyc/support/sizes.h"

namespace policyc::ir {
namespace {

template <typename T>
T saturate(double v) {
  if (std::isnan(v)) return T{0};
  // Compare in double against the bounds; the largest i64 is not representable, so use >=.
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::lowest();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

namespace {

// The bytes of a tensor of this type, checked against the limits of support/sizes.h before
// anything is allocated.
size_t checkedBytes(DType dtype, const std::vector<int64_t>& shape) {
  if (static_cast<int64_t>(shape.size()) > sizes::kMaxRank) {
    fail("tensor {}{} has {} dimensions (at most {})", dtypeName(dtype), shapeStr(staticShape(shape)), shape.size(), sizes::kMaxRank);
  }
  for (int64_t d : shape) {
    if (d < 0) fail("tensor shape has a negative dimension {}", d);
  }
  std::optional<int64_t> numel = sizes::numel(shape);
  if (!numel) fail("tensor {}{} has more than 2^31-1 elements (the limit of one tensor)", dtypeName(dtype), shapeStr(staticShape(shape)));
  return static_cast<size_t>(*numel) * dtypeSize(dtype);
}

}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  bytes_.assign(checkedBytes(dtype_, shape_), std::byte{0});
}

Tensor Tensor::fromBytes(DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes) {
  size_t expected = checkedBytes(dtype, shape);
  if (nbytes != expected) {
    fail("tensor {}{} needs {} bytes, got {}", dtypeName(dtype), shapeStr(staticShape(shape)), expected, nbytes);
  }
  Tensor t(dtype, std::move(shape));
  if (nbytes) std::memcpy(t.bytes_.data(), data, nbytes);
  return t;
}

double Tensor::getAsDouble(int64_t i) const {
  switch (dtype_) {
    case DType::F32: return data<float>()[i];
    case DType::F64: return data<double>()[i];
    case DType::I32: return data<int32_t>()[i];
    case DType::I64: return static_cast<double>(data<int64_t>()[i]);
    case DType::U8: return data<uint8_t>()[i];
    case DType::I8: return data<int8_t>()[i];
    case DType::Bool: return data<uint8_t>()[i] ? 1.0 : 0.0;
  }
  return 0.0;
}

int64_t Tensor::getAsInt(int64_t i) const {
  switch (dtype_) {
    case DType::I64: return data<int64_t>()[i];
    case DType::I32: return data<int32_t>()[i];
    case DType::U8: return data<uint8_t>()[i];
    case DType::I8: return data<int8_t>()[i];
    case DType::Bool: return data<uint8_t>()[i] ? 1 : 0;
    case DType::F32:
    case DType::F64: return saturate<int64_t>(getAsDouble(i));
  }
  return 0;
}

void Tensor::setAsDouble(int64_t i, double v) {
  switch (dtype_) {
    case DType::F32: data<float>()[i] = static_cast<float>(v); break;
    case DType::F64: data<double>()[i] = v; break;
    case DType::I32: data<int32_t>()[i] = saturate<int32_t>(v); break;
    case DType::I64: data<int64_t>()[i] = saturate<int64_t>(v); break;
    case DType::U8: data<uint8_t>()[i] = saturate<uint8_t>(v); break;
    case DType::I8: data<int8_t>()[i] = saturate<int8_t>(v); break;
    case DType::Bool: data<uint8_t>()[i] = v != 0.0 ? 1 : 0; break;
  }
}

}  // namespace policyc::ir
