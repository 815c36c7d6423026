// ONNX conformance: runs Debian's libonnx-testdata node and PyTorch tests through the interpreter.
//
// A test is selected when every operator of its model is one policyc imports and every tensor it
// feeds or expects has a dtype policyc handles; the others are skipped, with the reason. A selected
// test passes when import succeeds and every output matches within ONNX's backend-test tolerance
// (rtol 1e-3, atol 1e-7; NaN where NaN is expected).
//
//   policyc_conformance [--data DIR] [--min-passed N] [--report FILE] [--verbose] [--filter TEXT]
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"

namespace fs = std::filesystem;
using namespace policyc;

namespace {

enum class Outcome { Passed, Failed, Skipped };

struct Result {
  std::string name;  // "node/test_add"
  Outcome outcome;
  std::string reason;
};

bool readModel(const fs::path& path, onnx::ModelProto& model) {
  std::ifstream f(path, std::ios::binary);
  return f && model.ParseFromIstream(&f);
}

std::string skipReason(const onnx::ModelProto& model) {
  std::set<std::string> unsupported;
  for (const auto& node : model.graph().node()) {
    if (!frontend::isSupportedOnnxOp(node.domain(), node.op_type())) unsupported.insert(node.op_type());
  }
  if (!unsupported.empty()) return fmt::format("unsupported operator {}", fmt::join(unsupported, ", "));
  auto checkType = [](const onnx::ValueInfoProto& v) -> std::string {
    if (!v.type().has_tensor_type()) return fmt::format("'{}' is not a tensor", v.name());
    int32_t t = v.type().tensor_type().elem_type();
    if (!frontend::isSupportedOnnxType(t)) return fmt::format("'{}' has unsupported element type {}", v.name(), t);
    return "";
  };
  for (const auto& v : model.graph().input()) {
    if (std::string r = checkType(v); !r.empty()) return r;
  }
  for (const auto& v : model.graph().output()) {
    if (std::string r = checkType(v); !r.empty()) return r;
  }
  return "";
}

// Empty when `got` matches `want`; otherwise what differs.
std::string compare(const ir::Tensor& got, const ir::Tensor& want) {
  if (got.dtype() != want.dtype()) {
    return fmt::format("dtype {} != expected {}", ir::dtypeName(got.dtype()), ir::dtypeName(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    return fmt::format("shape [{}] != expected [{}]", fmt::join(got.shape(), ","), fmt::join(want.shape(), ","));
  }
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getAsDouble(i), w = want.getAsDouble(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;  // also equal infinities
    if (!(std::abs(g - w) <= 1e-7 + 1e-3 * std::abs(w))) {
      return fmt::format("element {}: {} != expected {}", i, g, w);
    }
  }
  return "";
}

// Import errors that mean "policyc declares this unsupported" (an opset outside 11-17, a training
// form, an attribute value it does not handle) make a test skipped, not failed.
bool declaredUnsupported(const std::string& message) {
  for (const char* marker : {"is not supported", "unsupported operator", "does not support", "compiles inference",
                             "only the first (batch) dim may be dynamic", "is used, but"}) {
    if (message.find(marker) != std::string::npos) return true;
  }
  return false;
}

// The graph input named in "... (input 'NAME') must be a constant ..." errors.
std::string inputNeededAsConstant(const std::string& message) {
  size_t at = message.find("must be a constant");
  size_t open = message.rfind("(input '", at);
  if (at == std::string::npos || open == std::string::npos) return "";
  size_t begin = open + 8;
  size_t close = message.find('\'', begin);
  return close == std::string::npos ? "" : message.substr(begin, close - begin);
}

std::string readFileBytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Imports the model; operands that policyc needs at compile time (a Reshape's shape, Slice's
// starts, Clip's bounds...) but that the test feeds as graph inputs are bound to the data set's
// values, as compiling such a model for those inputs would. `bound` returns their names.
std::unique_ptr<ir::Graph> importBinding(onnx::ModelProto model, const fs::path& set, const std::string& name,
                                         std::set<std::string>& bound) {
  std::map<std::string, int> originalIndex;  // input_K.pb numbers follow the unmodified input list
  for (int i = 0; i < model.graph().input_size(); ++i) originalIndex[model.graph().input(i).name()] = i;
  for (int attempt = 0;; ++attempt) {
    std::string bytes = model.SerializeAsString();
    try {
      return frontend::importOnnxBytes(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
                                       name + "/model.onnx");
    } catch (const Error& e) {
      std::string input = inputNeededAsConstant(e.what());
      auto* inputs = model.mutable_graph()->mutable_input();
      auto it = std::find_if(inputs->begin(), inputs->end(), [&](const auto& v) { return v.name() == input; });
      if (input.empty() || it == inputs->end() || attempt > 8) throw;
      onnx::TensorProto tensor;
      if (!tensor.ParseFromString(readFileBytes(set / fmt::format("input_{}.pb", originalIndex.at(input))))) throw;
      tensor.set_name(input);
      *model.mutable_graph()->add_initializer() = tensor;
      inputs->erase(it);
      bound.insert(input);
    }
  }
}

Result runTest(const fs::path& dir, const std::string& name) {
  fs::path modelPath = dir / "model.onnx";
  onnx::ModelProto model;
  if (!readModel(modelPath, model)) return {name, Outcome::Skipped, "model.onnx does not parse"};
  if (std::string reason = skipReason(model); !reason.empty()) return {name, Outcome::Skipped, reason};

  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(entry.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {name, Outcome::Skipped, "no test data sets"};
  for (const fs::path& set : sets) {
    std::set<std::string> bound;
    std::unique_ptr<ir::Graph> graph;
    try {
      graph = importBinding(model, set, name, bound);
    } catch (const Error& e) {
      return {name, declaredUnsupported(e.what()) ? Outcome::Skipped : Outcome::Failed, fmt::format("import: {}", e.what())};
    }
    std::vector<ir::Tensor> inputs, expected;
    try {
      for (int i = 0; i < model.graph().input_size(); ++i) {
        fs::path file = set / fmt::format("input_{}.pb", i);
        if (!bound.count(model.graph().input(i).name()) && fs::exists(file)) {
          inputs.push_back(frontend::readOnnxTensorFile(file.string()));
        }
      }
      for (size_t i = 0; fs::exists(set / fmt::format("output_{}.pb", i)); ++i) {
        expected.push_back(frontend::readOnnxTensorFile((set / fmt::format("output_{}.pb", i)).string()));
      }
    } catch (const Error& e) {
      return {name, Outcome::Skipped, fmt::format("test data: {}", e.what())};
    }
    std::vector<ir::Tensor> outputs;
    try {
      if (inputs.size() != graph->inputs().size()) {
        return {name, Outcome::Failed,
                fmt::format("{} inputs in the data set, {} in the imported graph", inputs.size(), graph->inputs().size())};
      }
      outputs = ir::interpret(*graph, inputs);
    } catch (const Error& e) {
      return {name, Outcome::Failed, fmt::format("run: {}", e.what())};
    }
    if (outputs.size() != expected.size()) {
      return {name, Outcome::Failed, fmt::format("{} outputs, expected {}", outputs.size(), expected.size())};
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (std::string diff = compare(outputs[i], expected[i]); !diff.empty()) {
        return {name, Outcome::Failed, fmt::format("{}: output {}: {}", set.filename().string(), i, diff)};
      }
    }
  }
  return {name, Outcome::Passed, ""};
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string report;
  std::string filter;
  long minPassed = -1;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "policyc_conformance: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--data") data = value();
    else if (a == "--report") report = value();
    else if (a == "--filter") filter = value();
    else if (a == "--min-passed") minPassed = std::stol(value());
    else if (a == "--verbose") verbose = true;
    else {
      std::cerr << "usage: policyc_conformance [--data DIR] [--min-passed N] [--report FILE] [--verbose] [--filter TEXT]\n";
      return 2;
    }
  }
  if (!fs::is_directory(data)) {
    std::cerr << "policyc_conformance: no test data at " << data << " (install Debian's libonnx-testdata)\n";
    return 2;
  }
  std::vector<Result> results;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator"}) {
    fs::path root = fs::path(data) / suite;
    if (!fs::is_directory(root)) continue;
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(root)) {
      if (entry.is_directory()) dirs.push_back(entry.path());
    }
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      std::string name = std::string(suite) + "/" + dir.filename().string();
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      results.push_back(runTest(dir, name));
      const Result& r = results.back();
      if (r.outcome == Outcome::Failed || (verbose && r.outcome == Outcome::Skipped)) {
        std::cout << (r.outcome == Outcome::Failed ? "FAIL " : "skip ") << r.name << ": " << r.reason << "\n";
      }
    }
  }
  long passed = std::count_if(results.begin(), results.end(), [](const Result& r) { return r.outcome == Outcome::Passed; });
  long failed = std::count_if(results.begin(), results.end(), [](const Result& r) { return r.outcome == Outcome::Failed; });
  long skipped = static_cast<long>(results.size()) - passed - failed;
  if (!report.empty()) {
    std::ofstream out(report);
    for (const Result& r : results) {
      const char* what = r.outcome == Outcome::Passed ? "pass" : r.outcome == Outcome::Failed ? "FAIL" : "skip";
      out << what << "\t" << r.name << "\t" << r.reason << "\n";
    }
  }
  double rate = passed + failed ? 100.0 * static_cast<double>(passed) / static_cast<double>(passed + failed) : 0.0;
  std::cout << fmt::format("selected {} of {} tests; pass rate {:.1f}%\n", passed + failed, results.size(), rate);
  std::cout << fmt::format("{} passed, {} failed, {} skipped\n", passed, failed, skipped);
  if (minPassed >= 0 && passed < minPassed) {
    std::cout << fmt::format("conformance dropped: {} passed, fewer than the recorded {}\n", passed, minPassed);
    return 1;
  }
  return 0;
}
