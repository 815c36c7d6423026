// Weights replaced at run time (compile --updatable-weights, policyc_model::set_weights): after
// set_weights every fixture computes bit for bit what a fresh compile with those weights computes,
// on both backends; partial updates, get_weights, refused calls that change nothing, runs racing
// an update, and the error of a model compiled without updatable weights.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/driver/compile.h"
#include "policyc/driver/model_io.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/runtime/loader.h"
#include "support/fixtures.h"
#include "support/scratch_dir.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

const fs::path& scratchDir() { return testing::scratchDir("policyc-weights-test"); }

// Compiles `graph` (llvm: in-process; cpp: a .so in the scratch directory) and loads it.
runtime::Model compile(const ir::Graph& graph, codegen::Backend backend, bool updatable, const std::string& tag) {
  driver::CompileRequest r;
  r.backend = backend;
  r.updatableWeights = updatable;
  r.progress = false;
  r.modelPath = graph.name();
  r.cpp.name = "model";
  if (backend == codegen::Backend::Llvm) {
    r.jit = true;
  } else {
    r.output = (scratchDir() / fmt::format("{}_{}.so", graph.name(), tag)).string();
  }
  return driver::loadCompiled(driver::compileGraph(graph, r));
}

// New values for every f32 weight: a deterministic change of each element (sign, scale, shift).
std::map<std::string, ir::Tensor> newWeights(const ir::Graph& graph, uint32_t seed) {
  std::map<std::string, ir::Tensor> out;
  for (const auto& n : graph.nodes()) {
    if (n->kind() != ir::NodeKind::Param || !n->isModelWeight() || n->paramData().dtype() != ir::DType::F32) continue;
    if (n->paramData().numel() == 0) continue;
    ir::Tensor t = n->paramData();
    float* v = t.data<float>();
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = 0; i < t.numel(); ++i) {
      x = x * 1664525u + 1013904223u;
      const float r = static_cast<float>(x >> 8) / static_cast<float>(1u << 24);  // [0, 1)
      v[i] = v[i] * (0.5f + r) + (r - 0.5f) * 0.05f;
    }
    out.emplace(n->name(), std::move(t));
  }
  return out;
}

// The graph with its weights replaced (what a model file with those weights imports as).
std::unique_ptr<ir::Graph> withWeights(const ir::Graph& graph, const std::map<std::string, ir::Tensor>& weights) {
  auto g = graph.clone();
  for (const auto& n : g->nodes()) {
    auto it = weights.find(n->kind() == ir::NodeKind::Param ? n->name() : std::string());
    if (it != weights.end()) n->setParamData(it->second);
  }
  return g;
}

void setWeights(const runtime::Model& m, const std::map<std::string, ir::Tensor>& weights) {
  std::vector<std::pair<std::string, runtime::TensorView>> views;
  for (const auto& [name, t] : weights) {
    views.emplace_back(name, runtime::TensorView(POLICYC_F32, std::span<const int64_t>(t.shape()), static_cast<const void*>(t.bytes())));
  }
  m.setWeights(views);
}

bool bitEqual(const std::vector<ir::Tensor>& a, const std::vector<ir::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].bitEqual(b[i])) return false;
  }
  return true;
}

std::unique_ptr<ir::Graph> fixture(const std::string& name) {
  auto g = driver::loadModel(testing::sourcePath("examples/models/" + name + ".onnx"));
  return g;
}

}  // namespace

TEST_CASE("set_weights gives what a fresh compile with those weights gives, bit for bit", "[weights]") {
  // llvm on every fixture (conv, batch norm kept unfolded, layer norm, uint8 input, shared
  // trunks fused horizontally); cpp on two (a build takes seconds).
  struct Case {
    std::string model;
    codegen::Backend backend;
  };
  std::vector<Case> cases;
  for (const char* m : {"ppo_mlp", "sac_actor", "atari_cnn", "uint8_convbn", "multi_input"}) cases.push_back({m, codegen::Backend::Llvm});
  for (const char* m : {"ppo_mlp", "uint8_convbn"}) cases.push_back({m, codegen::Backend::Cpp});
  for (const Case& c : cases) {
    const std::string what = fmt::format("{} on {}", c.model, codegen::backendName(c.backend));
    INFO(what);
    auto graph = fixture(c.model);
    runtime::Model updatable = compile(*graph, c.backend, true, "updatable");
    REQUIRE(!updatable.weights().empty());
    const std::map<std::string, ir::Tensor> w2 = newWeights(*graph, 7);
    auto graph2 = withWeights(*graph, w2);
    runtime::Model fresh = compile(*graph2, c.backend, true, "fresh");
    for (int64_t batch : {1, 5}) {
      const std::vector<ir::Tensor> inputs = driver::randomInputs(*graph, batch, 3);
      const std::vector<ir::Tensor> before = driver::runModel(updatable, inputs);
      setWeights(updatable, w2);
      const std::vector<ir::Tensor> after = driver::runModel(updatable, inputs, 2);
      CHECK(bitEqual(after, driver::runModel(fresh, inputs)));
      CHECK_FALSE(bitEqual(after, before));
      // Against the interpreter on the new weights: right, not merely the same as another compile.
      const std::vector<ir::Tensor> expected = ir::interpret(*graph2, inputs);
      for (size_t o = 0; o < expected.size(); ++o) {
        driver::TensorCheck check = driver::compareTensors(fmt::format("output {}", o), after[o], expected[o], 1e-4, 1e-4);
        INFO(check.name << " max abs " << check.maxAbs << " " << check.note);
        CHECK(check.pass);
      }
      // The original weights back: the original outputs back.
      std::map<std::string, ir::Tensor> original;
      for (const runtime::TensorSpec& s : updatable.weights()) original.emplace(s.name, graph->findValue(s.name)->producer()->paramData());
      setWeights(updatable, original);
      CHECK(bitEqual(driver::runModel(updatable, inputs), before));
    }
  }
}

TEST_CASE("get_weights, partial updates and refused calls", "[weights]") {
  auto graph = fixture("ppo_mlp");
  runtime::Model m = compile(*graph, codegen::Backend::Llvm, true, "partial");
  const auto& specs = m.weights();
  REQUIRE(specs.size() >= 4);
  // Every weight as the file has it, in the file's shape.
  for (size_t i = 0; i < specs.size(); ++i) {
    const ir::Tensor& file = graph->findValue(specs[i].name)->producer()->paramData();
    CHECK(specs[i].shape == file.shape());
    ir::Tensor got(ir::DType::F32, specs[i].shape);
    m.getWeight(i, got.data<float>());
    CHECK(got.bitEqual(file));
  }
  const std::vector<ir::Tensor> inputs = driver::randomInputs(*graph, 3, 9);
  const std::vector<ir::Tensor> before = driver::runModel(m, inputs);

  // One weight: it changes, the others keep theirs.
  std::map<std::string, ir::Tensor> all = newWeights(*graph, 11);
  std::map<std::string, ir::Tensor> one{*all.find(specs[0].name)};
  setWeights(m, one);
  for (size_t i = 0; i < specs.size(); ++i) {
    ir::Tensor got(ir::DType::F32, specs[i].shape);
    m.getWeight(i, got.data<float>());
    CHECK(got.bitEqual(i == 0 ? one.begin()->second : graph->findValue(specs[i].name)->producer()->paramData()));
  }
  auto graph1 = withWeights(*graph, one);
  CHECK(bitEqual(driver::runModel(m, inputs), driver::runModel(compile(*graph1, codegen::Backend::Llvm, true, "one"), inputs)));
  const std::vector<ir::Tensor> afterOne = driver::runModel(m, inputs);

  // Refused: nothing changes, and the message names the weight.
  ir::Tensor wrongShape(ir::DType::F32, {3});
  auto refuse = [&](std::vector<std::pair<std::string, runtime::TensorView>> views, const std::string& message) {
    try {
      m.setWeights(views);
      FAIL("set_weights took " << message);
    } catch (const runtime::ModelError& e) {
      CHECK_THAT(e.what(), Catch::Contains(message));
    }
    CHECK(bitEqual(driver::runModel(m, inputs), afterOne));
  };
  const ir::Tensor& good = all.at(specs[1].name);
  const runtime::TensorView goodView(POLICYC_F32, std::span<const int64_t>(good.shape()), static_cast<const void*>(good.bytes()));
  refuse({{specs[1].name, goodView}, {"no.such.weight", goodView}}, "has no weight 'no.such.weight'");
  refuse({{specs[1].name, goodView},
          {specs[0].name, runtime::TensorView(POLICYC_F32, std::span<const int64_t>(wrongShape.shape()), static_cast<const void*>(wrongShape.bytes()))}},
         "weight '" + specs[0].name + "': expected f32[");
  refuse({{specs[1].name, goodView}, {specs[1].name, goodView}}, "is given twice");
  // A learner that diverged: NaN and infinity are refused (the kernels may rely on finite weights).
  ir::Tensor nan = good;
  nan.data<float>()[nan.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  const runtime::TensorView nanView(POLICYC_F32, std::span<const int64_t>(nan.shape()), static_cast<const void*>(nan.bytes()));
  refuse({{specs[0].name, runtime::TensorView(POLICYC_F32, std::span<const int64_t>(one.begin()->second.shape()),
                                              static_cast<const void*>(one.begin()->second.bytes()))},
          {specs[1].name, nanView}},
         "weights must be finite");
  refuse({{specs[1].name, runtime::TensorView(POLICYC_F64, std::span<const int64_t>(good.shape()), static_cast<const void*>(good.bytes()))}},
         "expected f32[");
  // The C ABI checks the same itself (a caller that skips the loader).
  const policyc_model& d = m.descriptor();
  const int64_t shape3[] = {3};
  const policyc_tensor_desc bad{specs[0].name.c_str(), POLICYC_F32, 1, shape3};
  const void* data[] = {wrongShape.bytes()};
  CHECK(d.set_weights(1, &bad, data) == POLICYC_ERROR_ARGUMENT);
  const policyc_tensor_desc nanDesc{specs[1].name.c_str(), POLICYC_F32, static_cast<int32_t>(nan.shape().size()), nan.shape().data()};
  const void* nanData[] = {nan.bytes()};
  CHECK(d.set_weights(1, &nanDesc, nanData) == POLICYC_ERROR_ARGUMENT);
  CHECK(d.get_weights(static_cast<int32_t>(specs.size()), wrongShape.bytes()) == POLICYC_ERROR_ARGUMENT);
  CHECK(bitEqual(driver::runModel(m, inputs), afterOne));
}

TEST_CASE("runs racing set_weights see the old weights or the new ones, never a mix", "[weights]") {
  auto graph = fixture("ppo_mlp");
  runtime::Model m = compile(*graph, codegen::Backend::Llvm, true, "race");
  const std::map<std::string, ir::Tensor> a = newWeights(*graph, 1), b = newWeights(*graph, 2);
  const std::vector<ir::Tensor> inputs = driver::randomInputs(*graph, 4, 5);
  setWeights(m, a);
  const std::vector<ir::Tensor> outA = driver::runModel(m, inputs);
  setWeights(m, b);
  const std::vector<ir::Tensor> outB = driver::runModel(m, inputs);
  REQUIRE_FALSE(bitEqual(outA, outB));
  std::atomic<bool> stop{false};
  std::atomic<int> mixed{0}, runs{0};
  std::vector<std::thread> runners;
  for (int t = 0; t < 2; ++t) {
    runners.emplace_back([&] {
      while (!stop.load()) {
        const std::vector<ir::Tensor> out = driver::runModel(m, inputs);
        if (!bitEqual(out, outA) && !bitEqual(out, outB)) ++mixed;
        ++runs;
      }
    });
  }
  for (int i = 0; i < 200; ++i) setWeights(m, i % 2 ? b : a);
  stop = true;
  for (std::thread& t : runners) t.join();
  CHECK(mixed.load() == 0);
  CHECK(runs.load() > 0);
}

TEST_CASE("a model compiled without updatable weights has none to replace", "[weights]") {
  auto graph = fixture("ppo_mlp");
  runtime::Model m = compile(*graph, codegen::Backend::Llvm, false, "fixed");
  CHECK(m.weights().empty());
  CHECK(m.descriptor().num_weights == 0);
  CHECK(m.descriptor().set_weights == nullptr);
  try {
    setWeights(m, newWeights(*graph, 3));
    FAIL("set_weights on a model without updatable weights");
  } catch (const runtime::ModelError& e) {
    CHECK_THAT(e.what(), Catch::Contains("compile it with --updatable-weights"));
  }
}

TEST_CASE("updatable weights asked of a model without f32 weights is an error", "[weights]") {
  ir::Graph g("no_weights");
  ir::Value* x = g.addInput("x", ir::TensorType{ir::DType::F32, {ir::Dim::batch(), ir::Dim(4)}});
  g.setOutputs({{"y", g.addOp(ir::Op::Relu, {x}, {}, "y")->output()}});
  CHECK_THROWS_WITH(driver::markUpdatableWeights(g), Catch::Contains("has no f32 weights to replace"));
}
