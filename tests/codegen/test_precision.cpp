// Reduced precision (--precision, docs/precision.md): which layers are narrowed (the keep-fp32
// rule, --keep-fp32 and its errors), and both backends' microkernels on bf16 and int8 weights
// against the interpreter running the same model with those weights rounded the documented way
// (so any difference is the backend's, not the rounding's), the precision in the descriptor and
// check --precision's report.
#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/codegen/backend.h"
#include "policyc/codegen/codegen.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/debug/check.h"
#include "policyc/driver/compile.h"
#include "policyc/driver/model_io.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/loader.h"
#include "support/scratch_dir.h"

using namespace policyc;
using namespace policyc::ir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path& scratch() { return testing::scratchDir("policyc-precision-test"); }

// bf16 by the definition: the nearer of the two bf16 values around x, the even one on a tie.
float bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const float lo = std::bit_cast<float>(bits & 0xffff0000u), hi = std::bit_cast<float>((bits & 0xffff0000u) + 0x10000u);
  const double dl = std::abs(static_cast<double>(x) - lo), dh = std::abs(static_cast<double>(hi) - x);
  if (dl != dh) return dl < dh ? lo : hi;
  return ((bits >> 16) & 1u) ? hi : lo;
}

// The ranges of a row [0, k) whose sums a narrowed row keeps: each `group` of values (one input
// channel's), then the whole row (packing.h, inputChannelGroup).
std::vector<std::pair<int64_t, int64_t>> keptSums(int64_t k, int64_t group) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t lo = 0; group < k && lo < k; lo += group) ranges.emplace_back(lo, std::min(k, lo + group));
  ranges.emplace_back(0, k);
  return ranges;
}

// A weight [n, k] rounded as int8 with one scale per output channel (row): max |w| / 127, each
// value to nearest, then, for each range of keptSums in turn, while the range's rounding errors
// add up to a whole step or more, the value rounded farthest from w / scale in that direction
// (the first of equals) the other way (packing.h, toInt8).
void int8Rows(float* w, int64_t n, int64_t k, int64_t group) {
  for (int64_t r = 0; r < n; ++r) {
    float m = 0;
    for (int64_t c = 0; c < k; ++c) m = std::max(m, std::abs(w[r * k + c]));
    const float scale = m / 127.0f;
    if (scale == 0) continue;
    std::vector<float> q(static_cast<size_t>(k));
    std::vector<double> left(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) {
      q[c] = std::clamp(std::nearbyint(w[r * k + c] / scale), -127.0f, 127.0f);
      left[c] = static_cast<double>(w[r * k + c] / scale) - q[c];
    }
    for (const auto& [lo, hi] : keptSums(k, group)) {
      for (;;) {
        const double sum = std::accumulate(left.begin() + lo, left.begin() + hi, 0.0);
        if (std::nearbyint(sum) == 0) break;
        const double sign = sum > 0 ? 1 : -1;
        int64_t best = -1;
        for (int64_t c = lo; c < hi; ++c) {
          if (sign * left[c] > 0 && std::abs(q[c] + sign) <= 127 && (best < 0 || sign * left[c] > sign * left[best])) best = c;
        }
        if (best < 0) break;
        q[best] += static_cast<float>(sign);
        left[best] -= sign;
      }
    }
    for (int64_t c = 0; c < k; ++c) w[r * k + c] = q[c] * scale;
  }
}

// A weight [n, k] rounded as bf16 (packing.h, toBf16Pairs): each value to the nearer of the two
// bf16 values around it, then, for each range of keptSums in turn, with S its rounding errors'
// sum: the values rounded S's way, taken by the squared error a move to the other value around
// them adds (the first of equals), move where that step d is less than their error r plus |S|.
void bf16Rows(float* w, int64_t n, int64_t k, int64_t group) {
  auto around = [](float x) {  // the two bf16 values x lies between (toward zero, away from zero)
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    return std::pair{std::bit_cast<float>(bits & 0xffff0000u), std::bit_cast<float>((bits & 0xffff0000u) + 0x10000u)};
  };
  for (int64_t r = 0; r < n; ++r) {
    float* row = w + r * k;
    std::vector<float> exact(row, row + k);
    for (int64_t c = 0; c < k; ++c) row[c] = bf16(exact[c]);
    for (const auto& [lo, hi] : keptSums(k, group)) {
      double sum = 0;
      for (int64_t c = lo; c < hi; ++c) sum += static_cast<double>(exact[c]) - row[c];
      const double sign = sum > 0 ? 1 : -1;
      std::vector<std::pair<double, int64_t>> moves;  // (added squared error, c)
      for (int64_t c = lo; c < hi; ++c) {
        const auto [near, far] = around(exact[c]);
        const float other = row[c] == near ? far : near;
        const double e = static_cast<double>(exact[c]) - row[c], e2 = static_cast<double>(exact[c]) - other;
        if (sign * e > 0 && sign * e2 < 0 && std::isfinite(other)) moves.emplace_back(e2 * e2 - e * e, c);
      }
      std::stable_sort(moves.begin(), moves.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      double s = sign * sum;
      for (const auto& [added, c] : moves) {
        const auto [near, far] = around(exact[c]);
        const float other = row[c] == near ? far : near;
        const double d = sign * (static_cast<double>(other) - row[c]), e = sign * (static_cast<double>(exact[c]) - row[c]);
        if (d >= e + s) continue;
        row[c] = other;
        s -= d;
      }
    }
  }
}

using Round = std::function<void(const std::string& layer, Tensor& weight)>;

// An MLP policy x[batch,64] -> 256 -> 256 -> 6 (the first two layers at or over the 16384 weights
// the rule narrows; the last a head) and a CNN [batch,32,6,6] -> conv 3x3 64 -> linear 6, with
// every weight passed through `round` (none: fp32).
std::unique_ptr<Graph> mlp(const Round& round, bool withAction = false) {
  auto g = std::make_unique<Graph>("mlp_policy");
  Value* x = g->addInput("obs", {DType::F32, {Dim::batch(), 64}});
  auto layer = [&](Value* in, int64_t k, int64_t n, const std::string& name) {
    Tensor w(DType::F32, {n, k}), b(DType::F32, {n});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(n)) * 0.11f;
    for (int64_t i = 0; i < n; ++i) b.data<float>()[i] = 0.01f * static_cast<float>(i % 7);
    if (round) round(name, w);
    return g->addOp(Op::Linear, {in, g->addParam(name + ".w", std::move(w)), g->addParam(name + ".b", std::move(b))}, {}, name)->output();
  };
  Value* h = g->addOp(Op::Tanh, {layer(x, 64, 256, "fc1")}, {}, "act1")->output();
  h = g->addOp(Op::Relu, {layer(h, 256, 256, "fc2")}, {}, "act2")->output();
  Value* logits = layer(h, 256, 6, "head");
  if (!withAction) {
    g->setOutputs({{"logits", logits}});
  } else {
    Value* action = g->addOp(Op::ArgMax, {logits}, {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}}, "greedy")->output();
    g->setOutputs({{"logits", logits}, {"action", action}});
  }
  return g;
}

std::unique_ptr<Graph> cnn(const Round& round) {
  auto g = std::make_unique<Graph>("cnn_policy");
  Value* x = g->addInput("obs", {DType::F32, {Dim::batch(), 32, 6, 6}});
  Tensor w(DType::F32, {64, 32, 3, 3}), b(DType::F32, {64});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::cos(0.29f * static_cast<float>(i)) * 0.07f;
  for (int64_t i = 0; i < 64; ++i) b.data<float>()[i] = 0.02f * static_cast<float>(i % 5);
  if (round) round("conv", w);
  Value* c = g->addOp(Op::Conv, {x, g->addParam("conv.w", std::move(w)), g->addParam("conv.b", std::move(b))},
                      {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "conv")->output();
  Value* f = g->addOp(Op::Flatten, {g->addOp(Op::Relu, {c}, {}, "act")->output()}, {{"axis", int64_t{1}}}, "flat")->output();
  Tensor hw(DType::F32, {6, 64 * 36}), hb(DType::F32, {6});
  for (int64_t i = 0; i < hw.numel(); ++i) hw.data<float>()[i] = std::sin(0.13f * static_cast<float>(i)) * 0.01f;
  g->setOutputs({{"logits", g->addOp(Op::Linear, {f, g->addParam("head.w", std::move(hw)), g->addParam("head.b", std::move(hb))}, {}, "head")->output()}});
  return g;
}

// The weights of the layers named in `narrowed` rounded as `precision` stores them (`keepSums`:
// the packed panels' rounding; else each bf16 value alone, as oneDNN's reorder rounds).
Round rounding(codegen::Precision precision, std::vector<std::string> narrowed, bool keepSums = true) {
  return [=](const std::string& layer, Tensor& w) {
    if (std::find(narrowed.begin(), narrowed.end(), layer) == narrowed.end()) return;
    const int64_t n = w.shape()[0], k = w.numel() / n;
    const int64_t group = w.shape().size() == 4 ? w.shape()[2] * w.shape()[3] : k;  // a conv's channel windows; these linears read no feature map
    if (precision == codegen::Precision::Int8Weights) {
      int8Rows(w.data<float>(), n, k, group);
    } else if (keepSums) {
      bf16Rows(w.data<float>(), n, k, group);
    } else {
      for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = bf16(w.data<float>()[i]);
    }
  };
}

// `graph` compiled by `backend` with `precision` (oneDNN off: every conv on the microkernels).
runtime::Model compiled(const Graph& graph, codegen::Backend backend, codegen::Precision precision, const std::string& tag,
                        std::vector<std::string> keep = {}, bool externKernels = false, const std::string& forceImpl = "",
                        int64_t streamedWeights = codegen::kMinReducedWeights, const std::string& target = "native") {
  driver::CompileRequest r;
  r.backend = backend;
  r.cpp.target = target;
  r.cpp.precision = precision;
  r.cpp.keepFp32 = std::move(keep);
  r.cpp.externKernels = externKernels;
  r.cpp.forceImpl = forceImpl;
  r.cpp.minChunkCost = 0;  // every thread split
  r.cpp.streamedWeights = streamedWeights;  // by default every narrowed layer streamed: int8 under int8-weights
  r.jit = backend == codegen::Backend::Llvm;
  r.output = (scratch() / fmt::format("{}_{}_{}.so", graph.name(), tag, codegen::backendName(backend))).string();
  r.cpp.name = "m";
  r.progress = false;
  return driver::loadCompiled(driver::compileGraph(graph, r));
}

// Targets by their traits: AVX512_BF16 (Cooper Lake, Zen 4); with AMX-BF16 too (Sapphire Rapids).
const codegen::TargetTraits kDot{.bf16Dot = true};
const codegen::TargetTraits kAmx{.bf16Dot = true, .bf16Tiles = true};

// Each narrowed layer's name and storage (on a target with `target`'s traits), sorted.
std::vector<std::pair<std::string, codegen::WeightStorage>> narrowedStorages(const Graph& graph, codegen::Precision precision,
                                                                             std::vector<std::string> keep = {}, codegen::TargetTraits target = {},
                                                                             bool externKernels = false, std::string forceImpl = "",
                                                                             int64_t streamedWeights = codegen::kMinReducedWeights) {
  auto g = graph.clone();
  passes::runPipeline(*g);
  codegen::PlannedProgram planned = codegen::planGraph(*g);
  codegen::CodegenOptions o;
  o.precision = precision;
  o.externKernels = externKernels;
  o.forceImpl = std::move(forceImpl);
  o.keepFp32 = std::move(keep);
  o.streamedWeights = streamedWeights;
  std::vector<std::pair<std::string, codegen::WeightStorage>> out;
  for (const auto& [layer, storage] : codegen::weightStorages(planned.program, planned.plan, o, target)) {
    if (storage != codegen::WeightStorage::F32) out.emplace_back(layer, storage);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> narrowedLayers(const Graph& graph, codegen::Precision precision, std::vector<std::string> keep = {}) {
  std::vector<std::string> out;
  for (const auto& [layer, storage] : narrowedStorages(graph, precision, std::move(keep))) out.push_back(layer);
  return out;
}

// Inputs whose every value is a bf16 value: a layer that multiplies in bf16 rounds them to themselves.
std::vector<Tensor> bf16Inputs(const Graph& graph, int64_t batch) {
  std::vector<Tensor> inputs = driver::randomInputs(graph, batch, 5);
  for (Tensor& t : inputs) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16(t.data<float>()[i]);
  }
  return inputs;
}

}  // namespace

TEST_CASE("precision: the rule narrows the large layers and keeps the heads, --keep-fp32 keeps more", "[precision]") {
  auto g = mlp(nullptr);
  CHECK(narrowedLayers(*g, codegen::Precision::Fp32).empty());
  // fc1 has 64 x 256 = 16384 weights (the rule's least), fc2 65536; head is a head.
  CHECK(narrowedLayers(*g, codegen::Precision::Bf16Weights) == std::vector<std::string>{"fc1", "fc2"});
  CHECK(narrowedLayers(*g, codegen::Precision::Int8Weights, {"fc1"}) == std::vector<std::string>{"fc2"});
  CHECK(narrowedLayers(*cnn(nullptr), codegen::Precision::Bf16) == std::vector<std::string>{"conv"});
  // int8-weights stores int8 from kStreamedWeights weights, bf16 below (fc1 16384, fc2 65536):
  // at the threshold int8, one under it bf16.
  using codegen::WeightStorage;
  using Storages = std::vector<std::pair<std::string, WeightStorage>>;
  const auto int8From = [&](int64_t least) { return narrowedStorages(*g, codegen::Precision::Int8Weights, {}, {}, false, "", least); };
  CHECK(int8From(codegen::kStreamedWeights) == Storages{{"fc1", WeightStorage::Bf16}, {"fc2", WeightStorage::Bf16}});
  CHECK(int8From(65536) == Storages{{"fc1", WeightStorage::Bf16}, {"fc2", WeightStorage::Int8}});
  CHECK(int8From(65537) == Storages{{"fc1", WeightStorage::Bf16}, {"fc2", WeightStorage::Bf16}});
  CHECK(int8From(16384) == Storages{{"fc1", WeightStorage::Int8}, {"fc2", WeightStorage::Int8}});
  // A name that is no layer is one error listing the layers.
  CHECK_THROWS_WITH(narrowedLayers(*g, codegen::Precision::Bf16Weights, {"fc9"}),
                    Contains("--keep-fp32: 'fc9' names no linear or conv layer") && Contains("'fc2'"));
}

TEST_CASE("precision: both backends' microkernels on bf16 and int8 weights match the rounded model", "[precision]") {
  for (codegen::Precision precision : {codegen::Precision::Bf16Weights, codegen::Precision::Bf16, codegen::Precision::Int8Weights}) {
    // On a host with AVX512_BF16, bf16 multiplies in bf16 (activations rounded too): the test
    // "bf16 products (vdpbf16ps) ..." below checks that against bf16 inputs. Elsewhere bf16 is
    // bf16 weights widened, checked here.
    if (precision == codegen::Precision::Bf16 && __builtin_cpu_supports("avx512bf16")) continue;
    for (bool conv : {false, true}) {
      auto exact = conv ? cnn(nullptr) : mlp(nullptr);
      const std::vector<std::string> narrowed = narrowedLayers(*exact, precision);
      REQUIRE(!narrowed.empty());
      auto rounded = conv ? cnn(rounding(precision, narrowed)) : mlp(rounding(precision, narrowed));
      std::map<int64_t, Tensor> cppOut;  // by batch: the C++ build's logits, which the LLVM build's equal bitwise
      for (codegen::Backend backend : {codegen::Backend::Cpp, codegen::Backend::Llvm}) {
        runtime::Model model = compiled(*exact, backend, precision, codegen::precisionName(precision));
        CHECK(model.precision() == codegen::precisionName(precision));
        // Batch 1 (one row), 5 (a quad and a row), 8 (two quads); 1 and 2 threads, bitwise equal.
        for (int64_t batch : {1, 5, 8}) {
          std::vector<Tensor> inputs = driver::randomInputs(*exact, batch, 3);
          std::vector<Tensor> want = interpret(*rounded, inputs), original = interpret(*exact, inputs);
          std::vector<Tensor> one = driver::runModel(model, inputs, 1), two = driver::runModel(model, inputs, 2);
          driver::TensorCheck c = driver::compareTensors("logits", one[0], want[0], 1e-5, 1e-5);
          driver::TensorCheck off = driver::compareTensors("logits", one[0], original[0], 1e-5, 1e-5);
          INFO(codegen::precisionName(precision) << (conv ? " cnn " : " mlp ") << codegen::backendName(backend) << " batch "
                                                 << batch << ": max abs " << c.maxAbs << " (against fp32 " << off.maxAbs << ")");
          CHECK(c.pass);
          CHECK(off.maxAbs > c.maxAbs);  // the narrowing is real: the fp32 model differs more
          CHECK(std::memcmp(one[0].bytes(), two[0].bytes(), one[0].nbytes()) == 0);
          if (backend == codegen::Backend::Cpp) {
            cppOut.emplace(batch, one[0]);
          } else {
            CHECK(std::memcmp(one[0].bytes(), cppOut.at(batch).bytes(), one[0].nbytes()) == 0);
          }
        }
      }
    }
  }
}

// A CNN whose flattened feature map feeds a hidden layer: obs [batch,32,5,5] -> conv 3x3 64 ->
// relu -> flatten (64 channels of 5x5) -> linear 1600 -> 16 -> relu -> head 4, every weight
// passed through `round`.
std::unique_ptr<Graph> featureMapPolicy(const Round& round) {
  auto g = std::make_unique<Graph>("feature_map_policy");
  Value* x = g->addInput("obs", {DType::F32, {Dim::batch(), 32, 5, 5}});
  auto param = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
    Tensor t(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(0.41f * static_cast<float>(i) + static_cast<float>(shape[0])) * scale;
    if (round && shape.size() > 1) round(name, t);
    return g->addParam(name + (shape.size() > 1 ? ".w" : ".b"), std::move(t));
  };
  Value* c = g->addOp(Op::Conv, {x, param("conv", {64, 32, 3, 3}, 0.06f), param("conv", {64}, 0.02f)},
                      {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "conv")->output();
  Value* f = g->addOp(Op::Flatten, {g->addOp(Op::Relu, {c}, {}, "act")->output()}, {{"axis", int64_t{1}}}, "flat")->output();
  Value* h = g->addOp(Op::Linear, {f, param("fc", {16, 1600}, 0.02f), param("fc", {16}, 0.01f)}, {}, "fc")->output();
  h = g->addOp(Op::Relu, {h}, {}, "act2")->output();
  g->setOutputs({{"logits", g->addOp(Op::Linear, {h, param("head", {4, 16}, 0.2f), param("head", {4}, 0.0f)}, {}, "head")->output()}});
  return g;
}

// Narrowed columns keep the sums of each input channel's values (packing.h, inputChannelGroup): a
// conv's 3x3 window of a channel, and a linear layer's 5x5 positions of a channel where it reads
// the flattened feature map. The reference rounds with those groups; rounding the linear layer's
// columns as wholes (what a layer over plain features gets) gives other values.
TEST_CASE("precision: narrowed columns keep each input channel's sums (conv windows, a flattened feature map)", "[precision]") {
  for (codegen::Precision precision : {codegen::Precision::Bf16Weights, codegen::Precision::Int8Weights}) {
    auto exact = featureMapPolicy(nullptr);
    REQUIRE(narrowedLayers(*exact, precision) == std::vector<std::string>{"conv", "fc"});
    auto roundBy = [&](int64_t fcGroup) {
      return featureMapPolicy([=](const std::string& layer, Tensor& w) {
        const int64_t n = w.shape()[0], k = w.numel() / n, group = layer == "conv" ? 9 : fcGroup;
        if (layer == "head") return;
        if (precision == codegen::Precision::Int8Weights) {
          int8Rows(w.data<float>(), n, k, group);
        } else {
          bf16Rows(w.data<float>(), n, k, group);
        }
      });
    };
    auto byChannel = roundBy(25), byColumn = roundBy(1600);
    std::vector<Tensor> inputs = driver::randomInputs(*exact, 6, 4);
    std::vector<Tensor> want = interpret(*byChannel, inputs), wholeColumns = interpret(*byColumn, inputs);
    std::vector<Tensor> cpp;
    for (codegen::Backend backend : {codegen::Backend::Cpp, codegen::Backend::Llvm}) {
      runtime::Model model = compiled(*exact, backend, precision, std::string("groups_") + codegen::precisionName(precision));
      std::vector<Tensor> one = driver::runModel(model, inputs, 1), two = driver::runModel(model, inputs, 2);
      driver::TensorCheck c = driver::compareTensors("logits", one[0], want[0], 1e-5, 1e-5);
      driver::TensorCheck other = driver::compareTensors("logits", one[0], wholeColumns[0], 1e-5, 1e-5);
      INFO(codegen::precisionName(precision) << " " << codegen::backendName(backend) << ": max abs " << c.maxAbs
                                             << " (against whole columns " << other.maxAbs << ")");
      CHECK(c.pass);
      CHECK(other.maxAbs > 4 * c.maxAbs);
      CHECK(std::memcmp(one[0].bytes(), two[0].bytes(), one[0].nbytes()) == 0);
      if (cpp.empty()) {
        cpp = one;
      } else {
        CHECK(std::memcmp(one[0].bytes(), cpp[0].bytes(), one[0].nbytes()) == 0);
      }
    }
  }
}

// Where many rows pass a layer's narrowed panels (KernelSchedule::widenRows: 16 rows or more), each
// chunk widens them to f32 once and the tiles multiply those: the same products and sums as
// widening inside each tile. Rows 0-11 (three whole quads) of batch 15 (not widened) and of
// batch 21 (widened, the same first rows) are the same bits, in both backends, and the two
// backends agree bitwise at batch 21 (1 and 2 threads).
TEST_CASE("precision: panels widened once for many rows give the bits of widening in each tile", "[precision]") {
  for (codegen::Precision precision : {codegen::Precision::Bf16Weights, codegen::Precision::Int8Weights}) {
    auto g = mlp(nullptr);
    auto planned = g->clone();
    passes::runPipeline(*planned);
    codegen::CppOptions o;
    o.precision = precision;
    o.externKernels = false;
    o.streamedWeights = codegen::kMinReducedWeights;
    const std::string source = codegen::generateCpp(*planned, o).source;
    CHECK_THAT(source, Contains("pc::widenPanels(64, w,") && Contains("pc::widenPanels(256, w,"));
    CHECK_THAT(source, Contains(precision == codegen::Precision::Int8Weights ? "pc::WideI8 wide[" : "float wide["));
    codegen::LlvmOptions llvm;
    llvm.precision = precision;
    llvm.externKernels = false;
    llvm.streamedWeights = codegen::kMinReducedWeights;
    llvm.keepUnoptimizedIr = true;
    CHECK_THAT(codegen::generateLlvm(*planned, llvm).unoptimizedIr(), Contains("%widened = icmp sge i64"));
    std::vector<Tensor> many = driver::randomInputs(*g, 21, 9);
    Tensor few(DType::F32, {15, 64});
    std::memcpy(few.bytes(), many[0].bytes(), few.nbytes());
    std::vector<std::vector<Tensor>> atMany;
    for (codegen::Backend backend : {codegen::Backend::Cpp, codegen::Backend::Llvm}) {
      runtime::Model model = compiled(*g, backend, precision, std::string(codegen::precisionName(precision)) + "_widened");
      std::vector<Tensor> wide = driver::runModel(model, many, 1), narrow = driver::runModel(model, {few}, 1);
      INFO(codegen::precisionName(precision) << " " << codegen::backendName(backend));
      CHECK(std::memcmp(wide[0].bytes(), narrow[0].bytes(), 12 * 6 * sizeof(float)) == 0);
      std::vector<Tensor> two = driver::runModel(model, many, 2);
      CHECK(std::memcmp(wide[0].bytes(), two[0].bytes(), wide[0].nbytes()) == 0);
      atMany.push_back(std::move(wide));
    }
    CHECK(std::memcmp(atMany[0][0].bytes(), atMany[1][0].bytes(), atMany[0][0].nbytes()) == 0);
  }
}

// A narrowed layer that keeps its f32 panels in L2 (under kStreamedWeights weights: both of the
// MLP's, and the conv below) is widened once, by the first kernel that runs many rows (any run,
// for a conv), into the model's region: the same values as widening in every run, so the same
// bits (batch 21 against the build that widens in every run, and rows 0-11 against batch 15,
// which reads the narrow panels). Two threads make the first call at once (one widens, the other
// waits for it); the region is memory of the loaded model, not bytes of the .so.
TEST_CASE("precision: small narrowed layers widened once give the bits of widening in each run", "[precision]") {
  auto g = mlp(nullptr);
  auto planned = g->clone();
  passes::runPipeline(*planned);
  codegen::CppOptions o;
  o.precision = codegen::Precision::Bf16Weights;
  o.externKernels = false;
  const std::string source = codegen::generateCpp(*planned, o).source;
  CHECK_THAT(source, Contains("if (widened) pc::widenAtLoad(&pc_widen_state, pc_widen_jobs, 2, pc_weights, pc_widened);") &&
                         Contains("static float pc_widened[81920];") && Contains("const float* PC_RESTRICT wide = pc_widened + 16384 + j*4096;") &&
                         !Contains("pc::widenPanels("));
  codegen::LlvmOptions llvm;
  llvm.precision = o.precision;
  llvm.externKernels = false;
  llvm.keepUnoptimizedIr = true;
  CHECK_THAT(codegen::generateLlvm(*planned, llvm).unoptimizedIr(),
             Contains("@pc_widened = internal global [81920 x float] zeroinitializer, align 64") && Contains("call void @policyc_rt_widen_at_load("));
  std::vector<Tensor> many = driver::randomInputs(*g, 21, 9);
  Tensor few(DType::F32, {15, 64});
  std::memcpy(few.bytes(), many[0].bytes(), few.nbytes());
  std::vector<Tensor> results;
  for (codegen::Backend backend : {codegen::Backend::Cpp, codegen::Backend::Llvm}) {
    INFO(codegen::backendName(backend));
    runtime::Model once = compiled(*g, backend, o.precision, "load_widened", {}, false, "", codegen::kStreamedWeights);
    runtime::Model every = compiled(*g, backend, o.precision, "run_widened");
    std::vector<Tensor> first[2];
    std::thread other([&] { first[1] = driver::runModel(once, many, 1); });
    first[0] = driver::runModel(once, many, 1);
    other.join();
    const std::vector<Tensor> reference = driver::runModel(every, many, 1);
    CHECK(std::memcmp(first[0][0].bytes(), reference[0].bytes(), reference[0].nbytes()) == 0);
    CHECK(std::memcmp(first[1][0].bytes(), reference[0].bytes(), reference[0].nbytes()) == 0);
    CHECK(std::memcmp(driver::runModel(once, many, 2)[0].bytes(), reference[0].bytes(), reference[0].nbytes()) == 0);
    CHECK(std::memcmp(driver::runModel(once, {few}, 1)[0].bytes(), reference[0].bytes(), 12 * 6 * sizeof(float)) == 0);
    results.push_back(reference[0]);
    if (backend == codegen::Backend::Llvm) continue;  // (the JIT's model has no file)
    CHECK(std::filesystem::file_size(scratch() / "mlp_policy_load_widened_cpp.so") < std::filesystem::file_size(scratch() / "mlp_policy_run_widened_cpp.so") + 4096);
  }
  CHECK(std::memcmp(results[0].bytes(), results[1].bytes(), results[0].nbytes()) == 0);

  // A conv (18,432 weights) reads its widened panels at every batch: the bits of widening inside
  // each tile, at batches 1 and 5, 1 and 2 threads, in both backends.
  auto c = cnn(nullptr);
  auto plannedCnn = c->clone();
  passes::runPipeline(*plannedCnn);
  CHECK_THAT(codegen::generateCpp(*plannedCnn, o).source,
             Contains("  pc::widenAtLoad(&pc_widen_state, pc_widen_jobs, 1, pc_weights, pc_widened);\n"
                      "  const float* PC_RESTRICT wp = pc_widened + 0;  // bf16 weights widened once (KernelSchedule::widenedTiles)"));
  std::vector<Tensor> convResults;
  for (codegen::Backend backend : {codegen::Backend::Cpp, codegen::Backend::Llvm}) {
    runtime::Model once = compiled(*c, backend, o.precision, "load_widened", {}, false, "", codegen::kStreamedWeights);
    runtime::Model every = compiled(*c, backend, o.precision, "tile_widened");
    for (int64_t batch : {1, 5}) {
      INFO(codegen::backendName(backend) << " batch " << batch);
      const std::vector<Tensor> in = driver::randomInputs(*c, batch, 4);
      const std::vector<Tensor> reference = driver::runModel(every, in, 1);
      CHECK(std::memcmp(driver::runModel(once, in, 1)[0].bytes(), reference[0].bytes(), reference[0].nbytes()) == 0);
      CHECK(std::memcmp(driver::runModel(once, in, 2)[0].bytes(), reference[0].bytes(), reference[0].nbytes()) == 0);
      if (batch == 5) convResults.push_back(reference[0]);
    }
  }
  CHECK(std::memcmp(convResults[0].bytes(), convResults[1].bytes(), convResults[0].nbytes()) == 0);
}

// Narrowed linear layers run tiles of eight rows too (gemm8x32, the heuristic's with AVX-512): on
// their panels widened inside the tile below 16 rows, on the widened panels from 16 (bf16 pairs
// for vdpbf16ps stay quads below 16). Every row sums in the same order as in gemm4x32's quads:
// batches of 1, 9 (an octet, not widened), 13, 21 and 64 (widened octets and a last partial one)
// give the same bits with either implementation, in both backends, at 1 and 2 threads.
TEST_CASE("precision: narrowed linear layers by tiles of eight rows give the bits of quads", "[precision]") {
  std::vector<codegen::Precision> precisions = {codegen::Precision::Bf16Weights, codegen::Precision::Int8Weights};
  if (codegen::bf16DotTarget("native")) precisions.push_back(codegen::Precision::Bf16);
  // Rows of 2048 inputs too: panels too long for the widening buffer (bf16 pairs widened inside
  // each tile from 16 rows, bf16 and int8 panels always).
  auto longRows = std::make_unique<Graph>("long_rows");
  {
    Value* x = longRows->addInput("obs", {DType::F32, {Dim::batch(), 2048}});
    Tensor w(DType::F32, {32, 2048}), w2(DType::F32, {2, 32});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.01f * static_cast<float>(i % 11) - 0.05f;
    for (int64_t i = 0; i < w2.numel(); ++i) w2.data<float>()[i] = 0.1f * static_cast<float>(i % 5);
    Value* h = longRows->addOp(Op::Relu, {longRows->addOp(Op::Linear, {x, longRows->addParam("fc.w", std::move(w))}, {}, "fc")->output()}, {},
                               "act")->output();
    longRows->setOutputs({{"out", longRows->addOp(Op::Linear, {h, longRows->addParam("head.w", std::move(w2))}, {}, "head")->output()}});
  }
  auto g = mlp(nullptr);
  for (const Graph* graph : {g.get(), longRows.get()}) {
    auto planned = graph->clone();
    passes::runPipeline(*planned);
    for (codegen::Precision precision : precisions) {
      INFO(graph->name() << " " << codegen::precisionName(precision));
      codegen::CppOptions o;
      o.precision = precision;
      o.externKernels = false;
      const std::string source = codegen::generateCpp(*planned, o).source;
      if (precision == codegen::Precision::Bf16 && codegen::cppTargetTraits("native").fastBf16Dot) {
        // vdpbf16ps at the FMA's rate: the pairs are never widened, every row runs in quads.
        CHECK(source.find("x8, wide") == std::string::npos);
        CHECK(source.find("reinterpret_cast<const pc::bf16x2*>") == std::string::npos);
      } else if (graph == g.get()) {
        // (relu and tanh layers: their epilogues finish each row from the tile's registers, _fin)
        CHECK_THAT(source, Contains("pc::gemm_8x32_fin(256, x8, wide, bp + j*16, [&]") && Contains("pc::gemm_8x32_fin(64, x8, wide, bp + j*16, [&]"));
        // Not widened: eight rows from the narrowed panels (bf16-dot pairs: quads only).
        CHECK((source.find("pc::gemm_8x32_fin(256, x8, w, bp + j*16, [&]") != std::string::npos) == (precision != codegen::Precision::Bf16));
      } else {
        CHECK_THAT(source, Contains(precision == codegen::Precision::Bf16 ? "pc::gemm_8x32_fin(2048, x8, reinterpret_cast<const pc::bf16x2*>(w)"
                                                                         : "pc::gemm_8x32_fin(2048, x8, w, bp + j*16"));
      }
      std::vector<std::vector<Tensor>> outs;
      for (const std::string impl : {"gemm8x32", "gemm4x32"}) {  // the heads too (not dot_rows, whose sums differ)
        for (codegen::Backend backend : {codegen::Backend::Cpp, codegen::Backend::Llvm}) {
          const std::string tag = fmt::format("octets_{}_{}", codegen::precisionName(precision), impl);
          runtime::Model model = compiled(*graph, backend, precision, tag, {}, false, impl);
          std::vector<Tensor> got;
          for (int64_t batch : {1, 9, 13, 21, 64}) {
            const std::vector<Tensor> in = driver::randomInputs(*graph, batch, 17);
            Tensor one = driver::runModel(model, in, 1)[0], two = driver::runModel(model, in, 2)[0];
            CHECK(std::memcmp(one.bytes(), two.bytes(), one.nbytes()) == 0);
            got.push_back(std::move(one));
          }
          outs.push_back(std::move(got));
        }
      }
      for (size_t m = 1; m < outs.size(); ++m) {
        for (size_t b = 0; b < outs[0].size(); ++b) {
          INFO("model " << m << " batch index " << b);
          CHECK(std::memcmp(outs[0][b].bytes(), outs[m][b].bytes(), outs[0][b].nbytes()) == 0);
        }
      }
    }
  }
}

// The agreement's 95% Wilson interval: 99.3% of 1000 rows spans 98.56-99.66% (so a 99.5% bar is
// inside it); of 10000 rows 99.12-99.45%; all rows agreeing still leaves room below 100%.
TEST_CASE("precision: the agreement's interval narrows with the rows measured", "[precision]") {
  auto [lo, hi] = debug::agreementInterval(0.993, 1000);
  CHECK(lo == Approx(0.98562).margin(1e-5));
  CHECK(hi == Approx(0.99661).margin(1e-5));
  std::tie(lo, hi) = debug::agreementInterval(0.993, 10000);
  CHECK(lo == Approx(0.99117).margin(1e-5));
  CHECK(hi == Approx(0.99445).margin(1e-5));
  std::tie(lo, hi) = debug::agreementInterval(1.0, 1000);
  CHECK(hi == 1.0);
  CHECK(lo == Approx(0.99617).margin(1e-5));
  std::tie(lo, hi) = debug::agreementInterval(0.0, 0);
  CHECK((lo == 0.0 && hi == 1.0));
}

TEST_CASE("precision: check --precision reports agreement and the budget, fp32 models say fp32", "[precision]") {
  auto g = mlp(nullptr);
  debug::CheckOptions o;
  o.compile.backend = codegen::Backend::Llvm;
  o.compile.cpp.precision = codegen::Precision::Int8Weights;
  o.compile.cpp.name = "m";
  o.compile.progress = false;
  std::vector<Tensor> inputs = driver::randomInputs(*g, 200, 5);
  debug::CheckReport r = debug::checkModel(*g, inputs, o);
  REQUIRE(r.accuracy.size() == 1);
  CHECK(r.accuracy[0].agreement.has_value());
  CHECK(r.accuracy[0].rows == 200);
  CHECK(r.accuracy[0].meanAbs > 0);
  CHECK(r.accuracy[0].meanAbs <= r.accuracy[0].budget);
  CHECK(r.layers.size() == 3);
  const std::string text = debug::formatCheckReport(r, o);
  CHECK_THAT(text, Contains("precision int8-weights: 2 of 3 linear/conv layers narrowed (kept fp32: head; bf16 for their size: fc1, fc2)") &&
                       Contains("argmax agreement") && Contains("of 200 rows (95% interval ") && Contains("budget"));
  o.compile.cpp.streamedWeights = 65536;
  CHECK_THAT(debug::formatCheckReport(debug::checkModel(*g, inputs, o), o), Contains("narrowed (kept fp32: head; bf16 for their size: fc1)\n"));
  // An impossible bar fails.
  o.minAgreement = 1.01;
  CHECK_FALSE(debug::checkModel(*g, inputs, o).pass);
  // Which outputs are discrete heads: by name (logits) unless --discrete says otherwise.
  CHECK(debug::isDiscreteHead(*g, "logits"));
  o.minAgreement = 0.995;
  o.discrete = std::vector<std::string>{};
  debug::CheckReport continuous = debug::checkModel(*g, inputs, o);
  CHECK_FALSE(continuous.accuracy[0].agreement.has_value());
  o.discrete = std::vector<std::string>{"action"};
  CHECK_THROWS_WITH(debug::checkModel(*g, inputs, o), Contains("--discrete: the model has no output 'action'") && Contains("'logits'"));
  o.discrete.reset();
  // An integer output (the greedy action the model computes) is judged by the share of equal rows.
  auto acting = mlp(nullptr, true);
  debug::CheckReport withAction = debug::checkModel(*acting, inputs, o);
  REQUIRE(withAction.accuracy.size() == 2);
  REQUIRE(withAction.accuracy[1].agreement.has_value());
  CHECK(*withAction.accuracy[1].agreement == Approx(*withAction.accuracy[0].agreement));
  CHECK(withAction.accuracy[1].rows == 200);
  o.perNode = true;
  CHECK_THROWS_WITH(debug::checkModel(*g, inputs, o), Contains("--per-node"));
  CHECK(compiled(*g, codegen::Backend::Llvm, codegen::Precision::Fp32, "fp32").precision() == "fp32");
}

// Under bf16 a conv whose window holds fewer than kMinBf16ConvWindow values (a first layer over a
// 3-channel image) keeps fp32 weights and the fp32 implementations; a layer --keep-fp32 names
// gets the fp32 implementations too (not only f32 weights: it ran on oneDNN's f32 conv, the
// one implementation left to a bf16 conv without its weights in bf16).
TEST_CASE("precision: bf16 keeps a few-channel first conv and the kept layers in fp32, implementations too", "[precision]") {
  using codegen::Precision;
  using codegen::WeightStorage;
  using Storages = std::vector<std::pair<std::string, WeightStorage>>;
  auto g = std::make_unique<Graph>("first_conv");
  Value* x = g->addInput("obs", {DType::F32, {Dim::batch(), 3, 10, 10}});
  auto weight = [&](const std::string& name, std::vector<int64_t> shape) {
    Tensor w(DType::F32, std::move(shape));
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::cos(0.37f * static_cast<float>(i)) * 0.05f;
    return g->addParam(name, std::move(w));
  };
  const ir::AttrMap pads = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  Value* c1 = g->addOp(Op::Relu, {g->addOp(Op::Conv, {x, weight("conv1.w", {32, 3, 3, 3})}, pads, "conv1")->output()}, {}, "act1")->output();
  Value* c2 = g->addOp(Op::Relu, {g->addOp(Op::Conv, {c1, weight("conv2.w", {32, 32, 3, 3})}, pads, "conv2")->output()}, {}, "act2")->output();
  Value* f = g->addOp(Op::Flatten, {c2}, {{"axis", int64_t{1}}}, "flat")->output();
  g->setOutputs({{"logits", g->addOp(Op::Linear, {f, weight("head.w", {4, 3200})}, {}, "head")->output()}});
  REQUIRE(codegen::kMinBf16ConvWindow > 27);
  REQUIRE(codegen::kMinBf16ConvWindow <= 288);
  // (Without oneDNN in the compiler the second conv runs generated and keeps f32 for its size.)
  // Without AMX (kDot) the second conv computes as bf16-weights: f32 for its size.
  CHECK(narrowedStorages(*g, Precision::Bf16, {}, kAmx, true) ==
        (codegen::onednnBuiltIn() ? Storages{{"conv2", WeightStorage::Bf16Dot}} : Storages{}));
  CHECK(narrowedStorages(*g, Precision::Bf16, {}, kDot, true).empty());
  CHECK(narrowedStorages(*g, Precision::Bf16, {"conv2"}, kAmx, true).empty());
  // bf16-weights narrows by size (kMinReducedWeights): neither conv, the first or the second.
  CHECK(narrowedStorages(*g, Precision::Bf16Weights, {}, kAmx, true).empty());

  auto optimized = g->clone();  // the kernel program points into it
  passes::runPipeline(*optimized);
  const codegen::PlannedProgram planned = codegen::planGraph(*optimized);
  auto kernelOf = [&](const std::string& anchor) -> const codegen::Kernel& {
    for (const codegen::Kernel& k : planned.program.kernels) {
      if (k.anchor->name() == anchor) return k;
    }
    FAIL("no kernel anchored at " << anchor);
    return planned.program.kernels.front();
  };
  const codegen::KernelProgram& p = planned.program;
  auto candidates = [&](const std::string& anchor, Precision precision, std::vector<std::string> keep = {},
                        codegen::TargetTraits target = kAmx) {
    return codegen::implCandidates(p, kernelOf(anchor), true, std::nullopt, precision, keep, target);
  };
  const auto fp32First = candidates("conv1", Precision::Fp32), fp32Second = candidates("conv2", Precision::Fp32);
  CHECK(std::find(fp32First.begin(), fp32First.end(), "gemm8x32") != fp32First.end());
  CHECK(candidates("conv1", Precision::Bf16) == fp32First);
  if (codegen::onednnBuiltIn()) CHECK(candidates("conv2", Precision::Bf16) != fp32Second);  // bf16 products: no gemm8x32
  CHECK(candidates("conv2", Precision::Bf16, {}, kDot) == fp32Second);  // as bf16-weights: f32 for its size
  CHECK(candidates("conv2", Precision::Bf16, {"conv2"}) == fp32Second);
  const codegen::ImplChoice kept = codegen::heuristicChoice(p, {1, 64}, true, std::nullopt, kAmx, Precision::Bf16, {"conv2"});
  const codegen::ImplChoice fp32 = codegen::heuristicChoice(p, {1, 64}, true, std::nullopt, kAmx, Precision::Fp32);
  CHECK(kept.at(kernelOf("conv1").name) == fp32.at(kernelOf("conv1").name));
  CHECK(kept.at(kernelOf("conv2").name) == fp32.at(kernelOf("conv2").name));
}

TEST_CASE("precision: bf16 multiplies in bf16 on a target with AVX512_BF16, else widens bf16 weights", "[precision]") {
  using codegen::WeightStorage;
  using Storages = std::vector<std::pair<std::string, WeightStorage>>;
  auto g = mlp(nullptr);
  // The schedule's decision: bf16 pairs along k only for --precision bf16 on such a target.
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16, {}, kDot) == Storages{{"fc1", WeightStorage::Bf16Dot}, {"fc2", WeightStorage::Bf16Dot}});
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16, {}, {}) == Storages{{"fc1", WeightStorage::Bf16}, {"fc2", WeightStorage::Bf16}});
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16Weights, {}, kDot) == Storages{{"fc1", WeightStorage::Bf16}, {"fc2", WeightStorage::Bf16}});
  // A conv multiplies in bf16 only on oneDNN's AMX kernels (oneDNN's bf16 convolutions; a
  // generated implementation beside them reads the same bf16 pairs): with bf16-weights, without
  // AVX512_BF16, oneDNN's layers keep f32; without AMX, or without oneDNN, bf16 convs compute as
  // bf16-weights (widened bf16 weights).
  const std::string onednn = "onednn_postops";
  CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {}, kDot) == Storages{{"conv", WeightStorage::Bf16}});
  CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {}, kAmx) == Storages{{"conv", WeightStorage::Bf16}});  // no oneDNN
  CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {}, kDot, true) == Storages{{"conv", WeightStorage::Bf16}});
  CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {}, kAmx, true) ==
        Storages{{"conv", codegen::onednnBuiltIn() ? WeightStorage::Bf16Dot : WeightStorage::Bf16}});
  if (codegen::onednnBuiltIn()) {
    CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {}, {}, true, onednn).empty());
    CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {}, kDot, true, onednn).empty());
    CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16Weights, {}, kAmx, true, onednn).empty());
  }
  CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16, {"conv"}, kAmx, true).empty());
  // By default the generated tiles run this conv (64 channels), on widened bf16 weights.
  CHECK(narrowedStorages(*cnn(nullptr), codegen::Precision::Bf16Weights, {}, kDot, true) == Storages{{"conv", WeightStorage::Bf16}});
  {
    // Rows longer than the microkernel's stack buffer (K > 2 * kMaxBf16DotPairs) keep widened weights.
    auto wide = std::make_unique<Graph>("wide_rows");
    const int64_t K = 2 * codegen::kMaxBf16DotPairs + 2;
    Value* x = wide->addInput("obs", {DType::F32, {Dim::batch(), K}});
    Tensor w(DType::F32, {8, K}), w2(DType::F32, {2, 8});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.01f * static_cast<float>(i % 13);
    Value* h = wide->addOp(Op::Relu, {wide->addOp(Op::Linear, {x, wide->addParam("fc.w", std::move(w))}, {}, "fc")->output()}, {}, "act")->output();
    wide->setOutputs({{"out", wide->addOp(Op::Linear, {h, wide->addParam("head.w", std::move(w2))}, {}, "head")->output()}});
    CHECK(narrowedStorages(*wide, codegen::Precision::Bf16, {}, kDot) == Storages{{"fc", WeightStorage::Bf16}});
  }
  {
    // A bf16-dot layer whose panels (2048 x 16 floats each) do not fit the widening buffer: from
    // 16 rows it widens its pairs inside each tile (the bf16-weights microkernels).
    auto big = std::make_unique<Graph>("big_rows");
    Value* x = big->addInput("obs", {DType::F32, {Dim::batch(), 2048}});
    Tensor w(DType::F32, {32, 2048}), w2(DType::F32, {2, 32});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.01f * static_cast<float>(i % 11);
    Value* h = big->addOp(Op::Relu, {big->addOp(Op::Linear, {x, big->addParam("fc.w", std::move(w))}, {}, "fc")->output()}, {}, "act")->output();
    big->setOutputs({{"out", big->addOp(Op::Linear, {h, big->addParam("head.w", std::move(w2))}, {}, "head")->output()}});
    CHECK(narrowedStorages(*big, codegen::Precision::Bf16, {}, kDot) == Storages{{"fc", WeightStorage::Bf16Dot}});
    passes::runPipeline(*big);
    codegen::CppOptions o;
    o.precision = codegen::Precision::Bf16;
    o.externKernels = false;
    o.target = "x86-64-v4-bf16";
    const std::string source = codegen::generateCpp(*big, o).source;
    CHECK_THAT(source, Contains("the bf16 pairs widened inside each tile") && Contains("reinterpret_cast<const pc::bf16x2*>(w)"));
    CHECK(source.find("pc::widenPanels(") == std::string::npos);
  }
  // Both backends emit vdpbf16ps for the target x86-64-v4-bf16 (any x86 host can compile it) in
  // the MLP's layers; a conv only for x86-64-v4-amx, beside oneDNN (here its generated tiles,
  // forced): for x86-64-v4-bf16 the CNN's conv computes as bf16-weights.
  for (int variant : {0, 1, 2}) {
    const bool conv = variant > 0, amx = variant == 2;
    const bool dot = !conv || (amx && codegen::onednnBuiltIn());
    auto model = conv ? cnn(nullptr) : mlp(nullptr);
    driver::CompileRequest r;
    r.cpp.precision = codegen::Precision::Bf16;
    r.cpp.externKernels = amx;
    r.cpp.forceImpl = amx ? "gemm4x32" : "";
    r.cpp.target = amx ? "x86-64-v4-amx" : "x86-64-v4-bf16";
    r.cpp.name = "m";
    r.progress = false;
    r.backend = codegen::Backend::Llvm;
    r.emit = "asm";
    r.output = (scratch() / fmt::format("{}_{}_bf16dot.s", model->name(), variant)).string();
    driver::compileGraph(*model, r);
    std::ifstream asmFile(r.output);
    const std::string text((std::istreambuf_iterator<char>(asmFile)), std::istreambuf_iterator<char>());
    INFO("variant " << variant);
    CHECK((text.find("vdpbf16ps") != std::string::npos) == dot);
    auto g2 = model->clone();
    passes::runPipeline(*g2);
    codegen::CppOptions o = r.cpp;
    const codegen::GeneratedCpp cpp = codegen::generateCpp(*g2, o);
    CHECK((cpp.source.find("const uint32_t* PC_RESTRICT wp") != std::string::npos) == dot);
    // From 16 rows the MLP's layers widen their bf16 pairs once and multiply with f32 FMAs
    // (KernelSchedule::widenRows); the CNN's implicit-GEMM conv keeps vdpbf16ps at every batch.
    CHECK((cpp.source.find("bf16-dot panels widened to f32") != std::string::npos) == !conv);
    if (amx && codegen::onednnBuiltIn()) {
      codegen::CppOptions withOnednn = o;
      withOnednn.forceImpl.clear();
      CHECK_THAT(codegen::generateCpp(*g2, withOnednn).source, Contains("true /* bf16 */"));
      withOnednn.target = "x86-64-v4-bf16";  // no AMX: the generated tiles on widened bf16 weights
      CHECK(codegen::generateCpp(*g2, withOnednn).source.find("true /* bf16 */") == std::string::npos);
    }
    r.backend = codegen::Backend::Cpp;
    r.emit = "so";
    r.output = (scratch() / fmt::format("{}_{}_bf16dot_cpp.so", model->name(), variant)).string();
    CHECK_NOTHROW(driver::compileGraph(*model, r));  // -mavx512bf16 (-mamx-bf16) builds it
  }
}

// The LLVM IR of `graph` under --precision bf16 for x86-64-v4-bf16 and this CPU (any host compiles it).
static std::string bf16LlvmIr(const Graph& graph, const std::string& cpu) {
  driver::CompileRequest r;
  r.cpp.precision = codegen::Precision::Bf16;
  r.cpp.externKernels = false;
  r.cpp.target = "x86-64-v4-bf16";
  r.cpp.name = "m";
  r.cpu = cpu;
  r.progress = false;
  r.backend = codegen::Backend::Llvm;
  r.emit = "llvm";
  r.output = (scratch() / fmt::format("{}_bf16_{}.ll", graph.name(), cpu)).string();
  driver::compileGraph(graph, r);
  std::ifstream file(r.output);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// Where vdpbf16ps issues as often as the FMA (TargetTraits::fastBf16Dot: AMD Zen 4 on), twice its
// products: a bf16 linear layer multiplies in bf16 at every batch; elsewhere, from
// KernelSchedule::widenRows rows, it widens its pairs and multiplies with f32 FMAs.
TEST_CASE("precision: bf16 layers keep vdpbf16ps at every batch where it runs at the FMA's rate", "[precision]") {
  auto model = mlp(nullptr);
  auto ir = [&](const std::string& cpu) { return bf16LlvmIr(*model, cpu); };
  const std::string zen4 = ir("znver4"), cooper = ir("cooperlake");
  // Both multiply in bf16; only Cooper Lake's layers test the rows against widenRows.
  CHECK_THAT(zen4, Contains("dpbf16ps"));
  CHECK_THAT(cooper, Contains("dpbf16ps"));
  CHECK(zen4.find("%widened") == std::string::npos);
  CHECK_THAT(cooper, Contains("%widened"));
}

// A residual-style conv too small to narrow (IMPALA's): winograd_f23 by default at every precision.
std::unique_ptr<Graph> smallConv() {
  auto g = std::make_unique<Graph>("small_conv");
  Value* x = g->addInput("obs", {DType::F32, {Dim::batch(), 16, 16, 16}});
  Tensor w(DType::F32, {16, 16, 3, 3}), b(DType::F32, {16});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = std::cos(0.37f * static_cast<float>(i)) * 0.1f;
  for (int64_t i = 0; i < 16; ++i) b.data<float>()[i] = 0.03f * static_cast<float>(i % 7) - 0.1f;
  Value* c = g->addOp(Op::Conv, {x, g->addParam("conv.w", std::move(w)), g->addParam("conv.b", std::move(b))},
                      {{"pads", std::vector<int64_t>{1, 1, 1, 1}}}, "conv")->output();
  g->setOutputs({{"features", g->addOp(Op::Relu, {c}, {}, "act")->output()}});
  return g;
}

// Where vdpbf16ps runs at the FMA's rate, --precision bf16 runs a Winograd conv's GEMMs in bf16
// (WinogradTiles::bf16: U rounded at compile time, V's panels rewritten as channel pairs); its
// weights count as bf16-dot. Elsewhere, and under the other precisions, the GEMMs stay f32.
TEST_CASE("precision: Winograd convs multiply in bf16 where vdpbf16ps runs at the FMA's rate", "[precision]") {
  using codegen::WeightStorage;
  using Storages = std::vector<std::pair<std::string, WeightStorage>>;
  auto g = smallConv();
  const codegen::TargetTraits fast{.bf16Dot = true, .fastBf16Dot = true};
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16, {}, fast) == Storages{{"conv", WeightStorage::Bf16Dot}});
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16, {}, kDot).empty());
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16Weights, {}, fast).empty());
  CHECK(narrowedStorages(*g, codegen::Precision::Bf16, {"conv"}, fast).empty());
  // What the LLVM backend emits for Zen 4 and for Cooper Lake (any host compiles both).
  auto ir = [&](const std::string& cpu) { return bf16LlvmIr(*g, cpu); };
  const std::string zen4 = ir("znver4"), cooper = ir("cooperlake");
  CHECK_THAT(zen4, Contains("%V = alloca") && Contains("dpbf16ps") && Contains("%pairs"));  // (Winograd's transformed inputs)
  CHECK_THAT(cooper, Contains("%V = alloca"));
  CHECK(cooper.find("dpbf16ps") == std::string::npos);
  if (!codegen::cppTargetTraits("native").fastBf16Dot) {
    WARN("this host's vdpbf16ps is not known to run at the FMA's rate: the bf16 Winograd GEMMs were compiled, not run");
    return;
  }
  // Both backends, natively: the same bits at 1, 2 and 3 threads and from each other; near the
  // f32 model (U and V rounded to bf16: well under a percent of the outputs' range), not equal to it.
  runtime::Model cpp = compiled(*g, codegen::Backend::Cpp, codegen::Precision::Bf16, "wino_bf16");
  runtime::Model llvm = compiled(*g, codegen::Backend::Llvm, codegen::Precision::Bf16, "wino_bf16");
  runtime::Model f32 = compiled(*g, codegen::Backend::Llvm, codegen::Precision::Fp32, "wino_f32");
  for (int64_t batch : {1, 3, 16}) {
    const std::vector<Tensor> inputs = driver::randomInputs(*g, batch, 11);
    const std::vector<Tensor> want = interpret(*g, inputs);
    std::vector<Tensor> one = driver::runModel(cpp, inputs, 1), two = driver::runModel(cpp, inputs, 2);
    std::vector<Tensor> three = driver::runModel(cpp, inputs, 3), viaLlvm = driver::runModel(llvm, inputs, 2);
    std::vector<Tensor> exact = driver::runModel(f32, inputs, 1);
    const float* ref = want[0].data<float>();
    float range = 0;
    for (int64_t i = 0; i < want[0].numel(); ++i) range = std::max(range, std::fabs(ref[i]));
    const driver::TensorCheck c = driver::compareTensors("features", one[0], want[0], 0, 0.01 * range);
    INFO("batch " << batch << ": max abs " << c.maxAbs << " of a range " << range);
    CHECK(c.pass);
    CHECK(std::memcmp(one[0].bytes(), exact[0].bytes(), one[0].nbytes()) != 0);
    CHECK(std::memcmp(one[0].bytes(), two[0].bytes(), one[0].nbytes()) == 0);
    CHECK(std::memcmp(one[0].bytes(), three[0].bytes(), one[0].nbytes()) == 0);
    INFO("cpp against llvm: max abs " << driver::compareTensors("features", one[0], viaLlvm[0], 0, 0).maxAbs);
    CHECK(std::memcmp(one[0].bytes(), viaLlvm[0].bytes(), one[0].nbytes()) == 0);
  }
}

TEST_CASE("precision: bf16 products (vdpbf16ps) in both backends match the rounded model", "[precision]") {
  if (!__builtin_cpu_supports("avx512bf16")) {
    WARN("this host has no AVX512_BF16: the bf16 products were compiled (the test above), not run");
    return;
  }
  const codegen::Precision precision = codegen::Precision::Bf16;
  // The MLP, the CNN on the generated microkernels, the CNN's conv on oneDNN (its bf16 convolution).
  // The MLP's native build widens its pairs at batch 64, except on a host whose vdpbf16ps runs at
  // the FMA's rate (TargetTraits::fastBf16Dot), where every batch multiplies in bf16.
  for (int variant : {0, 1, 2}) {
    const bool conv = variant > 0, onednn = variant == 2;
    // Every narrowed layer reads the model's input (fc2 kept in f32), so with bf16 inputs the
    // rounded weights are the only rounding: the reference is the interpreter on those weights.
    const std::vector<std::string> keep = conv ? std::vector<std::string>{} : std::vector<std::string>{"fc2"};
    auto exact = conv ? cnn(nullptr) : mlp(nullptr);
    const std::vector<std::string> narrowed = narrowedLayers(*exact, precision, keep);
    REQUIRE(narrowed == (conv ? std::vector<std::string>{"conv"} : std::vector<std::string>{"fc1"}));
    // oneDNN rounds the weights of its bf16 conv itself, value by value; without oneDNN built in
    // the "oneDNN" variant runs the generated tiles on the packed panels.
    const bool onednnRounds = onednn && codegen::onednnBuiltIn();
    auto rounded = conv ? cnn(rounding(precision, narrowed, !onednnRounds)) : mlp(rounding(precision, narrowed));
    const std::string tag = onednn ? "bf16onednn" : "bf16dot";
    // The CNN's conv multiplies in bf16 only for a target with AMX-BF16 and oneDNN allowed (code
    // for x86-64-v4-amx runs on any AVX512_BF16 host: the generated code has no AMX instructions,
    // oneDNN picks its kernels by the CPU it runs on); its generated tiles forced beside oneDNN.
    const std::string target = conv ? "x86-64-v4-amx" : "native", force = variant == 1 ? "gemm4x32" : "";
    runtime::Model cpp = compiled(*exact, codegen::Backend::Cpp, precision, tag, keep, conv, force, codegen::kMinReducedWeights, target);
    runtime::Model llvm = compiled(*exact, codegen::Backend::Llvm, precision, tag, keep, conv, force, codegen::kMinReducedWeights, target);
    for (int64_t batch : {1, 5, 8, 64}) {
      std::vector<Tensor> inputs = bf16Inputs(*exact, batch);
      std::vector<Tensor> want = interpret(*rounded, inputs), original = interpret(*exact, inputs);
      std::vector<Tensor> one = driver::runModel(cpp, inputs, 1), two = driver::runModel(cpp, inputs, 2);
      std::vector<Tensor> three = driver::runModel(cpp, inputs, 3), viaLlvm = driver::runModel(llvm, inputs, 2);
      driver::TensorCheck c = driver::compareTensors("logits", one[0], want[0], 1e-5, 1e-5);
      driver::TensorCheck off = driver::compareTensors("logits", one[0], original[0], 1e-5, 1e-5);
      INFO((conv ? "cnn" : "mlp") << (onednn ? " on oneDNN" : "") << " batch " << batch << ": max abs " << c.maxAbs
                                  << " (against fp32 " << off.maxAbs << ")");
      CHECK(c.pass);
      CHECK(off.maxAbs > c.maxAbs);
      CHECK(std::memcmp(one[0].bytes(), two[0].bytes(), one[0].nbytes()) == 0);
      CHECK(std::memcmp(one[0].bytes(), three[0].bytes(), one[0].nbytes()) == 0);
      // One order of products and sums in both printers: the same bits.
      CHECK(std::memcmp(one[0].bytes(), viaLlvm[0].bytes(), one[0].nbytes()) == 0);
    }
  }
}
