// The ONNX importer: reads a model (opsets 1-21 of the default domain; 1-10 through ONNX's version converter) into a graph IR.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "policyc/ir/graph.h"

namespace policyc::frontend {

struct OnnxImportOptions {
  // Name of the imported graph; empty: the ONNX graph name (sanitised), or the file stem when
  // the model's graph has no name or an exporter's generic one ("torch_jit", "main_graph").
  std::string graphName;
};

// Imports the model at `path`. Throws policyc::Error with a one-line message naming the file
// and, for problems inside the graph, the ONNX node (name, op type, opset) when the file is
// missing, unreadable, corrupt, or uses something policyc does not support.
//
// The result is verified and holds only inputs, params (initializers and folded constants
// that some op still reads), ops and the output node: every all-constant ONNX node is
// evaluated at import, shape arithmetic over the batch dimension is resolved into attributes,
// and values keep their ONNX names. A symbolic (or missing, -1 or 0) first dimension of a
// graph input becomes `batch`.
std::unique_ptr<ir::Graph> importOnnxFile(const std::string& path, const OnnxImportOptions& options = {});

// Same, from the serialized ModelProto in memory; `sourceName` is what messages call it (and
// its stem names the graph when the model's graph has no name).
std::unique_ptr<ir::Graph> importOnnxBytes(std::span<const std::byte> bytes, std::string_view sourceName,
                                           const OnnxImportOptions& options = {});

// What the importer handles, for tools that pick models (the conformance runner): an operator
// of the default domain ("" or "ai.onnx") it converts, and a TensorProto element type it reads.
bool isSupportedOnnxOp(std::string_view domain, std::string_view opType);
bool isSupportedOnnxType(int32_t elemType);

// Reads a file holding one serialized onnx.TensorProto (the ONNX backend tests' input_0.pb).
// Throws policyc::Error naming the file when it is missing, corrupt or of an unsupported type.
ir::Tensor readOnnxTensorFile(const std::string& path);

}  // namespace policyc::frontend
