// Internal to the frontend: older ONNX models brought to the opsets the importer reads.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

namespace policyc::frontend {

// `model` (default-domain opset `from`) converted to opset `to` by ONNX's version converter, after
// ONNX's checker; an Error naming `source` when either rejects it.
onnx::ModelProto upgradeOpset(const onnx::ModelProto& model, int64_t from, int64_t to, const std::string& source);

}  // namespace policyc::frontend
