// Element types, symbolic shapes and tensor types of the graph IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace policyc::ir {

enum class DType : uint8_t { F32, F64, I32, I64, U8, I8, Bool };

std::string_view dtypeName(DType dtype);                   // "f32", "i64", ...
std::optional<DType> parseDType(std::string_view name);    // inverse of dtypeName
size_t dtypeSize(DType dtype);                              // bytes per element
bool isFloat(DType dtype);                                  // f32 or f64

// One dimension of a shape: a fixed size, or the symbol `batch` (the model's batch size,
// only known at run time). Every symbolic dimension of a graph is the same `batch`.
class Dim {
 public:
  constexpr Dim(int64_t size = 0) : v_(size) {}  // NOLINT: implicit from an integer on purpose
  static constexpr Dim batch() {
    Dim d;
    d.v_ = kBatch;
    return d;
  }
  constexpr bool isBatch() const { return v_ == kBatch; }
  constexpr bool isStatic() const { return v_ != kBatch; }
  int64_t value() const;                                  // the fixed size; throws for `batch`
  constexpr int64_t eval(int64_t batch) const { return isBatch() ? batch : v_; }
  constexpr bool operator==(const Dim&) const = default;
  std::string str() const;                                 // "17" or "batch"

 private:
  static constexpr int64_t kBatch = -1;
  int64_t v_;
};

using Shape = std::vector<Dim>;

std::string shapeStr(const Shape& shape);                   // "[batch,17]"
std::vector<int64_t> evalShape(const Shape& shape, int64_t batch);
bool isStaticShape(const Shape& shape);
Shape staticShape(const std::vector<int64_t>& dims);
int64_t staticNumel(const std::vector<int64_t>& dims);
int64_t rowNumel(const Shape& shape);  // elements per batch row: the product of the static dims

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;

  size_t rank() const { return shape.size(); }
  bool operator==(const TensorType&) const = default;
  std::string str() const;                                 // "f32[batch,17]"
};

}  // namespace policyc::ir
