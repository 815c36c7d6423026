// A concrete tensor: dtype, fixed shape and its bytes (C order, native little endian).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "policyc/ir/types.h"

namespace policyc::ir {

// Value semantics; used for parameters (weights), model inputs/outputs and test data.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);  // zero-filled
  static Tensor fromBytes(DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  template <typename T>
  static Tensor fromVector(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    return fromBytes(dtype, std::move(shape), values.data(), values.size() * sizeof(T));
  }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return staticNumel(shape_); }
  size_t nbytes() const { return bytes_.size(); }
  TensorType type() const { return {dtype_, staticShape(shape_)}; }

  const std::byte* bytes() const { return bytes_.data(); }
  std::byte* bytes() { return bytes_.data(); }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(bytes_.data()); }
  template <typename T>
  T* data() { return reinterpret_cast<T*>(bytes_.data()); }

  // Element access converting through double (exact for every dtype but i64 beyond 2^53;
  // setAsDouble saturates integers and rounds f32).
  double getAsDouble(int64_t index) const;
  void setAsDouble(int64_t index, double value);
  int64_t getAsInt(int64_t index) const;  // exact for integer dtypes

  bool bitEqual(const Tensor& other) const {
    return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
  }

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> bytes_;
};

}  // namespace policyc::ir
