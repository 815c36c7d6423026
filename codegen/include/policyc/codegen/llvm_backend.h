// The LLVM backend: the post-fusion kernel program emitted with IRBuilder as one LLVM module that
// implements the same C ABI as the C++ backend (runtime/include/policyc/runtime/policyc_model.h),
// optimised at O3 for a chosen target, then JIT-compiled in-process (ORC LLJIT), written as an
// object / assembly / textual IR, or linked into a shared object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "policyc/codegen/codegen.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"
#include "policyc/runtime/policyc_model.h"

namespace policyc::codegen {

// What the code is generated for: a target name (native, x86-64-v3, x86-64-v4, generic) or an
// LLVM target triple (x86_64-linux-gnu, aarch64-linux-gnu, ...), optionally a CPU and a feature
// string ("+avx2,-avx512f"). native is the host's triple, CPU and features.
struct LlvmTargetOptions {
  std::string target = "native";
  std::string cpu;       // empty: the target's default (native: the host CPU)
  std::string features;  // empty: the CPU's own
};

// The resolved target: triple, CPU and features as LLVM takes them. policyc::Error for an unknown
// target or triple (listing the target names and the triples' architectures this LLVM has), an
// unknown CPU (listing the valid CPUs of that architecture) or a malformed feature string.
struct LlvmTarget {
  std::string triple, cpu, features;
  std::string name;  // as written by the user (the descriptor's `target`)
  bool isHost = false;  // code for this machine: it can be run here
  // What the CPU and features imply (a CPU name implies its extensions: x86-64-v4, sapphirerapids):
  // AVX-512 (the schedule's wide vectors), AVX512_BF16 (--precision bf16 multiplies in bf16) and
  // AMX-BF16 (convs too, on oneDNN: TargetTraits::bf16Tiles); the CPU's vdpbf16ps at the FMA's
  // rate (TargetTraits::fastBf16Dot: an AMD CPU by name, znver4 or later, or native on one).
  bool avx512 = false, bf16Dot = false, bf16Tiles = false, fastBf16Dot = false;
  TargetTraits traits() const { return {!avx512, bf16Dot, bf16Tiles, fastBf16Dot}; }
};
LlvmTarget resolveLlvmTarget(const LlvmTargetOptions& options);

// Target names besides triples.
std::vector<std::string> llvmTargetNames();

// The LLVM this backend is built with ("19.1.7"), for debug directories and bug reports.
std::string llvmVersion();

// As CodegenOptions: every implementation of codegen.h, dispatched by batch range as the C++
// backend's; with `tuning`, all of them behind the autotuner's hooks.
struct LlvmOptions : CodegenOptions {
  LlvmTargetOptions target;
  bool keepUnoptimizedIr = false;  // keep the module as emitted as text (the debug directory's module.ll)
};

// An emitted and optimised module with its LLVM context (opaque: LLVM types stay out of this header).
class LlvmModule {
 public:
  struct Impl;
  explicit LlvmModule(std::unique_ptr<Impl> impl);
  LlvmModule(LlvmModule&&) noexcept;
  LlvmModule& operator=(LlvmModule&&) noexcept;
  ~LlvmModule();

  const std::string& name() const;    // the C identifier of the typed wrappers (NAME_run)
  const LlvmTarget& target() const;
  // The optimised module as text; with elideWeights the weights' initializer is printed as
  // zeroinitializer (and says so): a readable dump rather than a module to compile.
  std::string ir(bool elideWeights = false) const;
  // The module as emitted, before the passes, weights elided (empty unless
  // LlvmOptions::keepUnoptimizedIr).
  const std::string& unoptimizedIr() const;
  const std::string& header() const;  // NAME.h, the same C header as the C++ backend's
  const ImplChoice& dispatch() const;  // the implementation of each GEMM/conv kernel per batch range
  double emitSeconds() const;         // IRBuilder emission
  double optimizeSeconds() const;     // the O3 pipeline

  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Lowers the (fused) program to LLVM IR and optimises it for the target. Unsupported forms are
// UnsupportedError "unsupported in backend llvm: ...".
LlvmModule emitLlvm(const KernelProgram& program, const MemoryPlan& plan, const LlvmOptions& options = {});
// An optimised graph all the way to an optimised module (lowering, fusion, the memory plan).
LlvmModule generateLlvm(const ir::Graph& graph, const LlvmOptions& options = {});

enum class LlvmFileKind { Object, Assembly, Ir };
// Writes OUT.o / OUT.s / OUT.ll (through a temporary name: no partial file on failure).
void writeLlvmFile(const LlvmModule& module, LlvmFileKind kind, const std::string& path);
// A position-independent object linked with `cc -shared` (and the backend's thread-pool support
// archive) into `outSo`, loadable exactly like the C++ backend's. Needs a host target.
BuildResult buildLlvmSharedObject(const LlvmModule& module, const std::string& outSo, const BuildOptions& options = {});

// A model compiled in-process by ORC LLJIT: no files, no system compiler, no dlopen. The code
// lives as long as this object.
class JitModel {
 public:
  struct Impl;
  explicit JitModel(std::unique_ptr<Impl> impl);
  JitModel(JitModel&&) noexcept;
  ~JitModel();
  const policyc_model* descriptor() const;
  const policyc_profile* profile() const;
  void* symbol(const char* name) const;  // another exported symbol, null if none
  double seconds() const;                // the JIT's code generation
 private:
  std::unique_ptr<Impl> impl_;
};
// JIT-compiles the module (consumed); needs a host target. policyc::Error on failure.
std::unique_ptr<JitModel> jitCompile(LlvmModule module);

}  // namespace policyc::codegen
