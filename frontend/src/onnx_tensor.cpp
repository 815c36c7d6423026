// ONNX TensorProto decoding (initializers, Constant values) into ir::Tensor.
#include "onnx_tensor.h"

#include <bit>
#include <cstring>

#include "policyc/ir/error.h"
#include "policyc/support/sizes.h"

namespace policyc::frontend {
namespace {

// The IR stores tensors in native byte order and ONNX raw_data is little endian.
static_assert(std::endian::native == std::endian::little, "the ONNX importer assumes a little-endian host");

template <typename Field>
void checkCount(const Field& field, int64_t numel, std::string_view fieldName, std::string_view what) {
  if (static_cast<int64_t>(field.size()) != numel) {
    fail("{} has {} values in {} but its dims hold {} elements", what, field.size(), fieldName, numel);
  }
}

// Copies a typed repeated field into `out`, converting each element to the tensor's dtype.
template <typename Field>
void fillFrom(ir::Tensor& out, const Field& field) {
  for (int64_t i = 0; i < out.numel(); ++i) out.setAsDouble(i, static_cast<double>(field.Get(static_cast<int>(i))));
}

}  // namespace

std::optional<ir::DType> dtypeFromOnnx(int32_t elemType) {
  switch (elemType) {
    case onnx::TensorProto::FLOAT: return ir::DType::F32;
    case onnx::TensorProto::DOUBLE: return ir::DType::F64;
    case onnx::TensorProto::INT32: return ir::DType::I32;
    case onnx::TensorProto::INT64: return ir::DType::I64;
    case onnx::TensorProto::UINT8: return ir::DType::U8;
    case onnx::TensorProto::INT8: return ir::DType::I8;
    case onnx::TensorProto::BOOL: return ir::DType::Bool;
    default: return std::nullopt;
  }
}

std::string onnxTypeName(int32_t elemType) {
  if (onnx::TensorProto::DataType_IsValid(elemType)) {
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(elemType));
  }
  return fmt::format("type {}", elemType);
}

ir::Tensor decodeTensor(const onnx::TensorProto& proto, std::string_view what) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.external_data_size() > 0) {
    fail(
        "{} keeps its data in an external file, which policyc does not read (save the model with the weights "
        "inside)",
        what);
  }
  if (proto.has_segment()) fail("{} is a segment of a larger tensor, which policyc does not support", what);
  std::optional<ir::DType> dtype = dtypeFromOnnx(proto.data_type());
  if (!dtype) {
    fail(
        "{} has data type {}, which policyc does not support (supported: FLOAT, DOUBLE, INT32, INT64, UINT8, "
        "INT8, BOOL)",
        what, onnxTypeName(proto.data_type()));
  }
  if (proto.dims_size() > sizes::kMaxRank) fail("{} has {} dimensions (at most {})", what, proto.dims_size(), sizes::kMaxRank);
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  for (int64_t d : dims) {
    if (d < 0) fail("{} has a negative dimension {}", what, d);
  }
  std::optional<int64_t> count = sizes::numel(dims);
  if (!count) fail("{} of shape {} has more than 2^31-1 elements (the limit of one tensor)", what, ir::shapeStr(ir::staticShape(dims)));
  const int64_t numel = *count;

  // The data present in the file is checked against the dims before anything is allocated: a few
  // bytes of model cannot ask for gigabytes.
  if (proto.has_raw_data()) {
    const std::string& raw = proto.raw_data();
    size_t expected = static_cast<size_t>(numel) * ir::dtypeSize(*dtype);
    if (raw.size() != expected) {
      fail("{} has {} bytes of raw_data but its type {}{} needs {}", what, raw.size(), ir::dtypeName(*dtype),
           ir::shapeStr(ir::staticShape(dims)), expected);
    }
    ir::Tensor t = ir::Tensor::fromBytes(*dtype, std::move(dims), raw.data(), raw.size());
    if (*dtype == ir::DType::Bool) {
      // Any non-zero byte is true; the IR keeps bools as exactly 0 or 1.
      for (int64_t i = 0; i < t.numel(); ++i) t.setAsDouble(i, t.data<uint8_t>()[i] != 0 ? 1.0 : 0.0);
    }
    return t;
  }

  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT: checkCount(proto.float_data(), numel, "float_data", what); break;
    case onnx::TensorProto::DOUBLE: checkCount(proto.double_data(), numel, "double_data", what); break;
    case onnx::TensorProto::INT64: checkCount(proto.int64_data(), numel, "int64_data", what); break;
    default: checkCount(proto.int32_data(), numel, "int32_data", what); break;  // INT32, UINT8, INT8 and BOOL
  }
  ir::Tensor t(*dtype, std::move(dims));
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (numel) std::memcpy(t.bytes(), proto.float_data().data(), t.nbytes());
      break;
    case onnx::TensorProto::DOUBLE:
      if (numel) std::memcpy(t.bytes(), proto.double_data().data(), t.nbytes());
      break;
    case onnx::TensorProto::INT64:
      if (numel) std::memcpy(t.bytes(), proto.int64_data().data(), t.nbytes());
      break;
    default: fillFrom(t, proto.int32_data()); break;
  }
  return t;
}

std::vector<int64_t> tensorInts(const ir::Tensor& tensor) {
  std::vector<int64_t> out(static_cast<size_t>(tensor.numel()));
  for (int64_t i = 0; i < tensor.numel(); ++i) out[static_cast<size_t>(i)] = tensor.getAsInt(i);
  return out;
}

std::vector<double> tensorDoubles(const ir::Tensor& tensor) {
  std::vector<double> out(static_cast<size_t>(tensor.numel()));
  for (int64_t i = 0; i < tensor.numel(); ++i) out[static_cast<size_t>(i)] = tensor.getAsDouble(i);
  return out;
}

}  // namespace policyc::frontend
