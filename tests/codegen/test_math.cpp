// The f32 math both backends generate (polynomial exp, log, erf, tanh, sigmoid and what is built
// from them): within a few ulps of the interpreter's libm over a sweep of ordinary values, and the
// interpreter's answer exactly on NaN, infinities, zeros and denormals. And where the C++
// backend places a pointwise kernel's instructions in its loop nest.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/driver/model_io.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/loader.h"
#include "support/scratch_dir.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

const fs::path& scratch() { return testing::scratchDir("policyc-math-test"); }

// Every unary f32 op whose generated code is a polynomial rather than libm's.
const char* const kMathGraph = R"(graph math(%x: f32[batch,N]) {
  %exp = exp(%x) : f32[batch,N]
  %log = log(%x) : f32[batch,N]
  %erf = erf(%x) : f32[batch,N]
  %tanh = tanh(%x) : f32[batch,N]
  %sigmoid = sigmoid(%x) : f32[batch,N]
  %softplus = softplus(%x) : f32[batch,N]
  %elu = elu(%x) {alpha=0.7} : f32[batch,N]
  %selu = selu(%x) : f32[batch,N]
  %gelu = gelu(%x) : f32[batch,N]
  %silu = silu(%x) : f32[batch,N]
  return (exp=%exp, log=%log, erf=%erf, tanh=%tanh, sigmoid=%sigmoid, softplus=%softplus, elu=%elu, selu=%selu, gelu=%gelu, silu=%silu)
})";

std::vector<float> sweep() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 0.0f, -0.0f, 1e-45f, 1e-40f, -1e-40f,
                          1.17549435e-38f, 3e-38f, 88.0f, 88.8f, 89.0f, -87.5f, -104.0f, -200.0f, 200.0f, 20.0f, -20.0f,
                          // tanh's range edge (its rational form up to 7.99881172, +-1 past it)
                          7.99881172f, 7.9988122f, -7.9988122f, 8.65442181f, -8.65442181f, 0.0004f, -0.00039999f};
  for (int i = -4000; i <= 4000; ++i) x.push_back(static_cast<float>(i) / 400.0f);  // -10 .. 10
  for (int e = -30; e <= 30; ++e) x.push_back(std::ldexp(1.37f, e));
  while (x.size() % 16) x.push_back(0.5f);
  return x;
}

// Relative error bounds per output (the polynomials' documented accuracy with room for the
// operations around them); near zero the absolute bound decides.
double tolerance(const std::string& name, double want) {
  double rel = 4e-6, abs = 1e-7;
  if (name == "erf" || name == "gelu") abs = 4e-7;  // A&S 7.1.26: 1.5e-7 absolute
  if (name == "elu" || name == "selu") abs = 4e-7;  // exp(x) - 1 near 0
  if (name == "exp" || name == "softplus") rel = 8e-6;
  return rel * std::fabs(want) + abs;
}

std::string mathGraphText(size_t n) {
  std::string s = kMathGraph;
  for (size_t at; (at = s.find(",N]")) != std::string::npos;) s.replace(at, 3, fmt::format(",{}]", n));
  return s;
}

void checkAgainstInterpreter(const ir::Graph& graph, runtime::Model& model, const std::vector<float>& x, const char* backend) {
  const int64_t batch = static_cast<int64_t>(x.size() / 16);
  std::vector<ir::Tensor> inputs = {ir::Tensor::fromVector(ir::DType::F32, {batch, 16}, x)};
  std::vector<ir::Tensor> want = ir::interpret(graph, inputs);
  std::vector<ir::Tensor> got = driver::runModel(model, inputs, 1);
  REQUIRE(got.size() == want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    const std::string name = graph.outputs()[o].first;
    int bad = 0;
    for (size_t i = 0; i < x.size() && bad < 5; ++i) {
      const double w = want[o].getAsDouble(static_cast<int64_t>(i)), g = got[o].getAsDouble(static_cast<int64_t>(i));
      const bool ok = std::isnan(w) ? std::isnan(g)
                      : std::isinf(w) ? g == w
                                      : std::fabs(g - w) <= tolerance(name, w);
      if (!ok) {
        ++bad;
        FAIL_CHECK(fmt::format("{}: {}({:.9g}) = {:.9g}, libm {:.9g}", backend, name, x[i], g, w));
      }
    }
  }
}

}  // namespace

TEST_CASE("math: both backends' f32 polynomials agree with libm, specials exactly", "[codegen][math]") {
  auto graph = ir::parseGraph(mathGraphText(16));
  const std::vector<float> x = sweep();
  SECTION("cpp and llvm bit for bit") {
    // GCC folds a constant's polynomial at compile time without the FMAs a vector loop uses: an
    // ulp from the LLVM backend's where the code let it (tanh past its range, clamped once).
    fs::path so = scratch() / "math_both.so";
    codegen::buildSharedObject(codegen::generateCpp(*graph), so.string());
    runtime::Model cpp = runtime::Model::load(so.string());
    std::shared_ptr<codegen::JitModel> jit = codegen::jitCompile(codegen::generateLlvm(*graph));
    runtime::Model llvm =
        runtime::Model::adopt("<jit>", jit->descriptor(), jit->profile(), jit, [jit](const char* n) { return jit->symbol(n); });
    std::vector<ir::Tensor> inputs = {ir::Tensor::fromVector(ir::DType::F32, {static_cast<int64_t>(x.size() / 16), 16}, x)};
    const std::vector<ir::Tensor> c = driver::runModel(cpp, inputs, 1), l = driver::runModel(llvm, inputs, 1);
    for (size_t o = 0; o < c.size(); ++o) {
      INFO(graph->outputs()[o].first);
      CHECK(std::memcmp(c[o].bytes(), l[o].bytes(), c[o].nbytes()) == 0);
    }
  }
  SECTION("cpp") {
    fs::path so = scratch() / "math_cpp.so";
    codegen::buildSharedObject(codegen::generateCpp(*graph), so.string());
    runtime::Model model = runtime::Model::load(so.string());
    checkAgainstInterpreter(*graph, model, x, "cpp");
  }
  SECTION("llvm") {
    std::shared_ptr<codegen::JitModel> jit = codegen::jitCompile(codegen::generateLlvm(*graph));
    runtime::Model model =
        runtime::Model::adopt("<jit>", jit->descriptor(), jit->profile(), jit, [jit](const char* n) { return jit->symbol(n); });
    checkAgainstInterpreter(*graph, model, x, "llvm");
  }
}

TEST_CASE("cpp backend: an instruction runs in the outermost loop its operands allow (pointwise, gather)", "[codegen][cpp]") {
  SECTION("a batch norm's per-channel parameters are read outside the loops over pixels") {
    auto graph = ir::parseGraph(R"(graph bn(%x: f32[batch,3,5,7]) {
  %s = param f32[3] [1, 2, 3]
  %b = param f32[3] [0.5, 0.25, 0]
  %m = param f32[3] [0, 1, 2]
  %v = param f32[3] [1, 4, 9]
  %y = batch_norm(%x, %s, %b, %m, %v) {epsilon=1e-05} : f32[batch,3,5,7]
  return (y=%y)
})");
    const std::string src = codegen::generateCpp(*graph).source;
    const size_t channelLoop = src.find("for (int64_t i1 = 0; i1 < 3; ++i1) {");
    const size_t scaleLoad = src.find("= b1_s[i1];");
    // The pixels' two axes walk one run (KernelSchedule::collapseFrom).
    const size_t rowLoop = src.find("const int64_t i2 = 0;  // collapsed into i3's loop");
    CHECK(src.find("for (int64_t i3 = 0; i3 < 35; ++i3) {") != std::string::npos);
    const size_t pixelLoad = src.find("[i0*105 + i1*35 + i2*7 + i3];");
    REQUIRE(channelLoop != std::string::npos);
    REQUIRE(scaleLoad != std::string::npos);
    REQUIRE(rowLoop != std::string::npos);
    REQUIRE(pixelLoad != std::string::npos);
    CHECK(channelLoop < scaleLoad);
    CHECK(scaleLoad < rowLoop);
    CHECK(rowLoop < pixelLoad);
  }
  SECTION("a gather reads each index once, outside the loop that copies its row") {
    auto graph = ir::parseGraph(R"(graph g(%i: i64[batch,2]) {
  %t = param f32[3,4] [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
  %y = gather(%t, %i) {axis=0} : f32[batch,2,4]
  return (y=%y)
})");
    const std::string src = codegen::generateCpp(*graph).source;
    const size_t indexRead = src.find("int64_t at = static_cast<int64_t>(");
    const size_t rowLoop = src.find("for (int64_t i2 = 0; i2 < 4; ++i2) {");
    REQUIRE(indexRead != std::string::npos);
    REQUIRE(rowLoop != std::string::npos);
    CHECK(indexRead < rowLoop);
  }
  SECTION("not in a kernel that can fail: an integer division stays in the innermost loop") {
    auto graph = ir::parseGraph(R"(graph q(%x: i32[batch,3,4]) {
  %d = param i32[3,1] [1, 2, 3]
  %y = div(%x, %d) : i32[batch,3,4]
  return (y=%y)
})");
    const std::string src = codegen::generateCpp(*graph).source;
    const size_t innerLoop = src.find("for (int64_t i2 = 0; i2 < 4; ++i2) {");
    const size_t divisorLoad = src.find("= b1_d[i1];");
    REQUIRE(innerLoop != std::string::npos);
    REQUIRE(divisorLoad != std::string::npos);
    CHECK(innerLoop < divisorLoad);
  }
}
