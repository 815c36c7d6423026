// Unit tests of the ONNX importer: small models built with the onnx protobuf API, bad files, and
// (when present) the example models checked against their PyTorch reference outputs.
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"

namespace {

using namespace policyc;
using Catch::Matchers::Contains;

constexpr int64_t kBatch = -1;  // marks a dim written as the symbolic "batch" in test models

// Builds a small ModelProto; nodes are appended in order.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13, const std::string& graphName = "test_graph") {
    model_.set_ir_version(8);
    model_.set_producer_name("policyc-tests");
    onnx::OperatorSetIdProto* imp = model_.add_opset_import();
    imp->set_domain("");
    imp->set_version(opset);
    graph()->set_name(graphName);
  }

  onnx::ModelProto& model() { return model_; }
  onnx::GraphProto* graph() { return model_.mutable_graph(); }

  void input(const std::string& name, std::vector<int64_t> dims, int elemType = onnx::TensorProto::FLOAT) {
    onnx::ValueInfoProto* vi = graph()->add_input();
    vi->set_name(name);
    onnx::TypeProto::Tensor* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elemType);
    onnx::TensorShapeProto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      if (d == kBatch) shape->add_dim()->set_dim_param("batch");
      else shape->add_dim()->set_dim_value(d);
    }
  }

  void output(const std::string& name, int elemType = onnx::TensorProto::FLOAT) {
    onnx::ValueInfoProto* vo = graph()->add_output();
    vo->set_name(name);
    vo->mutable_type()->mutable_tensor_type()->set_elem_type(elemType);
  }

  // A float initializer stored as raw_data (how PyTorch writes weights).
  void initializer(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& values) {
    onnx::TensorProto* t = graph()->add_initializer();
    fillFloat(*t, name, dims, values, /*raw=*/true);
  }

  // An int64 initializer stored in int64_data.
  void initializerI64(const std::string& name, std::vector<int64_t> dims, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
  }

  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* n = graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph()->node_size() - 1) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }

  // A Constant node producing an int64 vector (how exporters write shape arithmetic).
  void constI64(const std::string& out, const std::vector<int64_t>& values, bool scalar = false) {
    onnx::NodeProto& n = node("Constant", {}, {out});
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto* t = a->mutable_t();
    t->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }

  std::string bytes() const { return model_.SerializeAsString(); }

  std::unique_ptr<ir::Graph> import(const std::string& source = "test.onnx") const {
    std::string b = bytes();
    return frontend::importOnnxBytes(std::as_bytes(std::span<const char>(b.data(), b.size())), source);
  }

  static void fillFloat(onnx::TensorProto& t, const std::string& name, const std::vector<int64_t>& dims,
                        const std::vector<float>& values, bool raw) {
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t.add_dims(d);
    if (raw) {
      t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    } else {
      for (float v : values) t.add_float_data(v);
    }
  }

 private:
  onnx::ModelProto model_;
};

void setInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void setInts(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void setFloat(onnx::NodeProto& n, const std::string& name, float v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void setString(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

std::vector<const ir::Node*> opNodes(const ir::Graph& g) {
  std::vector<const ir::Node*> out;
  for (const auto& n : g.nodes()) {
    if (n->isOp()) out.push_back(n.get());
  }
  return out;
}

std::vector<std::string> opNames(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const ir::Node* n : opNodes(g)) out.emplace_back(n->info().name);
  return out;
}

size_t numParams(const ir::Graph& g) {
  size_t count = 0;
  for (const auto& n : g.nodes()) count += n->kind() == ir::NodeKind::Param;
  return count;
}

std::string importError(const ModelBuilder& b, const std::string& source = "test.onnx") {
  try {
    b.import(source);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("import succeeded but an error was expected");
  return "";
}

std::filesystem::path tempPath(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("policyc_test_onnx_" + std::to_string(::getpid()) + "_" + name);
}

ir::Tensor f32(std::vector<int64_t> shape, std::vector<float> values) {
  return ir::Tensor::fromVector(ir::DType::F32, std::move(shape), values);
}

// ---------------------------------------------------------------------------------------------
// Inputs, batch dim, constants

TEST_CASE("onnx import: dynamic batch input through Gemm", "[onnx]") {
  ModelBuilder b;
  b.input("x", {kBatch, 4});
  b.initializer("W", {3, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1});
  onnx::TensorProto* bias = b.graph()->add_initializer();
  ModelBuilder::fillFloat(*bias, "B", {3}, {0.5f, -1.0f, 2.0f}, /*raw=*/false);  // typed float_data
  onnx::NodeProto& gemm = b.node("Gemm", {"x", "W", "B"}, {"y"}, "fc");
  setInt(gemm, "transB", 1);
  b.output("y");

  auto g = b.import("dyn.onnx");
  CHECK(g->name() == "test_graph");
  REQUIRE(g->inputs().size() == 1);
  CHECK(g->inputs()[0]->name() == "x");
  CHECK(g->inputs()[0]->type().str() == "f32[batch,4]");
  auto outs = g->outputs();
  REQUIRE(outs.size() == 1);
  CHECK(outs[0].first == "y");
  CHECK(outs[0].second->type().str() == "f32[batch,3]");
  auto ops = opNodes(*g);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0]->op() == ir::Op::Gemm);
  CHECK(ops[0]->attrInt("trans_b") == 1);
  CHECK(ops[0]->attrInt("trans_a") == 0);
  CHECK(ops[0]->provenance() == std::vector<std::string>{"fc"});
  CHECK(ops[0]->input(1)->name() == "W");
  CHECK(ops[0]->input(2)->name() == "B");

  auto result = ir::interpret(*g, {f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})});
  REQUIRE(result.size() == 1);
  std::vector<float> expect = {1.5f, 1.0f, 9.0f, 5.5f, 5.0f, 17.0f};
  REQUIRE(result[0].numel() == 6);
  for (int i = 0; i < 6; ++i) CHECK(result[0].data<float>()[i] == Approx(expect[i]));
}

TEST_CASE("onnx import: first dim written as -1 or missing is the batch, 0 is an empty dim", "[onnx]") {
  for (int form = 0; form < 3; ++form) {
    ModelBuilder b;
    b.input("x", {1, 4});
    auto* dim = b.graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
    if (form == 0) dim->set_dim_value(0);
    if (form == 1) dim->set_dim_value(-1);
    if (form == 2) dim->clear_dim_value();
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    auto g = b.import();
    CHECK(g->inputs()[0]->type().str() == (form == 0 ? "f32[0,4]" : "f32[batch,4]"));
  }
}

TEST_CASE("onnx import: symbolic dim other than the first is an error naming the input", "[onnx]") {
  ModelBuilder b;
  b.input("obs", {kBatch, 4});
  b.graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_param(
      "features");
  b.node("Relu", {"obs"}, {"y"});
  b.output("y");
  std::string msg = importError(b);
  CHECK_THAT(msg, Contains("obs") && Contains("features") && Contains("dim 1"));
}

TEST_CASE("onnx import: initializers and Constant nodes become params, constant chains fold", "[onnx]") {
  ModelBuilder b;
  b.input("x", {kBatch, 2});
  b.initializer("w", {2}, {2.0f, 3.0f});
  // c = Constant([1, 1]) + Constant(value_floats [0.5, 0.25]): folded at import into one param.
  onnx::NodeProto& c1 = b.node("Constant", {}, {"c1"}, "const_a");
  onnx::AttributeProto* a = c1.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  ModelBuilder::fillFloat(*a->mutable_t(), "", {2}, {1.0f, 1.0f}, /*raw=*/true);
  onnx::NodeProto& c2 = b.node("Constant", {}, {"c2"}, "const_b");
  onnx::AttributeProto* fl = c2.add_attribute();
  fl->set_name("value_floats");
  fl->set_type(onnx::AttributeProto::FLOATS);
  fl->add_floats(0.5f);
  fl->add_floats(0.25f);
  b.node("Add", {"c1", "c2"}, {"c"}, "fold_me");
  b.node("Mul", {"x", "w"}, {"xw"});
  b.node("Add", {"xw", "c"}, {"y"});
  b.initializer("unused", {1}, {7.0f});
  b.output("y");

  auto g = b.import();
  CHECK(opNames(*g) == std::vector<std::string>{"mul", "add"});
  CHECK(numParams(*g) == 2);  // w and the folded c; "unused", c1 and c2 never reach the graph
  const ir::Value* c = g->findValue("c");
  REQUIRE(c);
  REQUIRE(c->producer()->kind() == ir::NodeKind::Param);
  CHECK(c->producer()->provenance() == std::vector<std::string>{"fold_me"});
  const ir::Tensor& data = c->producer()->paramData();
  CHECK(data.data<float>()[0] == 1.5f);
  CHECK(data.data<float>()[1] == 1.25f);
  CHECK(g->findValue("unused") == nullptr);
  CHECK(g->findValue("c1") == nullptr);

  auto result = ir::interpret(*g, {f32({1, 2}, {1, 1})});
  CHECK(result[0].data<float>()[0] == 3.5f);
  CHECK(result[0].data<float>()[1] == 4.25f);
}

TEST_CASE("onnx import: graph name from the model, else the file stem", "[onnx]") {
  auto nameFor = [](const std::string& graphName, const std::string& source) {
    ModelBuilder b(13, graphName);
    b.input("x", {kBatch, 2});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    return b.import(source)->name();
  };
  CHECK(nameFor("policy-net v2", "a.onnx") == "policy_net_v2");
  CHECK(nameFor("", "/models/3d nav.onnx") == "_3d_nav");
  CHECK(nameFor("torch_jit", "examples/ppo_mlp.onnx") == "ppo_mlp");  // torch.onnx's fixed default
}

TEST_CASE("onnx import: value names are kept exactly, provenance is the node name", "[onnx]") {
  ModelBuilder b;
  b.input("obs", {kBatch, 3});
  b.node("Relu", {"obs"}, {"/Relu_output_0"}, "/Relu");
  onnx::NodeProto& unnamed = b.node("Neg", {"/Relu_output_0"}, {"out"});
  unnamed.clear_name();
  b.output("out");
  auto g = b.import();
  auto ops = opNodes(*g);
  REQUIRE(ops.size() == 2);
  CHECK(ops[0]->name() == "/Relu_output_0");
  CHECK(ops[0]->provenance() == std::vector<std::string>{"/Relu"});
  CHECK(ops[1]->provenance() == std::vector<std::string>{"out"});
}

// ---------------------------------------------------------------------------------------------
// Shape arithmetic over the batch dim

// x.view(x.size(0), -1) as torch.onnx exports it.
TEST_CASE("onnx import: Shape-Gather-Unsqueeze-Concat-Reshape becomes a reshape attribute", "[onnx]") {
  ModelBuilder b;
  b.input("x", {kBatch, 2, 3});
  b.node("Shape", {"x"}, {"s"});
  b.constI64("idx", {0}, /*scalar=*/true);
  b.node("Gather", {"s", "idx"}, {"n"});
  b.constI64("axes0", {0});
  b.node("Unsqueeze", {"n", "axes0"}, {"n1"});
  b.constI64("minus1", {-1});
  setInt(b.node("Concat", {"n1", "minus1"}, {"shape"}), "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"}, "view");
  b.output("y");

  auto g = b.import();
  auto ops = opNodes(*g);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0]->op() == ir::Op::Reshape);
  CHECK(ops[0]->attrInts("shape") == std::vector<int64_t>{0, -1});
  CHECK(g->outputs()[0].second->type().str() == "f32[batch,6]");
  CHECK(numParams(*g) == 0);
}

TEST_CASE("onnx import: Shape-Slice shape vectors and a batch element at another axis", "[onnx]") {
  SECTION("Slice keeps the batch element at axis 0") {
    ModelBuilder b;
    b.input("x", {kBatch, 2, 3});
    b.node("Shape", {"x"}, {"s"});
    b.constI64("st", {0});
    b.constI64("en", {1});
    b.node("Slice", {"s", "st", "en"}, {"n1"});
    b.constI64("rest", {3, 2});
    setInt(b.node("Concat", {"n1", "rest"}, {"shape"}), "axis", 0);
    b.node("Reshape", {"x", "shape"}, {"y"});
    b.output("y");
    auto g = b.import();
    auto ops = opNodes(*g);
    REQUIRE(ops.size() == 1);
    CHECK(ops[0]->attrInts("shape") == std::vector<int64_t>{0, 3, 2});
    CHECK(g->outputs()[0].second->type().str() == "f32[batch,3,2]");
  }
  SECTION("a batch element that does not line up becomes -1 when unambiguous") {
    ModelBuilder b;
    b.input("x", {kBatch, 2, 3});
    setInts(b.node("Transpose", {"x"}, {"t"}), "perm", {1, 0, 2});  // [2,batch,3]
    b.node("Shape", {"x"}, {"s"});
    b.constI64("idx", {0});
    b.node("Gather", {"s", "idx"}, {"n1"});  // 1-D [batch]
    b.constI64("six", {6});
    setInt(b.node("Concat", {"n1", "six"}, {"shape"}), "axis", 0);
    b.node("Reshape", {"t", "shape"}, {"y"});
    b.output("y");
    auto g = b.import();
    auto ops = opNodes(*g);
    REQUIRE(ops.size() == 2);
    CHECK(ops[1]->attrInts("shape") == std::vector<int64_t>{-1, 6});
    CHECK(g->outputs()[0].second->type().str() == "f32[batch,6]");
  }
  SECTION("a static slice of the shape folds to a constant") {
    ModelBuilder b;
    b.input("x", {kBatch, 2, 3});
    b.node("Shape", {"x"}, {"s"});
    b.constI64("st", {1});
    b.constI64("en", {2});
    b.node("Slice", {"s", "st", "en"}, {"dims"});  // [2]
    b.constI64("three", {3});
    b.node("Mul", {"dims", "three"}, {"total"});  // constant arithmetic on dims: [6]
    b.constI64("m1", {-1});
    setInt(b.node("Concat", {"m1", "total"}, {"shape"}), "axis", 0);
    b.node("Reshape", {"x", "shape"}, {"y"});
    b.output("y");
    auto g = b.import();
    CHECK(opNames(*g) == std::vector<std::string>{"reshape"});
    CHECK(opNodes(*g).at(0)->attrInts("shape") == std::vector<int64_t>{-1, 6});
  }
  SECTION("adding to the batch size is a clear error") {
    ModelBuilder b;
    b.input("x", {kBatch, 2, 3});
    b.node("Shape", {"x"}, {"s"});
    b.constI64("two", {2});
    b.node("Add", {"s", "two"}, {"s2"}, "add_two");
    b.node("Reshape", {"x", "s2"}, {"y"});
    b.output("y");
    std::string msg = importError(b);
    CHECK_THAT(msg, Contains("add_two") && Contains("(Add, opset 13") && Contains("batch size"));
  }
  SECTION("a multiple of the batch size that no reshape can make is a clear error") {
    ModelBuilder b;
    b.input("x", {kBatch, 2, 3});
    b.node("Shape", {"x"}, {"s"});
    b.constI64("two", {2});
    b.node("Mul", {"s", "two"}, {"s2"}, "double_it");  // [2*batch, 4, 6]: twice as many elements
    b.node("Reshape", {"x", "s2"}, {"y"}, "reshape_it");
    b.output("y");
    std::string msg = importError(b);
    CHECK_THAT(msg, Contains("reshape_it") && Contains("cannot reshape [batch,2,3] to [2*batch,4,6]"));
  }
}

TEST_CASE("onnx import: zeros_like over a batch-sized value feeds elementwise ops", "[onnx]") {
  // torch.where(cond, torch.zeros_like(v), v) as torch.onnx exports it.
  ModelBuilder b;
  b.input("v", {kBatch, 3});
  b.node("Shape", {"v"}, {"s"});
  b.node("ConstantOfShape", {"s"}, {"zeros"});
  b.initializer("lim", {1}, {0.0f});
  b.node("Less", {"v", "lim"}, {"neg"});
  b.node("Where", {"neg", "zeros", "v"}, {"y"});
  b.output("y");
  auto g = b.import();
  CHECK(opNames(*g) == std::vector<std::string>{"less", "where"});
  CHECK(g->outputs()[0].second->type().str() == "f32[batch,3]");
  auto result = ir::interpret(*g, {f32({2, 3}, {-1, 2, -3, 4, -5, 6})});
  std::vector<float> expect = {0, 2, 0, 4, 0, 6};
  for (int i = 0; i < 6; ++i) CHECK(result[0].data<float>()[i] == expect[i]);

  // Any other reader, and a graph output, gets the fill broadcast at run time (expand).
  ModelBuilder other;
  other.input("v", {kBatch, 3});
  other.node("Shape", {"v"}, {"s"});
  other.node("ConstantOfShape", {"s"}, {"zeros"});
  other.initializer("w", {3, 2}, {1, 2, 3, 4, 5, 6});
  other.node("MatMul", {"zeros", "w"}, {"y"}, "mm");
  other.output("y");
  other.output("zeros");
  auto og = other.import();
  CHECK(opNames(*og) == std::vector<std::string>{"expand", "matmul"});
  CHECK(og->outputs()[1].second->type().str() == "f32[batch,3]");
  auto zeros = ir::interpret(*og, {f32({2, 3}, {1, 2, 3, 4, 5, 6})});
  CHECK(zeros[0].type().str() == "f32[2,2]");
  CHECK(zeros[1].type().str() == "f32[2,3]");
  for (int i = 0; i < 4; ++i) CHECK(zeros[0].data<float>()[i] == 0.0f);
}

TEST_CASE("onnx import: Expand to a constant shape and to the batch size, both ways of broadcasting", "[onnx]") {
  // CleanRL's actor_logstd.expand_as(mean): a [1,2] parameter to Shape(mean) = [batch,2].
  ModelBuilder b;
  b.input("mean", {kBatch, 2});
  b.initializer("log_std", {1, 2}, {0.5f, -1.0f});
  b.node("Shape", {"mean"}, {"s"});
  b.node("Expand", {"log_std", "s"}, {"e"});
  b.node("Exp", {"e"}, {"std"});
  b.output("std");
  auto g = b.import();
  CHECK(g->outputs()[0].second->type().str() == "f32[batch,2]");
  auto std = ir::interpret(*g, {f32({3, 2}, {0, 0, 0, 0, 0, 0})});
  REQUIRE(std[0].type().str() == "f32[3,2]");
  for (int r = 0; r < 3; ++r) {
    CHECK(std[0].data<float>()[2 * r] == Approx(std::exp(0.5f)));
    CHECK(std[0].data<float>()[2 * r + 1] == Approx(std::exp(-1.0f)));
  }

  // A run-time value, broadcast both ways: [batch,1] with shape [1,3] -> [batch,3].
  ModelBuilder r;
  r.input("x", {kBatch, 1});
  r.constI64("shape", {1, 3});
  r.node("Expand", {"x", "shape"}, {"y"});
  r.output("y");
  auto rg = r.import();
  CHECK(opNames(*rg) == std::vector<std::string>{"expand"});
  CHECK(rg->outputs()[0].second->type().str() == "f32[batch,3]");
  auto y = ir::interpret(*rg, {f32({2, 1}, {7, 8})});
  std::vector<float> expect = {7, 7, 7, 8, 8, 8};
  for (int i = 0; i < 6; ++i) CHECK(y[0].data<float>()[i] == expect[i]);

  ModelBuilder bad;
  bad.input("x", {kBatch, 2});
  bad.constI64("shape", {3});
  bad.node("Expand", {"x", "shape"}, {"y"}, "ex");
  bad.output("y");
  CHECK_THAT(importError(bad), Contains("'ex'") && Contains("does not broadcast"));
}

// ---------------------------------------------------------------------------------------------
// Operator forms

TEST_CASE("onnx import: Conv auto_pad SAME_UPPER/SAME_LOWER resolve to explicit pads", "[onnx]") {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    ModelBuilder b;
    b.input("x", {kBatch, 1, 5, 5});
    b.initializer("W", {2, 1, 2, 2}, std::vector<float>(8, 1.0f));
    onnx::NodeProto& conv = b.node("Conv", {"x", "W"}, {"y"}, "Conv_3");
    setString(conv, "auto_pad", mode);
    b.output("y");
    auto g = b.import();
    auto ops = opNodes(*g);
    REQUIRE(ops.size() == 1);
    CHECK(ops[0]->attrInts("kernel_shape") == std::vector<int64_t>{2, 2});
    std::string m = mode;
    if (m == "SAME_UPPER") {
      CHECK(ops[0]->attrInts("pads") == std::vector<int64_t>{0, 0, 1, 1});
      CHECK(g->outputs()[0].second->type().str() == "f32[batch,2,5,5]");
    } else if (m == "SAME_LOWER") {
      CHECK(ops[0]->attrInts("pads") == std::vector<int64_t>{1, 1, 0, 0});
      CHECK(g->outputs()[0].second->type().str() == "f32[batch,2,5,5]");
    } else {
      CHECK(ops[0]->attrInts("pads") == std::vector<int64_t>{0, 0, 0, 0});
      CHECK(g->outputs()[0].second->type().str() == "f32[batch,2,4,4]");
    }
  }
  SECTION("stride 2") {
    ModelBuilder b;
    b.input("x", {kBatch, 1, 5, 5});
    b.initializer("W", {1, 1, 3, 3}, std::vector<float>(9, 1.0f));
    onnx::NodeProto& conv = b.node("Conv", {"x", "W"}, {"y"});
    setString(conv, "auto_pad", "SAME_UPPER");
    setInts(conv, "strides", {2, 2});
    b.output("y");
    auto g = b.import();
    CHECK(opNodes(*g)[0]->attrInts("pads") == std::vector<int64_t>{1, 1, 1, 1});
    CHECK(g->outputs()[0].second->type().str() == "f32[batch,1,3,3]");
  }
  SECTION("an unknown auto_pad value names the node") {
    ModelBuilder b;
    b.input("x", {kBatch, 1, 5, 5});
    b.initializer("W", {1, 1, 3, 3}, std::vector<float>(9, 1.0f));
    setString(b.node("Conv", {"x", "W"}, {"y"}, "Conv_3"), "auto_pad", "WRAP");
    b.output("y");
    std::string msg = importError(b, "model.onnx");
    CHECK_THAT(msg, Contains("model.onnx: node 'Conv_3' (Conv, opset 13") && Contains("auto_pad=WRAP"));
  }
}

TEST_CASE("onnx import: MaxPool Indices output and BatchNormalization training are rejected when used", "[onnx]") {
  ModelBuilder b;
  b.input("x", {kBatch, 1, 4, 4});
  onnx::NodeProto& pool = b.node("MaxPool", {"x"}, {"y", "idx"}, "pool");
  setInts(pool, "kernel_shape", {2, 2});
  setInt(pool, "storage_order", 0);
  b.output("y");
  auto g = b.import();  // Indices named but unused: fine
  CHECK(opNames(*g) == std::vector<std::string>{"max_pool"});
  b.output("idx", onnx::TensorProto::INT64);
  CHECK_THAT(importError(b), Contains("'pool'") && Contains("Indices"));
}

TEST_CASE("onnx import: training-only forms are rejected, inference forms accepted", "[onnx][errors]") {
  auto bnModel = [](int64_t trainingMode, bool useMeanOutput) {
    ModelBuilder b(14);
    b.input("x", {kBatch, 2});
    for (const char* name : {"scale", "bias", "mean", "var"}) b.initializer(name, {2}, {1.0f, 1.0f});
    onnx::NodeProto& bn =
        b.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y", "running_mean"}, "bn");
    setInt(bn, "training_mode", trainingMode);
    setFloat(bn, "momentum", 0.9f);
    b.output("y");
    if (useMeanOutput) b.output("running_mean");
    return b;
  };
  CHECK(opNames(*bnModel(0, false).import()) == std::vector<std::string>{"batch_norm"});
  CHECK_THAT(importError(bnModel(1, false)), Contains("'bn'") && Contains("training_mode=1"));
  CHECK_THAT(importError(bnModel(0, true)), Contains("'bn'") && Contains("running_mean"));

  auto dropoutModel = [](bool training, bool useMask) {
    ModelBuilder b;
    b.input("x", {kBatch, 2});
    b.initializer("ratio", {}, {0.5f});
    onnx::TensorProto* t = b.graph()->add_initializer();
    t->set_name("train");
    t->set_data_type(onnx::TensorProto::BOOL);
    t->add_int32_data(training ? 1 : 0);
    b.node("Dropout", {"x", "ratio", "train"}, {"y", "mask"}, "drop");
    b.output("y");
    if (useMask) b.output("mask", onnx::TensorProto::BOOL);
    return b;
  };
  CHECK(opNames(*dropoutModel(false, false).import()) == std::vector<std::string>{"dropout"});
  CHECK_THAT(importError(dropoutModel(true, false)), Contains("'drop'") && Contains("training_mode"));
  CHECK_THAT(importError(dropoutModel(false, true)), Contains("'drop'") && Contains("mask"));

  ModelBuilder ln(13);
  ln.input("x", {kBatch, 4});
  ln.initializer("g", {4}, {1, 1, 1, 1});
  ln.node("LayerNormalization", {"x", "g"}, {"y"}, "ln");
  ln.output("y");
  CHECK_THAT(importError(ln), Contains("unsupported operator 'LayerNormalization' (opset 13)"));
}

TEST_CASE("onnx import: outputs that are inputs or constants", "[onnx]") {
  ModelBuilder b;
  b.input("x", {kBatch, 2});
  b.constI64("k", {1, 2, 3});
  b.output("x");
  b.output("k", onnx::TensorProto::INT64);
  auto g = b.import();
  auto outs = g->outputs();
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].second->producer()->kind() == ir::NodeKind::Input);
  CHECK(outs[1].second->producer()->kind() == ir::NodeKind::Param);
  CHECK(outs[1].second->type().str() == "i64[3]");
}

TEST_CASE("onnx import: Squeeze and Split at opset 12 (attributes) and 13 (inputs)", "[onnx]") {
  for (int64_t opset : {12, 13}) {
    ModelBuilder b(opset);
    b.input("x", {kBatch, 6, 1});
    onnx::NodeProto* split = nullptr;
    if (opset < 13) {
      setInts(b.node("Squeeze", {"x"}, {"s"}), "axes", {2});
      split = &b.node("Split", {"s"}, {"a", "b"});
      setInts(*split, "split", {2, 4});
    } else {
      b.constI64("ax", {2});
      b.constI64("parts", {2, 4});
      b.node("Squeeze", {"x", "ax"}, {"s"});
      split = &b.node("Split", {"s", "parts"}, {"a", "b"});
    }
    setInt(*split, "axis", 1);
    b.output("a");
    b.output("b");
    auto g = b.import();
    auto ops = opNodes(*g);
    REQUIRE(ops.size() == 2);
    CHECK(ops[0]->op() == ir::Op::Squeeze);
    CHECK(ops[0]->attrInts("axes") == std::vector<int64_t>{2});
    CHECK(ops[1]->op() == ir::Op::Split);
    CHECK(ops[1]->attrInts("split") == std::vector<int64_t>{2, 4});
    CHECK(ops[1]->attrInt("axis") == 1);
    auto outs = g->outputs();
    CHECK(outs[0].second->type().str() == "f32[batch,2]");
    CHECK(outs[1].second->type().str() == "f32[batch,4]");
  }
}

TEST_CASE("onnx import: Softmax at opset 11 coerces to 2-D, at opset 13 works per axis", "[onnx]") {
  const std::vector<float> in = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 1};
  SECTION("opset 11, axis 1 of a rank-3 input: softmax over the 6 trailing elements") {
    ModelBuilder b(11);
    b.input("x", {kBatch, 2, 3});
    setInt(b.node("Softmax", {"x"}, {"y"}, "sm"), "axis", 1);
    b.output("y");
    auto g = b.import();
    CHECK(opNames(*g) == std::vector<std::string>{"reshape", "softmax", "reshape"});
    auto ops = opNodes(*g);
    CHECK(ops[0]->attrInts("shape") == std::vector<int64_t>{0, 6});
    CHECK(ops[2]->attrInts("shape") == std::vector<int64_t>{0, 2, 3});
    CHECK(ops[2]->name() == "y");
    CHECK(g->outputs()[0].second->type().str() == "f32[batch,2,3]");
    auto out = ir::interpret(*g, {f32({2, 2, 3}, in)});
    for (int row = 0; row < 2; ++row) {
      double sum = 0;
      for (int i = 0; i < 6; ++i) sum += std::exp(in[static_cast<size_t>(row * 6 + i)]);
      for (int i = 0; i < 6; ++i) {
        CHECK(out[0].data<float>()[row * 6 + i] == Approx(std::exp(in[static_cast<size_t>(row * 6 + i)]) / sum));
      }
    }
  }
  SECTION("opset 11, default axis on a rank-2 input is the last axis") {
    ModelBuilder b(11);
    b.input("x", {kBatch, 6});
    b.node("LogSoftmax", {"x"}, {"y"});
    b.output("y");
    auto g = b.import();
    CHECK(opNames(*g) == std::vector<std::string>{"log_softmax"});
  }
  SECTION("opset 13, axis 1 is per axis") {
    ModelBuilder b(13);
    b.input("x", {kBatch, 2, 3});
    setInt(b.node("Softmax", {"x"}, {"y"}), "axis", 1);
    b.output("y");
    auto g = b.import();
    REQUIRE(opNames(*g) == std::vector<std::string>{"softmax"});
    CHECK(opNodes(*g)[0]->attrInt("axis") == 1);
  }
}

TEST_CASE("onnx import: Clip bounds, Min/Max chains, Reduce axes forms, Cast", "[onnx]") {
  ModelBuilder b;
  b.input("x", {kBatch, 4});
  b.initializer("lo", {}, {-1.0f});
  b.node("Clip", {"x", "lo", ""}, {"c"});
  b.initializer("k1", {1}, {0.5f});
  b.initializer("k2", {1}, {0.25f});
  b.node("Max", {"c", "k1", "k2"}, {"m"});
  b.node("Min", {"m"}, {"m1"});
  b.constI64("ax", {1});
  setInt(b.node("ReduceSum", {"m1", "ax"}, {"r"}), "keepdims", 0);
  setInt(b.node("Cast", {"r"}, {"ri"}), "to", onnx::TensorProto::INT32);
  b.output("ri", onnx::TensorProto::INT32);
  auto g = b.import();
  CHECK(opNames(*g) == std::vector<std::string>{"clip", "max", "max", "identity", "reduce_sum", "cast"});
  auto ops = opNodes(*g);
  CHECK(ops[0]->attrFloat("min") == -1.0);
  CHECK(std::isinf(ops[0]->attrFloat("max")));
  CHECK(ops[4]->attrInts("axes") == std::vector<int64_t>{1});
  CHECK(ops[4]->attrInt("keepdims") == 0);
  CHECK(ops[5]->attrString("to") == "i32");
  CHECK(g->outputs()[0].second->type().str() == "i32[batch]");
}

// One unary ONNX node over x [batch, n] (opset `opset`), imported and run by the interpreter.
std::vector<double> runUnary(const std::string& op, const std::vector<float>& x, int64_t opset = 13,
                             const std::function<void(onnx::NodeProto&)>& attrs = {},
                             int outType = onnx::TensorProto::FLOAT) {
  ModelBuilder b(opset);
  b.input("x", {kBatch, static_cast<int64_t>(x.size())});
  onnx::NodeProto& n = b.node(op, {"x"}, {"y"});
  if (attrs) attrs(n);
  b.output("y", outType);
  auto g = b.import();
  auto result = ir::interpret(*g, {f32({1, static_cast<int64_t>(x.size())}, x)});
  std::vector<double> out;
  for (int64_t i = 0; i < result.at(0).numel(); ++i) out.push_back(result[0].getAsDouble(i));
  return out;
}

TEST_CASE("onnx import: composite operators keep ONNX's semantics", "[onnx]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(runUnary("Reciprocal", {2, -4}) == std::vector<double>{0.5, -0.25});
  CHECK(runUnary("Softsign", {1, -3}) == std::vector<double>{0.5, -0.75});
  CHECK(runUnary("ThresholdedRelu", {0.5, 1, 2}) == std::vector<double>{0, 0, 2});
  CHECK(runUnary("Shrink", {-2, -0.2f, 0.2f, 2}, 13, [](auto& n) { setFloat(n, "bias", 1); }) ==
        std::vector<double>{-1, 0, 0, 1});
  std::vector<double> celu = runUnary("Celu", {-1, 2}, 13, [](auto& n) { setFloat(n, "alpha", 2); });
  CHECK(celu[0] == Approx(2 * (std::exp(-0.5) - 1)));
  CHECK(celu[1] == 2);
  std::vector<double> sign = runUnary("Sign", {-3, 0, 5, static_cast<float>(nan)});
  CHECK(sign[0] == -1);
  CHECK(sign[1] == 0);
  CHECK(sign[2] == 1);
  CHECK(std::isnan(sign[3]));
  const std::vector<float> special = {1, static_cast<float>(inf), static_cast<float>(-inf), static_cast<float>(nan)};
  CHECK(runUnary("IsNaN", special, 13, {}, onnx::TensorProto::BOOL) == std::vector<double>{0, 0, 0, 1});
  CHECK(runUnary("IsInf", special, 13, {}, onnx::TensorProto::BOOL) == std::vector<double>{0, 1, 1, 0});
  CHECK(runUnary("IsInf", special, 13, [](auto& n) { setInt(n, "detect_negative", 0); }, onnx::TensorProto::BOOL) ==
        std::vector<double>{0, 1, 0, 0});
  CHECK(runUnary("IsInf", special, 13, [](auto& n) { setInt(n, "detect_positive", 0); setInt(n, "detect_negative", 0); },
                 onnx::TensorProto::BOOL) == std::vector<double>{0, 0, 0, 0});
  CHECK(runUnary("Hardmax", {1, 3, 3, 2}) == std::vector<double>{0, 1, 0, 0});  // the first maximum
  // Reductions over the last axis.
  auto last = [](auto& n) { setInts(n, "axes", {1}); setInt(n, "keepdims", 0); };
  CHECK(runUnary("ReduceMin", {3, -2, 5}, 13, last) == std::vector<double>{-2});
  CHECK(runUnary("ReduceL1", {3, -4}, 13, last) == std::vector<double>{7});
  CHECK(runUnary("ReduceL2", {3, -4}, 13, last) == std::vector<double>{5});
  CHECK(runUnary("ReduceSumSquare", {3, -4}, 13, last) == std::vector<double>{25});
  CHECK(runUnary("ReduceLogSum", {1, 2}, 13, last)[0] == Approx(std::log(3.0)));
  // 1000 would overflow exp without the maximum taken out.
  CHECK(runUnary("ReduceLogSumExp", {1000, 1000}, 13, last)[0] == Approx(1000 + std::log(2.0)));
  auto argmin = [](bool lastIndex) {
    return [lastIndex](auto& n) { setInt(n, "axis", 1); setInt(n, "select_last_index", lastIndex); };
  };
  CHECK(runUnary("ArgMin", {4, 1, 7, 1}, 13, argmin(false), onnx::TensorProto::INT64) == std::vector<double>{1});
  CHECK(runUnary("ArgMin", {4, 1, 7, 1}, 13, argmin(true), onnx::TensorProto::INT64) == std::vector<double>{3});
  CHECK(runUnary("ArgMin", {4, static_cast<float>(nan), 1}, 13, argmin(false), onnx::TensorProto::INT64) ==
        std::vector<double>{1});  // NaN is the smallest, as in numpy

  SECTION("ReduceMin and ArgMin of integers are exact at the dtype's limits") {
    ModelBuilder b;
    b.input("x", {kBatch, 3}, onnx::TensorProto::INT32);
    setInts(b.node("ReduceMin", {"x"}, {"m"}), "axes", {1});
    setInt(b.node("ArgMin", {"x"}, {"a"}), "axis", 1);
    b.output("m", onnx::TensorProto::INT32);
    b.output("a", onnx::TensorProto::INT64);
    auto g = b.import();
    ir::Tensor x = ir::Tensor::fromVector(ir::DType::I32, {1, 3}, std::vector<int32_t>{7, std::numeric_limits<int32_t>::min(), 3});
    auto result = ir::interpret(*g, {x});
    CHECK(result[0].dtype() == ir::DType::I32);
    CHECK(result[0].getAsDouble(0) == std::numeric_limits<int32_t>::min());
    CHECK(result[1].getAsDouble(0) == 1);
  }
  SECTION("Sum, Mean and PRelu broadcast their operands") {
    ModelBuilder b;
    b.input("x", {kBatch, 2});
    b.initializer("k", {2}, {1, 3});
    b.initializer("slope", {2}, {0.5f, 0.25f});
    b.node("Sum", {"x", "k", "x"}, {"s"});
    b.node("Mean", {"x", "k"}, {"m"});
    b.node("PRelu", {"x", "slope"}, {"p"});
    for (const char* o : {"s", "m", "p"}) b.output(o);
    auto g = b.import();
    auto result = ir::interpret(*g, {f32({1, 2}, {-4, 5})});
    CHECK(result[0].getAsDouble(0) == -7);
    CHECK(result[0].getAsDouble(1) == 13);
    CHECK(result[1].getAsDouble(0) == -1.5);
    CHECK(result[1].getAsDouble(1) == 4);
    CHECK(result[2].getAsDouble(0) == -2);
    CHECK(result[2].getAsDouble(1) == 5);
  }
  SECTION("Trilu keeps a triangle of the last two axes, k from a constant input") {
    ModelBuilder b(14);
    b.input("x", {kBatch, 2, 3});
    b.constI64("k", {1}, /*scalar=*/true);
    setInt(b.node("Trilu", {"x", "k"}, {"u"}), "upper", 1);
    setInt(b.node("Trilu", {"x"}, {"l"}), "upper", 0);
    b.output("u");
    b.output("l");
    auto g = b.import();
    auto result = ir::interpret(*g, {f32({1, 2, 3}, {1, 2, 3, 4, 5, 6})});
    std::vector<double> u, l;
    for (int i = 0; i < 6; ++i) {
      u.push_back(result[0].getAsDouble(i));
      l.push_back(result[1].getAsDouble(i));
    }
    CHECK(u == std::vector<double>{0, 2, 3, 0, 0, 6});
    CHECK(l == std::vector<double>{1, 0, 0, 4, 5, 0});
  }
  SECTION("Tile concatenates copies along the repeated axes") {
    ModelBuilder b;
    b.input("x", {kBatch, 2});
    b.initializerI64("reps", {2}, {1, 3});
    b.node("Tile", {"x", "reps"}, {"y"});
    b.output("y");
    auto g = b.import();
    auto result = ir::interpret(*g, {f32({1, 2}, {1, 2})});
    std::vector<double> y;
    for (int i = 0; i < 6; ++i) y.push_back(result[0].getAsDouble(i));
    CHECK(y == std::vector<double>{1, 2, 1, 2, 1, 2});
  }
  SECTION("Size, EyeLike and GlobalMaxPool") {
    ModelBuilder b;
    b.input("x", {kBatch, 2, 2, 2});
    b.initializer("w", {2, 3}, {0, 0, 0, 0, 0, 0});
    b.node("Size", {"w"}, {"n"});
    setInt(b.node("EyeLike", {"w"}, {"e"}), "k", 1);
    b.node("GlobalMaxPool", {"x"}, {"p"});
    b.output("n", onnx::TensorProto::INT64);
    b.output("e");
    b.output("p");
    auto g = b.import();
    auto result = ir::interpret(*g, {f32({1, 2, 2, 2}, {1, 5, 3, 2, -1, -2, -3, -4})});
    CHECK(result[0].getAsDouble(0) == 6);
    std::vector<double> eye;
    for (int i = 0; i < 6; ++i) eye.push_back(result[1].getAsDouble(i));
    CHECK(eye == std::vector<double>{0, 1, 0, 0, 0, 1});
    CHECK(result[2].shape() == std::vector<int64_t>{1, 2, 1, 1});
    CHECK(result[2].getAsDouble(0) == 5);
    CHECK(result[2].getAsDouble(1) == -1);
  }
}

TEST_CASE("onnx import: composite operators name what they cannot do", "[onnx][errors]") {
  ModelBuilder size;
  size.input("x", {kBatch, 4});
  size.node("Size", {"x"}, {"n"}, "size_node");
  size.output("n", onnx::TensorProto::INT64);
  CHECK_THAT(importError(size), Contains("'size_node'") && Contains("depends on the batch size"));

  ModelBuilder trilu(14);
  trilu.input("x", {kBatch, 4});
  trilu.node("Trilu", {"x"}, {"y"}, "tri");
  trilu.output("y");
  CHECK_THAT(importError(trilu), Contains("'tri'") && Contains("static dim 0"));

  ModelBuilder reciprocal;
  reciprocal.input("x", {kBatch, 4}, onnx::TensorProto::INT32);
  reciprocal.node("Reciprocal", {"x"}, {"y"}, "rec");
  reciprocal.output("y", onnx::TensorProto::INT32);
  CHECK_THAT(importError(reciprocal), Contains("'rec'") && Contains("float input"));

  ModelBuilder tile;
  tile.input("x", {kBatch, 4});
  tile.initializerI64("reps", {2}, {1, 100000});
  tile.node("Tile", {"x", "reps"}, {"y"}, "tiler");
  tile.output("y");
  CHECK_THAT(importError(tile), Contains("'tiler'") && Contains("at most 1024 copies"));

  ModelBuilder mod;
  mod.input("x", {kBatch, 4});
  mod.node("Mod", {"x", "x"}, {"y"}, "m");
  mod.output("y");
  CHECK_THAT(importError(mod), Contains("'m'") && Contains("fmod=1"));
}

// ---------------------------------------------------------------------------------------------
// Bad input

TEST_CASE("onnx import: missing, truncated and garbage files", "[onnx][errors]") {
  CHECK_THROWS_WITH(frontend::importOnnxFile("/nonexistent/dir/model.onnx"),
                    Contains("/nonexistent/dir/model.onnx") && Contains("no such file"));

  ModelBuilder b;
  b.input("x", {kBatch, 64});
  b.initializer("W", {64, 64}, std::vector<float>(64 * 64, 0.5f));
  b.node("MatMul", {"x", "W"}, {"y"});
  b.output("y");
  std::string bytes = b.bytes();

  auto truncated = tempPath("truncated.onnx");
  {
    std::ofstream out(truncated, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  CHECK_THROWS_AS(frontend::importOnnxFile(truncated.string()), Error);
  CHECK_THROWS_WITH(frontend::importOnnxFile(truncated.string()), Contains(truncated.string()));
  std::filesystem::remove(truncated);

  // Every prefix of a valid model either imports or fails cleanly.
  for (size_t cut = 0; cut < bytes.size(); cut += 97) {
    std::string part = bytes.substr(0, cut);
    try {
      frontend::importOnnxBytes(std::as_bytes(std::span<const char>(part.data(), part.size())), "cut.onnx");
    } catch (const Error&) {
    }
  }

  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 7919 + 13) % 251);
  CHECK_THROWS_WITH(
      frontend::importOnnxBytes(std::as_bytes(std::span<const char>(garbage.data(), garbage.size())), "garbage.onnx"),
      Contains("garbage.onnx"));
  std::string text = "this is not an onnx model\n";
  CHECK_THROWS_AS(
      frontend::importOnnxBytes(std::as_bytes(std::span<const char>(text.data(), text.size())), "text.onnx"), Error);
}

TEST_CASE("onnx import: unsupported operator names node, op type and opset", "[onnx][errors]") {
  ModelBuilder b;
  b.input("x", {kBatch, 5, 4});
  b.node("NonMaxSuppression", {"x"}, {"y"}, "nms_7");
  b.output("y");
  std::string msg = importError(b, "model.onnx");
  CHECK_THAT(msg, Contains("model.onnx: node 'nms_7'") && Contains("unsupported operator 'NonMaxSuppression' (opset 13)"));
}

TEST_CASE("onnx import: an unknown attribute on a supported op is an error", "[onnx][errors]") {
  ModelBuilder b;
  b.input("x", {kBatch, 4});
  setFloat(b.node("Relu", {"x"}, {"y"}, "act"), "slope", 0.1f);
  b.output("y");
  CHECK_THAT(importError(b), Contains("'act'") && Contains("(Relu, opset 13") && Contains("attribute 'slope'"));

  ModelBuilder wrongType;
  wrongType.input("x", {kBatch, 4});
  setString(wrongType.node("Flatten", {"x"}, {"y"}, "fl"), "axis", "one");
  wrongType.output("y");
  CHECK_THAT(importError(wrongType), Contains("'fl'") && Contains("axis") && Contains("STRING"));
}

// A graph output's shape, which ONNX's checker requires of the older models it converts.
void setOutputShape(ModelBuilder& b, int index, const std::vector<int64_t>& dims) {
  onnx::TensorShapeProto* shape = b.graph()->mutable_output(index)->mutable_type()->mutable_tensor_type()->mutable_shape();
  for (int64_t d : dims) {
    if (d == kBatch) shape->add_dim()->set_dim_param("batch");
    else shape->add_dim()->set_dim_value(d);
  }
}

TEST_CASE("onnx import: opsets below 11 go through ONNX's version converter", "[onnx]") {
  // Opset 6's Add broadcasts only with broadcast=1: the converter drops the attribute where numpy
  // broadcasting means the same (the batch dim stands in as a number while it converts).
  auto legacyAdd = [](bool withAxis) {
    ModelBuilder b(6);
    b.input("x", {kBatch, 3, 2});
    b.initializer("bias", {2}, {10, 20});
    onnx::NodeProto& add = b.node("Add", {"x", "bias"}, {"y"}, "legacy_add");
    setInt(add, "broadcast", 1);
    if (withAxis) setInt(add, "axis", 1);  // [2] from axis 1 of [batch, 3, 2]: no numpy form
    b.node("Relu", {"y"}, {"z"});
    b.output("z");
    setOutputShape(b, 0, {kBatch, 3, 2});
    return b;
  };
  auto g = legacyAdd(false).import();
  CHECK(g->inputs()[0]->type().str() == "f32[batch,3,2]");
  auto result = ir::interpret(*g, {f32({1, 3, 2}, {-100, 1, 2, 3, 4, 5})});
  std::vector<double> z;
  for (int i = 0; i < 6; ++i) z.push_back(result[0].getAsDouble(i));
  CHECK(z == std::vector<double>{0, 21, 12, 23, 14, 25});
  CHECK_THAT(importError(legacyAdd(true)), Contains("opset 6 is not supported as it is") && Contains("version converter"));

  // PyTorch's nn.PReLU(C) at opset 6: one slope per channel, along axis 1.
  ModelBuilder prelu(6);
  prelu.input("x", {kBatch, 2, 3});
  prelu.initializer("slope", {2}, {0.5f, 0.25f});
  prelu.node("PRelu", {"x", "slope"}, {"y"});
  prelu.output("y");
  setOutputShape(prelu, 0, {kBatch, 2, 3});
  auto pg = prelu.import();
  auto pr = ir::interpret(*pg, {f32({1, 2, 3}, {-4, -4, 4, -4, -4, 4})});
  std::vector<double> y;
  for (int i = 0; i < 6; ++i) y.push_back(pr[0].getAsDouble(i));
  CHECK(y == std::vector<double>{-2, -2, 4, -1, -1, 4});

  // What ONNX's checker rejects is one error naming the opset and the checker's reason.
  ModelBuilder bad(9);
  bad.input("x", {kBatch, 4});
  bad.node("Relu", {"x", "x"}, {"y"}, "two_inputs");
  bad.output("y");
  setOutputShape(bad, 0, {kBatch, 4});
  CHECK_THAT(importError(bad), Contains("opset 9 is not supported as it is") && Contains("checker"));
}

TEST_CASE("onnx import: old opsets convert from several threads at once, and a missing helper is one error", "[onnx]") {
  auto oldRelu = [] {
    ModelBuilder b(9);
    b.input("x", {kBatch, 4});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    setOutputShape(b, 0, {kBatch, 4});
    return b;
  };
  // The helper is a process of its own (exec'd, not forked), so threads that import, throw and
  // allocate meanwhile cannot leave it waiting on a lock they held.
  std::atomic<int> converted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        if (oldRelu().import()->inputs()[0]->type().str() == "f32[batch,4]") ++converted;
        try {
          fail("an error thrown while another thread converts");
        } catch (const Error&) {
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(converted == 16);

  const char* before = std::getenv("POLICYC_ONNX_UPGRADE_HELPER");
  const std::string saved = before != nullptr ? before : "";
  setenv("POLICYC_ONNX_UPGRADE_HELPER", "/nonexistent/policyc-onnx-upgrade", 1);
  const std::string msg = importError(oldRelu());
  if (before != nullptr) setenv("POLICYC_ONNX_UPGRADE_HELPER", saved.c_str(), 1);
  else unsetenv("POLICYC_ONNX_UPGRADE_HELPER");
  CHECK_THAT(msg, Contains("opset 9 is not supported as it is") && Contains("'/nonexistent/policyc-onnx-upgrade'") &&
                      Contains("POLICYC_ONNX_UPGRADE_HELPER"));
}

TEST_CASE("onnx import: opsets outside 1-21 and foreign domains are rejected", "[onnx][errors]") {
  for (int64_t opset : {0, 22}) {
    ModelBuilder b(opset);
    b.input("x", {kBatch, 4});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    CHECK_THAT(importError(b), Contains(fmt::format("opset {}", opset)) && Contains("1 to 21"));
  }
  ModelBuilder b;
  b.input("x", {kBatch, 4});
  onnx::NodeProto& n = b.node("FusedGemm", {"x"}, {"y"}, "ms_op");
  n.set_domain("com.microsoft");
  b.output("y");
  CHECK_THAT(importError(b), Contains("'ms_op'") && Contains("com.microsoft"));

  ModelBuilder noDefault;
  noDefault.model().mutable_opset_import(0)->set_domain("ai.onnx.ml");
  noDefault.input("x", {kBatch, 4});
  noDefault.node("Relu", {"x"}, {"y"});
  noDefault.output("y");
  CHECK_THAT(importError(noDefault), Contains("no opset of the default ONNX domain"));
}

TEST_CASE("onnx import: float16 initializer, bad raw_data size, external data", "[onnx][errors]") {
  auto model = [](auto&& edit) {
    ModelBuilder b;
    b.input("x", {kBatch, 2});
    b.initializer("w", {2}, {1.0f, 2.0f});
    edit(*b.graph()->mutable_initializer(0));
    b.node("Mul", {"x", "w"}, {"y"});
    b.output("y");
    return importError(b);
  };
  CHECK_THAT(model([](onnx::TensorProto& t) {
               t.set_data_type(onnx::TensorProto::FLOAT16);
               t.set_raw_data(std::string(4, '\0'));
             }),
             Contains("initializer 'w'") && Contains("FLOAT16"));
  CHECK_THAT(model([](onnx::TensorProto& t) { t.set_raw_data(std::string(5, '\0')); }),
             Contains("initializer 'w'") && Contains("raw_data"));
  CHECK_THAT(model([](onnx::TensorProto& t) {
               t.clear_raw_data();
               t.set_data_location(onnx::TensorProto::EXTERNAL);
               auto* e = t.add_external_data();
               e->set_key("location");
               e->set_value("weights.bin");
             }),
             Contains("initializer 'w'") && Contains("external"));
  CHECK_THAT(model([](onnx::TensorProto& t) {
               t.clear_raw_data();
               t.add_float_data(1.0f);
             }),
             Contains("initializer 'w'") && Contains("float_data"));
}

TEST_CASE("onnx import: undefined input names and outputs", "[onnx][errors]") {
  ModelBuilder b;
  b.input("x", {kBatch, 4});
  b.node("Add", {"x", "ghost"}, {"y"}, "add0");
  b.output("y");
  CHECK_THAT(importError(b), Contains("'add0'") && Contains("'ghost'") && Contains("not defined"));

  ModelBuilder c;
  c.input("x", {kBatch, 4});
  c.node("Relu", {"x"}, {"y"});
  c.output("nowhere");
  CHECK_THAT(importError(c), Contains("'nowhere'"));
}

TEST_CASE("onnx import: non-constant input where the IR needs an attribute", "[onnx][errors]") {
  ModelBuilder b;
  b.input("x", {kBatch, 4});
  b.input("shape", {2}, onnx::TensorProto::INT64);
  b.node("Reshape", {"x", "shape"}, {"y"}, "dyn_reshape");
  b.output("y");
  CHECK_THAT(importError(b), Contains("'dyn_reshape'") && Contains("constant"));
}

TEST_CASE("onnx import: support queries and TensorProto files", "[onnx]") {
  CHECK(frontend::isSupportedOnnxOp("", "Gemm"));
  CHECK(frontend::isSupportedOnnxOp("ai.onnx", "ConstantOfShape"));
  CHECK(frontend::isSupportedOnnxOp("", "LSTM"));
  CHECK_FALSE(frontend::isSupportedOnnxOp("", "NonMaxSuppression"));
  CHECK_FALSE(frontend::isSupportedOnnxOp("com.microsoft", "Gemm"));
  CHECK(frontend::isSupportedOnnxType(onnx::TensorProto::UINT8));
  CHECK_FALSE(frontend::isSupportedOnnxType(onnx::TensorProto::FLOAT16));

  onnx::TensorProto t;
  ModelBuilder::fillFloat(t, "input_0", {2, 2}, {1, 2, 3, 4}, /*raw=*/true);
  auto path = tempPath("tensor.pb");
  {
    std::ofstream out(path, std::ios::binary);
    out << t.SerializeAsString();
  }
  ir::Tensor read = frontend::readOnnxTensorFile(path.string());
  CHECK(read.type().str() == "f32[2,2]");
  CHECK(read.data<float>()[3] == 4.0f);
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string("\xff\xff\xff\xff\x0f", 5);
  }
  CHECK_THROWS_WITH(frontend::readOnnxTensorFile(path.string()), Contains(path.string()));
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------------------------------------
// Example models (examples/models, made by make_models.py), against PyTorch's outputs

#ifdef POLICYC_SOURCE_DIR

// A minimal .npy reader: little-endian f4/f8/i8/i4/u1/b1, C order.
std::optional<ir::Tensor> readNpy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::string data = buffer.str();
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) return std::nullopt;
  size_t headerLen = 0, offset = 0;
  if (data[6] == 1) {
    headerLen = static_cast<unsigned char>(data[8]) | (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    offset = 10;
  } else {
    for (int i = 3; i >= 0; --i)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(data[8 + static_cast<size_t>(i)]);
    offset = 12;
  }
  std::string header = data.substr(offset, headerLen);
  auto field = [&](const std::string& key) {
    size_t k = header.find("'" + key + "'");
    return k == std::string::npos ? std::string() : header.substr(header.find(':', k) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  std::string shapeText = field("shape");
  shapeText = shapeText.substr(shapeText.find('(') + 1);
  shapeText = shapeText.substr(0, shapeText.find(')'));
  std::vector<int64_t> shape;
  for (size_t pos = 0; pos < shapeText.size();) {
    size_t end = shapeText.find(',', pos);
    std::string item = shapeText.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (item.find_first_of("0123456789") != std::string::npos) shape.push_back(std::stoll(item));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  static const std::map<std::string, ir::DType> kinds = {
      {"<f4", ir::DType::F32}, {"<f8", ir::DType::F64}, {"<i8", ir::DType::I64}, {"<i4", ir::DType::I32},
      {"|u1", ir::DType::U8},  {"|i1", ir::DType::I8},  {"|b1", ir::DType::Bool}};
  auto kind = kinds.find(descr);
  if (kind == kinds.end()) return std::nullopt;
  const char* payload = data.data() + offset + headerLen;
  size_t bytes = data.size() - offset - headerLen;
  return ir::Tensor::fromBytes(kind->second, shape, payload, bytes);
}

TEST_CASE("onnx import: ppo_mlp signature", "[onnx][models]") {
  std::filesystem::path path = std::filesystem::path(POLICYC_SOURCE_DIR) / "examples/models/ppo_mlp.onnx";
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path << " does not exist (run examples/models/make_models.py)");
    return;
  }
  auto g = frontend::importOnnxFile(path.string());
  REQUIRE(g->inputs().size() == 1);
  CHECK(g->inputs()[0]->name() == "obs");
  CHECK(g->inputs()[0]->type().str() == "f32[batch,17]");
  auto outs = g->outputs();
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].first == "action_dist_inputs");
  CHECK(outs[0].second->type().str() == "f32[batch,12]");
  CHECK(outs[1].first == "vf");
  CHECK(outs[1].second->type().str() == "f32[batch,1]");
}

TEST_CASE("onnx import: example models match the PyTorch reference outputs", "[onnx][models]") {
  const std::filesystem::path root(POLICYC_SOURCE_DIR);
  const std::vector<std::string> models = {"ppo_mlp",   "atari_cnn",    "impala_cnn",
                                           "sac_actor", "uint8_convbn", "multi_input"};
  for (const std::string& model : models) {
    std::filesystem::path onnxPath = root / "examples/models" / (model + ".onnx");
    if (!std::filesystem::exists(onnxPath)) {
      WARN("skipped " << model << ": " << onnxPath << " does not exist");
      continue;
    }
    INFO("model " << model);
    auto g = frontend::importOnnxFile(onnxPath.string());
    for (int batch : {1, 3}) {
      INFO("batch " << batch);
      std::map<std::string, ir::Tensor> inputs;
      bool haveData = true;
      for (ir::Value* v : g->inputs()) {
        auto t = readNpy(root / "tests/data" / model / fmt::format("in_b{}_{}.npy", batch, v->name()));
        if (!t) {
          haveData = false;
          break;
        }
        inputs.emplace(v->name(), std::move(*t));
      }
      if (!haveData) {
        WARN("skipped " << model << " batch " << batch << ": no reference inputs");
        continue;
      }
      std::map<std::string, ir::Tensor> outputs = ir::interpretNamed(*g, inputs);
      for (const auto& [name, actual] : outputs) {
        INFO("output " << name);
        auto expected = readNpy(root / "tests/data" / model / fmt::format("out_b{}_{}.npy", batch, name));
        REQUIRE(expected);
        REQUIRE(actual.shape() == expected->shape());
        REQUIRE(actual.dtype() == expected->dtype());
        int bad = 0;
        for (int64_t i = 0; i < actual.numel(); ++i) {
          double a = actual.getAsDouble(i), e = expected->getAsDouble(i);
          if (std::abs(a - e) > 1e-4 + 1e-4 * std::abs(e)) ++bad;
        }
        CHECK(bad == 0);
      }
    }
  }
}

#endif  // POLICYC_SOURCE_DIR

}  // namespace

// ---- opsets 18-21: the forms Debian's ONNX 1.12 cannot write, built by hand

namespace {

// The graph's outputs on `inputs` through the interpreter.
std::vector<ir::Tensor> run(const ModelBuilder& b, const std::vector<ir::Tensor>& inputs) {
  return ir::interpret(*b.import(), inputs);
}

}  // namespace

TEST_CASE("onnx import: opset 18 ReduceMean axes as an input, Split num_outputs, Pad axes, Mish", "[onnx][opset18]") {
  ModelBuilder b(18);
  b.input("x", {kBatch, 5});
  b.constI64("axes", {1});
  onnx::NodeProto& mean = b.node("ReduceMean", {"x", "axes"}, {"m"});
  setInt(mean, "keepdims", 0);
  onnx::NodeProto& split = b.node("Split", {"x"}, {"s0", "s1"});
  setInt(split, "axis", 1);
  setInt(split, "num_outputs", 2);  // 5 = 3 + 2: the last part smaller
  b.constI64("pads", {1, 2});
  b.constI64("pad_axes", {-1});
  b.node("Pad", {"x", "pads", "", "pad_axes"}, {"p"});
  b.node("Mish", {"x"}, {"mish"});
  for (const char* o : {"m", "s0", "s1", "p", "mish"}) b.output(o);
  const ir::Tensor x = f32({2, 5}, {1, 2, 3, 4, 5, -1, 0, 1, 2, 8});
  std::vector<ir::Tensor> out = run(b, {x});
  REQUIRE(out.size() == 5);
  CHECK(out[0].bitEqual(f32({2}, {3, 2})));
  CHECK(out[1].bitEqual(f32({2, 3}, {1, 2, 3, -1, 0, 1})));
  CHECK(out[2].bitEqual(f32({2, 2}, {4, 5, 2, 8})));
  CHECK(out[3].bitEqual(f32({2, 8}, {0, 1, 2, 3, 4, 5, 0, 0, 0, -1, 0, 1, 2, 8, 0, 0})));
  for (int64_t i = 0; i < 10; ++i) {
    const double v = x.data<float>()[i], want = v * std::tanh(std::log1p(std::exp(v)));
    CHECK(out[4].data<float>()[i] == Catch::Detail::Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("onnx import: opset 18-19 forms policyc refuses name what and where", "[onnx][opset18][errors]") {
  ModelBuilder split(18);
  split.input("x", {kBatch, 4});
  onnx::NodeProto& n = split.node("Split", {"x"}, {"a", "b"}, "halves");
  setInt(n, "num_outputs", 3);
  split.output("a");
  split.output("b");
  CHECK_THAT(importError(split), Contains("'halves'") && Contains("num_outputs=3 but the node has 2 outputs"));

  ModelBuilder wrap(19);
  wrap.input("x", {kBatch, 4});
  wrap.constI64("pads", {0, 1, 0, 1});
  onnx::NodeProto& p = wrap.node("Pad", {"x", "pads"}, {"y"}, "wrapped");
  setString(p, "mode", "wrap");
  wrap.output("y");
  CHECK_THAT(importError(wrap), Contains("'wrapped'") && Contains("mode 'wrap' is not supported"));

  ModelBuilder dilated(19);
  dilated.input("x", {kBatch, 1, 6, 6});
  onnx::NodeProto& a = dilated.node("AveragePool", {"x"}, {"y"}, "pool");
  setInts(a, "kernel_shape", {2, 2});
  setInts(a, "dilations", {2, 2});
  dilated.output("y");
  CHECK_THAT(importError(dilated), Contains("'pool'") && Contains("dilations=[2,2] are not supported"));
}

TEST_CASE("onnx import: opset 19 AveragePool with dilations 1, opset 20-21 Gelu (none and tanh)", "[onnx][opset20]") {
  ModelBuilder pool(19);
  pool.input("x", {kBatch, 1, 2, 2});
  onnx::NodeProto& a = pool.node("AveragePool", {"x"}, {"y"});
  setInts(a, "kernel_shape", {2, 2});
  setInts(a, "dilations", {1, 1});
  pool.output("y");
  CHECK(run(pool, {f32({1, 1, 2, 2}, {1, 2, 3, 6})})[0].bitEqual(f32({1, 1, 1, 1}, {3})));

  for (int64_t opset : {20, 21}) {
    ModelBuilder b(opset);
    b.input("x", {kBatch, 4});
    b.node("Gelu", {"x"}, {"erf"});
    onnx::NodeProto& t = b.node("Gelu", {"x"}, {"tanh"});
    setString(t, "approximate", "tanh");
    b.output("erf");
    b.output("tanh");
    const ir::Tensor x = f32({1, 4}, {-2, -0.5f, 0.5f, 3});
    std::vector<ir::Tensor> out = run(b, {x});
    for (int64_t i = 0; i < 4; ++i) {
      const double v = x.data<float>()[i];
      CHECK(out[0].data<float>()[i] == Catch::Detail::Approx(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-6));
      const double tanhForm = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      CHECK(out[1].data<float>()[i] == Catch::Detail::Approx(tanhForm).epsilon(1e-6));
    }
  }
  ModelBuilder bad(20);
  bad.input("x", {kBatch, 4});
  setString(bad.node("Gelu", {"x"}, {"y"}, "g"), "approximate", "sigmoid");
  bad.output("y");
  CHECK_THAT(importError(bad), Contains("'g'") && Contains("approximate='sigmoid' is not supported"));
}

TEST_CASE("onnx import: recurrent layers refuse hostile lengths and sizes by name", "[onnx][errors]") {
  auto lstm = [](int64_t seq, int64_t hidden) {
    ModelBuilder b;
    b.input("x", {seq, 2, 3});
    b.input("w", {1, 16, 3});
    b.input("r", {1, 16, 4});
    setInt(b.node("LSTM", {"x", "w", "r"}, {"y"}, "rnn"), "hidden_size", hidden);
    b.output("y");
    return importError(b);
  };
  CHECK_THAT(lstm(5000, 4), Contains("'rnn'") && Contains("a sequence of 5000 steps is longer than policyc unrolls"));
  CHECK_THAT(lstm(2, int64_t{1} << 62), Contains("'rnn'") && Contains("hidden_size must be between 1 and"));
  CHECK_THAT(lstm(2, 5), Contains("'rnn'") && Contains("W must be [1, 20, *]"));
}

// ---------------------------------------------------------------------------------------------
// Einsum, checked against a direct sum over every assignment of the labels.

// einsum with an explicit output over letter labels, as a loop over every label assignment.
ir::Tensor naiveEinsum(const std::string& eq, const std::vector<ir::Tensor>& ins) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::stringstream lhs(eq.substr(0, arrow));
  for (std::string t; std::getline(lhs, t, ',');) terms.push_back(t);
  const std::string out = eq.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    for (size_t k = 0; k < terms[i].size(); ++k) size[terms[i][k]] = ins[i].shape()[k];
  }
  std::vector<int64_t> outShape;
  for (char l : out) outShape.push_back(size[l]);
  ir::Tensor result(ir::DType::F32, outShape);
  std::vector<char> labels;
  for (auto [l, n] : size) labels.push_back(l);
  std::map<char, int64_t> at;
  std::function<void(size_t)> walk = [&](size_t li) {
    if (li < labels.size()) {
      for (at[labels[li]] = 0; at[labels[li]] < size[labels[li]]; ++at[labels[li]]) walk(li + 1);
      return;
    }
    double prod = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t flat = 0;
      for (char l : terms[i]) flat = flat * size[l] + at[l];
      prod *= ins[i].getAsDouble(flat);
    }
    int64_t flat = 0;
    for (char l : out) flat = flat * size[l] + at[l];
    result.setAsDouble(flat, result.getAsDouble(flat) + prod);
  };
  walk(0);
  return result;
}

TEST_CASE("onnx import: Einsum as transposes, reductions and batched matmuls", "[onnx]") {
  struct Case {
    std::string eq;                          // as the model writes it
    std::string explicitEq;                  // with the output spelled out, for the reference
    std::vector<std::vector<int64_t>> dims;  // operands; 2 stands for the batch where a term starts with 'b'
  };
  const std::vector<Case> cases = {
      {"bihd,bjhd->bhij", "bihd,bjhd->bhij", {{2, 3, 2, 4}, {2, 5, 2, 4}}},  // attention scores
      {"bhij,bjhd->bihd", "bhij,bjhd->bihd", {{2, 2, 3, 5}, {2, 5, 2, 4}}},  // attention-weighted values
      {"bi,ij", "bi,ij->bj", {{2, 3}, {3, 4}}},                               // implicit output
      {"bij->bji", "bij->bji", {{2, 3, 4}}},
      {"bij->b", "bij->b", {{2, 3, 4}}},
      {"bi,bi->b", "bi,bi->b", {{2, 5}, {2, 5}}},
      {"bi,j->bij", "bi,j->bij", {{2, 3}, {4}}},                              // outer product
      {"bi,ij,jk->bk", "bi,ij,jk->bk", {{2, 3}, {3, 4}, {4, 2}}},
      {"bkij,bkj->bki", "bkij,bkj->bki", {{2, 3, 2, 4}, {2, 3, 4}}},
      {"bij,jk,il->blk", "bij,jk,il->blk", {{2, 3, 4}, {4, 2}, {3, 5}}},      // rows and columns of two labels
      {"bii->bi", "bii->bi", {{2, 3, 3}}},                                    // a diagonal
      {"...ij,...jk->...ik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},         // ellipsis
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.eq) {
      ModelBuilder b(13);
      std::vector<std::string> names;
      std::vector<ir::Tensor> values, inputs;
      for (size_t i = 0; i < c.dims.size(); ++i) {
        names.push_back("x" + std::to_string(i));
        std::vector<int64_t> dims = c.dims[i];
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        std::vector<float> data;
        for (int64_t k = 0; k < n; ++k) data.push_back(static_cast<float>((k * 7 + static_cast<int64_t>(i) * 3) % 11) / 4.0f - 1.0f);
        values.push_back(f32(dims, data));
        // Operands with the batch label 'b' first are graph inputs; the others weights.
        std::stringstream terms(c.explicitEq.substr(0, c.explicitEq.find("->")));
        std::string term;
        for (size_t k = 0; k <= i; ++k) std::getline(terms, term, ',');
        if (term.front() == 'b') {
          dims[0] = kBatch;
          b.input(names.back(), dims);
          inputs.push_back(values.back());
        } else {
          b.initializer(names.back(), dims, data);
        }
      }
      setString(b.node("Einsum", names, {"y"}, "es"), "equation", c.eq);
      b.output("y");
      auto g = b.import();
      ir::Tensor want = naiveEinsum(c.explicitEq, values);
      auto got = ir::interpret(*g, inputs);
      REQUIRE(got[0].shape() == want.shape());
      for (int64_t k = 0; k < want.numel(); ++k) CHECK(got[0].getAsDouble(k) == Approx(want.getAsDouble(k)).margin(1e-5));
    }
  }
  SECTION("errors name the node and the equation") {
    ModelBuilder b(13);
    b.input("x", {kBatch, 3});
    setString(b.node("Einsum", {"x"}, {"y"}, "bad"), "equation", "bij->b");
    b.output("y");
    CHECK_THAT(importError(b), Contains("'bad'") && Contains("'bij'") && Contains("names 3 dims, its input has 2"));
  }
}

// nn.MultiheadAttention's export: [T, batch, E] reshaped to [T, batch*H, D] from Shape arithmetic,
// transposed, a batched matmul, softmax, and back through [T*batch, E] into a Gemm.
TEST_CASE("onnx import: dims that are multiples of the batch size (attention heads)", "[onnx]") {
  const int64_t T = 3, H = 2, D = 2, E = H * D;
  ModelBuilder b(13);
  b.input("x_in", {kBatch, T, E});
  setInts(b.node("Transpose", {"x_in"}, {"x"}), "perm", {1, 0, 2});  // [T, batch, E]
  b.node("Shape", {"x"}, {"s"});
  b.constI64("i0", {0}, true);
  b.constI64("i1", {1}, true);
  b.node("Gather", {"s", "i0"}, {"t"});
  b.node("Gather", {"s", "i1"}, {"bsz"});
  b.constI64("heads", {H}, true);
  b.node("Mul", {"bsz", "heads"}, {"bh"}, "batch_times_heads");
  b.constI64("ax0", {0});
  b.node("Unsqueeze", {"t", "ax0"}, {"t1"});
  b.node("Unsqueeze", {"bh", "ax0"}, {"bh1"});
  b.constI64("d1", {D});
  setInt(b.node("Concat", {"t1", "bh1", "d1"}, {"heads_shape"}), "axis", 0);
  b.node("Reshape", {"x", "heads_shape"}, {"q"}, "split_heads");  // [T, batch*H, D]
  setInts(b.node("Transpose", {"q"}, {"qt"}), "perm", {1, 0, 2});  // [batch*H, T, D]
  setInts(b.node("Transpose", {"q"}, {"kt"}), "perm", {1, 2, 0});  // [batch*H, D, T]
  b.node("MatMul", {"qt", "kt"}, {"scores"});                     // [batch*H, T, T]
  setInt(b.node("Softmax", {"scores"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "qt"}, {"o"});                           // [batch*H, T, D]
  setInts(b.node("Transpose", {"o"}, {"ot"}), "perm", {1, 0, 2});  // [T, batch*H, D]
  b.node("Mul", {"t", "bsz"}, {"tb"});
  b.node("Unsqueeze", {"tb", "ax0"}, {"tb1"});
  b.constI64("e1", {E});
  setInt(b.node("Concat", {"tb1", "e1"}, {"rows_shape"}), "axis", 0);
  b.node("Reshape", {"ot", "rows_shape"}, {"rows"});  // [T*batch, E]
  std::vector<float> w(static_cast<size_t>(E * E));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 5) / 5.0f - 0.3f;
  b.initializer("w", {E, E}, w);
  setInt(b.node("Gemm", {"rows", "w"}, {"proj"}, "out_proj"), "transB", 1);
  b.node("Unsqueeze", {"bsz", "ax0"}, {"b1"});
  setInt(b.node("Concat", {"t1", "b1", "e1"}, {"back_shape"}), "axis", 0);
  b.node("Reshape", {"proj", "back_shape"}, {"y_tbe"});  // [T, batch, E]
  setInts(b.node("Transpose", {"y_tbe"}, {"y"}), "perm", {1, 0, 2});
  b.output("y");

  SECTION("the graph keeps the batch a dim of its own and matches the arithmetic") {
    auto g = b.import();
    CHECK(g->outputs()[0].second->type().str() == "f32[batch,3,4]");
    const int64_t batch = 2;
    std::vector<float> xv(static_cast<size_t>(T * batch * E));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 5) % 9) / 3.0f - 1.0f;
    auto got = ir::interpret(*g, {f32({batch, T, E}, xv)});
    // The reference, written out: per batch row and head, softmax(q q^T) q, then x W^T.
    auto X = [&](int64_t t, int64_t bb, int64_t e) { return static_cast<double>(xv[static_cast<size_t>((bb * T + t) * E + e)]); };
    for (int64_t bb = 0; bb < batch; ++bb) {
      std::vector<double> att(static_cast<size_t>(T * E));
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> s(static_cast<size_t>(T));
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < T; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += X(i, bb, h * D + d) * X(j, bb, h * D + d);
            s[static_cast<size_t>(j)] = dot;
            mx = std::max(mx, dot);
          }
          for (double& v : s) sum += (v = std::exp(v - mx));
          for (int64_t d = 0; d < D; ++d) {
            double acc = 0;
            for (int64_t j = 0; j < T; ++j) acc += s[static_cast<size_t>(j)] / sum * X(j, bb, h * D + d);
            att[static_cast<size_t>(i * E + h * D + d)] = acc;
          }
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t n = 0; n < E; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < E; ++k) acc += att[static_cast<size_t>(i * E + k)] * w[static_cast<size_t>(n * E + k)];
          CHECK(got[0].getAsDouble((bb * T + i) * E + n) == Approx(acc).margin(1e-5));
        }
      }
    }
  }
  SECTION("a value with such a dim is not a graph output") {
    b.graph()->mutable_output(0)->set_name("q");
    CHECK_THAT(importError(b), Contains("'q'") && Contains("[3,2*batch,2]") && Contains("multiple of the batch size"));
  }
}

// The composed operators' refusals: one error naming the node and what is not supported.
TEST_CASE("onnx import: composed operators refuse what they cannot compose, by name", "[onnx]") {
  SECTION("Resize of the batch dim") {
    ModelBuilder b(13);
    b.input("x", {kBatch, 2, 4, 4});
    b.initializer("scales", {4}, {2, 1, 2, 2});
    setString(b.node("Resize", {"x", "", "scales"}, {"y"}, "up"), "mode", "nearest");
    b.output("y");
    CHECK_THAT(importError(b), Contains("'up'") && Contains("changes the batch dim"));
  }
  SECTION("TopK of integers") {
    ModelBuilder b(13);
    b.input("x", {kBatch, 5}, onnx::TensorProto::INT64);
    b.initializerI64("k", {1}, {2});
    b.node("TopK", {"x", "k"}, {"v", "i"}, "top");
    b.output("v", onnx::TensorProto::INT64);
    CHECK_THAT(importError(b), Contains("'top'") && Contains("float input"));
  }
  SECTION("ScatterElements into batch-sized data") {
    ModelBuilder b(16);
    b.input("x", {kBatch, 5});
    b.input("u", {1, 2});
    b.initializerI64("i", {1, 2}, {0, 1});
    b.node("ScatterElements", {"x", "i", "u"}, {"y"}, "scatter");
    b.output("y");
    CHECK_THAT(importError(b), Contains("'scatter'") && Contains("static shapes"));
  }
  SECTION("CumSum along the batch dim") {
    ModelBuilder b(14);
    b.input("x", {kBatch, 3});
    b.initializerI64("axis", {}, {0});
    b.node("CumSum", {"x", "axis"}, {"y"}, "cs");
    b.output("y");
    CHECK_THAT(importError(b), Contains("'cs'") && Contains("batch dim"));
  }
  SECTION("ConvTranspose with a weight computed at run time") {
    ModelBuilder b(13);
    b.input("x", {kBatch, 1, 3, 3});
    b.input("w", {1, 1, 2, 2});
    b.node("ConvTranspose", {"x", "w"}, {"y"}, "deconv");
    b.output("y");
    CHECK_THAT(importError(b), Contains("'deconv'") && Contains("must be a constant"));
  }
  SECTION("OneHot with a depth computed at run time") {
    ModelBuilder b(11);
    b.input("i", {kBatch}, onnx::TensorProto::INT64);
    b.input("d", {}, onnx::TensorProto::INT64);
    b.initializer("values", {2}, {0, 1});
    b.node("OneHot", {"i", "d", "values"}, {"y"}, "hot");
    b.output("y");
    CHECK_THAT(importError(b), Contains("'hot'") && Contains("depth") && Contains("must be a constant"));
  }
}

// Resize through the interpreter against values worked out by hand (ONNX's half_pixel linear on
// a 1x1x2x2 input upsampled 2x, and nearest asymmetric).
TEST_CASE("onnx import: Resize linear and nearest match hand-computed values", "[onnx]") {
  auto resize = [](const std::string& mode, const std::string& coords) {
    ModelBuilder b(13);
    b.input("x", {kBatch, 1, 2, 2});
    b.initializer("scales", {4}, {1, 1, 2, 2});
    onnx::NodeProto& n = b.node("Resize", {"x", "", "scales"}, {"y"}, "r");
    setString(n, "mode", mode);
    setString(n, "coordinate_transformation_mode", coords);
    b.output("y");
    auto g = b.import();
    return ir::interpret(*g, {f32({1, 1, 2, 2}, {1, 2, 3, 4})})[0];
  };
  ir::Tensor lin = resize("linear", "half_pixel");
  REQUIRE(lin.shape() == std::vector<int64_t>{1, 1, 4, 4});
  // Row 0 along W: source positions -0.25, 0.25, 0.75, 1.25 clamp to the edge: 1, 1.25, 1.75, 2.
  const std::vector<double> row0 = {1, 1.25, 1.75, 2};
  for (int64_t i = 0; i < 4; ++i) CHECK(lin.getAsDouble(i) == Approx(row0[static_cast<size_t>(i)]));
  // Row 1 (source 0.25 along H): a quarter of the way to the second row (+0.5).
  for (int64_t i = 0; i < 4; ++i) CHECK(lin.getAsDouble(4 + i) == Approx(row0[static_cast<size_t>(i)] + 0.5));
  ir::Tensor nn = resize("nearest", "asymmetric");
  const std::vector<double> want = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
  for (int64_t i = 0; i < 16; ++i) CHECK(nn.getAsDouble(i) == want[static_cast<size_t>(i)]);
}
