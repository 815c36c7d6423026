// Lowering to the kernel program and fusion: what merges, and what must not.
#include <catch2/catch.hpp>

#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/graph.h"

using namespace policyc;
using namespace policyc::ir;
using codegen::KernelKind;

namespace {

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

Value* param(Graph& g, const std::string& name, std::vector<int64_t> shape) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
  return g.addParam(name, std::move(t));
}

Value* op(Graph& g, Op o, std::vector<Value*> in, const std::string& name, AttrMap attrs = {}) {
  return g.addOp(o, std::move(in), std::move(attrs), name)->output();
}

std::vector<std::string> kernelNames(const codegen::KernelProgram& p) {
  std::vector<std::string> names;
  for (const auto& k : p.kernels) names.push_back(k.name);
  return names;
}

codegen::KernelProgram fused(const Graph& g) {
  codegen::KernelProgram p = codegen::lowerGraph(g);
  codegen::fuseKernels(p);
  return p;
}

Value* conv(Graph& g, Value* x, int64_t cin, int64_t cout, const std::string& name) {
  Value* w = param(g, name + ".w", {cout, cin, 3, 3});
  Value* b = param(g, name + ".b", {cout});
  return op(g, Op::Conv, {x, w, b}, name, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
}

}  // namespace

TEST_CASE("lowering: one kernel per op, views need none", "[codegen]") {
  Graph g("views");
  Value* x = g.addInput("x", f32({Dim::batch(), 2, 3}));
  Value* r = op(g, Op::Reshape, {x}, "r", {{"shape", std::vector<int64_t>{0, -1}}});
  Value* t = op(g, Op::Tanh, {r}, "t");
  Node* split = g.addOp(Op::Split, {t}, {{"axis", int64_t{1}}}, std::vector<std::string>{"a", "b"});
  Value* s = op(g, Op::Add, {split->output(0), split->output(1)}, "s");
  g.setOutputs({{"y", s}});
  codegen::KernelProgram p = codegen::lowerGraph(g);
  REQUIRE(p.kernels.size() == 2);
  CHECK(kernelNames(p) == std::vector<std::string>{"tanh_0", "add_1"});
  const codegen::Buffer& b = p.buffer(p.kernels[1].reads().back());
  CHECK(b.isView());
  CHECK(b.offset == 3);
  CHECK(b.strides == std::vector<int64_t>{6, 1});
  CHECK(p.buffer(p.outputs.at(0).second).kind == codegen::BufferKind::Output);
}

TEST_CASE("fusion: a broadcast pointwise chain becomes one loop nest", "[codegen][fusion]") {
  // (x0 + x1 + x2) * x3 + x4, x1/x3/x4 broadcast over rows: the Inductor CPU tutorial's example.
  Graph g("chain");
  Value* x0 = g.addInput("x0", f32({16384, 512}));
  Value* x1 = g.addInput("x1", f32({1, 512}));
  Value* x2 = g.addInput("x2", f32({16384, 512}));
  Value* x3 = g.addInput("x3", f32({1, 512}));
  Value* x4 = g.addInput("x4", f32({1, 512}));
  Value* a = op(g, Op::Add, {x0, x1}, "a");
  Value* b = op(g, Op::Add, {a, x2}, "b");
  Value* c = op(g, Op::Mul, {b, x3}, "c");
  Value* d = op(g, Op::Add, {c, x4}, "d");
  g.setOutputs({{"y", d}});
  codegen::KernelProgram p = codegen::lowerGraph(g);
  CHECK(p.kernels.size() == 4);
  codegen::FusionStats stats = codegen::fuseKernels(p);
  CHECK(stats.pointwise == 3);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].name == "fused_add_add_mul_add_0");
  CHECK(p.kernels[0].sources.size() == 4);
  // The broadcast operand reads row 0 whatever the row.
  bool broadcastLoad = false;
  for (const auto& i : p.kernels[0].body) {
    if (i.opcode == codegen::Opcode::Load && p.buffer(i.buffer).name == "x1") broadcastLoad = i.index[0].axis == -1;
  }
  CHECK(broadcastLoad);
}

TEST_CASE("fusion: bias and activation go into the linear's epilogue", "[codegen][fusion]") {
  Graph g("mlp");
  Value* x = g.addInput("x", f32({Dim::batch(), 17}));
  Value* h = op(g, Op::Linear, {x, param(g, "w0", {64, 17}), param(g, "b0", {64})}, "h");
  Value* t = op(g, Op::Tanh, {h}, "t");
  Value* y = op(g, Op::Linear, {t, param(g, "w1", {4, 64}), param(g, "b1", {4})}, "y");
  g.setOutputs({{"y", y}});
  codegen::KernelProgram p = fused(g);
  CHECK(kernelNames(p) == std::vector<std::string>{"fused_linear_bias_tanh_0", "linear_bias_1"});
  CHECK(p.kernels[0].kind == KernelKind::Linear);
}

TEST_CASE("fusion: a residual add of an earlier value joins the conv's epilogue", "[codegen][fusion]") {
  Graph g("res");
  Value* x = g.addInput("x", f32({Dim::batch(), 4, 8, 8}));
  Value* c0 = conv(g, x, 4, 4, "c0");
  Value* r0 = op(g, Op::Relu, {c0}, "r0");
  Value* c1 = conv(g, r0, 4, 4, "c1");
  Value* s = op(g, Op::Add, {x, c1}, "s");
  Value* y = op(g, Op::Relu, {s}, "y_relu");
  g.setOutputs({{"y", y}});
  codegen::KernelProgram p = fused(g);
  CHECK(kernelNames(p) == std::vector<std::string>{"fused_conv_bias_relu_0", "fused_conv_bias_add_relu_1"});
}

TEST_CASE("fusion: a value read twice keeps its store, the pointwise reader moves in", "[codegen][fusion]") {
  // IMPALA's block input: x feeds relu(x) -> conv and the residual add.
  Graph g("pre_act");
  Value* in = g.addInput("in", f32({Dim::batch(), 4, 8, 8}));
  Value* x = op(g, Op::MaxPool, {in}, "x",
                {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* r = op(g, Op::Relu, {x}, "r");
  Value* c = conv(g, r, 4, 4, "c");
  Value* s = op(g, Op::Add, {x, c}, "s");
  g.setOutputs({{"y", s}});
  codegen::KernelProgram p = fused(g);
  REQUIRE(kernelNames(p) == std::vector<std::string>{"fused_max_pool_relu_0", "fused_conv_bias_add_1"});
  CHECK(p.kernels[0].writes().size() == 2);  // x for the add, relu(x) for the conv
}

TEST_CASE("fusion: a producer with two readers is not duplicated", "[codegen][fusion][negative]") {
  Graph g("shared");
  Value* x = g.addInput("x", f32({Dim::batch(), 8}));
  Value* e = op(g, Op::Exp, {x}, "e");
  Value* a = op(g, Op::Neg, {e}, "a");
  Value* b = op(g, Op::Abs, {e}, "b");
  g.setOutputs({{"a", a}, {"b", b}});
  codegen::KernelProgram p = fused(g);
  CHECK(kernelNames(p) == std::vector<std::string>{"exp_0", "neg_1", "abs_2"});
}

TEST_CASE("fusion: a graph output is never fused away", "[codegen][fusion][negative]") {
  Graph g("keep");
  Value* x = g.addInput("x", f32({Dim::batch(), 8}));
  Value* e = op(g, Op::Exp, {x}, "e");
  Value* n = op(g, Op::Neg, {e}, "n");
  g.setOutputs({{"e", e}, {"n", n}});
  codegen::KernelProgram p = fused(g);
  CHECK(p.kernels.size() == 2);
}

TEST_CASE("fusion: a transposed read is not fused into the producer", "[codegen][fusion][negative]") {
  Graph g("transposed");
  Value* x = g.addInput("x", f32({Dim::batch(), 4, 8}));
  Value* e = op(g, Op::Exp, {x}, "e");
  Value* t = op(g, Op::Transpose, {e}, "t", {{"perm", std::vector<int64_t>{0, 2, 1}}});
  Value* n = op(g, Op::Neg, {t}, "n");
  g.setOutputs({{"n", n}});
  codegen::KernelProgram p = fused(g);
  // exp stays alone (its reader indexes it transposed); transpose and neg share a loop nest.
  CHECK(kernelNames(p) == std::vector<std::string>{"exp_0", "fused_transpose_neg_1"});
}

TEST_CASE("fusion: an epilogue never reads a value computed after its template", "[codegen][fusion][negative]") {
  Graph g("late");
  Value* x = g.addInput("x", f32({Dim::batch(), 16}));
  Value* w = g.addInput("w", f32({Dim::batch(), 16}));
  Value* a = op(g, Op::Linear, {x, param(g, "wa", {16, 16})}, "a");
  Value* b = op(g, Op::Linear, {w, param(g, "wb", {16, 16})}, "b");
  Value* s = op(g, Op::Add, {a, b}, "s");
  g.setOutputs({{"s", s}});
  codegen::KernelProgram p = fused(g);
  // The add needs b, which is computed after a: it joins b's epilogue, not a's.
  CHECK(kernelNames(p) == std::vector<std::string>{"linear_0", "fused_linear_add_1"});
}

TEST_CASE("fusion: a pointwise producer becomes a reduction's prologue", "[codegen][fusion]") {
  Graph g("softmax");
  Value* x = g.addInput("x", f32({Dim::batch(), 8}));
  Value* m = op(g, Op::Mul, {x, param(g, "scale", {8})}, "m");
  Value* s = op(g, Op::Softmax, {m}, "s");
  Value* l = op(g, Op::Log, {s}, "l");
  g.setOutputs({{"y", l}});
  codegen::KernelProgram p = fused(g);
  REQUIRE(kernelNames(p) == std::vector<std::string>{"fused_mul_softmax_log_0"});
  CHECK(p.kernels[0].kind == KernelKind::Reduction);
  CHECK(!p.kernels[0].prologue.empty());
  CHECK(p.kernels[0].prologueResult >= 0);
}

TEST_CASE("fusion: a reduction is not given a prologue whose value is also used elsewhere", "[codegen][fusion][negative]") {
  Graph g("softmax_shared");
  Value* x = g.addInput("x", f32({Dim::batch(), 8}));
  Value* m = op(g, Op::Exp, {x}, "m");
  Value* s = op(g, Op::Softmax, {m}, "s");
  Value* t = op(g, Op::Add, {s, m}, "t");
  g.setOutputs({{"y", t}});
  codegen::KernelProgram p = fused(g);
  CHECK(kernelNames(p) == std::vector<std::string>{"exp_0", "fused_softmax_add_1"});
}

TEST_CASE("lowering: errors name the node for what codegen does not support", "[codegen][bad-input]") {
  Graph g("bad");
  Value* x = g.addInput("x", f32({4, Dim::batch()}));
  Value* e = op(g, Op::Exp, {x}, "e");
  g.setOutputs({{"y", e}});
  CHECK_THROWS_WITH(codegen::lowerGraph(g), Catch::Contains("'batch' in dimension 1"));
}
