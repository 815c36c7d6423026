// The policyc command line end to end: dump, run, and every kind of bad input (exit 2, one line).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include <onnx/onnx_pb.h>

#include "policyc/driver/model_io.h"
#include "support/cli.h"
#include "support/fixtures.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

using testing::CliResult;
using testing::slurp;

fs::path scratch() { return testing::scratchDir("policyc-test-cli"); }
CliResult cli(const std::string& args) { return testing::runCli(args); }
// A bad-input failure: exit code 2 and exactly one line on stderr containing `text`.
void requireCleanError(const CliResult& r, const std::string& text) { testing::requireCleanError(r, text, false); }

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
      ir::Tensor got = driver::readTensor((outDir / (name + ".npy")).string());
      ir::Tensor want = driver::readTensor(path);
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

TEST_CASE("cli: an unsupported ONNX operator is one error naming node, op type and opset", "[cli][bad-input]") {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("sampler");
  for (const char* name : {"x", "y"}) {
    onnx::ValueInfoProto* v = name[0] == 'x' ? graph->add_input() : graph->add_output();
    v->set_name(name);
    auto* tensor = v->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_param("batch");
    tensor->mutable_shape()->add_dim()->set_dim_value(4);
  }
  onnx::NodeProto* node = graph->add_node();
  node->set_name("Bernoulli_0");
  node->set_op_type("Bernoulli");  // a random sampler: outside what a deterministic compiler runs
  node->add_input("x");
  node->add_output("y");
  fs::path path = scratch() / "sampler.onnx";
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();

  CliResult r = cli("run " + path.string() + " --random");
  requireCleanError(r, "unsupported operator 'Bernoulli' (opset 13)");
  CHECK(r.err.find("node 'Bernoulli_0'") != std::string::npos);
}

TEST_CASE("cli: dump stages and pass options", "[cli][passes]") {
  CliResult optimized = cli("dump " + kPpo + " --stage optimized");
  REQUIRE(optimized.exitCode == 0);
  CHECK(optimized.out.find("f32[batch,512]") != std::string::npos);
  CHECK(optimized.out.find("= split(") != std::string::npos);
  CHECK(optimized.out.find("= gemm(") == std::string::npos);

  CliResult unfused = cli("dump " + kPpo + " --stage optimized --disable-pass fuse-horizontal");
  REQUIRE(unfused.exitCode == 0);
  CHECK(unfused.out.find("= split(") == std::string::npos);

  CliResult only = cli("dump " + kPpo + " --stage optimized --passes=canonicalize");
  REQUIRE(only.exitCode == 0);
  CHECK(only.out.find("= linear(") != std::string::npos);
  CHECK(only.out.find("= split(") == std::string::npos);

  CliResult printed = cli("dump " + kPpo + " --stage optimized --print-after all");
  REQUIRE(printed.exitCode == 0);
  CHECK(printed.err.find("// ----- after canonicalize (6 gemm->linear)") != std::string::npos);
  CHECK(printed.err.find("// ----- after dce") != std::string::npos);

  CliResult pre = cli("dump " + kPpo + " --stage pre-fusion");
  CliResult post = cli("dump " + kPpo + " --stage post-fusion");
  REQUIRE(pre.exitCode == 0);
  REQUIRE(post.exitCode == 0);
  CHECK(pre.out.find("kernel program ppo_mlp: 8 kernels") != std::string::npos);
  CHECK(post.out.find("kernel program ppo_mlp: 5 kernels") != std::string::npos);
  CHECK(post.out.find("kernel fused_linear_bias_tanh_0 (linear) domain [batch,512]") != std::string::npos);
  CHECK(post.out.find("from \"/pi_fc0/Gemm\"") != std::string::npos);

  CliResult runOpt = cli("run " + kPpo + " --random --batch 2 --seed 3 --optimize");
  CliResult runRef = cli("run " + kPpo + " --random --batch 2 --seed 3");
  REQUIRE(runOpt.exitCode == 0);
  CHECK(runOpt.out.size() == runRef.out.size());

  requireCleanError(cli("dump " + kPpo + " --stage optimized --passes=canonicalize,bogus"), "unknown pass 'bogus'");
  requireCleanError(cli("dump " + kPpo + " --stage optimized --disable-pass nope"), "unknown pass 'nope'");
}

TEST_CASE("cli: run --backend cpp compiles once into the cache and matches the interpreter", "[cli][cpp]") {
  fs::path cache = scratch() / "cache";
  fs::remove_all(cache);
  std::string env = "POLICYC_CACHE_DIR=" + cache.string() + " ";
  fs::path cppOut = scratch() / "cpp_out", refOut = scratch() / "ref_out";
  std::string common = " --random --batch 3 --seed 5 --output-dir ";
  auto runWithEnv = [&](const std::string& args) {
    fs::path errFile = scratch() / "stderr_env.txt";
    std::string cmd = env + POLICYC_CLI + " " + args + " > /dev/null 2>" + errFile.string();
    int status = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(errFile));
  };
  auto first = runWithEnv("run " + kPpo + " --backend cpp" + common + cppOut.string());
  REQUIRE(first.first == 0);
  CHECK(first.second.find("into the cache") != std::string::npos);
  auto second = runWithEnv("run " + kPpo + " --backend cpp" + common + cppOut.string());
  REQUIRE(second.first == 0);
  CHECK(second.second.find("into the cache") == std::string::npos);  // the cached .so was used
  CHECK(std::distance(fs::directory_iterator(cache), fs::directory_iterator()) == 1);
  REQUIRE(cli("run " + kPpo + common + refOut.string()).exitCode == 0);
  for (const char* name : {"action_dist_inputs", "vf"}) {
    ir::Tensor got = driver::readTensor((cppOut / (std::string(name) + ".npy")).string());
    ir::Tensor want = driver::readTensor((refOut / (std::string(name) + ".npy")).string());
    REQUIRE(got.shape() == want.shape());
    for (int64_t i = 0; i < got.numel(); ++i) CHECK(std::abs(got.getAsDouble(i) - want.getAsDouble(i)) < 1e-4);
  }
  // A different pass option is a different compile.
  REQUIRE(runWithEnv("run " + kPpo + " --backend cpp --disable-pass fuse-horizontal" + common + cppOut.string()).first == 0);
  CHECK(std::distance(fs::directory_iterator(cache), fs::directory_iterator()) == 2);
}

TEST_CASE("cli: dump pictures, and pass options that are never silently ignored", "[cli][report]") {
  CliResult dot = cli("dump " + kPpo + " --format dot");
  REQUIRE(dot.exitCode == 0);
  CHECK(dot.out.rfind("digraph \"ppo_mlp\" {", 0) == 0);
  CHECK(dot.out.find("gemm\\n") != std::string::npos);  // imported: gemm nodes

  const fs::path svg = scratch() / "kernels.svg";
  CliResult kernels = cli("dump " + kPpo + " --stage post-fusion --format svg -o " + svg.string());
  REQUIRE(kernels.exitCode == 0);
  const std::string picture = slurp(svg);
  CHECK(picture.find("<svg") != std::string::npos);
  CHECK(picture.find("id=\"k4n0\"") != std::string::npos);  // ppo_mlp's five kernels, as clusters of their nodes
  CHECK(picture.find("id=\"k5n0\"") == std::string::npos);

  // A pass option implies the optimised graph, and contradicts an explicit --stage imported.
  CliResult implied = cli("dump " + kPpo + " --disable-pass fuse-horizontal");
  REQUIRE(implied.exitCode == 0);
  CHECK(implied.out.find("= linear(") != std::string::npos);
  requireCleanError(cli("dump " + kPpo + " --stage imported --passes dce"), "use --stage optimized");
  requireCleanError(cli("dump " + kPpo + " --disable-pass fuse-horizontl"), "unknown pass 'fuse-horizontl'");
}

TEST_CASE("cli: a shared object given as a model and a damaged .npy say what they are", "[cli][bad-input]") {
  const fs::path lib = scratch() / "libfake.so.6";
  std::ofstream(lib, std::ios::binary) << std::string("\x7f" "ELF\x02\x01\x01", 7) << std::string(64, '\0');
  requireCleanError(cli("dump " + lib.string()), "is a shared object, not a model file");
  requireCleanError(cli("run " + lib.string()), "is not a loadable shared object");  // loaded as one: the loader says why not
  const fs::path npy = scratch() / "damaged.npy";
  std::ofstream(npy, std::ios::binary) << std::string("\x93NUMPY\x20\x00\x10\x00", 10) << std::string(16, ' ');
  requireCleanError(cli("run " + kPpo + " --input obs=" + npy.string()), "a damaged .npy file: its format version byte is 32");
}

TEST_CASE("cli: report writes one page of a debug directory, bench adds its profile", "[cli][report]") {
  const fs::path dir = scratch() / "bench-debug";
  CliResult bench = cli("bench " + kPpo + " --batch 4 --threads 1 --min-time 0 --min-calls 5 --warmup 1 --profile --debug-dir " +
                        dir.string());
  INFO(bench.err);
  REQUIRE(bench.exitCode == 0);
  CHECK(bench.out.find("wrote the profile and the report") != std::string::npos);
  REQUIRE(fs::exists(dir / "profile.json"));
  CHECK(slurp(dir / "command.txt").find("command: bench\n") != std::string::npos);
  CHECK(slurp(dir / "index.html").find("id=\"profile\"") != std::string::npos);

  fs::remove(dir / "index.html");
  CliResult report = cli("report " + dir.string());
  REQUIRE(report.exitCode == 0);
  CHECK(report.out == "wrote " + (dir / "index.html").string() + "\n");
  CHECK(fs::exists(dir / "index.html"));
  requireCleanError(cli("report " + (scratch() / "nowhere").string()), "is not a debug directory");
  requireCleanError(cli("bench " + kPpo + " --compare-backends --debug-dir " + dir.string()), "--debug-dir is one compile's");
}

TEST_CASE("cli: check --backend cpp compiles through the cache once", "[cli][cpp]") {
  const fs::path cache = scratch() / "check-cache";
  ::setenv("POLICYC_CACHE_DIR", cache.string().c_str(), 1);
  CliResult first = cli("check " + kPpo + " --backend cpp");
  CliResult second = cli("check " + kPpo + " --backend cpp");
  ::unsetenv("POLICYC_CACHE_DIR");
  INFO(first.err << second.err);
  REQUIRE(first.exitCode == 0);
  REQUIRE(second.exitCode == 0);
  CHECK(first.err.find("into the cache") != std::string::npos);
  CHECK(second.err.find("into the cache") == std::string::npos);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(cache)) entries += e.path().extension() == ".so";
  CHECK(entries == 1);
}

TEST_CASE("cli: bench --baseline torch prints the seed's table, --plot draws the rows", "[cli][report]") {
  const fs::path plot = scratch() / "rows.svg";
  CliResult r = cli("bench " + kPpo + " --batch 1,4 --min-time 0 --min-calls 5 --warmup 1 --baseline torch --plot " + plot.string());
  INFO(r.out << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.find("baseline torch (PyTorch eager") != std::string::npos);
  CHECK(r.out.find("batch size          eager       compiled   speedup") != std::string::npos);
  CHECK(std::regex_search(r.out, std::regex("\n +4 +[0-9]+ +[0-9]+ +[0-9.]+x\n")));  // batch 4: eager, compiled, speed-up
  const std::string svg = slurp(plot);
  CHECK(svg.find("<svg") != std::string::npos);
  requireCleanError(cli("bench " + kPpo + " --min-time 0 --min-calls 5 --plot " + (scratch() / "rows.txt").string()), "--plot writes F.svg, F.png or F.pdf");
}
