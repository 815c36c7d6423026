// The ONNX importer's entry points and graph walk: parse, check opsets, bind initializers and
// inputs, convert the nodes in order, bind the outputs, verify.
#include "policyc/frontend/onnx_import.h"

#include <climits>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <unordered_set>

#include "import_context.h"
#include "onnx_tensor.h"
#include "onnx_upgrade.h"
#include "policyc/ir/verifier.h"
#include "policyc/support/sizes.h"

namespace policyc::frontend {
namespace {

constexpr int64_t kMinOpset = 11;
// Opsets 18-21 changed the signatures of some supported ops (ReduceX axes as an input, Split's
// num_outputs, Pad's axes, AveragePool's dilations) and added others (Mish, Gelu); everything else
// they changed is new types, which the dtype checks refuse, or an attribute or input the converter
// does not read, which NodeContext refuses by name.
constexpr int64_t kMaxOpset = 21;

// A graph name the .pir printer writes as a bare identifier.
std::string sanitizeName(std::string_view name) {
  std::string out;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += ok ? c : '_';
  }
  if (!out.empty() && out.front() >= '0' && out.front() <= '9') out.insert(out.begin(), '_');
  return out;
}

// A graph input's type. The first dim is the batch when symbolic or not positive (exporters
// write -1 or 0 for dynamic); every other dim must be static.
ir::TensorType inputType(const onnx::ValueInfoProto& vi, const std::string& source) {
  const std::string& name = vi.name();
  if (!vi.type().has_tensor_type()) fail("{}: graph input '{}' is not a tensor", source, name);
  const onnx::TypeProto::Tensor& tt = vi.type().tensor_type();
  std::optional<ir::DType> dtype = dtypeFromOnnx(tt.elem_type());
  if (!dtype) {
    fail("{}: graph input '{}' has element type {}, which policyc does not support", source, name,
         onnxTypeName(tt.elem_type()));
  }
  if (!tt.has_shape())
    fail("{}: graph input '{}' has no shape; policyc needs static shapes except the batch dim", source, name);
  ir::TensorType type{*dtype, {}};
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const onnx::TensorShapeProto::Dimension& d = tt.shape().dim(i);
    // A zero is a real (empty) dimension; only a missing or negative value is dynamic.
    const bool dynamic = !d.has_dim_value() || d.dim_value() < 0;
    if (i == 0 && dynamic) {
      type.shape.push_back(ir::Dim::batch());
    } else if (dynamic) {
      std::string what = d.has_dim_param()   ? fmt::format("symbolic ('{}')", d.dim_param())
                         : d.has_dim_value() ? fmt::format("{}", d.dim_value())
                                             : std::string("unknown");
      fail("{}: graph input '{}': dim {} is {}; only the first (batch) dim may be dynamic", source, name, i, what);
    } else {
      type.shape.push_back(ir::Dim(d.dim_value()));
    }
  }
  if (static_cast<int64_t>(type.rank()) > sizes::kMaxRank || !sizes::numel(ir::evalShape(type.shape, 1))) {
    fail("{}: graph input '{}' of type {} is over the limits ({})", source, name, type.str(), sizes::limitsSummary());
  }
  return type;
}

std::vector<char> readFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("{}: no such file", path);
  if (!std::filesystem::is_regular_file(path, ec)) fail("{}: not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the file for reading", path);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("{}: error while reading the file", path);
  return data;
}

std::unique_ptr<ir::Graph> importModel(const onnx::ModelProto& model, const std::string& source,
                                       const OnnxImportOptions& options, std::optional<int64_t> sourceOpset = std::nullopt) {
  std::optional<int64_t> opset;
  for (const onnx::OperatorSetIdProto& imp : model.opset_import()) {
    if (!imp.domain().empty() && imp.domain() != "ai.onnx") continue;  // nodes using them are rejected
    if (opset && *opset != imp.version()) {
      fail("{}: the model imports the default ONNX domain twice (opsets {} and {})", source, *opset, imp.version());
    }
    opset = imp.version();
  }
  if (!opset) fail("{}: the model imports no opset of the default ONNX domain (not an ONNX model?)", source);
  if (*opset >= 1 && *opset < kMinOpset) {
    // Older models are converted first (ONNX's adapters: legacy broadcasting, attributes that
    // became inputs, ...), then read like any model of the first opset policyc reads.
    return importModel(upgradeOpset(model, *opset, kMinOpset, source), source, options, *opset);
  }
  if (*opset < kMinOpset || *opset > kMaxOpset) {
    fail("{}: opset {} is not supported; policyc reads opsets 1 to {} of the default ONNX domain ({} and later as they "
         "are, older ones converted to {})",
         source, *opset, kMaxOpset, kMinOpset, kMinOpset);
  }
  if (!model.has_graph()) fail("{}: the model has no graph", source);
  const onnx::GraphProto& g = model.graph();
  if (g.output_size() == 0) fail("{}: the graph has no outputs", source);
  if (g.sparse_initializer_size() > 0) fail("{}: sparse initializers are not supported", source);

  // Exporters' fixed default graph names say nothing about the model; the file name does (and
  // the graph name becomes the compiled model's name).
  static const std::unordered_set<std::string> kGenericNames = {"torch_jit", "torch-jit-export", "main_graph"};
  std::string name = options.graphName;
  if (name.empty() && !kGenericNames.count(g.name())) name = sanitizeName(g.name());
  if (name.empty()) name = sanitizeName(std::filesystem::path(source).stem().string());
  if (name.empty()) name = "graph";
  auto graph = std::make_unique<ir::Graph>(name);
  ImportState state(*graph, source, *opset, sourceOpset.value_or(*opset));

  for (const onnx::ValueInfoProto& vi : g.input()) state.reserveName(vi.name());
  for (const onnx::TensorProto& t : g.initializer()) state.reserveName(t.name());
  for (const onnx::NodeProto& n : g.node()) {
    for (const std::string& out : n.output()) state.reserveName(out);
    for (const std::string& in : n.input()) state.markRead(in);
  }
  for (const onnx::ValueInfoProto& vo : g.output()) state.markRead(vo.name());

  // Initializers are constants (also those listed as graph inputs: the initializer is then
  // only a default the caller could override, and policyc bakes it in).
  std::unordered_set<std::string> initializerNames;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (t.name().empty()) fail("{}: an initializer has no name", source);
    try {
      std::string what = fmt::format("initializer '{}'", t.name());
      ImportedValue weight = ImportedValue::constant(decodeTensor(t, what), t.name(), {t.name()});
      weight.weight = true;
      state.define(t.name(), std::move(weight));
    } catch (const Error& e) {
      fail("{}: {}", source, e.what());
    }
    initializerNames.insert(t.name());
  }
  for (const onnx::ValueInfoProto& vi : g.input()) {
    if (initializerNames.count(vi.name())) continue;
    if (vi.name().empty()) fail("{}: a graph input has no name", source);
    ir::TensorType type = inputType(vi, source);
    try {
      state.define(vi.name(), ImportedValue::runtime(graph->addInput(vi.name(), type)));
    } catch (const Error& e) {
      fail("{}: {}", source, e.what());
    }
  }

  for (const onnx::NodeProto& n : g.node()) {
    NodeContext ctx(state, n);
    try {
      if (!n.domain().empty() && n.domain() != "ai.onnx") {
        ctx.fail("operator domain '{}' is not supported (only the default ONNX domain)", n.domain());
      }
      for (const std::string& in : n.input()) {
        if (!in.empty() && !state.find(in)) {
          ctx.fail("input '{}' is not defined (no graph input, initializer or earlier node output has that name)", in);
        }
      }
      convertNode(ctx);
    } catch (const ImportError&) {
      throw;
    } catch (const Error& e) {
      throw ImportError(ctx.prefix() + e.what());
    } catch (const std::exception& e) {
      throw ImportError(ctx.prefix() + "internal error: " + e.what());
    }
  }

  std::vector<std::pair<std::string, ir::Value*>> outputs;
  for (const onnx::ValueInfoProto& vo : g.output()) {
    const ImportedValue* v = state.find(vo.name());
    if (!v) fail("{}: graph output '{}' is not computed by any node", source, vo.name());
    const onnx::TypeProto::Tensor& tt = vo.type().tensor_type();
    ir::TensorType actual = v->type();
    if (tt.elem_type() != 0 && dtypeFromOnnx(tt.elem_type()) != actual.dtype) {
      fail("{}: graph output '{}' is declared {} but computes {}", source, vo.name(), onnxTypeName(tt.elem_type()),
           actual.str());
    }
    try {
      outputs.emplace_back(vo.name(), state.materialise(*v));
    } catch (const Error& e) {
      fail("{}: graph output '{}': {}", source, vo.name(), e.what());
    }
  }
  try {
    graph->setOutputs(std::move(outputs));
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  graph->removeDeadNodes();
  try {
    ir::verify(*graph);
  } catch (const Error& e) {
    fail("{}: the imported graph does not verify (a policyc bug): {}", source, e.what());
  }
  return graph;
}

}  // namespace

std::unique_ptr<ir::Graph> importOnnxBytes(std::span<const std::byte> bytes, std::string_view sourceName,
                                           const OnnxImportOptions& options) {
  std::string source(sourceName.empty() ? "<memory>" : sourceName);
  if (bytes.empty()) fail("{}: the model is empty", source);
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    fail("{}: the model is larger than 2 GiB, which protobuf cannot read", source);
  try {
    onnx::ModelProto model;
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      fail("{}: not a valid ONNX model (the protobuf does not parse: truncated or not an ONNX file?)", source);
    }
    return importModel(model, source, options);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory while importing", source);
  } catch (const std::exception& e) {
    fail("{}: internal error while importing: {}", source, e.what());
  }
}

std::unique_ptr<ir::Graph> importOnnxFile(const std::string& path, const OnnxImportOptions& options) {
  std::vector<char> data = readFile(path);
  return importOnnxBytes(std::as_bytes(std::span<const char>(data)), path, options);
}

bool isSupportedOnnxOp(std::string_view domain, std::string_view opType) {
  return (domain.empty() || domain == "ai.onnx") && hasConverter(opType);
}

bool isSupportedOnnxType(int32_t elemType) { return dtypeFromOnnx(elemType).has_value(); }

ir::Tensor readOnnxTensorFile(const std::string& path) {
  std::vector<char> data = readFile(path);
  if (data.size() > static_cast<size_t>(INT_MAX)) fail("{}: the tensor is larger than 2 GiB", path);
  onnx::TensorProto proto;
  if (!proto.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
    fail("{}: not a serialized ONNX TensorProto (the protobuf does not parse)", path);
  }
  try {
    return decodeTensor(proto,
                        proto.name().empty() ? std::string("the tensor") : fmt::format("tensor '{}'", proto.name()));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

}  // namespace policyc::frontend
