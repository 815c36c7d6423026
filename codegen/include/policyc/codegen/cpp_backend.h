// The C++ backend: the post-fusion kernel program as one readable C++ file, compiled by the system
// compiler into a shared object implementing the C ABI of runtime/include/policyc/runtime/policyc_model.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"

namespace policyc::codegen {

// Targets of the generated code and the -march flag each one compiles with.
//   native -> -march=native, x86-64-v3 -> -march=x86-64-v3, x86-64-v4 -> -march=x86-64-v4,
//   generic -> -march=x86-64
std::vector<std::string> cppTargets();
// The -march flag of a target; policyc::Error listing the valid names for an unknown one.
std::string marchFlag(const std::string& target);

// A deliberate miscompilation: wrong arithmetic (accuracy: the node's result plus one), C++
// that does not compile (compile), or a trap when the node's kernel runs (crash).
struct InjectedFault {
  enum class Kind { Accuracy, Compile, Crash };
  std::string op;
  Kind kind = Kind::Accuracy;
};
// Parses "<op>:accuracy|compile|crash" (POLICYC_INJECT_FAULT); Error naming the valid forms and
// ops otherwise.
InjectedFault parseInjectedFault(const std::string& spec);
// The fault POLICYC_INJECT_FAULT asks for; nullopt when it is unset or empty.
std::optional<InjectedFault> injectedFaultFromEnv();

struct CppOptions {
  std::string name;               // C identifier prefix of the typed wrapper; empty: the program's name
  std::string target = "native";  // one of cppTargets()
  // With threads > 1 a kernel is split only into chunks of at least this much work (about one
  // multiply-add each): smaller ones cost more to hand to a thread than to run. 0 splits every
  // kernel as far as its units allow (tests use it to exercise every split).
  double minChunkCost = 131072.0;
  // Test hook: a line inserted verbatim into the generated source (e.g. to provoke a compiler error).
  std::string injectLine;
  // Fault injection for testing the debugging tools (POLICYC_INJECT_FAULT=<op>:<kind>): every
  // node of operator `faultOp` (its op-table name, e.g. "relu", "conv") is miscompiled.
  std::optional<InjectedFault> fault;
  // Times every kernel of every run (policyc_profile_data(): totals and a trace); costs two clock
  // reads per kernel, so it is for `policyc bench --profile`, not for deployment.
  bool profile = false;
};

struct GeneratedCpp {
  std::string name;                 // the C identifier used in the header (NAME_run, NAME_descriptor)
  std::string target;
  std::string source;               // output_code.cpp: prelude, weights blob, one function per kernel, ABI
  std::string header;               // NAME.h, #include-able by C
  std::vector<unsigned char> weights;  // every param the program reads, 64-byte aligned, packed layouts
};

// Emits the C++ for a (fused) kernel program and its memory plan.
GeneratedCpp emitCpp(const KernelProgram& program, const MemoryPlan& plan, const CppOptions& options = {});

// An optimised graph all the way to C++: lowering, fusion, the memory plan, emission. What the
// backend does not implement is an UnsupportedError "unsupported in backend cpp: node 'x' (op): ...".
GeneratedCpp generateCpp(const ir::Graph& graph, const CppOptions& options = {});

// What a driver sees of generateCpp's stages (the debug directory dumps them).
struct CodegenStages {
  bool fuse = true;  // false: one kernel per graph node (the nofuse backend)
  std::function<void(const KernelProgram&)> lowered;                        // before fusion
  std::function<void(const KernelProgram&, const MemoryPlan&)> planned;     // after fusion and planning
};
GeneratedCpp generateCpp(const ir::Graph& graph, const CppOptions& options, const CodegenStages& stages);

// The C++ compiler models are built with: $POLICYC_CXX when set and not empty, else "c++".
std::string defaultCompiler();

struct BuildOptions {
  std::string compiler = defaultCompiler();  // $POLICYC_CXX if set, else the system compiler c++
  // Where output_code.cpp, weights.bin and build.log go; empty: a fresh temporary directory,
  // removed after a successful build (kept, and named in the error, after a failed one).
  std::string workDir;
  bool keepWorkDir = false;
};

struct BuildResult {
  std::string workDir;  // where the source, weights and log are (empty when removed)
  double seconds = 0;   // the system compiler's wall time
};

// Writes the source and the weights blob (entering the object through `.incbin`), runs
// `c++ -std=c++17 -O3 -fPIC -shared -march=...` into a temporary name next to `outSo` and renames
// it: a failure never leaves a partial .so. A compiler failure is a policyc::Error that names the
// log and the generated source and quotes the first error line.
BuildResult buildSharedObject(const GeneratedCpp& generated, const std::string& outSo, const BuildOptions& options = {});

}  // namespace policyc::codegen
