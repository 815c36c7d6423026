// The default pipeline preserves semantics: on every fixture and on the ONNX conformance models
// that import, the interpreter gives the unoptimised graph's outputs after every pass, and after
// the whole pipeline with any single pass disabled.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <set>

#include "policyc/driver/model_io.h"
#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/passes/pass_manager.h"
#include "support/fixtures.h"

using namespace policyc;

namespace {

constexpr size_t kMaxConformanceModels = 300;

// Empty when equal within 1e-5 (absolute, or relative above 1); integers (argmax) exactly; NaN
// matches NaN.
std::string difference(const std::vector<ir::Tensor>& got, const std::vector<ir::Tensor>& want) {
  if (got.size() != want.size()) return fmt::format("{} outputs, expected {}", got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    const ir::Tensor& g = got[o];
    const ir::Tensor& w = want[o];
    if (g.dtype() != w.dtype() || g.shape() != w.shape()) {
      return fmt::format("output {}: {} vs {}", o, g.type().str(), w.type().str());
    }
    for (int64_t i = 0; i < g.numel(); ++i) {
      double a = g.getAsDouble(i);
      double b = w.getAsDouble(i);
      bool same = g.getAsInt(i) == w.getAsInt(i);
      if (ir::isFloat(g.dtype())) {
        same = a == b || (std::isnan(a) && std::isnan(b)) || std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b));
      }
      if (!same) return fmt::format("output {} element {}: {} vs {} unoptimised", o, i, a, b);
    }
  }
  return "";
}

struct Model {
  std::string name;
  std::unique_ptr<ir::Graph> graph;
  std::vector<ir::Tensor> inputs;
  std::vector<ir::Tensor> expected;  // the unoptimised graph's outputs
};

// Runs the default pipeline (minus `disabled`) on a copy, checking the outputs after every pass
// (or only at the end); returns the first divergence, or "".
std::string checkPipeline(const Model& m, const std::vector<std::string>& disabled, bool everyPass) {
  auto graph = m.graph->clone();
  std::string failure;
  passes::PipelineOptions options;
  options.disabled = disabled;
  if (everyPass) {
    options.afterPass = [&](std::string_view pass, const passes::PassStats&, const ir::Graph& g) {
      if (!failure.empty()) return;
      std::string diff = difference(ir::interpret(g, m.inputs), m.expected);
      if (!diff.empty()) failure = fmt::format("after {}: {}", pass, diff);
    };
  }
  try {
    passes::runPipeline(*graph, options);
  } catch (const Error& e) {
    return fmt::format("pipeline: {}", e.what());
  }
  if (!failure.empty()) return failure;
  std::string diff = difference(ir::interpret(*graph, m.inputs), m.expected);
  return diff.empty() ? "" : fmt::format("final graph: {}", diff);
}

// Every pass of the default pipeline, once.
std::vector<std::string> pipelinePasses() {
  std::vector<std::string> names;
  for (const std::string& n : passes::defaultPipeline()) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

void checkModel(const Model& m) {
  INFO(m.name);
  std::string diff = checkPipeline(m, {}, true);
  if (!diff.empty()) FAIL(m.name << ": " << diff);
  for (const std::string& pass : pipelinePasses()) {
    diff = checkPipeline(m, {pass}, false);
    if (!diff.empty()) FAIL(m.name << " with --disable-pass " << pass << ": " << diff);
  }
}

}  // namespace

TEST_CASE("pipeline semantics: fixtures, after every pass and with each pass disabled", "[pipeline][fixtures]") {
  auto fixtures = testing::loadFixtures();
  REQUIRE(fixtures.size() >= 6);
  for (const auto& fx : fixtures) {
    Model m{fx.name, driver::loadModel(fx.onnx), {}, {}};
    // The smallest reference batch keeps the interpreter runs short.
    auto c = std::min_element(fx.cases.begin(), fx.cases.end(),
                              [](const auto& a, const auto& b) { return a.batch < b.batch; });
    std::map<std::string, ir::Tensor> named;
    for (const auto& [name, path] : c->inputs) named.emplace(name, driver::readTensor(path));
    m.inputs = driver::orderInputs(*m.graph, std::move(named));
    m.expected = ir::interpret(*m.graph, m.inputs);
    checkModel(m);

    // Every op of the optimised graph still names the source ops it came from.
    auto optimized = m.graph->clone();
    passes::runPipeline(*optimized);
    for (const auto& n : optimized->nodes()) {
      if (n->isOp()) CHECK_FALSE(n->provenance().empty());
    }
  }
}

TEST_CASE("pipeline semantics: ONNX conformance models that import", "[pipeline][conformance]") {
  namespace fs = std::filesystem;
  fs::path root = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(root)) {
    WARN("no ONNX test data at " << root.string() << "; skipped");
    return;
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (fs::exists(entry.path() / "model.onnx")) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());
  size_t checked = 0;
  for (const fs::path& dir : dirs) {
    if (checked >= kMaxConformanceModels) break;
    Model m{dir.filename().string(), nullptr, {}, {}};
    try {
      m.graph = frontend::importOnnxFile((dir / "model.onnx").string());
      m.inputs = driver::randomInputs(*m.graph, 2, 1);
      m.expected = ir::interpret(*m.graph, m.inputs);
    } catch (const std::exception&) {
      continue;  // not importable, or the random inputs are invalid for it (indices, division by zero)
    }
    ++checked;
    checkModel(m);
  }
  INFO(checked << " conformance models checked");
  CHECK(checked >= 100);
  if (std::getenv("POLICYC_VERBOSE")) WARN(checked << " conformance models checked");
}
