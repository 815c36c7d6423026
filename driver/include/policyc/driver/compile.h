// The compile driver every compiling command shares: the pass pipeline, lowering, fusion, the
// memory plan, the C++ backend and the build, each stage dumped into the debug directory.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "policyc/codegen/backend.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/ir/graph.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/loader.h"

namespace policyc::driver {

// The version `policyc --version` prints and every debug directory records.
inline constexpr const char* kVersion = "0.1.0";

struct CompileRequest {
  std::string modelPath;             // names and hashes the debug directory
  std::string output;                // OUT.so
  std::string header;                // also write the C header here (optional)
  // cpp or llvm (codegen/backend.h); llvm emits LLVM IR (codegen/llvm_backend.h), JIT-compiled
  // in-process or built into the same kind of .so as cpp's.
  codegen::Backend backend = codegen::kDefaultBackend;
  // false (--no-fuse): every fusion pass and kernel fusion off (one kernel per graph node), for
  // narrowing a bug down to fusion.
  bool fuse = true;
  // Backend llvm: what to write at `output` (so: a shared object; obj, asm, llvm: OUT.o, OUT.s,
  // OUT.ll), or (jit) nothing: the model is compiled in-process into CompileResult::jit.
  std::string emit = "so";
  bool jit = false;
  std::string cpu, features;         // backend llvm: --cpu, --features (cpp.target is the target)
  passes::PipelineOptions pipeline;  // the graph passes (noFusion is set when fuse is false)
  codegen::CppOptions cpp;           // fault: POLICYC_INJECT_FAULT unless already set
  std::string debugDir;              // --debug-dir; empty: POLICYC_DEBUG=1 decides
  bool optimize = true;              // false: the graph is already optimised
  // default: the heuristic picks each GEMM/conv kernel's implementation; max-autotune: the
  // autotuner times them in the backend's own code (driver/autotune.h) at cpp.tuneBatches and
  // writes autotune.txt.
  std::string mode = "default";
  bool progress = true;              // the autotuner's progress on stderr
  // --updatable-weights: every f32 weight of the model file (ONNX initializers, .pir params) can
  // be replaced at run time (policyc_model::set_weights); the passes move such weights (transpose,
  // concat, pack) but fold nothing into them (no batch-norm folding); oneDNN kernels reorder
  // their copy again after an update. markUpdatableWeights does the marking.
  bool updatableWeights = false;
};

// Makes every f32 model weight of `graph` (ir::Node::isModelWeight) with at least one element
// updatable, in graph order; policyc::Error when it has none.
void markUpdatableWeights(ir::Graph& graph);

// The valid values of CompileRequest::mode / --mode.
bool isCompileMode(const std::string& mode);  // default | max-autotune

struct CompileResult {
  std::string so;
  std::string debugDir;  // where the stages went; empty when debugging is off
  double seconds = 0;
  // The kernel that computes each op node's value (by the node's name), for error reports.
  std::map<std::string, std::string> kernelOfNode;
  codegen::ImplChoice dispatch;  // the implementation of each GEMM/conv kernel per batch range
  std::shared_ptr<codegen::JitModel> jit;  // backend llvm with CompileRequest::jit
};

// The valid values of CompileRequest::emit / --emit.
bool isEmitKind(const std::string& emit);  // so | obj | asm | llvm

// The compiled model, ready to run: the JIT's code (kept alive by the Model) or the .so loaded.
runtime::Model loadCompiled(const CompileResult& compiled);

// Fails (policyc::Error listing the valid choices) for a target / CPU / feature string the
// backend does not know, before any work.
void validateTarget(const CompileRequest& request);

// Compiles `graph` (imported, or optimised with optimize = false) into request.output. With a
// debug directory it writes graph_imported.pir, graph_optimized.pir (+ .bin sidecars),
// passes.log, ir_pre_fusion.txt, ir_post_fusion.txt, output_code.cpp, weights.bin, build.log and
// compile_times.txt, and says where on stderr. Errors (bad options, an unsupported form, a
// compiler failure) are policyc::Error; the build leaves no partial .so.
CompileResult compileGraph(const ir::Graph& graph, const CompileRequest& request);

// Where compiled models are cached: $POLICYC_CACHE_DIR, else $XDG_CACHE_HOME/policyc, else
// ~/.cache/policyc.
std::filesystem::path cacheDir();

// The compiled form of request.modelPath in the cache, compiled there (with `load` giving the
// graph) unless an identical compile is there. The key covers the model's bytes (and a .pir's
// sidecar), the pass options, backend, target (for native this machine: cacheKey), profiling, POLICYC_INJECT_FAULT and `compilerId` (a hash of
// the compiler's own binary), so a changed model or a rebuilt compiler never hits a stale .so.
// With a debug directory (request.debugDir or POLICYC_DEBUG=1) it always compiles, to fill it.
// request.output is ignored.
std::string compileCached(CompileRequest request, const std::string& compilerId,
                          const std::function<std::unique_ptr<ir::Graph>()>& load);
// The text compileCached hashes into an entry's name: with --target native it also names this
// machine's CPU model, extensions and the schedule's reading of them (TargetTraits).
std::string cacheKey(const CompileRequest& request, const std::string& compilerId);

}  // namespace policyc::driver
