// The C++ backend: the post-fusion kernel program as one readable C++ file, compiled by the system
// compiler into a shared object implementing the C ABI of runtime/include/policyc/runtime/policyc_model.h.
#pragma once

#include <string>
#include <vector>

#include "policyc/codegen/codegen.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"

namespace policyc::codegen {

// Targets of the generated code and the flags each one compiles with.
//   native -> -march=native, x86-64-v3 -> -march=x86-64-v3, x86-64-v4 -> -march=x86-64-v4,
//   x86-64-v4-bf16 -> -march=x86-64-v4 -mavx512bf16 (Cooper Lake, Sapphire Rapids, Zen 4: where
//   --precision bf16 multiplies in bf16), generic -> -march=x86-64
std::vector<std::string> cppTargets();
// The -march flags of a target; policyc::Error listing the valid names for an unknown one.
std::vector<std::string> marchFlags(const std::string& target);

struct CppOptions : CodegenOptions {
  std::string target = "native";  // one of cppTargets()
  // Test hook: a line inserted verbatim into the generated source (e.g. to provoke a compiler error).
  std::string injectLine;
};

struct GeneratedCpp {
  std::string name;                 // the C identifier used in the header (NAME_run, NAME_descriptor)
  std::string target;
  std::string source;               // output_code.cpp: prelude, weights blob, one function per kernel, ABI
  std::string header;               // NAME.h, #include-able by C
  std::vector<unsigned char> weights;  // every param the program reads, 64-byte aligned, packed layouts
  std::vector<std::string> libraries;  // what the shared object links besides libc/libstdc++ (dnnl)
  ImplChoice dispatch;                 // the implementations the model runs (empty for tuning builds)
};

// Emits the C++ for a (fused) kernel program and its memory plan.
GeneratedCpp emitCpp(const KernelProgram& program, const MemoryPlan& plan, const CppOptions& options = {});

// An optimised graph all the way to C++: lowering, fusion, the memory plan, emission. What the
// backend does not implement is an UnsupportedError "unsupported in backend cpp: node 'x' (op): ...".
GeneratedCpp generateCpp(const ir::Graph& graph, const CppOptions& options = {});

// Writes the source and the weights blob (entering the object through `.incbin`), runs
// `c++ -std=c++17 -O3 -fPIC -shared -march=...` into a temporary name next to `outSo` and renames
// it: a failure never leaves a partial .so. The compiler runs without a shell (every path one
// argument). A compiler failure is a policyc::Error that quotes the first error line and names the
// log and the generated source when they are kept (a work directory).
BuildResult buildSharedObject(const GeneratedCpp& generated, const std::string& outSo, const BuildOptions& options = {});

}  // namespace policyc::codegen
