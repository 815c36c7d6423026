// The debugging tools end to end through the CLI: `policyc check` (and --per-node), `policyc
// minify` on faults injected with POLICYC_INJECT_FAULT, and their repro scripts.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "policyc/ir/text.h"
#include "policyc/passes/pass_manager.h"
#include "support/cli.h"
#include "support/scratch_dir.h"
#include "support/fixtures.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int exitCode = -1;  // -1: killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr
};

// This process's directory for outputs and for the temporary files of the commands it runs (a
// crashing `check` cannot clean up after itself), removed at exit.
fs::path scratch() { return testing::scratchDir("policyc-test-debug-tools"); }

Outcome sh(const std::string& command) {
  fs::path log = scratch() / "out.txt";
  std::string cmd = "TMPDIR='" + scratch().string() + "' " + command + " > '" + log.string() + "' 2>&1";
  int status = std::system(cmd.c_str());
  Outcome o;
  if (WIFEXITED(status)) o.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  std::ifstream f(log);
  o.output.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  // A shell reports its child's death by a signal as 128 + the signal.
  if (o.exitCode > 128 && o.exitCode < 160) {
    o.signal = o.exitCode - 128;
    o.exitCode = -1;
  }
  return o;
}

std::string cli() { return std::string(POLICYC_CLI); }
std::string model(const std::string& name) { return testing::sourcePath("examples/models/" + name + ".onnx"); }

}  // namespace

TEST_CASE("debug tools: check passes on every fixture without a fault", "[debug][check]") {
  for (const char* m : {"ppo_mlp", "atari_cnn", "impala_cnn", "sac_actor", "multi_input", "uint8_convbn"}) {
    Outcome o = sh("env -u POLICYC_INJECT_FAULT " + cli() + " check " + model(m) + " --batch 3 --threads 2");
    INFO(m << ":\n" << o.output);
    CHECK(o.exitCode == 0);
    CHECK(o.output.find("\nPASS\n") != std::string::npos);
  }
}

TEST_CASE("debug tools: minify says there is nothing to minify when the model does not fail", "[debug][minify]") {
  fs::path out = scratch() / "nothing";
  Outcome o = sh("env -u POLICYC_INJECT_FAULT " + cli() + " minify " + model("ppo_mlp") + " --failure accuracy -o " + out.string());
  INFO(o.output);
  CHECK(o.exitCode == 0);
  CHECK(o.output.find("nothing to minify") != std::string::npos);
}

TEST_CASE("debug tools: an injected fault is found, minified to at most 3 nodes and reproduced", "[debug][minify][check]") {
  struct Case {
    const char* model;
    const char* op;
    const char* kind;
    const char* backend;
  };
  // The default backend (llvm) for every kind; cpp for each kind once.
  const Case cases[] = {
      {"impala_cnn", "add", "accuracy", "llvm"}, {"impala_cnn", "max_pool", "compile", "llvm"}, {"impala_cnn", "relu", "crash", "llvm"},
      {"atari_cnn", "conv", "accuracy", "llvm"},  {"atari_cnn", "linear", "compile", "llvm"},    {"atari_cnn", "relu", "crash", "llvm"},
      {"atari_cnn", "conv", "accuracy", "cpp"},   {"atari_cnn", "linear", "compile", "cpp"},     {"impala_cnn", "relu", "crash", "cpp"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.model << " " << c.op << ":" << c.kind << " backend " << c.backend) {
      std::string env = std::string("POLICYC_INJECT_FAULT=") + c.op + ":" + c.kind + " ";
      std::string kind = c.kind;
      const std::string backend = std::string(" --backend ") + c.backend;
      const std::string compilerFailed = std::string(c.backend) == "cpp" ? "the C++ compiler failed" : "the LLVM compiler failed";
      // check: the failure, and where it is.
      Outcome check = sh(env + cli() + " check " + model(c.model) + backend + " --per-node");
      INFO("check:\n" << check.output);
      if (kind == "accuracy") {
        CHECK(check.exitCode == 1);
        CHECK(check.output.find("first diverging node") != std::string::npos);
        CHECK(check.output.find(std::string(" (") + c.op + ")") != std::string::npos);
      } else if (kind == "compile") {
        CHECK(check.exitCode == 2);
        CHECK(check.output.find(compilerFailed) != std::string::npos);
        CHECK(check.output.find(std::string(" (") + c.op + ")") != std::string::npos);  // the kernel's nodes
      } else {
        CHECK(check.exitCode == 1);  // the crash happened in a child process
        CHECK(check.output.find("the compiled model crashed: signal") != std::string::npos);
        CHECK(check.output.find(std::string(" (") + c.op + ")") != std::string::npos);  // the kernel's nodes
      }
      // minify: at most 3 op nodes, the faulty op among them.
      fs::path out = scratch() / (std::string(c.model) + "_" + c.op + "_" + c.kind + "_" + c.backend);
      Outcome min = sh(env + cli() + " minify " + model(c.model) + backend + " --failure " + kind + " -o " + out.string());
      INFO("minify:\n" << min.output);
      REQUIRE(min.exitCode == 0);
      CHECK(min.output.find("SUCCESS") != std::string::npos);
      auto repro = ir::readPir((out / "repro.pir").string());
      CHECK(repro->numOpNodes() <= 3);
      // The op as the backend sees it: after the passes (an ONNX gemm becomes a linear).
      passes::runPipeline(*repro);
      bool hasOp = false;
      for (const auto& n : repro->nodes()) hasOp = hasOp || (n->isOp() && n->info().name == std::string(c.op));
      CHECK(hasOp);
      // repro.sh: the same failure, on its own, from a directory moved elsewhere (its paths are
      // its own directory's; POLICYC names the compiler).
      const fs::path moved = scratch() / "moved" / out.filename();
      fs::create_directories(moved.parent_path());
      fs::rename(out, moved);
      CHECK(testing::slurp(moved / "repro.sh").find(out.string()) == std::string::npos);
      Outcome again = sh("cd / && env -u POLICYC_INJECT_FAULT POLICYC=" + cli() + " sh " + (moved / "repro.sh").string());
      INFO("repro.sh:\n" << again.output);
      if (kind == "accuracy") {
        CHECK(again.exitCode == 1);
        CHECK(again.output.find("FAIL") != std::string::npos);
      } else if (kind == "compile") {
        CHECK(again.exitCode == 2);
        CHECK(again.output.find(compilerFailed) != std::string::npos);
      } else {
        // check runs the model in a child: the crash is reported, not suffered.
        CHECK(again.exitCode == 1);
        CHECK(again.output.find("the compiled model crashed: signal") != std::string::npos);
      }
    }
  }
}
