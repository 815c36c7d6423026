// The C++ backend: every fixture compiled to a .so, loaded with dlopen and compared with the
// reference interpreter; the descriptor; batch 0; compiler failures.
#include <dlfcn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/driver/model_io.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/policyc_model.h"
#include "support/scratch_dir.h"
#include "support/fixtures.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {


// A temporary directory for this test run, removed at exit.
const fs::path& scratchDir() { return testing::scratchDir("policyc-cpp-test"); }

codegen::GeneratedCpp generate(const std::string& model, const codegen::CppOptions& options = {}) {
  auto graph = driver::loadModel(testing::sourcePath("examples/models/" + model + ".onnx"));
  passes::runPipeline(*graph);
  return codegen::generateCpp(*graph, options);
}

// Compiled once per test run and reused by every test case.
const policyc_model* compiled(const std::string& model) {
  static std::map<std::string, const policyc_model*> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  fs::path so = scratchDir() / (model + ".so");
  codegen::buildSharedObject(generate(model), so.string());
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  INFO(dlerror());
  REQUIRE(handle != nullptr);
  auto fn = reinterpret_cast<policyc_model_descriptor_fn>(dlsym(handle, "policyc_model_descriptor"));
  REQUIRE(fn != nullptr);
  return cache[model] = fn();
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

std::unique_ptr<void, AlignedFree> workspace(const policyc_model* m, int64_t batch) {
  size_t bytes = (m->workspace_bytes(batch) + 63) / 64 * 64;
  return std::unique_ptr<void, AlignedFree>(bytes ? std::aligned_alloc(64, bytes) : nullptr);
}

ir::DType dtypeOf(int32_t abi) {
  static const ir::DType table[] = {ir::DType::F32, ir::DType::F64, ir::DType::I32, ir::DType::I64,
                                    ir::DType::U8,  ir::DType::I8,  ir::DType::Bool};
  return table[abi];
}

// Runs `m` with `threads` threads; the outputs are shaped as `like`.
std::vector<ir::Tensor> runCompiled(const policyc_model* m, const std::vector<ir::Tensor>& inputs,
                                    const std::vector<ir::Tensor>& like, int64_t batch, int threads) {
  std::vector<const void*> in;
  for (const ir::Tensor& t : inputs) in.push_back(t.bytes());
  std::vector<ir::Tensor> actual;
  std::vector<void*> out;
  for (const ir::Tensor& e : like) actual.emplace_back(e.dtype(), e.shape());
  for (ir::Tensor& a : actual) out.push_back(a.bytes());
  auto ws = workspace(m, batch);
  REQUIRE(m->run(in.data(), out.data(), batch, ws.get(), threads) == POLICYC_OK);
  return actual;
}

// Runs `m` with 1, 2 and 3 threads (in that order, on one loaded model) and the interpreter on
// `graph` at `batch`: every output within 1e-4 (integers exactly), and bitwise the same for
// every thread count.
void compareWithInterpreter(const policyc_model* m, const ir::Graph& graph, int64_t batch, const std::string& what) {
  std::vector<ir::Tensor> inputs = driver::randomInputs(graph, batch, 7 + static_cast<uint64_t>(batch));
  std::vector<ir::Tensor> expected = ir::interpret(graph, inputs);
  REQUIRE(static_cast<size_t>(m->num_outputs) == expected.size());
  std::vector<ir::Tensor> single;
  for (int threads : {1, 2, 3}) {
    std::vector<ir::Tensor> actual = runCompiled(m, inputs, expected, batch, threads);
    for (size_t o = 0; o < expected.size(); ++o) {
      INFO(what << " batch " << batch << " threads " << threads << " output " << m->outputs[o].name);
      REQUIRE(dtypeOf(m->outputs[o].dtype) == expected[o].dtype());
      int64_t bad = 0;
      double worst = 0;
      for (int64_t i = 0; i < expected[o].numel(); ++i) {
        double e = expected[o].getAsDouble(i), a = actual[o].getAsDouble(i);
        bool ok = ir::isFloat(expected[o].dtype())
                      ? (std::isnan(e) ? std::isnan(a) : std::abs(a - e) <= 1e-4 + 1e-4 * std::abs(e))
                      : a == e;  // integers (argmax) exactly
        if (!ok) ++bad;
        if (!std::isnan(e)) worst = std::max(worst, std::abs(a - e));
      }
      INFO("largest difference " << worst);
      CHECK(bad == 0);
      if (threads > 1) {
        INFO("compared bitwise with the 1-thread run");
        CHECK((actual[o].nbytes() == 0 || std::memcmp(actual[o].bytes(), single[o].bytes(), actual[o].nbytes()) == 0));
      }
    }
    if (threads == 1) single = std::move(actual);
  }
}

void checkParity(const std::string& model, int64_t batch) {
  auto graph = driver::loadModel(testing::sourcePath("examples/models/" + model + ".onnx"));
  compareWithInterpreter(compiled(model), *graph, batch, model);
}

}  // namespace

// One test case per fixture, so that CTest runs them side by side.
#define POLICYC_FIXTURE_PARITY(model)                                                                                 \
  TEST_CASE("cpp backend: " model " matches the interpreter at batch 1, 3 and 64 with 1, 2 and 3 threads", "[codegen][cpp]") { \
    for (int64_t batch : {1, 3, 64}) {                                                                                \
      DYNAMIC_SECTION(model << " batch " << batch) { checkParity(model, batch); }                                    \
    }                                                                                                                 \
  }
POLICYC_FIXTURE_PARITY("ppo_mlp")
POLICYC_FIXTURE_PARITY("atari_cnn")
POLICYC_FIXTURE_PARITY("impala_cnn")
POLICYC_FIXTURE_PARITY("sac_actor")
POLICYC_FIXTURE_PARITY("multi_input")
POLICYC_FIXTURE_PARITY("uint8_convbn")

TEST_CASE("cpp backend: the descriptor describes the model", "[codegen][cpp]") {
  const policyc_model* m = compiled("ppo_mlp");
  CHECK(m->abi_version == POLICYC_ABI_VERSION);
  CHECK(m->struct_size == sizeof(policyc_model));
  CHECK(std::string(m->name) == "ppo_mlp");
  CHECK(std::string(m->target) == "native");
  REQUIRE(m->num_inputs == 1);
  CHECK(std::string(m->inputs[0].name) == "obs");
  CHECK(m->inputs[0].dtype == POLICYC_F32);
  REQUIRE(m->inputs[0].rank == 2);
  CHECK(m->inputs[0].shape[0] == -1);
  CHECK(m->inputs[0].shape[1] == 17);
  REQUIRE(m->num_outputs == 2);
  CHECK(std::string(m->outputs[0].name) == "action_dist_inputs");
  CHECK(m->outputs[0].shape[1] == 12);
  CHECK(std::string(m->outputs[1].name) == "vf");
  CHECK(m->workspace_bytes(2) - m->workspace_bytes(1) == m->workspace_bytes(3) - m->workspace_bytes(2));

  const policyc_model* u = compiled("uint8_convbn");
  CHECK(u->inputs[0].dtype == POLICYC_U8);
  REQUIRE(u->inputs[0].rank == 4);
  CHECK(u->inputs[0].shape[0] == -1);
  CHECK(u->outputs[1].dtype == POLICYC_I64);
  CHECK(u->outputs[1].rank == 1);
}

TEST_CASE("cpp backend: batch 0 touches nothing, bad arguments are refused", "[codegen][cpp]") {
  const policyc_model* m = compiled("ppo_mlp");
  const void* in[] = {nullptr};
  void* out[] = {nullptr, nullptr};
  CHECK(m->run(in, out, 0, nullptr, 1) == POLICYC_OK);
  CHECK(m->run(in, out, -1, nullptr, 1) == POLICYC_ERROR_ARGUMENT);
  std::vector<float> obs(17), a(12), v(1);
  const void* in1[] = {obs.data()};
  void* out1[] = {a.data(), v.data()};
  CHECK(m->run(in1, out1, 1, nullptr, 1) == POLICYC_ERROR_ARGUMENT);
  CHECK(m->run(in1, out1, 1, nullptr, 0) == POLICYC_ERROR_ARGUMENT);
  auto ws = workspace(m, 2);
  CHECK(m->run(in1, out1, 1, static_cast<char*>(ws.get()) + 4, 1) == POLICYC_ERROR_WORKSPACE);
  CHECK(m->run(in1, out1, 1, ws.get(), 4) == POLICYC_OK);
  CHECK(m->run(in1, out1, 1, ws.get(), 1000) == POLICYC_OK);  // more threads than work: capped
}

TEST_CASE("cpp backend: the generated source is traceable and the header is C", "[codegen][cpp]") {
  codegen::GeneratedCpp g = generate("ppo_mlp");
  CHECK(g.name == "ppo_mlp");
  CHECK(g.source.find("PC_KERNEL void fused_linear_bias_tanh_0(") != std::string::npos);
  CHECK(g.source.find("// %\"/Tanh_1_output_0\" (tanh) from \"/Tanh_1\"") != std::string::npos);
  CHECK(g.source.find(".incbin") != std::string::npos);
  CHECK(g.weights.size() % 64 == 0);
  CHECK(g.header.find("int ppo_mlp_run(const float* obs, float* action_dist_inputs, float* vf, int64_t batch);") !=
        std::string::npos);
  CHECK(g.header.find("#define PPO_MLP_OBS_SIZE 17") != std::string::npos);
  // The header compiles as C.
  fs::path h = scratchDir() / "ppo_mlp.h";
  fs::path c = scratchDir() / "use_header.c";
  {
    std::ofstream(h) << g.header;
    std::ofstream(c) << "#include \"ppo_mlp.h\"\nint f(void) { return PPO_MLP_OBS_SIZE + ppo_mlp_descriptor()->num_inputs; }\n";
  }
  std::string cmd = "cc -std=c99 -Wall -Werror -c -o /dev/null '" + c.string() + "' > /dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
}

TEST_CASE("cpp backend: compiler failures and unknown targets are clear errors", "[codegen][cpp]") {
  codegen::CppOptions bad;
  bad.injectLine = "this line is not C++;";
  codegen::GeneratedCpp g = generate("ppo_mlp", bad);
  fs::path so = scratchDir() / "broken.so";
  codegen::BuildOptions options;
  options.workDir = (scratchDir() / "broken").string();  // kept after a failure; removed with the scratch dir
  try {
    codegen::buildSharedObject(g, so.string(), options);
    FAIL("the build should have failed");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("build.log") != std::string::npos);
    CHECK(what.find("output_code.cpp") != std::string::npos);
    CHECK(what.find("error") != std::string::npos);
    // The compiler's first error points at the generated line.
    size_t at = g.source.find(bad.injectLine);
    REQUIRE(at != std::string::npos);
    long line = 1 + std::count(g.source.begin(), g.source.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    CHECK(what.find(fmt::format("output_code.cpp:{}:", line)) != std::string::npos);
    CHECK(fs::exists(fs::path(options.workDir) / "build.log"));
  }
  CHECK_FALSE(fs::exists(so));

  codegen::CppOptions target;
  target.target = "pentium3";
  CHECK_THROWS_WITH(generate("ppo_mlp", target),
                    Catch::Contains("unknown target 'pentium3'") && Catch::Contains("x86-64-v3") && Catch::Contains("generic"));
}

TEST_CASE("cpp backend: policyc compile writes the .so and the header", "[codegen][cpp][cli]") {
  fs::path so = scratchDir() / "cli_ppo.so";
  fs::path h = scratchDir() / "cli_ppo.h";
  fs::path log = scratchDir() / "cli.out";
  std::string cmd = std::string(POLICYC_CLI) + " compile '" + testing::sourcePath("examples/models/ppo_mlp.onnx") + "' -o '" +
                    so.string() + "' --header '" + h.string() + "' --backend cpp --target x86-64-v3 > '" + log.string() + "' 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(fs::exists(so));
  std::ifstream f(h);
  std::string header((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(header.find("int cli_ppo_run(") != std::string::npos);
  std::string bad = std::string(POLICYC_CLI) + " compile '" + testing::sourcePath("examples/models/ppo_mlp.onnx") + "' -o '" +
                    (scratchDir() / "x.so").string() + "' --backend cpp --target foo > '" + log.string() + "' 2>&1";
  CHECK(std::system(bad.c_str()) != 0);
  std::ifstream l(log);
  std::string out((std::istreambuf_iterator<char>(l)), std::istreambuf_iterator<char>());
  CHECK(out.find("valid targets: native, x86-64-v3, x86-64-v4, x86-64-v4-bf16, x86-64-v4-amx, generic") != std::string::npos);
}

TEST_CASE("cpp backend: a failing C++ compiler under policyc compile is one error line, exit 2, no .so", "[codegen][cpp][cli][bad-input]") {
  fs::path so = scratchDir() / "never.so";
  fs::path err = scratchDir() / "never.err";
  fs::path out = scratchDir() / "never.out";
  fs::path debug = scratchDir() / "never_debug";
  // A "compiler" that reports an error on a generated line, as a real one would.
  fs::path fake = scratchDir() / "fake_cxx.sh";
  std::ofstream(fake) << "#!/bin/sh\necho \"output_code.cpp:42:7: error: something the backend emitted is wrong\" >&2\nexit 1\n";
  fs::permissions(fake, fs::perms::owner_all);
  std::string cmd = "POLICYC_CXX='" + fake.string() + "' " + std::string(POLICYC_CLI) + " compile '" +
                    testing::sourcePath("examples/models/ppo_mlp.onnx") + "' --backend cpp -o '" + so.string() + "' --debug-dir '" +
                    debug.string() + "' > '" + out.string() + "' 2> '" + err.string() + "'";
  int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  std::ifstream e(err);
  std::string text((std::istreambuf_iterator<char>(e)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(text.rfind("policyc: error: the C++ compiler failed", 0) == 0);
  CHECK(text.find("output_code.cpp:42:7: error:") != std::string::npos);
  CHECK(text.find((debug / "build.log").string()) != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(fs::file_size(out) == 0);
  CHECK_FALSE(fs::exists(so));
  CHECK(fs::exists(debug / "build.log"));
  CHECK(fs::exists(debug / "output_code.cpp"));
}

// A model's C++ compiles without a warning, for this host and for AVX2: its build log is read by
// people debugging the model, and a warning there (GCC once warned of undefined behaviour in a
// microkernel's remainder loop for every fixture, and of 16-lane vectors' ABI without AVX-512)
// hides the ones that matter. uint8_convbn's average pool once failed to compile for AVX2.
TEST_CASE("cpp backend: the fixtures' generated C++ compiles without a warning", "[codegen][cpp][cli]") {
  const std::vector<std::pair<std::string, std::string>> builds = {
      {"ppo_mlp", "native"}, {"atari_cnn", "native"}, {"multi_input", "native"}, {"ppo_mlp", "x86-64-v3"}, {"uint8_convbn", "x86-64-v3"}};
  for (const auto& [model, target] : builds) {
    const fs::path debug = scratchDir() / (model + "_" + target + "_clean_build_debug");
    fs::remove_all(debug);
    const std::string cmd = "POLICYC_CACHE_DIR='" + (scratchDir() / "clean_build_cache").string() + "' " + std::string(POLICYC_CLI) +
                            " compile '" + testing::sourcePath("examples/models/" + model + ".onnx") + "' --backend cpp --target " + target +
                            " -o '" + (scratchDir() / (model + "_" + target + "_clean_build.so")).string() + "' --debug-dir '" +
                            debug.string() + "' > /dev/null 2>&1";
    CHECK(std::system(cmd.c_str()) == 0);
    std::ifstream log(debug / "build.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    INFO(model << " for " << target << ": " << text);
    CHECK(!text.empty());  // the compiler's command line at least
    CHECK(text.find("warning:") == std::string::npos);
  }
}

TEST_CASE("cpp backend: one .so runs batch 4096 like the interpreter, with 1 and 2 threads", "[codegen][cpp]") {
  checkParity("ppo_mlp", 4096);
}

namespace {

using ir::Op;
using ir::Value;

ir::Tensor f32Tensor(std::vector<int64_t> shape, uint64_t seed) {
  ir::Tensor t(ir::DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    t.setAsDouble(i, static_cast<double>(static_cast<int64_t>(seed >> 40) % 2000) / 1000.0 - 1.0);
  }
  return t;
}

// One graph with every elementwise op and every template variant the fixtures do not cover.
std::unique_ptr<ir::Graph> kitchenSink() {
  auto g = std::make_unique<ir::Graph>("kitchen_sink");
  ir::Graph& G = *g;
  Value* x = G.addInput("x", {ir::DType::F32, {ir::Dim::batch(), 3, 7, 7}});
  Value* v = G.addInput("v", {ir::DType::F32, {ir::Dim::batch(), 8}});
  int params = 0;
  auto param = [&](std::vector<int64_t> shape) { return G.addParam(fmt::format("p{}", params), f32Tensor(shape, ++params)); };
  auto op = [&](Op o, std::vector<Value*> in, ir::AttrMap attrs = {}) {
    return G.addOp(o, std::move(in), std::move(attrs), G.uniqueName(std::string(ir::opInfo(o).name)))->output();
  };
  std::vector<std::pair<std::string, Value*>> outs;
  auto out = [&](Value* val) { outs.emplace_back(val->name(), val); };
  Value* absv = op(Op::Abs, {v});
  Value* pos = op(Op::Add, {absv, G.addParam("one", ir::Tensor::fromVector(ir::DType::F32, {}, std::vector<float>{1.0f}))});
  for (Op o : {Op::Relu, Op::Tanh, Op::Sigmoid, Op::Exp, Op::Erf, Op::Gelu, Op::Silu, Op::HardSwish, Op::Softplus, Op::Neg})
    out(op(o, {v}));
  out(op(Op::Log, {pos}));
  out(op(Op::Sqrt, {absv}));
  out(op(Op::HardSigmoid, {v}, {{"alpha", 0.3}, {"beta", 0.4}}));
  out(op(Op::Elu, {v}, {{"alpha", 0.7}}));
  out(op(Op::Selu, {v}));
  out(op(Op::LeakyRelu, {v}, {{"alpha", 0.1}}));
  out(op(Op::Clip, {v}, {{"min", -0.5}, {"max", 0.25}}));
  out(op(Op::Pow, {v, G.addParam("two", ir::Tensor::fromVector(ir::DType::F32, {}, std::vector<float>{2.0f}))}));
  out(op(Op::Pow, {pos, param({8})}));
  out(op(Op::Div, {v, pos}));
  out(op(Op::Sub, {v, param({8})}));
  out(op(Op::Mul, {v, param({1, 8})}));
  out(op(Op::Min, {v, param({8})}));
  out(op(Op::Max, {v, param({8})}));
  Value* gt = op(Op::Greater, {v, param({8})});
  out(op(Op::Where, {gt, v, op(Op::Neg, {v})}));
  out(op(Op::Cast, {op(Op::Not, {op(Op::Less, {v, param({8})})})}, {{"to", std::string("f32")}}));
  out(op(Op::Cast, {op(Op::Equal, {op(Op::Relu, {v}), v})}, {{"to", std::string("f32")}}));
  Value* scaled = op(Op::Mul, {v, G.addParam("three", ir::Tensor::fromVector(ir::DType::F32, {}, std::vector<float>{3.0f}))});
  out(op(Op::Cast, {scaled}, {{"to", std::string("i64")}}));
  out(op(Op::BatchNorm, {x, param({3}), param({3}), param({3}), op(Op::Abs, {param({3})})}));
  // linear algebra
  out(op(Op::Gemm, {v, param({8, 5}), param({5})}, {{"alpha", 0.5}, {"beta", 2.0}}));
  out(op(Op::Gemm, {v, param({5, 8}), param({1, 5})}, {{"trans_b", int64_t{1}}}));
  Value* v3 = op(Op::Reshape, {v}, {{"shape", std::vector<int64_t>{0, 2, 4}}});
  out(op(Op::MatMul, {v3, param({4, 3})}));
  out(op(Op::MatMul, {v3, param({4})}));
  out(op(Op::MatMul, {param({3, 2}), v3}));
  out(op(Op::Linear, {v3, param({6, 4})}));
  // convolution and pooling
  out(op(Op::Conv, {x, param({4, 3, 3, 3}), param({4})}, {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}));
  out(op(Op::Conv, {x, param({20, 3, 3, 3})}));  // windows read straight from the input, 20 channels: two panels
  out(op(Op::Conv, {x, param({5, 3, 2, 3}), param({5})}, {{"dilations", std::vector<int64_t>{3, 2}},
                                                         {"pads", std::vector<int64_t>{0, 1, 2, 0}}}));
  out(op(Op::Conv, {x, param({6, 1, 3, 3})}, {{"group", int64_t{3}}, {"dilations", std::vector<int64_t>{2, 2}},
                                               {"pads", std::vector<int64_t>{2, 1, 2, 1}}}));
  out(op(Op::MaxPool, {x}, {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                            {"pads", std::vector<int64_t>{1, 1, 0, 0}}, {"ceil_mode", int64_t{1}}}));
  out(op(Op::AvgPool, {x}, {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}},
                            {"ceil_mode", int64_t{1}}}));
  out(op(Op::AvgPool, {x}, {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                            {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"count_include_pad", int64_t{1}}}));
  out(op(Op::GlobalAvgPool, {x}));
  // reductions
  out(op(Op::Softmax, {v3}, {{"axis", int64_t{1}}}));
  out(op(Op::LogSoftmax, {v}));
  out(op(Op::LayerNorm, {v3, param({4}), param({4})}));
  out(op(Op::LayerNorm, {x, param({7, 7})}, {{"axis", int64_t{2}}}));
  out(op(Op::ReduceMean, {x}, {{"axes", std::vector<int64_t>{2, 3}}}));
  out(op(Op::ReduceSum, {v3}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}));
  out(op(Op::ReduceMax, {x}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{0}}}));
  out(op(Op::ArgMax, {v}, {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}}));
  out(op(Op::ArgMax, {op(Op::Relu, {v3})}, {{"axis", int64_t{2}}, {"select_last_index", int64_t{1}}}));
  // data movement
  out(op(Op::Pad, {x}, {{"pads", std::vector<int64_t>{0, 0, 1, 2, 0, 0, 2, 1}}, {"value", 0.5}}));
  out(op(Op::Pad, {x}, {{"pads", std::vector<int64_t>{0, 0, 2, 1, 0, 0, 1, 3}}, {"mode", std::string("reflect")}}));
  out(op(Op::Pad, {x}, {{"pads", std::vector<int64_t>{0, 1, 1, 0, 0, 0, 0, 2}}, {"mode", std::string("edge")}}));
  out(op(Op::Gather, {v, G.addParam("idx", ir::Tensor::fromVector(ir::DType::I64, {3}, std::vector<int64_t>{0, -1, 5}))},
         {{"axis", int64_t{1}}}));
  out(op(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}}));
  out(op(Op::Slice, {x}, {{"starts", std::vector<int64_t>{1, -2}}, {"ends", std::vector<int64_t>{7, 0}},
                          {"axes", std::vector<int64_t>{2, 3}}, {"steps", std::vector<int64_t>{2, -2}}}));
  out(op(Op::Concat, {v, op(Op::Tanh, {v})}, {{"axis", int64_t{1}}}));
  // Output names that are C keywords or the wrappers' own parameter names get distinct C names.
  outs.emplace_back("batch", op(Op::Relu, {x}));
  outs.emplace_back("int", op(Op::Sigmoid, {x}));
  G.setOutputs(outs);
  return g;
}

}  // namespace

TEST_CASE("cpp backend: every elementwise op and template variant matches the interpreter", "[codegen][cpp]") {
  auto graph = kitchenSink();
  codegen::KernelProgram program = codegen::lowerGraph(*graph);
  codegen::fuseKernels(program);
  fs::path so = scratchDir() / "kitchen_sink.so";
  // Every kernel split as far as it goes, so that 2 and 3 threads exercise every template's split.
  codegen::CppOptions options;
  options.minChunkCost = 0;
  codegen::GeneratedCpp generated = codegen::emitCpp(program, codegen::planMemory(program), options);
  codegen::buildSharedObject(generated, so.string());
  CHECK(generated.header.find("float* v_batch, float* v_int, int64_t batch);") != std::string::npos);
  fs::path h = scratchDir() / "kitchen_sink.h";
  fs::path c = scratchDir() / "kitchen_sink.c";
  std::ofstream(h) << generated.header;
  std::ofstream(c) << "#include \"kitchen_sink.h\"\nint f(void) { return KITCHEN_SINK_V_BATCH_SIZE; }\n";
  std::string cmd = "cc -std=c99 -Wall -Werror -c -o /dev/null '" + c.string() + "' > /dev/null 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  auto fn = reinterpret_cast<policyc_model_descriptor_fn>(dlsym(handle, "policyc_model_descriptor"));
  REQUIRE(fn != nullptr);
  for (int64_t batch : {1, 3, 64}) compareWithInterpreter(fn(), *graph, batch, "kitchen_sink");
}

TEST_CASE("cpp backend: a form the backend does not implement is one 'unsupported in backend cpp' error", "[codegen][cpp]") {
  // A transpose that moves 'batch' inward: valid for the interpreter, but codegen keeps 'batch'
  // the outermost dimension of every buffer.
  ir::Graph g("batch_inward");
  Value* x = g.addInput("x", {ir::DType::F32, {ir::Dim::batch(), 4}});
  Value* t = g.addOp(Op::Transpose, {x}, {{"perm", std::vector<int64_t>{1, 0}}}, "swap")->output();
  Value* y = g.addOp(Op::Relu, {t}, {}, "act")->output();
  g.setOutputs({{"y", y}});
  CHECK_NOTHROW(ir::interpret(g, {f32Tensor({2, 4}, 1)}));
  try {
    codegen::generateCpp(g);
    FAIL("generateCpp should have refused the graph");
  } catch (const UnsupportedError& e) {
    std::string what = e.what();
    CHECK(what.rfind("unsupported in backend cpp: node 'swap' (transpose): ", 0) == 0);
    CHECK(what.find("'batch' in dimension 1") != std::string::npos);
  }
}
