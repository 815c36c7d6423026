// What the LLVM backend's emitter (emitter.h, emit_*.cpp) and its ORC/target half (orc.cpp) share.
#pragma once

#include <memory>
#include <string>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "policyc/codegen/llvm_backend.h"

namespace policyc::codegen {

struct LlvmModule::Impl {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  LlvmTarget target;
  std::string name;         // C identifier of the typed wrappers
  std::string header;       // NAME.h
  ImplChoice dispatch;      // the schedule's implementations per batch range (empty for tuning builds)
  std::string unoptimized;  // the module as emitted
  double emitSeconds = 0, optimizeSeconds = 0;
  bool usesOnednn = false;  // calls the oneDNN support (the .so then links libdnnl)
};

namespace llvmbe {

// The target machine for a resolved target (PIC, O3 code generation).
std::unique_ptr<llvm::TargetMachine> createTargetMachine(const LlvmTarget& target);
// The new pass manager's O3 pipeline for the target machine (`target`, the resolved one it was made for).
void optimizeModule(llvm::Module& module, llvm::TargetMachine& machine, const LlvmTarget& target);

// Symbols of the run-time support (support.cpp) the emitted IR calls.
constexpr const char* kParallelFor = "policyc_rt_parallel_for";
constexpr const char* kThreadWorkspace = "policyc_rt_thread_workspace";
constexpr const char* kRowBlocks = "policyc_rt_row_blocks";             // models run in row blocks
constexpr const char* kNowNs = "policyc_rt_now_ns";                    // models built with --profile
constexpr const char* kProfileRecord = "policyc_rt_profile_record";
constexpr const char* kSetWeights = "policyc_rt_set_weights";            // updatable weights
constexpr const char* kGetWeights = "policyc_rt_get_weights";
constexpr const char* kWeightsReadLock = "policyc_rt_weights_read_lock";
constexpr const char* kWeightsReadUnlock = "policyc_rt_weights_read_unlock";
constexpr const char* kWidenAtLoad = "policyc_rt_widen_at_load";        // Schedule::loadWidened
constexpr int kWeightsLockBytes = 64;  // pc::kWeightsLockBytes
constexpr int kWeightsGenerationOffset = 48;  // offsetof(pc::WeightsLock, generation)
constexpr const char* kOnednnConv = "policyc_rt_onednn_conv";          // support_onednn.cpp
constexpr const char* kOnednnConvRun = "policyc_rt_onednn_conv_run";
constexpr const char* kOnednnLinear = "policyc_rt_onednn_linear";
constexpr const char* kOnednnLinearRun = "policyc_rt_onednn_linear_run";

}  // namespace llvmbe
}  // namespace policyc::codegen
