// The compile driver, top to bottom: graph -> passes -> (autotune) -> lowering, fusion, memory
// plan and schedule -> the backend's emitter (C++ source or an LLVM module) -> build, link or JIT,
// with every stage written into the debug directory when one is active; and the compile cache.
#include "policyc/driver/compile.h"

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"
#include "policyc/driver/autotune.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/driver/report.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/cpu.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"

namespace policyc::driver {

namespace fs = std::filesystem;

bool isEmitKind(const std::string& emit) { return emit == "so" || emit == "obj" || emit == "asm" || emit == "llvm"; }

void validateTarget(const CompileRequest& request) {
  if (request.backend == codegen::Backend::Llvm) {
    codegen::LlvmTarget t = codegen::resolveLlvmTarget({request.cpp.target, request.cpu, request.features});
    if (!t.isHost && (request.jit || request.emit == "so")) {
      fail("target {} is not this machine's: its code cannot be {} here (--emit=obj, asm or llvm write it for another machine)",
           t.triple, request.jit ? "run" : "linked into a shared object");
    }
    return;
  }
  codegen::marchFlags(request.cpp.target);
  const char* backend = codegen::backendName(request.backend);
  if (!request.cpu.empty() || !request.features.empty()) fail("--cpu and --features apply to backend llvm (this is backend {})", backend);
  if (request.emit != "so") fail("--emit={} applies to backend llvm (backend {} writes a shared object)", request.emit, backend);
}

runtime::Model loadCompiled(const CompileResult& compiled) {
  if (!compiled.jit) return runtime::Model::load(compiled.so);
  std::shared_ptr<codegen::JitModel> jit = compiled.jit;
  return runtime::Model::adopt("<jit>", jit->descriptor(), jit->profile(), jit, [jit](const char* name) { return jit->symbol(name); });
}
bool isCompileMode(const std::string& mode) { return mode == "default" || mode == "max-autotune"; }

namespace {

// The C header, whole or not at all.
void writeHeader(const std::string& path, const std::string& text) {
  asError([&] { files::writeAtomic(path, text); });
}

// --precision, --keep-fp32, the int8 layers' least size and --row-block-bytes as part of a key ("" for the defaults: keys made
// before them hold).
std::string codeOptionsKey(const codegen::CodegenOptions& o) {
  std::string key;
  if (o.precision != codegen::Precision::Fp32 || !o.keepFp32.empty()) {
    key += fmt::format("|precision {} keep {}", codegen::precisionName(o.precision), fmt::join(o.keepFp32, ","));
  }
  if (o.streamedWeights != codegen::kStreamedWeights) key += fmt::format("|streamed-weights {}", o.streamedWeights);
  if (o.rowBlockBytes != codegen::CodegenOptions::kRowBlockBytes) key += fmt::format("|row-block-bytes {}", o.rowBlockBytes);
  return key;
}

// A hash of the graph (its text and weights) and of the options that change the code.
uint64_t graphHash(const ir::Graph& graph, const CompileRequest& r) {
  ir::PrintedGraph printed = ir::printGraph(graph);
  std::string_view weights(reinterpret_cast<const char*>(printed.sidecar.data()), printed.sidecar.size());
  const passes::PipelineOptions& p = r.pipeline;
  std::string options = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", codegen::backendName(r.backend), r.fuse, r.cpp.target, r.cpu, r.features, r.mode,
                                    p.passes ? fmt::format("{}", fmt::join(*p.passes, ",")) : "default", fmt::join(p.disabled, ","),
                                    r.cpp.profile, fmt::join(r.cpp.tuneBatches, ","), r.cpp.externKernels, r.cpp.forceImpl,
                                    r.cpp.name, r.optimize);
  if (r.updatableWeights || !graph.updatableWeights().empty()) options += "|updatable-weights";
  options += codeOptionsKey(r.cpp);
  return textHash(fmt::format("{:016x}{:016x}{}", textHash(printed.text), textHash(weights), options));
}

// A backend's output before it is built: the C header, the model's implementation dispatch, and
// the build step (named for the stage timer).
struct Emitted {
  std::string header;
  codegen::ImplChoice dispatch;
  std::string buildStage;
  std::function<void(CompileResult&)> build;
};

codegen::BuildOptions buildOptions(const DebugDir* d) {
  codegen::BuildOptions build;
  if (d) {
    build.workDir = d->path().string();
    build.keepWorkDir = true;
  }
  return build;
}

Emitted emitCpp(const codegen::KernelProgram& program, const codegen::MemoryPlan& plan, const CompileRequest& request,
                const codegen::CppOptions& cpp, const DebugDir* d) {
  auto generated = std::make_shared<codegen::GeneratedCpp>(codegen::emitCpp(program, plan, cpp));
  Emitted e;
  e.header = generated->header;
  e.dispatch = generated->dispatch;
  e.buildStage = "c++ build";
  e.build = [generated, &request, d](CompileResult&) { codegen::buildSharedObject(*generated, request.output, buildOptions(d)); };
  return e;
}

Emitted emitLlvm(const codegen::KernelProgram& program, const codegen::MemoryPlan& plan, const CompileRequest& request,
                 const codegen::CppOptions& cpp, DebugDir* d) {
  codegen::LlvmOptions options;
  static_cast<codegen::CodegenOptions&>(options) = cpp;  // what both backends take
  options.target = {request.cpp.target, request.cpu, request.features};
  options.keepUnoptimizedIr = d != nullptr;
  auto module = std::make_shared<codegen::LlvmModule>(codegen::emitLlvm(program, plan, options));
  if (d) {
    d->write("module.ll", module->unoptimizedIr());
    d->write("module.opt.ll", module->ir(true));
  }
  Emitted e;
  e.header = module->header();
  e.dispatch = module->dispatch();
  if (request.jit) {
    e.buildStage = "llvm jit";
    e.build = [module](CompileResult& out) { out.jit = codegen::jitCompile(std::move(*module)); };
  } else if (request.emit == "so") {
    e.buildStage = "llvm object + link";
    e.build = [module, &request, d](CompileResult&) { codegen::buildLlvmSharedObject(*module, request.output, buildOptions(d)); };
  } else {
    e.buildStage = "llvm " + request.emit;
    const codegen::LlvmFileKind kind = request.emit == "obj"   ? codegen::LlvmFileKind::Object
                                       : request.emit == "asm" ? codegen::LlvmFileKind::Assembly
                                                               : codegen::LlvmFileKind::Ir;
    e.build = [module, kind, &request](CompileResult&) { codegen::writeLlvmFile(*module, kind, request.output); };
  }
  return e;
}

// command.txt's account of the request: what a person needs to rerun it or report it.
std::string requestDetails(const CompileRequest& r) {
  const passes::PipelineOptions& p = r.pipeline;
  std::string text = fmt::format("policyc {}, LLVM {}\nmodel: {}\n", kVersion, codegen::llvmVersion(), escape::message(r.modelPath));
  text += fmt::format("backend: {}{}\nmode: {}\ntarget: {}{}{}\n", codegen::backendName(r.backend), r.fuse ? "" : " (no fusion)", r.mode,
                      escape::message(r.cpp.target), r.cpu.empty() ? "" : " cpu " + escape::message(r.cpu),
                      r.features.empty() ? "" : " features " + escape::message(r.features));
  text += fmt::format("passes: {}{}\n", p.passes ? fmt::format("{}", fmt::join(*p.passes, ",")) : "default",
                      p.disabled.empty() ? "" : fmt::format(" (disabled: {})", fmt::join(p.disabled, ",")));
  text += fmt::format("extern kernels: {}, tune batches: {}{}{}\n", r.cpp.externKernels ? "oneDNN" : "none", fmt::join(r.cpp.tuneBatches, ","),
                      r.cpp.forceImpl.empty() ? "" : ", forced implementation " + r.cpp.forceImpl, r.cpp.profile ? ", profiling" : "");
  if (r.updatableWeights) text += "weights: updatable (set_weights)\n";
  if (r.cpp.precision != codegen::Precision::Fp32 || !r.cpp.keepFp32.empty()) {
    std::vector<std::string> keep;
    for (const std::string& n : r.cpp.keepFp32) keep.push_back(escape::message(n));
    text += fmt::format("precision: {}{}\n", codegen::precisionName(r.cpp.precision),
                        keep.empty() ? "" : fmt::format(" (kept fp32: {})", fmt::join(keep, ", ")));
  }
  text += fmt::format("output: {}\n", r.jit ? "in-process (JIT)" : escape::message(r.output));
  return text;
}

// The last files of a compile's debug directory, whether or not it succeeded. The report is a
// view of the other files: when it cannot be written the compile still stands, with a warning.
void finishDebugDir(DebugDir& d) {
  d.writeTimes();
  d.recordBuildFiles();
  try {
    writeReport(d.path());
  } catch (const std::exception& e) {
    fmt::print(stderr, "policyc: warning: no debug report in {}: {}\n", d.path().string(), escape::message(e.what()));
  }
}

}  // namespace

void markUpdatableWeights(ir::Graph& graph) {
  std::vector<ir::Node*> weights;
  for (const auto& n : graph.nodes()) {
    const bool weight = n->kind() == ir::NodeKind::Param && n->isModelWeight();
    if (weight && n->paramData().dtype() == ir::DType::F32 && n->paramData().numel() > 0) weights.push_back(n.get());
  }
  if (weights.empty()) fail("--updatable-weights: model '{}' has no f32 weights to replace", graph.name());
  for (ir::Node* n : weights) graph.makeUpdatable(n);
}

namespace {

// The compile proper, once the debug directory (if any) is chosen.
CompileResult compileInto(const ir::Graph& input, const CompileRequest& request, DebugDir* d, codegen::CppOptions cpp) {
  const bool llvm = request.backend == codegen::Backend::Llvm;
  const bool nofuse = !request.fuse;
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<ir::Graph> graph = input.clone();
  if (request.updatableWeights && graph->updatableWeights().empty()) markUpdatableWeights(*graph);
  if (d) {
    StageTimer t(d, "dump graph_imported");
    d->writeGraph(request.optimize ? "graph_imported.pir" : "graph_input.pir", *graph);
    d->writePicture(request.optimize ? "graph_imported" : "graph_input", ir::printDot(*graph, request.optimize ? "imp" : "inp"));
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
      d->writePicture("graph_optimized", ir::printDot(*graph, kOptimizedDotPrefix));
    }
  }
  CompileResult out;
  if (request.mode == "max-autotune") {
    AutotuneOptions tune;
    tune.backend = request.backend;
    tune.cpp = cpp;
    tune.cpu = request.cpu;
    tune.features = request.features;
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
  // Lowering to the kernel program, fusion and the memory plan (docs/kernel_program.md), then the
  // backend's emitter (the schedule, then C++ source or an LLVM module, and its dumps) and what
  // builds it (a .so, an object, assembly or IR file, or code in this process). What a backend
  // cannot do is one error naming the backend.
  std::string kernelsText;  // kernels.json, once the implementations are chosen
  Emitted emitted = codegen::inBackend(request.backend, [&] {
    codegen::KernelProgram program;
    codegen::MemoryPlan plan;
    {
      StageTimer t(d, "lower, fuse, plan");
      program = codegen::lowerGraph(*graph);
      if (d) d->write("ir_pre_fusion.txt", codegen::printKernelProgram(program));
      if (!nofuse) codegen::fuseKernels(program);
      plan = codegen::planMemory(program);
    }
    if (d) {
      d->write("ir_post_fusion.txt", codegen::printKernelProgram(program) + "\n" + codegen::printMemoryPlan(program, plan));
      d->writePicture("kernels", codegen::printKernelDot(program));
    }
    for (const codegen::Kernel& k : program.kernels) {
      for (const ir::Node* n : k.sources) out.kernelOfNode[n->name()] = k.name;
    }
    StageTimer t(d, llvm ? "llvm codegen (IRBuilder + O3)" : "codegen");
    Emitted e = llvm ? emitLlvm(program, plan, request, cpp, d) : emitCpp(program, plan, request, cpp, d);
    if (d) kernelsText = kernelsJson(program, e.dispatch);
    return e;
  });
  if (d) {
    d->write("kernels.json", kernelsText);
    d->write("nodes.json", nodesJson(*graph, out.kernelOfNode));
  }
  {
    StageTimer t(d, emitted.buildStage);
    emitted.build(out);
  }
  if (!request.header.empty()) writeHeader(request.header, emitted.header);
  if (d) {
    finishDebugDir(*d);
    out.debugDir = d->path().string();
  }
  out.so = request.jit ? "" : request.output;
  out.dispatch = emitted.dispatch;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace

CompileResult compileGraph(const ir::Graph& input, const CompileRequest& request) {
  if (request.backend == codegen::Backend::Interp) fail("backend interp does not compile (compiling backends: cpp, llvm)");
  if (!isEmitKind(request.emit)) fail("unknown --emit '{}' (valid: so, obj, asm, llvm)", request.emit);
  validateTarget(request);  // an unknown target fails before any work
  if (!isCompileMode(request.mode)) fail("unknown mode '{}' (valid: default, max-autotune)", request.mode);
  codegen::CppOptions cpp = request.cpp;
  if (!cpp.fault) cpp.fault = codegen::injectedFaultFromEnv();
  // What produced the code, for the descriptor (the cache passes its key's hash).
  if (cpp.sourceHash.empty()) cpp.sourceHash = fmt::format("{:016x}", graphHash(input, request));

  std::optional<DebugDir> dir =
      DebugDir::select(request.debugDir, request.modelPath, input.name(), codegen::backendName(request.backend), requestDetails(request));
  DebugDir* d = dir ? &*dir : nullptr;
  // POLICYC_DEBUG=1 chose the directory: say where it is (with --debug-dir the user knows).
  if (d && request.debugDir.empty()) fmt::print(stderr, "policyc: writing debug files to {}\n", d->path().string());

  try {
    return compileInto(input, request, d, cpp);
  } catch (const Error&) {
    // A failed compile still leaves a page of what it got to (its error is the caller's to say).
    if (d) {
      try {
        finishDebugDir(*d);
      } catch (const std::exception&) {
      }
    }
    throw;
  }
}

fs::path cacheDir() {
  if (const char* dir = std::getenv("POLICYC_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "policyc";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "policyc";
  return fs::temp_directory_path() / "policyc-cache";
}

std::string cacheKey(const CompileRequest& request, const std::string& compilerId) {
  const std::string& model = request.modelPath;
  const passes::PipelineOptions& p = request.pipeline;
  const char* fault = std::getenv("POLICYC_INJECT_FAULT");
  const codegen::CppOptions& cpp = request.cpp;
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", fileHash(model), fileHash(model + ".bin"),
                                p.passes ? fmt::format("{}", fmt::join(*p.passes, ",")) : "default",
                                fmt::join(p.disabled, ","), codegen::backendName(request.backend), request.fuse ? "fuse" : "no-fuse",
                                cpp.target, cpp.name,
                                fault ? fault : "", compilerId, cpp.profile ? "profile" : "", request.mode,
                                fmt::join(cpp.tuneBatches, ","), cpp.externKernels ? "extern" : "no-extern", cpp.forceImpl, request.cpu,
                                request.features);
  if (request.updatableWeights) key += "|updatable-weights";
  key += codeOptionsKey(cpp);
  if (cpp.target == "native") {
    // Code for this machine: its CPU, its extensions and the schedule's reading of them (AVX-512,
    // AVX512_BF16, AMX-BF16, vdpbf16ps's rate), so that a cache directory shared by machines of
    // other CPUs (a cluster's home directory) never hands one's native build to another (an
    // illegal instruction, or another schedule).
    const codegen::TargetTraits t = codegen::cppTargetTraits("native");
    key += fmt::format("|host {} [{}] {}{}{}{}", cpuModel(), fmt::join(runtime::hostCpuFeatures(), ","), t.narrowVectors ? "narrow" : "wide",
                       t.bf16Dot ? " bf16-dot" : "", t.bf16Tiles ? " bf16-tiles" : "", t.fastBf16Dot ? " fast-bf16-dot" : "");
  }
  return key;
}

std::string compileCached(CompileRequest request, const std::string& compilerId,
                          const std::function<std::unique_ptr<ir::Graph>()>& load) {
  const std::string& model = request.modelPath;
  if (fileHash(model).empty()) fail("cannot read '{}': no such file or not readable", model);
  const uint64_t h = textHash(cacheKey(request, compilerId));
  fs::path dir = cacheDir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create the cache directory '{}': {}", dir.string(), ec.message());
  const std::string hash = fmt::format("{:016x}", h);
  fs::path so = dir / fmt::format("{}-{}.so", escape::fileName(fs::path(model).stem().string()), hash);
  const char* debugEnv = std::getenv("POLICYC_DEBUG");
  bool debugging = !request.debugDir.empty() || (debugEnv && *debugEnv && std::string_view(debugEnv) != "0");
  // An entry is used only when it is whole and was built for this key (its descriptor's
  // source_hash); a truncated, corrupt or foreign one is rebuilt (the build replaces it by rename).
  std::string damaged;
  if (!debugging && fs::exists(so)) {
    try {
      runtime::Model cached = runtime::Model::load(so.string());
      if (cached.sourceHash() == hash) return so.string();
      damaged = fmt::format("it was built from something else (source hash '{}')", cached.sourceHash());
    } catch (const runtime::ModelError& e) {
      damaged = e.what();
    }
    fmt::print(stderr, "policyc: the cache entry {} is damaged ({}); rebuilding it\n", so.string(), escape::message(damaged));
  }
  request.output = so.string();
  request.emit = "so";
  request.jit = false;
  request.cpp.sourceHash = hash;
  compileGraph(*load(), request);
  fmt::print(stderr, "compiled {} into the cache: {}\n", model, so.string());
  return so.string();
}

}  // namespace policyc::driver
