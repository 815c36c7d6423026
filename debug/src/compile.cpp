// The compile driver: graph -> passes -> kernel program -> fusion -> memory plan -> C++ -> .so,
// with every stage written into the debug directory when one is active.
#include "policyc/debug/compile.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"
#include "policyc/debug/debug_dir.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"

namespace policyc::debug {

namespace fs = std::filesystem;

bool isCodegenBackend(const std::string& backend) { return backend == "cpp" || backend == "nofuse"; }

CompileResult compileGraph(const ir::Graph& input, const CompileRequest& request) {
  if (!isCodegenBackend(request.backend)) fail("backend '{}' does not compile (compiling backends: cpp, nofuse)", request.backend);
  codegen::marchFlag(request.cpp.target);  // an unknown target fails before any work
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
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace policyc::debug
