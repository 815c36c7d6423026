// Fixture models: interpreter vs PyTorch's reference outputs, and the exact .pir round trip.
#include <catch2/catch.hpp>

#include <cmath>

#include "policyc/driver/model_io.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/ir/verifier.h"
#include "support/fixtures.h"

using namespace policyc;

namespace {

// 1e-5 absolute, or relative for values larger than 1; integer outputs (argmax) exactly.
void requireClose(const ir::Tensor& got, const ir::Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getAsDouble(i);
    double w = want.getAsDouble(i);
    if (ir::isFloat(got.dtype())) {
      if (std::abs(g - w) > 1e-5 * std::max(1.0, std::abs(w))) {
        FAIL(what << " element " << i << ": got " << g << ", PyTorch gives " << w);
      }
    } else if (got.getAsInt(i) != want.getAsInt(i)) {
      FAIL(what << " element " << i << ": got " << got.getAsInt(i) << ", PyTorch gives " << want.getAsInt(i));
    }
  }
}

std::vector<ir::Tensor> referenceInputs(const ir::Graph& graph, const testing::FixtureCase& c) {
  std::map<std::string, ir::Tensor> named;
  for (const auto& [name, path] : c.inputs) named.emplace(name, driver::readTensor(path));
  return driver::orderInputs(graph, std::move(named));
}

}  // namespace

TEST_CASE("fixtures: the interpreter matches PyTorch on every fixture at batch 1 and 3", "[fixtures]") {
  auto fixtures = testing::loadFixtures();
  REQUIRE(fixtures.size() >= 6);
  for (const auto& fx : fixtures) {
    auto graph = driver::loadModel(fx.onnx);
    REQUIRE_NOTHROW(ir::verify(*graph));
    for (const auto& c : fx.cases) {
      auto outputs = ir::interpret(*graph, referenceInputs(*graph, c));
      auto names = graph->outputs();
      REQUIRE(outputs.size() == c.outputs.size());
      for (size_t i = 0; i < outputs.size(); ++i) {
        requireClose(outputs[i], driver::readTensor(c.outputs.at(names[i].first)),
                     fx.name + " batch " + std::to_string(c.batch) + " output " + names[i].first);
      }
    }
  }
}

TEST_CASE("fixtures: print -> parse -> print is byte-identical and runs bit-identically", "[fixtures][text]") {
  for (const auto& fx : testing::loadFixtures()) {
    INFO(fx.name);
    auto graph = driver::loadModel(fx.onnx);
    ir::PrintedGraph first = ir::printGraph(*graph);
    auto parsed = ir::parseGraph(first.text, fx.name + ".pir", first.sidecar);
    ir::PrintedGraph second = ir::printGraph(*parsed);
    REQUIRE(first.text == second.text);
    REQUIRE(first.sidecar == second.sidecar);

    const auto& c = fx.cases.back();
    auto a = ir::interpret(*graph, referenceInputs(*graph, c));
    auto b = ir::interpret(*parsed, referenceInputs(*parsed, c));
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitEqual(b[i]));
  }
}
