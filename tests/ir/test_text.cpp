// The .pir text form: exact round trips, sidecar files, and parse errors with file:line:col.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"

using namespace policyc;
using namespace policyc::ir;

namespace {

const char* kSmall = R"(graph tiny(%x: f32[batch,4], %"onnx::in:0": f32[batch,2]) {
  %w = param f32[3,4] [0.1, -2.5, 3, 1e-08, 0, -0, 3.4028235e+38, 1.5, 7, 8, 9, 10]
  %shape = param i64[2] [0, -1]
  %fc = gemm(%x, %w) {alpha=0.5, trans_b=1} : f32[batch,3] loc("/fc/Gemm")
  %a, %b = split(%x) {axis=1, split=[1,3]} : f32[batch,1], f32[batch,3]
  %c = concat(%a, %b, %"onnx::in:0") {axis=-1} : f32[batch,6]
  %r = reshape(%c) {shape=[0,-1]} : f32[batch,6]
  %cl = clip(%r) {min=-1.0} : f32[batch,6] loc("Clip_1", "Relu_2")
  return (y=%fc, "out:1"=%cl, "3"=%r, ".5"=%a)
}
)";

}  // namespace

TEST_CASE("text: parse then print reproduces the text exactly", "[text]") {
  auto g = parseGraph(kSmall, "tiny.pir");
  CHECK(printGraph(*g).text == kSmall);
  CHECK(g->findValue("onnx::in:0") != nullptr);
  CHECK(g->findValue("cl")->producer()->provenance() == std::vector<std::string>{"Clip_1", "Relu_2"});
  CHECK(g->findValue("fc")->producer()->attrFloat("beta") == 1.0);  // default filled in
  CHECK(std::isinf(g->findValue("cl")->producer()->attrFloat("max")));
  const Tensor& w = g->findValue("w")->producer()->paramData();
  CHECK(w.data<float>()[6] == std::numeric_limits<float>::max());
  CHECK(std::signbit(w.data<float>()[5]));
  // Output names that would read as numbers (PyTorch's exports name values "3") are quoted.
  CHECK(g->outputs()[2].first == "3");
  CHECK(g->outputs()[3].first == ".5");
}

TEST_CASE("text: large params go to the sidecar, bit-exact, through files", "[text]") {
  Graph g("side");
  Value* x = g.addInput("x", {DType::F32, {Dim::batch(), 64}});
  Tensor w(DType::F32, {8, 64});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::nextafter(static_cast<float>(i) / 3.0f, 1e9f);
  Tensor b(DType::F32, {8});
  b.data<float>()[0] = std::numeric_limits<float>::denorm_min();
  Value* wv = g.addParam("w", w);
  Value* bv = g.addParam("b", b);
  Node* fc = g.addOp(Op::Gemm, {x, wv, bv}, {{"trans_b", int64_t{1}}}, "fc");
  g.setOutputs({{"y", fc->output()}});

  PrintedGraph printed = printGraph(g);
  CHECK(printed.text.find("%w = param f32[8,64] @0") != std::string::npos);
  CHECK(printed.sidecar.size() == w.nbytes());

  auto dir = std::filesystem::temp_directory_path() / "policyc_test_text";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "side.pir").string();
  writePir(g, path);
  auto back = readPir(path);
  CHECK(back->findValue("w")->producer()->paramData().bitEqual(w));
  CHECK(back->findValue("b")->producer()->paramData().bitEqual(b));
  CHECK(printGraph(*back).text == printed.text);
}

TEST_CASE("text: parse errors name file, line, column and what was expected", "[text][bad-input]") {
  auto err = [](const std::string& text) -> std::string {
    try {
      parseGraph(text, "m.pir");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%z) : f32[2]\n  return (y=%y)\n}\n"),
             Catch::StartsWith("m.pir:2:13: use of undefined value '%z'"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = frobnicate(%x) : f32[2]\n  return (y=%y)\n}\n"),
             Catch::StartsWith("m.pir:2:8: unknown operator 'frobnicate'"));
  CHECK_THAT(err("graph g(%x: f99[2]) {\n}\n"), Catch::StartsWith("m.pir:1:13: unknown dtype 'f99'"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%x) f32[2]\n  return (y=%y)\n}\n"),
             Catch::StartsWith("m.pir:2:17: expected ':', got identifier 'f32'"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[3]\n  return (y=%y)\n}\n"),
             Catch::Contains("declared f32[3] but the operator gives f32[2]"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%x) {alpha=1.0} : f32[2]\n  return (y=%y)\n}\n"),
             Catch::Contains("no attribute 'alpha'"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %w = param f32[3] [1, 2]\n  return (y=%w)\n}\n"),
             Catch::Contains("expected 3 values"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %w = param f32[300] @0\n  return (y=%w)\n}\n"),
             Catch::Contains("no sidecar") || Catch::Contains("none was found"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[2]\n"), Catch::Contains("got end of file"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[2]\n  %y = relu(%x) : f32[2]\n  return (y=%y)\n}\n"),
             Catch::StartsWith("m.pir:3:3: value '%y' is defined twice"));
  CHECK_THAT(err("graph g(%x: u8[2]) {\n  %w = param u8[1] [300]\n  return (y=%w)\n}\n"),
             Catch::Contains("300 does not fit in u8"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[2]\n  return (y=%y)\n}\ntrailing"),
             Catch::Contains("expected end of file"));
  CHECK_THAT(err("graph g(%x: f32[2]) {\n  %s = \"unterminated\n}"), Catch::Contains("unterminated string"));
}

TEST_CASE("text: readPir of a missing file is a clear error", "[text][bad-input]") {
  CHECK_THROWS_WITH(readPir("/nonexistent/model.pir"), Catch::Contains("cannot read '/nonexistent/model.pir'"));
}

TEST_CASE("text: sidecar range outside the file is an error", "[text][bad-input]") {
  std::vector<std::byte> sidecar(16);
  CHECK_THROWS_WITH(parseGraph("graph g(%x: f32[2]) {\n  %w = param f32[8] @8\n  return (y=%w)\n}\n", "m.pir", sidecar),
                    Catch::Contains("outside the sidecar"));
}
