// The LLVM emitter's module level: the emitter's entry (emitLlvm), the weights blob as a constant,
// the support library's declarations, oneDNN choices, and the C ABI in IR (pc_run with its
// argument checks, the descriptor, the profile data, the typed wrappers).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/DiagnosticHandler.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "emitter.h"
#include "policyc/codegen/backend.h"

namespace policyc::codegen::llvmemit {

void Emitter::run(const std::string& cName, const std::string& targetName) {
  for (size_t i = 0; i < p_.inputs.size(); ++i) inputIndex_[p_.inputs[i]] = static_cast<int>(i);
  for (size_t i = 0; i < p_.outputs.size(); ++i) outputIndex_[p_.outputs[i].second] = static_cast<int>(i);
  layoutWeights();
  declareSupport();
  std::vector<std::vector<Variant>> kernels;
  for (const Kernel& k : p_.kernels) kernels.push_back(emitKernel(k));
  if (o_.tuning) emitTuningHooks(kernels);
  emitAbi(kernels, cName, targetName);
}

void Emitter::emitTuningHooks(const std::vector<std::vector<Variant>>& kernels) {
  const uint64_t n = std::max<uint64_t>(kernels.size(), 1);
  auto* choiceTy = llvm::ArrayType::get(i32_, n);
  tuneChoice_ = new llvm::GlobalVariable(m_, choiceTy, false, llvm::GlobalValue::InternalLinkage,
                                         llvm::Constant::getNullValue(choiceTy), "pc_tune_choice");
  std::vector<llvm::Constant*> names, counts;
  for (const std::vector<Variant>& v : kernels) {
    std::vector<std::string> list;
    for (const Variant& x : v) {
      if (x.impl) list.push_back(implName(*x.impl));
    }
    names.push_back(cstr(fmt::format("{}", fmt::join(list, ","))));
    counts.push_back(b_.getInt32(static_cast<uint32_t>(list.size())));
  }
  if (kernels.empty()) {
    names.push_back(cstr(""));
    counts.push_back(b_.getInt32(0));
  }
  auto* namesGv = constGlobal(llvm::ConstantArray::get(llvm::ArrayType::get(ptr_, n), names), "pc_tune_names");
  auto* countsGv = constGlobal(llvm::ConstantArray::get(llvm::ArrayType::get(i32_, n), counts), "pc_tune_count");
  auto inRange = [&](Value* kernel) {
    return b_.CreateAnd(b_.CreateICmpSGE(kernel, b_.getInt32(0)), b_.CreateICmpSLT(kernel, b_.getInt32(static_cast<uint32_t>(kernels.size()))));
  };
  auto at = [&](llvm::GlobalVariable* g, Value* kernel) {
    return b_.CreateInBoundsGEP(g->getValueType(), g, {c64(0), b_.CreateSExt(kernel, i64_)}, "at");
  };
  // const char* policyc_tune_candidates(int kernel): its implementations, comma-separated ("" for
  // a kernel without); null for no such kernel.
  {
    llvm::Function* f = function(ptr_, {i32_}, "policyc_tune_candidates", true);
    Value* kernel = f->getArg(0);
    llvm::BasicBlock* bad = block("bad");
    llvm::BasicBlock* ok = block("ok");
    b_.CreateCondBr(inRange(kernel), ok, bad);
    b_.SetInsertPoint(bad);
    b_.CreateRet(llvm::ConstantPointerNull::get(ptr_));
    b_.SetInsertPoint(ok);
    b_.CreateRet(b_.CreateLoad(ptr_, at(namesGv, kernel)));
  }
  // int policyc_tune_select(int kernel, int candidate): runs that candidate from now on; -1 when
  // the kernel has no such candidate.
  {
    llvm::Function* f = function(i32_, {i32_, i32_}, "policyc_tune_select", true);
    Value* kernel = f->getArg(0);
    Value* candidate = f->getArg(1);
    llvm::BasicBlock* bad = block("bad");
    llvm::BasicBlock* known = block("known");
    llvm::BasicBlock* ok = block("ok");
    b_.CreateCondBr(b_.CreateAnd(inRange(kernel), b_.CreateICmpSGE(candidate, b_.getInt32(0))), known, bad);
    b_.SetInsertPoint(known);
    Value* count = b_.CreateLoad(i32_, at(countsGv, kernel), "count");
    b_.CreateCondBr(b_.CreateICmpSLT(candidate, count), ok, bad);
    b_.SetInsertPoint(bad);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(-1)));
    b_.SetInsertPoint(ok);
    b_.CreateAlignedStore(candidate, at(tuneChoice_, kernel), llvm::Align(4))->setAtomic(llvm::AtomicOrdering::Monotonic);
    b_.CreateRet(b_.getInt32(0));
  }
}

Value* Emitter::variantIndex(size_t ki, const std::vector<Variant>& variants, Value* batch) {
  if (o_.tuning) {
    Value* slot = b_.CreateConstInBoundsGEP2_64(tuneChoice_->getValueType(), tuneChoice_, 0, ki);
    llvm::LoadInst* choice = b_.CreateAlignedLoad(i32_, slot, llvm::Align(4), p_.kernels[ki].name + ".candidate");
    choice->setAtomic(llvm::AtomicOrdering::Monotonic);
    return choice;
  }
  // The ranges from the last (unbounded) down: batch <= maxBatch picks the range's implementation.
  auto indexOf = [&](const std::string& impl) {
    for (size_t i = 0; i < variants.size(); ++i) {
      if (variants[i].impl && implName(*variants[i].impl) == impl) return b_.getInt32(static_cast<uint32_t>(i));
    }
    fail("internal: kernel '{}' dispatches to {}, which was not emitted", p_.kernels[ki].name, impl);
  };
  const ImplDispatch& d = s_.kernels[ki].dispatch;
  Value* index = indexOf(d.back().impl);
  for (size_t r = d.size() - 1; r-- > 0;) {
    index = b_.CreateSelect(b_.CreateICmpSLE(batch, c64(d[r].maxBatch)), indexOf(d[r].impl), index);
  }
  index->setName(p_.kernels[ki].name + ".impl");
  return index;
}

Value* Emitter::externOffset(Value* batch) {
  Value* end = b_.CreateAdd(c64(plan_.staticBytes), b_.CreateMul(c64(plan_.perBatchBytes), batch));
  return b_.CreateMul(b_.CreateSDiv(b_.CreateAdd(end, c64(63)), c64(64)), c64(64));
}

void Emitter::layoutWeights() {
  if (s_.weights.empty()) return;
  llvm::Constant* data = llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<uint8_t>(s_.weights.data(), s_.weights.size()));
  // set_weights writes the blob of a model with updatable weights: a variable, whose loads LLVM
  // cannot fold into constants; otherwise one constant.
  const bool writable = s_.weightTable >= 0;
  weightsGv_ = new llvm::GlobalVariable(m_, data->getType(), !writable, llvm::GlobalValue::PrivateLinkage, data, "pc_weights");
  weightsGv_->setAlignment(llvm::Align(kWeightAlign));
  if (!writable) weightsGv_->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
}

// The model's pc::WeightsLock (a model with updatable weights): a zeroed global, unlocked.
llvm::GlobalVariable* Emitter::weightsLock() {
  if (!weightsLock_) {
    auto* lockTy = llvm::ArrayType::get(i8_, llvmbe::kWeightsLockBytes);
    weightsLock_ = new llvm::GlobalVariable(m_, lockTy, false, llvm::GlobalValue::InternalLinkage, llvm::Constant::getNullValue(lockTy),
                                            "pc_weights_lock");
    weightsLock_->setAlignment(llvm::Align(16));
  }
  return weightsLock_;
}

llvm::GlobalVariable* Emitter::callCounter() {
  if (!calls_) {
    calls_ = new llvm::GlobalVariable(m_, i32_, false, llvm::GlobalValue::InternalLinkage, b_.getInt32(0), "pc_calls");
  }
  return calls_;
}

llvm::GlobalVariable* Emitter::widenRegion() {
  if (!widenRegion_) {
    auto* ty = llvm::ArrayType::get(f32_, static_cast<uint64_t>(s_.loadWidenedFloats));
    widenRegion_ = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::InternalLinkage, llvm::Constant::getNullValue(ty), "pc_widened");
    widenRegion_->setAlignment(llvm::Align(64));
  }
  return widenRegion_;
}

Value* Emitter::widenedPanel(const KernelSchedule& ks, Value* j, int64_t K, const std::string& name) {
  return b_.CreateInBoundsGEP(f32_, widenRegion(), b_.CreateAdd(c64(ks.loadWidened), b_.CreateMul(j, c64(K * kPanel))), name);
}

// void policyc_rt_widen_at_load(i32* state, const pc::WidenJob* jobs, i32 count, blob, region):
// pc::widenAtLoad, with the model's state, its jobs as a constant table and its region. As in the
// prelude, the call is the slow path: every run after the first only loads the state (acquire)
// and finds it 2.
void Emitter::callWidenAtLoad() {
  llvm::GlobalVariable* state = m_.getGlobalVariable("pc_widen_state", true);
  llvm::GlobalVariable* jobs = m_.getGlobalVariable("pc_widen_jobs", true);
  if (!state) {
    state = new llvm::GlobalVariable(m_, i32_, false, llvm::GlobalValue::InternalLinkage, b_.getInt32(0), "pc_widen_state");
    std::vector<llvm::Constant*> rows;
    auto* jobTy = llvm::ArrayType::get(i64_, 5);
    for (const Schedule::LoadWidening& j : s_.loadWidened) {
      std::vector<llvm::Constant*> fields;
      for (int64_t v : {j.from, j.to, j.K, j.stride, j.count}) fields.push_back(b_.getInt64(static_cast<uint64_t>(v)));
      rows.push_back(llvm::ConstantArray::get(jobTy, fields));
    }
    auto* tableTy = llvm::ArrayType::get(jobTy, rows.size());
    jobs = new llvm::GlobalVariable(m_, tableTy, true, llvm::GlobalValue::InternalLinkage, llvm::ConstantArray::get(tableTy, rows), "pc_widen_jobs");
    jobs->setAlignment(llvm::Align(8));
  }
  auto fn = m_.getOrInsertFunction(llvmbe::kWidenAtLoad, llvm::FunctionType::get(b_.getVoidTy(), {ptr_, ptr_, i32_, ptr_, ptr_}, false));
  Value* blob = weightsGv_ ? static_cast<Value*>(weightsGv_) : llvm::ConstantPointerNull::get(ptr_);
  llvm::LoadInst* done = b_.CreateAlignedLoad(i32_, state, llvm::Align(4), "widen.state");
  done->setAtomic(llvm::AtomicOrdering::Acquire);
  ifThen(b_.CreateICmpNE(done, b_.getInt32(2)), "widen.slow", [&] {
    b_.CreateCall(fn, {state, jobs, b_.getInt32(static_cast<int32_t>(s_.loadWidened.size())), blob, widenRegion()});
  });
}

Value* Emitter::weightsAt(int64_t offset, const std::string& name) {
  // No weights at all when every param is empty (a [0, 5] mask, say): nothing reads through the
  // pointer then, as the loops over its elements run zero times.
  if (!weightsGv_) return llvm::ConstantPointerNull::get(ptr_);
  return b_.CreateInBoundsGEP(i8_, weightsGv_, c64(offset), name);
}

void Emitter::declareSupport() {
  // void policyc_rt_parallel_for(i32 threads, i64 units, double cost, double minChunk, fn, ctx,
  // chunkTrace): weak, so an object without the support archive links and runs single-threaded.
  kernelFnTy_ = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, i64_, i64_}, false);
  auto* pfTy = llvm::FunctionType::get(b_.getVoidTy(), {i32_, i64_, f64_, f64_, ptr_, ptr_, ptr_}, false);
  parallelFor_ = llvm::Function::Create(pfTy, llvm::GlobalValue::ExternalWeakLinkage, llvmbe::kParallelFor, m_);
  auto* wsTy = llvm::FunctionType::get(ptr_, {i64_}, false);
  threadWorkspace_ = llvm::Function::Create(wsTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kThreadWorkspace, m_);
  externFnTy_ = llvm::FunctionType::get(i32_, {ptr_, i32_}, false);
  if (usesExtern()) {
    auto* createTy = llvm::FunctionType::get(ptr_, {ptr_, ptr_, ptr_, i32_, ptr_, ptr_, ptr_, ptr_}, false);
    onednnConv_ = llvm::Function::Create(createTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kOnednnConv, m_);
    auto* runTy = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_, ptr_, i64_, i32_, ptr_, ptr_}, false);
    onednnConvRun_ = llvm::Function::Create(runTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kOnednnConvRun, m_);
    auto* linearTy = llvm::FunctionType::get(ptr_, {ptr_, ptr_, ptr_, ptr_, ptr_, ptr_, ptr_}, false);
    onednnLinear_ = llvm::Function::Create(linearTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kOnednnLinear, m_);
    auto* linearRunTy = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_, i64_, i32_}, false);
    onednnLinearRun_ = llvm::Function::Create(linearRunTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kOnednnLinearRun, m_);
  }
  // inputs, outputs, batch, workspace, status (an i32 a kernel reports failures through)
  ctxTy_ = llvm::StructType::create(ctx_, {ptr_, ptr_, i64_, ptr_, ptr_}, "pc_run_ctx");
}

llvm::GlobalVariable* Emitter::constGlobal(llvm::Constant* init, const std::string& name) {
  auto* g = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, name);
  return g;
}

llvm::Function* Emitter::function(llvm::Type* ret, std::vector<llvm::Type*> params, const std::string& name, bool exported) {
  auto* f = llvm::Function::Create(llvm::FunctionType::get(ret, params, false),
                                   exported ? llvm::GlobalValue::ExternalLinkage : llvm::GlobalValue::InternalLinkage, name, m_);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  fn_ = f;
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
  return f;
}

// A policyc_tensor_desc array named pc_WHAT of (name, type) pairs.
llvm::GlobalVariable* Emitter::descArray(const std::vector<std::pair<std::string, ir::TensorType>>& tensors, const std::string& what) {
  if (!descTy_) descTy_ = llvm::StructType::create(ctx_, {ptr_, i32_, i32_, ptr_}, "policyc_tensor_desc");
  std::vector<llvm::Constant*> items;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ir::TensorType& t = tensors[i].second;
    std::vector<int64_t> shape;
    for (const ir::Dim& d : t.shape) shape.push_back(d.isBatch() ? -1 : d.value());
    llvm::Constant* arr = llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int64_t>(shape));
    auto* g = constGlobal(arr, fmt::format("pc_{}_shape_{}", what, i));
    items.push_back(llvm::ConstantStruct::get(descTy_, {cstr(tensors[i].first), b_.getInt32(static_cast<uint32_t>(abiDType(t.dtype))),
                                                        b_.getInt32(static_cast<uint32_t>(shape.size())), g}));
  }
  return constGlobal(llvm::ConstantArray::get(llvm::ArrayType::get(descTy_, items.size()), items), "pc_" + what);
}

void Emitter::emitAbi(const std::vector<std::vector<Variant>>& kernels, const std::string& cName, const std::string& targetName) {
  // descriptors of the inputs and outputs
  auto descs = [&](const std::vector<std::pair<std::string, int>>& list, const std::string& what) {
    std::vector<std::pair<std::string, ir::TensorType>> tensors;
    for (const auto& [name, id] : list) tensors.push_back({name, p_.buffer(id).type});
    return descArray(tensors, what);
  };
  std::vector<std::pair<std::string, int>> ins;
  for (int id : p_.inputs) ins.push_back({p_.buffer(id).name, id});
  llvm::GlobalVariable* inDescs = descs(ins, "inputs");
  llvm::GlobalVariable* outDescs = descs(p_.outputs, "outputs");

  // size_t workspace_bytes(int64_t batch)
  llvm::Function* wsBytes = function(i64_, {i64_}, "pc_workspace_bytes", false);
  {
    Value* batch = &*wsBytes->arg_begin();
    Value* bsafe = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, batch, c64(0));
    Value* bytes = b_.CreateAdd(c64(workspaceStatic()), b_.CreateMul(c64(workspacePerBatch()), bsafe));
    // A batch over the largest the workspace arithmetic allows needs SIZE_MAX bytes (codegen::maxBatch).
    b_.CreateRet(b_.CreateSelect(b_.CreateICmpSGT(batch, c64(s_.maxBatch)), c64(-1), bytes));
  }

  // The kernel the last run entered (a debugging aid, as in the C++ backend).
  auto* running = new llvm::GlobalVariable(m_, i32_, false, llvm::GlobalValue::InternalLinkage, b_.getInt32(static_cast<uint32_t>(-1)),
                                           "pc_running_kernel");

  // int run(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace, int32_t threads)
  const bool updatable = s_.weightTable >= 0;
  const std::string runName = updatable ? "pc_run_kernels" : "pc_run";
  // With row blocks (or the profiler's counts), pc_run_rows runs the kernels on the rows from
  // first_row on; the run function calls it a block at a time (or once), as the C++ backend's.
  const bool rows = s_.rowBlock > 0 || o_.profile;
  std::vector<llvm::Type*> runParams = {ptr_, ptr_, i64_, ptr_, i32_};
  if (rows) runParams.push_back(i64_);
  llvm::Function* run = function(i32_, runParams, rows ? "pc_run_rows" : runName, false);
  {
    auto a = run->arg_begin();
    Value* inputs = &*a++;
    Value* outputs = &*a++;
    Value* batch = &*a++;
    Value* ws = &*a++;
    Value* threads = &*a++;
    Value* firstRow = rows ? &*a : nullptr;
    if (firstRow) firstRow->setName("first_row");
    inputs->setName("inputs");
    outputs->setName("outputs");
    batch->setName("batch");
    ws->setName("workspace");
    threads->setName("threads");
    auto fails = [&](Value* cond, int code) {
      llvm::BasicBlock* bad = block("error");
      llvm::BasicBlock* ok = block("ok");
      b_.CreateCondBr(cond, bad, ok);
      b_.SetInsertPoint(bad);
      b_.CreateRet(b_.getInt32(static_cast<uint32_t>(code)));
      b_.SetInsertPoint(ok);
    };
    fails(b_.CreateOr(badBatch(batch), b_.CreateICmpSLT(threads, b_.getInt32(1))), POLICYC_ERROR_ARGUMENT);
    {
      llvm::BasicBlock* done = block("empty");
      llvm::BasicBlock* go = block("go");
      b_.CreateCondBr(b_.CreateICmpEQ(batch, c64(0)), done, go);
      b_.SetInsertPoint(done);
      b_.CreateRet(b_.getInt32(POLICYC_OK));
      b_.SetInsertPoint(go);
    }
    if (s_.countsCalls) {  // a run more (KernelSchedule::alternateUnits reads its parity)
      b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, callCounter(), b_.getInt32(1), llvm::Align(4), llvm::AtomicOrdering::Monotonic);
    }
    // Null arrays and pointers are errors, except for tensors with no elements.
    auto nullChecks = [&](Value* array, const std::vector<int>& ids) {
      if (ids.empty()) return;
      fails(b_.CreateIsNull(array), POLICYC_ERROR_ARGUMENT);
      for (size_t i = 0; i < ids.size(); ++i) {
        bool empty = false;
        for (const ir::Dim& d : p_.buffer(ids[i]).type.shape) empty = empty || (d.isStatic() && d.value() == 0);
        if (!empty) fails(b_.CreateIsNull(b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, array, i))), POLICYC_ERROR_ARGUMENT);
      }
    };
    std::vector<int> outIds;
    for (const auto& o : p_.outputs) outIds.push_back(o.second);
    nullChecks(inputs, p_.inputs);
    nullChecks(outputs, outIds);
    Value* need = b_.CreateCall(wsBytes, {batch});
    fails(b_.CreateAnd(b_.CreateICmpSGT(need, c64(0)), b_.CreateIsNull(ws)), POLICYC_ERROR_ARGUMENT);
    fails(b_.CreateICmpNE(b_.CreateAnd(b_.CreatePtrToInt(ws, i64_), c64(POLICYC_WORKSPACE_ALIGNMENT - 1)), c64(0)), POLICYC_ERROR_WORKSPACE);
    llvm::AllocaInst* ctx = b_.CreateAlloca(ctxTy_, nullptr, "ctx");
    b_.CreateStore(inputs, b_.CreateStructGEP(ctxTy_, ctx, 0));
    b_.CreateStore(outputs, b_.CreateStructGEP(ctxTy_, ctx, 1));
    b_.CreateStore(batch, b_.CreateStructGEP(ctxTy_, ctx, 2));
    b_.CreateStore(ws, b_.CreateStructGEP(ctxTy_, ctx, 3));
    llvm::AllocaInst* status = b_.CreateAlloca(i32_, nullptr, "status");
    b_.CreateStore(b_.getInt32(0), status);
    b_.CreateStore(status, b_.CreateStructGEP(ctxTy_, ctx, 4));
    // --profile: the clock before each kernel, the bookkeeping after it (pc::profileRecord).
    auto* eventTy = llvm::StructType::create(ctx_, {i32_, i32_, i64_, i64_, i64_}, "policyc_trace_event");
    llvm::GlobalVariable *profNs = nullptr, *profCalls = nullptr, *trace = nullptr, *traceCount = nullptr;
    llvm::FunctionCallee nowNs, record;
    llvm::StructType* chunkTraceTy = nullptr;
    Value* chunkTrace = llvm::ConstantPointerNull::get(llvm::PointerType::get(ctx_, 0));
    if (o_.profile) {
      auto zeroed = [&](llvm::Type* t, const std::string& name) {
        return new llvm::GlobalVariable(m_, t, false, llvm::GlobalValue::InternalLinkage, llvm::Constant::getNullValue(t), name);
      };
      const uint64_t n = std::max<uint64_t>(p_.kernels.size(), 1);
      profNs = zeroed(llvm::ArrayType::get(i64_, n), "pc_profile_ns");
      profCalls = zeroed(llvm::ArrayType::get(i64_, n), "pc_profile_calls");
      trace = zeroed(llvm::ArrayType::get(eventTy, CodegenOptions::kTraceCapacity), "pc_trace");
      traceCount = zeroed(i64_, "pc_trace_count");
      nowNs = m_.getOrInsertFunction(llvmbe::kNowNs, llvm::FunctionType::get(i64_, {}, false));
      record = m_.getOrInsertFunction(llvmbe::kProfileRecord,
                                      llvm::FunctionType::get(b_.getVoidTy(), {ptr_, ptr_, ptr_, i64_, ptr_, i32_, i64_, i64_}, false));
      profile_ = {profNs, profCalls, trace, traceCount};
      // pc::ChunkTrace {trace, capacity, count, kernel, batch}: the pool's events of each chunk.
      chunkTraceTy = llvm::StructType::get(ctx_, {ptr_, i64_, ptr_, i32_, i64_});
      chunkTrace = b_.CreateAlloca(chunkTraceTy, nullptr, "chunk_trace");
      b_.CreateStore(trace, b_.CreateStructGEP(chunkTraceTy, chunkTrace, 0));
      b_.CreateStore(c64(CodegenOptions::kTraceCapacity), b_.CreateStructGEP(chunkTraceTy, chunkTrace, 1));
      b_.CreateStore(traceCount, b_.CreateStructGEP(chunkTraceTy, chunkTrace, 2));
      b_.CreateStore(batch, b_.CreateStructGEP(chunkTraceTy, chunkTrace, 4));
    }
    Value* t0 = nullptr;
    auto startTimer = [&](size_t ki) {
      if (!o_.profile) return;
      b_.CreateStore(b_.getInt32(static_cast<uint32_t>(ki)), b_.CreateStructGEP(chunkTraceTy, chunkTrace, 3));
      t0 = b_.CreateCall(nowNs, {}, p_.kernels[ki].name + ".t0");
    };
    auto stopTimer = [&](size_t ki) {
      if (o_.profile) {
        // A run's later row blocks add their time, not a call (pc::profileRecord).
        Value* calls = b_.CreateSelect(b_.CreateICmpEQ(firstRow, c64(0)), profCalls, llvm::ConstantPointerNull::get(ptr_));
        b_.CreateCall(record, {profNs, calls, trace, c64(CodegenOptions::kTraceCapacity), traceCount, b_.getInt32(static_cast<uint32_t>(ki)),
                               batch, t0});
      }
    };
    Value* minChunk = llvm::ConstantFP::get(f64_, o_.minChunkCost);
    Value* serial = b_.CreateOr(b_.CreateICmpEQ(threads, b_.getInt32(1)), b_.CreateIsNull(parallelFor_), "serial");
    for (size_t ki = 0; ki < kernels.size(); ++ki) {
      b_.CreateAlignedStore(b_.getInt32(static_cast<uint32_t>(ki)), running, llvm::Align(4))->setAtomic(llvm::AtomicOrdering::Monotonic);
      startTimer(ki);
      // One implementation: oneDNN's call, then the generated function (one thread calls it
      // directly; more go through the support library's pool).
      auto runVariant = [&](const Variant& v) {
        const std::string& name = v.fn ? v.fn->getName().str() : v.externFn->getName().str();
        if (v.externFn) {
          Value* rc = b_.CreateCall(externFnTy_, v.externFn, {ctx, threads}, name + ".rc");
          fails(b_.CreateICmpNE(rc, b_.getInt32(0)), POLICYC_ERROR_EXTERN);
        }
        if (!v.fn) return;
        const ThreadSplit& sp = s_.kernels[ki].splitOf(v.impl);
        Value* units = unitsOf(sp, batch);
        if (llvm::isa<llvm::Instruction>(units)) units->setName(name + ".units");
        ifElse(
            serial, name, [&] { b_.CreateCall(kernelFnTy_, v.fn, {ctx, c64(0), units}); },
            [&] { b_.CreateCall(parallelFor_, {threads, units, costOf(sp, batch), minChunk, v.fn, ctx, chunkTrace}); });
      };
      const std::vector<Variant>& variants = kernels[ki];
      if (variants.size() == 1) {
        runVariant(variants[0]);
      } else {
        // Several implementations: the one for this batch size (or the tuner's selection).
        Value* index = variantIndex(ki, variants, batch);
        llvm::BasicBlock* join = block(p_.kernels[ki].name + ".done");
        std::vector<llvm::BasicBlock*> cases;
        for (const Variant& v : variants) cases.push_back(block(fmt::format("{}.{}", p_.kernels[ki].name, implName(*v.impl))));
        llvm::SwitchInst* sw = b_.CreateSwitch(index, cases[0], static_cast<unsigned>(cases.size()));
        for (size_t i = 0; i < cases.size(); ++i) {
          sw->addCase(b_.getInt32(static_cast<uint32_t>(i)), cases[i]);
          b_.SetInsertPoint(cases[i]);
          runVariant(variants[i]);
          b_.CreateBr(join);
        }
        b_.SetInsertPoint(join);
      }
      stopTimer(ki);
      if (p_.kernels[ki].canFail()) {
        // What the kernel reported (its threads have joined): the run's result.
        llvm::LoadInst* bits = b_.CreateAlignedLoad(i32_, status, llvm::Align(4), p_.kernels[ki].name + ".status");
        bits->setAtomic(llvm::AtomicOrdering::Monotonic);
        llvm::BasicBlock* failed = block("failed");
        llvm::BasicBlock* next = block("next");
        b_.CreateCondBr(b_.CreateICmpNE(bits, b_.getInt32(0)), failed, next);
        b_.SetInsertPoint(failed);
        // The index error first when both happened (pc::statusCode).
        b_.CreateRet(b_.CreateSelect(b_.CreateICmpNE(b_.CreateAnd(bits, b_.getInt32(kIndexError)), b_.getInt32(0)),
                                     b_.getInt32(static_cast<uint32_t>(POLICYC_ERROR_INDEX)),
                                     b_.getInt32(static_cast<uint32_t>(POLICYC_ERROR_DIVISION))));
        b_.SetInsertPoint(next);
      }
    }
    b_.CreateRet(b_.getInt32(POLICYC_OK));
  }
  if (rows) run = emitRowBlocks(run, runName);

  // Updatable weights: set_weights, get_weights, and the run inside the weights' read lock.
  llvm::Constant* numWeights = b_.getInt32(0);
  llvm::Constant* weightDescs = llvm::ConstantPointerNull::get(ptr_);
  llvm::Constant* setWeights = weightDescs;
  llvm::Constant* getWeights = weightDescs;
  if (updatable) {
    std::vector<std::pair<std::string, ir::TensorType>> weights;
    for (const auto& w : p_.weights) weights.push_back({w.name, w.value.type()});
    llvm::GlobalVariable* descsGv = descArray(weights, "weight_descs");
    llvm::GlobalVariable* lock = weightsLock();
    Value* table = c64(s_.weightTable);
    auto setFn = m_.getOrInsertFunction(llvmbe::kSetWeights, llvm::FunctionType::get(i32_, {ptr_, i64_, ptr_, ptr_, i32_, ptr_, ptr_}, false));
    auto getFn = m_.getOrInsertFunction(llvmbe::kGetWeights, llvm::FunctionType::get(i32_, {ptr_, i64_, ptr_, ptr_, i32_, ptr_}, false));
    auto lockFn = m_.getOrInsertFunction(llvmbe::kWeightsReadLock, llvm::FunctionType::get(b_.getVoidTy(), {ptr_}, false));
    auto unlockFn = m_.getOrInsertFunction(llvmbe::kWeightsReadUnlock, llvm::FunctionType::get(b_.getVoidTy(), {ptr_}, false));
    llvm::Function* set = function(i32_, {i32_, ptr_, ptr_}, "pc_set_weights", false);
    {
      auto a = set->arg_begin();
      Value* count = &*a++;
      Value* given = &*a++;
      b_.CreateRet(b_.CreateCall(setFn, {weightsGv_, table, lock, descsGv, count, given, &*a}));
    }
    llvm::Function* get = function(i32_, {i32_, ptr_}, "pc_get_weights", false);
    {
      auto a = get->arg_begin();
      Value* index = &*a++;
      b_.CreateRet(b_.CreateCall(getFn, {weightsGv_, table, lock, descsGv, index, &*a}));
    }
    llvm::Function* locked = function(i32_, {ptr_, ptr_, i64_, ptr_, i32_}, "pc_run", false);
    {
      std::vector<Value*> args;
      for (llvm::Argument& arg : locked->args()) args.push_back(&arg);
      b_.CreateCall(lockFn, {lock});
      Value* rc = b_.CreateCall(run, args, "rc");
      b_.CreateCall(unlockFn, {lock});
      b_.CreateRet(rc);
    }
    run = locked;
    numWeights = b_.getInt32(static_cast<uint32_t>(p_.weights.size()));
    weightDescs = descsGv;
    setWeights = set;
    getWeights = get;
  }

  // the descriptor
  auto* modelTy = llvm::StructType::create(ctx_, {i32_, i32_, ptr_, ptr_, i32_, ptr_, i32_, ptr_, ptr_, ptr_, ptr_, i32_, ptr_, ptr_, ptr_, ptr_},
                                           "policyc_model");
  const uint64_t modelSize = m_.getDataLayout().getTypeAllocSize(modelTy);
  auto* model = constGlobal(
      llvm::ConstantStruct::get(modelTy, {b_.getInt32(POLICYC_ABI_VERSION), b_.getInt32(static_cast<uint32_t>(modelSize)),
                                          cstr(p_.name), cstr(targetName), b_.getInt32(static_cast<uint32_t>(p_.inputs.size())),
                                          inDescs, b_.getInt32(static_cast<uint32_t>(p_.outputs.size())), outDescs, wsBytes, run,
                                          cstr(o_.sourceHash), numWeights, weightDescs, setWeights, getWeights,
                                          cstr(precisionName(o_.precision))}),
      "pc_model");

  // profiling data (policyc_profile_data): what each kernel is and costs; with --profile also
  // the counters pc_run updates and a reset function
  auto* infoTy = llvm::StructType::create(ctx_, {ptr_, ptr_, ptr_, f64_, f64_, f64_, f64_}, "policyc_kernel_info");
  std::vector<llvm::Constant*> infos;
  std::vector<llvm::Constant*> names;
  for (const Kernel& k : p_.kernels) {
    std::string nodes;
    for (const ir::Node* n : k.sources) nodes += (nodes.empty() ? "" : ",") + n->output()->name();
    KernelCost c = kernelCost(p_, k);
    infos.push_back(llvm::ConstantStruct::get(infoTy, {cstr(k.name), cstr(nodes), cstr(kernelKindName(k.kind)),
                                                       llvm::ConstantFP::get(f64_, c.flopsStatic), llvm::ConstantFP::get(f64_, c.flopsPerRow),
                                                       llvm::ConstantFP::get(f64_, c.bytesStatic), llvm::ConstantFP::get(f64_, c.bytesPerRow)}));
    names.push_back(cstr(k.name));
  }
  auto* infoArr = constGlobal(llvm::ConstantArray::get(llvm::ArrayType::get(infoTy, infos.size()), infos), "pc_kernel_info");
  auto* nameArr = constGlobal(llvm::ConstantArray::get(llvm::ArrayType::get(ptr_, names.size()), names), "pc_kernel_names");
  auto* profTy = llvm::StructType::create(ctx_, {i32_, i32_, ptr_, i64_, ptr_, ptr_, ptr_, i64_, ptr_, ptr_}, "policyc_profile");
  llvm::Constant* null = llvm::ConstantPointerNull::get(b_.getPtrTy());
  std::vector<llvm::Constant*> counters = {null, null, null, b_.getInt64(0), null, null};
  if (o_.profile) {
    llvm::Function* reset = function(b_.getVoidTy(), {}, "pc_profile_reset", false);
    for (llvm::GlobalVariable* g : {profile_.ns, profile_.calls, profile_.trace, profile_.count}) {
      b_.CreateMemSet(g, b_.getInt8(0), m_.getDataLayout().getTypeAllocSize(g->getValueType()), llvm::MaybeAlign(8));
    }
    b_.CreateRetVoid();
    counters = {profile_.ns, profile_.calls, profile_.trace, b_.getInt64(CodegenOptions::kTraceCapacity), profile_.count, reset};
  }
  auto* profile = constGlobal(
      llvm::ConstantStruct::get(profTy, {b_.getInt32(static_cast<uint32_t>(p_.kernels.size())), b_.getInt32(o_.profile ? 1 : 0), infoArr,
                                         b_.getInt64(static_cast<uint64_t>(paramBytes(p_))), counters[0], counters[1], counters[2],
                                         counters[3], counters[4], counters[5]}),
      "pc_profile");

  function(ptr_, {}, "policyc_model_descriptor", true);
  b_.CreateRet(model);
  function(ptr_, {}, "policyc_profile_data", true);
  b_.CreateRet(profile);
  function(ptr_, {}, "policyc_debug_running_kernel", true);
  {
    auto* k = b_.CreateAlignedLoad(i32_, running, llvm::Align(4), "kernel");
    k->setAtomic(llvm::AtomicOrdering::Monotonic);
    Value* none = b_.CreateICmpSLT(k, b_.getInt32(0));
    Value* at = b_.CreateSelect(none, b_.getInt32(0), k);
    Value* name = b_.CreateLoad(ptr_, b_.CreateInBoundsGEP(ptr_, nameArr, b_.CreateSExt(at, i64_)));
    b_.CreateRet(b_.CreateSelect(none, cstr(""), name));
  }

  // typed wrappers (NAME.h): NAME_descriptor, NAME_run_with_workspace, NAME_run
  function(ptr_, {}, cName + "_descriptor", true);
  b_.CreateRet(model);
  const size_t nIn = p_.inputs.size(), nOut = p_.outputs.size();
  std::vector<llvm::Type*> params(nIn + nOut, ptr_);
  params.push_back(i64_);
  auto packArgs = [&](llvm::Function* f) {
    auto* insArr = b_.CreateAlloca(llvm::ArrayType::get(ptr_, std::max<size_t>(nIn, 1)), nullptr, "ins");
    auto* outsArr = b_.CreateAlloca(llvm::ArrayType::get(ptr_, std::max<size_t>(nOut, 1)), nullptr, "outs");
    auto a = f->arg_begin();
    for (size_t i = 0; i < nIn; ++i) b_.CreateStore(&*a++, b_.CreateConstInBoundsGEP1_64(ptr_, insArr, i));
    for (size_t i = 0; i < nOut; ++i) b_.CreateStore(&*a++, b_.CreateConstInBoundsGEP1_64(ptr_, outsArr, i));
    return std::pair<Value*, Value*>{insArr, outsArr};
  };
  {
    std::vector<llvm::Type*> wp = params;
    wp.push_back(ptr_);
    llvm::Function* f = function(i32_, wp, cName + "_run_with_workspace", true);
    auto [insArr, outsArr] = packArgs(f);
    Value* batch = f->getArg(static_cast<unsigned>(nIn + nOut));
    Value* ws = f->getArg(static_cast<unsigned>(nIn + nOut + 1));
    b_.CreateRet(b_.CreateCall(run, {insArr, outsArr, batch, ws, b_.getInt32(1)}));
  }
  {
    llvm::Function* f = function(i32_, params, cName + "_run", true);
    Value* batch = f->getArg(static_cast<unsigned>(nIn + nOut));
    auto [insArr, outsArr] = packArgs(f);
    llvm::BasicBlock* bad = block("negative");
    llvm::BasicBlock* ok = block("ok");
    b_.CreateCondBr(badBatch(batch), bad, ok);
    b_.SetInsertPoint(bad);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(POLICYC_ERROR_ARGUMENT)));
    b_.SetInsertPoint(ok);
    Value* need = b_.CreateCall(wsBytes, {batch});
    Value* ws = b_.CreateCall(threadWorkspace_, {need}, "ws");
    llvm::BasicBlock* oom = block("no_memory");
    llvm::BasicBlock* go = block("go");
    b_.CreateCondBr(b_.CreateAnd(b_.CreateICmpSGT(need, c64(0)), b_.CreateIsNull(ws)), oom, go);
    b_.SetInsertPoint(oom);
    b_.CreateRet(b_.getInt32(static_cast<uint32_t>(POLICYC_ERROR_WORKSPACE)));
    b_.SetInsertPoint(go);
    b_.CreateRet(b_.CreateCall(run, {insArr, outsArr, batch, ws, b_.getInt32(1)}));
  }
}

// The run function over pc_run_rows (`rows`): with row blocks (Schedule::rowBlock) the support's
// pc::runRowBlocks runs it a block at a time, as the C++ backend's; without (or in an object
// linked without the support archive: the symbol is weak), one call on the whole batch.
llvm::Function* Emitter::emitRowBlocks(llvm::Function* rows, const std::string& name) {
  llvm::Function* run = function(i32_, {ptr_, ptr_, i64_, ptr_, i32_}, name, false);
  auto a = run->arg_begin();
  Value* inputs = &*a++;
  Value* outputs = &*a++;
  Value* batch = &*a++;
  Value* ws = &*a++;
  Value* threads = &*a;
  auto callWhole = [&] { return b_.CreateCall(rows, {inputs, outputs, batch, ws, threads, c64(0)}, "rc"); };
  if (s_.rowBlock <= 0) {
    b_.CreateRet(callWhole());
    return run;
  }
  // i32 policyc_rt_row_blocks(rows, workspace_bytes, block, max_batch, input_row_bytes, inputs,
  //                           output_row_bytes, outputs, inputs, outputs, batch, workspace, threads)
  auto* ty = llvm::FunctionType::get(i32_, {ptr_, ptr_, i64_, i64_, ptr_, i32_, ptr_, i32_, ptr_, ptr_, i64_, ptr_, i32_}, false);
  auto* rowBlocks = llvm::Function::Create(ty, llvm::GlobalValue::ExternalWeakLinkage, llvmbe::kRowBlocks, m_);
  auto rowBytes = [&](const std::vector<int64_t>& bytes, const char* what) {
    std::vector<int64_t> v = bytes.empty() ? std::vector<int64_t>{0} : bytes;
    return constGlobal(llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int64_t>(v)), what);
  };
  llvm::BasicBlock* blocks = block("blocks");
  llvm::BasicBlock* once = block("whole");
  b_.CreateCondBr(b_.CreateIsNull(rowBlocks), once, blocks);
  b_.SetInsertPoint(once);
  b_.CreateRet(callWhole());
  b_.SetInsertPoint(blocks);
  b_.CreateRet(b_.CreateCall(rowBlocks, {rows, m_.getFunction("pc_workspace_bytes"), c64(s_.rowBlock), c64(s_.maxBatch),
                                         rowBytes(s_.inputRowBytes, "pc_input_row_bytes"), b_.getInt32(static_cast<uint32_t>(s_.inputRowBytes.size())),
                                         rowBytes(s_.outputRowBytes, "pc_output_row_bytes"), b_.getInt32(static_cast<uint32_t>(s_.outputRowBytes.size())),
                                         inputs, outputs, batch, ws, threads}, "rc"));
  return run;
}

}  // namespace policyc::codegen::llvmemit

namespace policyc::codegen {

using llvmemit::Emitter;

LlvmModule::LlvmModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlvmModule::LlvmModule(LlvmModule&&) noexcept = default;
LlvmModule& LlvmModule::operator=(LlvmModule&&) noexcept = default;
LlvmModule::~LlvmModule() = default;
const std::string& LlvmModule::name() const { return impl_->name; }
const LlvmTarget& LlvmModule::target() const { return impl_->target; }
const std::string& LlvmModule::unoptimizedIr() const { return impl_->unoptimized; }
const std::string& LlvmModule::header() const { return impl_->header; }
const ImplChoice& LlvmModule::dispatch() const { return impl_->dispatch; }
double LlvmModule::emitSeconds() const { return impl_->emitSeconds; }
double LlvmModule::optimizeSeconds() const { return impl_->optimizeSeconds; }
namespace {

// Drops the loop vectorizer's "loop not vectorized" warnings: the emitter asks for vectorisation
// of some loops (Builder::forRange's vectorizeRolled), and where the vectorizer cannot comply the
// loop runs scalar, which is nothing a user can act on. Every other diagnostic goes to LLVM's own
// handling.
struct QuietLoopHints : llvm::DiagnosticHandler {
  bool handleDiagnostics(const llvm::DiagnosticInfo& di) override { return di.getKind() == llvm::DK_OptimizationFailure; }
};

// The module as text; with elideWeights @pc_weights's bytes are left out.
std::string printModule(llvm::Module& m, bool elideWeights) {
  llvm::GlobalVariable* w = elideWeights ? m.getGlobalVariable("pc_weights", true) : nullptr;
  llvm::Constant* bytes = w ? w->getInitializer() : nullptr;
  if (w) w->setInitializer(llvm::Constant::getNullValue(bytes->getType()));
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  if (!w) return s;
  w->setInitializer(bytes);
  const size_t at = s.find("@pc_weights = ");
  const size_t end = at == std::string::npos ? at : s.find('\n', at);
  if (end != std::string::npos) {
    s.insert(end, fmt::format("  ; {} bytes of weights elided from this dump (the compiled code has them)",
                              m.getDataLayout().getTypeAllocSize(bytes->getType()).getFixedValue()));
  }
  return s;
}

}  // namespace

std::string LlvmModule::ir(bool elideWeights) const { return printModule(*impl_->module, elideWeights); }

LlvmModule emitLlvm(const KernelProgram& program, const MemoryPlan& plan, const LlvmOptions& options) {
  auto impl = std::make_unique<LlvmModule::Impl>();
  impl->target = resolveLlvmTarget(options.target);
  std::unique_ptr<llvm::TargetMachine> machine = llvmbe::createTargetMachine(impl->target);
  // What to emit (schedule.h), and the C header of every backend.
  ScheduleOptions so = scheduleOptions(options);
  // What the CPU implies, not the feature string alone (LlvmTarget::avx512, bf16Dot, bf16Tiles).
  so.target = impl->target.traits();
  const Schedule schedule = scheduleProgram(program, plan, so);
  impl->name = schedule.cName;
  for (size_t ki = 0; ki < program.kernels.size(); ++ki) {
    if (!schedule.kernels[ki].dispatch.empty()) impl->dispatch[program.kernels[ki].name] = schedule.kernels[ki].dispatch;
  }
  impl->header = cHeader(program, schedule, impl->target.name);

  auto start = std::chrono::steady_clock::now();
  impl->context = std::make_unique<llvm::LLVMContext>();
  impl->context->setDiagnosticHandler(std::make_unique<QuietLoopHints>());
  impl->module = std::make_unique<llvm::Module>(escape::printable(program.name), *impl->context);  // printed raw in module.ll
  llvm::Module& m = *impl->module;
  m.setTargetTriple(impl->target.triple);
  m.setDataLayout(machine->createDataLayout());
  Emitter(program, plan, schedule, options, m).run(impl->name, impl->target.name);
  impl->usesOnednn = m.getFunction(llvmbe::kOnednnConv) != nullptr;
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(m, &os)) fail("the LLVM compiler failed: internal: the LLVM backend emitted an invalid module: {}", problems);
  if (options.keepUnoptimizedIr) impl->unoptimized = printModule(m, true);
  auto emitted = std::chrono::steady_clock::now();
  impl->emitSeconds = std::chrono::duration<double>(emitted - start).count();
  llvmbe::optimizeModule(m, *machine, impl->target);
  impl->optimizeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - emitted).count();
  return LlvmModule(std::move(impl));
}

LlvmModule generateLlvm(const ir::Graph& graph, const LlvmOptions& options) {
  return inBackend(Backend::Llvm, [&] {
    PlannedProgram planned = planGraph(graph);
    return emitLlvm(planned.program, planned.plan, options);
  });
}

}  // namespace policyc::codegen
