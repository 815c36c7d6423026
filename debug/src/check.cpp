// The accuracy checker: allclose per output with Inductor's float64 RMSE fallback, and the
// per-node search for the first diverging value (every intermediate exposed as an output).
#include "policyc/debug/check.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>

#include "policyc/codegen/llvm_backend.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"

namespace policyc::debug {

namespace fs = std::filesystem;
using driver::compareTensors;
using driver::CompileRequest;
using driver::CompileResult;
using driver::runModel;

namespace {

double rmse(const ir::Tensor& a, const ir::Tensor& b) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.getAsDouble(i), y = b.getAsDouble(i);
    if (std::isnan(x) || std::isnan(y)) continue;
    sum += (x - y) * (x - y);
    ++n;
  }
  return n ? std::sqrt(sum / static_cast<double>(n)) : 0.0;
}

// One output under reduced precision against the fp32 reference (CheckOptions::minAgreement): its
// mean and largest |difference| against the budget, and the agreement of the action it gives — the
// argmax of each row of a discrete head, or each element of an integer output (an action the
// model picks itself).
OutputAccuracy accuracyOf(const std::string& name, const ir::Tensor& got, const ir::Tensor& want, double budgetFraction,
                          double minAgreement, bool discrete) {
  OutputAccuracy a;
  a.name = name;
  a.type = fmt::format("{}[{}]", ir::dtypeName(want.dtype()), fmt::join(want.shape(), ","));
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    a.pass = false;
    return a;
  }
  double sumAbs = 0, sumSq = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.getAsDouble(i), w = want.getAsDouble(i);
    const double d = std::isnan(g) && std::isnan(w) ? 0 : std::abs(g - w);
    sumAbs += d;
    a.maxAbs = std::max(a.maxAbs, std::isnan(d) ? INFINITY : d);
    sumSq += w * w;
  }
  const double n = static_cast<double>(std::max<int64_t>(want.numel(), 1));
  a.meanAbs = sumAbs / n;
  a.refRms = std::sqrt(sumSq / n);
  a.budget = budgetFraction * a.refRms + 1e-6;
  const bool integer = !ir::isFloat(want.dtype());
  a.pass = integer || (!std::isnan(a.meanAbs) && a.meanAbs <= a.budget);
  const int64_t width = integer ? 1 : want.shape().size() >= 2 ? want.shape().back() : 0;
  if (integer || (discrete && width >= 2)) {
    a.rows = want.numel() / width;
    int64_t same = 0;
    for (int64_t r = 0; r < a.rows; ++r) {
      int64_t bg = 0, bw = 0;
      for (int64_t c = 1; c < width; ++c) {
        if (got.getAsDouble(r * width + c) > got.getAsDouble(r * width + bg)) bg = c;
        if (want.getAsDouble(r * width + c) > want.getAsDouble(r * width + bw)) bw = c;
      }
      same += integer ? got.getAsDouble(r) == want.getAsDouble(r) : bg == bw;
    }
    a.agreement = a.rows ? static_cast<double>(same) / static_cast<double>(a.rows) : 1.0;
    a.pass = a.pass && *a.agreement >= minAgreement;
  }
  return a;
}

}  // namespace

std::pair<double, double> agreementInterval(double fraction, int64_t rows) {
  if (rows <= 0) return {0.0, 1.0};
  constexpr double z = 1.959963984540054;  // the normal distribution's 97.5% quantile
  const double n = static_cast<double>(rows), z2 = z * z;
  const double center = (fraction + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z * std::sqrt(fraction * (1 - fraction) / n + z2 / (4 * n * n)) / (1 + z2 / n);
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

namespace {

// The prefix of the names given to exposed intermediates (never a name an output already has).
constexpr const char* kExposed = "policyc.node.";

// What the crash handler of the child process needs: the model's running-kernel query and the pipe.
const char* (*gRunningKernel)() = nullptr;
int gCrashPipe = -1;

int gCrashReported = 0;

void onCrash(int sig) {
  // Several threads may fault at once: the first one reports.
  if (__atomic_exchange_n(&gCrashReported, 1, __ATOMIC_SEQ_CST) == 0) {
    const char* name = gRunningKernel ? gRunningKernel() : "";
    ssize_t ignored = write(gCrashPipe, name, strlen(name));
    (void)ignored;
  }
  _exit(128 + sig);
}

// Runs the model once in a forked child. Empty when it finished; otherwise the signal that
// killed it and the kernel it was in ("" if unknown), as "signal 4 (Illegal instruction)".
std::pair<std::string, std::string> crashProbe(const runtime::Model& model, const std::vector<ir::Tensor>& inputs,
                                               int threads) {
  gRunningKernel = reinterpret_cast<const char* (*)()>(model.symbol("policyc_debug_running_kernel"));
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("cannot create a pipe for the crash probe");
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    fail("cannot fork the crash probe");
  }
  if (pid == 0) {
    close(fds[0]);
    gCrashPipe = fds[1];
    // On an alternate stack, so that a stack overflow can be reported too.
    static char altStack[64 * 1024];
    stack_t ss{};
    ss.ss_sp = altStack;
    ss.ss_size = sizeof altStack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_handler = onCrash;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGILL, SIGSEGV, SIGBUS, SIGFPE, SIGTRAP, SIGABRT}) sigaction(sig, &sa, nullptr);
    try {
      runModel(model, inputs, threads);
    } catch (...) {
      _exit(0);  // an error, not a crash: the parent's own run reports it
    }
    _exit(0);
  }
  close(fds[1]);
  std::string kernel;
  char buf[256];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      kernel.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("cannot wait for the crash probe: {}", strerror(errno));
  }
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : (WIFEXITED(status) && WEXITSTATUS(status) > 128 ? WEXITSTATUS(status) - 128 : 0);
  if (sig == 0) return {"", ""};
  return {fmt::format("signal {} ({})", sig, strsignal(sig)), kernel};
}

}  // namespace

bool isDiscreteHead(const ir::Graph& graph, const std::string& name) {
  for (const auto& [n, v] : graph.outputs()) {
    if (n != name) continue;
    const ir::Shape& shape = v->type().shape;
    if (!ir::isFloat(v->type().dtype) || shape.size() < 2 || !shape.back().isStatic() || shape.back().value() < 2) return false;
    const ir::Node* producer = v->producer();
    if (producer->isOp(ir::Op::Softmax) || producer->isOp(ir::Op::LogSoftmax)) return true;
    std::string lower;
    for (char c : n) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* word : {"logit", "prob", "logp", "q_value", "qvalue"}) {
      if (lower.find(word) != std::string::npos) return true;
    }
    return lower == "q" || lower == "qs";
  }
  return false;
}

double precisionBudgetFraction(codegen::Precision precision) {
  return precision == codegen::Precision::Int8Weights ? 0.10 : 0.05;
}

CheckReport checkModel(const ir::Graph& graph, const std::vector<ir::Tensor>& inputs, const CheckOptions& options) {
  CheckReport report;
  const bool reduced = options.compile.cpp.precision != codegen::Precision::Fp32;
  const std::vector<std::pair<std::string, ir::Value*>> graphOutputs = graph.outputs();
  for (const std::string& name : options.discrete.value_or(std::vector<std::string>{})) {
    if (std::none_of(graphOutputs.begin(), graphOutputs.end(), [&](const auto& o) { return o.first == name; })) {
      std::vector<std::string> names;
      for (const auto& o : graphOutputs) names.push_back(fmt::format("'{}'", escape::message(o.first)));
      fail("--discrete: the model has no output '{}' (its outputs: {})", escape::message(name), fmt::join(names, ", "));
    }
  }
  if (reduced && options.perNode) {
    fail("--per-node compares every node within rtol/atol, which reduced precision does not keep; check --precision "
         "reports the outputs' accuracy against its budget (docs/precision.md)");
  }
  files::TempDir tmp("policyc-check");
  CompileRequest request = options.compile;
  request.output = (tmp.path() / "model.so").string();
  request.header.clear();

  // With --per-node the graph is optimised here, every op node's value becomes an extra output,
  // and the backend compiles that graph as it is.
  std::unique_ptr<ir::Graph> work = graph.clone();
  size_t numOutputs = graph.outputs().size();
  if (options.perNode) {
    passes::PipelineOptions pipeline = request.pipeline;
    pipeline.noFusion = pipeline.noFusion || !request.fuse;
    passes::runPipeline(*work, pipeline);
    std::vector<std::pair<std::string, ir::Value*>> outs = work->outputs();
    std::set<const ir::Value*> already;
    for (const auto& [n, v] : outs) already.insert(v);
    for (const auto& node : work->nodes()) {
      if (!node->isOp()) continue;
      for (size_t i = 0; i < node->numOutputs(); ++i) {
        ir::Value* v = node->output(i);
        if (already.insert(v).second) outs.emplace_back(kExposed + v->name(), v);
      }
    }
    work->setOutputs(outs);
    request.optimize = false;
  }
  // Backend llvm runs in-process (the JIT): no files, no system compiler. Backend cpp checks the
  // model file's build through the compile cache, as `run` and `bench` do (the same .so they run);
  // the graph with every intermediate exposed (--per-node) is compiled afresh.
  request.jit = request.backend == codegen::Backend::Llvm;
  CompileResult compiled;
  if (!request.jit && !options.perNode && !request.modelPath.empty()) {
    compiled.so = driver::compileCached(request, driver::fileHash("/proc/self/exe"), [&] { return work->clone(); });
  } else {
    compiled = driver::compileGraph(*work, request);
  }
  runtime::Model model = driver::loadCompiled(compiled);
  report.so = compiled.jit ? "(in-process JIT)" : compiled.so;
  // The model runs in a forked child first: a model that crashes is reported (and the temporary
  // directory removed) instead of taking this process down.
  {
    auto [crash, kernel] = crashProbe(model, inputs, options.threads);
    if (!crash.empty()) {
      report.pass = false;
      report.crash = kernel.empty() ? crash : fmt::format("{} in kernel {}", crash, kernel);
      if (!options.perNode) return report;
      // The crashing kernel's nodes, in graph order; the first stands for the kernel.
      for (const auto& node : work->nodes()) {
        auto k = compiled.kernelOfNode.find(node->name());
        if (!node->isOp() || k == compiled.kernelOfNode.end() || k->second != kernel) continue;
        if (!report.firstDiverging) {
          DivergingNode d;
          d.node = node->name();
          d.op = node->info().name;
          d.provenance = fmt::format("{}", fmt::join(node->provenance(), ", "));
          d.kernel = kernel;
          report.firstDiverging = std::move(d);
        }
        report.firstDiverging->kernelNodes.push_back(fmt::format("%{} ({})", ir::formatName(node->name()), node->info().name));
      }
      return report;
    }
  }
  std::vector<ir::Tensor> got = runModel(model, inputs, options.threads);

  // The references: the imported graph for the outputs (what the user's model means), the
  // optimised graph for the intermediates (the nodes the backend compiled).
  std::vector<ir::Tensor> want = ir::interpret(graph, inputs);
  std::vector<ir::Tensor> want64;
  std::vector<std::pair<std::string, ir::Value*>> outs = graph.outputs();
  if (reduced) {
    // Which layers were narrowed, as the schedule decides it for this graph and these options.
    std::unique_ptr<ir::Graph> optimized = graph.clone();
    passes::PipelineOptions pipeline = request.pipeline;
    pipeline.noFusion = pipeline.noFusion || !request.fuse;
    if (request.optimize) passes::runPipeline(*optimized, pipeline);
    const codegen::PlannedProgram planned = codegen::planGraph(*optimized, request.fuse);
    const codegen::TargetTraits target = request.backend == codegen::Backend::Llvm
                                             ? codegen::resolveLlvmTarget({request.cpp.target, request.cpu, request.features}).traits()
                                             : codegen::cppTargetTraits(request.cpp.target);
    report.layers = codegen::weightStorages(planned.program, planned.plan, request.cpp, target);
    const double fraction = precisionBudgetFraction(request.cpp.precision);
    for (size_t o = 0; o < numOutputs; ++o) {
      const bool discrete = options.discrete ? std::count(options.discrete->begin(), options.discrete->end(), outs[o].first) > 0
                                             : isDiscreteHead(graph, outs[o].first);
      report.accuracy.push_back(accuracyOf(outs[o].first, got[o], want[o], fraction, options.minAgreement, discrete));
      report.pass = report.pass && report.accuracy.back().pass;
    }
    return report;
  }
  for (size_t o = 0; o < numOutputs; ++o) {
    TensorCheck c = compareTensors(outs[o].first, got[o], want[o], options.rtol, options.atol);
    if (!c.allclose && c.note.rfind("shape", 0) != 0 && ir::isFloat(want[o].dtype())) {
      if (want64.empty()) {
        ir::InterpreterOptions f64;
        f64.float64 = true;
        want64 = ir::interpret(graph, inputs, f64);
      }
      c.rmse = rmse(got[o], want64[o]);
      c.refRmse = rmse(want[o], want64[o]);
      c.pass = *c.rmse <= options.rmseMultiplier * *c.refRmse + options.atol / 10;
    }
    report.pass = report.pass && c.pass;
    report.outputs.push_back(std::move(c));
  }
  if (options.perNode) {
    std::vector<ir::Tensor> ref = ir::interpret(*work, inputs);
    std::vector<std::pair<std::string, ir::Value*>> exposed = work->outputs();
    // Topological order: the graph's nodes in order, each value looked up among the outputs.
    std::map<const ir::Value*, size_t> index;
    for (size_t i = 0; i < exposed.size(); ++i) index.emplace(exposed[i].second, i);
    for (const auto& node : work->nodes()) {
      if (!node->isOp()) continue;
      for (size_t k = 0; k < node->numOutputs() && !report.firstDiverging; ++k) {
        size_t i = index.at(node->output(k));
        ++report.nodesCompared;
        TensorCheck c = compareTensors(node->output(k)->name(), got[i], ref[i], options.rtol, options.atol);
        if (c.pass) continue;
        DivergingNode d;
        d.node = node->name();
        d.op = node->info().name;
        d.provenance = fmt::format("{}", fmt::join(node->provenance(), ", "));
        auto kernel = compiled.kernelOfNode.find(node->name());
        d.kernel = kernel == compiled.kernelOfNode.end() ? "(no kernel: a view)" : kernel->second;
        d.check = std::move(c);
        report.firstDiverging = std::move(d);
      }
      if (report.firstDiverging) break;
    }
  }
  return report;
}

std::string formatCheckReport(const CheckReport& report, const CheckOptions& options) {
  std::string s;
  if (!report.accuracy.empty()) {
    const codegen::Precision precision = options.compile.cpp.precision;
    size_t narrowed = 0;
    for (const auto& [layer, storage] : report.layers) narrowed += storage != codegen::WeightStorage::F32;
    s += fmt::format("precision {}: {} of {} linear/conv layers narrowed", codegen::precisionName(precision), narrowed,
                     report.layers.size());
    // Under int8-weights the layers too small for int8 store bf16 (codegen::kStreamedWeights).
    std::vector<std::string> kept, bf16;
    for (const auto& [layer, storage] : report.layers) {
      if (storage == codegen::WeightStorage::F32) kept.push_back(escape::message(layer));
      if (precision == codegen::Precision::Int8Weights && storage == codegen::WeightStorage::Bf16) bf16.push_back(escape::message(layer));
    }
    std::vector<std::string> notes;
    if (!kept.empty()) notes.push_back(fmt::format("kept fp32: {}", fmt::join(kept, ", ")));
    if (!bf16.empty()) notes.push_back(fmt::format("bf16 for their size: {}", fmt::join(bf16, ", ")));
    s += notes.empty() ? "\n" : fmt::format(" ({})\n", fmt::join(notes, "; "));
    s += fmt::format("budget: mean |diff| <= {:g}% of the fp32 output's RMS; argmax agreement >= {:g}% on discrete heads\n",
                     precisionBudgetFraction(precision) * 100, options.minAgreement * 100);
    for (const OutputAccuracy& a : report.accuracy) {
      s += fmt::format("  {:<24} {:<16} mean |diff| {:.3g}  max |diff| {:.3g}  (rms {:.3g}, budget {:.3g})", escape::message(a.name),
                       a.type, a.meanAbs, a.maxAbs, a.refRms, a.budget);
      if (a.agreement) {
        const auto [lo, hi] = agreementInterval(*a.agreement, a.rows);
        s += fmt::format("  argmax agreement {:.2f}% of {} rows (95% interval {:.2f}-{:.2f}%)", *a.agreement * 100, a.rows, lo * 100,
                         hi * 100);
      }
      s += a.pass ? "  PASS\n" : "  FAIL\n";
    }
    if (!report.crash.empty()) s += fmt::format("the compiled model crashed: {}\n", report.crash);
    return s + (report.pass ? "PASS\n" : "FAIL\n");
  }
  for (const TensorCheck& c : report.outputs) {
    s += fmt::format("  {:<24} {:<16} max abs {:.3g}  max rel {:.3g}  {}", c.name, c.type, c.maxAbs, c.maxRel,
                     c.pass ? (c.allclose ? "PASS" : "PASS (RMSE)") : "FAIL");
    if (c.rmse) s += fmt::format("  [rmse vs float64 {:.3g}, fp32 reference's {:.3g}]", *c.rmse, *c.refRmse);
    if (!c.allclose && !c.note.empty()) s += fmt::format("  ({})", c.note);
    s += "\n";
  }
  if (!report.crash.empty()) {
    s += fmt::format("the compiled model crashed: {}", report.crash);
    if (report.firstDiverging) s += fmt::format(", which computes {}", fmt::join(report.firstDiverging->kernelNodes, ", "));
    return s + "\nFAIL\n";
  }
  if (options.perNode) {
    if (report.firstDiverging) {
      const DivergingNode& d = *report.firstDiverging;
      s += fmt::format("first diverging node (of {} compared in order): %{} ({}){} in kernel {}: max abs {:.3g}, max rel {:.3g}{}\n",
                       report.nodesCompared, ir::formatName(d.node), d.op,
                       d.provenance.empty() ? "" : fmt::format(" from \"{}\"", d.provenance), d.kernel, d.check.maxAbs,
                       d.check.maxRel, d.check.note.empty() ? "" : fmt::format(" ({})", d.check.note));
    } else {
      s += fmt::format("every node matches ({} compared)\n", report.nodesCompared);
    }
  }
  s += report.pass ? "PASS\n" : "FAIL\n";
  return s;
}

}  // namespace policyc::debug
