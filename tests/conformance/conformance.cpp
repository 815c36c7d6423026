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

Result runTest(const fs::path& dir, const std::string& name) {
  fs::path modelPath = dir / "model.onnx";
  onnx::ModelProto model;
  if (!readModel(modelPath, model)) return {name, Outcome::Skipped, "model.onnx does not parse"};
  if (std::string reason = skipReason(model); !reason.empty()) return {name, Outcome::Skipped, reason};

  std::unique_ptr<ir::Graph> graph;
  try {
    graph = frontend::importOnnxFile(modelPath.string());
  } catch (const Error& e) {
    return {name, Outcome::Failed, fmt::format("import: {}", e.what())};
  }
  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(entry.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {name, Outcome::Skipped, "no test data sets"};
  for (const fs::path& set : sets) {
    std::vector<ir::Tensor> inputs, expected;
    try {
      for (size_t i = 0; fs::exists(set / fmt::format("input_{}.pb", i)); ++i) {
        inputs.push_back(frontend::readOnnxTensorFile((set / fmt::format("input_{}.pb", i)).string()));
      }
      for (size_t i = 0; fs::exists(set / fmt::format("output_{}.pb", i)); ++i) {
        expected.push_back(frontend::readOnnxTensorFile((set / fmt::format("output_{}.pb", i)).string()));
      }
    } catch (const Error& e) {
      return {name, Outcome::Skipped, fmt::format("test data: {}", e.what())};
    }
    std::vector<ir::Tensor> outputs;
    try {
      // ONNX lists initializers among the inputs in old models; the data sets give only the rest.
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
