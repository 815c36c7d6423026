// `--mode max-autotune`: times every implementation of every GEMM/conv kernel on this machine
// (generated microkernels and oneDNN primitives) at the tuning batch sizes, checks each against
// the generated one, and picks the fastest correct one per batch range (--mode default's choice
// unless another is more than 5% faster: one measurement's noise).
#pragma once

#include <string>
#include <vector>

#include "policyc/codegen/backend.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/graph.h"

namespace policyc::driver {

struct AutotuneOptions {
  // Whose implementations are timed: the tuning build is a C++ .so or an LLVM module compiled by
  // the JIT (for cpu and features).
  codegen::Backend backend = codegen::kDefaultBackend;
  codegen::CppOptions cpp;       // target, extern kernels, tuneBatches (the batch sizes timed)
  std::string cpu, features;     // backend llvm: --cpu, --features
  bool fuse = true;              // false: --no-fuse
  double secondsPerCandidate = 0.2;  // timed calls per candidate and batch size, at least 3
  bool progress = true;          // a counter on stderr (a bar when it is a terminal)
};

struct AutotuneResult {
  codegen::ImplChoice choice;    // for CppOptions::choice
  std::string report;            // autotune.txt: every candidate's time per kernel and batch, the winners
  int kernels = 0;               // tunable kernels
  int timed = 0;                 // (kernel, batch) pairs measured now; the rest came from the cache
  double seconds = 0;
};

// Tunes the kernels of `graph` (already optimised). Measurements are cached in
// cacheDir()/autotune, keyed by kernel signature, backend, CPU model, target and thread count, so
// tuning the same kernels again times nothing and builds nothing.
AutotuneResult autotune(const ir::Graph& graph, const AutotuneOptions& options);

// What identifies a kernel's timing: its kind, operator, attributes, operand shapes and strides,
// domain and epilogue (not its name).
std::string kernelSignature(const codegen::KernelProgram& program, const codegen::Kernel& kernel);

// The CPU model name (/proc/cpuinfo), part of the cache key.
std::string cpuModel();

}  // namespace policyc::driver
