// The policyc command line: dump a model's graph, run it, compile it, and time the compiled model.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench.h"
#include "policyc/driver/model_io.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/backend.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/memory_plan.h"
#include "policyc/debug/check.h"
#include "policyc/driver/compile.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/driver/report.h"
#include "policyc/debug/minify.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/loader.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"
#include "policyc/support/process.h"
#include "policyc/support/sizes.h"

namespace {

using namespace policyc;

// Options that choose the implementation of each GEMM/conv kernel (generated or oneDNN).
struct ImplFlags {
  std::string mode = "default";
  std::vector<int64_t> tuneBatch;
  bool noExtern = false;
  std::string forceImpl;
  std::string precision = "fp32";
  std::vector<std::string> keepFp32;
  int64_t rowBlockBytes = codegen::CodegenOptions::kRowBlockBytes;

  void addTo(CLI::App* cmd) {
    cmd->add_option("--mode", mode,
                    "default (a heuristic picks each GEMM/conv kernel's implementation) or max-autotune (times them all on "
                    "this machine)")
        ->check(CLI::IsMember({"default", "max-autotune"}));
    cmd->add_option("--tune-batch", tuneBatch, "batch sizes the choice is made for (comma-separated; default 1,16,64)")
        ->delimiter(',');
    cmd->add_flag("--no-extern", noExtern, "no oneDNN kernels: a self-contained artifact that needs no libdnnl");
    cmd->add_option("--force-impl", forceImpl,
                    "run every GEMM/conv kernel with this implementation where it has it: gemm4x32, gemm4x16, gemm6x16, gemm8x32, onednn, "
                    "onednn_postops, conv_rows, dot_rows, winograd_f23 (debugging)");
    cmd->add_option("--precision", precision,
                    "how linear/conv weights are stored: fp32, bf16-weights, bf16 or int8-weights (per-output-channel "
                    "scales); activations stay fp32 (docs/precision.md)")
        ->check(CLI::Validator(
            [](std::string& name) -> std::string {
              try {
                codegen::parsePrecision(name);
                return "";
              } catch (const Error& e) {
                return e.what();
              }
            },
            "fp32|bf16-weights|bf16|int8-weights"));
    cmd->add_option("--keep-fp32", keepFp32, "layers (node names, comma-separated) whose weights stay fp32 whatever --precision")
        ->delimiter(',');
    cmd->add_option("--row-block-bytes", rowBlockBytes,
                    "a run takes its batch in blocks of rows whose activations, inputs and outputs fit this many bytes "
                    "(at least 4 rows; models whose rows are independent; 0: the whole batch at once)")
        ->check(CLI::NonNegativeNumber);
  }
  void applyTo(driver::CompileRequest& r) const {
    r.mode = mode;
    if (!tuneBatch.empty()) r.cpp.tuneBatches = tuneBatch;
    r.cpp.externKernels = !noExtern;
    r.cpp.forceImpl = forceImpl;
    r.cpp.precision = codegen::parsePrecision(precision);
    r.cpp.keepFp32 = keepFp32;
    r.cpp.rowBlockBytes = rowBlockBytes;
  }
};

// --backend and --no-fuse. The default of every command is llvm (codegen::kDefaultBackend):
// measured as fast as cpp on the reference policies (docs/performance.md) and compiled in-process
// in about half a second instead of a C++ build. Names are checked by codegen::parseBackend, so
// the old `--backend nofuse` says what replaced it.
struct BackendFlags {
  std::string backend;  // empty: the default
  bool noFuse = false;

  void addTo(CLI::App* cmd, bool interp, const std::string& help) {
    cmd->add_option("--backend", backend, help + "; default llvm")
        ->check(CLI::Validator(
            [interp](std::string& name) -> std::string {
              try {
                codegen::parseBackend(name, !interp);
                return "";
              } catch (const Error& e) {
                return e.what();
              }
            },
            interp ? "interp|cpp|llvm" : "cpp|llvm"));
    cmd->add_flag("--no-fuse", noFuse,
                  "no fusion: the fusion passes and kernel fusion off, one kernel per graph node (narrows a bug down to fusion)");
  }
  codegen::Backend resolve() const { return backend.empty() ? codegen::kDefaultBackend : codegen::parseBackend(backend); }
  void applyTo(driver::CompileRequest& request) const {
    request.backend = resolve();
    request.fuse = !noFuse;
  }
};

// Exit codes: 0 success, 1 a check that ran and failed (later), 2 bad input or a compiler failure.
constexpr int kExitBadInput = 2;

// Options every command that optimises a graph shares.
struct PipelineFlags {
  std::string passes;                    // comma-separated; empty: the default pipeline
  std::vector<std::string> disabled;
  std::vector<std::string> printAfter;

  void addTo(CLI::App* cmd) {
    cmd->add_option("--passes", passes, "run exactly these passes, comma-separated (e.g. canonicalize,dce)");
    cmd->add_option("--disable-pass", disabled, "skip this pass (repeatable)");
    cmd->add_option("--print-after", printAfter, "print the graph to stderr after this pass, or 'all' (repeatable)");
  }

  // Runs the pipeline on `graph`; --print-after output goes to stderr.
  void optimize(ir::Graph& graph) const {
    passes::PipelineResult result = passes::runPipeline(graph, options());
    std::fwrite(result.printed.data(), 1, result.printed.size(), stderr);
  }

  passes::PipelineOptions options() const {
    passes::PipelineOptions options;
    if (!passes.empty()) {
      std::vector<std::string> names;
      size_t start = 0;
      while (start <= passes.size()) {
        size_t comma = passes.find(',', start);
        std::string name = passes.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!name.empty()) names.push_back(name);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      options.passes = names;
    }
    options.disabled = disabled;
    options.printAfter = printAfter;
    return options;
  }
};

// The target options of the compiling commands.
struct TargetFlags {
  std::string target = "native";
  std::string cpu, features;

  void addTo(CLI::App* cmd) {
    cmd->add_option("--target", target,
                    "native | x86-64-v3 | x86-64-v4 | x86-64-v4-bf16 (AVX512_BF16: --precision bf16 multiplies in bf16) | x86-64-v4-amx (and AMX-BF16: convs too, on oneDNN) | generic; backend llvm also takes an LLVM target triple (e.g. aarch64-linux-gnu)");
    cmd->add_option("--cpu", cpu, "backend llvm: the CPU to generate code for (default: the target's; native: this machine's)");
    cmd->add_option("--features", features, "backend llvm: CPU features to add or remove, comma-separated (e.g. +avx2,-avx512f)");
  }
  void applyTo(driver::CompileRequest& request) const {
    request.cpp.target = target;
    request.cpu = cpu;
    request.features = features;
  }
};

struct DumpOptions {
  std::string model;
  std::string stage;  // empty: imported, or optimized when a pass option is given
  std::string output;
  std::string format = "text";
  PipelineFlags pipeline;
};

// Writes `text` to `path` whole, or to stdout when no path is given.
void emitText(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  asError([&] { files::writeAtomic(path, text); });
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

int runDump(const DumpOptions& given) {
  DumpOptions o = given;
  const PipelineFlags& p = o.pipeline;
  const bool passOptions = !p.passes.empty() || !p.disabled.empty() || !p.printAfter.empty();
  // The pass options choose what the optimised graph is: they imply it, and contradict the
  // imported graph (which no pass has touched) rather than being silently ignored.
  if (o.stage.empty()) o.stage = passOptions ? "optimized" : "imported";
  if (o.stage == "imported" && passOptions) {
    fail("--passes, --disable-pass and --print-after change the optimised graph: use --stage optimized, pre-fusion or post-fusion");
  }
  auto graph = driver::loadModel(o.model);
  if (o.stage != "imported") o.pipeline.optimize(*graph);
  const bool kernels = o.stage == "pre-fusion" || o.stage == "post-fusion";
  if (o.format != "text") {
    codegen::KernelProgram program;
    if (kernels) {
      program = codegen::lowerGraph(*graph);
      if (o.stage == "post-fusion") codegen::fuseKernels(program);
    }
    const std::string dot = kernels ? codegen::printKernelDot(program) : ir::printDot(*graph);
    emitText(o.format == "dot" ? dot : driver::renderSvg(dot), o.output);
    return 0;
  }
  if (kernels) {
    if (!o.output.empty()) fail("-o writes .pir graphs (or, with --format dot|svg, pictures); --stage {} prints the kernel program", o.stage);
    codegen::KernelProgram program = codegen::lowerGraph(*graph);
    if (o.stage == "post-fusion") codegen::fuseKernels(program);
    std::string text = codegen::printKernelProgram(program);
    if (o.stage == "post-fusion") text += "\n" + codegen::printMemoryPlan(program, codegen::planMemory(program));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (!o.output.empty()) {
    ir::writePir(*graph, o.output);
    std::fprintf(stderr, "wrote %s\n", o.output.c_str());
    return 0;
  }
  ir::PrintedGraph printed = ir::printGraph(*graph);
  std::fwrite(printed.text.data(), 1, printed.text.size(), stdout);
  if (!printed.sidecar.empty()) {
    std::fprintf(stdout, "# weights marked @offset are not shown; `policyc dump %s -o FILE.pir` writes them to FILE.pir.bin\n",
                 o.model.c_str());
  }
  return 0;
}

struct RunOptions {
  std::string model;
  BackendFlags backend;
  std::vector<std::string> inputs;
  bool random = false;
  int64_t batch = 1;
  uint64_t seed = 0;
  std::string outputDir;
  PipelineFlags pipeline;
  bool optimize = false;
  int threads = 1;  // compiled models only: the interpreter runs on one thread
  TargetFlags target;              // compiling backends
  std::string debugDir;            // compiling backends
  ImplFlags impl;
};

// NAME=FILE.npy options read into tensors by name.
std::map<std::string, ir::Tensor> readNamedInputs(const std::vector<std::string>& specs) {
  std::map<std::string, ir::Tensor> named;
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) fail("--input takes NAME=FILE.npy, got '{}'", spec);
    std::string name = spec.substr(0, eq);
    if (named.count(name)) fail("input '{}' is given twice", name);
    named.emplace(name, driver::readTensor(spec.substr(eq + 1)));
  }
  return named;
}

// A command's inputs for a signature (types and names in order): random ones for `batch` and
// `seed`, or the NAME=FILE.npy options in signature order.
std::vector<ir::Tensor> commandInputs(const std::vector<ir::TensorType>& types, const std::vector<std::string>& names,
                                      bool random, const std::vector<std::string>& given, int64_t batch, uint64_t seed,
                                      int64_t minBatch = 0) {
  if (!random) return driver::orderInputs(names, readNamedInputs(given));
  if (!given.empty()) fail("give either --input or --random, not both");
  if (batch < minBatch) fail("--batch must be >= {}, got {}", minBatch, batch);
  return driver::randomTensors(types, batch, seed);
}
std::vector<ir::Tensor> commandInputs(const ir::Graph& graph, bool random, const std::vector<std::string>& given,
                                      int64_t batch, uint64_t seed, int64_t minBatch = 0) {
  std::vector<ir::TensorType> types;
  std::vector<std::string> names;
  for (const ir::Value* in : graph.inputs()) {
    types.push_back(in->type());
    names.push_back(in->name());
  }
  return commandInputs(types, names, random, given, batch, seed, minBatch);
}

// Writes one .npy per output into `outputDir` (if given), then prints one summary line each. The
// file of output NAME is escape::fileName(NAME).npy (docs/security.md): a model cannot name a file
// outside the directory. Every file is written whole (temp file + rename).
void reportOutputs(const std::vector<std::string>& names, const std::vector<ir::Tensor>& outputs,
                   const std::string& outputDir) {
  if (!outputDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(outputDir, ec);
    if (ec) fail("cannot create output directory '{}': {}", outputDir, ec.message());
    for (size_t i = 0; i < outputs.size(); ++i) driver::writeTensor(files::confined(outputDir, names[i], ".npy").string(), outputs[i]);
  }
  for (size_t i = 0; i < outputs.size(); ++i) fmt::print("{}: {}\n", escape::message(names[i]), driver::summarize(outputs[i]));
}

// `policyc run MODEL.so`: a compiled model through the runtime loader, on the same inputs (for the
// same --seed) as the interpreter would use.
int runCompiled(const RunOptions& o, bool describe = false) {
  if (o.optimize || !o.pipeline.passes.empty() || !o.pipeline.disabled.empty() || !o.pipeline.printAfter.empty()) {
    fail("'{}' is already compiled: --optimize and the pass options apply to .onnx and .pir models", o.model);
  }
  if (o.threads < 1) fail("--threads must be >= 1, got {}", o.threads);
  runtime::Model model = runtime::Model::load(o.model);
  std::vector<std::string> inputNames, outputNames;
  for (const runtime::TensorSpec& spec : model.inputs()) inputNames.push_back(spec.name);
  for (const runtime::TensorSpec& spec : model.outputs()) outputNames.push_back(spec.name);
  std::vector<ir::Tensor> inputs =
      commandInputs(driver::inputTypes(model), inputNames, o.random, o.inputs, o.batch, o.seed);

  // The batch is that of the first input with a batch dimension; run() checks the others.
  std::vector<ir::Tensor> outputs = driver::runModel(model, inputs, o.threads);
  // A model of reduced precision says so (an fp32 one prints its outputs as it always did).
  if (describe && model.precision() != "fp32") fmt::print("precision: {}\n", model.precision());
  reportOutputs(outputNames, outputs, o.outputDir);
  return 0;
}

int runThroughCache(const RunOptions& o);
int runJit(const RunOptions& o);

int runRun(const RunOptions& given) {
  if (driver::isSharedObject(given.model)) {
    if (given.impl.precision != "fp32" || !given.impl.keepFp32.empty()) {
      fail("'{}' is already compiled: --precision and --keep-fp32 apply to .onnx and .pir models", given.model);
    }
    return runCompiled(given, true);
  }
  RunOptions o = given;
  const codegen::Backend backend = o.backend.resolve();
  if (backend == codegen::Backend::Llvm) return runJit(o);
  if (backend == codegen::Backend::Cpp) return runThroughCache(o);
  if (o.backend.noFuse) fail("--no-fuse applies to the compiling backends (cpp, llvm), not to interp");
  auto graph = driver::loadModel(o.model);
  if (o.optimize || !o.pipeline.passes.empty() || !o.pipeline.disabled.empty() || !o.pipeline.printAfter.empty()) {
    o.pipeline.optimize(*graph);
  }
  std::vector<ir::Tensor> inputs = commandInputs(*graph, o.random, o.inputs, o.batch, o.seed);
  std::vector<ir::Tensor> outputs = ir::interpret(*graph, inputs);
  std::vector<std::string> names;
  for (const auto& output : graph->outputs()) names.push_back(output.first);
  // Everything is computed before anything is written: an error leaves no partial output.
  reportOutputs(names, outputs, o.outputDir);
  return 0;
}

struct CompileOptions {
  std::string model;
  std::string output;
  std::string header;
  std::string name;
  TargetFlags target;
  BackendFlags backend;
  std::string emit = "so";
  std::string debugDir;
  bool profile = false;
  bool updatableWeights = false;
  PipelineFlags pipeline;
  ImplFlags impl;
};

// MODEL -> optimised graph -> kernel program -> fusion -> memory plan -> LLVM IR or C++ -> OUT.so
// (+ OUT.h), through the shared compile driver (debug/compile.h), which fills the debug directory.
void compileModel(const CompileOptions& o) {
  driver::CompileRequest request;
  o.backend.applyTo(request);
  request.emit = o.emit;
  o.target.applyTo(request);
  driver::validateTarget(request);  // an unknown target fails before any work
  for (const std::string& out : {o.output, o.header}) {
    const std::filesystem::path parent = std::filesystem::path(out).parent_path();
    if (!out.empty() && !parent.empty() && !std::filesystem::is_directory(parent)) {
      fail("cannot write '{}': no directory '{}'", out, parent.string());
    }
  }
  auto graph = driver::loadModel(o.model);
  request.modelPath = o.model;
  request.output = o.output;
  request.header = o.header;
  request.pipeline = o.pipeline.options();
  request.cpp.name = o.name.empty() ? std::filesystem::path(o.output).stem().string() : o.name;
  request.cpp.profile = o.profile;
  request.updatableWeights = o.updatableWeights;
  request.debugDir = o.debugDir;
  o.impl.applyTo(request);
  driver::compileGraph(*graph, request);
}

int runCompile(const CompileOptions& o) {
  auto start = std::chrono::steady_clock::now();
  compileModel(o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("compiled {} in {:.2f} s\n", o.output, seconds);
  return 0;
}

// The cached compile of `model` (driver::compileCached), keyed also by this policyc binary.
std::string compileCached(const std::string& model, const PipelineFlags& pipeline, const ImplFlags& impl,
                          const TargetFlags& target, const BackendFlags& backend, const std::string& debugDir = "",
                          bool profile = false) {
  driver::CompileRequest request;
  impl.applyTo(request);
  request.modelPath = model;
  backend.applyTo(request);
  request.pipeline = pipeline.options();
  request.cpp.name = "model";
  target.applyTo(request);
  request.debugDir = debugDir;
  request.cpp.profile = profile;
  driver::validateTarget(request);  // an unknown target fails before any work
  return driver::compileCached(request, driver::fileHash("/proc/self/exe"), [&] { return driver::loadModel(model); });
}

// `policyc run MODEL --backend cpp`: the cached compile, run through the loader.
int runThroughCache(const RunOptions& o) {
  RunOptions compiled = o;
  compiled.model = compileCached(o.model, o.pipeline, o.impl, o.target, o.backend, o.debugDir);
  compiled.pipeline = {};
  compiled.optimize = false;
  return runCompiled(compiled);
}

// `policyc run MODEL --backend llvm`: compiled in-process by the JIT (no system compiler, no
// files, no dlopen) and run through the same runtime checks.
int runJit(const RunOptions& o) {
  if (o.threads < 1) fail("--threads must be >= 1, got {}", o.threads);
  driver::CompileRequest request;
  o.impl.applyTo(request);
  request.modelPath = o.model;
  o.backend.applyTo(request);
  request.jit = true;
  request.pipeline = o.pipeline.options();
  request.cpp.name = "model";
  o.target.applyTo(request);
  request.debugDir = o.debugDir;
  driver::validateTarget(request);
  auto graph = driver::loadModel(o.model);
  driver::CompileResult compiled = driver::compileGraph(*graph, request);
  runtime::Model model = driver::loadCompiled(compiled);
  std::vector<std::string> inputNames, outputNames;
  for (const runtime::TensorSpec& spec : model.inputs()) inputNames.push_back(spec.name);
  for (const runtime::TensorSpec& spec : model.outputs()) outputNames.push_back(spec.name);
  std::vector<ir::Tensor> inputs = commandInputs(driver::inputTypes(model), inputNames, o.random, o.inputs, o.batch, o.seed);
  std::vector<ir::Tensor> outputs = driver::runModel(model, inputs, o.threads);
  reportOutputs(outputNames, outputs, o.outputDir);
  return 0;
}

struct CheckCliOptions {
  std::string model;
  BackendFlags backend;
  std::vector<std::string> inputs;
  int64_t batch = 1;
  uint64_t seed = 0;
  double rtol = 1e-4, atol = 1e-4;
  double minAgreement = 0.995;
  std::vector<std::string> discrete;
  int threads = 1;
  bool perNode = false;
  TargetFlags target;
  std::string debugDir;
  PipelineFlags pipeline;
  ImplFlags impl;
};

// `policyc check MODEL`: the compiled model against the interpreter on the same inputs; exit 1
// when an output does not match.
int runCheck(const CheckCliOptions& o) {
  if (o.threads < 1) fail("--threads must be >= 1, got {}", o.threads);
  if (o.rtol < 0 || o.atol < 0) fail("--rtol and --atol must be >= 0");
  auto graph = driver::loadModel(o.model);
  std::vector<ir::Tensor> inputs = commandInputs(*graph, o.inputs.empty(), o.inputs, o.batch, o.seed);
  debug::CheckOptions c;
  c.rtol = o.rtol;
  c.atol = o.atol;
  c.threads = o.threads;
  c.perNode = o.perNode;
  c.minAgreement = o.minAgreement;
  if (!o.discrete.empty()) c.discrete = o.discrete;
  c.compile.modelPath = o.model;
  o.backend.applyTo(c.compile);
  c.compile.pipeline = o.pipeline.options();
  c.compile.cpp.name = "model";
  o.target.applyTo(c.compile);
  c.compile.debugDir = o.debugDir;
  o.impl.applyTo(c.compile);
  const bool reduced = c.compile.cpp.precision != codegen::Precision::Fp32;
  fmt::print("check {} (backend {}{}, {}, {}, {} thread{})\n", o.model, codegen::backendName(c.compile.backend),
             c.compile.fuse ? "" : " without fusion",
             o.inputs.empty() ? fmt::format("random inputs: batch {}, seed {}", o.batch, o.seed) : std::string("given inputs"),
             reduced ? fmt::format("precision {} against the fp32 interpreter", codegen::precisionName(c.compile.cpp.precision))
                     : fmt::format("rtol {}, atol {}", o.rtol, o.atol),
             o.threads, o.threads == 1 ? "" : "s");
  std::fflush(stdout);
  debug::CheckReport report = debug::checkModel(*graph, inputs, c);
  std::string text = debug::formatCheckReport(report, c);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return report.pass && !report.firstDiverging ? 0 : 1;
}

struct MinifyCliOptions {
  std::string model;
  std::string failure;
  BackendFlags backend;
  std::string match;
  std::string outDir;
  std::vector<std::string> inputs;
  int64_t batch = 1;
  uint64_t seed = 0;
  double rtol = 1e-4, atol = 1e-4;
  double timeout = 60;
};

// `policyc minify MODEL --failure KIND -o DIR`: the fewest nodes that still fail that way.
int runMinify(const MinifyCliOptions& o) {
  debug::MinifyOptions m;
  m.failure = debug::parseFailureKind(o.failure);
  m.backend = o.backend.resolve();
  m.fuse = !o.backend.noFuse;
  m.match = o.match;
  m.outDir = o.outDir;
  m.rtol = o.rtol;
  m.atol = o.atol;
  m.timeoutSeconds = o.timeout;
  if (o.timeout <= 0) fail("--timeout must be > 0, got {}", o.timeout);
  std::error_code ec;
  m.policyc = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) fail("cannot find the policyc executable: {}", ec.message());
  m.candidateProgress = true;
  m.progress = [](const std::string& line) {
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  auto graph = driver::loadModel(o.model);
  std::vector<ir::Tensor> inputs = commandInputs(*graph, o.inputs.empty(), o.inputs, o.batch, o.seed, 1);
  debug::MinifyResult r = debug::minify(*graph, inputs, m);
  if (!r.reproduced) return 0;
  fmt::print("wrote {0}/repro.pir, {0}/inputs/, {0}/repro.sh\n", o.outDir);
  return 0;
}

}  // namespace

// Every failure ends the same way: one "policyc: error: ..." line on stderr (model-provided text in
// it escaped, so it stays one line and cannot drive the terminal) and exit code 2.
static int reportError(const std::string& message) {
  std::fflush(stdout);
  std::string line = escape::message(message);
  std::fprintf(stderr, "policyc: error: %s\n", line.c_str());
  return kExitBadInput;
}

// CLI11's parse errors as one line that names the command, e.g. "unknown command 'bogus'".
static std::string commandLineError(const CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(sub->get_name());
  bool commandGiven = false;
  for (const CLI::App* sub : app.get_subcommands()) commandGiven = commandGiven || sub->parsed();
  if (!commandGiven) {
    if (argc < 2) return fmt::format("a command is required: {} (see policyc --help)", fmt::join(commands, ", "));
    std::string first = argv[1];
    if (!first.empty() && first[0] != '-') {
      return fmt::format("unknown command '{}' (commands: {}; see policyc --help)", first, fmt::join(commands, ", "));
    }
  }
  std::string what = e.what();
  for (char& c : what) {
    if (c == '\n') c = ' ';
  }
  while (!what.empty() && what.back() == ' ') what.pop_back();
  std::string command;
  for (const CLI::App* sub : app.get_subcommands()) command = sub->get_name();
  return fmt::format("{} (see policyc {}--help)", what, command.empty() ? "" : command + " ");
}

// Option values checked where they are parsed, so that a bad one is a one-line error naming the
// option: finite numbers (NaN compares false with everything), batch and thread counts in range.
const CLI::Validator kFiniteNonNegative(
    [](std::string& text) -> std::string {
      double v = 0;
      try {
        size_t used = 0;
        v = std::stod(text, &used);
        if (used != text.size()) return "expected a number, got '" + text + "'";
      } catch (const std::exception&) {
        return "expected a number, got '" + text + "'";
      }
      return std::isfinite(v) && v >= 0 ? "" : "must be a finite number >= 0, got " + text;
    },
    "FLOAT>=0");
const CLI::Validator kPositiveSeconds(
    [](std::string& text) -> std::string {
      std::string error = kFiniteNonNegative(text);
      if (!error.empty()) return error;
      return std::stod(text) > 0 ? "" : "must be > 0, got " + text;
    },
    "SECONDS>0");
const CLI::Range kBatchRange(int64_t{0}, sizes::kMaxBatch);
const CLI::Range kThreadsRange(1, 1024);

int main(int argc, char** argv) {
  CLI::App app{"policyc: an ahead-of-time compiler for small neural-network policies"};
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       fmt::format("policyc {} (oneDNN extern kernels: {})", driver::kVersion, codegen::onednnBuiltIn() ? "yes" : "no"));

  DumpOptions dump;
  CLI::App* dumpCmd = app.add_subcommand("dump", "print a model's graph as .pir text, its kernel program, or a picture of either");
  dumpCmd->add_option("model", dump.model, "model file (.onnx or .pir)")->required();
  dumpCmd->add_option("--stage", dump.stage,
                      "imported (default) | optimized (.pir; the default with a pass option) | pre-fusion | post-fusion (kernel program)")
      ->check(CLI::IsMember({"imported", "optimized", "pre-fusion", "post-fusion"}));
  dumpCmd->add_option("--format", dump.format,
                      "text (.pir or the kernel program, default) | dot | svg (a Graphviz picture: the graph, or each kernel a "
                      "cluster of its graph nodes)")
      ->check(CLI::IsMember({"text", "dot", "svg"}));
  dumpCmd->add_option("-o,--output", dump.output,
                      "write FILE.pir (and its weights to FILE.pir.bin), or the picture, instead of printing");
  dump.pipeline.addTo(dumpCmd);

  RunOptions run;
  CLI::App* runCmd = app.add_subcommand("run", "run a model on given or random inputs");
  runCmd->add_option("model", run.model, "model file (.onnx or .pir), or a compiled model (.so)")->required();
  run.backend.addTo(runCmd, true,
                    "interp (reference interpreter), cpp (compiled, cached in POLICYC_CACHE_DIR) or llvm (compiled in-process "
                    "by the LLVM JIT)");
  runCmd->add_option("--debug-dir", run.debugDir, "with a compiling backend: write every stage here");
  run.target.addTo(runCmd);
  runCmd->add_option("--input", run.inputs, "NAME=FILE.npy, once per model input");
  runCmd->add_flag("--random", run.random, "use random inputs (see --batch, --seed)");
  runCmd->add_option("--batch", run.batch, "batch size for --random")->check(kBatchRange);
  runCmd->add_option("--seed", run.seed, "random seed for --random");
  runCmd->add_option("--output-dir", run.outputDir, "write NAME.npy for every output here");
  runCmd->add_option("--threads", run.threads, "threads a compiled model (.so) may use")->check(kThreadsRange);
  runCmd->add_flag("--optimize", run.optimize, "run the optimised graph (implied by the pass options)");
  run.pipeline.addTo(runCmd);
  run.impl.addTo(runCmd);

  CompileOptions compile;
  CLI::App* compileCmd = app.add_subcommand("compile", "compile a model into a shared object (or, backend llvm, an object, assembly or IR)");
  compileCmd->add_option("model", compile.model, "model file (.onnx or .pir)")->required();
  compileCmd->add_option("-o,--output", compile.output, "the file to write (OUT.so; with --emit: OUT.o, OUT.s, OUT.ll)")->required();
  compileCmd->add_option("--header", compile.header, "also write the model's C header here");
  compileCmd->add_option("--name", compile.name, "C name of the typed wrapper (NAME_run); default: OUT's stem");
  compile.target.addTo(compileCmd);
  compile.backend.addTo(compileCmd, false, "llvm (LLVM IR) or cpp (generated C++)");
  compileCmd->add_option("--emit", compile.emit,
                         "backend llvm: so (a shared object, default), obj (a relocatable object), asm (assembly) or llvm (textual IR)")
      ->check(CLI::IsMember({"so", "obj", "asm", "llvm"}));
  compileCmd->add_option("--debug-dir", compile.debugDir,
                         "write every stage here (graphs, passes.log, kernel programs, output_code.cpp, build.log, "
                         "compile_times.txt); POLICYC_DEBUG=1 picks ./policyc_debug/MODEL-HASH");
  compileCmd->add_flag("--profile", compile.profile, "time every kernel of every run (for `policyc bench --profile OUT.so`)");
  compileCmd->add_flag("--updatable-weights", compile.updatableWeights,
                       "the model's f32 weights can be replaced at run time (set_weights in the C ABI, Policy.set_weights): "
                       "nothing is folded into them (batch norm stays a per-channel scale and shift)");
  compile.pipeline.addTo(compileCmd);
  compile.impl.addTo(compileCmd);

  tools::BenchOptions bench;
  PipelineFlags benchPipeline;
  ImplFlags benchImpl;
  TargetFlags benchTarget;
  BackendFlags benchBackend;
  CLI::App* benchCmd = app.add_subcommand("bench", "time the compiled model per call (median, p10, p90), against a baseline, per kernel");
  benchCmd->add_option("model", bench.model, "model file (.onnx or .pir, compiled through the cache) or OUT.so")->required();
  benchBackend.addTo(benchCmd, false, "cpp or llvm, for .onnx/.pir");
  benchCmd->add_option("--batch", bench.batches, "batch sizes (repeatable or comma-separated; default 1)")->delimiter(',')->check(kBatchRange);
  benchCmd->add_option("--threads", bench.threads, "thread counts (repeatable or comma-separated; default 1)")->delimiter(',')->check(kThreadsRange);
  benchCmd->add_option("--min-time", bench.minSeconds, "seconds of timed calls per row at least (default 1)")->check(kFiniteNonNegative);
  benchCmd->add_option("--min-calls", bench.minCalls, "timed calls per row at least (default 200)");
  benchCmd->add_option("--warmup", bench.warmup, "untimed calls before each row (default 50)");
  benchTarget.addTo(benchCmd);
  benchCmd->add_option("--baseline", bench.baseline,
                       "compare throughput with: interp (the reference interpreter), nofuse (the same backend without fusion), torch "
                       "(PyTorch eager on the same .onnx model), or FILE.csv (columns batch, samples_per_s, optionally threads)");
  benchCmd->add_option("--plot", bench.plot, "also plot latency against batch size (and the baseline's throughput) here: F.svg, F.png or F.pdf");
  benchCmd->add_option("--debug-dir", bench.debugDir,
                       "write every stage of the compile here; with --profile also profile.json, shown in the directory's index.html");
  benchCmd->add_flag("--profile", bench.profile, "compile with a timer around every kernel; print a table per row");
  benchCmd->add_option("--trace", bench.trace, "with --profile: write a Chrome trace (chrome://tracing, Perfetto) here");
  benchCmd->add_option("--roofline", bench.roofline,
                       "with --profile: the machine's bounds from this file (policyc_roofline --json); default: measured once "
                       "and cached");
  benchCmd->add_option("--json", bench.json, "also write the rows as JSON here");
  benchCmd->add_option("--csv", bench.csv, "also write the rows as CSV here");
  benchCmd->add_flag("--compare-backends", bench.compareBackends,
                     "time the model built by both backends (cpp, llvm) in one process, their calls interleaved, and compare "
                     "them row by row (with --profile: kernel by kernel)");
  benchPipeline.addTo(benchCmd);
  benchImpl.addTo(benchCmd);

  MinifyCliOptions minify;
  CLI::App* minifyCmd = app.add_subcommand("minify", "shrink a failing model to the few nodes that still fail the same way");
  minifyCmd->add_option("model", minify.model, "model file (.onnx or .pir)")->required();
  minifyCmd->add_option("--failure", minify.failure, "accuracy | compile | crash")->required();
  minifyCmd->add_option("-o,--output-dir", minify.outDir, "write repro.pir, inputs/*.npy and repro.sh here")->required();
  minify.backend.addTo(minifyCmd, false, "cpp or llvm");
  minifyCmd->add_option("--match", minify.match, "the failure's output must contain this text too");
  minifyCmd->add_option("--input", minify.inputs, "NAME=FILE.npy, once per model input (default: random inputs)");
  minifyCmd->add_option("--batch", minify.batch, "batch size of the random inputs (default 1)")->check(kBatchRange);
  minifyCmd->add_option("--seed", minify.seed, "seed of the random inputs (default 0)");
  minifyCmd->add_option("--rtol", minify.rtol, "relative tolerance of the accuracy check (default 1e-4)")->check(kFiniteNonNegative);
  minifyCmd->add_option("--atol", minify.atol, "absolute tolerance of the accuracy check (default 1e-4)")->check(kFiniteNonNegative);
  minifyCmd->add_option("--timeout", minify.timeout, "seconds a candidate may run before it counts as a hang (default 60)")->check(kPositiveSeconds);

  CheckCliOptions check;
  CLI::App* checkCmd = app.add_subcommand("check", "compare the compiled model with the reference interpreter (exit 1 on a mismatch)");
  checkCmd->add_option("model", check.model, "model file (.onnx or .pir)")->required();
  check.backend.addTo(checkCmd, false, "cpp or llvm (in-process JIT)");
  checkCmd->add_option("--input", check.inputs, "NAME=FILE.npy, once per model input (default: random inputs)");
  CLI::Option* checkBatch = checkCmd->add_option("--batch", check.batch,
                                                 "batch size of the random inputs (default 1; 1000 with --precision)")
                                ->check(kBatchRange);
  checkCmd->add_option("--seed", check.seed, "seed of the random inputs (default 0)");
  checkCmd->add_option("--rtol", check.rtol, "relative tolerance (default 1e-4)")->check(kFiniteNonNegative);
  checkCmd->add_option("--atol", check.atol, "absolute tolerance (default 1e-4)")->check(kFiniteNonNegative);
  checkCmd->add_option("--threads", check.threads, "threads the compiled model runs with")->check(kThreadsRange);
  checkCmd->add_flag("--per-node", check.perNode, "expose every intermediate and report the first node that diverges");
  check.target.addTo(checkCmd);
  checkCmd->add_option("--debug-dir", check.debugDir, "write every stage of the compile here");
  check.pipeline.addTo(checkCmd);
  check.impl.addTo(checkCmd);
  checkCmd->add_option("--discrete", check.discrete,
                       "with --precision: the outputs that are discrete heads (argmax agreement), comma-separated; default: "
                       "softmax outputs and outputs named like logits, probs, logp or q_values")
      ->delimiter(',');
  checkCmd->add_option("--min-agreement", check.minAgreement,
                       "with --precision: the fraction of a discrete head's rows whose argmax must agree (default 0.995)")
      ->check(CLI::Range(0.0, 1.0));

  std::string reportDir;
  CLI::App* reportCmd = app.add_subcommand("report", "write DEBUG_DIR/index.html: one page of what a compile wrote into its debug directory");
  reportCmd->add_option("debug_dir", reportDir, "a debug directory (--debug-dir, POLICYC_DEBUG=1)")->required();

  try {
    app.parse(argc, argv);
    // Reduced precision is judged by action agreement over many observations, not one.
    if (checkBatch->count() == 0 && check.impl.precision != "fp32") check.batch = 1000;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return reportError(commandLineError(app, argc, argv, e));
  }

  for (const CLI::App* sub : app.get_subcommands()) {
    std::vector<std::string> args(argv, argv + argc);
    driver::setInvocation(sub->get_name(), process::commandLine(args));
  }
  try {
    if (*reportCmd) {
      fmt::print("wrote {}\n", driver::writeReport(reportDir).string());
      return 0;
    }
    if (*dumpCmd) return runDump(dump);
    if (*runCmd) return runRun(run);
    if (*compileCmd) return runCompile(compile);
    if (*benchCmd) {
      if (driver::isSharedObject(bench.model) &&
          (!benchPipeline.passes.empty() || !benchPipeline.disabled.empty() || !benchPipeline.printAfter.empty())) {
        fail("'{}' is already compiled: the pass options apply to .onnx and .pir models", bench.model);
      }
      bench.backend = benchBackend.resolve();
      bench.fuse = !benchBackend.noFuse;
      if (bench.compareBackends && !benchBackend.backend.empty()) fail("--compare-backends times both backends: drop --backend");
      if (!bench.debugDir.empty() && bench.compareBackends) fail("--debug-dir is one compile's: drop it or --compare-backends");
      if (!bench.debugDir.empty() && driver::isSharedObject(bench.model)) {
        fail("'{}' is already compiled: --debug-dir applies to .onnx and .pir models", bench.model);
      }
      return tools::runBench(bench, [&](const std::string& model, codegen::Backend b, bool fuse, bool profile) {
        BackendFlags backend = benchBackend;
        backend.backend = codegen::backendName(b);
        backend.noFuse = !fuse;
        // The debug directory is the timed build's: a baseline's build (nofuse) writes none.
        const bool timed = fuse == !benchBackend.noFuse;
        return compileCached(model, benchPipeline, benchImpl, benchTarget, backend, timed ? bench.debugDir : "", profile);
      });
    }
    if (*checkCmd) return runCheck(check);
    if (*minifyCmd) return runMinify(minify);
  } catch (const std::bad_alloc&) {
    return reportError("out of memory");
  } catch (const std::length_error&) {
    return reportError("out of memory (a size too large to allocate)");
  } catch (const std::exception& e) {
    return reportError(e.what());
  }
  return 0;
}
