// Model loading by extension, .npy <-> Tensor conversion, random inputs and one-line summaries.
#include "model_io.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/npy.h"

namespace policyc::tools {

std::unique_ptr<ir::Graph> loadModel(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".onnx") return frontend::importOnnxFile(path);
  if (ext == ".pir") return ir::readPir(path);
  fail("'{}': unknown model type '{}' (expected a .onnx or .pir file)", path, ext);
}

ir::Tensor readTensor(const std::string& npyPath) {
  runtime::NpyArray array = asError([&] { return runtime::readNpy(npyPath); });
  auto dtype = ir::parseDType(array.dtype);
  if (!dtype) fail("'{}': unsupported dtype '{}'", npyPath, array.dtype);
  return ir::Tensor::fromBytes(*dtype, array.shape, array.data.data(), array.data.size());
}

void writeTensor(const std::string& npyPath, const ir::Tensor& tensor) {
  runtime::NpyArray array{std::string(ir::dtypeName(tensor.dtype())), tensor.shape(),
                          std::vector<std::byte>(tensor.bytes(), tensor.bytes() + tensor.nbytes())};
  asError([&] { runtime::writeNpy(npyPath, array); });
}

std::vector<ir::Tensor> randomInputs(const ir::Graph& graph, int64_t batch, uint64_t seed) {
  std::vector<ir::TensorType> types;
  for (const ir::Value* in : graph.inputs()) types.push_back(in->type());
  return randomTensors(types, batch, seed);
}

std::vector<ir::Tensor> orderInputs(const ir::Graph& graph, std::map<std::string, ir::Tensor> named) {
  std::vector<std::string> expected;
  for (const ir::Value* in : graph.inputs()) expected.push_back(in->name());
  return orderInputs(expected, std::move(named));
}

std::vector<ir::Tensor> orderInputs(const std::vector<std::string>& expected, std::map<std::string, ir::Tensor> named) {
  std::vector<ir::Tensor> ordered;
  for (const auto& [name, tensor] : named) {
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) {
      fail("unknown input '{}' (the model's inputs: {})", name, fmt::join(expected, ", "));
    }
  }
  for (const std::string& name : expected) {
    auto it = named.find(name);
    if (it == named.end()) fail("missing input '{}' (give --input {}=FILE.npy, or --random)", name, name);
    ordered.push_back(std::move(it->second));
  }
  return ordered;
}

std::string summarize(const ir::Tensor& t) {
  std::string shape = fmt::format("{}[{}]", ir::dtypeName(t.dtype()), fmt::join(t.shape(), ","));
  if (t.numel() == 0) return shape + " (empty)";
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.getAsDouble(i);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  return fmt::format("{} min={:.6g} max={:.6g} mean={:.6g}", shape, lo, hi, sum / static_cast<double>(t.numel()));
}

}  // namespace policyc::tools
