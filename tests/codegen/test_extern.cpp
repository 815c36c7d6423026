// Implementations of GEMM/conv kernels: oneDNN extern kernels (with and without post-ops) and
// the generated microkernel variants against the interpreter, thread-count changes between
// calls, the heuristic, the autotuner and its cache, and the errors of a bad choice.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/driver/model_io.h"
#include "policyc/codegen/backend.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/driver/autotune.h"
#include "policyc/debug/check.h"
#include "policyc/driver/compile.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/cpu.h"
#include "policyc/runtime/loader.h"
#include "support/scratch_dir.h"
#include "support/fixtures.h"

using namespace policyc;
using namespace policyc::ir;
namespace fs = std::filesystem;

namespace {

const fs::path& scratchDir() { return testing::scratchDir("policyc-extern-test"); }

// A test of oneDNN's kernels runs where the compiler was built with oneDNN and says it skipped
// otherwise ("extern: oneDNN is an implementation only where ..." checks that build).
bool withOnednn() {
  if (codegen::onednnBuiltIn()) return true;
  WARN("skipped: this policyc was built without oneDNN (POLICYC_ONEDNN=OFF or no libdnnl-dev)");
  return false;
}
// `impls` without oneDNN's where the compiler has none.
std::vector<std::string> available(std::vector<std::string> impls) {
  if (!codegen::onednnBuiltIn()) std::erase_if(impls, [](const std::string& i) { return i.rfind("onednn", 0) == 0; });
  return impls;
}

Value* param(Graph& g, const std::string& name, std::vector<int64_t> shape) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.05f * static_cast<float>(i % 11) - 0.2f;
  return g.addParam(name, std::move(t));
}
Value* op(Graph& g, Op o, std::vector<Value*> in, const std::string& name, AttrMap attrs = {}) {
  return g.addOp(o, std::move(in), std::move(attrs), name)->output();
}
Value* scalar(Graph& g, const std::string& name, float v) {
  Tensor t(DType::F32, std::vector<int64_t>{});
  t.data<float>()[0] = v;
  return g.addParam(name, std::move(t));
}
Value* linear(Graph& g, Value* x, int64_t k, int64_t n, const std::string& name) {
  return op(g, Op::Linear, {x, param(g, name + ".w", {n, k}), param(g, name + ".b", {n})}, name);
}
Value* conv(Graph& g, Value* x, int64_t cin, int64_t cout, const std::string& name, int64_t stride = 1) {
  return op(g, Op::Conv, {x, param(g, name + ".w", {cout, cin, 3, 3}), param(g, name + ".b", {cout})}, name,
            {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{stride, stride}}});
}

// Compiles `graph` (optimised here) with `options` into the scratch directory and loads it.
runtime::Model build(const Graph& graph, const codegen::CppOptions& options, const std::string& tag) {
  auto g = graph.clone();
  passes::runPipeline(*g);
  codegen::GeneratedCpp generated = codegen::generateCpp(*g, options);
  fs::path so = scratchDir() / fmt::format("{}_{}.so", graph.name(), tag);
  codegen::buildSharedObject(generated, so.string());
  return runtime::Model::load(so.string());
}

// Every output of `model` on `graph`'s random inputs at `batch` with `threads` within 1e-4 of the interpreter.
void checkAgainstInterpreter(const runtime::Model& model, const Graph& graph, int64_t batch, int threads, const std::string& what) {
  std::vector<Tensor> inputs = driver::randomInputs(graph, batch, 11 + static_cast<uint64_t>(batch));
  std::vector<Tensor> expected = interpret(graph, inputs);
  std::vector<Tensor> actual = driver::runModel(model, inputs, threads);
  REQUIRE(actual.size() == expected.size());
  for (size_t o = 0; o < expected.size(); ++o) {
    driver::TensorCheck c = driver::compareTensors(fmt::format("output {}", o), actual[o], expected[o], 1e-4, 1e-4);
    INFO(what << " batch " << batch << " threads " << threads << ": " << c.name << " max abs " << c.maxAbs << " " << c.note);
    CHECK(c.pass);
  }
}

const std::vector<std::string> kImpls = {"gemm4x32", "gemm4x16", "onednn", "onednn_postops"};

// Post-op chains oneDNN must get right: an activation then x*a+b (oneDNN 2.6 is known to drop
// the b of a linear after a logistic in some chains), tanh, leaky relu, a residual add as a sum.
std::unique_ptr<Graph> postOpGraph() {
  auto g = std::make_unique<Graph>("postops");
  Value* x = g->addInput("x", {DType::F32, {Dim::batch(), 24}});
  Value* h = linear(*g, x, 24, 40, "l0");
  Value* s = op(*g, Op::Sigmoid, {h}, "sig");
  Value* m = op(*g, Op::Mul, {s, scalar(*g, "two", 2.0f)}, "mul");
  Value* a = op(*g, Op::Add, {m, scalar(*g, "one", 1.0f)}, "add");
  Value* h1 = linear(*g, a, 40, 40, "l1");
  Value* t = op(*g, Op::Tanh, {h1}, "tanh");
  Value* h2 = linear(*g, t, 40, 40, "l2");
  Value* r = op(*g, Op::Add, {h2, a}, "res");  // a residual: oneDNN's sum post-op
  Value* l = op(*g, Op::LeakyRelu, {r}, "leaky", {{"alpha", 0.1}});
  Value* img = g->addInput("img", {DType::F32, {Dim::batch(), 3, 10, 10}});
  Value* c0 = op(*g, Op::Relu, {conv(*g, img, 3, 8, "c0", 2)}, "c0_relu");
  Value* c1 = conv(*g, c0, 8, 8, "c1");
  Value* e = op(*g, Op::Elu, {op(*g, Op::Add, {c1, c0}, "c_res")}, "c_elu", {{"alpha", 1.0}});
  Value* c2 = op(*g, Op::Sigmoid, {conv(*g, e, 8, 4, "c2")}, "c2_sig");
  Value* c3 = op(*g, Op::Sub, {scalar(*g, "half", 0.5f), c2}, "c3_sub");
  g->setOutputs({{"y", l}, {"z", c3}});
  return g;
}

// Targets by their traits: without AVX-512; AVX-512 with AVX512_BF16 and AMX-BF16 (Sapphire Rapids).
const codegen::TargetTraits kNarrow{.narrowVectors = true};
const codegen::TargetTraits kAmx{.bf16Dot = true, .bf16Tiles = true};

}  // namespace

TEST_CASE("targets: each named target's traits in both backends, and what a travelling policy needs", "[extern]") {
  // AMX-BF16 (products in bf16 for convs) only where the target says so, in both backends.
  for (const char* t : {"x86-64-v3", "x86-64-v4", "x86-64-v4-bf16", "x86-64-v4-amx", "generic"}) {
    INFO(t);
    const codegen::TargetTraits cpp = codegen::cppTargetTraits(t), llvm = codegen::resolveLlvmTarget({t, "", ""}).traits();
    CHECK(cpp.bf16Tiles == (std::string(t) == "x86-64-v4-amx"));
    CHECK((cpp.narrowVectors == llvm.narrowVectors && cpp.bf16Dot == llvm.bf16Dot && cpp.bf16Tiles == llvm.bf16Tiles));
    // A named target is no CPU in particular: vdpbf16ps's rate is the slower one.
    CHECK_FALSE((cpp.fastBf16Dot || llvm.fastBf16Dot));
  }
  CHECK(codegen::resolveLlvmTarget({"x86-64-v3", "sapphirerapids", ""}).traits().bf16Tiles);
  CHECK_FALSE(codegen::resolveLlvmTarget({"x86-64-v3", "cooperlake", ""}).traits().bf16Tiles);
  CHECK(codegen::cppTargetTraits("native").bf16Tiles == static_cast<bool>(__builtin_cpu_supports("amx-bf16")));
  // vdpbf16ps at the FMA's rate: AMD's CPUs with AVX512_BF16, by name for LLVM, by this CPU's
  // vendor for native (both backends read it alike on this host).
  CHECK(codegen::resolveLlvmTarget({"x86-64-v3", "znver4", ""}).traits().fastBf16Dot);
  CHECK_FALSE(codegen::resolveLlvmTarget({"x86-64-v3", "znver4", "-avx512bf16"}).traits().fastBf16Dot);
  CHECK_FALSE(codegen::resolveLlvmTarget({"x86-64-v3", "znver3", ""}).traits().fastBf16Dot);
  CHECK_FALSE(codegen::resolveLlvmTarget({"x86-64-v3", "sapphirerapids", ""}).traits().fastBf16Dot);
  const bool amdBf16 = __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512bf16");
  CHECK(codegen::cppTargetTraits("native").fastBf16Dot == amdBf16);
  CHECK(codegen::resolveLlvmTarget({"native", "", ""}).traits().fastBf16Dot == amdBf16);
  // Every named target tells a travelling policy what it needs (runtime::targetCpuFeatures: a
  // host without it gets an error, not an illegal instruction), as its traits say.
  for (const std::string& t : codegen::cppTargets()) {
    INFO(t);
    const std::vector<std::string> f = runtime::targetCpuFeatures(t);
    auto has = [&](const char* x) { return std::find(f.begin(), f.end(), x) != f.end(); };
    if (t == "native" || t == "generic") continue;
    CHECK(has("avx2"));
    CHECK(has("avx512f") == !codegen::narrowVectorTarget(t));
    CHECK(has("avx512bf16") == codegen::bf16DotTarget(t));
  }
  CHECK(runtime::targetCpuFeatures("generic").empty());
}

TEST_CASE("extern: which kernels have which implementations, and the heuristic", "[extern]") {
  if (!withOnednn()) return;
  auto g = driver::loadModel(testing::sourcePath("examples/models/ppo_mlp.onnx"));
  passes::runPipeline(*g);
  codegen::KernelProgram p = codegen::lowerGraph(*g);
  codegen::fuseKernels(p);
  // ppo_mlp: the merged first layer reads the dense input; the next layers read split views of
  // its output (strided rows), which oneDNN 2.6 runs with its slow reference inner product.
  // Eight-row tiles at every precision; six-row ones on f32 panels (these layers are too small to
  // be narrowed).
  std::vector<std::string> withOctets = kImpls;
  withOctets.push_back("gemm8x32");
  withOctets.push_back("gemm6x16");
  CHECK(codegen::implCandidates(p, p.kernels[0], true) == withOctets);
  CHECK(codegen::implCandidates(p, p.kernels[0], true, std::nullopt, codegen::Precision::Bf16Weights) == withOctets);
  CHECK(codegen::implCandidates(p, p.kernels[0], true, std::nullopt, codegen::Precision::Int8Weights) == withOctets);
  CHECK(codegen::implCandidates(p, p.kernels[1], true) == std::vector<std::string>{"gemm4x32", "gemm4x16", "gemm8x32", "gemm6x16"});
  CHECK(codegen::implCandidates(p, p.kernels[0], false) == std::vector<std::string>{"gemm4x32", "gemm4x16", "gemm8x32", "gemm6x16"});
  CHECK(codegen::batchRangeBounds({1, 16, 64}) == std::vector<int64_t>{4, 32, -1});
  CHECK(codegen::batchRangeBounds({8}) == std::vector<int64_t>{-1});
  // The heuristic: linear layers stay generated; with AVX-512 those of two panels or more over
  // rows of 64 or more (the two 256-input hidden layers; not the first over the observation, nor
  // the heads) by tiles of eight rows, at every batch; the heads of 12 and 1 outputs as dot
  // products along k (without AVX-512 only the value head of 1, whose accumulators fit).
  std::vector<std::string> withDot = withOctets;
  withDot.push_back("dot_rows");
  CHECK(codegen::implCandidates(p, p.kernels.back(), true) == withDot);
  CHECK(codegen::implCandidates(p, p.kernels.back(), false) == std::vector<std::string>{"gemm4x32", "gemm4x16", "gemm8x32", "gemm6x16", "dot_rows"});
  for (const auto& [name, d] : codegen::heuristicChoice(p, {1, 16, 64}, true)) {
    INFO(name);
    const bool octets = name == "fused_linear_bias_tanh_1" || name == "fused_linear_bias_tanh_2";
    const bool head = name == "linear_bias_3" || name == "linear_bias_4";
    CHECK(d == codegen::ImplDispatch{{-1, head ? "dot_rows" : octets ? "gemm8x32" : "gemm4x32"}});
  }
  // Without AVX-512 (16 registers of 256 bits) one-panel microkernels, whose accumulators fit: six
  // rows a tile over the hidden layers, four over the first (17 inputs) and the 12-output head.
  for (const auto& [name, d] : codegen::heuristicChoice(p, {1, 16, 64}, true, std::nullopt, kNarrow)) {
    INFO(name);
    const bool hidden = name == "fused_linear_bias_tanh_1" || name == "fused_linear_bias_tanh_2";
    CHECK(d == codegen::ImplDispatch{{-1, name == "linear_bias_4" ? "dot_rows" : hidden ? "gemm6x16" : "gemm4x16"}});
  }
  CHECK(codegen::narrowVectorTarget("x86-64-v3"));
  CHECK(codegen::narrowVectorTarget("generic"));
  CHECK_FALSE(codegen::narrowVectorTarget("x86-64-v4"));
  CHECK_FALSE(codegen::narrowVectorTarget("x86-64-v4-bf16"));
  CHECK_FALSE(codegen::resolveLlvmTarget({"x86-64-v3", "", "+avx2,+fma,-avx512f"}).avx512);
  CHECK(codegen::resolveLlvmTarget({"x86-64-v3", "", "+avx2,+avx512f,+avx512bw"}).avx512);
  auto atari = driver::loadModel(testing::sourcePath("examples/models/atari_cnn.onnx"));
  passes::runPipeline(*atari);
  codegen::KernelProgram a = codegen::lowerGraph(*atari);
  codegen::fuseKernels(a);
  codegen::ImplChoice withExtern = codegen::heuristicChoice(a, {1, 16, 64}, true);
  codegen::ImplChoice without = codegen::heuristicChoice(a, {1, 16, 64}, false);
  int convs = 0;
  for (const codegen::Kernel& k : a.kernels) {
    if (k.kind == codegen::KernelKind::Conv) {
      ++convs;
      // 32 and 64 output channels: with AVX-512 the generated implicit GEMM's tiles of eight
      // positions by two panels, oneDNN or not. Without AVX-512 the one-panel six-position tiles;
      // the strided convs have no conv_rows; the last one (3x3, stride 1) has, on 7 rows of 7
      // columns in four pairs (49 of 64 lanes): too few lanes, oneDNN or not. It has winograd_f23
      // too, whose 4 x 4 tiles would compute 64 positions for its 49.
      const bool rows = convs == 3;
      CHECK(withExtern.at(k.name) == codegen::ImplDispatch{{-1, "gemm8x32"}});
      CHECK(without.at(k.name) == codegen::ImplDispatch{{-1, "gemm8x32"}});
      CHECK(codegen::heuristicChoice(a, {1, 16, 64}, true, std::nullopt, kNarrow).at(k.name) ==
            codegen::ImplDispatch{{-1, "gemm6x16"}});
      CHECK(codegen::heuristicChoice(a, {1, 16, 64}, false, std::nullopt, kNarrow).at(k.name) ==
            codegen::ImplDispatch{{-1, "gemm6x16"}});
      // conv + bias + relu stored plainly: the whole epilogue can be oneDNN post-ops.
      const std::vector<std::string> all = {"gemm4x32", "gemm4x16", "conv_rows", "winograd_f23", "onednn", "onednn_postops", "gemm6x16", "gemm8x32"};
      const std::vector<std::string> convImpls = {"gemm4x32", "gemm4x16", "onednn", "onednn_postops", "gemm6x16", "gemm8x32"};
      CHECK(codegen::implCandidates(a, k, true) == (rows ? all : convImpls));
      // Narrowed weights: no conv_rows (it reads the weight as it is); with products in bf16
      // (bf16 pairs for vdpbf16ps, only on a target with AMX-BF16) no gemm6x16 nor gemm8x32, and
      // oneDNN by default; without AMX bf16 convs compute as bf16-weights.
      CHECK(codegen::implCandidates(a, k, true, std::nullopt, codegen::Precision::Int8Weights) == convImpls);
      CHECK(codegen::implCandidates(a, k, true, std::nullopt, codegen::Precision::Bf16, {}, kAmx) == kImpls);
      CHECK(codegen::heuristicChoice(a, {1, 16, 64}, true, std::nullopt, kAmx, codegen::Precision::Bf16).at(k.name) ==
            codegen::ImplDispatch{{-1, "onednn_postops"}});
      CHECK(codegen::implCandidates(a, k, true, std::nullopt, codegen::Precision::Bf16) == convImpls);
      CHECK(codegen::implCandidates(a, k, false, std::nullopt, codegen::Precision::Bf16, {}, kAmx) ==
            std::vector<std::string>{"gemm4x32", "gemm4x16", "gemm6x16", "gemm8x32"});  // no oneDNN: as bf16-weights
      CHECK(codegen::heuristicChoice(a, {1, 16, 64}, true, std::nullopt, {.bf16Dot = true}, codegen::Precision::Bf16).at(k.name) ==
            codegen::ImplDispatch{{-1, "gemm8x32"}});
    }
  }
  CHECK(convs == 3);
  // impala_cnn: Winograd F(2x2, 3x3) for every conv but the 3-channel first one (codegen's
  // heuristic: from 4 input and 16 output channels), with and without AVX-512, with bf16 weights
  // too (every conv below the size the rule narrows), and under bf16 (convs compute as
  // bf16-weights without AMX); the first conv on conv_rows (rows of 64 columns). With AMX-BF16
  // products in bf16 on oneDNN.
  auto impala = driver::loadModel(testing::sourcePath("examples/models/impala_cnn.onnx"));
  passes::runPipeline(*impala);
  codegen::KernelProgram ip = codegen::lowerGraph(*impala);
  codegen::fuseKernels(ip);
  const codegen::ImplChoice chosen = codegen::heuristicChoice(ip, {1, 16, 64}, true, std::nullopt, kNarrow);
  const codegen::ImplChoice narrowed = codegen::heuristicChoice(ip, {1, 16, 64}, true, std::nullopt, kNarrow, codegen::Precision::Bf16Weights);
  const codegen::ImplChoice dot = codegen::heuristicChoice(ip, {1, 16, 64}, true, std::nullopt, kNarrow, codegen::Precision::Bf16);
  const codegen::ImplChoice wide = codegen::heuristicChoice(ip, {1, 16, 64}, true);
  const codegen::ImplChoice wideNarrowed = codegen::heuristicChoice(ip, {1, 16, 64}, true, std::nullopt, {}, codegen::Precision::Bf16Weights);
  const codegen::ImplChoice wideDot = codegen::heuristicChoice(ip, {1, 16, 64}, true, std::nullopt, {.bf16Dot = true}, codegen::Precision::Bf16);
  const codegen::ImplChoice amx = codegen::heuristicChoice(ip, {1, 16, 64}, true, std::nullopt, kAmx, codegen::Precision::Bf16);
  int rowsConvs = 0, winogradConvs = 0;
  for (const codegen::Kernel& k : ip.kernels) {
    if (k.kind != codegen::KernelKind::Conv) continue;
    INFO(k.name << " " << k.domain[3].value() << " columns");
    const ir::TensorType& w = ip.buffer(k.anchorInputs[1]).type;
    const std::string impl = chosen.at(k.name).front().impl;
    const std::string expected = w.shape[1].value() == 3 ? "conv_rows" : "winograd_f23";
    CHECK(impl == expected);
    CHECK(narrowed.at(k.name).front().impl == expected);
    CHECK(wide.at(k.name).front().impl == expected);
    CHECK(wideNarrowed.at(k.name).front().impl == expected);
    CHECK(dot.at(k.name) == narrowed.at(k.name));
    CHECK(wideDot.at(k.name) == wideNarrowed.at(k.name));
    // Products in bf16 on oneDNN, except the 3-channel first conv (its 27-value window keeps
    // fp32 under bf16: codegen::kMinBf16ConvWindow) on conv_rows as in fp32.
    const bool smallWindow = w.shape[1].value() * w.shape[2].value() * w.shape[3].value() < codegen::kMinBf16ConvWindow;
    CHECK((amx.at(k.name).front().impl == "conv_rows") == smallWindow);
    CHECK((amx.at(k.name).front().impl.rfind("onednn", 0) == 0) == !smallWindow);
    rowsConvs += impl == "conv_rows";
    winogradConvs += impl == "winograd_f23";
  }
  CHECK(rowsConvs == 1);
  CHECK(winogradConvs == 14);
  // uint8_convbn's 3-channel stem conv of 16 channels and stride 2 (no conv_rows): the implicit
  // GEMM's tiles (8 x 16 with AVX-512, 6 x 16 without), not oneDNN, whatever the weights' storage,
  // and under bf16 too (its 27-value window keeps fp32: codegen::kMinBf16ConvWindow). No default
  // build of the fixtures calls oneDNN; only products in bf16 do (atari_cnn's convs above).
  auto u8 = driver::loadModel(testing::sourcePath("examples/models/uint8_convbn.onnx"));
  passes::runPipeline(*u8);
  codegen::KernelProgram up = codegen::lowerGraph(*u8);
  codegen::fuseKernels(up);
  int strided = 0;
  for (const codegen::Kernel& k : up.kernels) {
    const std::vector<std::string> c = codegen::implCandidates(up, k, true);
    if (k.kind != codegen::KernelKind::Conv || std::find(c.begin(), c.end(), "onednn") == c.end()) continue;
    ++strided;
    CHECK(k.domain[1].value() == 16);
    CHECK(std::find(c.begin(), c.end(), "conv_rows") == c.end());
    for (codegen::Precision precision :
         {codegen::Precision::Fp32, codegen::Precision::Bf16Weights, codegen::Precision::Int8Weights, codegen::Precision::Bf16}) {
      CHECK(codegen::heuristicChoice(up, {1, 16, 64}, true, std::nullopt, {}, precision).at(k.name) == codegen::ImplDispatch{{-1, "gemm8x32"}});
      CHECK(codegen::heuristicChoice(up, {1, 16, 64}, true, std::nullopt, kNarrow, precision).at(k.name) == codegen::ImplDispatch{{-1, "gemm6x16"}});
    }
  }
  CHECK(strided == 1);
}

TEST_CASE("extern: --no-extern leaves no oneDNN in the artifact, extern kernels link libdnnl", "[extern]") {
  if (!withOnednn()) return;
  auto g = driver::loadModel(testing::sourcePath("examples/models/atari_cnn.onnx"));
  passes::runPipeline(*g);
  codegen::CppOptions o;
  o.target = "x86-64-v4";
  o.forceImpl = "onednn_postops";
  codegen::GeneratedCpp with = codegen::generateCpp(*g, o);
  CHECK(with.libraries == std::vector<std::string>{"dnnl", "gomp"});
  CHECK(with.source.find("pc::dnnl_ext::Conv") != std::string::npos);
  // By default the generated kernels run every conv of 32 channels or more, with or without
  // AVX-512: the default artifact needs no libdnnl.
  o.forceImpl.clear();
  CHECK(codegen::generateCpp(*g, o).libraries.empty());
  o.target = "x86-64-v3";
  CHECK(codegen::generateCpp(*g, o).libraries.empty());
  o.target = "x86-64-v4";
  o.forceImpl = "onednn_postops";
  o.externKernels = false;
  codegen::GeneratedCpp without = codegen::generateCpp(*g, o);
  CHECK(without.libraries.empty());
  CHECK(without.source.find("dnnl") == std::string::npos);
  for (const auto& [name, d] : without.dispatch) {
    for (const codegen::ImplRange& r : d) CHECK(r.impl.rfind("onednn", 0) == std::string::npos);
  }
}

// A compiler built without oneDNN (CMake's POLICYC_ONEDNN=OFF, or no libdnnl-dev) offers no oneDNN
// implementation anywhere and says why when one is asked for; one built with it offers them. Either
// way the default artifact of a CNN needs no libdnnl.
TEST_CASE("extern: oneDNN is an implementation only where the compiler was built with it", "[extern]") {
  auto g = driver::loadModel(testing::sourcePath("examples/models/atari_cnn.onnx"));
  passes::runPipeline(*g);
  const codegen::PlannedProgram planned = codegen::planGraph(*g);
  bool anyOnednn = false;
  for (const codegen::Kernel& k : planned.program.kernels) {
    for (const std::string& c : codegen::implCandidates(planned.program, k, true)) anyOnednn = anyOnednn || c.rfind("onednn", 0) == 0;
  }
  CHECK(anyOnednn == codegen::onednnBuiltIn());
  codegen::CppOptions o;
  CHECK(codegen::generateCpp(*g, o).libraries.empty());
  o.forceImpl = "onednn";
  if (codegen::onednnBuiltIn()) {
    CHECK(codegen::generateCpp(*g, o).libraries == std::vector<std::string>{"dnnl", "gomp"});
  } else {
    CHECK_THROWS_WITH(codegen::generateCpp(*g, o), Catch::Contains("--force-impl onednn: this policyc was built without oneDNN"));
    o.forceImpl.clear();
    o.choice = codegen::ImplChoice{{planned.program.kernels[0].name, {{-1, "onednn_postops"}}}};
    CHECK_THROWS_WITH(codegen::generateCpp(*g, o), Catch::Contains("has no implementation 'onednn_postops'") &&
                                                       Catch::Contains("built without oneDNN (libdnnl-dev)"));
  }
}

TEST_CASE("extern: a choice of a missing implementation is one clear error", "[extern]") {
  if (!withOnednn()) return;
  auto g = driver::loadModel(testing::sourcePath("examples/models/ppo_mlp.onnx"));
  passes::runPipeline(*g);
  codegen::CppOptions o;
  o.forceImpl = "mkl";
  CHECK_THROWS_WITH(codegen::generateCpp(*g, o),
                    Catch::Contains("unknown implementation 'mkl'") && Catch::Contains("gemm4x32, gemm4x16, onednn, onednn_postops"));
  o.forceImpl.clear();
  o.choice = codegen::ImplChoice{{"fused_linear_bias_tanh_1", {{-1, "onednn"}}}};
  CHECK_THROWS_WITH(codegen::generateCpp(*g, o), Catch::Contains("kernel 'fused_linear_bias_tanh_1' has no implementation 'onednn'") &&
                                                     Catch::Contains("candidates: gemm4x32, gemm4x16"));
  o.choice.reset();
  o.tuneBatches = {0, 4};
  CHECK_THROWS_WITH(codegen::generateCpp(*g, o), Catch::Contains("tuning batch sizes must be positive"));
}

TEST_CASE("extern: post-op chains and residual sums match the interpreter", "[extern]") {
  if (!withOnednn()) return;
  auto g = postOpGraph();
  auto opt = g->clone();
  passes::runPipeline(*opt);
  codegen::KernelProgram p = codegen::lowerGraph(*opt);
  codegen::fuseKernels(p);
  int withPostOps = 0;
  for (const codegen::Kernel& k : p.kernels) {
    std::vector<std::string> c = codegen::implCandidates(p, k, true);
    withPostOps += std::find(c.begin(), c.end(), "onednn_postops") != c.end();
  }
  CHECK(withPostOps >= 5);  // every linear and conv here: eltwise chains, x*a+b, sums
  for (std::string impl : {"onednn", "onednn_postops"}) {
    codegen::CppOptions o;
    o.forceImpl = impl;
    runtime::Model m = build(*g, o, impl);
    for (int64_t batch : {1, 3, 64}) {
      for (int threads : {1, 2}) checkAgainstInterpreter(m, *g, batch, threads, impl);
    }
  }
}

// Every implementation of the reference policies' kernels (the default one is covered by the
// C++ backend's parity tests) at batch 1, 3 and 64 with 1 and 2 threads, alternating (oneDNN
// primitives are cached per thread count: one created for 1 thread must not run with 2).
// With `viaDefault`, batch 64's reference is the default build's output, whose own batch-64
// parity with the interpreter the C++ backend's tests check: the interpreter takes minutes on
// impala_cnn at batch 64 in the sanitizer build.
void checkImpls(const std::string& model, const std::vector<std::string>& impls, bool viaDefault = false) {
  auto g = driver::loadModel(testing::sourcePath("examples/models/" + model + ".onnx"));
  std::map<int64_t, std::pair<std::vector<Tensor>, std::vector<Tensor>>> cases;  // batch -> inputs, expected
  for (int64_t batch : {1, 3, 64}) {
    std::vector<Tensor> inputs = driver::randomInputs(*g, batch, 11 + static_cast<uint64_t>(batch));
    std::vector<Tensor> expected = viaDefault && batch == 64 ? driver::runModel(build(*g, {}, "default"), inputs, 1)
                                                             : interpret(*g, inputs);
    cases[batch] = {std::move(inputs), std::move(expected)};
  }
  for (const std::string& impl : available(impls)) {
    codegen::CppOptions o;
    o.forceImpl = impl;
    runtime::Model m = build(*g, o, impl);
    for (const auto& [batch, c] : cases) {
      for (int threads : {1, 2, 1}) {
        std::vector<Tensor> actual = driver::runModel(m, c.first, threads);
        for (size_t i = 0; i < c.second.size(); ++i) {
          driver::TensorCheck t = driver::compareTensors("output", actual[i], c.second[i], 1e-4, 1e-4);
          INFO(model << " " << impl << " batch " << batch << " threads " << threads << " output " << i << ": max abs " << t.maxAbs);
          CHECK(t.pass);
        }
      }
    }
  }
}

TEST_CASE("extern: ppo_mlp with every implementation matches the interpreter", "[extern][parity]") {
  checkImpls("ppo_mlp", {"gemm4x16", "onednn", "onednn_postops"});
}
TEST_CASE("extern: atari_cnn with every implementation matches the interpreter", "[extern][parity]") {
  checkImpls("atari_cnn", {"gemm4x16", "onednn", "onednn_postops", "conv_rows"});
}
TEST_CASE("extern: impala_cnn with every implementation matches the interpreter", "[extern][parity]") {
  checkImpls("impala_cnn", {"gemm4x16", "onednn_postops", "conv_rows"}, true);
}

TEST_CASE("extern: changing the thread count between calls keeps oneDNN results right", "[extern]") {
  if (!withOnednn()) return;
  auto g = driver::loadModel(testing::sourcePath("examples/models/atari_cnn.onnx"));
  codegen::CppOptions o;
  o.forceImpl = "onednn";
  runtime::Model m = build(*g, o, "threads");
  std::vector<Tensor> inputs = driver::randomInputs(*g, 16, 5);
  std::vector<Tensor> expected = interpret(*g, inputs);
  for (int threads : {1, 2, 3, 1, 3, 2, 2, 1}) {
    std::vector<Tensor> actual = driver::runModel(m, inputs, threads);
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO("threads " << threads << " output " << i);
      CHECK(driver::compareTensors("o", actual[i], expected[i], 1e-4, 1e-4).pass);
    }
  }
}

TEST_CASE("extern: max-autotune times every candidate, writes autotune.txt, and a re-compile times nothing", "[extern][autotune]") {
  const fs::path cache = scratchDir() / "tune-cache";
  setenv("POLICYC_CACHE_DIR", cache.c_str(), 1);
  auto g = driver::loadModel(testing::sourcePath("examples/models/atari_cnn.onnx"));
  passes::runPipeline(*g);
  // Each backend tunes its own code (a C++ .so, or an LLVM module in the JIT).
  const codegen::Backend backend = GENERATE(codegen::Backend::Llvm, codegen::Backend::Cpp);
  INFO("backend " << codegen::backendName(backend));
  driver::AutotuneOptions o;
  o.backend = backend;
  o.cpp.tuneBatches = {1, 4};
  o.secondsPerCandidate = 0.02;
  o.progress = false;
  driver::AutotuneResult first = driver::autotune(*g, o);
  CHECK(first.kernels == 6);  // 3 convs, 3 linear layers
  CHECK(first.timed == 12);
  std::istringstream report(first.report);
  std::string line;
  int batchLines = 0, winners = 0;
  while (std::getline(report, line)) {
    if (line.find("  batch ") != 0) continue;
    ++batchLines;
    winners += std::count(line.begin(), line.end(), '*') == 1;
    CHECK(line.find("gemm4x32 ") != std::string::npos);
    CHECK(line.find("gemm4x16 ") != std::string::npos);
  }
  CHECK(batchLines == 12);
  CHECK(winners == 12);
  CHECK((first.report.find("onednn_postops ") != std::string::npos) == codegen::onednnBuiltIn());
  CHECK(first.report.find(fmt::format("backend {}", codegen::backendName(backend))) != std::string::npos);
  CHECK(first.choice.size() == 6);
  // The second tuning of the same kernels is all cache: nothing built, nothing timed.
  driver::AutotuneResult second = driver::autotune(*g, o);
  CHECK(second.timed == 0);
  CHECK(second.choice == first.choice);
  CHECK(second.report.find("(cached)") != std::string::npos);
  // The model built with the choice matches the interpreter on both sides of the range bound.
  codegen::CppOptions cpp;
  cpp.choice = first.choice;
  cpp.tuneBatches = {1, 4};
  auto original = driver::loadModel(testing::sourcePath("examples/models/atari_cnn.onnx"));
  runtime::Model m = build(*original, cpp, "tuned");
  for (int64_t batch : {1, 2, 3, 9}) checkAgainstInterpreter(m, *original, batch, 1, "tuned");
  unsetenv("POLICYC_CACHE_DIR");
}

TEST_CASE("max pool: rows with NaN, -inf and padding match the interpreter", "[codegen][pool]") {
  // Not an extern kernel, but the row-wise pool's NaN flags and padding are easiest to reach here.
  Graph g("pool_nan");
  Value* x = g.addInput("x", {DType::F32, {Dim::batch(), 3, 7, 9}});
  Value* p = op(g, Op::MaxPool, {x}, "pool",
                {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                 {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* q = op(g, Op::MaxPool, {x}, "pool2",
                {{"kernel_shape", std::vector<int64_t>{2, 3}}, {"strides", std::vector<int64_t>{1, 2}},
                 {"dilations", std::vector<int64_t>{2, 1}}, {"pads", std::vector<int64_t>{0, 2, 1, 0}}});
  // 9 columns: a chunk of 8 in registers and a partial one (its column past the row -inf).
  g.setOutputs({{"y", op(g, Op::Relu, {p}, "relu")}, {"p", p}, {"q", q}});
  const codegen::Backend backend = GENERATE(codegen::Backend::Cpp, codegen::Backend::Llvm);
  INFO("backend " << codegen::backendName(backend));
  driver::CompileRequest request;
  request.backend = backend;
  request.jit = backend == codegen::Backend::Llvm;
  request.output = (scratchDir() / "pool_nan.so").string();
  request.progress = false;
  runtime::Model m = driver::loadCompiled(driver::compileGraph(g, request));
  std::vector<Tensor> inputs = driver::randomInputs(g, 4, 3);
  float* d = inputs[0].data<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  d[0] = nan;          // a corner: inside the first windows only
  d[10] = nan;         // the interior
  d[70] = -inf;
  d[71] = inf;
  for (int64_t i = 63; i < 126; ++i) d[i] = -inf;  // a whole channel of -inf
  std::vector<Tensor> expected = interpret(g, inputs), actual = driver::runModel(m, inputs, 1);
  bool sawNan = false;
  for (size_t i = 0; i < expected.size(); ++i) {
    for (int64_t e = 0; e < expected[i].numel(); ++e) sawNan = sawNan || std::isnan(expected[i].getAsDouble(e));
    driver::TensorCheck c = driver::compareTensors("output", actual[i], expected[i], 0, 0);
    INFO("output " << i << ": " << c.note);
    CHECK(c.pass);
  }
  CHECK(sawNan);
}
