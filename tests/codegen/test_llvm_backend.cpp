// The LLVM backend: every example model JIT-compiled and compared with the reference interpreter
// (batch 1, 3, 64; 1 and 2 threads, bitwise equal between them), the AOT shared object against
// the JIT, an aarch64 object's ABI symbols, module.ll's provenance, target and CPU errors,
// injected faults, and the CLI's --backend llvm / --emit.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/driver/model_io.h"
#include "policyc/codegen/backend.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/debug/check.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/loader.h"
#include "support/cli.h"
#include "support/scratch_dir.h"
#include "support/backends.h"
#include "support/fixtures.h"

using namespace policyc;
using testing::checkBitwiseBackends;
using testing::graphInputTypes;
using testing::jitModel;
namespace fs = std::filesystem;

namespace {

const fs::path& scratch() { return testing::scratchDir("policyc-llvm-test"); }

std::unique_ptr<ir::Graph> optimized(const std::string& model) {
  auto graph = driver::loadModel(testing::sourcePath("examples/models/" + model + ".onnx"));
  passes::runPipeline(*graph);
  return graph;
}

// The C++ backend's .so at `so` and the LLVM backend's JIT of `graph` against the interpreter
// (within `tolerance`) at batch 1 and 3, and bitwise equal at 1 and 2 threads.
void checkBothBackends(const ir::Graph& graph, const fs::path& so, const codegen::LlvmOptions& llvm, uint64_t seed, double tolerance) {
  for (const bool isCpp : {false, true}) {
    runtime::Model model = isCpp ? runtime::Model::load(so.string()) : jitModel(graph, llvm);
    for (int64_t batch : {1, 3}) {
      std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(graph), batch, seed);
      std::vector<ir::Tensor> want = ir::interpret(graph, inputs);
      std::vector<ir::Tensor> one = driver::runModel(model, inputs, 1), two = driver::runModel(model, inputs, 2);
      for (size_t o = 0; o < want.size(); ++o) {
        INFO((isCpp ? "cpp" : "llvm") << " batch " << batch << " output " << o);
        CHECK(driver::compareTensors("", one[o], want[o], tolerance, tolerance).pass);
        CHECK(std::memcmp(one[o].bytes(), two[o].bytes(), one[o].nbytes()) == 0);
      }
    }
  }
}

// `generated` (the C++ source of `graph`) built as NAME.so and checked as checkBitwiseBackends does
// against the LLVM backend's JIT of `graph` (every kernel split as far as it goes; forceImpl: the
// implementation the C++ source was forced to, the JIT's too; target: the C++ source's, the JIT's too).
void checkGeneratedBitwise(const ir::Graph& graph, const codegen::GeneratedCpp& generated, const std::string& name,
                           std::initializer_list<int64_t> batches, uint64_t seed, double tolerance, const std::string& forceImpl = "",
                           const std::string& target = "native") {
  const fs::path so = scratch() / (name + ".so");
  codegen::buildSharedObject(generated, so.string(), {});
  runtime::Model cppModel = runtime::Model::load(so.string());
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  llvm.forceImpl = forceImpl;  // the one the C++ source was generated with
  llvm.target.target = target;
  runtime::Model llvmModel = jitModel(graph, llvm);
  checkBitwiseBackends(graph, cppModel, llvmModel, batches, seed, tolerance);
}

// The C++ source of `graph` for `target` with every kernel split as far as it goes.
codegen::GeneratedCpp splitCpp(const ir::Graph& graph, const std::string& target = "native") {
  codegen::CppOptions cpp;
  cpp.minChunkCost = 0;
  cpp.target = target;
  return codegen::generateCpp(graph, cpp);
}

// `graph` (after the pipeline) built by the C++ backend with every kernel split as far as it
// goes, both backends checked as checkBothBackends does; returns the C++ source for its checks.
std::string checkGenerated(const ir::Graph& graph, const std::string& name, uint64_t seed, double tolerance) {
  const codegen::GeneratedCpp generated = splitCpp(graph);
  const fs::path so = scratch() / (name + ".so");
  codegen::buildSharedObject(generated, so.string(), {});
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  checkBothBackends(graph, so, llvm, seed, tolerance);
  return generated.source;
}

// n param values for a .pir text: scale * ((i * 7) % mod) + offset, comma-separated.
std::string paramValues(int64_t n, double scale, int64_t mod, double offset) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", scale * static_cast<double>((i * 7) % mod) + offset);
  return s;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

// LLVM options forcing one GEMM/conv implementation, every kernel split however small, the
// unoptimized IR kept for the tests' checks.
codegen::LlvmOptions forcedLlvm(const std::string& impl) {
  codegen::LlvmOptions o;
  o.minChunkCost = 0;
  o.forceImpl = impl;
  o.keepUnoptimizedIr = true;
  return o;
}

std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

}  // namespace

namespace {

// bitwise: 1 and 2 threads compute the same bits (not so where oneDNN's inner product runs: it
// splits its reduction by the thread count).
void checkParity(const std::string& name, codegen::LlvmOptions options = {}, std::vector<int64_t> batches = {1, 3, 64},
                 bool bitwise = true) {
  auto graph = optimized(name);
  options.minChunkCost = 0;  // split every kernel as far as it goes: 2 threads exercise every split
  runtime::Model model = jitModel(*graph, options);
  for (int64_t batch : batches) {
    std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), batch, 7);
    std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
    std::vector<ir::Tensor> one = driver::runModel(model, inputs, 1);
    std::vector<ir::Tensor> two = driver::runModel(model, inputs, 2);
    REQUIRE(one.size() == want.size());
    for (size_t o = 0; o < want.size(); ++o) {
      INFO(name << " batch " << batch << " output " << o);
      driver::TensorCheck c = driver::compareTensors("", one[o], want[o], 1e-4, 1e-4);
      INFO(c.note);
      CHECK(c.pass);
      REQUIRE(two[o].nbytes() == one[o].nbytes());
      if (bitwise) {
        CHECK(std::memcmp(two[o].bytes(), one[o].bytes(), one[o].nbytes()) == 0);
      } else {
        CHECK(driver::compareTensors("", two[o], want[o], 1e-4, 1e-4).pass);
      }
    }
  }
}

}  // namespace

// One test case per model, so that CTest runs them side by side.
#define POLICYC_LLVM_PARITY(model)                                                                                  \
  TEST_CASE("llvm backend: " model " matches the interpreter at batch 1, 3 and 64 with 1 and 2 threads", "[llvm]") { \
    checkParity(model);                                                                                           \
  }
POLICYC_LLVM_PARITY("ppo_mlp")
POLICYC_LLVM_PARITY("sac_actor")
POLICYC_LLVM_PARITY("atari_cnn")
POLICYC_LLVM_PARITY("impala_cnn")
POLICYC_LLVM_PARITY("multi_input")
POLICYC_LLVM_PARITY("uint8_convbn")

// Without oneDNN every conv is the generated implicit GEMM: windows inside the input read in
// place through the offset table, windows over the padding gathered.
TEST_CASE("llvm backend: the CNNs without oneDNN (--no-extern) match the interpreter", "[llvm]") {
  codegen::LlvmOptions noExtern;
  noExtern.externKernels = false;
  checkParity("atari_cnn", noExtern, {1, 5});
  checkParity("impala_cnn", noExtern, {1, 2});
  checkParity("uint8_convbn", noExtern, {1, 3});
}

// The implementations come from the schedule both backends read: every one runs when forced, a
// choice may change the implementation between batch ranges (the run function dispatches on the
// batch size), and a choice a kernel cannot take is one clear error.
TEST_CASE("llvm backend: every implementation, forced or chosen per batch range, matches the interpreter", "[llvm]") {
  for (const std::string impl : {"gemm4x32", "gemm4x16", "onednn", "onednn_postops", "conv_rows", "gemm6x16", "gemm8x32", "dot_rows"}) {
    INFO(impl);
    if (impl.rfind("onednn", 0) == 0 && !codegen::onednnBuiltIn()) continue;  // a compiler built without oneDNN
    codegen::LlvmOptions forced;
    forced.forceImpl = impl;
    checkParity("atari_cnn", forced, {1, 3}, impl.rfind("gemm", 0) == 0 || impl == "dot_rows");
  }
  // Six-position tiles over padded windows (gathered patches) and a last partial tile.
  codegen::LlvmOptions six;
  six.forceImpl = "gemm6x16";
  checkParity("impala_cnn", six, {1, 2}, true);
  codegen::LlvmOptions eight;  // and eight by two panels (one for IMPALA's 16-channel convs)
  eight.forceImpl = "gemm8x32";
  checkParity("impala_cnn", eight, {1, 2}, true);
  codegen::LlvmOptions narrow;
  narrow.forceImpl = "gemm4x16";
  checkParity("ppo_mlp", narrow, {1, 6});
  codegen::LlvmOptions sextets;  // linear layers by six rows: a sextet, quads, pairs and single rows
  sextets.forceImpl = "gemm6x16";
  checkParity("ppo_mlp", sextets, {1, 6, 11});
  // A dispatch that walks through each kernel's candidates from one batch range to the next.
  auto graph = optimized("atari_cnn");
  const codegen::PlannedProgram planned = codegen::planGraph(*graph);
  codegen::ImplChoice byBatch;
  for (const codegen::Kernel& k : planned.program.kernels) {
    std::vector<std::string> c = codegen::implCandidates(planned.program, k, true);
    if (c.empty()) continue;
    byBatch[k.name] = {{1, c[0]}, {4, c[1 % c.size()]}, {16, c[2 % c.size()]}, {-1, c[3 % c.size()]}};
  }
  REQUIRE(byBatch.size() == 6);
  codegen::LlvmOptions chosen;
  chosen.choice = byBatch;
  codegen::LlvmModule module = codegen::generateLlvm(*graph, chosen);
  CHECK(module.dispatch() == byBatch);
  const std::string ir = module.ir(true);
  // one function per implementation (the first conv's third candidate, oneDNN's where it has it)
  CHECK((ir.find("fused_conv_bias_relu_0.onednn_postops") != std::string::npos) == codegen::onednnBuiltIn());
  CHECK(ir.find("fused_conv_bias_relu_0.gemm4x16") != std::string::npos);
  checkParity("atari_cnn", chosen, {1, 3, 4, 5, 17}, false);
  codegen::ImplChoice missing;
  missing["fused_linear_bias_relu_3"] = {{-1, "onednn"}};
  chosen.choice = missing;
  chosen.externKernels = false;  // --no-extern
  CHECK_THROWS_WITH(codegen::generateLlvm(*graph, chosen),
                    Catch::Contains("kernel 'fused_linear_bias_relu_3' has no implementation 'onednn' (candidates: gemm4x32, gemm4x16, gemm8x32, gemm6x16)"));
}

// The autotuner's hooks in a tuning build: the candidates of each kernel, and a selection that
// takes effect on the next run (refused for a kernel or candidate that does not exist).
TEST_CASE("llvm backend: a tuning build lists and selects every candidate of every kernel", "[llvm][autotune]") {
  auto graph = optimized("atari_cnn");
  codegen::LlvmOptions tuning;
  tuning.tuning = true;
  tuning.profile = true;
  runtime::Model model = jitModel(*graph, tuning);
  auto candidates = reinterpret_cast<const char* (*)(int)>(model.symbol("policyc_tune_candidates"));
  auto select = reinterpret_cast<int (*)(int, int)>(model.symbol("policyc_tune_select"));
  REQUIRE(candidates);
  REQUIRE(select);
  const codegen::PlannedProgram planned = codegen::planGraph(*graph);
  const int n = static_cast<int>(planned.program.kernels.size());
  CHECK(candidates(-1) == nullptr);
  CHECK(candidates(n) == nullptr);
  CHECK(select(n, 0) == -1);
  CHECK(select(0, -1) == -1);
  std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), 2, 3);
  const std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
  for (int c = 0; c < 4; ++c) {
    for (int ki = 0; ki < n; ++ki) {
      const std::vector<std::string> names = codegen::implCandidates(planned.program, planned.program.kernels[static_cast<size_t>(ki)], true);
      CHECK(candidates(ki) == fmt::format("{}", fmt::join(names, ",")));
      CHECK(select(ki, c) == (c < static_cast<int>(names.size()) ? 0 : -1));
      CHECK(select(ki, static_cast<int>(names.size())) == -1);
    }
    INFO("candidate " << c);
    std::vector<ir::Tensor> got = driver::runModel(model, inputs, 1);
    for (size_t o = 0; o < want.size(); ++o) CHECK(driver::compareTensors("", got[o], want[o], 1e-4, 1e-4).pass);
  }
}

// argmax and reduce_max take the maximum as sixteen running maxima (both backends: pc::maxOf and
// Emitter::maxOf), then argmax scans for its index: NaN wins, ties go to the first (or, with
// select_last_index, the last) index, and a zero maximum keeps the sign of the first zero, exactly
// as in the interpreter, in rows shorter than a vector and in rows of whole vectors and a tail.
TEST_CASE("llvm and cpp backends: argmax and reduce_max agree with the interpreter on NaN, ties and signed zeros", "[llvm][cpp]") {
  const float n = std::numeric_limits<float>::quiet_NaN();
  const float negNan = -std::numeric_limits<float>::quiet_NaN();
  std::vector<float> narrow = {1, 3, 3, 2, 0, 3,  n, 1, n, 2, 5, 1,  1, 2, n, 2, n, 0,  -0.0f, 0.0f, -1, -0.0f, -2, -3,
                               0.0f, -0.0f, -1, -2, -3, -4,  -5, -4, -4, -9, -4, -6,  2, 2, 2, 2, 2, 2};
  // Rows of 40: 16-lane maxima then a tail of 8. Zeros of both signs in different lanes, a NaN
  // (negative) in the tail, the maximum in the tail, ties across lanes, and ties within one step
  // of the vectorised index scan (pc::findEqual: the first and the last of one mask).
  std::vector<float> wide(7 * 40);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = -1.0f - static_cast<float>(i % 7);
  wide[0 * 40 + 17] = 0.0f, wide[0 * 40 + 3] = -0.0f, wide[0 * 40 + 33] = 0.0f;
  wide[1 * 40 + 37] = negNan, wide[1 * 40 + 2] = 9;
  wide[2 * 40 + 39] = 4, wide[2 * 40 + 5] = 3;
  wide[3 * 40 + 1] = 7, wide[3 * 40 + 20] = 7, wide[3 * 40 + 36] = 7;
  wide[4 * 40 + 18] = n, wide[4 * 40 + 30] = negNan;
  wide[5 * 40 + 20] = 8, wide[5 * 40 + 25] = 8;
  wide[6 * 40 + 2] = 6, wide[6 * 40 + 9] = 6;
  // Rows of 56: a step of 32 values (two sets of running maxima), one of 16, a tail of 8.
  std::vector<float> wider(4 * 56);
  for (size_t i = 0; i < wider.size(); ++i) wider[i] = -2.0f - static_cast<float>(i % 5);
  wider[0 * 56 + 20] = 5, wider[0 * 56 + 44] = 5;  // ties in the second set and the 16-value step
  wider[1 * 56 + 21] = negNan, wider[1 * 56 + 50] = 9;
  wider[2 * 56 + 47] = -0.0f, wider[2 * 56 + 18] = 0.0f;
  wider[3 * 56 + 55] = 3, wider[3 * 56 + 0] = 3;
  for (const auto& [width, x] : std::vector<std::pair<int, std::vector<float>>>{{6, narrow}, {40, wide}, {56, wider}}) {
    auto graph = ir::parseGraph(fmt::format(R"(graph am(%x: f32[batch,{0}]) {{
  %a = argmax(%x) {{axis=-1, keepdims=0}} : i64[batch]
  %l = argmax(%x) {{axis=-1, keepdims=0, select_last_index=1}} : i64[batch]
  %m = reduce_max(%x) {{axes=[-1], keepdims=0}} : f32[batch]
  return (a=%a, l=%l, m=%m)
}})", width));
    std::vector<ir::Tensor> inputs = {ir::Tensor::fromVector(ir::DType::F32, {static_cast<int64_t>(x.size()) / width, width}, x)};
    std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
    const fs::path so = scratch() / fmt::format("argmax{}.so", width);
    codegen::buildSharedObject(codegen::generateCpp(*graph), so.string(), {});
    for (const bool cpp : {false, true}) {
      INFO((cpp ? "cpp" : "llvm") << ", rows of " << width);
      std::vector<ir::Tensor> got = driver::runModel(cpp ? runtime::Model::load(so.string()) : jitModel(*graph), inputs, 1);
      REQUIRE(got.size() == 3);
      for (size_t o = 0; o < 3; ++o) {
        INFO("output " << o);
        REQUIRE(got[o].nbytes() == want[o].nbytes());
        CHECK(std::memcmp(got[o].bytes(), want[o].bytes(), want[o].nbytes()) == 0);  // NaN and -0 bit for bit
      }
      if (width == 6) {
        CHECK(std::signbit(got[2].getAsDouble(3)));   // [-0, +0, ...]: -0
        CHECK(!std::signbit(got[2].getAsDouble(4)));  // [+0, -0, ...]: +0
      } else if (width == 56) {
        CHECK(got[0].getAsDouble(0) == 20);
        CHECK(got[1].getAsDouble(0) == 44);
        CHECK(got[0].getAsDouble(1) == 21);
        CHECK(!std::signbit(got[2].getAsDouble(2)));  // +0 at 18 comes before -0 at 47
        CHECK(got[0].getAsDouble(3) == 0);
        CHECK(got[1].getAsDouble(3) == 55);
      } else {
        CHECK(got[2].getAsDouble(0) == 0.0);
        CHECK(std::signbit(got[2].getAsDouble(0)));  // -0 at 3 comes before +0 at 17 and 33
        CHECK(got[0].getAsDouble(1) == 37);          // the NaN in the tail
        CHECK(got[0].getAsDouble(2) == 39);
        CHECK(got[0].getAsDouble(3) == 1);
        CHECK(got[1].getAsDouble(3) == 36);
        CHECK(got[0].getAsDouble(4) == 18);
        CHECK(got[1].getAsDouble(4) == 30);
        CHECK(got[0].getAsDouble(5) == 20);
        CHECK(got[1].getAsDouble(5) == 25);
        CHECK(got[0].getAsDouble(6) == 2);
        CHECK(got[1].getAsDouble(6) == 9);
      }
    }
  }
}

TEST_CASE("llvm backend: the C header is the C++ backend's, names and workspace included", "[llvm]") {
  for (const char* model : {"ppo_mlp", "atari_cnn", "multi_input"}) {
    INFO(model);
    auto graph = optimized(model);
    codegen::LlvmOptions llvm;
    llvm.name = "int";  // a reserved name: both backends make it m_int
    codegen::CppOptions cpp;
    cpp.name = "int";
    const std::string header = codegen::generateLlvm(*graph, llvm).header();
    CHECK(header == codegen::generateCpp(*graph, cpp).header);
    CHECK(header.find("int m_int_run(") != std::string::npos);
    CHECK(header.find("_WORKSPACE_BYTES_PER_BATCH") != std::string::npos);
  }
}

TEST_CASE("llvm backend: the AOT shared object loads like the C++ backend's and computes what the JIT does", "[llvm]") {
  auto graph = optimized("ppo_mlp");
  codegen::LlvmOptions options;
  options.name = "ppo";
  codegen::LlvmModule module = codegen::generateLlvm(*graph, options);
  fs::path so = scratch() / "ppo_llvm.so";
  codegen::buildLlvmSharedObject(module, so.string());
  runtime::Model aot = runtime::Model::load(so.string());
  CHECK(aot.name() == "ppo_mlp");
  CHECK(aot.target() == "native");
  REQUIRE(aot.profile() != nullptr);
  CHECK(aot.profile()->num_kernels == 5);
  CHECK(aot.symbol("ppo_run") != nullptr);
  CHECK(aot.symbol("ppo_run_with_workspace") != nullptr);
  runtime::Model jit = jitModel(*graph, options);
  std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), 5, 3);
  std::vector<ir::Tensor> a = driver::runModel(aot, inputs, 2), b = driver::runModel(jit, inputs, 1);
  for (size_t o = 0; o < a.size(); ++o) CHECK(std::memcmp(a[o].bytes(), b[o].bytes(), a[o].nbytes()) == 0);
  // The descriptor's arguments are checked as the C++ backend's are.
  CHECK(aot.descriptor().run(nullptr, nullptr, 1, nullptr, 1) == POLICYC_ERROR_ARGUMENT);
  CHECK(aot.descriptor().run(nullptr, nullptr, 0, nullptr, 1) == POLICYC_OK);
  CHECK(aot.descriptor().run(nullptr, nullptr, 1, nullptr, 0) == POLICYC_ERROR_ARGUMENT);
}

TEST_CASE("llvm backend: an aarch64 object is produced and its symbol table has the ABI entry points", "[llvm]") {
  auto graph = optimized("ppo_mlp");
  codegen::LlvmOptions options;
  options.name = "ppo";
  options.target.target = "aarch64-linux-gnu";
  codegen::LlvmModule module = codegen::generateLlvm(*graph, options);
  CHECK(!module.target().isHost);
  fs::path obj = scratch() / "ppo_aarch64.o";
  codegen::writeLlvmFile(module, codegen::LlvmFileKind::Object, obj.string());
  std::string header = capture("readelf -h " + obj.string());
  CHECK(header.find("AArch64") != std::string::npos);
  CHECK(header.find("REL (Relocatable file)") != std::string::npos);
  std::string symbols = capture("readelf -s --wide " + obj.string());
  for (const char* sym : {"policyc_model_descriptor", "policyc_profile_data", "ppo_descriptor", "ppo_run", "ppo_run_with_workspace"}) {
    INFO(sym << " in\n" << symbols);
    bool defined = false;
    for (size_t p = symbols.find(sym); p != std::string::npos; p = symbols.find(sym, p + 1)) {
      size_t line = symbols.rfind('\n', p);
      std::string row = symbols.substr(line + 1, symbols.find('\n', p) - line - 1);
      if (row.find(" FUNC ") != std::string::npos && row.find(" GLOBAL ") != std::string::npos &&
          row.find(" UND ") == std::string::npos && row.substr(row.rfind(' ') + 1) == sym) {
        defined = true;
      }
    }
    CHECK(defined);
  }
  // Neither the JIT nor a shared object can run it here: both say so.
  CHECK_THROWS_WITH(codegen::buildLlvmSharedObject(module, (scratch() / "x.so").string()), Catch::Contains("--emit=obj"));
  CHECK_FALSE(fs::exists(scratch() / "x.so"));
  CHECK_THROWS_WITH(codegen::jitCompile(std::move(module)), Catch::Contains("this machine only"));
}

TEST_CASE("llvm backend: module.ll names each kernel and ties values to their graph nodes", "[llvm]") {
  codegen::LlvmOptions options;
  options.keepUnoptimizedIr = true;
  codegen::LlvmModule module = codegen::generateLlvm(*optimized("ppo_mlp"), options);
  const std::string& ir = module.unoptimizedIr();
  // The weights are left out of the dump (and it says so), not out of the module.
  CHECK(ir.find("@pc_weights = private unnamed_addr constant [576640 x i8] zeroinitializer, align 64  ; 576640 bytes of weights elided") !=
        std::string::npos);
  CHECK(module.ir().find("zeroinitializer, align 64") == std::string::npos);
  CHECK(ir.find("define internal void @fused_linear_bias_tanh_0(ptr %ctx, i64 %lo, i64 %hi)") != std::string::npos);
  CHECK(ir.find("define ptr @policyc_model_descriptor()") != std::string::npos);
  CHECK(ir.find("!policyc.node") != std::string::npos);
  // !{value, operator, source nodes}, as the comments of output_code.cpp
  CHECK(ir.find("!{!\"/pi_fc0/Gemm_output_0.fused\", !\"linear\", !\"/pi_fc0/Gemm\", !\"/vf_fc0/Gemm\"}") != std::string::npos);
  CHECK(ir.find("%\"/Tanh_1_output_0\" =") != std::string::npos);
  // Optimised for this machine: the microkernel is vector FMAs on panels of 16 floats.
  std::string opt = module.ir();
  CHECK(opt.find("<16 x float>") != std::string::npos);
  CHECK(opt.find("@llvm.fma.v16f32") != std::string::npos);
  // The epilogue's tanh is polynomial IR, not a libm call.
  CHECK(opt.find("@tanhf") == std::string::npos);
}

TEST_CASE("llvm backend: a target's CPU implies its extensions (AVX-512, AVX512_BF16, AMX-BF16)", "[llvm]") {
  auto resolved = [](const std::string& target, const std::string& cpu, const std::string& features) {
    return codegen::resolveLlvmTarget({target, cpu, features});
  };
  CHECK_FALSE(resolved("x86-64-v3", "", "").avx512);
  // x86-64-v4's feature string is empty: its CPU name carries AVX-512.
  CHECK(resolved("x86-64-v4", "", "").avx512);
  CHECK_FALSE(resolved("x86-64-v4", "", "").bf16Dot);
  CHECK(resolved("x86-64-v4-bf16", "", "").bf16Dot);
  CHECK(resolved("x86-64-v3", "sapphirerapids", "").bf16Dot);
  CHECK_FALSE(resolved("x86-64-v4-bf16", "", "-avx512bf16").bf16Dot);
  CHECK_FALSE(resolved("x86-64-v4", "", "-avx512f").avx512);
  // AMX-BF16: a CPU that has it, the x86-64-v4-amx target, or the feature (TargetTraits::bf16Tiles).
  CHECK(resolved("x86-64-v4-amx", "", "").bf16Tiles);
  CHECK(resolved("x86-64-v4-amx", "", "").bf16Dot);
  CHECK_FALSE(resolved("x86-64-v4-bf16", "", "").bf16Tiles);
  CHECK(resolved("x86-64-v4-bf16", "", "+amx-tile,+amx-bf16").bf16Tiles);
  CHECK_FALSE(resolved("x86-64-v3", "icelake-server", "").bf16Tiles);
}

// With AVX-512 both backends ask their compiler for 16-float vectors in the loops it vectorises
// itself (GCC's and LLVM's tuning for Intel's AVX-512 CPUs prefers 256 bits, the printers' own
// vectors are 16 wide); without it, nothing is asked.
TEST_CASE("both backends: loops vectorised by the compiler take the vectors of AVX-512 where the target has them", "[llvm][cpp]") {
  auto flags = [](const std::string& target) { return fmt::format("{}", fmt::join(codegen::marchFlags(target), " ")); };
  CHECK(flags("x86-64-v4") == "-march=x86-64-v4 -mprefer-vector-width=512");
  CHECK(flags("x86-64-v4-bf16") == "-march=x86-64-v4 -mavx512bf16 -mprefer-vector-width=512");
  CHECK(flags("x86-64-v4-amx") == "-march=x86-64-v4 -mavx512bf16 -mamx-tile -mamx-bf16 -mprefer-vector-width=512");
  CHECK(flags("x86-64-v3") == "-march=x86-64-v3");
  CHECK(flags("generic") == "-march=x86-64");
  auto graph = ir::parseGraph(R"(graph e(%x: f32[batch,64]) {
  %y = exp(%x) : f32[batch,64]
  return (y=%y)
})");
  auto ir = [&](const std::string& target, const std::string& features) {
    codegen::LlvmOptions o;
    o.target = {target, "", features};
    return codegen::generateLlvm(*graph, o).ir(true);
  };
  CHECK_THAT(ir("x86-64-v4", ""), Catch::Contains("\"prefer-vector-width\"=\"512\""));
  CHECK_THAT(ir("x86-64-v3", ""), !Catch::Contains("prefer-vector-width"));
  CHECK_THAT(ir("x86-64-v4", "-avx512f"), !Catch::Contains("prefer-vector-width"));
}

TEST_CASE("llvm backend: an unknown target, CPU or feature is one clear error listing the valid choices", "[llvm]") {
  CHECK_THROWS_WITH(codegen::resolveLlvmTarget({"not-a-triple", "", ""}),
                    Catch::Contains("unknown target 'not-a-triple'") && Catch::Contains("native, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-v4-amx, generic") &&
                        Catch::Contains("aarch64") && Catch::Contains("x86-64"));
  CHECK_THROWS_WITH(codegen::resolveLlvmTarget({"generic", "pentium9000", ""}),
                    Catch::Contains("unknown CPU 'pentium9000'") && Catch::Contains("valid CPUs:") && Catch::Contains("znver3") &&
                        Catch::Contains("skylake-avx512"));
  CHECK_THROWS_WITH(codegen::resolveLlvmTarget({"aarch64-linux-gnu", "znver3", ""}),
                    Catch::Contains("unknown CPU 'znver3' for target aarch64") && Catch::Contains("neoverse-v1"));
  CHECK_THROWS_WITH(codegen::resolveLlvmTarget({"generic", "", "avx2"}), Catch::Contains("+NAME or -NAME"));
  CHECK_THROWS_WITH(codegen::resolveLlvmTarget({"generic", "", "+avx2,+warp-drive"}), Catch::Contains("invalid feature '+warp-drive'"));
  codegen::LlvmTarget t = codegen::resolveLlvmTarget({"x86-64-v3", "", "-avx2"});
  CHECK(t.cpu == "x86-64-v3");
  CHECK(t.features == "-avx2");
  CHECK(t.isHost);
  // Through the CLI: exit 2, one line, no file written.
  testing::CliResult r = testing::runCli(fmt::format("compile {} --backend llvm --target quantum-linux-gnu -o {}",
                                                     testing::sourcePath("examples/models/ppo_mlp.onnx"), (scratch() / "bad.so").string()));
  testing::requireCleanError(r, "valid targets are native", true);
  CHECK_FALSE(fs::exists(scratch() / "bad.so"));
  r = testing::runCli(fmt::format("run {} --backend llvm --cpu nonsense --random", testing::sourcePath("examples/models/ppo_mlp.onnx")));
  testing::requireCleanError(r, "valid CPUs:", true);
  // A foreign target is refused before any work where its code would have to run or link here.
  r = testing::runCli(fmt::format("compile {} --backend llvm --target aarch64-linux-gnu -o {}",
                                  testing::sourcePath("examples/models/ppo_mlp.onnx"), (scratch() / "bad.so").string()));
  testing::requireCleanError(r, "--emit=obj", true);
  CHECK_FALSE(fs::exists(scratch() / "bad.so"));
  r = testing::runCli(fmt::format("compile {} --backend cpp --cpu znver3 -o {}", testing::sourcePath("examples/models/ppo_mlp.onnx"),
                                  (scratch() / "bad.so").string()));
  testing::requireCleanError(r, "--cpu and --features apply to backend llvm", true);
}

TEST_CASE("llvm backend: injected faults miscompile, trap or fail the compile as asked", "[llvm]") {
  auto graph = optimized("ppo_mlp");
  std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), 2, 1);
  std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
  codegen::LlvmOptions options;
  options.fault = codegen::parseInjectedFault("tanh:accuracy");
  std::vector<ir::Tensor> got = driver::runModel(jitModel(*graph, options), inputs, 1);
  CHECK_FALSE(driver::compareTensors("", got[0], want[0], 1e-4, 1e-4).pass);
  options.fault = codegen::parseInjectedFault("linear:compile");
  CHECK_THROWS_WITH(codegen::generateLlvm(*graph, options), Catch::Contains("injected compile fault") && Catch::Contains("linear"));
  // A conv that runs on oneDNN has no generated body, and still fails or traps as asked.
  auto cnn = optimized("atari_cnn");
  options.fault = codegen::parseInjectedFault("conv:compile");
  CHECK_THROWS_WITH(codegen::generateLlvm(*cnn, options),
                    Catch::Contains("the LLVM compiler failed: injected compile fault") && Catch::Contains("fused_conv_bias_relu_0"));
  options.fault = codegen::parseInjectedFault("conv:crash");
  CHECK(codegen::generateLlvm(*cnn, options).ir().find("llvm.trap") != std::string::npos);
}

TEST_CASE("llvm backend: the CLI runs, checks and compiles with --backend llvm", "[llvm][cli]") {
  const std::string model = testing::sourcePath("examples/models/sac_actor.onnx");
  testing::CliResult r = testing::runCli(fmt::format("check {} --backend llvm --batch 3 --threads 2", model));
  INFO(r.out << r.err);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("backend llvm") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
  r = testing::runCli(fmt::format("run {} --backend llvm --random --batch 2", model));
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("mean:") != std::string::npos);
  for (const auto& [emit, file, text] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"obj", "m.o", "\x7f" "ELF"}, {"asm", "m.s", "policyc_model_descriptor:"}, {"llvm", "m.ll", "@policyc_model_descriptor()"}}) {
    fs::path out = scratch() / file;
    r = testing::runCli(fmt::format("compile {} --backend llvm --emit={} -o {}", model, emit, out.string()));
    INFO(emit << ": " << r.err);
    CHECK(r.exitCode == 0);
    CHECK(testing::slurp(out).find(text) != std::string::npos);
  }
  fs::path dir = scratch() / "debug";
  r = testing::runCli(fmt::format("compile {} --backend llvm -o {} --debug-dir {}", model, (scratch() / "m.so").string(), dir.string()));
  CHECK(r.exitCode == 0);
  CHECK(fs::exists(dir / "module.ll"));
  CHECK(fs::exists(dir / "module.opt.ll"));
  CHECK(testing::slurp(dir / "compile_times.txt").find("llvm codegen") != std::string::npos);
  // The default backend is llvm, with --profile, --force-impl and --mode max-autotune too.
  fs::path byDefault = scratch() / "default_debug", profiled = scratch() / "profile_debug", forced = scratch() / "forced_debug";
  CHECK(testing::runCli(fmt::format("compile {} -o {} --debug-dir {}", model, (scratch() / "d.so").string(), byDefault.string())).exitCode == 0);
  CHECK(fs::exists(byDefault / "module.ll"));
  CHECK_FALSE(fs::exists(byDefault / "output_code.cpp"));
  CHECK(testing::runCli(fmt::format("compile {} --profile -o {} --debug-dir {}", model, (scratch() / "p.so").string(), profiled.string()))
            .exitCode == 0);
  CHECK(fs::exists(profiled / "module.ll"));
  CHECK(testing::slurp(profiled / "module.ll").find("policyc_rt_profile_record") != std::string::npos);
  CHECK(testing::runCli(fmt::format("compile {} --force-impl gemm4x16 -o {} --debug-dir {}", model, (scratch() / "f.so").string(),
                                    forced.string()))
            .exitCode == 0);
  CHECK(fs::exists(forced / "module.ll"));
  CHECK_FALSE(fs::exists(forced / "output_code.cpp"));
  const fs::path tuned = scratch() / "tuned_debug";
  const std::string atari = testing::sourcePath("examples/models/atari_cnn.onnx");
  r = testing::runCli(fmt::format("compile {} --mode max-autotune --tune-batch 1,3 -o {} --debug-dir {}", atari,
                                  (scratch() / "t.so").string(), tuned.string()));
  INFO(r.err);
  CHECK(r.exitCode == 0);
  CHECK(fs::exists(tuned / "module.ll"));
  const std::string report = testing::slurp(tuned / "autotune.txt");
  CHECK(report.find("backend llvm") != std::string::npos);
  CHECK(report.find("dispatch:") != std::string::npos);
  r = testing::runCli(fmt::format("check {} --mode max-autotune --tune-batch 1,3 --batch 3 --threads 2", atari));
  INFO(r.out << r.err);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("backend llvm") != std::string::npos);
  CHECK(r.out.find("PASS") != std::string::npos);
}

TEST_CASE("llvm backend: a pointwise loop is vectorised only along unit-stride axes", "[llvm]") {
  // A transpose too narrow for tiles (3 values on one axis) reads x with stride 6 along y's last
  // axis and writes y with stride 3 along the other: no loop may vectorise (it would gather or
  // scatter). An add's innermost loop walks both operands contiguously: only that one is left to
  // the vectorizer.
  codegen::LlvmOptions options;
  options.keepUnoptimizedIr = true;
  auto transposed = ir::parseGraph(R"(graph t(%x: f32[batch,3,6]) {
  %y = transpose(%x) {perm=[0, 2, 1]} : f32[batch,6,3]
  return (y=%y)
})");
  auto scalarLoops = [](const std::string& ir) {
    size_t n = 0;
    for (size_t at = 0; (at = ir.find(", !llvm.loop ", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  const std::string t = codegen::generateLlvm(*transposed, options).unoptimizedIr();
  CHECK(scalarLoops(t) == 3);  // every loop: the batch one walks rows of 18
  CHECK(t.find("!\"llvm.loop.vectorize.width\", i32 1") != std::string::npos);
  auto added = ir::parseGraph(R"(graph a(%x: f32[batch,4,6]) {
  %y = add(%x, %x) : f32[batch,4,6]
  return (y=%y)
})");
  const std::string a = codegen::generateLlvm(*added, options).unoptimizedIr();
  CHECK(scalarLoops(a) == 2);  // i0 and i1 (rows of 24 and 6); i2 is contiguous
  CHECK(a.find("br label %i2.head, !llvm.loop") == std::string::npos);
}

// The schedule decides which packed epilogues run on whole 16-column panels; both printers follow
// it: a linear layer of whole panels with an f32 body does (the C++ backend's finish16, no
// per-column panel in the LLVM function), the heads of 12 and 1 columns run dot_rows (no panel at
// all), and neither does a layer whose anchor carries an injected accuracy fault (the scalar
// epilogue carries it).
TEST_CASE("llvm and cpp backends: a packed epilogue runs on whole panels where the schedule says so", "[llvm][cpp]") {
  auto graph = optimized("ppo_mlp");
  auto fn = [](const std::string& ir, const std::string& name) {
    const size_t at = ir.find("define internal void @" + name + "(");
    REQUIRE(at != std::string::npos);
    return ir.substr(at, ir.find("\n}\n", at) - at);
  };
  for (const bool fault : {false, true}) {
    INFO("linear:accuracy fault " << fault);
    codegen::LlvmOptions llvm;
    llvm.keepUnoptimizedIr = true;
    codegen::CppOptions cpp;
    if (fault) llvm.fault = cpp.fault = codegen::parseInjectedFault("linear:accuracy");
    const std::string ir = codegen::generateLlvm(*graph, llvm).unoptimizedIr();
    for (const char* layer : {"fused_linear_bias_tanh_0", "fused_linear_bias_tanh_1", "fused_linear_bias_tanh_2"}) {
      CHECK((fn(ir, layer).find("%panel") == std::string::npos) == !fault);
    }
    // The heads of 12 and 1 columns run dot_rows: no panel, a scalar epilogue either way.
    CHECK(fn(ir, "linear_bias_3").find("%panel") == std::string::npos);
    CHECK(fn(ir, "linear_bias_4").find("%panel") == std::string::npos);
    const std::string source = codegen::generateCpp(*graph, cpp).source;
    size_t panels = 0;
    for (size_t at = 0; (at = source.find("auto finish16", at)) != std::string::npos; ++at) ++panels;
    CHECK(panels == (fault ? 0u : 3u));
  }
}

// KernelSchedule::directRows: a packed linear layer whose epilogue only stores has the C++
// microkernels write its tiles into the output rows (their stride: 48 for a [batch, 4, 48]
// result, 64 for two layers concatenated in place, the second from column 32), not through a
// stack tile; a layer with a
// fused activation, or whose columns are not whole panels (12), keeps the tile. Rows past the
// last quad (batch 3 of the 4-row layer: 12 rows; batch 1 of the others) take the one-row kernel.
TEST_CASE("llvm and cpp backends: a linear layer that only stores writes its tiles into the output", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 5, -1.0); };
  const std::string text = fmt::format(R"(graph d(%x: f32[batch,4,16], %h: f32[batch,24], %g: f32[batch,24], %k: f32[batch,24], %m: f32[batch,24]) {{
  %w = param f32[48,16] [{}]
  %b = param f32[48] [{}]
  %y = linear(%x, %w, %b) : f32[batch,4,48]
  %v = param f32[32,24] [{}]
  %p = linear(%h, %v) : f32[batch,32]
  %u = param f32[32,24] [{}]
  %q = linear(%g, %u) : f32[batch,32]
  %c = concat(%p, %q) {{axis=1}} : f32[batch,64]
  %t = param f32[32,24] [{}]
  %a = linear(%k, %t) : f32[batch,32]
  %s = relu(%a) : f32[batch,32]
  %e = param f32[12,24] [{}]
  %z = linear(%m, %e) : f32[batch,12]
  return (y=%y, c=%c, s=%s, z=%z)
}})", weights(768), weights(48), weights(768), weights(768), weights(768), weights(288));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  size_t direct = 0;
  for (size_t at = 0; (at = generated.source.find("auto dst = ", at)) != std::string::npos; ++at) ++direct;
  CHECK(direct == 3);  // y and the two halves of c
  CHECK(generated.source.find("bp + j*16, dst(r, j*16), 48)") != std::string::npos);
  CHECK(generated.source.find("bp + j*16, dst(r, j*16), 64)") != std::string::npos);
  CHECK(generated.source.find("+ n0 + 32; };") != std::string::npos);
  // The relu layer: whole-panel epilogues take the rows from the microkernels' accumulators.
  CHECK(generated.source.find("[&](int64_t t, int64_t c, pc::f32x16 v) { finish16(r + t, j*16 + c, v); }") != std::string::npos);
  CHECK(generated.source.find("out16[0], 16)") == std::string::npos);
  checkGeneratedBitwise(*graph, generated, "direct_rows", {1, 3, 9, 21}, 29, 1e-5);
  // By tiles of eight rows (gemm8x32, the heuristic's with AVX-512 over rows of 64 or more): a
  // unit's eight rows by a pair of panels, and its quads (a last partial octet, a single last
  // panel), write there too; the same bits.
  codegen::CppOptions cpp;
  cpp.minChunkCost = 0;
  cpp.forceImpl = "gemm8x32";
  const codegen::GeneratedCpp octets = codegen::generateCpp(*graph, cpp);
  CHECK(octets.source.find("pc::gemm_8x32(16, x8, w, bp + j*16, dst(r, j*16), 48);") != std::string::npos);
  CHECK(octets.source.find("bp + j*16, dst(q, j*16), 64)") != std::string::npos);
  checkGeneratedBitwise(*graph, octets, "direct_rows_octets", {1, 3, 9, 21}, 29, 1e-5, "gemm8x32");
}

// KernelSchedule::alternateUnits: a linear layer whose packed weights take 512 KiB or more (1024
// x 160 f32: 640 KiB) walks its units backward every other run, in both printers; the runs give
// the same bits either way (each of three inputs run once each way at each thread count; the C++
// backend's and the LLVM one's equal: checkBitwiseBackends). A small layer beside it walks forward
// always (one counted loop only), and so does the large one with int8 weights (160 KiB: no run
// counter at all).
// A whole-panel epilogue (relu, tanh) takes each tile's rows from the microkernel's accumulators
// (pc::gemm_8x32_fin, gemm_4x32_fin, gemm_4x16_fin, gemm_1x16_fin): with AVX-512 straight from
// the registers, with AVX2 through a stack tile inside the prelude. 80 outputs are two pairs of
// panels and a single one; batches 1, 3 (rows alone), 5 and 9 (quads and a row), 12 and 17
// (octets with gemm8x32, then a quad or a row). Both kinds of target, both tile sizes, the same
// bits as the LLVM backend's JIT for the same target.
TEST_CASE("llvm and cpp backends: whole-panel epilogues from the accumulators, both kinds of target", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.0625, 11, -0.3); };
  const std::string text = fmt::format(R"(graph e(%x: f32[batch,11]) {{
  %w = param f32[80,11] [{}]
  %b = param f32[80] [{}]
  %y = linear(%x, %w, %b) : f32[batch,80]
  %r = relu(%y) : f32[batch,80]
  %v = param f32[48,80] [{}]
  %z = linear(%r, %v) : f32[batch,48]
  %t = tanh(%z) : f32[batch,48]
  return (r=%r, t=%t)
}})", weights(880), weights(80), weights(3840));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  for (const char* target : {"x86-64-v3", "native"}) {
    for (const char* impl : {"gemm4x32", "gemm8x32"}) {
      INFO(target << " " << impl);
      const bool octets = std::string(impl) == "gemm8x32";
      codegen::CppOptions cpp;
      cpp.minChunkCost = 0;
      cpp.target = target;
      cpp.forceImpl = impl;
      const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
      CHECK(occurrences(generated.source, "pc::gemm_8x32_fin(") == (octets ? 2 : 0));
      CHECK(occurrences(generated.source, "pc::gemm_4x32_fin(") == 2);
      CHECK(occurrences(generated.source, "pc::gemm_4x16_fin(") == 2);
      CHECK(occurrences(generated.source, "pc::gemm_1x16_fin(") == 2);
      CHECK(generated.source.find("out16[0]") == std::string::npos);  // no stack tile in the kernels
      CHECK(generated.source.find("out8[t]") == std::string::npos);
      const fs::path so = scratch() / "panel_epilogues.so";
      codegen::buildSharedObject(generated, so.string(), {});
      codegen::LlvmOptions llvm;
      llvm.minChunkCost = 0;
      llvm.forceImpl = impl;
      llvm.target.target = target;
      runtime::Model c = runtime::Model::load(so.string()), l = jitModel(*graph, llvm);
      checkBitwiseBackends(*graph, c, l, {1, 3, 5, 9, 12, 17}, 17, 1e-5);
    }
  }
}

TEST_CASE("llvm and cpp backends: a large linear layer alternates its units' order from run to run", "[llvm][cpp]") {
  const std::string text = fmt::format(R"(graph alt(%x: f32[batch,1024]) {{
  %w = param f32[160,1024] [{}]
  %b = param f32[160] [{}]
  %h = linear(%x, %w, %b) : f32[batch,160]
  %r = relu(%h) : f32[batch,160]
  %v = param f32[32,160] [{}]
  %y = linear(%r, %v) : f32[batch,32]
  return (y=%y)
}})", paramValues(160 * 1024, 0.004, 11, -0.02), paramValues(160, 0.01, 5, -0.02), paramValues(32 * 160, 0.01, 7, -0.03));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "const int64_t u = back ? lo + hi - 1 - v : v;") == 1);
  CHECK(occurrences(generated.source, "__atomic_fetch_add(&pc_calls, 1u, __ATOMIC_RELAXED);") == 1);
  codegen::LlvmOptions llvm;
  llvm.keepUnoptimizedIr = true;
  const std::string ir = codegen::generateLlvm(*graph, llvm).unoptimizedIr();
  CHECK(occurrences(ir, "load atomic i32, ptr @pc_calls monotonic") == 1);
  CHECK(occurrences(ir, "atomicrmw add ptr @pc_calls, i32 1 monotonic") == 1);
  const fs::path so = scratch() / "alternate.so";
  codegen::buildSharedObject(generated, so.string(), {});
  runtime::Model cppModel = runtime::Model::load(so.string());
  llvm.minChunkCost = 0;
  runtime::Model llvmModel = jitModel(*graph, llvm);
  // Inputs a, b, c, a, b, c: each input's two runs walk opposite ways, and every run follows one
  // on other inputs, which leaves their values in the workspace (a unit a run skipped would show).
  for (int64_t batch : {1, 9}) {
    std::vector<std::vector<ir::Tensor>> inputs;
    for (uint64_t seed : {31, 32, 33}) inputs.push_back(driver::randomTensors(graphInputTypes(*graph), batch, seed));
    for (int threads : {1, 2, 3}) {
      for (runtime::Model* model : {&cppModel, &llvmModel}) {
        INFO("batch " << batch << " threads " << threads << (model == &cppModel ? " cpp" : " llvm"));
        std::vector<ir::Tensor> runs;
        for (size_t r = 0; r < 6; ++r) runs.push_back(driver::runModel(*model, inputs[r % 3], threads)[0]);
        for (size_t r = 0; r < 3; ++r) CHECK(std::memcmp(runs[r].bytes(), runs[r + 3].bytes(), runs[r].nbytes()) == 0);
      }
    }
  }
  checkBitwiseBackends(*graph, cppModel, llvmModel, {1, 3, 9}, 37, 1e-4);
  // int8 weights: 160 KiB, under the threshold; no run counter at all.
  codegen::CppOptions cpp;
  cpp.precision = codegen::Precision::Int8Weights;
  const std::string narrow = codegen::generateCpp(*graph, cpp).source;
  CHECK(narrow.find("pc_calls") == std::string::npos);
  llvm.precision = codegen::Precision::Int8Weights;
  CHECK(codegen::generateLlvm(*graph, llvm).unoptimizedIr().find("pc_calls") == std::string::npos);
}

// KernelSchedule::vectorTail: a packed linear layer whose last panel is partial runs that
// panel's epilogue on the first N % 16 lanes of a vector in the LLVM printer (a policy head of 13
// with tanh; 40 columns, two whole panels and one of 8, with an exp and a sigmoid; one panel of
// 13 whose outputs go to two places) and whole panels on whole vectors; a layer of whole panels
// keeps vectorEpilogue. The same bits as the C++ backend's column loop, at several batch sizes
// and 1 and 2 threads, within 1e-5 of the interpreter.
TEST_CASE("llvm and cpp backends: a linear layer's partial last panel runs its epilogue on vector lanes", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.0625, 9, -0.25); };
  const std::string text = fmt::format(R"(graph t(%x: f32[batch,24]) {{
  %w = param f32[13,24] [{}]
  %b = param f32[13] [{}]
  %h = linear(%x, %w, %b) : f32[batch,13]
  %a = tanh(%h) : f32[batch,13]
  %v = param f32[40,24] [{}]
  %l = linear(%x, %v) : f32[batch,40]
  %e = exp(%l) : f32[batch,40]
  %s = sigmoid(%e) : f32[batch,40]
  %u = param f32[13,24] [{}]
  %m = linear(%x, %u) : f32[batch,13]
  %r = relu(%m) : f32[batch,13]
  %q = param f32[32,24] [{}]
  %z = linear(%x, %q) : f32[batch,32]
  %t = tanh(%z) : f32[batch,32]
  return (a=%a, s=%s, m=%m, r=%r, t=%t)
}})", weights(312), weights(13), weights(960), weights(312), weights(768));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  codegen::LlvmOptions llvm;
  llvm.keepUnoptimizedIr = true;
  CHECK(codegen::generateLlvm(*graph, llvm).unoptimizedIr().find("\nwhole.else:") != std::string::npos);
  // Whole panels only: no such branch.
  auto wholeOnly = ir::parseGraph(fmt::format(R"(graph w(%x: f32[batch,24]) {{
  %q = param f32[32,24] [{}]
  %z = linear(%x, %q) : f32[batch,32]
  %t = tanh(%z) : f32[batch,32]
  return (t=%t)
}})", weights(768)));
  passes::runPipeline(*wholeOnly);
  CHECK(codegen::generateLlvm(*wholeOnly, llvm).unoptimizedIr().find("\nwhole.else:") == std::string::npos);
  checkGeneratedBitwise(*graph, splitCpp(*graph), "vector_tail", {1, 3, 8, 13, 64}, 31, 1e-5);
}

// The C++ printer's epilogues of exp, sigmoid and clip on the lanes of whole panels
// (pc::expLanes, sigmoidLanes, clipLanes): lane by lane pc::exp's, pc::sigmoid's and pc::clip's
// operations, the same bits as the LLVM backend's. %o and %so are 120 times one input each (one
// product: the same in any order of sums), so that exp runs past its range (inf) and under it (0)
// and still compares with the interpreter's.
TEST_CASE("llvm and cpp backends: exp, sigmoid, silu and clip epilogues on vector lanes", "[llvm][cpp]") {
  auto oneTap = [](int64_t N, int64_t K, double scale) {
    std::string s;
    for (int64_t i = 0; i < N * K; ++i) s += fmt::format("{}{}", i ? ", " : "", i % K == (i / K) % K ? scale : 0.0);
    return s;
  };
  const std::string text = fmt::format(R"(graph lanes(%x: f32[batch,24], %y: f32[batch,24], %z: f32[batch,24], %zs: f32[batch,24]) {{
  %g = param f32[32,24] [{}]
  %b = param f32[32] [{}]
  %a = linear(%x, %g, %b) : f32[batch,32]
  %c = clip(%a) {{min=-3.0, max=2.0}} : f32[batch,32]
  %ce = exp(%c) : f32[batch,32]
  %k = param f32[32,24] [{}]
  %big = linear(%y, %k) : f32[batch,32]
  %o = exp(%big) : f32[batch,32]
  %h = param f32[16,24] [{}]
  %m = linear(%z, %h) : f32[batch,16]
  %so = sigmoid(%m) : f32[batch,16]
  %s = param f32[16,24] [{}]
  %sm = linear(%zs, %s) : f32[batch,16]
  %si = silu(%sm) : f32[batch,16]
  return (ce=%ce, o=%o, so=%so, si=%si)
}})", paramValues(768, 0.5, 9, -2.0), paramValues(32, 0.25, 5, -0.5), oneTap(32, 24, 120.0), oneTap(16, 24, 120.0),
                                       paramValues(384, 0.75, 11, -3.5));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "v = pc::clipLanes(v, -3.0f, 2.0f);") == 1);
  CHECK(occurrences(generated.source, "v = pc::expLanes(v);") == 2);
  CHECK(occurrences(generated.source, "v = pc::sigmoidLanes(v);") == 1);
  CHECK(occurrences(generated.source, "v = v * pc::sigmoidLanes(v);") == 1);  // silu
  checkGeneratedBitwise(*graph, generated, "lanes", {1, 3, 8, 13, 64}, 37, 1e-5);
}

// Impl::DotRows: linear layers of at most 12 outputs (a value head of 1, heads of 3, 5, 8 and 12,
// some without bias) as dot products along k (K 256, a whole number of 16-lane blocks; 40 and 7,
// a masked last block), rows in tiles of 4 (up to 4 outputs), 2 (up to 8) or 1, the last rows one
// by one, over rows of a [batch, 3, K] input too: both backends the same bits at 1-3 threads,
// within 1e-5 of the interpreter; the heuristic picks it, a layer of 13 outputs keeps its panels.
TEST_CASE("llvm and cpp backends: small heads as dot products along k", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.03125, 11, -0.17); };
  const std::string text = fmt::format(R"(graph d(%x: f32[batch,256], %y: f32[batch,3,40], %z: f32[batch,7]) {{
  %w1 = param f32[1,256] [{}]
  %b1 = param f32[1] [{}]
  %v = linear(%x, %w1, %b1) : f32[batch,1]
  %w8 = param f32[8,256] [{}]
  %b8 = param f32[8] [{}]
  %l8 = linear(%x, %w8, %b8) : f32[batch,8]
  %t8 = tanh(%l8) : f32[batch,8]
  %w3 = param f32[3,40] [{}]
  %l3 = linear(%y, %w3) : f32[batch,3,3]
  %r3 = relu(%l3) : f32[batch,3,3]
  %w5 = param f32[5,7] [{}]
  %b5 = param f32[5] [{}]
  %l5 = linear(%z, %w5, %b5) : f32[batch,5]
  %w12 = param f32[12,256] [{}]
  %l12 = linear(%x, %w12) : f32[batch,12]
  %w13 = param f32[13,256] [{}]
  %l13 = linear(%x, %w13) : f32[batch,13]
  return (v=%v, t8=%t8, r3=%r3, l5=%l5, l12=%l12, l13=%l13)
}})", weights(256), weights(1), weights(2048), weights(8), weights(120), weights(35), weights(5), weights(3072), weights(3328));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  using Catch::Contains;
  CHECK_THAT(generated.source, Contains("pc::dotRows<4, 1>(256,") && Contains("pc::dotRows<2, 8>(256,") &&
                                   Contains("pc::dotRows<4, 3>(40,") && Contains("pc::dotRows<2, 5>(7,") && Contains("pc::dotRows<1, 1>(256,") &&
                                   Contains("pc::dotRows<1, 12>(256,"));
  CHECK(generated.source.find("pc::dotRows<1, 13>") == std::string::npos);
  CHECK_THAT(generated.source, Contains("pc::gemm_4x16(256,"));  // the 13 outputs: one panel
  checkGeneratedBitwise(*graph, generated, "dot_rows", {1, 2, 3, 5, 8, 13}, 37, 1e-5);
  // --force-impl gemm4x32 puts them back on the panels.
  codegen::CppOptions panels;
  panels.forceImpl = "gemm4x32";
  CHECK(codegen::generateCpp(*graph, panels).source.find("pc::dotRows<") == std::string::npos);
  // Without AVX-512 (the heuristic's choice there: the value head only) each block as two 8-lane
  // halves: the same sums, forced onto every small layer.
  codegen::CppOptions v3;
  v3.minChunkCost = 0;
  v3.target = "x86-64-v3";
  CHECK(codegen::generateCpp(*graph, v3).source.find("pc::dotRows<2, 8>") == std::string::npos);
  v3.forceImpl = "dot_rows";
  const codegen::GeneratedCpp narrow = codegen::generateCpp(*graph, v3);
  CHECK_THAT(narrow.source, Contains("pc::dotRows<2, 8>(256,") && Contains("pc::dotRows<4, 1>(256,"));
  const fs::path so = scratch() / "dot_rows_v3.so";
  codegen::buildSharedObject(narrow, so.string(), {});
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  llvm.forceImpl = "dot_rows";
  llvm.target.target = "x86-64-v3";
  runtime::Model c = runtime::Model::load(so.string()), l = jitModel(*graph, llvm);
  checkBitwiseBackends(*graph, c, l, {1, 3, 5}, 41, 1e-5);
}

namespace {

// At each batch size: the first model (1 thread) within 1e-5 of the interpreter, and every model
// at 1, 2 and 3 threads bit for bit equal to it.
void checkSameBits(const ir::Graph& graph, const std::vector<runtime::Model>& models, const std::vector<int64_t>& batches,
                   uint64_t seed) {
  for (int64_t batch : batches) {
    std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(graph), batch, seed);
    std::vector<ir::Tensor> want = ir::interpret(graph, inputs);
    std::vector<ir::Tensor> first = driver::runModel(models[0], inputs, 1);
    for (size_t o = 0; o < want.size(); ++o) CHECK(driver::compareTensors("", first[o], want[o], 1e-5, 1e-5).pass);
    for (size_t m = 0; m < models.size(); ++m) {
      for (int threads : {1, 2, 3}) {
        std::vector<ir::Tensor> got = driver::runModel(models[m], inputs, threads);
        for (size_t o = 0; o < want.size(); ++o) {
          INFO("model " << m << " batch " << batch << " threads " << threads << " output " << o);
          CHECK(std::memcmp(first[o].bytes(), got[o].bytes(), first[o].nbytes()) == 0);
        }
      }
    }
  }
}

}  // namespace

// Linear layers by tiles of eight rows (gemm8x32) and of six (gemm6x16, one panel; a sextet only
// below the last whole quad, else a quad or a pair of rows) give gemm4x32's bits: each output sums
// over k in order in all, the rows past the last whole quad alone in all. Both backends, 1-3
// threads, batches that leave 0-7 rows past the last octet or sextet; a layer
// with an odd last panel (48 columns: its octets as two quads) and one over a leading dim (rows =
// batch x 3); a tanh epilogue from the accumulators, and layers that write their tiles into the
// output. With AVX-512 and without (x86-64-v3).
TEST_CASE("llvm and cpp backends: linear layers by tiles of eight or six rows give the bits of tiles of four", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 7, -0.5); };
  const std::string text = fmt::format(R"(graph eight(%x: f32[batch,40], %z: f32[batch,3,40]) {{
  %w = param f32[64,40] [{}]
  %b = param f32[64] [{}]
  %y = linear(%x, %w, %b) : f32[batch,64]
  %t = tanh(%y) : f32[batch,64]
  %v = param f32[48,64] [{}]
  %o = linear(%t, %v) : f32[batch,48]
  %u = param f32[32,40] [{}]
  %p = linear(%z, %u) : f32[batch,3,32]
  return (o=%o, p=%p)
}})", weights(64 * 40), weights(64), weights(48 * 64), weights(32 * 40));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  for (const std::string target : {"native", "x86-64-v3"}) {
    INFO(target);
    std::vector<runtime::Model> models;  // cpp and llvm: 4x32, 8x32, 6x16
    for (const std::string impl : {"gemm4x32", "gemm8x32", "gemm6x16"}) {
      codegen::CppOptions cpp;
      cpp.minChunkCost = 0;
      cpp.forceImpl = impl;
      cpp.target = target;
      const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
      CHECK((generated.source.find("pc::gemm_8x32(40, x8,") != std::string::npos) == (impl == "gemm8x32"));
      CHECK((generated.source.find("pc::gemm_6x16_fin(40, x6,") != std::string::npos) == (impl == "gemm6x16"));  // y's tanh
      CHECK((generated.source.find("pc::gemm_6x16(64, x6, w, bp + j*16, dst(r, j*16), 48);") != std::string::npos) == (impl == "gemm6x16"));
      const fs::path so = scratch() / fmt::format("eight_rows_{}_{}.so", impl, target);
      codegen::buildSharedObject(generated, so.string(), {});
      models.push_back(runtime::Model::load(so.string()));
      codegen::LlvmOptions llvm;
      llvm.minChunkCost = 0;
      llvm.forceImpl = impl;
      llvm.target.target = target;
      models.push_back(jitModel(*graph, llvm));
    }
    checkSameBits(*graph, models, {1, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 21, 64}, 17);
  }
}

// A grouped or depthwise 2-D conv runs an output row at a time in both backends (schedule.h,
// RowTaps): per window column, one loop over the output columns it reaches. Strides,
// dilations, asymmetric pads, a window column that never lies inside the input (y's first: pad
// 2, stride 2, one output column) and a grouped conv with two channels per group and a fused
// tanh, against the interpreter at 1 and 2 threads (bitwise equal).
TEST_CASE("llvm and cpp backends: direct convs by rows match the interpreter", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.25, 11, -1.0); };
  // Row kept in memory (column stride 2), in one partial chunk of registers (3 columns), in
  // three chunks with taps cut at both ends (35), and in two whole chunks with a vector epilogue
  // (storing to a buffer whose name holds "n0", the packed epilogue's column variable); the
  // epilogue of a partial last chunk by vectors of 8, the last partial (rows of 3, 35 and 29).
  const std::string text = fmt::format(R"(graph dw(%x: f32[batch,4,5,3], %x2: f32[batch,2,4,35], %x3: f32[batch,2,3,32], %x4: f32[batch,2,3,29]) {{
  %w = param f32[4,1,3,3] [{}]
  %b = param f32[4] [0.5, -0.25, 1, 0]
  %y = conv(%x, %w, %b) {{group=4, strides=[2, 2], dilations=[1, 2], pads=[1, 2, 2, 1]}} : f32[batch,4,3,1]
  %v = param f32[4,2,2,3] [{}]
  %z = conv(%x, %v) {{group=2, dilations=[2, 1], pads=[0, 1, 1, 1]}} : f32[batch,4,4,3]
  %t = tanh(%z) : f32[batch,4,4,3]
  %k2 = param f32[2,1,3,3] [{}]
  %u = conv(%x2, %k2) {{group=2, pads=[1, 1, 1, 1]}} : f32[batch,2,4,35]
  %k3 = param f32[2,1,1,3] [{}]
  %b3 = param f32[2] [0.25, -0.5]
  %c3 = conv(%x3, %k3, %b3) {{group=2, pads=[0, 1, 0, 1]}} : f32[batch,2,3,32]
  %n0n0 = relu(%c3) : f32[batch,2,3,32]
  %c4 = conv(%x4, %k3, %b3) {{group=2, pads=[0, 1, 0, 1]}} : f32[batch,2,3,29]
  %s4 = sub(%c4, %x4) : f32[batch,2,3,29]
  %r4 = relu(%s4) : f32[batch,2,3,29]
  return (y=%y, t=%t, u=%u, n0=%n0n0, r4=%r4)
}})", weights(36), weights(48), weights(18), weights(6));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  const codegen::PlannedProgram planned = codegen::planGraph(*graph);
  int byRows = 0;
  for (const codegen::Kernel& k : planned.program.kernels) {
    if (k.kind == codegen::KernelKind::Conv) ++byRows;
  }
  REQUIRE(byRows == 5);
  const fs::path so = scratch() / "dwconv.so";
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(generated.source.find("float row[1]") != std::string::npos);
  CHECK(generated.source.find("r0 = pc::fmaLanes<1, 16>(r0") != std::string::npos);
  CHECK(generated.source.find("r2 = pc::fmaLanes<0, 3>(r2") != std::string::npos);
  CHECK(generated.source.find("pc::f32x16 v = pc::load16(row + 16) + pc::splat16(bias);") != std::string::npos);
  CHECK(occurrences(generated.source, "pc::tanhv(v)") == 1);  // t's row of 3
  CHECK(occurrences(generated.source, "pc::storeFirst8<3>(") == 2);  // t's and u's last chunks
  CHECK(generated.source.find("pc::f32x8 v = pc::load8(row + 16) + pc::splat8(bias);") != std::string::npos);  // r4's lanes 16..23
  CHECK(generated.source.find("pc::loadFirst8<5>(") != std::string::npos);  // r4's residual on lanes 24..28
  CHECK(generated.source.find("pc::storeFirst8<5>(") != std::string::npos);
  codegen::buildSharedObject(generated, so.string(), {});
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  llvm.keepUnoptimizedIr = true;
  const std::string ir = codegen::generateLlvm(*graph, llvm).unoptimizedIr();
  CHECK(ir.find("%row = alloca [1 x float]") != std::string::npos);
  CHECK(ir.find("@llvm.masked.load.v16f32") != std::string::npos);
  checkBothBackends(*graph, so, llvm, 11, 1e-5);
}

// conv_rows (schedule.h, ConvRowTiles): six output channels per input chunk, both printers.
// Channel counts that leave a narrower last block (13: 6 + 6 + 1; 7: 6 + 1), rows of 20 and 19
// columns (a second, partial chunk), taps cut at both ends by asymmetric pads, a dilated window,
// a row stride of 2, no bias, and rows of 32 with the epilogue on whole chunks; a column stride
// of 2 has no conv_rows. Rows of 7 columns go two to a chunk: an odd count of output rows (the
// last pair half empty), a row stride of 2 between the pair's input rows, 9 channels. Both
// backends against the interpreter, 1, 2 and 3 threads bit for bit, and the two backends bit for bit.
// Convs of many shapes: padded, strided, dilated, rows of 20, 32, 7 and 10 columns, 4 to 13 output
// channels (not multiples of a panel), plane sizes that do not fill the tiles.
std::unique_ptr<ir::Graph> convShapesGraph() {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 13, -0.75); };
  const std::string text = fmt::format(R"(graph rows(%x: f32[batch,5,9,20], %x3: f32[batch,3,4,32], %x4: f32[batch,4,7,7]) {{
  %w = param f32[13,5,3,3] [{}]
  %b = param f32[13] [{}]
  %c = conv(%x, %w, %b) {{pads=[1, 1, 1, 1]}} : f32[batch,13,9,20]
  %r = relu(%c) : f32[batch,13,9,20]
  %v = param f32[7,5,3,3] [{}]
  %d = conv(%x, %v) {{strides=[2, 1], dilations=[2, 2], pads=[2, 0, 1, 3]}} : f32[batch,7,4,19]
  %k3 = param f32[6,3,1,5] [{}]
  %b3 = param f32[6] [0.25, -0.5, 0, 1, -1, 0.125]
  %e = conv(%x3, %k3, %b3) {{pads=[0, 2, 0, 2]}} : f32[batch,6,4,32]
  %t = tanh(%e) : f32[batch,6,4,32]
  %s = param f32[4,5,3,3] [{}]
  %f = conv(%x, %s) {{strides=[1, 2], pads=[1, 1, 1, 1]}} : f32[batch,4,9,10]
  %q = param f32[9,4,3,3] [{}]
  %qb = param f32[9] [{}]
  %g = conv(%x4, %q, %qb) {{pads=[1, 1, 1, 1]}} : f32[batch,9,7,7]
  %h = conv(%x4, %q) {{strides=[2, 1], pads=[1, 0, 1, 2]}} : f32[batch,9,4,7]
  %p = conv(%x4, %q) {{strides=[2, 1]}} : f32[batch,9,3,5]
  %s2 = param f32[4,5,3,3] [{}]
  %l = conv(%x, %s2) {{strides=[1, 2], pads=[1, 1, 1, 1]}} : f32[batch,4,9,10]
  %lk = leaky_relu(%l) {{alpha=0.125}} : f32[batch,4,9,10]
  return (r=%r, d=%d, t=%t, f=%f, g=%g, h=%h, p=%p, lk=%lk)
}})", weights(13 * 45), weights(13), weights(7 * 45), weights(90), weights(4 * 45), weights(9 * 36), weights(9), weights(4 * 45));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  return graph;
}

TEST_CASE("llvm and cpp backends: conv_rows convs match the interpreter and each other bit for bit", "[llvm][cpp]") {
  auto graph = convShapesGraph();
  const codegen::PlannedProgram planned = codegen::planGraph(*graph);
  std::vector<size_t> rows;
  for (const codegen::Kernel& k : planned.program.kernels) {
    if (k.kind != codegen::KernelKind::Conv) continue;
    const std::vector<std::string> c = codegen::implCandidates(planned.program, k, true);
    const bool has = std::find(c.begin(), c.end(), "conv_rows") != c.end();
    INFO(k.name);
    CHECK(has == (k.domain[3].value() != 10));  // not the column stride of 2
    // conv_rows reads the weight as it is: with bf16 weights only where the layer is too small to
    // be narrowed (all of these), with products in bf16 (a target with AMX-BF16, oneDNN) only
    // where the window is too small for them (codegen::kMinBf16ConvWindow: the layer keeps fp32);
    // without AMX bf16 convs compute as bf16-weights.
    const std::vector<std::string> narrow = codegen::implCandidates(planned.program, k, true, std::nullopt, codegen::Precision::Bf16Weights);
    CHECK((std::find(narrow.begin(), narrow.end(), "conv_rows") != narrow.end()) == has);
    const std::vector<std::string> noAmx = codegen::implCandidates(planned.program, k, true, std::nullopt, codegen::Precision::Bf16);
    CHECK(noAmx == narrow);
    const std::vector<std::string> dot =
        codegen::implCandidates(planned.program, k, true, std::nullopt, codegen::Precision::Bf16, {}, {.bf16Dot = true, .bf16Tiles = true});
    const ir::TensorType& w = planned.program.buffer(k.anchorInputs[1]).type;
    const bool smallWindow = w.shape[1].value() * w.shape[2].value() * w.shape[3].value() < codegen::kMinBf16ConvWindow;
    const bool bf16Products = codegen::onednnBuiltIn() && !smallWindow;
    CHECK((std::find(dot.begin(), dot.end(), "conv_rows") != dot.end()) == (has && !bf16Products));
  }
  // The blocks of both kinds of target (ConvRowTiles): six channels by one chunk without AVX-512;
  // with it, eight by two chunks (rows of 20 and 32: blocks of 8 and 5, a last block of 6 alone)
  // and sixteen by one chunk (rows of 7 in pairs: one block of 9). "native" is the second kind on
  // an AVX-512 host; x86-64-v3 runs everywhere.
  for (const char* target : {"x86-64-v3", "native"}) {
    INFO(target);
    const bool wide = !codegen::narrowVectorTarget(target);
    codegen::CppOptions cpp;
    cpp.minChunkCost = 0;
    cpp.forceImpl = "conv_rows";
    cpp.target = target;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    CHECK(generated.source.find("implementation conv_rows") != std::string::npos);
    CHECK(generated.source.find("pc::loadChunk<1, 16>(xr + 0)") != std::string::npos);  // the left pad's tap
    CHECK(generated.source.find(wide ? "a7_1 = pc::fmaChunk(a7_1, x, wr[" : "a5_0 = pc::fmaChunk(a5_0, x, wr[") != std::string::npos);
    CHECK((generated.source.find("a6_0 = pc::fmaChunk(a6_0, x, wr[") != std::string::npos) == wide);  // over 6 channels a block
    CHECK((generated.source.find("a8_0 = pc::fmaChunk(a8_0, x, wr[") != std::string::npos) == wide);  // the pairs' 9 channels
    CHECK((generated.source.find("a0_1") != std::string::npos) == wide);  // two chunks a pass
    CHECK(generated.source.find("pc::f32x16 v = pc::load16(row) + pc::splat16(bias);") != std::string::npos);  // rows of 32
    CHECK(generated.source.find("pc::loadRows2<1, 7>(xr + 0, xr1 + 0, in0, in1)") != std::string::npos);  // rows of 7 in pairs
    const fs::path so = scratch() / "convrows.so";
    codegen::buildSharedObject(generated, so.string(), {});
    codegen::LlvmOptions llvm;
    llvm.minChunkCost = 0;
    llvm.forceImpl = "conv_rows";
    llvm.keepUnoptimizedIr = true;
    llvm.target.target = target;
    const std::string ir = codegen::generateLlvm(*graph, llvm).unoptimizedIr();
    CHECK(ir.find(wide ? "%a7_1 = alloca <16 x float>" : "%a5_0 = alloca <16 x float>") != std::string::npos);
    CHECK((ir.find("%a8_0 = alloca <16 x float>") != std::string::npos) == wide);
    CHECK(ir.find("@llvm.masked.load.v16f32") != std::string::npos);
    runtime::Model c = runtime::Model::load(so.string()), l = jitModel(*graph, llvm);
    checkBitwiseBackends(*graph, c, l, {1, 3, 5}, 21, 1e-5);
  }
}

// gemm6x16 and gemm8x32 sum every output of a tile over k in the order gemm4x16's tiles do (the
// positions past the last whole tile go through the one-row kernel, whose four partial sums differ
// in the last bits): both backends the same bits with 1-3 threads, on f32 and int8 panels.
TEST_CASE("llvm and cpp backends: gemm6x16 and gemm8x32 convs match gemm4x16 and each other bit for bit", "[llvm][cpp]") {
  auto graph = convShapesGraph();
  for (codegen::Precision precision : {codegen::Precision::Fp32, codegen::Precision::Int8Weights}) {
    std::vector<runtime::Model> models;
    for (const std::string impl : {"gemm4x16", "gemm6x16", "gemm8x32"}) {
      codegen::CppOptions cpp;
      cpp.minChunkCost = 0;
      cpp.forceImpl = impl;
      cpp.precision = precision;
      cpp.streamedWeights = codegen::kMinReducedWeights;  // every narrowed conv int8
      const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
      CHECK((generated.source.find("pc::gemm_6x16_at(") != std::string::npos) == (impl == "gemm6x16"));
      // 13 channels: one panel, eight positions a tile.
      CHECK((generated.source.find("pc::gemm_8x16_at(") != std::string::npos) == (impl == "gemm8x32"));
      const fs::path so = scratch() / fmt::format("six_{}_{}.so", impl, codegen::precisionName(precision));
      codegen::buildSharedObject(generated, so.string(), {});
      models.push_back(runtime::Model::load(so.string()));
      codegen::LlvmOptions llvm;
      llvm.minChunkCost = 0;
      llvm.forceImpl = impl;
      llvm.precision = precision;
      llvm.streamedWeights = codegen::kMinReducedWeights;
      models.push_back(jitModel(*graph, llvm));
    }
    for (int64_t batch : {1, 3}) {
      std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), batch, 5);
      std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
      std::vector<ir::Tensor> quads = driver::runModel(models[0], inputs, 1), six = driver::runModel(models[2], inputs, 1),
                              eight = driver::runModel(models[4], inputs, 1);
      for (size_t o = 0; o < want.size(); ++o) {
        INFO("batch " << batch << " output " << o);
        for (const std::vector<ir::Tensor>* tiles : {&six, &eight}) {
          if (precision == codegen::Precision::Fp32) CHECK(driver::compareTensors("", (*tiles)[o], want[o], 1e-5, 1e-5).pass);
          CHECK(driver::compareTensors("", (*tiles)[o], quads[o], 1e-5, 1e-5).pass);
        }
        // Every position in the same kind of tile or alone: the same bits. Tiles of 8 leave 4, 2 or
        // 1 positions of a plane (180, 76, 90, 49, 28 positions), run as a tile of 4 or alone, as
        // tiles of 4 leave them; tiles of 6 leave 0 or 4 on r, d and h, and the last 1 on g (t, and
        // f and lk, leave 2 and 0 where tiles of 4 leave 0 and 2). p's 15 positions: tiles of 8
        // leave 7, run as one tile of 8 (convTailTile) where tiles of 4 leave the last 3 alone.
        // lk's leaky relu runs on the tiles' lanes (the vector epilogue) and alone on the rest.
        if (o != 6) CHECK(std::memcmp(eight[o].bytes(), quads[o].bytes(), eight[o].nbytes()) == 0);
        if (o != 2 && o != 3 && o != 7) CHECK(std::memcmp(six[o].bytes(), quads[o].bytes(), six[o].nbytes()) == 0);
      }
      for (size_t m = 0; m < models.size(); ++m) {
        const std::vector<ir::Tensor>& first = m < 2 ? quads : m < 4 ? six : eight;
        for (int threads : {1, 2, 3}) {
          std::vector<ir::Tensor> got = driver::runModel(models[m], inputs, threads);
          for (size_t o = 0; o < want.size(); ++o) {
            INFO(codegen::precisionName(precision) << " model " << m << " batch " << batch << " threads " << threads << " output " << o);
            CHECK(std::memcmp(first[o].bytes(), got[o].bytes(), first[o].nbytes()) == 0);
          }
        }
      }
    }
  }
}

// The implicit GEMM of a padded conv reads a zero-padded copy of each image (schedule.h,
// KernelSchedule::paddedImage) where it fits the stack buffer; a conv without padding, and one
// whose padded image (40 x 30 x 30 values) does not fit, keep their direct reads and gathered
// patches. Both backends against the interpreter, 1 and 2 threads the same bits.
TEST_CASE("llvm and cpp backends: padded convs read a padded copy of the image where it fits", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 13, -0.75); };
  const std::string text = fmt::format(R"(graph padded(%x: f32[batch,6,12,12], %y: f32[batch,40,28,28]) {{
  %w = param f32[32,6,3,3] [{}]
  %p = conv(%x, %w) {{strides=[2, 2], pads=[1, 1, 1, 1]}} : f32[batch,32,6,6]
  %r = relu(%p) : f32[batch,32,6,6]
  %u = conv(%x, %w) : f32[batch,32,10,10]
  %v = param f32[32,40,3,3] [{}]
  %b = conv(%y, %v) {{strides=[2, 2], pads=[1, 1, 1, 1]}} : f32[batch,32,14,14]
  return (r=%r, u=%u, b=%b)
}})", weights(32 * 54), weights(32 * 360));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  codegen::CppOptions cpp;
  cpp.minChunkCost = 0;
  cpp.forceImpl = "gemm6x16";
  const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
  auto count = [](const std::string& haystack, const std::string& what) {
    size_t n = 0;
    for (size_t at = haystack.find(what); at != std::string::npos; at = haystack.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count(generated.source, "if (i0 != copied) padImage(i0);") == 1);
  CHECK(count(generated.source, "alignas(64) float padded[1176];") == 1);  // 6 x 14 x 14
  CHECK(count(generated.source, "const bool direct = inside(pos)") == 4);  // u and b: whole tiles and the last one
  const fs::path so = scratch() / "padded_image.so";
  codegen::buildSharedObject(generated, so.string(), {});
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  llvm.forceImpl = "gemm6x16";
  llvm.keepUnoptimizedIr = true;
  const std::string ir = codegen::generateLlvm(*graph, llvm).unoptimizedIr();
  CHECK(count(ir, "%padded = alloca [1176 x float]") == 1);
  checkBothBackends(*graph, so, llvm, 17, 1e-5);
}

// A window row's taps are one group of the implicit GEMM's k (KernelSchedule::tapGroup): one
// offset read a group, the other taps displacements from it, where they are consecutive floats of
// the image read (the padded copy, or the input itself): a padded 3x3 conv and an unpadded 5x2
// one; not with a dilated row (every k its offset). Eight- and six-position tiles, both backends
// against the interpreter and each other bit for bit, 1 and 2 threads.
TEST_CASE("llvm and cpp backends: implicit GEMM tiles read a window row's taps from one offset", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 13, -0.75); };
  const std::string text = fmt::format(R"(graph taps(%x: f32[batch,5,12,12]) {{
  %w = param f32[32,5,3,3] [{}]
  %a = conv(%x, %w) {{strides=[2, 2], pads=[1, 1, 1, 1]}} : f32[batch,32,6,6]
  %v = param f32[32,5,5,2] [{}]
  %b = conv(%x, %v) : f32[batch,32,8,11]
  %d = conv(%x, %w) {{dilations=[1, 2]}} : f32[batch,32,10,8]
  return (a=%a, b=%b, d=%d)
}})", weights(32 * 45), weights(32 * 50));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  for (const char* impl : {"gemm8x32", "gemm6x16"}) {
    INFO(impl);
    codegen::CppOptions cpp;
    cpp.minChunkCost = 0;
    cpp.forceImpl = impl;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    const std::string kern = std::string(impl).substr(4);
    CHECK(occurrences(generated.source, "pc::gemm_" + kern + "_at<3>(") >= 1);
    CHECK(occurrences(generated.source, "pc::gemm_" + kern + "_at<2>(") >= 1);
    CHECK(occurrences(generated.source, "pc::gemm_" + kern + "_at(") >= 1);  // the dilated conv
    const fs::path so = scratch() / fmt::format("tap_groups_{}.so", impl);
    codegen::buildSharedObject(generated, so.string(), {});
    const codegen::LlvmOptions llvm = forcedLlvm(impl);
    CHECK(occurrences(codegen::generateLlvm(*graph, llvm).unoptimizedIr(), "\ntaps.body:") >= 2);
    checkBothBackends(*graph, so, llvm, 19, 1e-5);
  }
}

// The implicit GEMM's tiles run their epilogue on one channel's positions at a time
// (KernelSchedule::tileEpilogue): a tile transposed, each channel's R positions one vector, stored
// as R consecutive floats. Strided relu convs with 20 channels (a partial panel) on 6-column
// rows and 16 (a whole one) on 5-column rows, a tanh on 9-column rows (tiles going on into the
// next row), a residual add (its operand read R floats at a time); not where the epilogue has no
// vector form (pow). Every tile implementation, both backends against the interpreter and each
// other bit for bit, 1 and 2 threads.
TEST_CASE("llvm and cpp backends: implicit GEMM tiles run the epilogue a channel's positions at a time", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 13, -0.75); };
  const std::string text = fmt::format(R"(graph tiles(%x: f32[batch,6,11,11]) {{
  %w = param f32[20,6,3,3] [{}]
  %b = param f32[20] [{}]
  %a = conv(%x, %w, %b) {{strides=[2, 2], pads=[1, 1, 1, 1]}} : f32[batch,20,6,6]
  %ra = relu(%a) : f32[batch,20,6,6]
  %t = conv(%x, %w) : f32[batch,20,9,9]
  %tt = tanh(%t) : f32[batch,20,9,9]
  %v = param f32[6,6,3,3] [{}]
  %c = conv(%x, %v) {{pads=[1, 1, 1, 1]}} : f32[batch,6,11,11]
  %s = add(%c, %x) : f32[batch,6,11,11]
  %rs = relu(%s) : f32[batch,6,11,11]
  %p = conv(%x, %w) {{strides=[2, 2]}} : f32[batch,20,5,5]
  %rp = relu(%p) : f32[batch,20,5,5]
  %e = param f32[5] [1.5, 0.5, 2.5, 1.25, 3.0]
  %q = pow(%rp, %e) : f32[batch,20,5,5]
  %w16 = param f32[16,6,3,3] [{}]
  %m = conv(%x, %w16) {{strides=[2, 2], pads=[1, 1, 0, 0]}} : f32[batch,16,5,5]
  %rm = relu(%m) : f32[batch,16,5,5]
  return (ra=%ra, tt=%tt, rs=%rs, q=%q, rm=%rm)
}})", weights(20 * 54), weights(20), weights(6 * 54), weights(16 * 54));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  for (const std::string impl : {"gemm4x16", "gemm6x16", "gemm4x32", "gemm8x32"}) {
    INFO(impl);
    codegen::CppOptions cpp;
    cpp.minChunkCost = 0;
    cpp.forceImpl = impl;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    // Four of the five convs; gemm4x32 and gemm8x32 run a 20-channel conv's two panels as a pair.
    const std::string rows = impl == "gemm6x16" ? "6" : impl == "gemm8x32" ? "8" : "4";
    const bool pairs = impl == "gemm4x32" || impl == "gemm8x32";
    CHECK(occurrences(generated.source, "pc::transposeTile<" + rows + ", 16>(out16, columns);") == (pairs ? 2 : 4));
    CHECK(occurrences(generated.source, "pc::transposeTile<" + rows + ", 32>(out, columns);") == (pairs ? 2 : 0));
    CHECK(occurrences(generated.source, "v = pc::tanhv(v);") == 1);
    // R positions of a channel: the first R lanes of 8, all 8 for gemm8x32.
    const std::string store = rows == "8" ? "pc::store8(" : "pc::storeFirst8<" + rows + ">(";
    const std::string load = rows == "8" ? "pc::load8(" : "pc::loadFirst8<" + rows + ">(";
    CHECK(occurrences(generated.source, store) >= 2);
    // the residual (with gemm8x32 past the transposed columns' loads)
    CHECK(occurrences(generated.source, load) >= 1 + (rows == "8" ? occurrences(generated.source, "pc::load8(columns") : 0));
    const fs::path so = scratch() / fmt::format("tiles_{}.so", impl);
    codegen::buildSharedObject(generated, so.string(), {});
    const codegen::LlvmOptions llvm = forcedLlvm(impl);
    CHECK(occurrences(codegen::generateLlvm(*graph, llvm).unoptimizedIr(), "%columns = alloca [128 x float]") == 4);  // not pow's
    checkBothBackends(*graph, so, llvm, 23, 1e-5);
    runtime::Model c = runtime::Model::load(so.string()), l = jitModel(*graph, llvm);
    for (int64_t batch : {1, 3}) {
      std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), batch, 29);
      std::vector<ir::Tensor> fromCpp = driver::runModel(c, inputs, 2), fromLlvm = driver::runModel(l, inputs, 2);
      for (size_t o = 0; o < fromCpp.size(); ++o) {
        INFO("batch " << batch << " output " << o);
        CHECK(std::memcmp(fromCpp[o].bytes(), fromLlvm[o].bytes(), fromCpp[o].nbytes()) == 0);
      }
    }
  }
}

// A constant pad runs by rows in both backends (schedule.h, PadRows): a row all padding, or a
// padded head, the copied input row (LLVM: 16 values at a time where the schedule says so) and a
// padded tail. Pads on an outer axis and both ends of the last, a fused epilogue, a u8 input
// (its conversion in the copy, left scalar), and an edge pad, which keeps the general form.
TEST_CASE("llvm and cpp backends: a constant pad by rows matches the interpreter", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph pads(%x: f32[batch,2,3,37], %q: u8[batch,2,5]) {
  %p = pad(%x) {pads=[0, 1, 1, 3, 0, 0, 2, 1], value=0.5} : f32[batch,3,6,41]
  %t = tanh(%p) : f32[batch,3,6,41]
  %c = cast(%q) {to="f32"} : f32[batch,2,5]
  %u = pad(%c) {pads=[0, 1, 2, 0, 0, 1]} : f32[batch,3,8]
  %e = pad(%x) {pads=[0, 0, 0, 2, 0, 0, 0, 1], mode="edge"} : f32[batch,2,3,40]
  return (t=%t, u=%u, e=%e)
})");
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(generated.source.find("for (int64_t i3 = 3; i3 < 40; ++i3) epilogue(") != std::string::npos);
  CHECK(generated.source.find("for (int64_t i3 = 40; i3 < 41; ++i3) epilogue(") != std::string::npos);
  const fs::path so = scratch() / "pads.so";
  codegen::buildSharedObject(generated, so.string(), {});
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  llvm.keepUnoptimizedIr = true;
  CHECK(codegen::generateLlvm(*graph, llvm).unoptimizedIr().find("chunk.body") != std::string::npos);
  checkBothBackends(*graph, so, llvm, 5, 1e-6);
}

// A 2-D average pool with unit column stride runs an output row at a time in both backends
// (Form::AvgPoolRows): the sums in registers, chunks of 16 columns (a and b: a partial chunk,
// taps cut at both ends, count_include_pad, ceil_mode and asymmetric pads), or, past 256 columns,
// in memory (c); a strided one does not (d: a window per output, 8 at a time in the C++ backend).
// With the padding counted, a pool whose windows all lie inside the padded input divides its sums
// by the window's size as whole vectors (a); one whose last row of windows is clipped (e: ceil_mode) by
// each window's clipped size.
TEST_CASE("llvm and cpp backends: average pools by rows match the interpreter", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph avg(%x: f32[batch,2,5,21], %w: f32[batch,1,2,260]) {
  %a = avg_pool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1} : f32[batch,2,5,21]
  %b = avg_pool(%x) {kernel_shape=[2, 4], strides=[2, 1], pads=[0, 2, 1, 0], ceil_mode=1} : f32[batch,2,3,20]
  %c = avg_pool(%w) {kernel_shape=[1, 3], pads=[0, 1, 0, 1]} : f32[batch,1,2,260]
  %d = avg_pool(%x) {kernel_shape=[2, 2], strides=[2, 2]} : f32[batch,2,2,10]
  %e = avg_pool(%x) {kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 0, 1], count_include_pad=1, ceil_mode=1} : f32[batch,2,3,21]
  return (a=%a, b=%b, c=%c, d=%d, e=%e)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "avg", 9, 1e-6);
  CHECK(occurrences(source, "alignas(64) float sum[") == 4);
  CHECK(occurrences(source, "r1 / 9.0f);") == 1);  // a's 21 columns: two chunks divided as vectors
  CHECK(occurrences(source, "const float acc = count == 0 ? 0.0f : sum[i3];") == 1);
  CHECK(occurrences(source, "sum[i3] / static_cast<float>(static_cast<int32_t>(e0 - b0) * (e1 - b1));") == 1);
  CHECK(source.find("r1 = pc::fmaLanesZ<0, 5>(r1, row + 15, 1.0f);") != std::string::npos);
  CHECK(source.find("for (int64_t i3 = 1; i3 < 260; ++i3) sum[i3] += row[i3*1 - 1];") != std::string::npos);
  // Without AVX-512 a chunk is two 8-lane halves (pc::RowChunk, divided half by half): the same
  // sums and quotients as the LLVM build for that target (a's division once failed to compile).
  const codegen::GeneratedCpp narrow = splitCpp(*graph, "x86-64-v3");
  CHECK(occurrences(narrow.source, "r1 / 9.0f);") == 1);
  checkGeneratedBitwise(*graph, narrow, "avg_rows_v3", {1, 3}, 13, 1e-6, "", "x86-64-v3");
}

// A 2-D average pool of column stride 2 whose windows lie inside the input runs 8 output columns
// at a time in both backends (KernelSchedule::vectorEpilogue on Form::Pool: pc::evenLanes), the
// rest of a row one by one, bit for bit: 2x2 and 3x3 windows over rows of
// 18 outputs (two vectors and two alone), a 2x3 one with row stride 1 and a fused relu; a padded
// pool and one of 5 output columns keep a window per output.
TEST_CASE("llvm and cpp backends: stride-2 average pools take 8 output columns at a time", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph even(%x: f32[batch,3,20,37], %y: f32[batch,2,10,10]) {
  %a = avg_pool(%x) {kernel_shape=[2, 2], strides=[2, 2]} : f32[batch,3,10,18]
  %b = avg_pool(%x) {kernel_shape=[3, 3], strides=[2, 2]} : f32[batch,3,9,18]
  %c = avg_pool(%x) {kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1]} : f32[batch,3,11,19]
  %d = avg_pool(%y) {kernel_shape=[2, 2], strides=[2, 2]} : f32[batch,2,5,5]
  %f = avg_pool(%x) {kernel_shape=[2, 3], strides=[1, 2]} : f32[batch,3,19,18]
  %g = relu(%f) : f32[batch,3,19,18]
  return (a=%a, b=%b, c=%c, d=%d, g=%g)
})");
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "pc::f32x8 v = pc::evenOrder(sum) / static_cast<float>(") == 3);
  CHECK(occurrences(generated.source, "sum += pc::evenLanes(") == 4 + 9 + 6);
  CHECK(generated.source.find("v = v < 0.0f ? 0.0f : v;") != std::string::npos);
  codegen::LlvmOptions llvm;
  llvm.keepUnoptimizedIr = true;
  CHECK(occurrences(codegen::generateLlvm(*graph, llvm).unoptimizedIr(), "<8 x i32> <i32 0, i32 1, i32 4, i32 5, i32 2, i32 3, i32 6, i32 7>") == 3);
  checkGeneratedBitwise(*graph, generated, "even_pools", {1, 3}, 31, 1e-6);
}

// The C++ prelude's row helpers (pc::fmaLanes, pc::fmaLanesZ, pc::loadFirst8, pc::evenLanes) have an
// AVX-512, an AVX and an SSE form; the host picks one for `native`, so each is built here by its
// target and run on the interpreter's inputs: a depthwise conv of 21 columns (a whole and a
// partial chunk, taps cut at both ends), a max pool, a stride-1 and a stride-2 average pool of
// the same rows.
TEST_CASE("cpp backend: the row helpers of every vector width match the interpreter", "[cpp]") {
  auto graph = ir::parseGraph(R"(graph rows(%x: f32[batch,3,5,21]) {
  %w = param f32[3,1,3,3] [0.5, -1, 0.25, 2, 1, -0.5, 0.75, 1.5, -2, 1, 0.5, -0.25, 0.125, 1, 2, -1, 0.5, 0.25, -0.75, 1, 0.5, 2, -1.5, 0.25, 1, -0.5, 0.75]
  %c = conv(%x, %w) {group=3, pads=[1, 1, 1, 1]} : f32[batch,3,5,21]
  %m = max_pool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} : f32[batch,3,3,11]
  %a = avg_pool(%x) {kernel_shape=[2, 3], pads=[0, 1, 1, 1]} : f32[batch,3,5,21]
  %e = avg_pool(%x) {kernel_shape=[2, 2], strides=[2, 2]} : f32[batch,3,2,10]
  return (c=%c, m=%m, a=%a, e=%e)
})");
  passes::runPipeline(*graph);
  std::vector<std::string> targets = {"x86-64-v3", "generic"};
  if (__builtin_cpu_supports("avx512f")) targets.push_back("x86-64-v4");
  for (const std::string& target : targets) {
    INFO("target " << target);
    codegen::CppOptions cpp;
    cpp.target = target;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    // The pool's taps (weight 1) skip the select of the reached lanes (fmaLanesZ); the convs keep it.
    CHECK(generated.source.find("pc::fmaLanesZ<") != std::string::npos);
    CHECK(generated.source.find("pc::fmaLanes<") != std::string::npos);
    CHECK(generated.source.find("pc::loadFirst8<5>") != std::string::npos);
    CHECK(generated.source.find("pc::evenOrder(sum)") != std::string::npos);
    const fs::path so = scratch() / fmt::format("rows_{}.so", target);
    codegen::buildSharedObject(generated, so.string(), {});
    runtime::Model model = runtime::Model::load(so.string());
    for (int64_t batch : {1, 3}) {
      std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), batch, 13);
      inputs[0].data<float>()[7] = std::numeric_limits<float>::quiet_NaN();  // a NaN in the max pool's second window
      std::vector<ir::Tensor> want = ir::interpret(*graph, inputs), got = driver::runModel(model, inputs, 1);
      for (size_t o = 0; o < want.size(); ++o) {
        INFO("batch " << batch << " output " << o);
        CHECK(driver::compareTensors("", got[o], want[o], 1e-6, 1e-6).pass);
      }
    }
  }
}

// A max pool's window step runs on the column registers (RowPoolGeometry::window) where each
// window column's values for 8 outputs come from at most three registers: stride 1 over 32
// columns (four output chunks, whole: the epilogue, the pool stored for a residual add and its
// relu stored, on vectors; as IMPALA's), a pool of two columns (m, whole chunks, no epilogue),
// dilated columns with ceil_mode (a partial chunk, -inf past the row), IMPALA's 3x3 of stride 2
// (e); with column stride 2 (m, e) the step's lanes are in pc::evenLanes' order, put back once
// (RowPoolGeometry::evenOrder); a column stride of 5 reaches five registers and keeps the step
// over the columns in memory.
TEST_CASE("llvm and cpp backends: max pool window steps on registers match the interpreter", "[llvm][cpp][pool]") {
  auto graph = ir::parseGraph(R"(graph pools(%x: f32[batch,2,4,32]) {
  %a = max_pool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[batch,2,4,32]
  %ra = relu(%a) : f32[batch,2,4,32]
  %m = max_pool(%ra) {kernel_shape=[1, 2], strides=[1, 2]} : f32[batch,2,4,16]
  %s = add(%a, %x) : f32[batch,2,4,32]
  %b = max_pool(%x) {kernel_shape=[3, 2], strides=[1, 5], pads=[1, 0, 1, 0]} : f32[batch,2,4,7]
  %c = max_pool(%x) {kernel_shape=[1, 3], strides=[2, 2], dilations=[1, 2], ceil_mode=1} : f32[batch,2,2,15]
  %r = relu(%c) : f32[batch,2,2,15]
  %e = max_pool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} : f32[batch,2,2,16]
  return (s=%s, m=%m, b=%b, r=%r, e=%e)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "maxpool_rows", 17, 0);
  // Each window step twice: without NaN flags and, for a unit whose rows hold a NaN, with them.
  CHECK(occurrences(source, "pc::store8(out + ") == 4);           // c's two chunks of 8 outputs (a's epilogue runs on vectors)
  CHECK(occurrences(source, "v = v < 0.0f ? 0.0f : v;") == 8);  // a's relu, a chunk at a time
  CHECK(occurrences(source, "float col[") == 1);                  // b's step in memory
  CHECK(occurrences(source, "__builtin_shufflevector(") > 0);
  CHECK(occurrences(source, "if (!pc::anyLane(nanAny != nanAny)) {") == 4);  // a, m, c and e: one NaN test a unit
  CHECK(occurrences(source, "pc::evenOrder(") == 2 * (2 + 2));     // m's and e's two chunks, each step twice
  codegen::LlvmOptions llvm;
  llvm.keepUnoptimizedIr = true;
  const std::string ir = codegen::generateLlvm(*graph, llvm).unoptimizedIr();
  CHECK(ir.find("shufflevector") != std::string::npos);
  CHECK(occurrences(ir, "\nnan.else:") == 4);  // the LLVM printer's one NaN flag a unit, the same four
  // NaN in some rows (a unit's second pass for the flags per column): columns 0, 7, 8 and 31 of
  // rows of the first image, the window columns on both sides of a chunk's edge; in the second
  // image no NaN but an inf and a -inf, and values whose sums overflow both ways, in one unit's
  // rows (the unit's NaN test, a sum of its rows, fires without a NaN: the flags path then finds
  // none); both backends against the interpreter and bit for bit against each other.
  runtime::Model cppModel = runtime::Model::load((scratch() / "maxpool_rows.so").string());
  runtime::Model llvmModel = jitModel(*graph, codegen::LlvmOptions{});
  std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), 2, 19);
  for (int64_t at : {0, 32 + 7, 64 + 8, 96 + 31, 128 + 8}) inputs[0].data<float>()[at] = std::numeric_limits<float>::quiet_NaN();
  float* second = inputs[0].data<float>() + 256;
  second[5] = std::numeric_limits<float>::infinity(), second[32 + 9] = -std::numeric_limits<float>::infinity();
  second[128 + 3] = second[128 + 4] = 3e38f, second[160 + 12] = second[160 + 13] = -3e38f;
  const std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
  const std::vector<ir::Tensor> c1 = driver::runModel(cppModel, inputs, 1), l1 = driver::runModel(llvmModel, inputs, 1);
  for (size_t o = 0; o < want.size(); ++o) {
    INFO("output " << o);
    CHECK(driver::compareTensors("", c1[o], want[o], 0, 0).pass);
    CHECK(std::memcmp(c1[o].bytes(), l1[o].bytes(), c1[o].nbytes()) == 0);
  }
}

// Sums of f32 values run through sixteen partial sums in both backends (KernelSchedule::sumRun,
// pc::sumOf, Emitter::sumOf), in the same order: cpp and llvm agree bit for bit. A run of 37
// (two vectors and a tail), the contiguous rows of a mean over two axes and of a global average
// pool (185), a fused exp prologue (staged) with an outer reduced axis around the run, a run under 16
// (one running sum), on the host's vector width and the generic (SSE) one.
TEST_CASE("llvm and cpp backends: sums through partial sums agree bit for bit", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph sums(%x: f32[batch,3,5,37]) {
  %a = reduce_sum(%x) {axes=[3]} : f32[batch,3,5,1]
  %b = reduce_mean(%x) {axes=[2, 3], keepdims=0} : f32[batch,3]
  %e = exp(%x) : f32[batch,3,5,37]
  %c = reduce_sum(%e) {axes=[1, 3]} : f32[batch,1,5,1]
  %g = global_avg_pool(%x) : f32[batch,3,1,1]
  %s = reduce_mean(%x) {axes=[2]} : f32[batch,3,1,37]
  return (a=%a, b=%b, c=%c, g=%g, s=%s)
})");
  passes::runPipeline(*graph);
  for (const std::string target : {"native", "generic"}) {
    INFO("target " << target);
    codegen::CppOptions cpp;
    cpp.minChunkCost = 0;
    cpp.target = target;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    CHECK(occurrences(generated.source, "pc::sumOf(") == 3);  // not s's five rows
    CHECK(occurrences(generated.source, "pc::sumOf<true>(37, ") == 1);  // c's exps staged (SumRun::staged)
    CHECK(generated.source.find("pc::sumOf(185, ") != std::string::npos);
    const fs::path so = scratch() / fmt::format("sums_{}.so", target);
    codegen::buildSharedObject(generated, so.string(), {});
    runtime::Model cppModel = runtime::Model::load(so.string());
    codegen::LlvmOptions llvm;
    llvm.minChunkCost = 0;
    llvm.target.target = target;
    runtime::Model llvmModel = jitModel(*graph, llvm);
    checkBitwiseBackends(*graph, cppModel, llvmModel, {1, 3}, 23, 1e-5);
  }
}

TEST_CASE("llvm and cpp backends: sums over rows of 8 eight rows a vector agree bit for bit", "[llvm][cpp]") {
  // Rows of 8 values (under a sumOf run): the C++ printer sums eight rows at a time a row a lane
  // (pc::rowSums8), the rows past the last eight one by one; a product and a sum of a prologue's
  // values. Rows of 13 and 1 (a mean, a sum with a libm call in it), three rows of five a batch
  // row, and a maximum stay one row at a time.
  auto graph = ir::parseGraph(R"(graph short_sums(%x: f32[batch,13], %y: f32[batch,8], %z: f32[batch,1], %w: f32[batch,3,5]) {
  %a = reduce_sum(%x) {axes=[1]} : f32[batch,1]
  %p = reduce_prod(%y) {axes=[1], keepdims=0} : f32[batch]
  %m = reduce_mean(%x) {axes=[1], keepdims=0} : f32[batch]
  %yy = mul(%y, %y) : f32[batch,8]
  %q = reduce_sum(%yy) {axes=[1], keepdims=0} : f32[batch]
  %e = exp(%x) : f32[batch,13]
  %s = reduce_sum(%e) {axes=[1], keepdims=0} : f32[batch]
  %o = reduce_sum(%z) {axes=[1], keepdims=0} : f32[batch]
  %t = reduce_sum(%w) {axes=[2], keepdims=0} : f32[batch,3]
  %u = reduce_max(%y) {axes=[1], keepdims=0} : f32[batch]
  return (a=%a, p=%p, m=%m, q=%q, s=%s, o=%o, t=%t, u=%u)
})");
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "pc::rowSums8<") == 2);  // p and q
  CHECK(occurrences(generated.source, "pc::rowSums8<8, true>(1.0, ") == 1);
  checkGeneratedBitwise(*graph, generated, "short_sums", {1, 8, 19, 64}, 29, 1e-5);
}

TEST_CASE("llvm and cpp backends: batched matmuls by output rows of vectors agree bit for bit", "[llvm][cpp]") {
  // Output rows of 4j <= 64 columns contiguous in B run as vectors in the C++ backend
  // (pc::matmulRow); 3 and 68 columns, and a 1-D B, keep the loop per output. Rows four at a
  // time in both backends (KernelSchedule::matmulRowQuads: pc::matmulRows, the LLVM printer's
  // quads) where the rows are a multiple of 4 and a row at most two vectors (32 columns with
  // AVX-512, 16 without): not 64 columns, nor 6 rows, 32 columns only with AVX-512; 8 rows of 8 and 16 columns with an
  // epilogue on the row's vectors (KernelSchedule::vectorEpilogue); A a constant broadcast over
  // the batch, A's heads broadcast against B's.
  auto graph = ir::parseGraph(R"(graph bmm(%a: f32[batch,4,16], %b4: f32[batch,16,4], %b12: f32[batch,16,12], %b64: f32[batch,16,64],
      %b3: f32[batch,16,3], %b68: f32[batch,16,68], %v: f32[16], %a6: f32[batch,6,16], %a8: f32[batch,8,16], %b8: f32[batch,16,8],
      %b16: f32[batch,16,16], %m: f32[8,16], %b32: f32[batch,16,32], %a1: f32[batch,1,8,16], %b2: f32[batch,2,16,8]) {
  %w = param f32[8,16] [0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0,
    0.5, -0.25, 0.125, 1.0, -1.5, 0.75, 0.0625, -0.5, 0.25, 2.0, -0.125, 0.375, -0.75, 1.25, 0.5, -1.0]
  %p4 = matmul(%a, %b4) : f32[batch,4,4]
  %p12 = matmul(%a, %b12) : f32[batch,4,12]
  %p64 = matmul(%a, %b64) : f32[batch,4,64]
  %p3 = matmul(%a, %b3) : f32[batch,4,3]
  %p68 = matmul(%a, %b68) : f32[batch,4,68]
  %pv = matmul(%a, %v) : f32[batch,4]
  %p6 = matmul(%a6, %b4) : f32[batch,6,4]
  %p8 = matmul(%a8, %b8) : f32[batch,8,8]
  %t8 = tanh(%p8) : f32[batch,8,8]
  %p16 = matmul(%a8, %b16) : f32[batch,8,16]
  %s16 = add(%p16, %m) : f32[batch,8,16]
  %p32 = matmul(%a, %b32) : f32[batch,4,32]
  %pw = matmul(%w, %b8) : f32[batch,8,8]
  %pb = matmul(%a1, %b2) : f32[batch,2,8,8]
  return (p4=%p4, p12=%p12, p64=%p64, p3=%p3, p68=%p68, pv=%pv, p6=%p6, t8=%t8, s16=%s16, p32=%p32, pw=%pw, pb=%pb)
})");
  passes::runPipeline(*graph);
  const bool wide = !codegen::narrowVectorTarget("native");
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "pc::matmulRows<4, ") == (wide ? 7 : 6));
  CHECK(occurrences(generated.source, "pc::matmulRows<4, 12>(16, ") == 1);
  CHECK(occurrences(generated.source, "pc::matmulRows<4, 4>(16, ") == 1);  // p4; p6's 6 rows one at a time
  CHECK(occurrences(generated.source, "pc::matmulRow<4>(16, ") == 1);
  CHECK(occurrences(generated.source, "pc::matmulRow<64>(16, ") == 1);
  CHECK(occurrences(generated.source, "pc::matmulRow<32>(16, ") == (wide ? 0 : 1));  // two vectors only with AVX-512
  CHECK(occurrences(generated.source, "pc::matmulRow<") == (wide ? 2 : 3));
  checkGeneratedBitwise(*graph, generated, "bmm", {1, 5}, 31, 1e-5);
  // Without AVX-512 (8-lane vectors, 32 columns a row one at a time): the same bits in both.
  const codegen::GeneratedCpp narrow = splitCpp(*graph, "x86-64-v3");
  CHECK(occurrences(narrow.source, "pc::matmulRows<4, ") == 6);
  CHECK(occurrences(narrow.source, "pc::matmulRow<32>(16, ") == 1);
  checkGeneratedBitwise(*graph, narrow, "bmm_v3", {1, 5}, 31, 1e-5, "", "x86-64-v3");
}

// An attention's scores scaled and masked (a causal mask, a bool param broadcast over the batch
// and the heads: where(mask, -inf, score)) run their epilogue on vectors of a row's columns in
// the C++ backend: 8 and 16 columns, the mask as lane masks (pc::boolLanes8/16). Where a sum
// follows the product (a residual added after the scale) the product stays scalar: a vector
// form could contract it into an FMA. Both backends the same bits.
TEST_CASE("llvm and cpp backends: a scaled, causally masked attention score on vectors agrees bit for bit", "[llvm][cpp]") {
  auto causal = [](int rows, int cols) {
    std::vector<std::string> v;
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < cols; ++j) v.push_back(j > i ? "1" : "0");
    }
    return fmt::format("{}", fmt::join(v, ", "));
  };
  auto graph = ir::parseGraph(fmt::format(R"(graph attn(%q: f32[batch,2,8,16], %k: f32[batch,2,16,8], %k16: f32[batch,2,16,16], %r: f32[batch,2,8,8]) {{
  %m8 = param bool[8,8] [{}]
  %m16 = param bool[8,16] [{}]
  %scale = param f32[] [0.25]
  %ninf = param f32[] [-inf]
  %s = matmul(%q, %k) : f32[batch,2,8,8]
  %d = mul(%s, %scale) : f32[batch,2,8,8]
  %w = where(%m8, %ninf, %d) : f32[batch,2,8,8]
  %s16 = matmul(%q, %k16) : f32[batch,2,8,16]
  %d16 = mul(%s16, %scale) : f32[batch,2,8,16]
  %w16 = where(%m16, %d16, %ninf) : f32[batch,2,8,16]
  %s3 = matmul(%q, %k) : f32[batch,2,8,8]
  %d3 = mul(%s3, %scale) : f32[batch,2,8,8]
  %a = add(%d3, %r) : f32[batch,2,8,8]
  return (w=%w, w16=%w16, a=%a)
}})", causal(8, 8), causal(8, 16)));
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "pc::boolLanes8(") == 1);
  CHECK(occurrences(generated.source, "pc::boolLanes16(") == 1);
  CHECK(occurrences(generated.source, "pc::splat8(0.25f)") == 1);  // w's scale; a's product stays scalar
  checkGeneratedBitwise(*graph, generated, "attn_mask", {1, 3}, 23, 1e-5);
}

// A pool whose windows all lie inside its input runs fixed window loops without bounds checks
// (KernelSchedule::windowInside; LLVM then vectorises across the outputs): a 1-D max pool and a
// 3-D average pool inside, a 1-D average pool with padding and one with ceil_mode that reach
// past the input keep the checks.
TEST_CASE("llvm and cpp backends: pools with every window inside match the interpreter", "[llvm][cpp][pool]") {
  auto graph = ir::parseGraph(R"(graph inside(%x: f32[batch,3,20], %v: f32[batch,2,4,5,6]) {
  %m = max_pool(%x) {kernel_shape=[3], strides=[2], dilations=[2]} : f32[batch,3,8]
  %a = avg_pool(%x) {kernel_shape=[3], strides=[2], pads=[1, 1]} : f32[batch,3,10]
  %c = avg_pool(%x) {kernel_shape=[4], strides=[3], ceil_mode=1} : f32[batch,3,7]
  %w = avg_pool(%v) {kernel_shape=[2, 2, 3], strides=[2, 1, 3]} : f32[batch,2,2,4,2]
  return (m=%m, a=%a, c=%c, w=%w)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "inside", 29, 1e-6);
  CHECK(occurrences(source, "if (p0 < 0 || p0 >= ") == 2);                       // a's and c's one spatial axis
  CHECK(source.find("acc = acc / static_cast<float>(12);") != std::string::npos);  // w's window
}

// Trailing axes that every access walks as one contiguous run loop once (KernelSchedule::
// collapseFrom): a map's rows and columns (a), not where an operand broadcasts along the last
// axis (b: its rows stay a loop) or reads a slice of wider rows (c: rows 6 apart, 4 wide).
TEST_CASE("llvm and cpp backends: pointwise loops over contiguous axes collapse where every access allows", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph runs(%x: f32[batch,3,5,7], %r: f32[batch,3,5,1], %w: f32[batch,5,6]) {
  %a = tanh(%x) : f32[batch,3,5,7]
  %b = add(%x, %r) : f32[batch,3,5,7]
  %s = slice(%w) {starts=[1], ends=[5], axes=[2]} : f32[batch,5,4]
  %c = exp(%s) : f32[batch,5,4]
  return (a=%a, b=%b, c=%c)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "runs", 31, 1e-6);
  CHECK(source.find("for (int64_t i3 = 0; i3 < 105; ++i3) {") != std::string::npos);  // a
  CHECK(source.find("for (int64_t i2 = 0; i2 < 5; ++i2) {") != std::string::npos);    // b
  CHECK(source.find("for (int64_t i1 = 0; i1 < 5; ++i1) {") != std::string::npos);    // c
}

// A softmax keeps its row's exps for the second pass where the row has at most 4096 values
// (KernelSchedule::keptExps; over f32 values computed in f32 first, KernelSchedule::f32Exps), and
// computes them twice past that; both against the interpreter.
TEST_CASE("llvm and cpp backends: softmax with kept and recomputed exps match the interpreter", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph sm(%x: f32[batch,3,37], %w: f32[batch,4100]) {
  %a = softmax(%x) {axis=-1} : f32[batch,3,37]
  %b = softmax(%w) {axis=-1} : f32[batch,4100]
  %c = log_softmax(%x) {axis=1} : f32[batch,3,37]
  return (a=%a, b=%b, c=%c)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "softmax_kept", 37, 1e-6);
  CHECK(source.find("float e[37];") != std::string::npos);
  CHECK(source.find("pc::sumOf(37, ") != std::string::npos);
  CHECK(source.find(" e[4100]") == std::string::npos);
}

// erf (and a GELU built on it) in both backends, bit for bit: the C++ prelude's last step,
// 1 - p e, is contracted into one fused multiply-add where the target has FMA, and the LLVM
// printer writes it as one llvm.fmuladd (it was a multiply and a subtract: an ulp apart).
TEST_CASE("llvm and cpp backends: erf and GELU agree bit for bit", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph gelu(%x: f32[batch,300]) {
  %r = param f32[] [0.70710678]
  %one = param f32[] [1.0]
  %e = erf(%x) : f32[batch,300]
  %h = mul(%x, %r) : f32[batch,300]
  %f = erf(%h) : f32[batch,300]
  %g = add(%f, %one) : f32[batch,300]
  %y = mul(%g, %x) : f32[batch,300]
  return (e=%e, y=%y)
})");
  passes::runPipeline(*graph);
  checkGeneratedBitwise(*graph, splitCpp(*graph), "erf_gelu", {1, 9, 64}, 43, 1e-6);
}

// Softmax over short rows (at most KernelSchedule::kShortRow) along the last axis: the C++
// printer takes eight rows at a time, a row a vector lane (pc::softmaxRows8), the rows past the
// last eight one by one; rows of 8 (a categorical head), rows of 5 three to a batch row (rows
// crossing batch rows), rows of 4 after a fused prologue (rows of up to 8 transposed in
// registers), rows of 13 (gathered lane by lane), a log_softmax over rows of 8 ((x - max) - the
// log of each row's sum). A softmax over rows of 37 stays one row at a time. Random rows at
// several batch sizes (tails of 0 to 7 rows), then rows with a NaN, all -inf, +inf, equal values
// and signed zeros inside one block of eight (softmax and log_softmax): both backends, 1 and 2
// threads, bit for bit, and as the interpreter.
TEST_CASE("llvm and cpp backends: softmax over short rows eight rows at a time agrees bit for bit", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph sm8(%x: f32[batch,8], %y: f32[batch,3,5], %z: f32[batch,2,4], %w: f32[batch,37], %v: f32[batch,13]) {
  %a = softmax(%x) {axis=-1} : f32[batch,8]
  %e = softmax(%v) {axis=-1} : f32[batch,13]
  %b = softmax(%y) {axis=-1} : f32[batch,3,5]
  %q = mul(%z, %z) : f32[batch,2,4]
  %c = softmax(%q) {axis=2} : f32[batch,2,4]
  %l = log_softmax(%x) {axis=-1} : f32[batch,8]
  %d = softmax(%w) {axis=-1} : f32[batch,37]
  return (a=%a, b=%b, c=%c, l=%l, d=%d, e=%e)
})");
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  CHECK(occurrences(generated.source, "pc::softmaxRows8<") == 5);
  CHECK(occurrences(generated.source, "pc::softmaxRows8<8, true>(") == 1);
  CHECK(occurrences(generated.source, "pc::softmaxRows8<13>(") == 1);
  CHECK(occurrences(generated.source, "pc::softmaxRows8<8>(") == 1);
  // A row's indices divided as unsigned (shifts and masks for powers of two).
  CHECK(occurrences(generated.source,
                    "pc::softmaxRows8<5>([&](int64_t r, int64_t j) { const uint64_t uq = (rb + r); const int64_t i0 = uq / 3, i1 = uq / 1 % 3, i2 = j;") ==
        1);
  checkGeneratedBitwise(*graph, generated, "softmax_rows8", {1, 7, 8, 13, 64}, 41, 1e-6);

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto rows = ir::parseGraph(R"(graph sm8x(%x: f32[batch,8]) {
  %a = softmax(%x) {axis=-1} : f32[batch,8]
  %l = log_softmax(%x) {axis=-1} : f32[batch,8]
  return (a=%a, l=%l)
})");
  passes::runPipeline(*rows);
  std::vector<float> x(11 * 8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>((i * 5) % 11) - 1.0f;
  x[1 * 8 + 3] = nan;
  for (int j = 0; j < 8; ++j) x[2 * 8 + j] = -inf, x[4 * 8 + j] = 3.0f, x[5 * 8 + j] = j % 2 ? -0.0f : 0.0f;
  x[3 * 8 + 6] = inf;
  x[9 * 8 + 0] = nan;  // in the rows past the last eight
  std::vector<ir::Tensor> inputs = {ir::Tensor::fromVector(ir::DType::F32, {11, 8}, x)};
  std::vector<ir::Tensor> want = ir::interpret(*rows, inputs);
  const fs::path so = scratch() / "softmax_rows8_special.so";
  codegen::buildSharedObject(splitCpp(*rows), so.string(), {});
  runtime::Model cppModel = runtime::Model::load(so.string());
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  std::vector<ir::Tensor> c1 = driver::runModel(cppModel, inputs, 1), c2 = driver::runModel(cppModel, inputs, 2);
  std::vector<ir::Tensor> l1 = driver::runModel(jitModel(*rows, llvm), inputs, 1);
  for (size_t o = 0; o < 2; ++o) {
    INFO("output " << o);
    CHECK(driver::compareTensors("", c1[o], want[o], 1e-6, 1e-6).pass);
    CHECK(std::memcmp(c1[o].bytes(), c2[o].bytes(), c1[o].nbytes()) == 0);
    CHECK(std::memcmp(c1[o].bytes(), l1[o].bytes(), c1[o].nbytes()) == 0);
  }
  for (int j = 0; j < 8; ++j) {
    CHECK(std::isnan(c1[1].data<float>()[1 * 8 + j]));
    CHECK(std::isnan(c1[0].data<float>()[1 * 8 + j]));
    CHECK(c1[0].data<float>()[4 * 8 + j] == 0.125f);
    CHECK(c1[0].data<float>()[5 * 8 + j] == 0.125f);
  }
}

// A model without a batch dim (a static leading dim, as old exports have): every image of the
// packed conv, the max pool by rows and the average pool is computed, not the first batch-row's
// worth (their thread units once counted images from the run's batch, 1 here).
TEST_CASE("llvm and cpp backends: convs and pools over a static leading dim compute every image", "[llvm][cpp]") {
  std::string w;
  for (int i = 0; i < 4 * 3 * 3 * 3; ++i) w += fmt::format("{}{}", i ? ", " : "", 0.125 * static_cast<double>((i * 5) % 13) - 0.75);
  auto graph = ir::parseGraph(fmt::format(R"(graph images(%x: f32[3,3,9,8]) {{
  %w = param f32[4,3,3,3] [{}]
  %b = param f32[4] [0.5, -0.25, 1, 0]
  %c = conv(%x, %w, %b) {{pads=[1, 1, 1, 1]}} : f32[3,4,9,8]
  %r = relu(%c) : f32[3,4,9,8]
  %m = max_pool(%r) {{kernel_shape=[3, 3], strides=[2, 2]}} : f32[3,4,4,3]
  %a = avg_pool(%x) {{kernel_shape=[2, 2], strides=[2, 2]}} : f32[3,3,4,4]
  return (c=%c, m=%m, a=%a)
}})", w));
  passes::runPipeline(*graph);
  checkGenerated(*graph, "static_images", 5, 1e-5);
}

// The remainder (both signs, both conventions, integers and floats), the logical and inclusive
// comparison ops, libm's functions and the roundings, fused into one kernel as a model would;
// gather_elements with indices computed from an input (negative ones too).
TEST_CASE("llvm and cpp backends: mod, logical ops, libm's functions and roundings match the interpreter", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph ew(%x: f32[batch,37], %i: i32[batch,37], %p: bool[batch,37], %q: bool[batch,37]) {
  %one = param i32[] [1]
  %mid = param i32[] [128]
  %quarter = param f32[] [0.25]
  %step = param f32[] [0.75]
  %d = add(%i, %one) : i32[batch,37]
  %n = sub(%i, %mid) : i32[batch,37]
  %two = param i32[] [2]
  %n2 = mul(%n, %two) : i32[batch,37]
  %nd = add(%n2, %one) : i32[batch,37]
  %m0 = mod(%i, %nd) {fmod=0} : i32[batch,37]
  %m1 = mod(%n, %d) {fmod=1} : i32[batch,37]
  %mf = mod(%x, %step) {fmod=1} : f32[batch,37]
  %and = and(%p, %q) : bool[batch,37]
  %or = or(%p, %q) : bool[batch,37]
  %xor = xor(%p, %q) : bool[batch,37]
  %le = less_or_equal(%x, %quarter) : bool[batch,37]
  %ge = greater_or_equal(%i, %mid) : bool[batch,37]
  %t = tanh(%x) : f32[batch,37]
  %sin = sin(%x) : f32[batch,37]
  %cos = cos(%x) : f32[batch,37]
  %tan = tan(%t) : f32[batch,37]
  %asin = asin(%t) : f32[batch,37]
  %acos = acos(%t) : f32[batch,37]
  %atan = atan(%x) : f32[batch,37]
  %sinh = sinh(%x) : f32[batch,37]
  %cosh = cosh(%x) : f32[batch,37]
  %asinh = asinh(%x) : f32[batch,37]
  %c = cosh(%x) : f32[batch,37]
  %acosh = acosh(%c) : f32[batch,37]
  %atanh = atanh(%t) : f32[batch,37]
  %s4 = mul(%x, %step) : f32[batch,37]
  %floor = floor(%s4) : f32[batch,37]
  %ceil = ceil(%s4) : f32[batch,37]
  %round = round(%s4) : f32[batch,37]
  %w37 = param i32[] [37]
  %h18 = param i32[] [18]
  %gi = mod(%i, %w37) {fmod=1} : i32[batch,37]
  %gn = sub(%gi, %h18) : i32[batch,37]
  %gat = gather_elements(%x, %gi) {axis=1} : f32[batch,37]
  %gneg = gather_elements(%x, %gn) {axis=-1} : f32[batch,37]
  return (gat=%gat, gneg=%gneg, m0=%m0, m1=%m1, mf=%mf, and=%and, or=%or, xor=%xor, le=%le, ge=%ge, sin=%sin, cos=%cos, tan=%tan,
          asin=%asin, acos=%acos, atan=%atan, sinh=%sinh, cosh=%cosh, asinh=%asinh, acosh=%acosh, atanh=%atanh,
          floor=%floor, ceil=%ceil, round=%round)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "mod_logic_libm", 11, 1e-5);
  CHECK(source.find("pc::mod<int32_t>") != std::string::npos);
  CHECK(source.find("pc::nearbyint(") != std::string::npos);
}

// An integer remainder by zero is an error of the run in both backends, as the interpreter's.
TEST_CASE("llvm and cpp backends: an integer mod by zero fails the run", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph modz(%a: i64[batch,4], %b: i64[batch,4]) {
  %r = mod(%a, %b) {fmod=0} : i64[batch,4]
  return (r=%r)
})");
  passes::runPipeline(*graph);
  codegen::CppOptions cpp;
  const fs::path so = scratch() / "mod_zero.so";
  codegen::buildSharedObject(codegen::generateCpp(*graph, cpp), so.string(), {});
  ir::Tensor a = ir::Tensor::fromVector(ir::DType::I64, {1, 4}, std::vector<int64_t>{7, -7, 5, std::numeric_limits<int64_t>::min()});
  ir::Tensor ok = ir::Tensor::fromVector(ir::DType::I64, {1, 4}, std::vector<int64_t>{3, 3, -3, -1});
  ir::Tensor zero = ir::Tensor::fromVector(ir::DType::I64, {1, 4}, std::vector<int64_t>{3, 0, 1, 1});
  for (const bool isCpp : {false, true}) {
    INFO((isCpp ? "cpp" : "llvm"));
    runtime::Model model = isCpp ? runtime::Model::load(so.string()) : jitModel(*graph);
    std::vector<ir::Tensor> got = driver::runModel(model, {a, ok}, 1);
    std::vector<double> values;
    for (int64_t i = 0; i < 4; ++i) values.push_back(got[0].getAsDouble(i));
    CHECK(values == std::vector<double>{1, 2, -1, 0});  // the divisor's sign; lowest % -1 is 0
    CHECK_THROWS_WITH(driver::runModel(model, {a, zero}, 1), Catch::Contains("division"));
  }
  CHECK_THROWS_WITH(ir::interpret(*graph, {a, zero}), Catch::Contains("division by zero"));
}

// A transpose moves tiles of 8x8 (or 4x4) values through registers (KernelSchedule::transpose):
// whole tiles and the values past them (y: 10x12, u: 4x6 by tiles of 4, w: NCHW -> NHWC over
// 9 columns, an i32 one), not where an axis has fewer than 4 values (v) or the kernel also
// computes (z: a neg fused after the transpose). With AVX-512 a tile spans 16 values along the
// loaded axis where it has 16 or more (k: 20 by 9, the values past one 16 x 8 tile one at a time;
// g: i32, 32 by 8).
TEST_CASE("llvm and cpp backends: transposes by register tiles match the interpreter", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph tiles(%x: f32[batch,10,12], %u: f32[batch,4,6], %w: i32[batch,8,5,9], %v: f32[batch,3,6], %s: f32[batch,10,12], %a: f32[batch,9,20], %e: i32[batch,8,32]) {
  %k = transpose(%a) {perm=[0, 2, 1]} : f32[batch,20,9]
  %g = transpose(%e) {perm=[0, 2, 1]} : i32[batch,32,8]
  %y = transpose(%x) {perm=[0, 2, 1]} : f32[batch,12,10]
  %t = transpose(%u) {perm=[0, 2, 1]} : f32[batch,6,4]
  %n = transpose(%w) {perm=[0, 2, 3, 1]} : i32[batch,5,9,8]
  %q = transpose(%v) {perm=[0, 2, 1]} : f32[batch,6,3]
  %r = transpose(%s) {perm=[0, 2, 1]} : f32[batch,12,10]
  %z = neg(%r) : f32[batch,12,10]
  return (y=%y, t=%t, n=%n, q=%q, z=%z, k=%k, g=%g)
})");
  passes::runPipeline(*graph);
  checkGenerated(*graph, "transpose_tiles", 41, 0);
  for (const char* target : {"x86-64-v4", "x86-64-v3"}) {
    INFO(target);
    codegen::LlvmOptions options;
    options.target.target = target;
    options.keepUnoptimizedIr = true;
    const std::string ir = codegen::generateLlvm(*graph, options).unoptimizedIr();
    const bool wide = std::string(target) == "x86-64-v4";
    // y: three rounds of 8 zips (and, on 8-lane tiles, k's 8 x 8 tile and g's four)
    CHECK(occurrences(ir, "shufflevector <8 x float>") == (wide ? 24 : 48));
    CHECK(occurrences(ir, "shufflevector <8 x i32>") == (wide ? 24 : 48));  // n (and g)
    CHECK(occurrences(ir, "shufflevector <4 x float>") == 8);   // t: two rounds of 4
    // k and g by 8 x 16 tiles: three rounds of eight shuffles and the sixteen columns' halves
    CHECK(occurrences(ir, "shufflevector <16 x float>") == (wide ? 40 : 0));
    CHECK(occurrences(ir, "shufflevector <16 x i32>") == (wide ? 40 : 0));
  }
}

// A transcendental body over rows shorter than a vector loops over the rows innermost and
// vectorises across them (KernelSchedule::vectorAxis), even where its loads gather and its store
// scatters: a [batch, 1] column's log written into rows of 3 (as a concat writes them), a
// softplus chain over a [batch, 6] slice of rows of 12 (a squashed-Gaussian head), where the rows'
// loop runs at least 16 times (batch 40, one thread and two); the domain's order below that (batch
// 1 and 3). An add over the same slice keeps its order.
TEST_CASE("llvm and cpp backends: transcendental short rows vectorise across the rows", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph column(%x: f32[batch,1], %c: f32[batch,2], %h: f32[batch,12]) {
  %l = log(%x) : f32[batch,1]
  %j = concat(%c, %l) {axis=1} : f32[batch,3]
  %s = slice(%h) {starts=[6], ends=[12], axes=[1]} : f32[batch,6]
  %p = softplus(%s) : f32[batch,6]
  %e = exp(%p) : f32[batch,6]
  %t = slice(%h) {starts=[0], ends=[6], axes=[1]} : f32[batch,6]
  %a = add(%t, %t) : f32[batch,6]
  return (j=%j, e=%e, a=%a)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "short_rows", 43, 1e-6);
  CHECK(occurrences(source, "  if (hi - lo >= 16) {\n") == 2);                                                                // j, e
  // e; the loop around the rows' loop stays scalar (GCC had vectorised along the 6)
  CHECK(occurrences(source, "for (int64_t i1 = 0; i1 < 6; ++i1) {\n      __asm__ volatile(\"\");\n      #pragma GCC unroll 4\n      for (int64_t i0 = lo; i0 < hi; ++i0) {") == 1);
  CHECK(occurrences(source, "for (int64_t i0 = lo; i0 < hi; ++i0) {\n      for (int64_t i1 = 0; i1 < 6; ++i1) {") == 1);  // e
  CHECK(occurrences(source, "for (int64_t i0 = lo; i0 < hi; ++i0) {\n    for (int64_t i1 = 0; i1 < 6; ++i1) {") == 1);    // a
  codegen::LlvmOptions llvm;
  llvm.minChunkCost = 0;
  const std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), 40, 47);
  const std::vector<ir::Tensor> want = ir::interpret(*graph, inputs);
  for (const bool isCpp : {false, true}) {
    runtime::Model model = isCpp ? runtime::Model::load((scratch() / "short_rows.so").string()) : jitModel(*graph, llvm);
    const std::vector<ir::Tensor> one = driver::runModel(model, inputs, 1), two = driver::runModel(model, inputs, 2);
    for (size_t o = 0; o < want.size(); ++o) {
      INFO((isCpp ? "cpp" : "llvm") << " output " << o);
      CHECK(driver::compareTensors("", one[o], want[o], 1e-6, 1e-6).pass);
      CHECK(std::memcmp(one[o].bytes(), two[o].bytes(), one[o].nbytes()) == 0);
    }
  }
  codegen::LlvmOptions options;
  options.keepUnoptimizedIr = true;
  CHECK(codegen::generateLlvm(*graph, options).unoptimizedIr().find("!\"llvm.loop.vectorize.enable\", i1 true") != std::string::npos);
}

// A body that calls libm for each value has its innermost loop unrolled 8 times by both printers
// (KernelSchedule::unrollCalls: each call site a branch history of its own); a body without such a
// call is left to the compilers. Results as the interpreter's.
TEST_CASE("llvm and cpp backends: loops of libm calls unroll by 8, others do not", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph libm(%x: f32[batch,20], %z: f32[batch,20]) {
  %s = sin(%x) : f32[batch,20]
  %c = cos(%s) : f32[batch,20]
  %p = pow(%z, %x) : f32[batch,20]
  %r = relu(%x) : f32[batch,20]
  return (c=%c, p=%p, r=%r)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "libm_unroll", 53, 1e-6);
  const size_t prelude = source.find("}  // namespace pc");  // the run-time library's own loops are not the model's
  REQUIRE(prelude != std::string::npos);
  CHECK(occurrences(source.substr(prelude), "#pragma GCC unroll 8\n") == 2);  // the sin-cos chain and the pow, not the relu
  codegen::LlvmOptions options;
  options.keepUnoptimizedIr = true;
  const std::string ir = codegen::generateLlvm(*graph, options).unoptimizedIr();
  const size_t hint = ir.find("= !{!\"llvm.loop.unroll.count\", i32 8}");  // one node, uniqued
  REQUIRE(hint != std::string::npos);
  const std::string node = ir.substr(ir.rfind('\n', hint) + 1, hint - ir.rfind('\n', hint) - 2);  // "!N"
  CHECK(occurrences(ir, ", " + node + "}") == 2);  // the loops that name it
}

// KernelSchedule::stridedAxes in the C++ printer: an outer loop along which the accesses stride
// holds an empty asm statement (GCC 12 does not vectorise such a loop) where the innermost loop
// fills a vector of 8; rows of 4 keep GCC's choice. A transcendental body (a tanh) is vectorised
// across the rows unless its rows fill a vector of 8 by themselves (LLVM had taken a tanh over
// [batch, 8], rows 16 floats apart, across the rows: 2.2x the C++ build's time on an AMD host).
// Results as the interpreter's.
TEST_CASE("cpp backend: outer loops along strided accesses stay scalar where the rows fill a vector", "[llvm][cpp]") {
  auto graph = ir::parseGraph(R"(graph strided(%x: f32[batch,16], %y: f32[batch,16]) {
  %a = slice(%x) {starts=[3], ends=[13], axes=[1]} : f32[batch,10]
  %b = neg(%a) : f32[batch,10]
  %c = slice(%x) {starts=[0], ends=[4], axes=[1]} : f32[batch,4]
  %d = neg(%c) : f32[batch,4]
  %e = slice(%y) {starts=[8], ends=[16], axes=[1]} : f32[batch,8]
  %t = tanh(%e) : f32[batch,8]
  return (b=%b, d=%d, t=%t)
})");
  passes::runPipeline(*graph);
  const std::string source = checkGenerated(*graph, "strided_rows", 59, 1e-6);
  CHECK(occurrences(source, "for (int64_t i0 = lo; i0 < hi; ++i0) {\n    __asm__ volatile(\"\");\n    for (int64_t i1 = 0; i1 < 10; ++i1) {") == 1);
  CHECK(occurrences(source, "for (int64_t i0 = lo; i0 < hi; ++i0) {\n    for (int64_t i1 = 0; i1 < 4; ++i1) {") == 1);
  CHECK(occurrences(source, "for (int64_t i0 = lo; i0 < hi; ++i0) {\n    __asm__ volatile(\"\");\n    for (int64_t i1 = 0; i1 < 8; ++i1) {") == 1);
}

// A layer norm's last loop (KernelSchedule::normRow) in the C++ printer: blocks of one vector of
// doubles (4 values; 8 with AVX-512) in a scalar loop (GCC then converts a block's floats to
// doubles and back at a time, as LLVM), not under a transcendental epilogue (a tanh; Mish over a
// row of 300): there the row is normalised into a buffer first and the epilogue runs over it in a
// loop of its own (KernelSchedule::normStaged, both printers). Results as the interpreter's in
// both backends, bit for bit between them.
TEST_CASE("cpp backend: layer norm's last loop by blocks of a vector unless a transcendental epilogue follows", "[llvm][cpp]") {
  std::string values;
  for (int i = 0; i < 32; ++i) values += fmt::format("{}{}", i ? ", " : "", 0.5 + 0.03 * i);
  std::string wide;
  for (int i = 0; i < 300; ++i) wide += fmt::format("{}{}", i ? ", " : "", 0.75 + 0.002 * i);
  auto graph = ir::parseGraph(fmt::format(R"(graph ln(%x: f32[batch,32], %z: f32[batch,32], %w: f32[batch,300]) {{
  %g = param f32[32] [{0}]
  %b = param f32[32] [{0}]
  %y = layer_norm(%x, %g, %b) : f32[batch,32]
  %n = layer_norm(%z, %g, %b) : f32[batch,32]
  %t = tanh(%n) : f32[batch,32]
  %h = param f32[300] [{1}]
  %m = layer_norm(%w, %h) : f32[batch,300]
  %s = softplus(%m) : f32[batch,300]
  %u = tanh(%s) : f32[batch,300]
  %v = mul(%m, %u) : f32[batch,300]
  return (y=%y, t=%t, v=%v)
}})", values, wide));
  passes::runPipeline(*graph);
  const codegen::GeneratedCpp generated = splitCpp(*graph);
  checkGeneratedBitwise(*graph, generated, "norm_blocks", {1, 3, 9}, 61, 1e-5);
  const std::string& source = generated.source;
  const int block = codegen::narrowVectorTarget("native") ? 4 : 8;
  CHECK(occurrences(source, fmt::format("__asm__ volatile(\"\");\n      float o[{}];\n", block)) == 1);  // y only
  CHECK(occurrences(source, "float row[32];") == 1);   // t
  CHECK(occurrences(source, "float row[300];") == 1);  // v
}

// Row blocks (Schedule::rowBlock): a model whose rows are independent runs its batch 4 rows at a
// time with a budget of one byte; both backends then give the whole batch's bits (blocks of 4
// keep a linear layer's row quads) at every batch size, 1 and 2 threads, and a profiled run counts
// one call a kernel. An input without the batch (one value for every row) keeps the whole batch
// together.
TEST_CASE("llvm and cpp backends: a batch in row blocks gives the whole batch's bits", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 13, -0.75); };
  const std::string text = fmt::format(R"(graph blocks(%x: f32[batch,3,8,8], %v: f32[batch,5]) {{
  %w = param f32[4,3,3,3] [{}]
  %c = conv(%x, %w) {{pads=[1, 1, 1, 1]}} : f32[batch,4,8,8]
  %r = relu(%c) : f32[batch,4,8,8]
  %p = max_pool(%r) {{kernel_shape=[2, 2], strides=[2, 2]}} : f32[batch,4,4,4]
  %f = flatten(%p) : f32[batch,64]
  %l = param f32[3,64] [{}]
  %y = linear(%f, %l) : f32[batch,3]
  %s = softmax(%y) : f32[batch,3]
  %t = tanh(%v) : f32[batch,5]
  return (s=%s, t=%t)
}})", weights(4 * 27), weights(3 * 64));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  std::vector<runtime::Model> models;  // cpp whole, cpp blocks, llvm whole, llvm blocks
  for (const int64_t budget : {int64_t{0}, int64_t{1}}) {
    codegen::CppOptions cpp;
    cpp.minChunkCost = 0;
    cpp.rowBlockBytes = budget;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    CHECK(occurrences(generated.source, "pc::RowBlocks pc_row_blocks = {pc_run_rows, pc_workspace_bytes, 4,") == static_cast<size_t>(budget));
    const fs::path so = scratch() / fmt::format("row_blocks_{}.so", budget);
    codegen::buildSharedObject(generated, so.string(), {});
    models.push_back(runtime::Model::load(so.string()));
  }
  for (const int64_t budget : {int64_t{0}, int64_t{1}}) {
    codegen::LlvmOptions llvm;
    llvm.minChunkCost = 0;
    llvm.rowBlockBytes = budget;
    llvm.keepUnoptimizedIr = true;
    // defined, and called on the whole batch where the support's row blocks are absent
    CHECK(occurrences(codegen::generateLlvm(*graph, llvm).unoptimizedIr(), "@pc_run_rows(") == (budget ? 2u : 0u));
    models.push_back(jitModel(*graph, llvm));
  }
  std::swap(models[1], models[2]);  // cpp whole, llvm whole, cpp blocks, llvm blocks
  // Blocks of 4 rows: from batch 21 (six blocks) two threads take whole blocks (pc::runRowBlocks),
  // below they split each kernel.
  checkSameBits(*graph, models, {1, 3, 4, 5, 8, 9, 13, 21, 38}, 41);
  // A linear layer in sextets (gemm6x16) in blocks of 4 rows: a sextet only below the last whole
  // quad, so every row gets the whole batch's tile or single row.
  {
    std::vector<runtime::Model> sextets;
    // (rows of 2048 floats beside it, so that the byte budget alone would give blocks of 4)
    auto wideGraph = ir::parseGraph(fmt::format(R"(graph sextets(%v: f32[batch,24], %big: f32[batch,2048]) {{
  %l = param f32[20,24] [{}]
  %y = linear(%v, %l) : f32[batch,20]
  %t = tanh(%y) : f32[batch,20]
  %n = neg(%big) : f32[batch,2048]
  return (t=%t, n=%n)
}})", weights(20 * 24)));
    passes::runPipeline(*wideGraph);
    for (const int64_t budget : {int64_t{0}, int64_t{1}}) {
      codegen::CppOptions cpp;
      cpp.minChunkCost = 0;
      cpp.rowBlockBytes = budget;
      cpp.forceImpl = "gemm6x16";
      const codegen::GeneratedCpp generated = codegen::generateCpp(*wideGraph, cpp);
      CHECK(occurrences(generated.source, "pc::RowBlocks pc_row_blocks = {pc_run_rows, pc_workspace_bytes, 4,") == static_cast<size_t>(budget));
      const fs::path so = scratch() / fmt::format("row_blocks_sextets_{}.so", budget);
      codegen::buildSharedObject(generated, so.string(), {});
      sextets.push_back(runtime::Model::load(so.string()));
      codegen::LlvmOptions llvm;
      llvm.minChunkCost = 0;
      llvm.rowBlockBytes = budget;
      llvm.forceImpl = "gemm6x16";
      sextets.push_back(jitModel(*wideGraph, llvm));
    }
    checkSameBits(*wideGraph, sextets, {1, 5, 6, 10, 12, 13, 22, 23, 29, 40, 66}, 43);
  }
  // Two callers at once on each model in blocks (batch 38, 2 threads each): one has the pool, the
  // other runs its lanes of whole blocks itself; both get the whole batch's bits.
  {
    const std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(*graph), 38, 47);
    const std::vector<ir::Tensor> whole = driver::runModel(models[0], inputs, 1);
    for (size_t m : {size_t{2}, size_t{3}}) {
      std::atomic<int> wrong{0};
      auto caller = [&] {
        for (int i = 0; i < 50; ++i) {
          const std::vector<ir::Tensor> got = driver::runModel(models[m], inputs, 2);
          for (size_t o = 0; o < whole.size(); ++o) wrong += std::memcmp(whole[o].bytes(), got[o].bytes(), whole[o].nbytes()) != 0;
        }
      };
      std::thread a(caller), b(caller);
      a.join();
      b.join();
      INFO("model " << m);
      CHECK(wrong.load() == 0);
    }
  }
  // Profiled in blocks: batch 9 is three blocks, one call a kernel.
  for (const bool isCpp : {true, false}) {
    INFO((isCpp ? "cpp" : "llvm"));
    runtime::Model profiled = [&] {
      if (!isCpp) {
        codegen::LlvmOptions llvm;
        llvm.rowBlockBytes = 1;
        llvm.profile = true;
        return jitModel(*graph, llvm);
      }
      codegen::CppOptions cpp;
      cpp.rowBlockBytes = 1;
      cpp.profile = true;
      const fs::path so = scratch() / "row_blocks_profiled.so";
      codegen::buildSharedObject(codegen::generateCpp(*graph, cpp), so.string(), {});
      return runtime::Model::load(so.string());
    }();
    const policyc_profile* prof = profiled.profile();
    REQUIRE(prof != nullptr);
    prof->reset();
    driver::runModel(profiled, driver::randomTensors(graphInputTypes(*graph), 9, 43), 1);
    REQUIRE(prof->num_kernels > 0);
    for (int32_t k = 0; k < prof->num_kernels; ++k) CHECK(prof->kernel_calls[k] == 1);
    CHECK(*prof->trace_count == 3 * prof->num_kernels);  // a trace event a kernel and block
    // Two threads taking whole blocks (six of them): still one call a kernel, one event a block.
    prof->reset();
    driver::runModel(profiled, driver::randomTensors(graphInputTypes(*graph), 21, 43), 2);
    for (int32_t k = 0; k < prof->num_kernels; ++k) CHECK(prof->kernel_calls[k] == 1);
    CHECK(*prof->trace_count == 6 * prof->num_kernels);
  }
  auto across = ir::parseGraph(R"(graph shared(%x: f32[batch,3], %k: f32[3]) {
  %s = add(%x, %k) : f32[batch,3]
  return (s=%s)
})");
  passes::runPipeline(*across);
  codegen::CppOptions cpp;
  cpp.rowBlockBytes = 1;
  CHECK(occurrences(codegen::generateCpp(*across, cpp).source, "pc_row_blocks") == 0);
}

// Winograd F(2x2, 3x3) (Impl::WinogradF23, schedule.h's WinogradTiles): the 3 x 3 stride-1 convs
// have it, no other; forced, both backends match the interpreter and give the same bits with 1-3
// threads, with and without AVX-512: bands of 4, 8 and 2 tile rows (the last of them partial),
// runs of 2, 8 and 16 tiles, rows of 7 and 21 tiles whose runs stop at a vector's end (3 vectors
// a band: an odd last GEMM vector; lanes past the band's tiles), an odd output (7 x 7: its last
// tile row and column half dropped), 64 input channels in bands of 16 tiles (32 would not fit
// the stack buffers), output channels past the last whole group of 8 or 6, a residual add and
// relu on vectors of 8 columns, a tanh on the first 4 lanes, an epilogue kept scalar (a cast to f64).
TEST_CASE("llvm and cpp backends: winograd_f23 convs match the interpreter and each other bit for bit", "[llvm][cpp]") {
  auto weights = [](int64_t n) { return paramValues(n, 0.125, 13, -0.75); };
  const std::string text = fmt::format(R"(graph wino(%x: f32[batch,5,8,8], %x2: f32[batch,6,16,4], %x3: f32[batch,4,6,32], %r3: f32[batch,9,6,32], %x4: f32[batch,16,16,16], %x5: f32[batch,6,9,9], %x6: f32[batch,64,8,16], %x7: f32[batch,4,8,42]) {{
  %w = param f32[13,5,3,3] [{}]
  %b = param f32[13] [{}]
  %c = conv(%x, %w, %b) {{pads=[1, 1, 1, 1]}} : f32[batch,13,8,8]
  %cr = relu(%c) : f32[batch,13,8,8]
  %w2 = param f32[7,6,3,3] [{}]
  %c2 = conv(%x2, %w2) {{pads=[1, 1, 1, 1]}} : f32[batch,7,16,4]
  %t2 = tanh(%c2) : f32[batch,7,16,4]
  %w3 = param f32[9,4,3,3] [{}]
  %b3 = param f32[9] [{}]
  %c3 = conv(%x3, %w3, %b3) {{pads=[1, 0, 1, 2]}} : f32[batch,9,6,32]
  %a3 = add(%c3, %r3) : f32[batch,9,6,32]
  %y3 = relu(%a3) : f32[batch,9,6,32]
  %w4 = param f32[16,16,3,3] [{}]
  %c4 = conv(%x4, %w4) {{pads=[1, 1, 1, 1]}} : f32[batch,16,16,16]
  %d4 = cast(%c4) {{to="f64"}} : f64[batch,16,16,16]
  %w5 = param f32[8,16,3,3] [{}]
  %s5 = conv(%x4, %w5) {{strides=[2, 2], pads=[1, 1, 1, 1]}} : f32[batch,8,8,8]
  %d5 = conv(%x4, %w5) {{dilations=[2, 2], pads=[2, 2, 2, 2]}} : f32[batch,8,16,16]
  %o5 = conv(%x4, %w5) : f32[batch,8,14,14]
  %w6 = param f32[8,16,5,5] [{}]
  %k6 = conv(%x4, %w6) {{pads=[2, 2, 2, 2]}} : f32[batch,8,16,16]
  %w7 = param f32[17,6,3,3] [{}]
  %c7 = conv(%x5, %w7) : f32[batch,17,7,7]
  %r7 = relu(%c7) : f32[batch,17,7,7]
  %w8 = param f32[16,64,3,3] [{}]
  %c8 = conv(%x6, %w8) {{pads=[1, 1, 1, 1]}} : f32[batch,16,8,16]
  %w9 = param f32[16,4,3,3] [{}]
  %c9 = conv(%x7, %w9) {{pads=[1, 1, 1, 1]}} : f32[batch,16,8,42]
  %e9 = elu(%c9) : f32[batch,16,8,42]
  return (cr=%cr, t2=%t2, y3=%y3, d4=%d4, s5=%s5, d5=%d5, o5=%o5, k6=%k6, r7=%r7, c8=%c8, e9=%e9)
}})",
                                       weights(13 * 45), weights(13), weights(7 * 54), weights(9 * 36), weights(9), weights(16 * 144),
                                       weights(8 * 144), weights(8 * 400), weights(17 * 54), weights(16 * 576), weights(16 * 36));
  auto graph = ir::parseGraph(text);
  passes::runPipeline(*graph);
  const codegen::PlannedProgram planned = codegen::planGraph(*graph);
  int winograd = 0;
  for (const codegen::Kernel& k : planned.program.kernels) {
    if (k.kind != codegen::KernelKind::Conv) continue;
    const std::vector<std::string> c = codegen::implCandidates(planned.program, k, true);
    const bool has = std::find(c.begin(), c.end(), "winograd_f23") != c.end();
    const ir::Shape& w = planned.program.buffer(k.anchorInputs[1]).type.shape;
    INFO(k.name);
    // Of the 8-channel ones, not the strided, the dilated and the 5 x 5 one; the 14 x 14 one is.
    const bool eligible = w[0].value() != 8 || k.domain[2].value() == 14;
    CHECK(has == eligible);
    winograd += has;
    // Its weights are its own f32 ones: not under bf16 or int8 weights where the layer is narrowed.
    const std::vector<std::string> narrow = codegen::implCandidates(planned.program, k, true, std::nullopt, codegen::Precision::Int8Weights);
    CHECK((std::find(narrow.begin(), narrow.end(), "winograd_f23") != narrow.end()) ==
          (has && std::find(narrow.begin(), narrow.end(), "conv_rows") != narrow.end()));
  }
  CHECK(winograd == 8);
  // The heuristic: from 4 input and 16 output channels where the GEMMs' vector lanes hold at most
  // 1/8 more positions than the output has (%c4 and %c8; not %c7, 64 for 49, nor %c9, 384 lanes
  // of 4 positions for 336).
  {
    const codegen::ImplChoice choice = codegen::heuristicChoice(planned.program, {1, 64}, false);
    int chosen = 0;
    for (const auto& [name, d] : choice) chosen += d.front().impl == "winograd_f23";
    CHECK(chosen == 2);
  }
  for (const char* target : {"x86-64-v3", "native"}) {
    INFO(target);
    codegen::CppOptions cpp;
    cpp.minChunkCost = 0;
    cpp.forceImpl = "winograd_f23";
    cpp.target = target;
    const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
    CHECK(generated.source.find("pc::winogradInput<2>(") != std::string::npos);   // %c2: rows of 2 tiles
    const bool wide = !codegen::narrowVectorTarget(target);
    // %c3's rows of 16 tiles: one run of 16 with AVX-512, two of 8 without.
    CHECK(generated.source.find(wide ? "pc::winogradInput<16>(" : "pc::winogradInput<8>(") != std::string::npos);
    CHECK(generated.source.find("pc::winogradOutput<4>(") != std::string::npos);  // %c: rows of 4 tiles
    CHECK(generated.source.find("epilogue(i0, i1, i2, c, yrow[half][c])") != std::string::npos);  // %d4's cast
    // %c9's second tile row (tiles 21-41): runs of 8 and 3 up to the first vector's end, 8 and 2 after.
    // (Vector p of 4 channels' rows of 16 lanes: vc + 64 p + lane.)
    CHECK(generated.source.find("pc::winogradInput<3>(r, 8, vc + 77, ") != std::string::npos);
    CHECK(generated.source.find("pc::winogradInput<2>(r, 19, vc + 136, ") != std::string::npos);
    checkGeneratedBitwise(*graph, generated, fmt::format("winograd_{}", target), {1, 3, 5}, 17, 1e-4, "winograd_f23", target);
  }
  // Updatable weights keep the direct conv: set_weights moves values, and U is no permutation of them.
  driver::markUpdatableWeights(*graph);
  const codegen::PlannedProgram updatable = codegen::planGraph(*graph);
  for (const codegen::Kernel& k : updatable.program.kernels) {
    const std::vector<std::string> c = codegen::implCandidates(updatable.program, k, true);
    CHECK(std::find(c.begin(), c.end(), "winograd_f23") == c.end());
  }
}
