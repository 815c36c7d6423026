// The debug directory: where it goes, what it writes, and that it stays off unless asked for.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "policyc/driver/autotune.h"
#include "policyc/driver/compile.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/cpu.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("debug dir: off by default, --debug-dir wins, POLICYC_DEBUG=1 picks a hashed name", "[debug]") {
  fs::path root = fs::temp_directory_path() / "policyc_test_debug";
  fs::remove_all(root);
  fs::create_directories(root);
  fs::path model = root / "m.onnx";
  std::ofstream(model) << "model bytes";

  ::unsetenv("POLICYC_DEBUG");
  CHECK_FALSE(driver::DebugDir::select("", model.string(), "m").has_value());
  ::setenv("POLICYC_DEBUG", "0", 1);
  CHECK_FALSE(driver::DebugDir::select("", model.string(), "m").has_value());

  auto flagged = driver::DebugDir::select((root / "flag").string(), model.string(), "m");
  REQUIRE(flagged.has_value());
  CHECK(flagged->path() == root / "flag");
  CHECK(fs::is_directory(root / "flag"));

  ::setenv("POLICYC_DEBUG", "1", 1);
  fs::path cwd = fs::current_path();
  fs::current_path(root);
  auto env = driver::DebugDir::select("", model.string(), "m");
  fs::current_path(cwd);
  ::unsetenv("POLICYC_DEBUG");
  REQUIRE(env.has_value());
  std::string hash = driver::fileHash(model.string());
  CHECK(hash.size() == 16);
  // One directory per model, command and backend: runs of different commands or backends never mix.
  CHECK(env->path() == fs::path("policyc_debug") / ("m-" + hash.substr(0, 8) + "-library"));
  ::setenv("POLICYC_DEBUG", "1", 1);
  driver::setInvocation("check", "policyc check m.onnx");
  fs::current_path(root);
  auto checkLlvm = driver::DebugDir::select("", model.string(), "m", "llvm");
  fs::current_path(cwd);
  ::unsetenv("POLICYC_DEBUG");
  driver::setInvocation("library", "");
  REQUIRE(checkLlvm.has_value());
  CHECK(checkLlvm->path() == fs::path("policyc_debug") / ("m-" + hash.substr(0, 8) + "-check-llvm"));
}

TEST_CASE("debug dir: writes files, reloadable graphs and the compile-time table", "[debug]") {
  fs::path dir = fs::temp_directory_path() / "policyc_test_debug" / "files";
  fs::remove_all(dir);
  driver::DebugDir d(dir);
  d.write("passes.log", "pass dce: no change\n");
  CHECK(slurp(dir / "passes.log") == "pass dce: no change\n");

  ir::Graph g("tiny");
  ir::Value* x = g.addInput("x", {ir::DType::F32, {ir::Dim::batch(), 64}});
  ir::Value* w = g.addParam("w", ir::Tensor(ir::DType::F32, {64, 64}));
  ir::Node* fc = g.addOp(ir::Op::Linear, {x, w}, {}, "fc");
  g.setOutputs({{"y", fc->output()}});
  d.writeGraph("graph_imported.pir", g);
  CHECK(fs::exists(dir / "graph_imported.pir.bin"));
  auto back = ir::readPir((dir / "graph_imported.pir").string());
  CHECK(ir::printGraph(*back).text == ir::printGraph(g).text);

  {
    driver::StageTimer t(&d, "import");
  }
  d.recordTime("passes", 2.5);
  d.recordTime("passes", 0.5);
  d.writeTimes();
  std::string times = slurp(dir / "compile_times.txt");
  CHECK(times.find("import") != std::string::npos);
  CHECK(times.find("passes                         3.00") != std::string::npos);
  CHECK(times.find("total") != std::string::npos);
  { driver::StageTimer off(nullptr, "ignored"); }  // no directory: nothing recorded, no crash
}

// A native build is this machine's: the cache key names its CPU, its extensions and the
// schedule's reading of them, so a cache directory shared with machines of other CPUs never
// hands one's native build to another; a named target's key does not depend on the host.
TEST_CASE("compile cache: a native build's key names this machine", "[debug]") {
  driver::CompileRequest r;
  r.modelPath = "model.onnx";
  const std::string features = fmt::format("[{}]", fmt::join(runtime::hostCpuFeatures(), ","));
  r.cpp.target = "native";
  const std::string native = driver::cacheKey(r, "compiler");
  CHECK(native.find(driver::cpuModel()) != std::string::npos);
  CHECK(native.find(features) != std::string::npos);
  CHECK(native.find(codegen::cppTargetTraits("native").narrowVectors ? " narrow" : " wide") != std::string::npos);
  r.cpp.target = "x86-64-v3";
  const std::string v3 = driver::cacheKey(r, "compiler");
  CHECK(v3.find(driver::cpuModel()) == std::string::npos);
  CHECK(v3.find("|host ") == std::string::npos);
  CHECK(v3 != native);
}
