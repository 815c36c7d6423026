// The schedule of a post-fusion kernel program: what both emitters print, decided once — the
// implementation of every GEMM/conv kernel per batch range (and the candidates, the heuristic and
// the oneDNN post-op plans behind it), the weights blob (raw params and packed panels, with their
// offsets), the workspace (the memory plan's, then the oneDNN kernels' scratch), the C names of the
// typed wrappers and the model's C header. The emitters decide only how to print it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "policyc/codegen/codegen.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"

namespace policyc::codegen {

// ---- implementations of GEMM/conv kernels (cpp_backend.h lists them)

enum class Impl : int { Gemm4x32, Gemm4x16, Onednn, OnednnPostOps };
const char* implName(Impl i);
bool isExtern(Impl i);  // a oneDNN primitive: the model links libdnnl
std::optional<Impl> implByName(const std::string& name);
std::string implNames();  // "gemm4x32, gemm4x16, onednn, onednn_postops"

// The implementations kernel `k` has (none: it is not a packed linear/conv kernel).
std::vector<Impl> candidatesOf(const KernelProgram& p, const Kernel& k, bool allowExtern,
                               const std::optional<InjectedFault>& fault = std::nullopt);

// The epilogue as oneDNN post-ops: eltwise ops and x*a+b on the running value, at most one
// residual add (a sum post-op: the residual is copied into the destination first), then one
// plain store.
struct PostOp {
  std::string alg;  // dnnl::algorithm enumerator; empty: sum
  double alpha = 0, beta = 0;
  const ir::Node* node = nullptr;
};
struct PostOpPlan {
  std::vector<PostOp> ops;
  int store = -1;      // the buffer the result goes to
  int residual = -1;   // the buffer a sum post-op adds (-1: none)
};
std::optional<PostOpPlan> postOpPlan(const KernelProgram& p, const Kernel& k);

// ---- names and attributes

const char* ctype(ir::DType t);        // the C type of a value of dtype t (bool: bool)
const char* storageType(ir::DType t);  // of an element in memory (bool is one byte, 0 or 1: uint8_t)

// A window attribute (strides, dilations, pads) with `count` values, `fallback` each when absent.
std::vector<int64_t> spatialList(const ir::Node& n, const char* name, size_t count, int64_t fallback);

// A name a generated identifier must not take: C and C++ keywords and alternative tokens, the
// types and macros the model header and wrappers use, the wrappers' own locals, and policyc's
// prefixes (pc_, PC_, policyc, POLICYC) and the compiler's (__, _X).
bool reservedCName(const std::string& name);

// ---- the schedule

struct ScheduleOptions {
  std::string name;  // C identifier prefix of the typed wrappers; empty: the program's name
  bool externKernels = true;
  std::optional<InjectedFault> fault;
  std::optional<ImplChoice> choice;  // kernels it names run what it says; others the heuristic's
  std::vector<int64_t> tuneBatches = {1, 16, 64};
  std::string forceImpl;             // empty: off
  bool tuning = false;               // every candidate of every tunable kernel, chosen at run time
  // The implementations the backend has, per kernel (null: all); a forced implementation applies
  // where the backend has it, a chosen one it lacks is an error.
  std::function<bool(const Kernel&, Impl)> available;
};

struct KernelSchedule {
  std::vector<Impl> impls;  // the implementations emitted (tunable kernels; empty otherwise)
  ImplDispatch dispatch;    // which one runs for which batch sizes (empty in tuning builds)
  bool rawWeight = false;   // an extern implementation reads the plain weight (oneDNN reorders it)
  int64_t packedWeight = -1, packedBias = -1;  // the packed panels' offsets in the weights blob
};

struct Schedule {
  std::string cName;                    // NAME of NAME_run, NAME_descriptor, NAME.h
  std::vector<std::string> paramNames;  // the typed wrappers' parameters: inputs, then outputs
  std::vector<KernelSchedule> kernels;  // per kernel of the program
  std::vector<int64_t> tuneBatches;     // sorted, unique, positive
  // The weights blob: every param the kernels read raw (paramOffset, by root buffer), then each
  // packable kernel's panels; 64-byte aligned pieces.
  std::vector<unsigned char> weights;
  std::map<int, int64_t> paramOffset;
  // The workspace: staticBytes + perBatchBytes * batch; with oneDNN kernels, their scratch of
  // externPerBatch bytes per row after the memory plan's buffers (at the 64-byte rounded end).
  bool usesExtern = false;
  int64_t externPerBatch = 0;
  int64_t workspaceStatic = 0, workspacePerBatch = 0;
  int64_t maxBatch = 0;  // the largest batch the workspace arithmetic allows (codegen::maxBatch)
};

// The schedule options of a backend's CodegenOptions.
ScheduleOptions scheduleOptions(const CodegenOptions& options);

// policyc::Error for a bad choice (an implementation a kernel does not have, no range for every
// batch) or bad tuning batch sizes.
Schedule scheduleProgram(const KernelProgram& program, const MemoryPlan& plan, const ScheduleOptions& options);

// NAME.h: the C interface of the model (the same for both backends).
std::string cHeader(const KernelProgram& program, const Schedule& schedule, const std::string& target);

}  // namespace policyc::codegen
