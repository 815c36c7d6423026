// The minifier: suffix truncation, delta debugging over node windows, and dead-code and unused
// input removal by construction. A candidate keeps a subset of the op nodes; values it reads from
// removed nodes become graph inputs fed with the tensors recorded on the original run. Each
// candidate is written as .pir + .npy and judged by `policyc check` in a child process, so a
// crash or hang of compiled code never takes the minifier down.
#include "policyc/debug/minify.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/support/progress.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/npy.h"
#include "policyc/support/files.h"

extern char** environ;

namespace policyc::debug {

namespace fs = std::filesystem;

FailureKind parseFailureKind(const std::string& text) {
  if (text == "accuracy") return FailureKind::Accuracy;
  if (text == "compile") return FailureKind::Compile;
  if (text == "crash") return FailureKind::Crash;
  fail("--failure must be accuracy, compile or crash, got '{}'", text);
}

const char* failureKindName(FailureKind kind) {
  switch (kind) {
    case FailureKind::Accuracy: return "accuracy";
    case FailureKind::Compile: return "compile";
    case FailureKind::Crash: return "crash";
  }
  return "?";
}

namespace {

void writeTensorNpy(const fs::path& path, const ir::Tensor& t) {
  runtime::NpyArray array{std::string(ir::dtypeName(t.dtype())), t.shape(),
                          std::vector<std::byte>(t.bytes(), t.bytes() + t.nbytes())};
  asError([&] { runtime::writeNpy(path.string(), array); });
}

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Single quotes for a POSIX shell.
std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Candidate {
  std::unique_ptr<ir::Graph> graph;
  std::vector<ir::Tensor> inputs;                       // in the candidate's signature order
  std::vector<std::string> inputNames;
};

struct ChildOutcome {
  int exitCode = -1;     // -1 when killed by a signal
  int signal = 0;
  bool timedOut = false;
  std::string output;    // stdout + stderr
};

class Minifier {
 public:
  Minifier(const ir::Graph& g, const std::vector<ir::Tensor>& inputs, const MinifyOptions& o) : graph_(g), o_(o) {
    // Every value of the original run, for the inputs of candidates that cut the graph.
    std::vector<ir::Value*> in = g.inputs();
    for (size_t i = 0; i < in.size(); ++i) recorded_.emplace(in[i], inputs.at(i));
    ir::InterpreterOptions options;
    options.onNode = [&](const ir::Node& n, const std::vector<ir::Tensor>& outs) {
      for (size_t i = 0; i < outs.size(); ++i) recorded_.emplace(n.output(i), outs[i]);
    };
    ir::interpret(g, inputs, options);
    for (const auto& node : g.nodes()) {
      if (node->isOp()) ops_.push_back(node.get());
    }
  }

  MinifyResult run() {
    auto start = std::chrono::steady_clock::now();
    MinifyResult r;
    r.startNodes = ops_.size();
    std::vector<size_t> all(ops_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    say(fmt::format("Started with {} nodes; looking for {} failure{}", ops_.size(), o_.failure == FailureKind::Accuracy ? "an accuracy" : o_.failure == FailureKind::Compile ? "a compile" : "a crash",
                    o_.match.empty() ? "" : fmt::format(" whose output contains '{}'", o_.match)));
    if (!fails(all)) {
      say("the graph does not show the failure: nothing to minify");
      r.candidatesTried = tried_;
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return r;
    }
    r.reproduced = true;
    best_ = all;
    checkpoint();
    truncateSuffix();
    tryLastAlone();
    deltaDebug();
    r.endNodes = best_.size();
    r.candidatesTried = tried_;
    r.reproScript = (fs::path(o_.outDir) / "repro.sh").string();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    say(fmt::format("SUCCESS: {} -> {} node{} ({} candidates, {:.1f} s); repro: {}", r.startNodes, r.endNodes,
                    r.endNodes == 1 ? "" : "s", tried_,
                    r.seconds, r.reproScript));
    return r;
  }

 private:
  void say(const std::string& line) {
    bar_.clear();
    if (o_.progress) o_.progress(line);
  }

  // The graph of the kept op nodes (indices into ops_, any order).
  Candidate build(const std::vector<size_t>& keep) const {
    std::set<const ir::Node*> kept;
    for (size_t i : keep) kept.insert(ops_[i]);
    Candidate c;
    c.graph = std::make_unique<ir::Graph>(graph_.name());
    ir::Graph& g = *c.graph;
    std::map<const ir::Value*, ir::Value*> mapped;
    std::map<const ir::Value*, std::string> outputName;
    for (const auto& [name, v] : graph_.outputs()) outputName.emplace(v, name);
    auto valueFor = [&](const ir::Value* v) -> ir::Value* {
      auto it = mapped.find(v);
      if (it != mapped.end()) return it->second;
      ir::Value* nv;
      if (v->producer()->kind() == ir::NodeKind::Param) {
        nv = g.addParam(v->name(), v->producer()->paramData(), v->producer()->provenance());
      } else {  // a graph input, or the value of a removed node: fed with what it was
        nv = g.addInput(v->name(), v->type());
        c.inputs.push_back(recorded_.at(v));
        c.inputNames.push_back(v->name());
      }
      mapped.emplace(v, nv);
      return nv;
    };
    for (const ir::Node* n : ops_) {
      if (!kept.count(n)) continue;
      std::vector<ir::Value*> in;
      for (const ir::Value* v : n->inputs()) in.push_back(valueFor(v));
      std::vector<std::string> names;
      std::vector<ir::TensorType> types;
      for (size_t i = 0; i < n->numOutputs(); ++i) {
        names.push_back(n->output(i)->name());
        types.push_back(n->output(i)->type());
      }
      ir::Node* m = g.addOp(n->op(), in, n->attrs(), names, types, n->provenance());
      for (size_t i = 0; i < n->numOutputs(); ++i) mapped.emplace(n->output(i), m->output(i));
    }
    // Outputs: the original outputs that survive, and every kept value no kept node reads.
    std::vector<std::pair<std::string, ir::Value*>> outs;
    for (const ir::Node* n : ops_) {
      if (!kept.count(n)) continue;
      for (size_t i = 0; i < n->numOutputs(); ++i) {
        const ir::Value* v = n->output(i);
        bool read = false;
        for (const ir::Node* u : graph_.users(v)) read = read || kept.count(u);
        auto named = outputName.find(v);
        if (named != outputName.end()) {
          outs.emplace_back(named->second, mapped.at(v));
        } else if (!read) {
          outs.emplace_back(v->name(), mapped.at(v));
        }
      }
    }
    g.setOutputs(outs);
    return c;
  }

  // Writes the candidate as DIR/repro.pir, DIR/inputs/NAME.npy; returns the check command.
  // Writes the candidate into `dir`; returns the check command's arguments after the policyc
  // binary, with paths relative to `dir` (the command runs there), so that a repro directory can
  // be moved or attached to a bug report.
  std::string write(const Candidate& c, const fs::path& dir) const {
    fs::create_directories(dir / "inputs");
    ir::writePir(*c.graph, (dir / "repro.pir").string());
    std::string args = "check repro.pir --backend " + std::string(codegen::backendName(o_.backend)) + (o_.fuse ? "" : " --no-fuse") +
                       fmt::format(" --rtol {} --atol {}", o_.rtol, o_.atol);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const std::string npy = fmt::format("inputs/in{}.npy", i);
      writeTensorNpy(dir / npy, c.inputs[i]);
      args += " --input " + shellQuote(c.inputNames[i] + "=" + npy);
    }
    return args;
  }

  ChildOutcome runChild(const std::string& command, const fs::path& dir) const {
    fs::path log = dir / "child.log";
    std::string shell = "cd " + shellQuote(dir.string()) + " && exec " + shellQuote(o_.policyc) + " " + command + " > " +
                        shellQuote(log.string()) + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", shell.c_str(), nullptr};
    // The child's temporary files (a failed build keeps its directory) go into the candidate's
    // directory, which is removed after it.
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      if (std::string_view(*e).rfind("TMPDIR=", 0) != 0) env.emplace_back(*e);
    }
    env.push_back("TMPDIR=" + dir.string());
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    // Its own process group, so that a timeout also stops the C++ compiler it started.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t pid;
    int spawned = posix_spawn(&pid, "/bin/sh", nullptr, &attr, const_cast<char* const*>(argv), envp.data());
    posix_spawnattr_destroy(&attr);
    if (spawned != 0) {
      fail("cannot start a child process for '{}'", command);
    }
    ChildOutcome out;
    auto start = std::chrono::steady_clock::now();
    int status = 0;
    for (;;) {
      pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (done < 0 && errno != EINTR) fail("cannot wait for a candidate's process: {}", strerror(errno));
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > o_.timeoutSeconds) {
        kill(-pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        out.timedOut = true;
        break;
      }
      timespec ts{0, 5'000'000};
      nanosleep(&ts, nullptr);
    }
    if (WIFEXITED(status)) out.exitCode = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
    out.output = slurp(log);
    return out;
  }

  // Whether the kept nodes still fail the same way.
  bool fails(const std::vector<size_t>& keep) {
    if (keep.empty()) return false;
    ++tried_;
    bar_.step(fmt::format("candidate of {} of {} nodes (best so far {})", keep.size(), ops_.size(), best_.empty() ? ops_.size() : best_.size()));
    Candidate c;
    try {
      c = build(keep);
    } catch (const Error&) {
      return false;  // not a valid graph (cannot happen for a subset; kept for safety)
    }
    fs::path dir = scratch_ / fmt::format("c{}", tried_);
    ChildOutcome r = runChild(write(c, dir), dir);
    std::error_code ec;
    fs::remove_all(dir, ec);
    bool kind = false;
    // `policyc check` runs the model in a child of its own and reports a crash as a failed check.
    const bool crashed = r.signal != 0 || r.timedOut || r.output.find("the compiled model crashed") != std::string::npos;
    switch (o_.failure) {
      case FailureKind::Accuracy: kind = !crashed && r.exitCode == 1 && r.output.find("FAIL") != std::string::npos; break;
      // Both backends say "the C++ compiler failed" / "the LLVM compiler failed" (codegen).
      case FailureKind::Compile: kind = r.exitCode == 2 && r.output.find(" compiler failed") != std::string::npos; break;
      case FailureKind::Crash: kind = crashed; break;
    }
    return kind && (o_.match.empty() || r.output.find(o_.match) != std::string::npos);
  }

  void accept(std::vector<size_t> keep, const char* how) {
    std::sort(keep.begin(), keep.end());
    best_ = std::move(keep);
    say(fmt::format("{}: {} node{} still fail{}", how, best_.size(), best_.size() == 1 ? "" : "s", best_.size() == 1 ? "s" : ""));
    checkpoint();
  }

  // The best candidate so far, written to the output directory with its repro script.
  void checkpoint() const {
    Candidate c = build(best_);
    fs::path dir = o_.outDir;
    std::error_code ec;
    fs::remove_all(dir / "inputs", ec);
    std::string args = write(c, dir);
    std::string script = "#!/bin/sh\n# policyc minify: " + std::to_string(best_.size()) + (best_.size() == 1 ? " node that shows" : " nodes that show") + " the " +
                         failureKindName(o_.failure) + " failure\n";
    // Movable: the files are found beside the script; POLICYC picks the compiler (default: the
    // policyc that wrote this script while it exists, else the one on PATH).
    script += "cd \"$(dirname \"$0\")\" || exit 2\n";
    script += "if [ -z \"${POLICYC:-}\" ]; then\n  POLICYC=" + shellQuote(o_.policyc) + "\n  [ -x \"$POLICYC\" ] || POLICYC=policyc\nfi\n";
    if (const char* fault = std::getenv("POLICYC_INJECT_FAULT"); fault && *fault) {
      script += "export POLICYC_INJECT_FAULT=" + shellQuote(fault) + "\n";
    }
    script += "exec \"$POLICYC\" " + args + "\n";
    std::ofstream f(dir / "repro.sh");
    f << script;
    f.close();
    fs::permissions(dir / "repro.sh", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                          fs::perms::others_read | fs::perms::others_exec);
  }

  // The shortest prefix (in topological order) that still fails, by bisection.
  void truncateSuffix() {
    size_t lo = 1, hi = best_.size();  // the prefix of length hi fails
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      std::vector<size_t> prefix(best_.begin(), best_.begin() + static_cast<std::ptrdiff_t>(mid));
      if (fails(prefix)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (hi < best_.size()) accept(std::vector<size_t>(best_.begin(), best_.begin() + static_cast<std::ptrdiff_t>(hi)), "suffix truncated");
  }

  // After truncation the last node is the one the failure needs: often it fails on its own.
  void tryLastAlone() {
    if (best_.size() > 1 && fails({best_.back()})) accept({best_.back()}, "the last node alone");
  }

  // ddmin over node windows: remove a window while the rest still fails, halving the window size.
  void deltaDebug() {
    size_t chunks = 2;
    while (best_.size() > 1) {
      size_t n = best_.size();
      chunks = std::min(chunks, n);
      bool removed = false;
      for (size_t c = 0; c < chunks && !removed; ++c) {
        size_t begin = n * c / chunks, end = n * (c + 1) / chunks;
        std::vector<size_t> rest;
        for (size_t i = 0; i < n; ++i) {
          if (i < begin || i >= end) rest.push_back(best_[i]);
        }
        if (fails(rest)) {
          accept(rest, fmt::format("removed a window of {}", end - begin).c_str());
          removed = true;
          chunks = std::max<size_t>(chunks - 1, 2);
        }
      }
      if (removed) continue;
      if (chunks >= n) break;
      chunks = std::min(n, chunks * 2);
    }
  }

  const ir::Graph& graph_;
  const MinifyOptions& o_;
  std::map<const ir::Value*, ir::Tensor> recorded_;
  std::vector<const ir::Node*> ops_;  // op nodes in topological order
  std::vector<size_t> best_;
  size_t tried_ = 0;
  support::Progress bar_{"minify", 0, o_.candidateProgress};
  files::TempDir scratchDir_{"policyc-minify"};
  const fs::path& scratch_ = scratchDir_.path();
};

}  // namespace

MinifyResult minify(const ir::Graph& graph, const std::vector<ir::Tensor>& inputs, const MinifyOptions& options) {
  if (options.outDir.empty()) fail("minify needs an output directory (-o DIR)");
  if (options.policyc.empty()) fail("minify needs the policyc executable to run candidates");
  std::error_code ec;
  fs::create_directories(options.outDir, ec);
  if (ec) fail("cannot create '{}': {}", options.outDir, ec.message());
  MinifyOptions o = options;
  o.outDir = fs::absolute(options.outDir).string();
  Minifier m(graph, inputs, o);
  return m.run();
}

}  // namespace policyc::debug
