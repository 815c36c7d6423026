// The memory plan: offsets linear in batch, reuse of dead temporaries, in-place pointwise kernels.
#include <catch2/catch.hpp>

#include "policyc/codegen/memory_plan.h"
#include "policyc/ir/graph.h"
#include "policyc/driver/model_io.h"
#include "policyc/passes/pass_manager.h"
#include "support/fixtures.h"

using namespace policyc;
using namespace policyc::ir;

namespace {

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

Value* linear(Graph& g, Value* x, int64_t in, int64_t out, const std::string& name) {
  Value* w = g.addParam(name + ".w", Tensor(DType::F32, {out, in}));
  return g.addOp(Op::Linear, {x, w}, {}, name)->output();
}

// No two temporaries that are live at the same kernel overlap in memory.
void requireNoOverlap(const codegen::KernelProgram& p, const codegen::MemoryPlan& plan) {
  for (const auto& a : plan.slots) {
    for (const auto& b : plan.slots) {
      if (a.buffer >= b.buffer || a.perBatch != b.perBatch) continue;
      bool liveTogether = !(a.lastKernel < b.firstKernel || b.lastKernel < a.firstKernel);
      bool inPlacePair = a.sharesWith == b.buffer || b.sharesWith == a.buffer;
      bool overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      INFO(p.buffer(a.buffer).name << " and " << p.buffer(b.buffer).name);
      CHECK_FALSE((liveTogether && overlap && !inPlacePair));
    }
  }
}

}  // namespace

TEST_CASE("memory plan: a chain reuses memory and sizes are linear in batch", "[codegen][memory]") {
  Graph g("chain");
  Value* x = g.addInput("x", f32({Dim::batch(), 64}));
  Value* a = linear(g, x, 64, 64, "a");
  Value* b = linear(g, a, 64, 64, "b");
  Value* c = linear(g, b, 64, 64, "c");
  Value* d = linear(g, c, 64, 8, "d");
  g.setOutputs({{"y", d}});
  codegen::KernelProgram p = codegen::lowerGraph(g);
  codegen::MemoryPlan plan = codegen::planMemory(p);
  REQUIRE(plan.slots.size() == 3);  // a, b, c; d is the output
  CHECK(plan.staticBytes == 0);
  // a and c are never live together: two rows of 256 bytes suffice for three temporaries.
  CHECK(plan.perBatchBytes == 2 * 256);
  CHECK(plan.workspaceBytes(10) == 5120);
  CHECK(plan.offsetOf(p.kernels[0].writes()[0], 10) % 64 == 0);
  requireNoOverlap(p, plan);
}

TEST_CASE("memory plan: a pointwise kernel writes over the operand it reads last", "[codegen][memory]") {
  Graph g("inplace");
  Value* x = g.addInput("x", f32({Dim::batch(), 32}));
  Value* a = linear(g, x, 32, 32, "a");
  Value* e = g.addOp(Op::Exp, {a}, {}, "e")->output();
  Value* y = linear(g, e, 32, 4, "y");
  g.setOutputs({{"y", y}});
  codegen::KernelProgram p = codegen::lowerGraph(g);  // unfused: exp is its own kernel
  codegen::MemoryPlan plan = codegen::planMemory(p);
  CHECK(plan.inPlaceCount() == 1);
  CHECK(plan.perBatchBytes == 128);
  requireNoOverlap(p, plan);
}

TEST_CASE("memory plan: no in-place write over a value still needed", "[codegen][memory][negative]") {
  Graph g("shared");
  Value* x = g.addInput("x", f32({Dim::batch(), 32}));
  Value* a = linear(g, x, 32, 32, "a");
  Value* e = g.addOp(Op::Exp, {a}, {}, "e")->output();
  Value* s = g.addOp(Op::Add, {e, a}, {}, "s")->output();  // a is read after exp
  Value* y = linear(g, s, 32, 4, "y");
  g.setOutputs({{"y", y}});
  codegen::KernelProgram p = codegen::lowerGraph(g);
  codegen::MemoryPlan plan = codegen::planMemory(p);
  for (const auto& slot : plan.slots) {
    if (p.buffer(slot.buffer).name == "e") CHECK(slot.sharesWith < 0);
  }
  requireNoOverlap(p, plan);
}

TEST_CASE("memory plan: temporaries without batch go to the static area", "[codegen][memory]") {
  Graph g("static");
  Value* x = g.addInput("x", f32({4, 16}));
  Value* a = linear(g, x, 16, 16, "a");
  Value* y = linear(g, a, 16, 2, "y");
  g.setOutputs({{"y", y}});
  codegen::KernelProgram p = codegen::lowerGraph(g);
  codegen::MemoryPlan plan = codegen::planMemory(p);
  CHECK(plan.staticBytes == 256);
  CHECK(plan.perBatchBytes == 0);
  CHECK(plan.workspaceBytes(1000) == 256);
}

TEST_CASE("memory plan: every fixture packs without overlap", "[codegen][memory]") {
  for (const auto& fx : testing::loadFixtures()) {
    INFO(fx.name);
    auto graph = driver::loadModel(fx.onnx);
    passes::runPipeline(*graph);
    codegen::KernelProgram p = codegen::lowerGraph(*graph);
    codegen::fuseKernels(p);
    codegen::MemoryPlan plan = codegen::planMemory(p);
    requireNoOverlap(p, plan);
    int64_t sum = 0;
    for (const auto& s : plan.slots) sum += s.perBatch ? s.bytes : 0;
    CHECK(plan.perBatchBytes <= sum);
  }
}
