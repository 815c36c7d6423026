// The compile driver: graph -> passes -> kernel program -> fusion -> memory plan -> C++ -> .so,
// with every stage written into the debug directory when one is active.
#include "policyc/debug/compile.h"

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"
#include "policyc/debug/autotune.h"
#include "policyc/debug/debug_dir.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"

namespace policyc::debug {

namespace fs = std::filesystem;

bool isCodegenBackend(const std::string& backend) { return backend == "cpp" || backend == "nofuse"; }
bool isCompileMode(const std::string& mode) { return mode == "default" || mode == "max-autotune"; }

CompileResult compileGraph(const ir::Graph& input, const CompileRequest& request) {
  if (!isCodegenBackend(request.backend)) fail("backend '{}' does not compile (compiling backends: cpp, nofuse)", request.backend);
  codegen::marchFlag(request.cpp.target);  // an unknown target fails before any work
  if (!isCompileMode(request.mode)) fail("unknown mode '{}' (valid: default, max-autotune)", request.mode);
  auto start = std::chrono::steady_clock::now();
  const bool nofuse = request.backend == "nofuse";
  codegen::CppOptions cpp = request.cpp;
  if (!cpp.fault) cpp.fault = codegen::injectedFaultFromEnv();

  std::optional<DebugDir> dir = DebugDir::select(request.debugDir, request.modelPath, input.name());
  DebugDir* d = dir ? &*dir : nullptr;
  // POLICYC_DEBUG=1 chose the directory: say where it is (with --debug-dir the user knows).
  if (d && request.debugDir.empty()) fmt::print(stderr, "policyc: writing debug files to {}\n", d->path().string());

  std::unique_ptr<ir::Graph> graph = input.clone();
  if (d) {
    StageTimer t(d, "dump graph_imported");
    d->writeGraph(request.optimize ? "graph_imported.pir" : "graph_input.pir", *graph);
  }
  if (request.optimize) {
    passes::PipelineOptions options = request.pipeline;
    options.noFusion = options.noFusion || nofuse;
    passes::PipelineResult result;
    {
      StageTimer t(d, "passes");
      result = passes::runPipeline(*graph, options);
    }
    std::fwrite(result.printed.data(), 1, result.printed.size(), stderr);
    if (d) {
      d->write("passes.log", passes::formatPassLog(result));
      d->writeGraph("graph_optimized.pir", *graph);
    }
  }
  CompileResult out;
  codegen::CodegenStages stages;
  stages.fuse = !nofuse;
  stages.lowered = [&](const codegen::KernelProgram& program) {
    if (d) d->write("ir_pre_fusion.txt", codegen::printKernelProgram(program));
  };
  stages.planned = [&](const codegen::KernelProgram& program, const codegen::MemoryPlan& plan) {
    if (d) d->write("ir_post_fusion.txt", codegen::printKernelProgram(program) + "\n" + codegen::printMemoryPlan(program, plan));
    for (const codegen::Kernel& k : program.kernels) {
      for (const ir::Node* n : k.sources) out.kernelOfNode[n->name()] = k.name;
    }
  };
  if (request.mode == "max-autotune") {
    AutotuneOptions tune;
    tune.cpp = cpp;
    tune.fuse = !nofuse;
    tune.progress = request.progress;
    AutotuneResult tuned;
    {
      StageTimer t(d, "autotune");
      tuned = autotune(*graph, tune);
    }
    if (d) d->write("autotune.txt", tuned.report);
    if (request.progress) {
      fmt::print(stderr, "autotune: {} kernels, {} timed now, {} from the cache, {:.1f} s{}\n", tuned.kernels, tuned.timed,
                 tuned.kernels * static_cast<int>(cpp.tuneBatches.size()) - tuned.timed, tuned.seconds,
                 d ? fmt::format(" (choices in {})", (d->path() / "autotune.txt").string()) : "");
    }
    cpp.choice = tuned.choice;
  }
  codegen::GeneratedCpp generated;
  {
    StageTimer t(d, "codegen");
    generated = codegen::generateCpp(*graph, cpp, stages);
  }
  codegen::BuildOptions build;
  if (d) {
    build.workDir = d->path().string();
    build.keepWorkDir = true;
  }
  {
    StageTimer t(d, "c++ build");
    try {
      codegen::buildSharedObject(generated, request.output, build);
    } catch (const Error&) {
      if (d) d->writeTimes();
      throw;
    }
  }
  if (!request.header.empty()) {
    std::ofstream f(request.header, std::ios::binary);
    f << generated.header;
    if (!f) fail("cannot write '{}'", request.header);
  }
  if (d) {
    d->writeTimes();
    out.debugDir = d->path().string();
  }
  out.so = request.output;
  out.dispatch = generated.dispatch;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

fs::path cacheDir() {
  if (const char* dir = std::getenv("POLICYC_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "policyc";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "policyc";
  return fs::temp_directory_path() / "policyc-cache";
}

std::string compileCached(CompileRequest request, const std::string& compilerId,
                          const std::function<std::unique_ptr<ir::Graph>()>& load) {
  const std::string& model = request.modelPath;
  if (fileHash(model).empty()) fail("cannot read '{}': no such file or not readable", model);
  const passes::PipelineOptions& p = request.pipeline;
  const char* fault = std::getenv("POLICYC_INJECT_FAULT");
  const codegen::CppOptions& cpp = request.cpp;
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", fileHash(model), fileHash(model + ".bin"),
                                p.passes ? fmt::format("{}", fmt::join(*p.passes, ",")) : "default",
                                fmt::join(p.disabled, ","), request.backend, cpp.target, cpp.name,
                                fault ? fault : "", compilerId, cpp.profile ? "profile" : "", request.mode,
                                fmt::join(cpp.tuneBatches, ","), cpp.externKernels ? "extern" : "no-extern", cpp.forceImpl);
  const uint64_t h = textHash(key);
  fs::path dir = cacheDir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create the cache directory '{}': {}", dir.string(), ec.message());
  fs::path so = dir / fmt::format("{}-{:016x}.so", fs::path(model).stem().string(), h);
  const char* debugEnv = std::getenv("POLICYC_DEBUG");
  bool debugging = !request.debugDir.empty() || (debugEnv && *debugEnv && std::string_view(debugEnv) != "0");
  if (debugging || !fs::exists(so)) {
    request.output = so.string();
    compileGraph(*load(), request);
    fmt::print(stderr, "compiled {} into the cache: {}\n", model, so.string());
  }
  return so.string();
}

}  // namespace policyc::debug
