// Graph building, rewriting primitives and the verifier's rejections.
#include <catch2/catch.hpp>

#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/verifier.h"

using namespace policyc;
using namespace policyc::ir;

namespace {

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

std::unique_ptr<Graph> smallMlp() {
  auto g = std::make_unique<Graph>("mlp");
  Value* x = g->addInput("x", f32({Dim::batch(), 4}));
  Value* w = g->addParam("w", Tensor(DType::F32, {3, 4}));
  Value* b = g->addParam("b", Tensor(DType::F32, {3}));
  Node* fc = g->addOp(Op::Gemm, {x, w, b}, {{"trans_b", int64_t{1}}}, "fc");
  Node* act = g->addOp(Op::Tanh, {fc->output()}, {}, "act");
  g->setOutputs({{"y", act->output()}});
  return g;
}

}  // namespace

TEST_CASE("graph: builder infers types and fills default attributes", "[graph]") {
  auto g = smallMlp();
  REQUIRE_NOTHROW(verify(*g));
  const Value* fc = g->findValue("fc");
  REQUIRE(fc);
  CHECK(fc->type() == f32({Dim::batch(), 3}));
  CHECK(fc->producer()->attrFloat("alpha") == 1.0);
  CHECK(fc->producer()->attrInt("trans_a") == 0);
  CHECK(g->inputs().size() == 1);
  CHECK(g->outputs().at(0).first == "y");
  CHECK(g->numOpNodes() == 2);
}

TEST_CASE("graph: builder rejects bad operands and attributes naming the node", "[graph]") {
  Graph g("bad");
  Value* x = g.addInput("x", f32({Dim::batch(), 4}));
  Value* w = g.addParam("w", Tensor(DType::F32, {3, 5}));
  CHECK_THROWS_WITH(g.addOp(Op::Gemm, {x, w}, {{"trans_b", int64_t{1}}}, "fc"),
                    Catch::Contains("node 'fc' (gemm)"));
  CHECK_THROWS_WITH(g.addOp(Op::Relu, {x}, {{"alpha", 1.0}}, "r"), Catch::Contains("no attribute 'alpha'"));
  CHECK_THROWS_WITH(g.addOp(Op::Concat, {x}, {}, "c"), Catch::Contains("requires attribute 'axis'"));
  CHECK_THROWS_WITH(g.addOp(Op::Relu, {x}, {}, "x"), Catch::Contains("used twice"));
  CHECK_THROWS_WITH(g.addOp(Op::Add, {x}, {}, "a"), Catch::Contains("takes 2 inputs"));
}

TEST_CASE("graph: clone is deep and equal", "[graph]") {
  auto g = smallMlp();
  auto c = g->clone();
  REQUIRE_NOTHROW(verify(*c));
  REQUIRE(c->nodes().size() == g->nodes().size());
  CHECK(c->findValue("fc") != g->findValue("fc"));
  CHECK(c->findValue("act")->producer()->input(0) == c->findValue("fc"));
}

TEST_CASE("graph: replaceAllUsesWith, eraseNode and removeDeadNodes", "[graph]") {
  auto g = smallMlp();
  Value* fc = g->findValue("fc");
  Value* act = g->findValue("act");
  Node* extra = g->addOp(Op::Relu, {fc}, {}, "extra");
  CHECK(g->users(fc).size() == 2);
  CHECK_THROWS(g->eraseNode(fc->producer()));
  g->replaceAllUsesWith(act, fc);  // the graph now returns fc; act and extra are dead
  CHECK(g->outputs().at(0).second == fc);
  g->removeDeadNodes();
  CHECK(g->findValue("act") == nullptr);
  CHECK(g->findValue("extra") == nullptr);
  CHECK(g->findValue("w") != nullptr);
  (void)extra;
  REQUIRE_NOTHROW(verify(*g));
  CHECK(g->uniqueName("fc") == "fc_1");
  CHECK(g->uniqueName("fresh") == "fresh");
}

TEST_CASE("verifier: rejects malformed graphs with the node's name", "[verifier]") {
  SECTION("no output node") {
    Graph g("g");
    g.addInput("x", f32({2}));
    CHECK_THROWS_WITH(verify(g), Catch::Contains("no output node"));
  }
  SECTION("operand defined after its use (a cycle or a dangling value)") {
    auto g = smallMlp();
    Node* act = g->findValue("act")->producer();
    Node* fc = g->findValue("fc")->producer();
    fc->setInput(0, act->output());  // fc reads act, which reads fc
    CHECK_THROWS_WITH(verify(*g), Catch::Contains("node 'fc' (gemm)") && Catch::Contains("not defined before"));
  }
  SECTION("dangling value from another graph") {
    auto g = smallMlp();
    auto other = smallMlp();
    g->findValue("act")->producer()->setInput(0, other->findValue("fc"));
    CHECK_THROWS_WITH(verify(*g), Catch::Contains("node 'act' (tanh)"));
  }
  SECTION("declared type differs from the inferred one") {
    auto g = smallMlp();
    g->findValue("act")->setType(f32({Dim::batch(), 4}));
    CHECK_THROWS_WITH(verify(*g), Catch::Contains("node 'act' (tanh)") && Catch::Contains("declared f32[batch,4]"));
  }
  SECTION("bad attribute type") {
    auto g = smallMlp();
    g->findValue("fc")->producer()->attrs()["trans_b"] = 1.5;
    CHECK_THROWS_WITH(verify(*g), Catch::Contains("node 'fc' (gemm)") && Catch::Contains("trans_b"));
  }
  SECTION("unknown attribute") {
    auto g = smallMlp();
    g->findValue("act")->producer()->attrs()["bogus"] = int64_t{1};
    CHECK_THROWS_WITH(verify(*g), Catch::Contains("no attribute 'bogus'"));
  }
  SECTION("duplicate value names cannot be made: renaming onto a used name is refused") {
    auto g = smallMlp();
    CHECK_THROWS_WITH(g->renameValue(g->findValue("act"), "fc"), Catch::Contains("value name 'fc' is used twice"));
    g->renameValue(g->findValue("act"), "act2");
    CHECK(g->findValue("act2") != nullptr);
    CHECK(g->findValue("act") == nullptr);
    CHECK_NOTHROW(verify(*g));
  }
}
