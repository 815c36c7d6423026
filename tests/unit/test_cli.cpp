// The policyc command line end to end: dump, run, and every kind of bad input (exit 2, one line).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model_io.h"
#include "unit/fixtures.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

struct CliResult {
  int exitCode;
  std::string out;
  std::string err;
};

fs::path scratch() {
  fs::path dir = fs::temp_directory_path() / "policyc_test_cli";
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

CliResult cli(const std::string& args) {
  fs::path errFile = scratch() / "stderr.txt";
  std::string cmd = std::string(POLICYC_CLI) + " " + args + " 2>" + errFile.string();
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, slurp(errFile)};
}

// A bad-input failure: exit code 2 and exactly one line on stderr containing `text`.
void requireCleanError(const CliResult& r, const std::string& text) {
  INFO("stderr: " << r.err);
  CHECK(r.exitCode == 2);
  CHECK(r.err.find(text) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.rfind("policyc: error: ", 0) == 0);
}

const std::string kPpo = testing::sourcePath("examples/models/ppo_mlp.onnx");

}  // namespace

TEST_CASE("cli: dump prints the imported graph", "[cli]") {
  CliResult r = cli("dump " + kPpo);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.rfind("graph ", 0) == 0);
  CHECK(r.out.find("%obs: f32[batch,17]") != std::string::npos);
  CHECK(r.out.find("gemm(") != std::string::npos);
  CHECK(r.out.find("return (action_dist_inputs=") != std::string::npos);
}

TEST_CASE("cli: dump -o writes a .pir that runs like the .onnx", "[cli]") {
  fs::path pir = scratch() / "ppo.pir";
  REQUIRE(cli("dump " + kPpo + " -o " + pir.string()).exitCode == 0);
  CHECK(fs::exists(pir.string() + ".bin"));
  CliResult a = cli("run " + kPpo + " --random --batch 2 --seed 7");
  CliResult b = cli("run " + pir.string() + " --random --batch 2 --seed 7");
  REQUIRE(a.exitCode == 0);
  CHECK(a.out == b.out);
}

TEST_CASE("cli: run with inputs writes every output as .npy matching PyTorch", "[cli]") {
  for (const auto& fx : testing::loadFixtures()) {
    if (fx.name != "multi_input") continue;  // two inputs, four outputs
    const auto& c = fx.cases.back();
    fs::path outDir = scratch() / "run_out";
    fs::remove_all(outDir);
    std::string args = "run " + fx.onnx + " --backend interp --output-dir " + outDir.string();
    for (const auto& [name, path] : c.inputs) args += " --input " + name + "=" + path;
    CliResult r = cli(args);
    REQUIRE(r.exitCode == 0);
    for (const auto& [name, path] : c.outputs) {
      CHECK(r.out.find(name + ": ") != std::string::npos);
      ir::Tensor got = tools::readTensor((outDir / (name + ".npy")).string());
      ir::Tensor want = tools::readTensor(path);
      REQUIRE(got.shape() == want.shape());
      for (int64_t i = 0; i < got.numel(); ++i) CHECK(std::abs(got.getAsDouble(i) - want.getAsDouble(i)) < 1e-5);
    }
  }
}

TEST_CASE("cli: bad input is one clear error line and exit code 2", "[cli][bad-input]") {
  fs::path dir = scratch();
  std::string onnxBytes = slurp(kPpo);
  std::ofstream(dir / "truncated.onnx", std::ios::binary) << onnxBytes.substr(0, onnxBytes.size() / 2);
  std::ofstream(dir / "garbage.onnx", std::ios::binary) << std::string(1000, '\xff');
  std::ofstream(dir / "model.txt") << "hello";
  std::string obs1 = testing::sourcePath("tests/data/ppo_mlp/in_b1_obs.npy");
  std::string wrongShape = testing::sourcePath("tests/data/multi_input/in_b1_goal.npy");  // [1,6], not [1,17]
  std::string wrongDtype = testing::sourcePath("tests/data/uint8_convbn/in_b1_obs.npy");  // u8
  std::ofstream(dir / "truncated.npy", std::ios::binary) << slurp(obs1).substr(0, 100);

  requireCleanError(cli("run " + (dir / "missing.onnx").string() + " --random"), "missing.onnx");
  requireCleanError(cli("run " + (dir / "truncated.onnx").string() + " --random"), "truncated.onnx");
  requireCleanError(cli("run " + (dir / "garbage.onnx").string() + " --random"), "garbage.onnx");
  requireCleanError(cli("run " + (dir / "model.txt").string() + " --random"), "expected a .onnx or .pir");
  requireCleanError(cli("run " + kPpo + " --input obs=" + wrongDtype), "input 'obs'");
  requireCleanError(cli("run " + kPpo + " --input obs=" + wrongShape), "input 'obs'");
  requireCleanError(cli("run " + kPpo + " --input obs=" + (dir / "truncated.npy").string()), "truncated");
  requireCleanError(cli("run " + kPpo + " --input observation=" + obs1), "unknown input 'observation'");
  requireCleanError(cli("run " + kPpo), "missing input 'obs'");
  requireCleanError(cli("run " + kPpo + " --input obs"), "NAME=FILE.npy");
  requireCleanError(cli("run " + kPpo + " --random --batch -3"), "--batch");
  requireCleanError(cli("dump " + (dir / "missing.pir").string()), "missing.pir");
  CHECK(cli("run " + kPpo + " --backend tpu --random").exitCode == 2);
  CHECK(cli("frobnicate").exitCode == 2);
}

TEST_CASE("cli: a failing run leaves no partial output", "[cli][bad-input]") {
  fs::path outDir = scratch() / "no_partial";
  fs::remove_all(outDir);
  std::string wrongShape = testing::sourcePath("tests/data/multi_input/in_b1_goal.npy");
  CliResult r = cli("run " + kPpo + " --input obs=" + wrongShape + " --output-dir " + outDir.string());
  CHECK(r.exitCode == 2);
  CHECK((!fs::exists(outDir) || fs::is_empty(outDir)));
}

TEST_CASE("cli: batch 0 runs and gives empty outputs", "[cli]") {
  CliResult r = cli("run " + kPpo + " --random --batch 0");
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("f32[0,12] (empty)") != std::string::npos);
}
