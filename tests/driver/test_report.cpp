// What a person sees of a compile: the DOT pictures of the graph and the kernels, the debug
// directory's life (command.txt, the previous compile's files gone, a user's files kept), and the
// report page over it — with hostile model names escaped in every one of them.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "policyc/codegen/kernel_program.h"
#include "policyc/driver/compile.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/driver/report.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/support/escape.h"
#include "policyc/support/progress.h"
#include "support/cli.h"
#include "support/fixtures.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

fs::path scratch() { return testing::scratchDir("policyc-test-report"); }

// A two-layer graph whose names try to break out of every format they are printed in.
constexpr const char* kHostile = "x\"];evil[label=\"\\N\n<script>alert(1)</script>&";

std::unique_ptr<ir::Graph> hostileGraph() {
  auto g = std::make_unique<ir::Graph>(std::string("g\"") + kHostile);
  ir::Value* x = g->addInput(kHostile, {ir::DType::F32, {ir::Dim::batch(), 8}});
  ir::Value* w = g->addParam("w", ir::Tensor(ir::DType::F32, {8, 8}));
  ir::Node* fc = g->addOp(ir::Op::Linear, {x, w}, {}, std::string("fc") + kHostile);
  ir::Node* act = g->addOp(ir::Op::Tanh, {fc->output()}, {}, std::string("act") + kHostile);
  g->setOutputs({{std::string("out") + kHostile, act->output()}});
  return g;
}

// Every double-quoted DOT string in `dot` ends where it should: no raw newline, and each `"` not
// preceded by an escaping backslash closes a string that a `[`, `=`, `,`, `;`, `{` or space opened.
void requireWellFormedDot(const std::string& dot) {
  bool inString = false;
  for (size_t i = 0; i < dot.size(); ++i) {
    const char c = dot[i];
    if (inString) {
      REQUIRE(c != '\n');
      if (c == '\\') {
        ++i;  // an escape: \" or \\ (or \n, \l made by the printer)
      } else if (c == '"') {
        inString = false;
      }
    } else if (c == '"') {
      inString = true;
    }
  }
  REQUIRE_FALSE(inString);
}

}  // namespace

TEST_CASE("escape: dot and html rules", "[report][escape]") {
  CHECK(escape::dot("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(escape::dot("line\nbreak") == "line\\\\x0abreak");
  CHECK(escape::dot("plain name_1") == "plain name_1");
  CHECK(escape::html("<a href='x'>&\"") == "&lt;a href=&#39;x&#39;&gt;&amp;&quot;");
  CHECK(escape::html("caf\xc3\xa9\n") == "caf\\xc3\\xa9\\x0a");
  CHECK(escape::html("kernel_1 [batch,64]") == "kernel_1 [batch,64]");
}

TEST_CASE("pictures: the graph and the kernels as DOT, names escaped, ids from positions", "[report]") {
  auto g = hostileGraph();
  const std::string dot = ir::printDot(*g, "opt");
  requireWellFormedDot(dot);
  CHECK(dot.find("<script>") != std::string::npos);  // as text inside a label: the SVG writer escapes it
  CHECK(dot.find("x\\\"];evil[label=\\\"\\\\N\\\\x0a<script>") != std::string::npos);  // quotes, backslash and newline escaped
  CHECK(dot.find("optn0 [id=\"optn0\"") != std::string::npos);
  CHECK(dot.find("optn2 -> optn3") != std::string::npos);  // linear -> tanh (input, param, linear, tanh)

  codegen::KernelProgram program = codegen::lowerGraph(*g);
  codegen::fuseKernels(program);
  const std::string kernels = codegen::printKernelDot(program);
  requireWellFormedDot(kernels);
  CHECK(std::regex_search(kernels, std::regex("subgraph cluster_k0 \\{")));
  CHECK(kernels.find("cluster_k1") == std::string::npos);  // linear + tanh: one kernel
  CHECK(kernels.find("k0n0 -> k0n1") != std::string::npos);

  // Graphviz reads both, and its SVG holds the hostile text only escaped.
  for (const std::string& text : {dot, kernels}) {
    const std::string svg = driver::renderSvg(text);
    CHECK(svg.find("<svg") != std::string::npos);
    CHECK(svg.find("<script>") == std::string::npos);
    CHECK(svg.find("&lt;script&gt;") != std::string::npos);
  }
  CHECK_THROWS_AS(driver::renderSvg("digraph { a -> }"), Error);
}

TEST_CASE("debug dir: a new compile removes exactly the files the last one listed, nothing of the user's", "[report][debug]") {
  const fs::path dir = scratch() / "lifecycle";
  fs::create_directories(dir);
  std::ofstream(dir / "notes.txt") << "a file of the user's, older than any compile\n";
  std::ofstream(scratch() / "outside.txt") << "beside the directory\n";
  driver::setInvocation("test", "policyc test --flag");
  {
    driver::DebugDir d(dir, "backend: test\n");
    d.write("stale_stage.txt", "from the first compile\n");
    std::ofstream(dir / "output_code.cpp") << "// what a backend's build wrote\n";
    d.recordBuildFiles();
    driver::recordDebugFiles(dir, {"profile.json"});
    std::ofstream(dir / "profile.json") << "{}";
  }
  // Written during that compile, but not by policyc: kept (a --debug-dir of /tmp or $HOME).
  std::ofstream(dir / "later_user_file.txt") << "another program's\n";
  // A manifest naming something outside the directory (a damaged or planted one) is not obeyed.
  std::ofstream(dir / ".policyc-files", std::ios::app) << "../outside.txt\n";
  const std::string command = testing::slurp(dir / "command.txt");
  CHECK(command.find("command: test\n") != std::string::npos);
  CHECK(command.find("command line: policyc test --flag\n") != std::string::npos);
  CHECK(command.find("backend: test\n") != std::string::npos);
  CHECK(command.find("cpu: ") != std::string::npos);
  {
    driver::DebugDir again(dir);
    again.write("fresh.txt", "second\n");
  }
  CHECK_FALSE(fs::exists(dir / "stale_stage.txt"));
  CHECK_FALSE(fs::exists(dir / "output_code.cpp"));
  CHECK_FALSE(fs::exists(dir / "profile.json"));
  CHECK(fs::exists(dir / "fresh.txt"));
  CHECK(fs::exists(dir / "notes.txt"));
  CHECK(fs::exists(dir / "later_user_file.txt"));
  CHECK(fs::exists(scratch() / "outside.txt"));
  CHECK(testing::slurp(dir / "command.txt").find("backend: test") == std::string::npos);
  CHECK(testing::slurp(dir / ".policyc-files") == "command.txt\nfresh.txt\n");
  driver::setInvocation("library", "");
}

TEST_CASE("report: a compile's debug directory as one page linked to code and nodes", "[report]") {
  const fs::path dir = scratch() / "compile";
  auto g = hostileGraph();
  driver::CompileRequest request;
  request.backend = codegen::Backend::Llvm;
  request.jit = true;
  request.debugDir = dir.string();
  request.cpp.name = "model";
  driver::compileGraph(*g, request);

  for (const char* f : {"command.txt", "graph_imported.svg", "graph_optimized.svg", "kernels.svg", "kernels.json", "nodes.json",
                        "index.html", "code_module.ll.html"}) {
    INFO(f);
    CHECK(fs::exists(dir / f));
  }
  const std::string html = testing::slurp(dir / "index.html");
  CHECK(html.find("<script") == std::string::npos);  // no script, and no model text became one
  CHECK(html.find("&lt;script&gt;") != std::string::npos);
  for (const char* section : {"id=\"command\"", "id=\"stages\"", "id=\"passes\"", "id=\"graphs\"", "id=\"kernels\"", "id=\"nodes\""}) {
    INFO(section);
    CHECK(html.find(section) != std::string::npos);
  }
  // The kernel's row links to its definition in module.ll, and that line is where it is defined.
  std::smatch m;
  REQUIRE(std::regex_search(html, m, std::regex("href=\"code_module\\.ll\\.html#L([0-9]+)\"")));
  const size_t line = std::stoul(m[1]);
  std::ifstream ll(dir / "module.ll");
  std::string text;
  for (size_t i = 0; i < line && std::getline(ll, text); ++i) {
  }
  CHECK(text.rfind("define ", 0) == 0);
  const nlohmann::json kernels = nlohmann::json::parse(testing::slurp(dir / "kernels.json"));
  REQUIRE(kernels.size() == 1);
  CHECK(text.find("@" + kernels[0]["name"].get<std::string>() + "(") != std::string::npos);
  // Graph nodes link to the kernel that computes them, kernels to their nodes and cluster.
  CHECK(html.find("href=\"#kernel-row-0\"") != std::string::npos);
  CHECK(html.find("href=\"#k0n0\"") != std::string::npos);
  CHECK(std::regex_search(html, std::regex("href=\"#node-[0-9]+\"")));
  CHECK(html.find("id=\"k0n0\"") != std::string::npos);  // the kernel's first node, in the inlined kernels.svg

  // A profile written later shows up when the report is written again.
  std::ofstream(dir / "profile.json") << R"({"rows": [{"batch": 4, "threads": 1, "median_us": 2.5,
      "kernels": [{"name": ")" << kernels[0]["name"].get<std::string>() << R"(", "us_per_call": 1.5, "gflops": 3, "gbps": 4}]}]})";
  driver::writeReport(dir);
  const std::string withProfile = testing::slurp(dir / "index.html");
  CHECK(withProfile.find("id=\"profile\"") != std::string::npos);
  CHECK(withProfile.find("batch 4, 1 thread(s)") != std::string::npos);
}

TEST_CASE("report: any directory gets a page of what it has, a missing one is an error", "[report]") {
  const fs::path empty = scratch() / "empty";
  fs::create_directories(empty);
  std::ofstream(empty / "kernels.json") << "{ not json";
  const fs::path index = driver::writeReport(empty);
  CHECK(fs::exists(index));
  CHECK(testing::slurp(index).find("id=\"files\"") != std::string::npos);
  CHECK_THROWS_AS(driver::writeReport(scratch() / "no-such-dir"), Error);
}

TEST_CASE("progress: plain lines in a log, one line redrawn on a terminal", "[report][progress]") {
  // A log (not a terminal): one line per step, nothing when off.
  std::FILE* log = std::tmpfile();
  REQUIRE(log);
  {
    support::Progress p("autotune", 2, true, log);
    p.step("batch 1");
    p.step("batch\n16");  // model text in `what` stays one line
  }
  {
    support::Progress off("minify", 0, false, log);
    off.step("nothing");
  }
  std::rewind(log);
  std::string text;
  for (int c; (c = std::fgetc(log)) != EOF;) text += static_cast<char>(c);
  std::fclose(log);
  CHECK(text == "autotune 1/2: batch 1\nautotune 2/2: batch\\x0a16\n");

  // A terminal: the bar is redrawn in place (\r), a note clears it and stays, finish ends the line.
  int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  std::FILE* tty = std::fopen(::ptsname(master), "w");
  REQUIRE(tty);
  {
    support::Progress p("minify", 0, true, tty);
    p.step("candidate 1");
    p.note("accepted");
    p.step("candidate 2");
  }
  std::fclose(tty);
  std::string shown;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) {
    shown.append(buf, static_cast<size_t>(n));
    if (shown.find("candidate 2") != std::string::npos && shown.back() == '\n') break;
  }
  ::close(master);
  CHECK(shown.find("\rminify [1] candidate 1") != std::string::npos);
  CHECK(shown.find("\r\033[Kaccepted") != std::string::npos);
  CHECK(shown.find("\rminify [2] candidate 2") != std::string::npos);
  CHECK(shown.find("minify 1:") == std::string::npos);  // no plain lines on a terminal
  // Every redrawn line fits the terminal (80 columns where, as here, it does not say): a line that
  // wrapped could not be taken back by \r.
  size_t start = 0;
  while ((start = shown.find("\rminify [", start)) != std::string::npos) {
    size_t end = shown.find_first_of("\r\n", start + 1);
    CHECK((end == std::string::npos ? shown.size() : end) - start - 1 <= 80);
    ++start;
  }
}

TEST_CASE("debug dir: compiles into one directory take turns", "[report][debug]") {
  const fs::path dir = scratch() / "turns";
  std::atomic<bool> firstDone{false};
  std::atomic<bool> secondStarted{false};
  bool keptMeanwhile = false;  // checked on the main thread: Catch2's assertions are not thread-safe
  std::thread first([&] {
    driver::DebugDir d(dir);
    d.write("first.txt", "1\n");
    while (!secondStarted.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the second waits meanwhile
    keptMeanwhile = fs::exists(dir / "first.txt");                 // not removed under our feet
    firstDone.store(true);
  });
  while (!fs::exists(dir / "first.txt")) std::this_thread::yield();
  secondStarted.store(true);
  {
    driver::DebugDir second(dir);  // blocks until the first has finished
    CHECK(firstDone.load());
    CHECK_FALSE(fs::exists(dir / "first.txt"));  // then it starts afresh
  }
  first.join();
  CHECK(keptMeanwhile);
}
