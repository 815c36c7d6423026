// Model loading by extension, .npy <-> Tensor conversion, random inputs, one-line summaries,
// running a loaded model on tensors and comparing tensors (model_io.h).
#include "policyc/driver/model_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/npy.h"

namespace policyc::driver {

namespace {
std::string typeStr(const ir::Tensor& t) { return fmt::format("{}[{}]", ir::dtypeName(t.dtype()), fmt::join(t.shape(), ",")); }
}  // namespace

bool isSharedObject(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".so") return true;
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::string_view(magic, 4) == "\x7f" "ELF";
}

std::unique_ptr<ir::Graph> loadModel(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (isSharedObject(path)) fail("'{}' is a shared object, not a model file (.onnx or .pir): only `run` and `bench` take compiled models", path);
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

TensorCheck compareTensors(const std::string& name, const ir::Tensor& got, const ir::Tensor& want, double rtol, double atol) {
  TensorCheck c;
  c.name = name;
  c.type = typeStr(want);
  if (got.shape() != want.shape()) {
    c.allclose = c.pass = false;
    c.note = fmt::format("shape [{}] != reference [{}]", fmt::join(got.shape(), ","), fmt::join(want.shape(), ","));
    return c;
  }
  bool exact = !ir::isFloat(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.getAsDouble(i), w = want.getAsDouble(i);
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g) && c.allclose) {
        c.allclose = false;
        c.note = fmt::format("element {}: {} where the reference has {}", i, g, w);
      }
      continue;
    }
    if (g == w) continue;  // also equal infinities
    double abs = std::abs(g - w);
    c.maxAbs = std::max(c.maxAbs, abs);
    if (w != 0) c.maxRel = std::max(c.maxRel, abs / std::abs(w));
    bool ok = exact ? false : abs <= atol + rtol * std::abs(w);
    if (!ok && c.allclose) {
      c.allclose = false;
      c.note = fmt::format("element {}: {} != reference {}", i, g, w);
    }
  }
  c.pass = c.allclose;
  return c;
}

static_assert(static_cast<int>(ir::DType::Bool) == POLICYC_BOOL, "ir::DType and policyc_dtype share their order");

std::vector<ir::Tensor> randomTensors(const std::vector<ir::TensorType>& types, int64_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::Tensor> inputs;
  for (const ir::TensorType& type : types) {
    ir::Tensor t(type.dtype, ir::evalShape(type.shape, batch));
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (ir::isFloat(t.dtype())) {
        t.setAsDouble(i, normal(rng));
      } else if (t.dtype() == ir::DType::Bool) {
        t.setAsDouble(i, byte(rng) & 1);
      } else {
        t.setAsDouble(i, byte(rng));
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

std::vector<ir::TensorType> inputTypes(const runtime::Model& model) {
  std::vector<ir::TensorType> types;
  for (const runtime::TensorSpec& spec : model.inputs()) {
    ir::Shape shape;
    for (int64_t d : spec.shape) shape.push_back(d == -1 ? ir::Dim::batch() : ir::Dim(d));
    types.push_back({static_cast<ir::DType>(spec.dtype), shape});
  }
  return types;
}

std::vector<ir::Tensor> runModel(const runtime::Model& model, const std::vector<ir::Tensor>& inputs, int threads) {
  if (inputs.size() != model.inputs().size()) {
    fail("'{}' takes {} inputs, got {}", model.path(), model.inputs().size(), inputs.size());
  }
  int64_t batch = 1;
  bool found = false;
  for (size_t i = 0; i < inputs.size() && !found; ++i) {
    const std::vector<int64_t>& spec = model.inputs()[i].shape;
    for (size_t d = 0; d < spec.size() && d < inputs[i].shape().size(); ++d) {
      if (spec[d] == -1) {
        batch = inputs[i].shape()[d];
        found = true;
        break;
      }
    }
  }
  std::vector<runtime::TensorView> in, out;
  for (const ir::Tensor& t : inputs) {
    in.emplace_back(static_cast<policyc_dtype>(t.dtype()), t.shape(), static_cast<const void*>(t.bytes()));
  }
  std::vector<ir::Tensor> outputs;
  for (const runtime::TensorSpec& spec : model.outputs()) outputs.emplace_back(static_cast<ir::DType>(spec.dtype), spec.shapeAt(batch));
  for (ir::Tensor& t : outputs) out.emplace_back(static_cast<policyc_dtype>(t.dtype()), t.shape(), static_cast<void*>(t.bytes()));
  model.run(in, out, batch, threads);
  return outputs;
}

}  // namespace policyc::driver
