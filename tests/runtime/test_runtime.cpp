// The runtime loader against hand-written model .so files (tests/data/abi/affine_model.c, built
// here with cc): loading and its errors, checked runs, allocation-free steady state, concurrency,
// `policyc run OUT.so`, and the generic C embedding example.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <type_traits>

#include "policyc/driver/model_io.h"
#include "policyc/runtime/loader.h"
#include "support/cli.h"
#include "support/fixtures.h"

using namespace policyc;
using runtime::Model;
using runtime::ModelError;
using runtime::TensorView;
namespace fs = std::filesystem;

// ---- Allocation counting: malloc and friends of this test binary count the calls a thread makes
// while it counts. (AddressSanitizer owns malloc in sanitizer builds: no counting there.)
#if defined(__SANITIZE_ADDRESS__)
#define POLICYC_COUNT_ALLOCATIONS 0
#else
#define POLICYC_COUNT_ALLOCATIONS 1
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}
namespace {
thread_local bool tCounting = false;
thread_local long tAllocations = 0;
inline void noteAllocation() {
  if (tCounting) ++tAllocations;
}
}  // namespace
extern "C" void* malloc(size_t size) noexcept {
  noteAllocation();
  return __libc_malloc(size);
}
extern "C" void* calloc(size_t count, size_t size) noexcept {
  noteAllocation();
  return __libc_calloc(count, size);
}
extern "C" void* realloc(void* ptr, size_t size) noexcept {
  noteAllocation();
  return __libc_realloc(ptr, size);
}
extern "C" void* aligned_alloc(size_t alignment, size_t size) noexcept {
  noteAllocation();
  return __libc_memalign(alignment, size);
}
extern "C" void* memalign(size_t alignment, size_t size) noexcept {
  noteAllocation();
  return __libc_memalign(alignment, size);
}
extern "C" int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  noteAllocation();
  void* p = __libc_memalign(alignment, size);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
#endif

namespace {

// Allocations the calling thread makes while `f` runs (-1 where they cannot be counted).
template <typename F>
long allocationsDuring(F&& f) {
#if POLICYC_COUNT_ALLOCATIONS
  tAllocations = 0;
  tCounting = true;
  f();
  tCounting = false;
  return tAllocations;
#else
  f();
  return -1;
#endif
}

// A directory of this process for the .so files and CLI outputs, removed at exit.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("policyc_test_runtime_" + std::to_string(getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
const fs::path& scratch() {
  static ScratchDir dir;
  return dir.path;
}

using testing::slurp;
using Catch::Matchers::Contains;

// Builds the hand-written test model with extra -D flags, once per variant; returns the .so path.
std::string testModel(const std::string& variant = "affine", const std::string& defines = "") {
  static std::map<std::string, std::string> built;
  auto it = built.find(variant);
  if (it != built.end()) return it->second;
  fs::path so = scratch() / (variant + ".so");
  fs::path log = scratch() / (variant + ".log");
  std::string cmd = "cc -std=gnu99 -O1 -Wall -Wextra -Werror -shared -fPIC -I " +
                    testing::sourcePath("runtime/include") + " " + defines + " " +
                    testing::sourcePath("tests/data/abi/affine_model.c") + " -o " + so.string() + " 2>" + log.string();
  int rc = std::system(cmd.c_str());
  INFO(cmd << "\n" << slurp(log));
  REQUIRE(rc == 0);
  built[variant] = so.string();
  return so.string();
}

// What the test model computes: y = 2 * obs + bias, total[b] = sum_j y[b,j] (in float, in order).
void expectedAffine(const std::vector<float>& obs, const std::vector<float>& bias, std::vector<float>& y,
                    std::vector<float>& total) {
  size_t batch = obs.size() / 4;
  y.assign(batch * 4, 0.0f);
  total.assign(batch, 0.0f);
  for (size_t b = 0; b < batch; ++b) {
    float sum = 0.0f;
    for (size_t j = 0; j < 4; ++j) {
      y[b * 4 + j] = 2.0f * obs[b * 4 + j] + bias[j];
      sum += y[b * 4 + j];
    }
    total[b] = sum;
  }
}

// Buffers and views for one run of the test model at a batch size.
struct AffineRun {
  int64_t batch;
  std::vector<float> obs, bias{0.5f, -1.0f, 0.25f, 3.0f}, y, total;
  std::vector<int64_t> obsShape, biasShape{4}, yShape, totalShape;
  std::vector<TensorView> in, out;

  AffineRun(int64_t b, float seed) : batch(b), obsShape{b, 4}, yShape{b, 4}, totalShape{b} {
    for (int64_t i = 0; i < b * 4; ++i) obs.push_back(seed + 0.25f * static_cast<float>(i % 13));
    y.assign(static_cast<size_t>(b * 4), -7.0f);
    total.assign(static_cast<size_t>(b), -7.0f);
    in = {TensorView(POLICYC_F32, obsShape, static_cast<const void*>(obs.data())),
          TensorView(POLICYC_F32, biasShape, static_cast<const void*>(bias.data()))};
    out = {TensorView(POLICYC_F32, yShape, static_cast<void*>(y.data())),
           TensorView(POLICYC_F32, totalShape, static_cast<void*>(total.data()))};
  }
  void run(const Model& model, int threads = 1) { model.run(in, out, batch, threads); }
  bool correct() const {
    std::vector<float> ey, et;
    expectedAffine(obs, bias, ey, et);
    return y == ey && total == et;
  }
};

// The test model's record of the workspace the calling thread's last run used.
void* lastWorkspace(const std::string& soPath) {
  void* handle = dlopen(soPath.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!handle) return nullptr;
  auto fn = reinterpret_cast<void* (*)()>(dlsym(handle, "policyc_test_last_workspace"));
  void* ws = fn ? fn() : nullptr;
  dlclose(handle);
  return ws;
}

std::string loadError(const std::string& path) {
  try {
    Model::load(path);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(loaded)";
}

template <typename F>
std::string runError(F&& f) {
  try {
    f();
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(ran)";
}

}  // namespace

TEST_CASE("runtime: load a model and read its descriptor", "[runtime]") {
  Model model = Model::load(testModel());
  CHECK(model.name() == "affine");
  CHECK(model.target() == "generic");
  CHECK(model.path() == testModel());
  REQUIRE(model.inputs().size() == 2);
  REQUIRE(model.outputs().size() == 2);
  CHECK(model.inputs()[0].name == "obs");
  CHECK(model.inputs()[0].str() == "f32[batch,4]");
  CHECK(model.inputs()[1].str() == "f32[4]");
  CHECK(model.outputs()[0].name == "y");
  CHECK(model.outputs()[1].str() == "f32[batch]");
  CHECK(model.outputs()[1].shapeAt(5) == std::vector<int64_t>{5});
  CHECK(model.workspaceBytes(3) == 64 + 3 * 16);
  CHECK(model.descriptor().abi_version == POLICYC_ABI_VERSION);
  CHECK_THROWS_AS(model.workspaceBytes(-1), ModelError);
  CHECK(std::string(runtime::dtypeName(POLICYC_U8)) == "u8");
  CHECK(runtime::dtypeSize(POLICYC_F64) == 8);
}

TEST_CASE("runtime: the source hash, and descriptors of the first ABI 1 layout without one", "[runtime]") {
  CHECK(Model::load(testModel()).sourceHash() == "0123456789abcdef");
  Model v1 = Model::load(testModel("v1_struct", "-DPOLICYC_TEST_V1_STRUCT"));
  CHECK(v1.descriptor().struct_size == POLICYC_MODEL_STRUCT_SIZE_V1);
  CHECK(v1.sourceHash().empty());
  CHECK(v1.workspaceBytes(3) == 64 + 3 * 16);
  // The layout that ends at source_hash: its hash is read, the weights past it are not.
  Model hashed = Model::load(testModel("hash_struct", "-DPOLICYC_TEST_HASH_STRUCT"));
  CHECK(hashed.sourceHash() == "0123456789abcdef");
  CHECK(hashed.weights().empty());
  CHECK(Model::load(testModel()).weights().empty());
}

TEST_CASE("runtime: the precision, fp32 for layouts that end before it, and a name that is none", "[runtime]") {
  CHECK(Model::load(testModel()).precision() == "fp32");
  const std::string bf16 = testModel("bf16", "-DPOLICYC_TEST_PRECISION='\"bf16-weights\"'");
  CHECK(Model::load(bf16).precision() == "bf16-weights");
  // `policyc run` says so before the outputs (an fp32 model's output is as it always was).
  CHECK_THAT(testing::runCli("run " + bf16 + " --random").out, Contains("precision: bf16-weights\ny: f32[1,4]"));
  CHECK(Model::load(testModel("hash_struct", "-DPOLICYC_TEST_HASH_STRUCT")).precision() == "fp32");
  Model before = Model::load(testModel("weights_struct", "-DPOLICYC_TEST_WEIGHTS_STRUCT"));
  CHECK(before.descriptor().struct_size == POLICYC_MODEL_STRUCT_SIZE_V1_WEIGHTS);
  CHECK(before.precision() == "fp32");
  CHECK_THROWS_WITH(Model::load(testModel("bad_precision", "-DPOLICYC_TEST_PRECISION='\"fp8\"'")),
                    Contains("precision is none of fp32"));
}

TEST_CASE("runtime: run computes the model, for any thread count", "[runtime]") {
  Model model = Model::load(testModel());
  for (int64_t batch : {1, 3, 17}) {
    for (int threads : {1, 2, 3, 8, 1}) {
      AffineRun r(batch, static_cast<float>(threads) - 2.0f);
      r.run(model, threads);
      INFO("batch " << batch << " threads " << threads);
      CHECK(r.correct());
    }
  }
}

TEST_CASE("runtime: batch 0 returns at once with empty outputs", "[runtime]") {
  Model model = Model::load(testModel());
  std::vector<int64_t> obsShape{0, 4}, biasShape{4}, yShape{0, 4}, totalShape{0};
  float bias[4] = {1, 2, 3, 4};
  std::vector<TensorView> in{TensorView(POLICYC_F32, obsShape, static_cast<const void*>(nullptr)),
                             TensorView(POLICYC_F32, biasShape, static_cast<const void*>(bias))};
  std::vector<TensorView> out{TensorView(POLICYC_F32, yShape, static_cast<void*>(nullptr)),
                              TensorView(POLICYC_F32, totalShape, static_cast<void*>(nullptr))};
  CHECK_NOTHROW(model.run(in, out, 0));
  CHECK(model.workspaceBytes(0) == 64);
}

TEST_CASE("runtime: files that are not policyc models are one clear error", "[runtime][bad-input]") {
  SECTION("a missing file") {
    std::string missing = (scratch() / "missing.so").string();
    CHECK(loadError(missing) == "'" + missing + "': no such file");
  }
  SECTION("a file that is not a shared object: found before dlopen") {
    fs::path text = scratch() / "text.so";
    std::ofstream(text) << "this is not an ELF file, but long enough to have a header of one.............\n";
    std::string err = loadError(text.string());
    CHECK(err.find(text.string()) != std::string::npos);
    CHECK(err.find("ELF") != std::string::npos);
    CHECK(err.find('\n') == std::string::npos);
  }
  SECTION("a shared object without the descriptor symbol") {
    std::string so = testModel("no_symbol", "-DPOLICYC_TEST_NO_DESCRIPTOR");
    CHECK(loadError(so) == "'" + so + "' is not a policyc model (no symbol policyc_model_descriptor)");
  }
  SECTION("a model built for another ABI version") {
    std::string so = testModel("abi999", "-DPOLICYC_TEST_ABI_VERSION=999");
    CHECK(loadError(so) == "'" + so + "' was built for policyc ABI version 999, this runtime reads version 1");
  }
  SECTION("a descriptor with a dtype outside the enum") {
    std::string so = testModel("bad_dtype", "-DPOLICYC_TEST_BAD_DTYPE");
    CHECK(loadError(so) == "'" + so + "': invalid descriptor: input 'obs' has dtype 42");
  }
  SECTION("a descriptor with two inputs of one name") {
    std::string so = testModel("duplicate_name", "-DPOLICYC_TEST_DUPLICATE_NAME");
    CHECK(loadError(so) == "'" + so + "': invalid descriptor: two inputs are named 'obs'");
  }
  SECTION("a relative path without a slash is a file, not a library search") {
    fs::path cwd = fs::current_path();
    fs::current_path(scratch());
    std::string err = loadError("libc.so.6");
    fs::current_path(cwd);
    CHECK(err == "'libc.so.6': no such file");
  }
}

TEST_CASE("runtime: run checks every tensor against the descriptor", "[runtime][bad-input]") {
  Model model = Model::load(testModel());
  AffineRun r(3, 1.0f);
  std::vector<int64_t> s34{3, 4}, s35{3, 5}, s24{2, 4}, s33{3, 3}, s2{2};
  std::vector<int32_t> ints(12);

  CHECK(runError([&] {
          r.in[0] = TensorView(POLICYC_I32, s34, static_cast<const void*>(ints.data()));
          r.run(model);
        }) == "input 'obs': expected f32[batch,4], got i32[3,4]");
  CHECK(runError([&] {
          r.in[0] = TensorView(POLICYC_F32, s35, static_cast<const void*>(r.obs.data()));
          r.run(model);
        }) == "input 'obs': expected f32[batch,4], got f32[3,5]");
  CHECK(runError([&] {
          r.in[0] = TensorView(POLICYC_F32, s24, static_cast<const void*>(r.obs.data()));
          r.run(model);
        }) == "input 'obs': expected f32[batch,4] at batch 3, got f32[2,4]");
  CHECK(runError([&] {
          r.in[0] = TensorView(POLICYC_F32, s34, static_cast<const void*>(nullptr));
          r.run(model);
        }) == "input 'obs': the data pointer is null");
  r.in[0] = TensorView(POLICYC_F32, s34, static_cast<const void*>(r.obs.data()));
  CHECK(runError([&] { model.run(std::span<const TensorView>(r.in).first(1), r.out, 3, 1); }) ==
        "expected 2 inputs (obs, bias), got 1");
  CHECK(runError([&] {
          r.out[0] = TensorView(POLICYC_F32, s33, static_cast<void*>(r.y.data()));
          r.run(model);
        }) == "output 'y': expected f32[batch,4], got f32[3,3]");
  r.out[0] = TensorView(POLICYC_F32, s34, static_cast<void*>(r.y.data()));
  CHECK(runError([&] {
          r.out[1] = TensorView(POLICYC_F32, s2, static_cast<void*>(r.total.data()));
          r.run(model);
        }) == "output 'total': expected f32[batch] at batch 3, got f32[2]");
  r.out[1] = TensorView(POLICYC_F32, r.totalShape, static_cast<void*>(r.total.data()));
  CHECK(runError([&] { model.run(r.in, std::span<TensorView>(r.out).first(1), 3, 1); }) ==
        "expected 2 outputs (y, total), got 1");
  CHECK(runError([&] { model.run(r.in, r.out, -1, 1); }) == "batch must be between 0 and 2147483647, got -1");
  CHECK(runError([&] { model.run(r.in, r.out, 3, 0); }) == "threads must be >= 1, got 0");
  // Nothing was written by the failed runs; the views restored, the run goes through.
  CHECK(r.y == std::vector<float>(12, -7.0f));
  r.run(model);
  CHECK(r.correct());
}

TEST_CASE("runtime: runUnchecked uses the caller's workspace", "[runtime]") {
  Model model = Model::load(testModel());
  AffineRun r(2, 0.5f);
  const void* in[2] = {r.obs.data(), r.bias.data()};
  void* out[2] = {r.y.data(), r.total.data()};
  size_t bytes = model.workspaceBytes(2);
  void* block = std::aligned_alloc(64, (bytes + 127) / 64 * 64);
  CHECK(model.runUnchecked(in, out, 2, block, 1) == POLICYC_OK);
  CHECK(r.correct());
  CHECK(lastWorkspace(testModel()) == block);
  CHECK(model.runUnchecked(in, out, 2, static_cast<char*>(block) + 8, 1) == POLICYC_ERROR_WORKSPACE);
  std::free(block);
}

TEST_CASE("runtime: a steady-state run allocates nothing", "[runtime][alloc]") {
  Model model = Model::load(testModel());
  AffineRun small(1, 0.0f), large(64, 1.0f);
  small.run(model);  // the first run on this thread creates its workspace
  void* ws = lastWorkspace(testModel());
  CHECK(reinterpret_cast<uintptr_t>(ws) % POLICYC_WORKSPACE_ALIGNMENT == 0);

  long steady = allocationsDuring([&] {
    for (int i = 0; i < 100; ++i) small.run(model, 1 + i % 3);
  });
  CHECK(lastWorkspace(testModel()) == ws);
  long growing = allocationsDuring([&] { large.run(model); });
  void* grown = lastWorkspace(testModel());
  CHECK(reinterpret_cast<uintptr_t>(grown) % POLICYC_WORKSPACE_ALIGNMENT == 0);
  long afterGrowth = allocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      large.run(model, 2);
      small.run(model, 3);
    }
  });
  CHECK(lastWorkspace(testModel()) == grown);  // a smaller batch keeps the larger workspace
  CHECK(small.correct());
  CHECK(large.correct());
#if POLICYC_COUNT_ALLOCATIONS
  CHECK(steady == 0);
  CHECK(growing >= 1);  // the counter does see the workspace growing
  CHECK(afterGrowth == 0);
#else
  WARN("allocation counting is off in sanitizer builds (" << steady << growing << afterGrowth << ")");
#endif
}

TEST_CASE("runtime: concurrent runs on one Model use separate workspaces", "[runtime][threads]") {
  Model model = Model::load(testModel());
  constexpr int kCalls = 10000;
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  void* workspaces[2] = {nullptr, nullptr};
  auto worker = [&](int t) {
    // Different batch sizes and inputs per thread: a shared workspace would mix them up.
    AffineRun r(t == 0 ? 2 : 5, t == 0 ? -3.0f : 4.0f);
    for (int i = 0; i < kCalls; ++i) {
      std::fill(r.y.begin(), r.y.end(), 0.0f);
      try {
        r.run(model, 1 + (i + t) % 4);
      } catch (const std::exception&) {
        errors.fetch_add(1);
      }
      if (!r.correct()) wrong.fetch_add(1);
    }
    workspaces[t] = lastWorkspace(testModel());
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(errors.load() == 0);
  CHECK(wrong.load() == 0);
  CHECK(workspaces[0] != nullptr);
  CHECK(workspaces[0] != workspaces[1]);
}

TEST_CASE("runtime: Model is move-only and unloads on destruction", "[runtime]") {
  static_assert(!std::is_copy_constructible_v<Model>);
  static_assert(std::is_nothrow_move_constructible_v<Model>);
  std::string so = testModel();
  Model first = Model::load(so);
  {
    Model other = Model::load(so);  // the same file twice: dlopen counts references
    AffineRun r(2, 1.0f);
    r.run(other);
    CHECK(r.correct());
  }
  Model moved = std::move(first);
  AffineRun r(3, 2.0f);
  r.run(moved);
  CHECK(r.correct());
  Model assigned = Model::load(so);
  assigned = std::move(moved);
  r.run(assigned);
  CHECK(r.correct());
}

// ---- `policyc run OUT.so`

namespace {

using testing::CliResult;

CliResult cli(const std::string& args) { return testing::runCli(args); }
// A bad-input failure: exit 2, one error line, nothing on stdout.
void requireCleanError(const CliResult& r, const std::string& text) { testing::requireCleanError(r, text, true); }

// The CLI's summary of the test model's outputs for given inputs.
std::string affineSummary(const ir::Tensor& obs, const ir::Tensor& bias) {
  std::vector<float> o(obs.data<float>(), obs.data<float>() + obs.numel());
  std::vector<float> b(bias.data<float>(), bias.data<float>() + 4);
  std::vector<float> y, total;
  expectedAffine(o, b, y, total);
  int64_t batch = obs.shape()[0];
  return "y: " + driver::summarize(ir::Tensor::fromVector(ir::DType::F32, {batch, 4}, y)) + "\n" +
         "total: " + driver::summarize(ir::Tensor::fromVector(ir::DType::F32, {batch}, total)) + "\n";
}

}  // namespace

TEST_CASE("runtime cli: run OUT.so --random matches the model on the same random inputs", "[runtime][cli]") {
  std::string so = testModel();
  std::vector<ir::TensorType> types{{ir::DType::F32, {ir::Dim::batch(), 4}}, {ir::DType::F32, {4}}};
  std::vector<ir::Tensor> inputs = driver::randomTensors(types, 3, 11);
  CliResult r = cli("run " + so + " --random --batch 3 --seed 11");
  INFO("stderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out == affineSummary(inputs[0], inputs[1]));
  CHECK(cli("run " + so + " --random --batch 3 --seed 11 --threads 4").out == r.out);
  CliResult empty = cli("run " + so + " --random --batch 0");
  CHECK(empty.exitCode == 0);
  CHECK(empty.out == "y: f32[0,4] (empty)\ntotal: f32[0] (empty)\n");
}

TEST_CASE("runtime cli: run OUT.so --input writes every output", "[runtime][cli]") {
  std::string so = testModel();
  fs::path dir = scratch() / "cli_inputs";
  fs::create_directories(dir);
  ir::Tensor obs = ir::Tensor::fromVector(ir::DType::F32, {2, 4}, std::vector<float>{1, 2, 3, 4, -1, -2, -3, -4});
  ir::Tensor bias = ir::Tensor::fromVector(ir::DType::F32, {4}, std::vector<float>{0.5f, 0, 0, 1});
  driver::writeTensor((dir / "obs.npy").string(), obs);
  driver::writeTensor((dir / "bias.npy").string(), bias);
  fs::path outDir = dir / "out";
  CliResult r = cli("run " + so + " --input obs=" + (dir / "obs.npy").string() + " --input bias=" +
                    (dir / "bias.npy").string() + " --output-dir " + outDir.string() + " --threads 2");
  INFO("stderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out == affineSummary(obs, bias));
  ir::Tensor y = driver::readTensor((outDir / "y.npy").string());
  ir::Tensor total = driver::readTensor((outDir / "total.npy").string());
  CHECK(y.bitEqual(ir::Tensor::fromVector(ir::DType::F32, {2, 4}, std::vector<float>{2.5f, 4, 6, 9, -1.5f, -4, -6, -7})));
  CHECK(total.bitEqual(ir::Tensor::fromVector(ir::DType::F32, {2}, std::vector<float>{21.5f, -18.5f})));
}

TEST_CASE("runtime cli: bad input to run OUT.so is one error line, exit 2, no output", "[runtime][cli][bad-input]") {
  std::string so = testModel();
  fs::path dir = scratch() / "cli_bad";
  fs::create_directories(dir);
  driver::writeTensor((dir / "obs25.npy").string(), ir::Tensor(ir::DType::F32, {2, 5}));
  driver::writeTensor((dir / "obs24.npy").string(), ir::Tensor(ir::DType::F32, {2, 4}));
  driver::writeTensor((dir / "obs_i64.npy").string(), ir::Tensor(ir::DType::I64, {2, 4}));
  driver::writeTensor((dir / "bias.npy").string(), ir::Tensor(ir::DType::F32, {4}));
  std::string bias = " --input bias=" + (dir / "bias.npy").string();
  fs::path outDir = dir / "out";

  requireCleanError(cli("run " + so + " --input obs=" + (dir / "obs25.npy").string() + bias + " --output-dir " +
                        outDir.string()),
                    "input 'obs': expected f32[batch,4], got f32[2,5]");
  CHECK(!fs::exists(outDir));
  requireCleanError(cli("run " + so + " --input obs=" + (dir / "obs_i64.npy").string() + bias),
                    "input 'obs': expected f32[batch,4], got i64[2,4]");
  requireCleanError(cli("run " + so + " --input obs=" + (dir / "obs24.npy").string()), "missing input 'bias'");
  requireCleanError(cli("run " + so + " --input obs=" + (dir / "obs24.npy").string() + bias + " --input goal=" +
                        (dir / "bias.npy").string()),
                    "unknown input 'goal' (the model's inputs: obs, bias)");
  requireCleanError(cli("run " + so + " --input obs=" + (dir / "nothere.npy").string() + bias), "nothere.npy");
  requireCleanError(cli("run " + so + " --random --input obs=" + (dir / "obs24.npy").string()),
                    "give either --input or --random, not both");
  requireCleanError(cli("run " + so + " --random --threads 0"), "--threads: Value 0 not in range 1 to 1024");
  requireCleanError(cli("run " + so + " --random --optimize"), "is already compiled");
  requireCleanError(cli("run " + (scratch() / "missing.so").string() + " --random"), "no such file");
  std::string noSymbol = testModel("no_symbol", "-DPOLICYC_TEST_NO_DESCRIPTOR");
  requireCleanError(cli("run " + noSymbol + " --random"), "is not a policyc model (no symbol policyc_model_descriptor)");
  std::string abi999 = testModel("abi999", "-DPOLICYC_TEST_ABI_VERSION=999");
  requireCleanError(cli("run " + abi999 + " --random"), "was built for policyc ABI version 999, this runtime reads version 1");
}

// ---- examples/embed_c: the generic C program, built against the hand-written model (main.c needs
// ppo_mlp.h from `policyc compile`: CTest's example_embed_c builds both on ppo_mlp).

TEST_CASE("embed_c example: any_model.c runs any compiled model", "[runtime][example]") {
  std::string so = testModel();
  fs::path exe = scratch() / "embed_demo";
  fs::path log = scratch() / "embed_demo.log";
  std::string cmd = "cc -std=c99 -Wall -Wextra -Wpedantic -Werror -I " + testing::sourcePath("runtime/include") + " " +
                    testing::sourcePath("examples/embed_c/any_model.c") + " " + so + " -o " + exe.string() + " 2>" +
                    log.string();
  int rc = std::system(cmd.c_str());
  INFO(cmd << "\n" << slurp(log));
  REQUIRE(rc == 0);
  CliResult r{0, "", ""};
  FILE* pipe = popen(exe.string().c_str(), "r");
  REQUIRE(pipe);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.out.append(buf, n);
  CHECK(pclose(pipe) == 0);
  // obs and bias are both filled with -0.5, -0.4, -0.3, -0.2: y = 3 * that.
  CHECK(r.out ==
        "model affine (target generic): 2 inputs, 2 outputs\n"
        "y: f32[1,4] = -1.5 -1.2 -0.9 -0.6\n"
        "total: f32[1] = -4.2\n");
}

// ---- A model compiled by the C++ backend (ppo_mlp): the same guarantees as the hand-written one,
// with the thread pool of the generated code in play.

#include "policyc/codegen/cpp_backend.h"
#include "policyc/ir/interpreter.h"
#include "policyc/passes/pass_manager.h"

namespace {

// ppo_mlp compiled once per test run.
const std::string& compiledPpo() {
  static std::string so = [] {
    auto graph = driver::loadModel(testing::sourcePath("examples/models/ppo_mlp.onnx"));
    passes::runPipeline(*graph);
    fs::path path = scratch() / "ppo_mlp.so";
    codegen::buildSharedObject(codegen::generateCpp(*graph), path.string());
    return path.string();
  }();
  return so;
}

// Inputs, outputs and the interpreter's answer for one batch size of ppo_mlp.
struct PpoRun {
  int64_t batch;
  ir::Tensor obs;
  std::vector<ir::Tensor> expected, got;
  std::vector<TensorView> in, out;

  PpoRun(int64_t b, uint64_t seed) : batch(b) {
    auto graph = driver::loadModel(testing::sourcePath("examples/models/ppo_mlp.onnx"));
    obs = driver::randomInputs(*graph, b, seed).at(0);
    expected = ir::interpret(*graph, {obs});
    for (const ir::Tensor& e : expected) got.emplace_back(e.dtype(), e.shape());
    in = {TensorView(POLICYC_F32, obs.shape(), static_cast<const void*>(obs.bytes()))};
    for (ir::Tensor& g : got) out.emplace_back(POLICYC_F32, g.shape(), static_cast<void*>(g.bytes()));
  }
  void run(const Model& model, int threads) { model.run(in, out, batch, threads); }
  // Within 1e-4 of the interpreter.
  bool closeToInterpreter() const {
    for (size_t o = 0; o < got.size(); ++o) {
      for (int64_t i = 0; i < got[o].numel(); ++i) {
        float g = got[o].data<float>()[i], e = expected[o].data<float>()[i];
        if (!(std::abs(g - e) <= 1e-4f + 1e-4f * std::abs(e))) return false;
      }
    }
    return true;
  }
  std::vector<std::vector<float>> snapshot() const {
    std::vector<std::vector<float>> s;
    for (const ir::Tensor& g : got) s.emplace_back(g.data<float>(), g.data<float>() + g.numel());
    return s;
  }
};

}  // namespace

TEST_CASE("runtime: a compiled model's steady-state run allocates nothing, with 1 and 2 threads", "[runtime][alloc][cpp]") {
  Model model = Model::load(compiledPpo());
  PpoRun small(1, 3), large(64, 4);
  // Warm-up: workspaces for both sizes on this thread, the generated code's worker thread.
  large.run(model, 2);
  small.run(model, 1);
  long steady = allocationsDuring([&] {
    for (int i = 0; i < 200; ++i) {
      small.run(model, 1 + i % 2);
      large.run(model, 1 + i % 2);
    }
  });
  CHECK(small.closeToInterpreter());
  CHECK(large.closeToInterpreter());
#if POLICYC_COUNT_ALLOCATIONS
  CHECK(steady == 0);
#else
  WARN("allocation counting is off in sanitizer builds (" << steady << ")");
#endif
}

TEST_CASE("runtime: 2 threads x 10,000 calls on one compiled model, every output correct", "[runtime][threads][cpp]") {
  Model model = Model::load(compiledPpo());
  constexpr int kCalls = 10000;
  std::atomic<int> wrong{0}, errors{0}, notClose{0};
  auto worker = [&](int t) {
    // Different batch sizes and inputs per thread; each call asks for 1 or 2 threads, so the two
    // callers also contend for the model's worker pool.
    PpoRun r(t == 0 ? 1 : 5, 10 + static_cast<uint64_t>(t));
    r.run(model, 1);
    if (!r.closeToInterpreter()) notClose.fetch_add(1);
    const std::vector<std::vector<float>> reference = r.snapshot();
    for (int i = 0; i < kCalls; ++i) {
      for (ir::Tensor& g : r.got) std::fill_n(g.data<float>(), g.numel(), -7.0f);
      try {
        r.run(model, 1 + (i + t) % 2);
      } catch (const std::exception&) {
        errors.fetch_add(1);
      }
      if (r.snapshot() != reference) wrong.fetch_add(1);
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(notClose.load() == 0);
  CHECK(errors.load() == 0);
  CHECK(wrong.load() == 0);
}
