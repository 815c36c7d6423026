// Element types, dimensions and tensor types: names, sizes and printing.
#include "policyc/ir/types.h"

#include <array>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/support/sizes.h"

namespace policyc::ir {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeRow, 7> kDTypes = {{
    {DType::F32, "f32", 4},
    {DType::F64, "f64", 8},
    {DType::I32, "i32", 4},
    {DType::I64, "i64", 8},
    {DType::U8, "u8", 1},
    {DType::I8, "i8", 1},
    {DType::Bool, "bool", 1},
}};

const DTypeRow& row(DType dtype) { return kDTypes.at(static_cast<size_t>(dtype)); }

}  // namespace

std::string_view dtypeName(DType dtype) { return row(dtype).name; }
size_t dtypeSize(DType dtype) { return row(dtype).size; }
bool isFloat(DType dtype) { return dtype == DType::F32 || dtype == DType::F64; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeRow& r : kDTypes) {
    if (r.name == name) return r.dtype;
  }
  return std::nullopt;
}

int64_t Dim::value() const {
  if (isBatch()) fail("internal: the size of the symbolic dim 'batch' was asked for");
  return v_;
}

std::string Dim::str() const { return isBatch() ? std::string("batch") : std::to_string(v_); }

std::string shapeStr(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += shape[i].str();
  }
  return out + "]";
}

std::vector<int64_t> evalShape(const Shape& shape, int64_t batch) {
  std::vector<int64_t> dims;
  dims.reserve(shape.size());
  for (Dim d : shape) dims.push_back(d.eval(batch));
  return dims;
}

bool isStaticShape(const Shape& shape) {
  for (Dim d : shape) {
    if (d.isBatch()) return false;
  }
  return true;
}

Shape staticShape(const std::vector<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

int64_t staticNumel(const std::vector<int64_t>& dims) {
  std::optional<int64_t> n = sizes::numel(dims);
  if (!n) fail("shape {} has more than 2^31-1 elements (the limit of one tensor) or a negative dimension", shapeStr(staticShape(dims)));
  return *n;
}

int64_t rowNumel(const Shape& shape) {
  std::vector<int64_t> dims;
  for (const Dim& d : shape) {
    if (d.isStatic()) dims.push_back(d.value());
  }
  return staticNumel(dims);
}

std::string TensorType::str() const { return fmt::format("{}{}", dtypeName(dtype), shapeStr(shape)); }

}  // namespace policyc::ir
