// Graph passes on small hand-built graphs: each rewrite fires where it should and not where it
// must not, and the interpreter gives the same outputs before and after.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "policyc/driver/model_io.h"
#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/ir/verifier.h"
#include "policyc/passes/pass_manager.h"

using namespace policyc;
using namespace policyc::ir;
using passes::PassStats;

namespace {

using Ints = std::vector<int64_t>;
using Strings = std::vector<std::string>;
const Dim B = Dim::batch();

TensorType f32(Shape shape) { return {DType::F32, std::move(shape)}; }

// Reproducible values in [-1, 1] (or [lo, hi]).
Tensor random(Ints shape, uint64_t seed, double lo = -1, double hi = 1, DType dtype = DType::F32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.setAsDouble(i, dist(rng));
  return t;
}

Tensor filled(Ints shape, std::vector<double> values, DType dtype = DType::F32) {
  Tensor t(dtype, std::move(shape));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  for (size_t i = 0; i < values.size(); ++i) t.setAsDouble(static_cast<int64_t>(i), values[i]);
  return t;
}
Tensor scalar(double v, DType dtype = DType::F32) { return filled({}, {v}, dtype); }

// Graph building with provenance = the node's own name, as the importer gives it.
struct Builder {
  Graph g{"test"};
  uint64_t seed = 1;
  Value* input(const std::string& name, Shape shape, DType dtype = DType::F32) {
    return g.addInput(name, {dtype, std::move(shape)});
  }
  Value* param(const std::string& name, Tensor t) { return g.addParam(name, std::move(t), {name}); }
  Value* randomParam(const std::string& name, Ints shape, double lo = -1, double hi = 1) {
    return param(name, random(std::move(shape), seed++, lo, hi));
  }
  Node* node(Op op, std::vector<Value*> inputs, AttrMap attrs, const std::string& name) {
    return g.addOp(op, std::move(inputs), std::move(attrs), Strings{name}, {}, Strings{name});
  }
  Value* op(Op op, std::vector<Value*> inputs, AttrMap attrs, const std::string& name) {
    return node(op, std::move(inputs), std::move(attrs), name)->output();
  }
  Value* op(Op o, std::vector<Value*> inputs, const std::string& name) { return op(o, std::move(inputs), {}, name); }
  void outputs(std::vector<std::pair<std::string, Value*>> outs) { g.setOutputs(std::move(outs)); }
};

size_t count(const Graph& g, Op op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->isOp(op) ? 1 : 0;
  return n;
}

Node* only(const Graph& g, Op op) {
  Node* found = nullptr;
  for (const auto& node : g.nodes()) {
    if (node->isOp(op)) {
      REQUIRE(found == nullptr);
      found = node.get();
    }
  }
  REQUIRE(found != nullptr);
  return found;
}

void requireClose(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getAsDouble(i);
    double w = want.getAsDouble(i);
    if (std::isnan(g) && std::isnan(w)) continue;
    if (!isFloat(got.dtype())) {
      REQUIRE(got.getAsInt(i) == want.getAsInt(i));
    } else if (!(std::abs(g - w) <= 1e-5 * std::max(1.0, std::abs(w))) && g != w) {
      FAIL(what << " element " << i << ": " << g << " after, " << w << " before");
    }
  }
}

// Runs a pass, verifies the result and checks it computes what the graph computed before, on
// random inputs at batch 3 (or the given inputs).
PassStats runPass(Graph& g, passes::PassFn pass, std::vector<Tensor> inputs = {}) {
  REQUIRE_NOTHROW(verify(g));
  auto before = g.clone();
  if (inputs.empty()) inputs = driver::randomInputs(g, 3, 42);
  std::vector<Tensor> expected = interpret(*before, inputs);
  PassStats stats = pass(g);
  INFO("after the pass:\n" << printGraph(g).text);
  REQUIRE_NOTHROW(verify(g));
  std::vector<Tensor> got = interpret(g, inputs);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) requireClose(got[i], expected[i], "output " + std::to_string(i));
  return stats;
}

// Runs a pass that must leave the graph as it was (printed form identical).
// (Compared after dce on both sides: dead nodes of the test graph are not the pass's business.)
void requireNoChange(Graph& g, passes::PassFn pass) {
  auto reference = g.clone();
  passes::eliminateDeadCode(*reference);
  std::string before = printGraph(*reference).text;
  PassStats stats = runPass(g, pass);
  INFO(stats.str());
  CHECK_FALSE(stats.changed());
  passes::eliminateDeadCode(g);
  CHECK(printGraph(g).text == before);
}

const AttrMap kTransB{{"trans_b", int64_t{1}}};

}  // namespace

// ---------------------------------------------------------------- new ops

TEST_CASE("ops: linear, silu, gelu, hard_swish reference kernels and shapes", "[passes][ops]") {
  Tensor x = filled({2, 3}, {1, 2, 3, -1, 0, 2});
  Tensor w = filled({2, 3}, {1, 0, -1, 0.5, 0.5, 0.5});
  Tensor b = filled({2}, {10, 20});
  Tensor y = evaluateOp(Op::Linear, {x, w, b}, {}).at(0);
  CHECK(y.shape() == Ints{2, 2});
  CHECK(y.getAsDouble(0) == 1 - 3 + 10);
  CHECK(y.getAsDouble(1) == 3 + 20);
  CHECK(y.getAsDouble(2) == -1 - 2 + 10);
  CHECK(y.getAsDouble(3) == 0.5 + 20);
  CHECK(inferOutputTypes(Op::Linear, std::vector<TensorType>{f32({B, 4, 3}), f32({5, 3})}, {})[0] == f32({B, 4, 5}));
  CHECK_THROWS_AS(inferOutputTypes(Op::Linear, std::vector<TensorType>{f32({B, 4}), f32({5, 3})}, {}), Error);
  CHECK_THROWS_AS(inferOutputTypes(Op::Linear, std::vector<TensorType>{f32({B, 3}), f32({5, 3}), f32({3})}, {}),
                  Error);

  Tensor v = filled({4}, {-1, 0, 1.5, 4});
  auto act = [&](Op op) { return evaluateOp(op, {v}, {}).at(0); };
  for (int64_t i = 0; i < 4; ++i) {
    double a = v.getAsDouble(i);
    CHECK(act(Op::Silu).getAsDouble(i) == Approx(a / (1 + std::exp(-a))));
    CHECK(act(Op::Gelu).getAsDouble(i) == Approx(0.5 * a * (1 + std::erf(a / std::sqrt(2.0)))));
    CHECK(act(Op::HardSwish).getAsDouble(i) == Approx(a * std::max(0.0, std::min(1.0, a / 6 + 0.5))).margin(1e-7));
  }
  CHECK_THROWS_AS(inferOutputTypes(Op::Gelu, std::vector<TensorType>{{DType::I64, {Dim(2)}}}, {}), Error);
}

// ---------------------------------------------------------------- infer-shapes

TEST_CASE("infer-shapes: recomputes stale output types and counts them", "[passes][infer-shapes]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  // Declared with a stale type (as if x had been [batch,5]).
  Node* r = b.g.addOp(Op::Relu, {x}, {}, Strings{"r"}, {f32({B, 5})}, Strings{"r"});
  Node* t = b.g.addOp(Op::Tanh, {r->output()}, {}, Strings{"t"}, {f32({B, 5})}, Strings{"t"});
  b.outputs({{"t", t->output()}});
  CHECK_THROWS_AS(verify(b.g), Error);
  PassStats stats = passes::inferShapes(b.g);
  CHECK(stats.get("updated") == 2);
  CHECK(t->output()->type() == f32({B, 4}));
  CHECK_NOTHROW(verify(b.g));
  CHECK_FALSE(passes::inferShapes(b.g).changed());
}

// ---------------------------------------------------------------- canonicalize: linear

TEST_CASE("canonicalize: gemm becomes linear", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  SECTION("trans_b=1 keeps the weight") {
    Value* w = b.randomParam("w", {3, 4});
    Value* bias = b.randomParam("b", {3});
    b.outputs({{"y", b.op(Op::Gemm, {x, w, bias}, kTransB, "y")}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gemm->linear") == 1);
    Node* lin = only(b.g, Op::Linear);
    CHECK(lin->input(1) == w);
    CHECK(lin->input(2) == bias);
    CHECK(lin->name() == "y");
    CHECK(lin->provenance() == Strings{"y"});
  }
  SECTION("trans_b=0 with a param B transposes it; a [1,N] C becomes [N]") {
    Value* w = b.randomParam("w", {4, 3});
    Value* c = b.randomParam("c", {1, 3});
    b.outputs({{"y", b.op(Op::Gemm, {x, w, c}, {}, "y")}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gemm->linear") == 1);
    Node* lin = only(b.g, Op::Linear);
    CHECK(lin->input(1)->type() == f32({3, 4}));
    CHECK(lin->input(2)->type() == f32({3}));
    CHECK(lin->input(1)->producer()->provenance() == Strings{"w"});
  }
  SECTION("a scalar C broadcasts to a [N] bias; no C gives no bias") {
    Value* w = b.randomParam("w", {3, 4});
    Value* y1 = b.op(Op::Gemm, {x, w, b.param("c", scalar(0.25))}, kTransB, "y1");
    Value* y2 = b.op(Op::Gemm, {x, w}, kTransB, "y2");
    b.outputs({{"y1", y1}, {"y2", y2}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gemm->linear") == 2);
    CHECK(count(b.g, Op::Gemm) == 0);
  }
  SECTION("must not fire: alpha, beta, trans_a, non-param B with trans_b=0, a full [M,N] C") {
    Value* w = b.randomParam("w", {3, 4});
    Value* wt = b.randomParam("wt", {4, 3});
    Value* bias = b.randomParam("b", {3});
    Value* y1 = b.op(Op::Gemm, {x, w, bias}, {{"trans_b", int64_t{1}}, {"alpha", 2.0}}, "y1");
    Value* y2 = b.op(Op::Gemm, {x, w, bias}, {{"trans_b", int64_t{1}}, {"beta", 0.5}}, "y2");
    Value* sq = b.input("sq", {Dim(4), Dim(4)});
    Value* y3 = b.op(Op::Gemm, {sq, wt}, {{"trans_a", int64_t{1}}}, "y3");
    Value* dynamicW = b.op(Op::Relu, {wt}, "dynamic_w");
    Value* y4 = b.op(Op::Gemm, {x, dynamicW}, {}, "y4");
    Value* full = b.randomParam("full", {4, 3});
    Value* y5 = b.op(Op::Gemm, {sq, w, full}, kTransB, "y5");
    b.outputs({{"y1", y1}, {"y2", y2}, {"y3", y3}, {"y4", y4}, {"y5", y5}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gemm->linear") == 0);
    CHECK(count(b.g, Op::Gemm) == 5);
  }
}

TEST_CASE("canonicalize: matmul + add of a bias becomes one linear", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 4, 5});
  Value* w = b.randomParam("w", {5, 3});
  Value* bias = b.randomParam("bias", {3});
  Value* mm = b.op(Op::MatMul, {x, w}, "mm");
  SECTION("bias on either side") {
    bool biasFirst = GENERATE(false, true);
    Value* y = biasFirst ? b.op(Op::Add, {bias, mm}, "y") : b.op(Op::Add, {mm, bias}, "y");
    b.outputs({{"y", y}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("matmul->linear") == 1);
    CHECK(s.get("bias absorbed") == 1);
    Node* lin = only(b.g, Op::Linear);
    CHECK(lin->numInputs() == 3);
    CHECK(lin->input(1)->type() == f32({3, 5}));
    CHECK(lin->provenance() == Strings{"mm", "y"});
    CHECK(count(b.g, Op::Add) == 0);
  }
  SECTION("must not absorb: the matmul result has another user") {
    Value* y = b.op(Op::Add, {mm, bias}, "y");
    b.outputs({{"y", y}, {"raw", mm}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("matmul->linear") == 1);
    CHECK(s.get("bias absorbed") == 0);
    CHECK(only(b.g, Op::Linear)->numInputs() == 2);
    CHECK(count(b.g, Op::Add) == 1);
  }
  SECTION("must not absorb: the added param is not along N") {
    Value* y = b.op(Op::Add, {mm, b.randomParam("wide", {4, 3})}, "y");
    b.outputs({{"y", y}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("bias absorbed") == 0);
    CHECK(count(b.g, Op::Add) == 1);
  }
  SECTION("must not fire: the weight is not a param") {
    Value* y = b.input("other", {B, 4, 5});
    Value* mm2 = b.op(Op::MatMul, {x, b.op(Op::Transpose, {y}, {{"perm", Ints{0, 2, 1}}}, "yt")}, "mm2");
    b.outputs({{"y", b.op(Op::Add, {mm, bias}, "y")}, {"mm2", mm2}});
    runPass(b.g, passes::canonicalize);
    CHECK(count(b.g, Op::MatMul) == 1);
    CHECK(count(b.g, Op::Linear) == 1);
  }
}

// ---------------------------------------------------------------- canonicalize: no-ops and constants

TEST_CASE("canonicalize: identity and dropout disappear", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  Value* i = b.op(Op::Identity, {x}, "i");
  Value* d = b.op(Op::Dropout, {b.op(Op::Relu, {i}, "r")}, "d");
  b.outputs({{"d", d}, {"i", i}});
  PassStats s = runPass(b.g, passes::canonicalize);
  CHECK(s.get("identities removed") == 2);
  CHECK(b.g.numOpNodes() == 1);
  CHECK(b.g.outputs()[1].second == x);
}

TEST_CASE("canonicalize: div by a constant is mul by its reciprocal, sub of a constant add of its negation",
          "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  SECTION("fires for float params on the right") {
    Value* q = b.op(Op::Div, {x, b.param("c", filled({4}, {2, 4, -8, 0.5}))}, "q");
    Value* s = b.op(Op::Sub, {q, b.param("k", scalar(3))}, "s");
    b.outputs({{"s", s}});
    PassStats stats = runPass(b.g, passes::canonicalize);
    CHECK(stats.get("div->mul") == 1);
    CHECK(stats.get("sub->add") == 1);
    Node* mul = only(b.g, Op::Mul);
    CHECK(mul->input(1)->producer()->paramData().getAsDouble(2) == -0.125);
    CHECK(only(b.g, Op::Add)->input(1)->producer()->paramData().getAsDouble(0) == -3);
  }
  SECTION("must not fire: divisor not a param, constant on the left, integer dtype, extreme divisors") {
    Value* y = b.input("y", {B, 4});
    Value* q = b.op(Op::Div, {x, y}, "q");
    Value* s = b.op(Op::Sub, {b.param("k", scalar(3)), q}, "s");
    Value* n = b.input("n", {B, 4}, DType::I64);
    Value* qi = b.op(Op::Div, {n, b.param("ki", scalar(3, DType::I64))}, "qi");
    Value* si = b.op(Op::Sub, {qi, b.param("kj", scalar(3, DType::I64))}, "si");
    // 1/c would not be a normal f32: x / c and x * (1/c) differ by more than rounding.
    Value* tiny = b.op(Op::Div, {x, b.param("tiny", filled({4}, {1e-39, 1, 1, 1}))}, "tiny_q");
    Value* huge = b.op(Op::Div, {x, b.param("huge", filled({4}, {1, 1e38, 1, 1}))}, "huge_q");
    b.outputs({{"s", s}, {"si", si}, {"tiny", tiny}, {"huge", huge}});
    requireNoChange(b.g, passes::canonicalize);
  }
}

TEST_CASE("canonicalize: chains of reshapes collapse into one", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 2, 3, 1});
  SECTION("flatten -> unsqueeze -> reshape becomes one reshape") {
    Value* f = b.op(Op::Flatten, {x}, "f");                                  // [batch,6]
    Value* u = b.op(Op::Unsqueeze, {f}, {{"axes", Ints{1}}}, "u");           // [batch,1,6]
    Value* r = b.op(Op::Reshape, {u}, {{"shape", Ints{0, 3, 2}}}, "r");      // [batch,3,2]
    b.outputs({{"r", b.op(Op::Relu, {r}, "out")}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("reshapes collapsed") == 2);
    Node* reshape = only(b.g, Op::Reshape);
    CHECK(reshape->input(0) == x);
    CHECK(reshape->output()->type() == f32({B, 3, 2}));
    CHECK(reshape->provenance() == Strings{"f", "u", "r"});
  }
  SECTION("a chain back to the same shape disappears; so does a no-op reshape") {
    Value* sq = b.op(Op::Squeeze, {x}, {{"axes", Ints{3}}}, "sq");
    Value* un = b.op(Op::Unsqueeze, {sq}, {{"axes", Ints{3}}}, "un");
    Value* same = b.op(Op::Reshape, {b.op(Op::Relu, {un}, "relu")}, {{"shape", Ints{0, 2, 3, 1}}}, "same");
    b.outputs({{"y", same}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("reshapes collapsed") == 1);
    CHECK(s.get("no-op reshapes removed") == 2);
    CHECK(b.g.numOpNodes() == 1);
  }
  SECTION("must not fire: the intermediate shape has another user") {
    Value* f = b.op(Op::Flatten, {x}, "f");
    Value* r = b.op(Op::Reshape, {f}, {{"shape", Ints{0, 3, 2}}}, "r");
    b.outputs({{"r", r}, {"f", f}});
    requireNoChange(b.g, passes::canonicalize);
  }
}

TEST_CASE("canonicalize: products by a param of ones go", "[passes][canonicalize]") {
  Builder b;
  auto filled = [](std::vector<int64_t> shape, float v) {
    ir::Tensor t(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
    return t;
  };
  SECTION("x * 1, 1 * x and x / 1 (a div by 1 becomes a mul by 1 first)") {
    Value* x = b.input("x", {B, 4});
    Value* a = b.op(Op::Mul, {x, b.param("one", filled({1}, 1.0f))}, "scale");
    Value* c = b.op(Op::Mul, {b.param("ones", filled({4}, 1.0f)), b.op(Op::Tanh, {a}, "t")}, "scale2");
    Value* d = b.op(Op::Div, {c, b.param("den", filled({}, 1.0f))}, "div");
    b.outputs({{"y", d}});
    PassStats st = runPass(b.g, passes::canonicalize);
    CHECK(st.get("unit products removed") == 3);
    CHECK(count(b.g, Op::Mul) == 0);
    CHECK(count(b.g, Op::Div) == 0);
    CHECK(only(b.g, Op::Tanh)->input(0) == b.g.findValue("x"));
  }
  SECTION("must not fire: a factor near 1, a product that broadcasts x") {
    Value* x = b.input("x", {B, 4});
    Value* near = b.op(Op::Mul, {x, b.param("near_one", filled({1}, 1.0000001f))}, "near");
    Value* wide = b.op(Op::Mul, {x, b.param("wide_ones", filled({3, 1, 4}, 1.0f))}, "wide");  // [3, B, 4]
    b.outputs({{"near", near}, {"wide", wide}});
    PassStats st = runPass(b.g, passes::canonicalize);
    CHECK(st.get("unit products removed") == 0);
    CHECK(count(b.g, Op::Mul) == 2);
  }
}

TEST_CASE("canonicalize: whole slices go, unit gathers become squeezes", "[passes][canonicalize]") {
  Builder b;
  SECTION("a one-step sequence sliced and gathered back to [batch, 4]") {
    Value* x = b.input("x", {B, 4});
    Value* seq = b.op(Op::Unsqueeze, {x}, {{"axes", Ints{0}}}, "seq");                      // [1, B, 4]
    Value* s = b.op(Op::Slice, {seq}, {{"starts", Ints{0}}, {"ends", Ints{1}}, {"axes", Ints{0}}}, "step0");
    Value* g = b.op(Op::Gather, {s, b.param("zero", scalar(0, DType::I64))}, {{"axis", int64_t{0}}}, "first");
    b.outputs({{"y", b.op(Op::Tanh, {g}, "t")}});
    PassStats st = runPass(b.g, passes::canonicalize);
    CHECK(st.get("whole slices removed") == 1);
    CHECK(st.get("unit gathers->squeeze") == 1);
    CHECK(count(b.g, Op::Slice) == 0);
    CHECK(count(b.g, Op::Gather) == 0);
    CHECK(only(b.g, Op::Tanh)->input(0) == b.g.findValue("x"));  // unsqueeze + squeeze collapsed away
  }
  SECTION("a batch-first one-step sequence: the transpose moving the unit axis is a reshape") {
    Value* x = b.input("x", {B, 4});
    Value* seq = b.op(Op::Unsqueeze, {x}, {{"axes", Ints{1}}}, "seq");                        // [B, 1, 4]
    Value* t = b.op(Op::Transpose, {seq}, {{"perm", Ints{1, 0, 2}}}, "time_major");           // [1, B, 4]
    Value* s = b.op(Op::Squeeze, {t}, {{"axes", Ints{0}}}, "step");
    b.outputs({{"y", b.op(Op::Relu, {s}, "r")}});
    PassStats st = runPass(b.g, passes::canonicalize);
    CHECK(st.get("unit transposes->reshape") == 1);
    CHECK(only(b.g, Op::Relu)->input(0) == b.g.findValue("x"));
  }
  SECTION("must not fire: a transpose that swaps two dims of other sizes") {
    Value* x = b.input("x", {B, 1, 3, 4});
    b.outputs({{"y", b.op(Op::Transpose, {x}, {{"perm", Ints{0, 1, 3, 2}}}, "swap")}});
    requireNoChange(b.g, passes::canonicalize);
  }
  SECTION("must not fire: a slice that drops elements or reverses, a gather of index 1 or along a wider axis") {
    Value* x = b.input("x", {B, 4});
    Value* part = b.op(Op::Slice, {x}, {{"starts", Ints{1}}, {"ends", Ints{4}}, {"axes", Ints{1}}}, "part");
    Value* rev = b.op(Op::Slice, {x}, {{"starts", Ints{3}}, {"ends", Ints{-5}}, {"axes", Ints{1}}, {"steps", Ints{-1}}}, "rev");
    Value* pair = b.input("pair", {B, 2, 3});
    Value* second = b.op(Op::Gather, {pair, b.param("one", scalar(1, DType::I64))}, {{"axis", int64_t{1}}}, "second");
    Value* unit = b.op(Op::Unsqueeze, {x}, {{"axes", Ints{1}}}, "unit");  // [B, 1, 4]
    Value* idx = b.op(Op::Gather, {unit, b.param("two", scalar(0, DType::I64))}, {{"axis", int64_t{2}}}, "col0");
    b.outputs({{"part", part}, {"rev", rev}, {"second", second}, {"col0", idx}});
    PassStats st = runPass(b.g, passes::canonicalize);
    CHECK(st.get("whole slices removed") == 0);
    CHECK(st.get("unit gathers->squeeze") == 0);
  }
}

TEST_CASE("canonicalize: a 1-D convolution becomes a 2-D one over a unit axis", "[passes][canonicalize]") {
  Builder b;
  SECTION("strides, pads, dilation and a bias carried over; back-to-back layers meet no reshape between them") {
    Value* x = b.input("x", {B, 3, 20});
    AttrMap a1{{"kernel_shape", Ints{4}}, {"strides", Ints{2}}, {"pads", Ints{1, 2}}, {"dilations", Ints{2}}};
    Value* c1 = b.op(Op::Conv, {x, b.randomParam("w1", {5, 3, 4}), b.randomParam("b1", {5})}, a1, "conv1");
    Value* c2 = b.op(Op::Conv, {c1, b.randomParam("w2", {2, 5, 3})}, {}, "conv2");  // no attributes: ONNX defaults
    b.outputs({{"y", c2}});
    PassStats st = runPass(b.g, passes::canonicalize);
    CHECK(st.get("conv1d->conv2d") == 2);
    CHECK(st.get("reshapes collapsed") + st.get("no-op reshapes removed") >= 1);
    for (const auto& n : b.g.nodes()) {
      if (!n->isOp(Op::Conv)) continue;
      INFO(n->name());
      CHECK(n->input(0)->type().rank() == 4);
      CHECK(n->input(1)->type().rank() == 4);
      CHECK(n->attrInts("kernel_shape").size() == 2);
    }
    Node *conv1 = nullptr, *conv2 = nullptr;
    for (const auto& n : b.g.nodes()) {
      if (n->isOp(Op::Conv)) (n->provenance() == Strings{"conv1"} ? conv1 : conv2) = n.get();
    }
    REQUIRE(conv1);
    REQUIRE(conv2);
    CHECK(conv1->attrInts("strides") == Ints{1, 2});
    CHECK(conv1->attrInts("pads") == Ints{0, 1, 0, 2});
    CHECK(conv1->attrInts("dilations") == Ints{1, 2});
    CHECK(conv2->provenance() == Strings{"conv2"});
    CHECK(conv2->input(0) == conv1->output());  // the squeeze and unsqueeze between them cancelled
  }
  SECTION("must not fire: grouped or 2-D convolutions, a weight computed at run time") {
    Value* x = b.input("x", {B, 4, 10});
    Value* grouped = b.op(Op::Conv, {x, b.randomParam("wg", {4, 2, 3})}, {{"group", int64_t{2}}}, "grouped");
    Value* w = b.input("w", {2, 4, 3});
    Value* dynamic = b.op(Op::Conv, {x, w}, {}, "dynamic");
    Value* img = b.input("img", {B, 3, 6, 6});
    Value* conv2d = b.op(Op::Conv, {img, b.randomParam("w2", {4, 3, 3, 3})}, AttrMap{{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}, "conv2d");
    b.outputs({{"grouped", grouped}, {"dynamic", dynamic}, {"conv2d", conv2d}});
    requireNoChange(b.g, passes::canonicalize);
  }
}

TEST_CASE("canonicalize: clip(0, inf) is relu, other clips stay", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  Value* c = b.op(Op::Clip, {x}, {{"min", 0.0}}, "c");
  Value* c6 = b.op(Op::Clip, {x}, {{"min", 0.0}, {"max", 6.0}}, "c6");
  b.outputs({{"c", c}, {"c6", c6}});
  PassStats s = runPass(b.g, passes::canonicalize);
  CHECK(s.get("clip->relu") == 1);
  CHECK(count(b.g, Op::Relu) == 1);
  CHECK(count(b.g, Op::Clip) == 1);
}

// ---------------------------------------------------------------- canonicalize: activations

TEST_CASE("canonicalize: silu and hard_swish", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  SECTION("x * sigmoid(x) in either order") {
    Value* s1 = b.op(Op::Mul, {x, b.op(Op::Sigmoid, {x}, "sig1")}, "m1");
    Value* s2 = b.op(Op::Mul, {b.op(Op::Sigmoid, {x}, "sig2"), x}, "m2");
    b.outputs({{"a", s1}, {"b", s2}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("silu") == 2);
    CHECK(count(b.g, Op::Silu) == 2);
    CHECK(count(b.g, Op::Sigmoid) == 0);
    CHECK(b.g.findValue("m1")->producer()->provenance() == Strings{"sig1", "m1"});
  }
  SECTION("x * hard_sigmoid(x) with alpha 1/6") {
    Value* h = b.op(Op::HardSigmoid, {x}, {{"alpha", 0.1666666716337204}}, "hs");
    b.outputs({{"y", b.op(Op::Mul, {h, x}, "y")}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("hard_swish") == 1);
    CHECK(only(b.g, Op::HardSwish)->input(0) == x);
  }
  SECTION("must not fire: another user of the gate, another operand, other hard_sigmoid constants") {
    Value* y = b.input("y", {B, 4});
    Value* sig = b.op(Op::Sigmoid, {x}, "sig");
    Value* m1 = b.op(Op::Mul, {x, sig}, "m1");                                       // sig also an output
    Value* m2 = b.op(Op::Mul, {y, b.op(Op::Sigmoid, {x}, "sig2")}, "m2");            // y * sigmoid(x)
    Value* h = b.op(Op::HardSigmoid, {x}, "hs");                                     // alpha 0.2
    Value* m3 = b.op(Op::Mul, {x, h}, "m3");
    Value* m4 = b.op(Op::Mul, {y, b.op(Op::HardSigmoid, {x}, {{"alpha", 1.0 / 6}}, "hs2")}, "m4");
    b.outputs({{"m1", m1}, {"sig", sig}, {"m2", m2}, {"m3", m3}, {"m4", m4}});
    requireNoChange(b.g, passes::canonicalize);
  }
}

TEST_CASE("canonicalize: gelu in the forms exporters write", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 8});
  auto erfTerm = [&](bool useMul, bool oneFirst) {
    Value* scaled = useMul ? b.op(Op::Mul, {b.param("inv_sqrt2", scalar(0.70710677)), x}, "scaled")
                           : b.op(Op::Div, {x, b.param("sqrt2", scalar(1.4142135))}, "scaled");
    Value* e = b.op(Op::Erf, {scaled}, "erf");
    Value* one = b.param("one", scalar(1));
    return oneFirst ? b.op(Op::Add, {one, e}, "onep") : b.op(Op::Add, {e, one}, "onep");
  };
  SECTION("torch: (x * (erf(x / sqrt2) + 1)) * 0.5") {
    Value* t = erfTerm(false, false);
    Value* y = b.op(Op::Mul, {b.op(Op::Mul, {x, t}, "m"), b.param("half", scalar(0.5))}, "y");
    b.outputs({{"y", y}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gelu") == 1);
    CHECK(b.g.numOpNodes() == 1);
    Node* g = only(b.g, Op::Gelu);
    CHECK(g->input(0) == x);
    CHECK(g->provenance() == Strings{"scaled", "erf", "onep", "m", "y"});
  }
  SECTION("(x * 0.5) * (1 + erf(x * 0.70710677)), and 0.5 * (...) * x") {
    bool halfFirst = GENERATE(false, true);
    Value* t = erfTerm(true, true);
    Value* half = b.param("half", scalar(0.5));
    Value* y = halfFirst ? b.op(Op::Mul, {x, b.op(Op::Mul, {half, t}, "m")}, "y")
                         : b.op(Op::Mul, {b.op(Op::Mul, {x, half}, "m"), t}, "y");
    b.outputs({{"y", y}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gelu") == 1);
    CHECK(b.g.numOpNodes() == 1);
  }
  SECTION("must not fire: erf used elsewhere, a wrong constant, erf of another value") {
    int variant = GENERATE(0, 1, 2);
    Value* scaled = b.op(Op::Div, {x, b.param("sqrt2", scalar(variant == 1 ? 1.5 : 1.4142135))}, "scaled");
    if (variant == 2) scaled = b.op(Op::Div, {b.input("z", {B, 8}), b.param("sqrt2b", scalar(1.4142135))}, "other");
    Value* e = b.op(Op::Erf, {scaled}, "erf");
    Value* t = b.op(Op::Add, {e, b.param("one", scalar(1))}, "onep");
    Value* y = b.op(Op::Mul, {b.op(Op::Mul, {x, t}, "m"), b.param("half", scalar(0.5))}, "y");
    std::vector<std::pair<std::string, Value*>> outs{{"y", y}};
    if (variant == 0) outs.emplace_back("e", e);
    b.outputs(outs);
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("gelu") == 0);
    CHECK(count(b.g, Op::Erf) == 1);
  }
}

// ---------------------------------------------------------------- canonicalize: layer norm

namespace {

// (x - mean) / sqrt(mean((x - mean)^2) + eps) over `axis`; returns the div's result.
Value* decomposedLayerNorm(Builder& b, Value* x, int64_t axis, double eps = 1e-5) {
  AttrMap axes{{"axes", Ints{axis}}};
  Value* mean = b.op(Op::ReduceMean, {x}, axes, "mean");
  Value* d = b.op(Op::Sub, {x, mean}, "d");
  Value* p = b.op(Op::Pow, {d, b.param("two", scalar(2))}, "p");
  Value* var = b.op(Op::ReduceMean, {p}, axes, "var");
  Value* e = b.op(Op::Add, {var, b.param("eps", scalar(eps))}, "e");
  Value* s = b.op(Op::Sqrt, {e}, "s");
  return b.op(Op::Div, {d, s}, "n");
}

}  // namespace

TEST_CASE("canonicalize: decomposed layer norm over the last axis", "[passes][canonicalize]") {
  Builder b;
  Value* x = b.input("x", {B, 3, 16});
  SECTION("with weight and bias") {
    Value* n = decomposedLayerNorm(b, x, -1);
    Value* m = b.op(Op::Mul, {n, b.randomParam("gamma", {16}, 0.5, 1.5)}, "m");
    Value* a = b.op(Op::Add, {b.randomParam("beta", {16}), m}, "a");
    b.outputs({{"y", a}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("layer_norm") == 1);
    CHECK(b.g.numOpNodes() == 1);
    Node* ln = only(b.g, Op::LayerNorm);
    CHECK(ln->numInputs() == 3);
    CHECK(ln->attrFloat("epsilon") == Approx(1e-5));
    CHECK(ln->provenance() == Strings{"mean", "d", "p", "var", "e", "s", "n", "m", "a"});
  }
  SECTION("without affine, axis written as rank-1") {
    b.outputs({{"y", decomposedLayerNorm(b, x, 2)}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("layer_norm") == 1);
    Node* ln = only(b.g, Op::LayerNorm);
    CHECK(ln->numInputs() == 2);
    CHECK(ln->input(1)->producer()->paramData().getAsDouble(5) == 1.0);
  }
  SECTION("must not fire: not the last axis") {
    b.outputs({{"y", decomposedLayerNorm(b, x, 1)}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("layer_norm") == 0);
  }
  SECTION("must not fire: the centered value has another user") {
    Value* n = decomposedLayerNorm(b, x, -1);
    b.outputs({{"y", n}, {"d", b.g.findValue("d")}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("layer_norm") == 0);
  }
  SECTION("the affine tail is not absorbed when the scale is not along the last axis") {
    Value* n = decomposedLayerNorm(b, x, -1);
    b.outputs({{"y", b.op(Op::Mul, {n, b.randomParam("gamma", {3, 1})}, "m")}});
    PassStats s = runPass(b.g, passes::canonicalize);
    CHECK(s.get("layer_norm") == 1);
    CHECK(count(b.g, Op::Mul) == 1);
  }
}

// ---------------------------------------------------------------- fold-constants

TEST_CASE("fold-constants: constant sub-graphs become params", "[passes][fold-constants]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  SECTION("a chain folds in one run and keeps names and provenance") {
    Value* c = b.op(Op::Add, {b.randomParam("p", {4}), b.randomParam("q", {4})}, "c");
    Value* e = b.op(Op::Exp, {c}, "e");
    Value* parts = b.op(Op::Concat, {e, e}, {{"axis", int64_t{0}}}, "cat");
    Node* split = b.g.addOp(Op::Split, {parts}, {{"axis", int64_t{0}}}, Strings{"s0", "s1"}, {}, Strings{"split"});
    Value* y = b.op(Op::Mul, {x, split->output(1)}, "y");
    b.outputs({{"y", y}});
    PassStats s = runPass(b.g, passes::foldConstants);
    CHECK(s.get("folded") == 4);
    CHECK(b.g.numOpNodes() == 1);
    Node* folded = b.g.findValue("s1")->producer();
    CHECK(folded->kind() == NodeKind::Param);
    CHECK(folded->provenance() == Strings{"split"});
  }
  SECTION("must not fire: an operand that is not a param; an op that fails (integer division by zero)") {
    Value* y = b.op(Op::Add, {x, b.randomParam("p", {4})}, "y");
    Value* zero = b.param("zero", filled({2}, {1, 0}, DType::I64));
    Value* q = b.op(Op::Div, {b.param("n", filled({2}, {4, 4}, DType::I64)), zero}, "q");
    b.outputs({{"y", y}, {"q", q}});
    PassStats s = passes::foldConstants(b.g);
    CHECK_FALSE(s.changed());
    CHECK(b.g.numOpNodes() == 2);
  }
}

// ---------------------------------------------------------------- fold-batch-norm

namespace {

Value* batchNorm(Builder& b, Value* y, int64_t channels, const std::string& name) {
  return b.op(Op::BatchNorm,
              {y, b.randomParam(name + ".scale", {channels}, 0.5, 1.5), b.randomParam(name + ".bias", {channels}),
               b.randomParam(name + ".mean", {channels}), b.randomParam(name + ".var", {channels}, 0.1, 2)},
              {{"epsilon", 1e-3}}, name);
}

const AttrMap kConv3x3{{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}};

}  // namespace

TEST_CASE("fold-batch-norm: batch_norm after conv or linear", "[passes][fold-batch-norm]") {
  Builder b;
  SECTION("conv with bias") {
    Value* x = b.input("x", {B, 3, 6, 6});
    Value* c = b.op(Op::Conv, {x, b.randomParam("w", {4, 3, 3, 3}), b.randomParam("cb", {4})}, kConv3x3, "conv");
    b.outputs({{"y", b.op(Op::Relu, {batchNorm(b, c, 4, "bn")}, "relu")}});
    PassStats s = runPass(b.g, passes::foldBatchNorm);
    CHECK(s.get("folded") == 1);
    CHECK(count(b.g, Op::BatchNorm) == 0);
    Node* conv = only(b.g, Op::Conv);
    CHECK(conv->name() == "conv");
    CHECK(conv->provenance() == Strings{"conv", "bn"});
    CHECK(conv->input(1)->producer()->provenance() ==
          Strings{"w", "bn.scale", "bn.bias", "bn.mean", "bn.var"});
  }
  SECTION("grouped conv without bias") {
    Value* x = b.input("x", {B, 4, 5, 5});
    AttrMap attrs = kConv3x3;
    attrs["group"] = int64_t{2};
    Value* c = b.op(Op::Conv, {x, b.randomParam("w", {6, 2, 3, 3})}, attrs, "conv");
    b.outputs({{"y", batchNorm(b, c, 6, "bn")}});
    PassStats s = runPass(b.g, passes::foldBatchNorm);
    CHECK(s.get("folded") == 1);
    CHECK(only(b.g, Op::Conv)->numInputs() == 3);
  }
  SECTION("linear on [batch, N]") {
    Value* x = b.input("x", {B, 5});
    Value* l = b.op(Op::Linear, {x, b.randomParam("w", {7, 5}), b.randomParam("lb", {7})}, "lin");
    b.outputs({{"y", batchNorm(b, l, 7, "bn")}});
    PassStats s = runPass(b.g, passes::foldBatchNorm);
    CHECK(s.get("folded") == 1);
    CHECK(b.g.numOpNodes() == 1);
  }
  SECTION("must not fire: the conv result has another user; non-param weights; linear on [batch, T, N]") {
    Value* x = b.input("x", {B, 3, 6, 6});
    Value* c = b.op(Op::Conv, {x, b.randomParam("w", {4, 3, 3, 3})}, kConv3x3, "conv");
    Value* bn = batchNorm(b, c, 4, "bn");
    Value* w2 = b.op(Op::Relu, {b.randomParam("w2", {4, 3, 3, 3})}, "dyn_w");
    Value* c2 = b.op(Op::Conv, {x, w2}, kConv3x3, "conv2");
    Value* bn2 = batchNorm(b, c2, 4, "bn2");
    Value* t = b.input("t", {B, 4, 5});
    Value* l = b.op(Op::Linear, {t, b.randomParam("lw", {4, 5})}, "lin");
    Value* bn3 = batchNorm(b, l, 4, "bn3");  // normalises axis 1 (T), not the output axis
    b.outputs({{"bn", bn}, {"c", c}, {"bn2", bn2}, {"bn3", bn3}});
    requireNoChange(b.g, passes::foldBatchNorm);
  }
}

TEST_CASE("fold-batch-norm: per-channel mul and add after a layer", "[passes][fold-batch-norm]") {
  Builder b;
  SECTION("conv: [C,1,1] scale then [1,C,1,1] shift") {
    Value* x = b.input("x", {B, 3, 6, 6});
    Value* c = b.op(Op::Conv, {x, b.randomParam("w", {4, 3, 3, 3})}, kConv3x3, "conv");
    Value* m = b.op(Op::Mul, {b.randomParam("s", {4, 1, 1}), c}, "m");
    Value* a = b.op(Op::Add, {m, b.randomParam("t", {1, 4, 1, 1})}, "a");
    b.outputs({{"y", a}});
    PassStats s = runPass(b.g, passes::foldBatchNorm);
    CHECK(s.get("scales folded") == 1);
    CHECK(s.get("shifts folded") == 1);
    CHECK(b.g.numOpNodes() == 1);
    CHECK(only(b.g, Op::Conv)->provenance() == Strings{"conv", "m", "a"});
  }
  SECTION("linear: [N] scale and a scalar shift") {
    Value* x = b.input("x", {B, 2, 5});
    Value* l = b.op(Op::Linear, {x, b.randomParam("w", {3, 5})}, "lin");
    Value* m = b.op(Op::Mul, {l, b.randomParam("s", {3})}, "m");
    b.outputs({{"y", b.op(Op::Add, {m, b.param("t", scalar(0.5))}, "a")}});
    PassStats s = runPass(b.g, passes::foldBatchNorm);
    CHECK(s.get("scales folded") == 1);
    CHECK(s.get("shifts folded") == 1);
    CHECK(b.g.numOpNodes() == 1);
  }
  SECTION("must not fire: a spatial (not per-channel) scale, a non-param scale, a shared result") {
    Value* x = b.input("x", {B, 3, 6, 6});
    Value* c = b.op(Op::Conv, {x, b.randomParam("w", {4, 3, 3, 3})}, kConv3x3, "conv");
    Value* m = b.op(Op::Mul, {c, b.randomParam("spatial", {1, 1, 6, 6})}, "m");
    Value* c2 = b.op(Op::Conv, {x, b.randomParam("w2", {4, 3, 3, 3})}, kConv3x3, "conv2");
    Value* m2 = b.op(Op::Mul, {c2, b.input("dyn", {B, 4, 6, 6})}, "m2");
    Value* c3 = b.op(Op::Conv, {x, b.randomParam("w3", {4, 3, 3, 3})}, kConv3x3, "conv3");
    Value* m3 = b.op(Op::Mul, {c3, b.randomParam("s3", {4, 1, 1})}, "m3");
    Value* l = b.op(Op::Linear, {b.input("v", {B, 5}), b.randomParam("lw", {3, 5})}, "lin");
    Value* m4 = b.op(Op::Add, {l, b.randomParam("rows", {1, 1, 3})}, "m4");  // adds a dim: not per channel
    b.outputs({{"m", m}, {"m2", m2}, {"m3", m3}, {"c3", c3}, {"m4", m4}});
    requireNoChange(b.g, passes::foldBatchNorm);
  }
}

// ---------------------------------------------------------------- fuse-horizontal

TEST_CASE("fuse-horizontal: sibling linears become one wider linear and a split", "[passes][fuse-horizontal]") {
  Builder b;
  Value* x = b.input("x", {B, 6});
  SECTION("with and without bias") {
    Value* y1 = b.op(Op::Linear, {x, b.randomParam("w1", {4, 6}), b.randomParam("b1", {4})}, "y1");
    Value* y2 = b.op(Op::Linear, {x, b.randomParam("w2", {3, 6})}, "y2");
    Value* y3 = b.op(Op::Linear, {x, b.randomParam("w3", {2, 6}), b.randomParam("b3", {2})}, "y3");
    b.outputs({{"a", b.op(Op::Tanh, {y1}, "t1")}, {"b", b.op(Op::Abs, {y2}, "a2")}, {"c", b.op(Op::Relu, {y3}, "r3")}});
    PassStats s = runPass(b.g, passes::fuseHorizontal);
    CHECK(s.get("linear groups fused") == 1);
    CHECK(s.get("layers merged") == 3);
    Node* lin = only(b.g, Op::Linear);
    CHECK(lin->input(1)->type() == f32({9, 6}));
    CHECK(lin->input(2)->type() == f32({9}));
    CHECK(lin->provenance() == Strings{"y1", "y2", "y3"});
    CHECK(lin->input(1)->producer()->provenance() == Strings{"w1", "w2", "w3"});
    const Tensor& bias = lin->input(2)->producer()->paramData();
    CHECK(bias.getAsDouble(4) == 0.0);  // y2 had none
    Node* split = only(b.g, Op::Split);
    CHECK(split->attrInts("split") == Ints{4, 3, 2});
    CHECK(split->output(0)->name() == "y1");
    CHECK(split->output(2)->name() == "y3");
  }
  SECTION("must not fire: one sibling, different inputs, a non-param weight, a dead sibling") {
    Value* z = b.input("z", {B, 6});
    Value* y1 = b.op(Op::Linear, {x, b.randomParam("w1", {4, 6})}, "y1");
    b.op(Op::Linear, {x, b.randomParam("w_dead", {4, 6})}, "dead");
    Value* y2 = b.op(Op::Linear, {z, b.randomParam("w2", {4, 6})}, "y2");
    Value* dyn = b.op(Op::Relu, {b.randomParam("w3", {4, 6})}, "dyn");
    Value* y3 = b.op(Op::Linear, {z, dyn}, "y3");
    b.outputs({{"a", b.op(Op::Abs, {y1}, "a1")}, {"b", b.op(Op::Abs, {y2}, "a2")}, {"c", b.op(Op::Abs, {y3}, "a3")}});
    requireNoChange(b.g, passes::fuseHorizontal);
  }
  SECTION("must not fire: siblings whose results the graph returns (the split would be copied out)") {
    Value* y1 = b.op(Op::Linear, {x, b.randomParam("w1", {6, 6})}, "logits");
    Value* y2 = b.op(Op::Linear, {x, b.randomParam("w2", {1, 6})}, "vf");
    b.outputs({{"logits", y1}, {"vf", y2}});
    requireNoChange(b.g, passes::fuseHorizontal);
  }
}

TEST_CASE("fuse-horizontal: the same elementwise op on every split result moves above the split",
          "[passes][fuse-horizontal]") {
  Builder b;
  Value* x = b.input("x", {B, 6});
  Value* h1 = b.op(Op::Linear, {x, b.randomParam("w1", {4, 6}), b.randomParam("b1", {4})}, "h1");
  Value* h2 = b.op(Op::Linear, {x, b.randomParam("w2", {4, 6}), b.randomParam("b2", {4})}, "h2");
  SECTION("PPO's two tanh become one over the fused layer") {
    Value* t1 = b.op(Op::Tanh, {h1}, "t1");
    Value* t2 = b.op(Op::Tanh, {h2}, "t2");
    b.outputs({{"a", b.op(Op::Abs, {t1}, "a1")}, {"b", b.op(Op::Neg, {t2}, "n2")}});
    PassStats s = runPass(b.g, passes::fuseHorizontal);
    CHECK(s.get("elementwise ops moved above split") == 2);
    Node* tanh = only(b.g, Op::Tanh);
    CHECK(tanh->input(0)->producer()->isOp(Op::Linear));
    CHECK(tanh->output()->type() == f32({B, 8}));
    CHECK(tanh->provenance() == Strings{"t1", "t2"});
    Node* split = only(b.g, Op::Split);
    CHECK(split->input(0) == tanh->output());
    CHECK(split->output(0)->name() == "t1");
  }
  SECTION("must not fire: different ops, different attributes, or a result with another reader") {
    Value* l1 = b.op(Op::LeakyRelu, {h1}, {{"alpha", 0.1}}, "l1");
    Value* l2 = b.op(Op::LeakyRelu, {h2}, {{"alpha", 0.2}}, "l2");
    b.outputs({{"a", b.op(Op::Abs, {l1}, "a1")}, {"b", b.op(Op::Abs, {l2}, "a2")}});
    PassStats s = runPass(b.g, passes::fuseHorizontal);
    CHECK(s.get("elementwise ops moved above split") == 0);
    CHECK(count(b.g, Op::LeakyRelu) == 2);
  }
  SECTION("must not fire: a split result also read by another op") {
    Value* t1 = b.op(Op::Tanh, {h1}, "t1");
    Value* t2 = b.op(Op::Tanh, {h2}, "t2");
    b.outputs({{"a", b.op(Op::Add, {t1, h1}, "s1")}, {"b", b.op(Op::Abs, {t2}, "a2")}});
    PassStats s = runPass(b.g, passes::fuseHorizontal);
    CHECK(s.get("elementwise ops moved above split") == 0);
    CHECK(count(b.g, Op::Tanh) == 2);
  }
}

TEST_CASE("fuse-horizontal: sibling convs with identical attributes", "[passes][fuse-horizontal]") {
  Builder b;
  Value* x = b.input("x", {B, 3, 6, 6});
  SECTION("same attributes: one conv, split along channels") {
    Value* c1 = b.op(Op::Conv, {x, b.randomParam("w1", {4, 3, 3, 3}), b.randomParam("b1", {4})}, kConv3x3, "c1");
    Value* c2 = b.op(Op::Conv, {x, b.randomParam("w2", {2, 3, 3, 3})}, kConv3x3, "c2");
    b.outputs({{"a", b.op(Op::Relu, {c1}, "r1")}, {"b", b.op(Op::Abs, {c2}, "a2")}});
    PassStats s = runPass(b.g, passes::fuseHorizontal);
    CHECK(s.get("conv groups fused") == 1);
    CHECK(only(b.g, Op::Conv)->output()->type() == f32({B, 6, 6, 6}));
    CHECK(only(b.g, Op::Split)->attrInt("axis") == 1);
  }
  SECTION("must not fire: other strides, another kernel size, groups") {
    AttrMap strided = kConv3x3;
    strided["strides"] = Ints{2, 2};
    AttrMap grouped{{"group", int64_t{3}}};
    Value* c1 = b.op(Op::Conv, {x, b.randomParam("w1", {4, 3, 3, 3})}, kConv3x3, "c1");
    Value* c2 = b.op(Op::Conv, {x, b.randomParam("w2", {4, 3, 3, 3})}, strided, "c2");
    Value* c3 = b.op(Op::Conv, {x, b.randomParam("w3", {4, 3, 1, 1})}, "c3");
    Value* c4 = b.op(Op::Conv, {x, b.randomParam("w4", {3, 1, 1, 1})}, grouped, "c4");
    Value* c5 = b.op(Op::Conv, {x, b.randomParam("w5", {3, 1, 1, 1})}, grouped, "c5");
    b.outputs({{"a", c1}, {"b", c2}, {"c", c3}, {"d", c4}, {"e", c5}});
    requireNoChange(b.g, passes::fuseHorizontal);
  }
}

// ---------------------------------------------------------------- cse and dce

TEST_CASE("cse: equal ops and bit-identical params merge", "[passes][cse]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  Value* p1 = b.param("p1", filled({4}, {1, 2, 3, 4}));
  Value* p2 = b.param("p2", filled({4}, {1, 2, 3, 4}));
  Value* p3 = b.param("p3", filled({2, 2}, {1, 2, 3, 4}));  // same bytes, other shape
  Value* a1 = b.op(Op::Add, {x, p1}, "a1");
  Value* a2 = b.op(Op::Add, {x, p2}, "a2");
  Value* t1 = b.op(Op::Tanh, {a1}, "t1");
  Value* t2 = b.op(Op::Tanh, {a2}, "t2");
  Value* l1 = b.op(Op::LeakyRelu, {x}, {{"alpha", 0.1}}, "l1");
  Value* l2 = b.op(Op::LeakyRelu, {x}, {{"alpha", 0.2}}, "l2");  // other attributes
  Value* r = b.op(Op::Reshape, {p3}, {{"shape", Ints{4}}}, "r");
  b.outputs({{"t1", t1}, {"t2", t2}, {"l1", l1}, {"l2", l2}, {"r", r}});
  PassStats s = runPass(b.g, passes::eliminateCommonSubexpressions);
  CHECK(s.get("params merged") == 1);
  CHECK(s.get("ops merged") == 2);
  CHECK(b.g.outputs()[0].second == b.g.outputs()[1].second);
  CHECK(count(b.g, Op::LeakyRelu) == 2);
  CHECK(b.g.findValue("p1")->producer()->provenance() == Strings{"p1", "p2"});
  CHECK(b.g.findValue("t1")->producer()->provenance() == Strings{"t1", "t2"});
  CHECK(b.g.findValue("p3") != nullptr);
}

TEST_CASE("dce: removes what no output needs, keeps inputs", "[passes][dce]") {
  Builder b;
  Value* x = b.input("x", {B, 4});
  b.input("unused", {B, 2});
  Value* p = b.randomParam("p", {4});
  b.op(Op::Add, {x, p}, "dead");
  b.randomParam("dead_param", {4});
  b.outputs({{"y", b.op(Op::Relu, {x}, "y")}});
  PassStats s = runPass(b.g, passes::eliminateDeadCode);
  CHECK(s.get("ops removed") == 1);
  CHECK(s.get("params removed") == 2);
  CHECK(b.g.inputs().size() == 2);
  CHECK_FALSE(passes::eliminateDeadCode(b.g).changed());
}

TEST_CASE("batch-outermost: values with the batch inside are rebuilt batch-first", "[passes][batch-outermost]") {
  auto noBatchInside = [](const Graph& g) {
    for (const auto& n : g.nodes()) {
      for (size_t i = 0; i < n->numOutputs(); ++i) {
        const Shape& s = n->output(i)->type().shape;
        for (size_t d = 1; d < s.size(); ++d) {
          if (s[d].isBatch()) return false;
        }
      }
    }
    return true;
  };
  SECTION("matmuls over heads, a matmul with the batch as rows, concat, reductions, layer norm") {
    Builder b;
    Value* x = b.input("x", {B, 3, 4});
    Value* t = b.op(Op::Transpose, {x}, {{"perm", Ints{1, 0, 2}}}, "t");                   // [3, batch, 4]
    Value* rows = b.op(Op::MatMul, {t, b.randomParam("w", {4, 4})}, "rows");              // batch as A's rows
    Value* bias = b.op(Op::Add, {rows, b.randomParam("bias_w", {4})}, "bias");
    Value* heads = b.op(Op::Reshape, {bias}, {{"shape", Ints{3, -1, 2, 2}}}, "heads");    // [3, batch, 2, 2]
    Value* q = b.op(Op::Transpose, {heads}, {{"perm", Ints{1, 2, 0, 3}}}, "q");           // [batch, 2, 3, 2]: in front
    Value* k = b.op(Op::Transpose, {heads}, {{"perm", Ints{1, 2, 3, 0}}}, "k");           // [batch, 2, 2, 3]
    Value* scores = b.op(Op::MatMul, {q, k}, "scores");
    Value* probs = b.op(Op::Softmax, {scores}, {{"axis", int64_t{-1}}}, "probs");
    Value* ctxv = b.op(Op::MatMul, {probs, q}, "ctx");                                     // [batch, 2, 3, 2]
    Value* back = b.op(Op::Transpose, {ctxv}, {{"perm", Ints{2, 0, 1, 3}}}, "back");       // [3, batch, 2, 2]
    Value* merged = b.op(Op::Reshape, {back}, {{"shape", Ints{3, -1, 4}}}, "merged");      // [3, batch, 4]
    Value* cat = b.op(Op::Concat, {merged, t}, {{"axis", int64_t{2}}}, "cat");             // [3, batch, 8]
    Value* ln = b.op(Op::LayerNorm, {cat, b.randomParam("gamma", {8})}, {{"axis", int64_t{-1}}}, "ln");
    Value* lin = b.op(Op::Linear, {ln, b.randomParam("w2", {4, 8}), b.randomParam("b2", {4})}, "lin");
    Value* mean = b.op(Op::ReduceMean, {lin}, {{"axes", Ints{0}}, {"keepdims", int64_t{0}}}, "mean");  // [batch, 4]
    Value* y = b.op(Op::Transpose, {lin}, {{"perm", Ints{1, 0, 2}}}, "y");
    b.outputs({{"y", y}, {"mean", mean}});
    PassStats s = runPass(b.g, passes::batchOutermost);
    CHECK(s.get("uses replaced") == 4);  // q, k, mean, y
    passes::eliminateDeadCode(b.g);
    CHECK(noBatchInside(b.g));
    CHECK(b.g.outputs()[0].second->name() == "y");
  }
  SECTION("no value has the batch inside: no change") {
    Builder b;
    Value* x = b.input("x", {B, 3, 4});
    Value* t = b.op(Op::Transpose, {x}, {{"perm", Ints{0, 2, 1}}}, "t");
    b.outputs({{"y", b.op(Op::Softmax, {t}, {{"axis", int64_t{1}}}, "y")}});
    requireNoChange(b.g, passes::batchOutermost);
  }
  SECTION("a chain through an op without a rule stays as it is") {
    Builder b;
    Value* x = b.input("x", {B, 3, 4});
    Value* t = b.op(Op::Transpose, {x}, {{"perm", Ints{1, 0, 2}}}, "t");
    Value* p = b.op(Op::Pad, {t}, {{"pads", Ints{0, 0, 1, 0, 0, 1}}}, "p");
    Value* r = b.op(Op::Relu, {p}, "r");
    b.outputs({{"y", b.op(Op::Transpose, {r}, {{"perm", Ints{1, 0, 2}}}, "y")}});
    requireNoChange(b.g, passes::batchOutermost);
  }
  SECTION("a reshape that would move elements across the batch is not rebuilt") {
    Builder b;
    Value* x = b.input("x", {B, 3, 4});
    Value* t = b.op(Op::Transpose, {x}, {{"perm", Ints{1, 0, 2}}}, "t");         // [3, batch, 4]
    Value* r = b.op(Op::Reshape, {t}, {{"shape", Ints{-1, 3, 4}}}, "r");          // [batch, 3, 4], not a transpose
    b.outputs({{"y", b.op(Op::Relu, {r}, "y")}});
    requireNoChange(b.g, passes::batchOutermost);
  }
}

// ---------------------------------------------------------------- together

TEST_CASE("default pipeline: an MLP with a value head becomes fused linears", "[passes][pipeline]") {
  Builder b;
  Value* x = b.input("obs", {B, 5});
  Value* pi = b.op(Op::Gemm, {x, b.randomParam("pw", {8, 5}), b.randomParam("pb", {8})}, kTransB, "pi");
  Value* vf = b.op(Op::Gemm, {x, b.randomParam("vw", {8, 5}), b.randomParam("vb", {8})}, kTransB, "vf");
  Value* pa = b.op(Op::Tanh, {pi}, "pa");
  Value* va = b.op(Op::Tanh, {vf}, "va");
  Value* out = b.op(Op::Identity, {b.op(Op::Gemm, {pa, b.randomParam("ow", {2, 8})}, kTransB, "logits")}, "id");
  b.outputs({{"logits", out}, {"value", va}});
  auto before = b.g.clone();
  auto inputs = driver::randomInputs(b.g, 2, 7);
  passes::PipelineResult result = passes::runPipeline(b.g);
  CHECK(count(b.g, Op::Gemm) == 0);
  CHECK(count(b.g, Op::Identity) == 0);
  CHECK(count(b.g, Op::Linear) == 2);
  CHECK(only(b.g, Op::Split)->attrInts("split") == Ints{8, 8});
  auto want = interpret(*before, inputs);
  auto got = interpret(b.g, inputs);
  for (size_t i = 0; i < got.size(); ++i) requireClose(got[i], want[i], "output " + std::to_string(i));
  // Params left by the rewrites are gone: only the fused and the head's weights and bias remain.
  size_t params = 0;
  for (const auto& n : b.g.nodes()) params += n->kind() == NodeKind::Param ? 1 : 0;
  CHECK(params == 3);
}

// ---------------------------------------------------------------- updatable weights

namespace {

// Makes the params named updatable (as compile --updatable-weights does for model weights).
void makeUpdatable(Graph& g, const Strings& names) {
  for (const std::string& n : names) g.makeUpdatable(g.findValue(n)->producer());
}

// The element of updatable weight `name` an updatable param's element `e` copies (-1: a literal zero).
std::pair<std::string, int64_t> sourceOf(const Graph& g, const Node* param, int64_t e) {
  REQUIRE(param->isUpdatable());
  const int64_t code = param->paramSource().data<int64_t>()[e];
  if (code == 0) return {"", -1};
  for (const Graph::UpdatableWeight& w : g.updatableWeights()) {
    if (code - 1 >= w.offset && code - 1 < w.offset + w.value.numel()) return {w.name, code - 1 - w.offset};
  }
  FAIL("source code " << code << " names no weight");
  return {};
}

}  // namespace

TEST_CASE("updatable weights: passes move them with their sources and never compute with them", "[passes][weights]") {
  Builder b;
  SECTION("fold-constants folds a transpose of an updatable weight, its source transposed alike") {
    Value* x = b.input("x", {B, 3});
    Value* t = b.op(Op::Transpose, {b.randomParam("w", {3, 4})}, {{"perm", Ints{1, 0}}}, "wt");
    b.outputs({{"y", b.op(Op::Linear, {x, t}, "lin")}});
    makeUpdatable(b.g, {"w"});
    PassStats s = runPass(b.g, passes::foldConstants);
    CHECK(s.get("folded") == 1);
    const Node* folded = only(b.g, Op::Linear)->input(1)->producer();
    REQUIRE(folded->isUpdatable());
    // wt[n][k] = w[k][n]
    CHECK(sourceOf(b.g, folded, 0 * 3 + 2) == std::pair<std::string, int64_t>{"w", 2 * 4 + 0});
    CHECK(sourceOf(b.g, folded, 3 * 3 + 1) == std::pair<std::string, int64_t>{"w", 1 * 4 + 3});
    // Dumps say which params are updatable (a comment: the text still parses).
    const std::string text = printGraph(b.g).text;
    CHECK(text.find("# updatable") != std::string::npos);
    CHECK_NOTHROW(parseGraph(text));
  }
  SECTION("must not fire: fold-constants on arithmetic over an updatable weight") {
    Value* x = b.input("x", {B, 4});
    Value* scaled = b.op(Op::Mul, {b.randomParam("g", {4}), b.param("two", scalar(2.0))}, "g2");
    b.outputs({{"y", b.op(Op::Mul, {x, scaled}, "y")}});
    makeUpdatable(b.g, {"g"});
    requireNoChange(b.g, passes::foldConstants);
  }
  SECTION("must not fire: fold-batch-norm with updatable statistics or weights") {
    Value* x = b.input("x", {B, 3, 6, 6});
    Value* c = b.op(Op::Conv, {x, b.randomParam("w", {4, 3, 3, 3}), b.randomParam("cb", {4})}, kConv3x3, "conv");
    b.outputs({{"y", batchNorm(b, c, 4, "bn")}});
    makeUpdatable(b.g, {"bn.scale"});
    requireNoChange(b.g, passes::foldBatchNorm);
  }
  SECTION("must not fire: cse on equal updatable weights (zero biases at initialisation)") {
    Value* x = b.input("x", {B, 4});
    Value* y1 = b.op(Op::Add, {x, b.param("b1", filled({4}, {0, 0, 0, 0}))}, "y1");
    Value* y2 = b.op(Op::Add, {x, b.param("b2", filled({4}, {0, 0, 0, 0}))}, "y2");
    b.outputs({{"y1", y1}, {"y2", y2}});
    makeUpdatable(b.g, {"b1", "b2"});
    PassStats s = runPass(b.g, passes::eliminateCommonSubexpressions);
    CHECK(s.get("params merged") == 0);
  }
  SECTION("canonicalize: a div by an updatable weight stays a div; gemm's transpose moves the source") {
    Value* x = b.input("x", {B, 4});
    Value* d = b.op(Op::Div, {x, b.randomParam("s", {4}, 1, 2)}, "d");
    Value* gemm = b.op(Op::Gemm, {d, b.randomParam("w", {4, 5}), b.randomParam("c", {1, 5})}, "gemm");
    b.outputs({{"y", gemm}});
    makeUpdatable(b.g, {"s", "w", "c"});
    runPass(b.g, passes::canonicalize);
    CHECK(count(b.g, Op::Div) == 1);
    Node* lin = only(b.g, Op::Linear);
    const Node* w = lin->input(1)->producer();
    CHECK(w->paramData().shape() == Ints{5, 4});
    CHECK(sourceOf(b.g, w, 1 * 4 + 3) == std::pair<std::string, int64_t>{"w", 3 * 5 + 1});
    const Node* bias = lin->input(2)->producer();
    CHECK(bias->paramData().shape() == Ints{5});
    CHECK(sourceOf(b.g, bias, 4) == std::pair<std::string, int64_t>{"c", 4});
  }
  SECTION("fuse-horizontal: updatable siblings concatenate their sources; a missing bias is literal zeros") {
    Value* x = b.input("x", {B, 6});
    Value* y1 = b.op(Op::Linear, {x, b.randomParam("w1", {4, 6}), b.randomParam("b1", {4})}, "y1");
    Value* y2 = b.op(Op::Linear, {x, b.randomParam("w2", {3, 6})}, "y2");
    Value* y3 = b.op(Op::Linear, {x, b.randomParam("w3", {2, 6})}, "y3");  // fixed: not merged with them
    b.outputs({{"a", b.op(Op::Tanh, {y1}, "t1")}, {"b", b.op(Op::Abs, {y2}, "a2")}, {"c", b.op(Op::Abs, {y3}, "a3")}});
    makeUpdatable(b.g, {"w1", "b1", "w2"});
    PassStats s = runPass(b.g, passes::fuseHorizontal);
    CHECK(s.get("layers merged") == 2);
    Node* fused = nullptr;
    for (const auto& n : b.g.nodes()) {
      if (n->isOp(Op::Linear) && n->numInputs() == 3) fused = n.get();
    }
    REQUIRE(fused != nullptr);
    const Node* w = fused->input(1)->producer();
    CHECK(sourceOf(b.g, w, 4 * 6 + 5) == std::pair<std::string, int64_t>{"w2", 5});
    const Node* bias = fused->input(2)->producer();
    CHECK(sourceOf(b.g, bias, 3) == std::pair<std::string, int64_t>{"b1", 3});
    CHECK(sourceOf(b.g, bias, 5) == std::pair<std::string, int64_t>{"", -1});
  }
}
