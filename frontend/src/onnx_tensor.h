// Internal: ONNX element types and TensorProto decoding into ir::Tensor.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "policyc/ir/tensor.h"

namespace policyc::frontend {

// The IR dtype of an ONNX TensorProto.DataType; nullopt for types policyc does not handle.
std::optional<ir::DType> dtypeFromOnnx(int32_t elemType);
// "FLOAT16", "STRING", ... (or "type 42" for values outside the enum), for messages.
std::string onnxTypeName(int32_t elemType);

// Decodes raw_data or the typed repeated fields (float_data, int64_data, int32_data for the
// narrow integer types and bool, double_data). Throws policyc::Error naming `what` (e.g.
// "initializer 'w'") for unsupported types, external data, or data whose size does not match
// the dims. The caller prefixes the message with the model's name.
ir::Tensor decodeTensor(const onnx::TensorProto& proto, std::string_view what);

// Elements of a tensor as integers / doubles (for constant inputs that become attributes).
std::vector<int64_t> tensorInts(const ir::Tensor& tensor);
std::vector<double> tensorDoubles(const ir::Tensor& tensor);

// Largest tensor the importer creates itself from a model's shape (ConstantOfShape), in elements,
// so a few bytes of model cannot ask for an absurd allocation; tensors read from the file are
// bounded by the bytes present.
inline constexpr int64_t kMaxImportElements = int64_t{1} << 26;

}  // namespace policyc::frontend
