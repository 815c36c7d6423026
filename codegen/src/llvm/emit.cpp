// The LLVM emitter: the fused kernel program as one LLVM module built with IRBuilder — one
// function per kernel (named after it, every value named and tagged !policyc.node after the graph
// node it computes), the schedule's weights as one aligned constant global, the same microkernel
// shapes as the C++ backend (4 rows x 2 panels of 16 columns), and the C ABI. The IR-building
// layer it stands on (types, control flow, conversions, math, one body instruction) is builder.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "builder.h"
#include "llvm_internal.h"
#include "packing.h"
#include "schedule.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"

namespace policyc::codegen {
namespace {

using llvmbe::isSignedInt;
using llvmbe::nodeLabel;
using ir::DType;
using ir::Op;
using llvm::Value;

constexpr int64_t kWeightAlign = 64;  // the blob's alignment (schedule.cpp lays it out)
constexpr unsigned kLanes = 16;  // the vector epilogue's width: one weight panel

int abiDType(DType t) { return static_cast<int>(t); }  // policyc_dtype follows ir::DType's order

int64_t normalizeAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }


class Emitter : llvmbe::Builder {
 public:
  Emitter(const KernelProgram& p, const MemoryPlan& plan, const Schedule& s, const LlvmOptions& o, llvm::Module& m)
      : Builder(m), p_(p), plan_(plan), s_(s), o_(o) {}

  void run(const std::string& cName, const std::string& targetName) {
    for (size_t i = 0; i < p_.inputs.size(); ++i) inputIndex_[p_.inputs[i]] = static_cast<int>(i);
    for (size_t i = 0; i < p_.outputs.size(); ++i) outputIndex_[p_.outputs[i].second] = static_cast<int>(i);
    chooseExterns();
    layoutWeights();
    declareSupport();
    std::vector<llvm::Function*> kernels;
    for (const Kernel& k : p_.kernels) kernels.push_back(emitKernel(k));
    emitAbi(kernels, cName, targetName);
  }

 private:
  // ---- weights

  // The schedule's implementation of each GEMM/conv kernel: the generated two-panel microkernel
  // (gemm4x32) or, for convs, a oneDNN primitive; one implementation for every batch size.
  void chooseExterns() {
    for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
      const Kernel& k = p_.kernels[ki];
      const ImplDispatch& d = s_.kernels[ki].dispatch;
      if (d.empty()) continue;
      const std::string& impl = d.front().impl;
      for (const ImplRange& r : d) {
        if (r.impl != impl) {
          unsupported("kernel '{}' would run {} at some batch sizes and {} at others: this backend runs one implementation per "
                      "kernel (backend cpp dispatches by batch size)", k.name, impl, r.impl);
        }
      }
      if (impl == implName(Impl::Gemm4x32)) continue;
      std::optional<ExternConv> e = externConv(p_, k, impl);
      if (!e) fail("internal: kernel '{}' was scheduled with implementation {}, which this backend lacks", k.name, impl);
      externs_[ki] = *e;
      externImpl_[ki] = impl;
    }
  }
  bool usesExtern() const { return s_.usesExtern; }
  // The workspace as a + b * batch (the schedule's), the extern kernels' scratch at
  // externOffset(batch) (as the C++ backend's pc_extern_offset).
  // batch < 0 or over the largest the workspace allows.
  Value* badBatch(Value* batch) { return b_.CreateOr(b_.CreateICmpSLT(batch, c64(0)), b_.CreateICmpSGT(batch, c64(s_.maxBatch))); }
  int64_t workspaceStatic() const { return s_.workspaceStatic; }
  int64_t workspacePerBatch() const { return s_.workspacePerBatch; }
  Value* externOffset(Value* batch) {
    Value* end = b_.CreateAdd(c64(plan_.staticBytes), b_.CreateMul(c64(plan_.perBatchBytes), batch));
    return b_.CreateMul(b_.CreateSDiv(b_.CreateAdd(end, c64(63)), c64(64)), c64(64));
  }

  // The schedule's weights blob as one aligned constant.
  void layoutWeights() {
    if (s_.weights.empty()) return;
    llvm::Constant* data = llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<uint8_t>(s_.weights.data(), s_.weights.size()));
    weightsGv_ = new llvm::GlobalVariable(m_, data->getType(), true, llvm::GlobalValue::PrivateLinkage, data, "pc_weights");
    weightsGv_->setAlignment(llvm::Align(kWeightAlign));
    weightsGv_->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  }
  Value* weightsAt(int64_t offset, const std::string& name) {
    return b_.CreateInBoundsGEP(i8_, weightsGv_, c64(offset), name);
  }

  void declareSupport() {
    // void policyc_rt_parallel_for(i32 threads, i64 units, double cost, double minChunk, fn, ctx): weak,
    // so an object without the support archive links and runs single-threaded.
    kernelFnTy_ = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, i64_, i64_}, false);
    auto* pfTy = llvm::FunctionType::get(b_.getVoidTy(), {i32_, i64_, f64_, f64_, ptr_, ptr_}, false);
    parallelFor_ = llvm::Function::Create(pfTy, llvm::GlobalValue::ExternalWeakLinkage, llvmbe::kParallelFor, m_);
    auto* wsTy = llvm::FunctionType::get(ptr_, {i64_}, false);
    threadWorkspace_ = llvm::Function::Create(wsTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kThreadWorkspace, m_);
    externFnTy_ = llvm::FunctionType::get(i32_, {ptr_, i32_}, false);
    if (usesExtern()) {
      auto* createTy = llvm::FunctionType::get(ptr_, {ptr_, ptr_, ptr_, i32_, ptr_, ptr_, ptr_}, false);
      onednnConv_ = llvm::Function::Create(createTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kOnednnConv, m_);
      auto* runTy = llvm::FunctionType::get(i32_, {ptr_, ptr_, ptr_, ptr_, ptr_, i64_, i32_, ptr_, ptr_}, false);
      onednnConvRun_ = llvm::Function::Create(runTy, llvm::GlobalValue::ExternalLinkage, llvmbe::kOnednnConvRun, m_);
    }
    // inputs, outputs, batch, workspace, status (an i32 a kernel reports failures through)
    ctxTy_ = llvm::StructType::create(ctx_, {ptr_, ptr_, i64_, ptr_, ptr_}, "pc_run_ctx");
  }

  // ---- buffers

  // The pointer to a root buffer's memory, computed once per kernel function.
  Value* rootPtr(int root) {
    auto it = roots_.find(root);
    if (it != roots_.end()) return it->second;
    const Buffer& b = p_.buffer(root);
    llvm::IRBuilder<>::InsertPointGuard guard(b_);
    b_.SetInsertPoint(entryEnd_);
    Value* v = nullptr;
    const std::string name = "b" + std::to_string(root) + "." + b.name;
    switch (b.kind) {
      case BufferKind::Input:
        v = b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, inputs_, static_cast<uint64_t>(inputIndex_.at(root))), name);
        break;
      case BufferKind::Output:
        v = b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, outputs_, static_cast<uint64_t>(outputIndex_.at(root))), name);
        break;
      case BufferKind::Param:
        if (!s_.paramOffset.count(root)) fail("internal: param '{}' is not in the weights", b.name);
        v = weightsAt(s_.paramOffset.at(root), name);
        break;
      case BufferKind::Temp: {
        const MemorySlot* slot = plan_.slotOf(root);
        if (!slot) fail("internal: temporary '{}' has no memory slot", b.name);
        Value* off = slot->perBatch ? b_.CreateAdd(c64(plan_.staticBytes), b_.CreateMul(c64(slot->offset), batch_)) : c64(slot->offset);
        v = b_.CreateInBoundsGEP(i8_, ws_, off, name);
        break;
      }
    }
    roots_[root] = v;
    return v;
  }

  // Element offset of buffer `id` at per-dimension indices (null: 0); a view adds its offset.
  Value* offsetOf(int id, const std::vector<Value*>& perDim) {
    const Buffer& b = p_.buffer(id);
    Value* off = c64(b.offset);
    for (size_t d = 0; d < perDim.size(); ++d) {
      if (!perDim[d] || b.strides[d] == 0) continue;
      off = b_.CreateAdd(off, b.strides[d] == 1 ? perDim[d] : b_.CreateMul(perDim[d], c64(b.strides[d])));
    }
    return off;
  }
  Value* elemPtr(int id, const std::vector<Value*>& perDim) {
    const Buffer& b = p_.buffer(id);
    return b_.CreateGEP(memType(b.type.dtype), rootPtr(b.root), offsetOf(id, perDim));
  }
  // Per-dimension indices of an index map over the domain variables.
  std::vector<Value*> indices(const IndexMap& index, const std::vector<Value*>& vars) {
    std::vector<Value*> v;
    for (const IndexExpr& e : index) {
      if (e.axis < 0) {
        v.push_back(e.offset ? c64(e.offset) : nullptr);
        continue;
      }
      Value* x = vars.at(static_cast<size_t>(e.axis));
      if (e.scale != 1) x = b_.CreateMul(x, c64(e.scale));
      if (e.offset) x = b_.CreateAdd(x, c64(e.offset));
      v.push_back(x);
    }
    return v;
  }
  Value* loadElem(int id, const std::vector<Value*>& perDim, const std::string& name) {
    DType t = p_.buffer(id).type.dtype;
    llvm::LoadInst* v = b_.CreateLoad(memType(t), elemPtr(id, perDim), escape::printable(name));  // `name` is a buffer's: the model's
    restrictAccess(v, id);
    return t == DType::Bool ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
  }
  void storeElem(int id, const std::vector<Value*>& perDim, Value* v) {
    DType t = p_.buffer(id).type.dtype;
    if (t == DType::Bool) v = b_.CreateZExt(v, i8_);
    restrictAccess(b_.CreateStore(v, elemPtr(id, perDim)), id);
  }

  // The C ABI's contract, as the C++ backend's PC_RESTRICT pointers say it: inputs, outputs and
  // weights are distinct arrays, so an access through one never aliases an access through
  // another or through the workspace (whose temporaries may share memory: they get no scope of
  // their own). Scoped noalias metadata, one scope per such root buffer; on pointwise and copy
  // kernels only (measured: it lets the loop vectorizer take an u8 image's cast-and-scale, 3x
  // faster, pad 2x, gather 10x, but makes it vectorise the pools' window loops with gathers, 5x
  // slower).
  void restrictAccess(llvm::Instruction* access, int id) {
    if (!restrict_) return;
    if (!aliasDomain_) {
      llvm::MDBuilder md(ctx_);
      aliasDomain_ = md.createAnonymousAliasScopeDomain("policyc.roots");
      for (const Buffer& b : p_.buffers) {
        if (b.root != b.id || b.kind == BufferKind::Temp) continue;
        aliasScopes_[b.id] = md.createAnonymousAliasScope(aliasDomain_, escape::printable(b.name));
      }
    }
    const int root = p_.buffer(id).root;
    std::vector<llvm::Metadata*> others;
    for (const auto& [r, scope] : aliasScopes_) {
      if (r != root) others.push_back(scope);
    }
    if (auto it = aliasScopes_.find(root); it != aliasScopes_.end()) {
      access->setMetadata(llvm::LLVMContext::MD_alias_scope, llvm::MDNode::get(ctx_, {it->second}));
    }
    if (!others.empty()) access->setMetadata(llvm::LLVMContext::MD_noalias, llvm::MDNode::get(ctx_, others));
  }

  // ---- bodies

  // Whether node `n` is one POLICYC_INJECT_FAULT miscompiles in this way.
  bool faulty(const ir::Node* n, InjectedFault::Kind kind) const {
    return n && o_.fault && o_.fault->kind == kind && n->isOp() && o_.fault->op == n->info().name;
  }
  Value* plusOne(Value* v, DType t) { return ir::isFloat(t) ? b_.CreateFAdd(v, fc(1, v)) : b_.CreateAdd(v, constant(1, t, v->getType())); }

  // Emits `body` at the insertion point. With width > 0 every value is a vector of `width` lanes
  // along the last domain axis (vars.back() is the first lane's index; see vectorizable()).
  // Returns the values (prologues return one).
  std::vector<Value*> emitBody(const std::vector<Instr>& body, const std::vector<Value*>& vars, Value* acc, unsigned width = 0) {
    std::vector<Value*> v(body.size(), nullptr);
    const size_t lastAxis = vars.size() - 1;
    for (size_t i = 0; i < body.size(); ++i) {
      const Instr& in = body[i];
      std::vector<Value*> args;
      std::vector<DType> types;
      for (int a : in.args) {
        args.push_back(v[static_cast<size_t>(a)]);
        types.push_back(body[static_cast<size_t>(a)].dtype);
      }
      llvm::Instruction* since = mark();
      switch (in.opcode) {
        case Opcode::Load: {
          const Buffer& buf = p_.buffer(in.buffer);
          std::vector<Value*> idx = indices(in.index, vars);
          if (width && usesAxis(in.index, lastAxis)) {
            llvm::Type* vt = llvm::FixedVectorType::get(memType(in.dtype), width);
            v[i] = b_.CreateAlignedLoad(vt, elemPtr(in.buffer, idx), llvm::Align(4), escape::printable(buf.name));
            restrictAccess(llvm::cast<llvm::Instruction>(v[i]), in.buffer);
          } else {
            v[i] = loadElem(in.buffer, idx, buf.name);
            if (width) v[i] = b_.CreateVectorSplat(width, v[i]);
          }
          break;
        }
        case Opcode::Store: {
          const Buffer& buf = p_.buffer(in.buffer);
          Value* val = convert(args[0], types[0], buf.type.dtype);
          std::vector<Value*> idx = indices(in.index, vars);
          if (width) {
            restrictAccess(b_.CreateAlignedStore(val, elemPtr(in.buffer, idx), llvm::Align(4)), in.buffer);
          } else {
            storeElem(in.buffer, idx, val);
          }
          break;
        }
        case Opcode::Const: v[i] = constant(in.constant, in.dtype, regType(in.dtype, width)); break;
        case Opcode::Acc: v[i] = faultyAnchor_ ? plusOne(acc, in.dtype) : acc; break;
        case Opcode::Apply: {
          Value* r = apply(in, args, types);
          if (faulty(in.node, InjectedFault::Kind::Accuracy)) r = plusOne(r, in.dtype);
          if (llvm::isa<llvm::Instruction>(r)) r->setName(nodeLabel(in.node));
          v[i] = r;
          break;
        }
      }
      tag(since, in.node);
    }
    return v;
  }

  static bool usesAxis(const IndexMap& index, size_t axis) {
    for (const IndexExpr& e : index) {
      if (e.axis == static_cast<int>(axis)) return true;
    }
    return false;
  }
  // Whether `body` can run on kLanes consecutive values of the last domain axis: f32 values
  // only, and every load or store either ignores that axis or walks it with unit stride.
  bool vectorizable(const Kernel& k) const {
    const size_t last = k.domain.size() - 1;
    for (const Instr& in : k.body) {
      if (in.dtype != DType::F32) return false;
      if (in.opcode == Opcode::Apply && (in.op == Op::Pow || in.op == Op::Cast || in.op == Op::Where || in.op == Op::Not ||
                                         in.op == Op::Equal || in.op == Op::Less || in.op == Op::Greater)) {
        return false;
      }
      if (in.opcode == Opcode::Load || in.opcode == Opcode::Store) {
        const Buffer& b = p_.buffer(in.buffer);
        if (b.type.dtype != DType::F32) return false;
        int uses = 0;
        for (size_t d = 0; d < in.index.size(); ++d) {
          const IndexExpr& e = in.index[d];
          if (e.axis != static_cast<int>(last)) continue;
          ++uses;
          if (e.scale * b.strides[d] != 1) return false;
        }
        if (uses > 1 || (in.opcode == Opcode::Store && uses == 0)) return false;
      }
    }
    return true;
  }

  DType accType(const Kernel& k) const {
    for (const Instr& i : k.body) {
      if (i.opcode == Opcode::Acc) return i.dtype;
    }
    return k.anchor->output()->type().dtype;
  }

  // ---- kernels

  Value* dimValue(const ir::Dim& d) { return d.isBatch() ? batch_ : c64(d.value()); }
  // The product of `dims` except `skip`, in the run function (batch = its argument).
  static std::function<Value*(Value*)> product(llvm::IRBuilder<>& b, const std::vector<ir::Dim>& dims, int skip, int64_t scale) {
    int64_t fixed = scale;
    bool hasBatch = false;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (static_cast<int>(d) == skip) continue;
      if (dims[d].isBatch()) hasBatch = true;
      else fixed *= dims[d].value();
    }
    return [&b, fixed, hasBatch](Value* batch) -> Value* {
      Value* c = b.getInt64(static_cast<uint64_t>(fixed));
      return hasBatch ? b.CreateMul(batch, c) : c;
    };
  }
  // A ThreadSplit's numbers in the run function (batch = its argument).
  Value* affine(int64_t perBatch, int64_t fixed, Value* batch) {
    if (perBatch == 0) return c64(fixed);
    Value* v = perBatch == 1 ? batch : b_.CreateMul(batch, c64(perBatch));
    return fixed ? b_.CreateAdd(v, c64(fixed)) : v;
  }
  Value* unitsOf(const ThreadSplit& sp, Value* batch) {
    Value* u = affine(sp.rowsPerBatch, sp.rowsFixed, batch);
    if (sp.tile > 1) u = b_.CreateSDiv(b_.CreateAdd(u, c64(sp.tile - 1)), c64(sp.tile));
    return sp.mult > 1 ? b_.CreateMul(u, c64(sp.mult)) : u;
  }
  Value* costOf(const ThreadSplit& sp, Value* batch) {
    Value* c = b_.CreateSIToFP(affine(sp.costPerBatch, sp.costFixed, batch), f64_);
    if (!sp.tileCost) return c;
    Value* rows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, affine(sp.rowsPerBatch, sp.rowsFixed, batch), c64(sp.tile));
    return b_.CreateFMul(c, b_.CreateSIToFP(rows, f64_));
  }
  // The implementation the schedule runs kernel ki with (one for every batch size here).
  std::optional<Impl> implOf(size_t ki) const {
    const ImplDispatch& d = s_.kernels[ki].dispatch;
    return d.empty() ? std::nullopt : implByName(d.front().impl);
  }

  // Loops over `domain` (axis `split` over [lo, hi)), calling body(vars) innermost.
  void domainLoops(const std::vector<ir::Dim>& domain, int split, const std::function<void(const std::vector<Value*>&)>& body,
                   const std::vector<size_t>& order = {}, std::vector<Value*> vars = {}) {
    std::vector<size_t> axes = order;
    if (axes.empty() && vars.empty()) {
      for (size_t d = 0; d < domain.size(); ++d) axes.push_back(d);
      vars.assign(domain.size(), nullptr);
    }
    std::function<void(size_t)> level = [&](size_t li) {
      if (li == axes.size()) {
        body(vars);
        return;
      }
      size_t d = axes[li];
      Value* lo = static_cast<int>(d) == split ? lo_ : c64(0);
      Value* hi = static_cast<int>(d) == split ? hi_ : dimValue(domain[d]);
      forRange(lo, hi, "i" + std::to_string(d), [&](Value* i) {
        vars[d] = i;
        level(li + 1);
      });
    };
    level(0);
  }

  llvm::Function* emitKernel(const Kernel& k) {
    const size_t ki = static_cast<size_t>(&k - p_.kernels.data());
    if (externs_.count(ki)) {
      emitExternConv(k, externs_.at(ki));
      // The generated epilogue over oneDNN's NHWC result (implementation onednn), split like a kernel.
      return externs_.at(ki).postOps.empty() && externImpl_.at(ki) == "onednn" ? emitKernelFn(k, k.name + ".epilogue", true) : nullptr;
    }
    return emitKernelFn(k, k.name, false);
  }

  // POLICYC_INJECT_FAULT's compile and crash kinds for a kernel's nodes: the emitter fails, or the
  // kernel function traps where the insertion point is (every kernel function, oneDNN's too).
  void injectFaults(const Kernel& k) {
    for (const ir::Node* n : k.sources) {
      if (faulty(n, InjectedFault::Kind::Compile)) {
        fail("the LLVM compiler failed: injected compile fault in node '{}' ({}) of kernel {}", n->name(), n->info().name, k.name);
      }
      if (faulty(n, InjectedFault::Kind::Crash)) b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {});
    }
  }

  llvm::Function* emitKernelFn(const Kernel& k, const std::string& name, bool externEpilogue) {
    fn_ = llvm::Function::Create(kernelFnTy_, llvm::GlobalValue::InternalLinkage, name, m_);
    fn_->addFnAttr(llvm::Attribute::NoInline);  // kernels stay separate functions: profiles show them by name
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    fn_->addFnAttr("frame-pointer", "none");
    roots_.clear();
    const size_t ki = static_cast<size_t>(&k - p_.kernels.data());
    split_ = &s_.kernels[ki].splitOf(implOf(ki));
    faultyAnchor_ = k.kind != KernelKind::Pointwise && faulty(k.anchor, InjectedFault::Kind::Accuracy);
    llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    auto arg = fn_->arg_begin();
    Value* ctx = &*arg++;
    lo_ = &*arg++;
    hi_ = &*arg;
    lo_->setName("lo");
    hi_->setName("hi");
    openBody(ctx);
    // A kernel that can fail on its data collects what it found in a local (no branch or atomic
    // per element) and reports it once, at its end.
    errors_ = nullptr;
    if (k.canFail()) {
      errors_ = local(i32_, "errors");
      llvm::IRBuilder<>(entryEnd_).CreateStore(b_.getInt32(0), errors_);
    }
    injectFaults(k);
    if (externEpilogue) {
      emitExternEpilogue(k, externs_.at(ki));
    } else {
      switch (s_.kernels[ki].form) {
        case Form::Pointwise: emitPointwise(k); break;
        case Form::Gemm: emitLinear(k); break;
        case Form::PackedGemm: emitPackedLinear(k); break;
        case Form::DirectConv: emitConv(k); break;
        case Form::PackedConv: emitPackedConv(k); break;
        case Form::Pool: emitPool(k); break;
        case Form::MaxPoolRows: emitMaxPoolRows(k); break;
        case Form::RowReduction:
        case Form::AxisReduction: emitReduction(k); break;
        case Form::Copy: emitCopy(k); break;
      }
    }
    if (errors_) {
      // The bits found, OR-ed into the run's status (as the C++ backend's pc::report).
      Value* found = b_.CreateLoad(i32_, errors_, "found");
      ifThen(b_.CreateICmpNE(found, b_.getInt32(0)), "report", [&] {
        b_.CreateAtomicRMW(llvm::AtomicRMWInst::Or, status_, found, llvm::Align(4), llvm::AtomicOrdering::Monotonic);
      });
      errors_ = nullptr;
    }
    b_.CreateRetVoid();
    return fn_;
  }

  // ---- oneDNN extern convs (the support library's policyc_rt_onednn_conv*)

  // i32 NAME(ctx, threads): the primitive (created on the first call), run by oneDNN's own
  // threads; with post-ops it computes the whole epilogue and stores the result.
  void emitExternConv(const Kernel& k, const ExternConv& e) {
    const size_t ki = static_cast<size_t>(&k - p_.kernels.data());
    fn_ = llvm::Function::Create(externFnTy_, llvm::GlobalValue::InternalLinkage, k.name, m_);
    fn_->addFnAttr(llvm::Attribute::NoInline);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    externFns_[ki] = fn_;
    roots_.clear();
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    Value* threads = fn_->getArg(1);
    threads->setName("threads");
    openBody(fn_->getArg(0));
    injectFaults(k);
    llvm::Instruction* since = mark();
    auto* slot = new llvm::GlobalVariable(m_, ptr_, false, llvm::GlobalValue::InternalLinkage,
                                          llvm::ConstantPointerNull::get(ptr_), k.name + ".onednn");
    llvm::Constant* shape = constGlobal(llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int64_t>(e.shape)), k.name + ".shape");
    Value* name = cstr(k.name);
    const Buffer& W = p_.buffer(k.anchorInputs[1]);
    Value* conv = b_.CreateCall(onednnConv_, {slot, name, shape, b_.getInt32(e.anyLayout ? 1 : 0), cstr(e.postOps),
                                              weightsAt(s_.paramOffset.at(W.root), "weight"), weightsAt(s_.kernels[ki].packedBias, "bias")},
                                "conv");
    Value* scratch = b_.CreateInBoundsGEP(i8_, ws_, externOffset(batch_), "scratch");
    Value* src = elemPtr(k.anchorInputs[0], {});
    llvm::Constant* null = llvm::ConstantPointerNull::get(ptr_);
    Value* sum = e.residual >= 0 ? elemPtr(e.residual, {}) : null;
    Value* dst = e.store >= 0 ? elemPtr(e.store, {}) : null;
    llvm::AllocaInst* result = local(ptr_, "result");
    Value* rc = b_.CreateCall(onednnConvRun_, {conv, name, src, sum, dst, batch_, threads, scratch, result}, "rc");
    tag(since, k.anchor);
    b_.CreateRet(rc);
  }

  // The epilogue over the NHWC result oneDNN left after the source copy in the scratch area:
  // units are (image, channel) pairs, each walking the output positions.
  void emitExternEpilogue(const Kernel& k, const ExternConv& e) {
    const int64_t M = e.shape[3], OW = e.shape[7], P = e.shape[6] * OW, srcPerRow = e.shape[0] * e.shape[1] * e.shape[2];
    Value* scratch = b_.CreateInBoundsGEP(i8_, ws_, externOffset(batch_));
    Value* result = b_.CreateInBoundsGEP(f32_, scratch, b_.CreateMul(batch_, c64(srcPerRow)), "result");
    const DType t = accType(k);
    forRange(lo_, hi_, "u", [&](Value* u) {
      Value* i0 = b_.CreateSDiv(u, c64(M), "i0");
      Value* i1 = b_.CreateSRem(u, c64(M), "i1");
      forCount(P, "pos", [&](Value* pos) {
        Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(i0, c64(P)), pos), c64(M)), i1);
        Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, result, at), "acc");
        emitBody(k.body, {i0, i1, b_.CreateSDiv(pos, c64(OW)), b_.CreateSRem(pos, c64(OW))}, convert(a, DType::F32, t));
      });
    });
  }

  // A kernel function's entry: the run's arguments from `ctx` (a pc_run_ctx), then a branch to
  // the body, where the insertion point is left. Root pointers go at the end of the entry block.
  void openBody(Value* ctx) {
    ctx->setName("ctx");
    inputs_ = b_.CreateLoad(ptr_, b_.CreateStructGEP(ctxTy_, ctx, 0), "inputs");
    outputs_ = b_.CreateLoad(ptr_, b_.CreateStructGEP(ctxTy_, ctx, 1), "outputs");
    batch_ = b_.CreateLoad(i64_, b_.CreateStructGEP(ctxTy_, ctx, 2), "batch");
    ws_ = b_.CreateLoad(ptr_, b_.CreateStructGEP(ctxTy_, ctx, 3), "ws");
    status_ = b_.CreateLoad(ptr_, b_.CreateStructGEP(ctxTy_, ctx, 4), "status");
    llvm::BasicBlock* body = block("body");
    entryEnd_ = b_.CreateBr(body);
    b_.SetInsertPoint(body);
  }

  void emitPointwise(const Kernel& k) {
    const int axis = split_->axis;
    restrict_ = true;
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& vars) { emitBody(k.body, vars, nullptr); });
    restrict_ = false;
  }

  // ---- linear

  // The general linear / gemm / matmul: one dot product per output element.
  void emitLinear(const Kernel& k) {
    const ir::Node& n = *k.anchor;
    const size_t R = k.domain.size();
    const int a = k.anchorInputs[0], bId = k.anchorInputs[1];
    const Buffer& A = p_.buffer(a);
    const Buffer& B = p_.buffer(bId);
    ir::Dim kExtent = A.type.shape.back();
    const int axis = split_->axis;
    const DType t = accType(k);
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& vars) {
      std::vector<Value*> aIdx(A.type.rank(), nullptr), bIdx(B.type.rank(), nullptr), cIdx;
      int kAxisA = 0, kAxisB = 0;
      double alpha = 1, beta = 1;
      int biasId = k.anchorInputs.size() > 2 ? k.anchorInputs[2] : -1;
      auto broadcastIdx = [&](const Buffer& X, size_t lead, std::vector<Value*>& idx, size_t count) {
        for (size_t d = 0; d < count; ++d) {
          size_t od = lead + d;
          bool bc = X.type.shape[d].isStatic() && X.type.shape[d].value() == 1 && !(k.domain[od].isStatic() && k.domain[od].value() == 1);
          idx[d] = bc ? nullptr : vars[od];
        }
      };
      if (n.isOp(Op::Linear)) {
        for (size_t d = 0; d + 1 < A.type.rank(); ++d) aIdx[d] = vars[d];
        kAxisA = static_cast<int>(A.type.rank()) - 1;
        bIdx[0] = vars[R - 1];
        kAxisB = 1;
        if (biasId >= 0) cIdx = {vars[R - 1]};
      } else if (n.isOp(Op::Gemm)) {
        bool ta = n.attrInt("trans_a") != 0, tb = n.attrInt("trans_b") != 0;
        aIdx[ta ? 1 : 0] = vars[0];
        kAxisA = ta ? 0 : 1;
        bIdx[tb ? 0 : 1] = vars[1];
        kAxisB = tb ? 1 : 0;
        kExtent = A.type.shape[ta ? 0 : 1];
        alpha = n.attrFloat("alpha");
        beta = n.attrFloat("beta");
        if (biasId >= 0) {
          const Buffer& C = p_.buffer(biasId);
          cIdx.assign(C.type.rank(), nullptr);
          broadcastIdx(C, R - C.type.rank(), cIdx, C.type.rank());
        }
      } else {  // matmul with numpy broadcasting; 1-D operands have no row / column dimension
        size_t ra = A.type.rank(), rb = B.type.rank();
        bool hasM = ra >= 2, hasN = rb >= 2;
        size_t nb = R - (hasM ? 1 : 0) - (hasN ? 1 : 0);
        Value* mVar = hasM ? vars[nb] : nullptr;
        Value* nVar = hasN ? vars[nb + (hasM ? 1 : 0)] : nullptr;
        if (ra == 1) {
          kAxisA = 0;
        } else {
          if (ra > 2) broadcastIdx(A, nb - (ra - 2), aIdx, ra - 2);
          aIdx[ra - 2] = mVar;
          kAxisA = static_cast<int>(ra) - 1;
        }
        if (rb == 1) {
          kAxisB = 0;
        } else {
          if (rb > 2) broadcastIdx(B, nb - (rb - 2), bIdx, rb - 2);
          kAxisB = static_cast<int>(rb) - 2;
          bIdx[rb - 1] = nVar;
        }
        kExtent = A.type.shape.back();
      }
      // f32 accumulates in f32 (as the packed microkernels); f64 and integers in double, as the
      // interpreter, integers then converted saturating.
      const DType accT = t == DType::F32 ? DType::F32 : DType::F64;
      llvm::Type* at = regType(accT);
      llvm::AllocaInst* acc = local(at, "acc");
      b_.CreateStore(llvm::ConstantFP::get(at, 0.0), acc);
      forRange(c64(0), dimValue(kExtent), "k", [&](Value* kk) {
        aIdx[static_cast<size_t>(kAxisA)] = kk;
        bIdx[static_cast<size_t>(kAxisB)] = kk;
        Value* x = convert(loadElem(a, aIdx, A.name), A.type.dtype, accT);
        Value* w = convert(loadElem(bId, bIdx, B.name), B.type.dtype, accT);
        Value* prev = b_.CreateLoad(at, acc);
        b_.CreateStore(accT == DType::F32 ? fma(x, w, prev) : b_.CreateFAdd(prev, b_.CreateFMul(x, w)), acc);
      });
      llvm::Instruction* since = mark();
      Value* r = b_.CreateLoad(at, acc);
      if (alpha != 1) r = b_.CreateFMul(r, llvm::ConstantFP::get(at, alpha));
      if (biasId >= 0) {
        Value* c = convert(loadElem(biasId, cIdx, p_.buffer(biasId).name), p_.buffer(biasId).type.dtype, accT);
        r = b_.CreateFAdd(r, beta != 1 ? b_.CreateFMul(c, llvm::ConstantFP::get(at, beta)) : c, nodeLabel(&n));
      }
      tag(since, &n);
      emitBody(k.body, vars, convert(r, accT, t));
    });
  }

  // The microkernel: `rows` row pointers (x_t[q] at rows[t] + q, or rows[t] + offsets[q] with an
  // i32 offset table: conv windows read in place) times `panels` consecutive weight panels from
  // `w` (panel p's row q at w + (p*K + q)*16), each column starting from its bias. Returns
  // acc[t][p], one <16 x float> per row and panel; sums over q in order.
  std::vector<std::vector<Value*>> gemmTile(const std::vector<Value*>& rows, int panels, int64_t K, Value* w, Value* bias,
                                            const ir::Node* node, Value* offsets = nullptr) {
    llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
    if (rows.size() == 1 && panels == 1 && !offsets) return {{gemmRow(rows[0], K, w, bias, node)}};
    std::vector<std::vector<llvm::AllocaInst*>> acc(rows.size(), std::vector<llvm::AllocaInst*>(static_cast<size_t>(panels)));
    llvm::Instruction* since = mark();
    for (int p = 0; p < panels; ++p) {
      Value* bv = b_.CreateAlignedLoad(vt, b_.CreateConstInBoundsGEP1_64(f32_, bias, static_cast<uint64_t>(p) * kLanes), llvm::Align(4), "bias");
      for (size_t t = 0; t < rows.size(); ++t) {
        acc[t][static_cast<size_t>(p)] = local(vt, fmt::format("acc{}{}", t, p));
        b_.CreateStore(bv, acc[t][static_cast<size_t>(p)]);
      }
    }
    tag(since, node);
    forRange(c64(0), c64(K), "q", [&](Value* q) {
      llvm::Instruction* s0 = mark();
      std::vector<Value*> wv;
      for (int p = 0; p < panels; ++p) {
        Value* at = b_.CreateAdd(b_.CreateMul(q, c64(kLanes)), c64(static_cast<int64_t>(p) * K * kLanes));
        wv.push_back(b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(f32_, w, at), llvm::Align(4), "w"));
      }
      Value* at = offsets ? b_.CreateSExt(b_.CreateLoad(i32_, b_.CreateInBoundsGEP(i32_, offsets, q), "at"), i64_) : q;
      for (size_t t = 0; t < rows.size(); ++t) {
        Value* x = b_.CreateVectorSplat(kLanes, b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, rows[t], at), "x"));
        for (int p = 0; p < panels; ++p) {
          llvm::AllocaInst* a = acc[t][static_cast<size_t>(p)];
          b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {x, wv[static_cast<size_t>(p)], b_.CreateLoad(vt, a)}), a);
        }
      }
      tag(s0, node);
    });
    std::vector<std::vector<Value*>> out(rows.size());
    for (size_t t = 0; t < rows.size(); ++t) {
      for (int p = 0; p < panels; ++p) out[t].push_back(b_.CreateLoad(vt, acc[t][static_cast<size_t>(p)], node ? nodeLabel(node) : "acc"));
    }
    return out;
  }

  // One row times one panel: four accumulators over interleaved q (a chain of dependent FMAs
  // would wait on the FMA latency), summed as (a + b) + (c + d) at the end.
  Value* gemmRow(Value* row, int64_t K, Value* w, Value* bias, const ir::Node* node) {
    llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
    llvm::Instruction* since = mark();
    std::vector<llvm::AllocaInst*> acc;
    for (int i = 0; i < 4; ++i) {
      acc.push_back(local(vt, fmt::format("acc{}", i)));
      Value* init = i == 0 ? static_cast<Value*>(b_.CreateAlignedLoad(vt, bias, llvm::Align(4), "bias")) : llvm::Constant::getNullValue(vt);
      b_.CreateStore(init, acc.back());
    }
    tag(since, node);
    auto step = [&](Value* q, int i) {
      Value* wq = b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(f32_, w, b_.CreateMul(q, c64(kLanes))), llvm::Align(4), "w");
      Value* x = b_.CreateVectorSplat(kLanes, b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, q), "x"));
      llvm::AllocaInst* a = acc[static_cast<size_t>(i)];
      b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {x, wq, b_.CreateLoad(vt, a)}), a);
    };
    forCount(K / 4, "q4", [&](Value* q4) {
      llvm::Instruction* s0 = mark();
      for (int i = 0; i < 4; ++i) step(b_.CreateAdd(b_.CreateMul(q4, c64(4)), c64(i)), i);
      tag(s0, node);
    });
    forRange(c64(K / 4 * 4), c64(K), "q", [&](Value* q) { step(q, 0); });
    since = mark();
    Value* sum = b_.CreateFAdd(b_.CreateFAdd(b_.CreateLoad(vt, acc[0]), b_.CreateLoad(vt, acc[1])),
                               b_.CreateFAdd(b_.CreateLoad(vt, acc[2]), b_.CreateLoad(vt, acc[3])), node ? nodeLabel(node) : "acc");
    tag(since, node);
    return sum;
  }

  // The epilogue of one panel's 16 results (`acc`) of the output row given by `rowVars` (the
  // leading domain variables), columns from `n0`: on the whole vector when the body allows it,
  // else column by column up to N.
  void finishPanel(const Kernel& k, const std::vector<Value*>& rowVars, Value* n0, Value* acc, int64_t N, bool vec) {
    std::vector<Value*> vars = rowVars;
    if (vec) {
      vars.push_back(n0);
      emitBody(k.body, vars, acc, kLanes);
      return;
    }
    llvm::AllocaInst* tmp = local(llvm::ArrayType::get(f32_, kLanes), "panel");
    b_.CreateAlignedStore(acc, tmp, llvm::Align(64));
    Value* end = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(n0, c64(kLanes)), c64(N));
    const DType t = accType(k);
    forRange(n0, end, "n", [&](Value* n) {
      Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, tmp, b_.CreateSub(n, n0)), "acc");
      std::vector<Value*> v = rowVars;
      v.push_back(n);
      emitBody(k.body, v, convert(a, DType::F32, t));
    });
  }

  // Linear with a constant weight: rows of x times weight panels, a quad of rows times a pair of
  // panels per unit of work (pair-major, so the pair stays in cache while every row passes).
  void emitPackedLinear(const Kernel& k) {
    const size_t index = static_cast<size_t>(&k - p_.kernels.data());
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const int64_t N = packedN(p_, k), K = packedK(p_, k), panels = (N + kPanel - 1) / kPanel;
    const size_t R = k.domain.size();
    const bool vec = N % kPanel == 0 && !faultyAnchor_ && vectorizable(k);
    std::vector<ir::Dim> lead(k.domain.begin(), k.domain.end() - 1);
    auto rowsOf = product(b_, lead, -1, 1);
    Value* wp = weightsAt(s_.kernels[index].packedWeight, "wp");
    Value* bp = weightsAt(s_.kernels[index].packedBias, "bp");
    Value* rows = rowsOf(batch_);
    Value* quads = b_.CreateSDiv(b_.CreateAdd(rows, c64(3)), c64(4), "quads");
    // Row r of x (leading dims flattened) as its domain variables, and its pointer.
    auto rowVars = [&](Value* r) {
      std::vector<Value*> v(R - 1, nullptr);
      Value* rem = r;
      for (size_t d = R - 1; d-- > 0;) {
        if (d == 0) {
          v[0] = rem;
        } else {
          Value* ext = dimValue(k.domain[d]);
          v[d] = b_.CreateSRem(rem, ext);
          rem = b_.CreateSDiv(rem, ext);
        }
      }
      return v;
    };
    auto rowPtr = [&](const std::vector<Value*>& v) {
      std::vector<Value*> idx(X.type.rank(), nullptr);
      for (size_t d = 0; d + 1 < R; ++d) idx[d] = v[d];
      return elemPtr(X.id, idx);
    };
    forRange(lo_, hi_, "u", [&](Value* u) {
      Value* j = b_.CreateMul(b_.CreateSDiv(u, quads), c64(2), "j");
      Value* r = b_.CreateMul(b_.CreateSRem(u, quads), c64(4), "r");
      Value* jEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(j, c64(2)), c64(panels));
      Value* w = b_.CreateInBoundsGEP(f32_, wp, b_.CreateMul(j, c64(K * kPanel)));
      Value* bias = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(j, c64(kPanel)));
      Value* fullQuad = b_.CreateICmpSLE(b_.CreateAdd(r, c64(4)), rows);
      auto quadTile = [&](int per) {
        std::vector<std::vector<Value*>> rv;
        std::vector<Value*> ptrs;
        for (int t = 0; t < 4; ++t) {
          rv.push_back(rowVars(b_.CreateAdd(r, c64(t))));
          ptrs.push_back(rowPtr(rv.back()));
        }
        auto acc = gemmTile(ptrs, per, K, w, bias, k.anchor);
        for (int t = 0; t < 4; ++t) {
          for (int p = 0; p < per; ++p) {
            finishPanel(k, rv[static_cast<size_t>(t)], b_.CreateMul(b_.CreateAdd(j, c64(p)), c64(kPanel)),
                        acc[static_cast<size_t>(t)][static_cast<size_t>(p)], N, vec);
          }
        }
      };
      ifElse(
          b_.CreateAnd(fullQuad, b_.CreateICmpEQ(jEnd, b_.CreateAdd(j, c64(2)))), "quad2", [&] { quadTile(2); },
          [&] {
            ifElse(
                fullQuad, "quad1", [&] { quadTile(1); },
                [&] {
                  forRange(r, rows, "t", [&](Value* t) {
                    forRange(j, jEnd, "jj", [&](Value* jj) {
                      std::vector<Value*> rv = rowVars(t);
                      Value* wj = b_.CreateInBoundsGEP(f32_, wp, b_.CreateMul(jj, c64(K * kPanel)));
                      Value* bj = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(jj, c64(kPanel)));
                      auto acc = gemmTile({rowPtr(rv)}, 1, K, wj, bj, k.anchor);
                      finishPanel(k, rv, b_.CreateMul(jj, c64(kPanel)), acc[0][0], N, vec);
                    });
                  });
                });
          });
    });
  }

  // ---- conv

  // 2-D conv with a constant weight as an implicit GEMM: the patches of four output positions are
  // gathered (im2col, zeros for padding) into stack rows and multiplied by the weight panels.
  void emitPackedConv(const Kernel& k) {
    const size_t index = static_cast<size_t>(&k - p_.kernels.data());
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const Buffer& W = p_.buffer(k.anchorInputs[1]);
    std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
    const int64_t C = X.type.shape[1].value(), H = X.type.shape[2].value(), Wd = X.type.shape[3].value();
    const int64_t KH = W.type.shape[2].value(), KW = W.type.shape[3].value();
    const int64_t M = packedN(p_, k), K = packedK(p_, k), OW = k.domain[3].value(), P = k.domain[2].value() * OW;
    const int64_t panels = (M + kPanel - 1) / kPanel, quads = (P + 3) / 4;
    Value* wp = weightsAt(s_.kernels[index].packedWeight, "wp");
    Value* bp = weightsAt(s_.kernels[index].packedBias, "bp");
    llvm::AllocaInst* patch = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(4 * K)), "patch");
    const DType t = accType(k);
    // Windows inside the input are read in place through a table of offsets (c, kh, kw order);
    // gathered patches (windows over the padding) through the identity table.
    std::vector<int32_t> window, identity;
    const std::vector<int64_t>& xs = X.strides;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          window.push_back(static_cast<int32_t>(c * xs[1] + kh * dil[0] * xs[2] + kw * dil[1] * xs[3]));
          identity.push_back(static_cast<int32_t>(identity.size()));
        }
    llvm::Constant* windowTable = constGlobal(llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int32_t>(window)), k.name + ".window");
    llvm::Constant* identityTable = constGlobal(llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int32_t>(identity)), k.name + ".patch");
    // Whether output position `pos`'s window lies inside the input, and where it starts.
    auto inside = [&](Value* pos) {
      Value* ih = b_.CreateSub(b_.CreateMul(b_.CreateSDiv(pos, c64(OW)), c64(st[0])), c64(pads[0]));
      Value* iw = b_.CreateSub(b_.CreateMul(b_.CreateSRem(pos, c64(OW)), c64(st[1])), c64(pads[1]));
      Value* okH = b_.CreateAnd(b_.CreateICmpSGE(ih, c64(0)), b_.CreateICmpSLT(b_.CreateAdd(ih, c64((KH - 1) * dil[0])), c64(H)));
      Value* okW = b_.CreateAnd(b_.CreateICmpSGE(iw, c64(0)), b_.CreateICmpSLT(b_.CreateAdd(iw, c64((KW - 1) * dil[1])), c64(Wd)));
      return b_.CreateAnd(okH, okW);
    };
    auto origin = [&](Value* i0, Value* pos) {
      Value* ih = b_.CreateSub(b_.CreateMul(b_.CreateSDiv(pos, c64(OW)), c64(st[0])), c64(pads[0]));
      Value* iw = b_.CreateSub(b_.CreateMul(b_.CreateSRem(pos, c64(OW)), c64(st[1])), c64(pads[1]));
      return elemPtr(X.id, {i0, nullptr, ih, iw});
    };
    // patch row `slot` = the window of output position `pos` of image i0 (c, kh, kw order).
    auto gather = [&](Value* i0, Value* pos, int64_t slot) {
      Value* oh = b_.CreateSDiv(pos, c64(OW));
      Value* ow = b_.CreateSRem(pos, c64(OW));
      Value* dst = b_.CreateConstInBoundsGEP1_64(f32_, patch, static_cast<uint64_t>(slot * K));
      forCount(C, "c", [&](Value* c) {
        forCount(KH, "kh", [&](Value* kh) {
          Value* ih = b_.CreateSub(b_.CreateAdd(b_.CreateMul(oh, c64(st[0])), b_.CreateMul(kh, c64(dil[0]))), c64(pads[0]));
          Value* okH = b_.CreateAnd(b_.CreateICmpSGE(ih, c64(0)), b_.CreateICmpSLT(ih, c64(H)));
          forCount(KW, "kw", [&](Value* kw) {
            Value* iw = b_.CreateSub(b_.CreateAdd(b_.CreateMul(ow, c64(st[1])), b_.CreateMul(kw, c64(dil[1]))), c64(pads[1]));
            Value* ok = b_.CreateAnd(okH, b_.CreateAnd(b_.CreateICmpSGE(iw, c64(0)), b_.CreateICmpSLT(iw, c64(Wd))));
            Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(c, c64(KH)), kh), c64(KW)), kw);
            Value* slotPtr = b_.CreateInBoundsGEP(f32_, dst, at);
            b_.CreateStore(llvm::ConstantFP::get(f32_, 0.0), slotPtr);
            ifThen(ok, "inside", [&] {
              Value* ihc = b_.CreateSelect(ok, ih, c64(0));
              Value* iwc = b_.CreateSelect(ok, iw, c64(0));
              b_.CreateStore(loadElem(X.id, {i0, c, ihc, iwc}, X.name), slotPtr);
            });
          });
        });
      });
    };
    auto finish = [&](Value* i0, Value* pos, Value* j, Value* acc) {
      llvm::AllocaInst* tmp = local(llvm::ArrayType::get(f32_, kLanes), "panel");
      b_.CreateAlignedStore(acc, tmp, llvm::Align(64));
      Value* n0 = b_.CreateMul(j, c64(kPanel));
      Value* end = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(n0, c64(kLanes)), c64(M));
      Value* oh = b_.CreateSDiv(pos, c64(OW));
      Value* ow = b_.CreateSRem(pos, c64(OW));
      forRange(n0, end, "n", [&](Value* nn) {
        Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, tmp, b_.CreateSub(nn, n0)), "acc");
        emitBody(k.body, {i0, nn, oh, ow}, convert(a, DType::F32, t));
      });
    };
    forRange(lo_, hi_, "u", [&](Value* u) {
      Value* i0 = b_.CreateSDiv(u, c64(quads), "i0");
      Value* pos = b_.CreateMul(b_.CreateSRem(u, c64(quads)), c64(4), "pos");
      ifElse(
          b_.CreateICmpSLE(b_.CreateAdd(pos, c64(4)), c64(P)), "quad",
          [&] {
            Value* direct = b_.getTrue();
            for (int tq = 0; tq < 4; ++tq) direct = b_.CreateAnd(direct, inside(b_.CreateAdd(pos, c64(tq))));
            direct->setName("direct");
            ifThen(b_.CreateNot(direct), "gather", [&] {
              for (int tq = 0; tq < 4; ++tq) gather(i0, b_.CreateAdd(pos, c64(tq)), tq);
            });
            std::vector<Value*> rows;
            for (int tq = 0; tq < 4; ++tq) {
              Value* row = b_.CreateConstInBoundsGEP1_64(f32_, patch, static_cast<uint64_t>(tq * K));
              rows.push_back(b_.CreateSelect(direct, origin(i0, b_.CreateAdd(pos, c64(tq))), row));
            }
            Value* offsets = b_.CreateSelect(direct, windowTable, identityTable, "offsets");
            auto tile = [&](Value* j, int per) {
              Value* w = b_.CreateInBoundsGEP(f32_, wp, b_.CreateMul(j, c64(K * kPanel)));
              Value* bias = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(j, c64(kPanel)));
              auto acc = gemmTile(rows, per, K, w, bias, &n, offsets);
              for (int p = 0; p < per; ++p) {
                for (int tq = 0; tq < 4; ++tq) {
                  finish(i0, b_.CreateAdd(pos, c64(tq)), b_.CreateAdd(j, c64(p)), acc[static_cast<size_t>(tq)][static_cast<size_t>(p)]);
                }
              }
            };
            if (panels >= 2) {
              forRange(c64(0), c64(panels / 2), "jp", [&](Value* jp) { tile(b_.CreateMul(jp, c64(2)), 2); });
            }
            if (panels % 2) tile(c64(panels - 1), 1);
          },
          [&] {
            forRange(pos, c64(P), "t0", [&](Value* t0) {
              gather(i0, t0, 0);
              forCount(panels, "j", [&](Value* j) {
                Value* w = b_.CreateInBoundsGEP(f32_, wp, b_.CreateMul(j, c64(K * kPanel)));
                Value* bias = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(j, c64(kPanel)));
                auto acc = gemmTile({b_.CreateConstInBoundsGEP1_64(f32_, patch, 0)}, 1, K, w, bias, &n);
                finish(i0, t0, j, acc[0][0]);
              });
            });
          });
    });
  }

  // Any conv (groups, 1-D/3-D, non-constant weights): direct loops.
  void emitConv(const Kernel& k) {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const Buffer& W = p_.buffer(k.anchorInputs[1]);
    const size_t nsp = X.type.rank() - 2;
    std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1), dil = spatialList(n, "dilations", nsp, 1),
                         pads = spatialList(n, "pads", nsp * 2, 0);
    const int64_t group = n.attrInt("group"), C = X.type.shape[1].value(), M = k.domain[1].value();
    const int64_t gc = C / group, gm = M / group;
    const int axis = split_->axis;
    const DType t = accType(k);
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& vars) {
      llvm::AllocaInst* acc = local(f32_, "acc");
      b_.CreateStore(llvm::ConstantFP::get(f32_, 0.0), acc);
      Value* g = b_.CreateSDiv(vars[1], c64(gm));
      forCount(gc, "c", [&](Value* c) {
        std::vector<Value*> xIdx = {vars[0], b_.CreateAdd(b_.CreateMul(g, c64(gc)), c)};
        std::vector<Value*> wIdx = {vars[1], c};
        std::function<void(size_t)> spatial = [&](size_t d) {
          if (d == nsp) {
            Value* x = convert(loadElem(X.id, xIdx, X.name), X.type.dtype, DType::F32);
            Value* w = convert(loadElem(W.id, wIdx, W.name), W.type.dtype, DType::F32);
            b_.CreateStore(fma(x, w, b_.CreateLoad(f32_, acc)), acc);
            return;
          }
          forCount(W.type.shape[2 + d].value(), "k" + std::to_string(d), [&](Value* kd) {
            Value* pd = b_.CreateSub(b_.CreateAdd(b_.CreateMul(vars[2 + d], c64(strides[d])), b_.CreateMul(kd, c64(dil[d]))), c64(pads[d]));
            Value* ok = b_.CreateAnd(b_.CreateICmpSGE(pd, c64(0)), b_.CreateICmpSLT(pd, c64(X.type.shape[2 + d].value())));
            ifThen(ok, "inside", [&] {
              xIdx.push_back(pd);
              wIdx.push_back(kd);
              spatial(d + 1);
              xIdx.pop_back();
              wIdx.pop_back();
            });
          });
        };
        spatial(0);
      });
      Value* r = b_.CreateLoad(f32_, acc);
      if (k.anchorInputs.size() > 2) {
        const Buffer& Bv = p_.buffer(k.anchorInputs[2]);
        r = b_.CreateFAdd(r, convert(loadElem(Bv.id, {vars[1]}, Bv.name), Bv.type.dtype, DType::F32), nodeLabel(&n));
      }
      emitBody(k.body, vars, convert(r, DType::F32, t));
    });
  }

  // ---- pooling

  void emitPool(const Kernel& k) {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const size_t nsp = X.type.rank() - 2;
    const std::vector<int64_t>& kernel = n.attrInts("kernel_shape");
    std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1), dil = spatialList(n, "dilations", nsp, 1),
                         pads = spatialList(n, "pads", nsp * 2, 0);
    const bool isMax = n.isOp(Op::MaxPool);
    int64_t window = 1;
    for (int64_t kd : kernel) window *= kd;
    const int axis = split_->axis;
    const DType t = accType(k);
    const bool includePad = !isMax && n.attrInt("count_include_pad") != 0;
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& vars) {
      llvm::AllocaInst* acc = local(f32_, "acc");
      llvm::AllocaInst* nan = local(i1_, "nan");
      llvm::AllocaInst* count = local(i64_, "count");
      b_.CreateStore(llvm::ConstantFP::get(f32_, isMax ? -INFINITY : 0.0), acc);  // padding never wins
      b_.CreateStore(b_.getFalse(), nan);
      b_.CreateStore(c64(0), count);
      std::vector<Value*> xIdx = {vars[0], vars[1]};
      Value* windowSize = c64(1);
      std::vector<Value*> begin(nsp), end(nsp);
      for (size_t d = 0; d < nsp; ++d) {
        const int64_t inD = X.type.shape[2 + d].value();
        begin[d] = b_.CreateSub(b_.CreateMul(vars[2 + d], c64(strides[d])), c64(pads[d]));
        if (!isMax) {
          // As onnxruntime: the window is clipped to the padded input.
          end[d] = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(begin[d], c64(kernel[d])), c64(inD + pads[nsp + d]));
          windowSize = b_.CreateMul(windowSize, b_.CreateSub(end[d], begin[d]));
        }
      }
      std::function<void(size_t)> spatial = [&](size_t d) {
        if (d == nsp) {
          Value* x = convert(loadElem(X.id, xIdx, X.name), X.type.dtype, DType::F32);
          if (isMax) {
            // m > x ? m : x, NaNs tracked beside it: ONNX gives NaN for a window holding one.
            Value* m = b_.CreateLoad(f32_, acc);
            b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(m, x), m, x), acc);
            b_.CreateStore(b_.CreateOr(b_.CreateLoad(i1_, nan), isNan(x)), nan);
          } else {
            b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f32_, acc), x), acc);
            b_.CreateStore(b_.CreateAdd(b_.CreateLoad(i64_, count), c64(1)), count);
          }
          return;
        }
        const int64_t inD = X.type.shape[2 + d].value();
        auto visit = [&](Value* pd) {
          Value* ok = b_.CreateAnd(b_.CreateICmpSGE(pd, c64(0)), b_.CreateICmpSLT(pd, c64(inD)));
          ifThen(ok, "inside", [&] {
            xIdx.push_back(pd);
            spatial(d + 1);
            xIdx.pop_back();
          });
        };
        if (isMax) {
          forCount(kernel[d], "k" + std::to_string(d), [&](Value* kd) { visit(b_.CreateAdd(begin[d], b_.CreateMul(kd, c64(dil[d])))); });
        } else {
          forRange(begin[d], end[d], "p" + std::to_string(d), visit);
        }
      };
      spatial(0);
      llvm::Instruction* since = mark();
      Value* r;
      if (isMax) {
        r = b_.CreateSelect(b_.CreateLoad(i1_, nan), llvm::ConstantFP::getNaN(f32_), b_.CreateLoad(f32_, acc), n.name());
      } else {
        Value* cnt = b_.CreateLoad(i64_, count);
        Value* div = b_.CreateSIToFP(includePad ? windowSize : cnt, f32_);
        r = b_.CreateSelect(b_.CreateICmpEQ(cnt, c64(0)), llvm::ConstantFP::get(f32_, 0.0), b_.CreateFDiv(b_.CreateLoad(f32_, acc), div), n.name());
      }
      tag(since, &n);
      emitBody(k.body, vars, convert(r, DType::F32, t));
    });
  }

  // 2-D max pooling an output row at a time (as the C++ backend): first the column-wise maximum
  // over the window's input rows, into a row padded with -inf on both sides; then each output the
  // maximum of its window's columns of that. The maximum is `m > v ? m : v` (no data-dependent
  // branch) and NaNs are tracked beside it in flags (ONNX: a NaN in the window gives NaN), so
  // both loops vectorise.
  void emitMaxPoolRows(const Kernel& k) {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const std::vector<int64_t>& kernel = n.attrInts("kernel_shape");
    std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
    const int64_t C = k.domain[1].value(), OH = k.domain[2].value(), OW = k.domain[3].value();
    const int64_t H = X.type.shape[2].value(), W = X.type.shape[3].value();
    const int64_t padL = pads[1], span = std::max(padL + W, (OW - 1) * st[1] + (kernel[1] - 1) * dil[1] + 1);
    const DType t = accType(k);
    llvm::AllocaInst* col = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(span)), "col");
    llvm::AllocaInst* nanIn = local(llvm::ArrayType::get(i8_, static_cast<uint64_t>(span)), "nanIn");
    Value* negInf = llvm::ConstantFP::getInfinity(f32_, true);
    auto colAt = [&](Value* i) { return b_.CreateInBoundsGEP(f32_, col, i); };
    auto nanAt = [&](Value* i) { return b_.CreateInBoundsGEP(i8_, nanIn, i); };
    forCount(span, "c", [&](Value* c) {  // padding never wins
      b_.CreateStore(negInf, colAt(c));
      b_.CreateStore(b_.getInt8(0), nanAt(c));
    });
    forRange(lo_, hi_, "u", [&](Value* u) {
      Value* i0 = b_.CreateSDiv(u, c64(C * OH), "i0");
      Value* i1 = b_.CreateSRem(b_.CreateSDiv(u, c64(OH)), c64(C), "i1");
      Value* i2 = b_.CreateSRem(u, c64(OH), "i2");
      forCount(W, "iw", [&](Value* iw) {
        Value* at = b_.CreateAdd(iw, c64(padL));
        b_.CreateStore(negInf, colAt(at));
        b_.CreateStore(b_.getInt8(0), nanAt(at));
      });
      forCount(kernel[0], "kh", [&](Value* kh) {
        Value* ih = b_.CreateSub(b_.CreateAdd(b_.CreateMul(i2, c64(st[0])), b_.CreateMul(kh, c64(dil[0]))), c64(pads[0]));
        ifThen(b_.CreateAnd(b_.CreateICmpSGE(ih, c64(0)), b_.CreateICmpSLT(ih, c64(H))), "inside", [&] {
          Value* row = elemPtr(X.id, {i0, i1, ih, nullptr});
          forCount(W, "iw", [&](Value* iw) {
            Value* at = b_.CreateAdd(iw, c64(padL));
            Value* v = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, iw), escape::printable(X.name));
            Value* m = b_.CreateLoad(f32_, colAt(at));
            b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(m, v), m, v), colAt(at));
            b_.CreateStore(b_.CreateOr(b_.CreateLoad(i8_, nanAt(at)), b_.CreateZExt(isNan(v), i8_)), nanAt(at));
          });
        });
      });
      forCount(OW, "i3", [&](Value* i3) {
        llvm::Instruction* since = mark();
        Value* base = b_.CreateMul(i3, c64(st[1]));
        Value* m = b_.CreateLoad(f32_, colAt(base));
        Value* nan = b_.CreateLoad(i8_, nanAt(base));
        for (int64_t kw = 1; kw < kernel[1]; ++kw) {
          Value* at = b_.CreateAdd(base, c64(kw * dil[1]));
          Value* v = b_.CreateLoad(f32_, colAt(at));
          m = b_.CreateSelect(b_.CreateFCmpOGT(m, v), m, v);
          nan = b_.CreateOr(nan, b_.CreateLoad(i8_, nanAt(at)));
        }
        Value* r = b_.CreateSelect(b_.CreateICmpNE(nan, b_.getInt8(0)), llvm::ConstantFP::getNaN(f32_), m, n.name());
        tag(since, &n);
        emitBody(k.body, {i0, i1, i2, i3}, convert(r, DType::F32, t));
      });
    });
  }

  // ---- reductions

  // The reduced operand at `idx` (its own index): a load, or the fused prologue.
  Value* operand(const Kernel& k, const std::vector<Value*>& idx) {
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    if (k.prologue.empty()) return loadElem(X.id, idx, X.name);
    std::vector<Value*> v = emitBody(k.prologue, idx, nullptr);
    return convert(v[static_cast<size_t>(k.prologueResult)], k.prologue[static_cast<size_t>(k.prologueResult)].dtype, X.type.dtype);
  }

  void emitReduction(const Kernel& k) {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const size_t r = X.type.rank();
    const DType outT = accType(k), xT = X.type.dtype;
    auto asF64 = [&](Value* v) { return convert(v, xT, DType::F64); };

    if (n.isOp(Op::Softmax) || n.isOp(Op::LogSoftmax) || n.isOp(Op::LayerNorm)) {
      const size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
      const bool ln = n.isOp(Op::LayerNorm);
      std::vector<size_t> reduced, outer;
      for (size_t d = 0; d < r; ++d) ((d >= axis && (ln || d == axis)) ? reduced : outer).push_back(d);
      const int splitAt = split_->axis;
      // The outer loops walk only the kept axes (the reduced ones are walked by `inner`).
      std::vector<Value*> vars(r, nullptr);
      domainLoops(k.domain, splitAt, [&](const std::vector<Value*>& ov) {
        vars = ov;
        auto inner = [&](const std::function<void(const std::vector<Value*>&)>& f) {
          domainLoops(k.domain, -1, f, reduced, vars);
        };
        llvm::AllocaInst* a = local(f64_, "a");
        llvm::AllocaInst* s = local(f64_, "s");
        if (ln) {
          int64_t cols = 1;
          for (size_t d : reduced) cols *= k.domain[d].value();
          b_.CreateStore(llvm::ConstantFP::get(f64_, 0.0), a);
          inner([&](const std::vector<Value*>& v) { b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, a), asF64(operand(k, v))), a); });
          Value* mean = b_.CreateFDiv(b_.CreateLoad(f64_, a), llvm::ConstantFP::get(f64_, static_cast<double>(cols)), "mean");
          b_.CreateStore(llvm::ConstantFP::get(f64_, 0.0), s);
          inner([&](const std::vector<Value*>& v) {
            Value* d = b_.CreateFSub(asF64(operand(k, v)), mean);
            b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, s), b_.CreateFMul(d, d)), s);
          });
          Value* var = b_.CreateFDiv(b_.CreateLoad(f64_, s), llvm::ConstantFP::get(f64_, static_cast<double>(cols)));
          Value* invStd = b_.CreateFDiv(llvm::ConstantFP::get(f64_, 1.0),
                                        b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b_.CreateFAdd(var, llvm::ConstantFP::get(f64_, n.attrFloat("epsilon")))),
                                        "invStd");
          auto paramAt = [&](int id, const std::vector<Value*>& v) {
            const Buffer& P = p_.buffer(id);
            std::vector<Value*> idx(P.type.rank(), nullptr);
            const size_t lead = r - P.type.rank();
            for (size_t d = 0; d < P.type.rank(); ++d) {
              bool bc = P.type.shape[d].isStatic() && P.type.shape[d].value() == 1 &&
                        !(k.domain[lead + d].isStatic() && k.domain[lead + d].value() == 1);
              idx[d] = bc ? nullptr : v[lead + d];
            }
            return convert(loadElem(id, idx, P.name), P.type.dtype, DType::F64);
          };
          inner([&](const std::vector<Value*>& v) {
            Value* y = b_.CreateFMul(b_.CreateFMul(b_.CreateFSub(asF64(operand(k, v)), mean), invStd), paramAt(k.anchorInputs[1], v));
            if (k.anchorInputs.size() > 2) y = b_.CreateFAdd(y, paramAt(k.anchorInputs[2], v));
            emitBody(k.body, v, convert(y, DType::F64, outT));
          });
        } else {
          b_.CreateStore(llvm::ConstantFP::getInfinity(f64_, true), a);
          inner([&](const std::vector<Value*>& v) { b_.CreateStore(maxNaN(b_.CreateLoad(f64_, a), asF64(operand(k, v)), true), a); });
          Value* mx = b_.CreateLoad(f64_, a, "max");
          b_.CreateStore(llvm::ConstantFP::get(f64_, 0.0), s);
          inner([&](const std::vector<Value*>& v) {
            b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, s), exp(b_.CreateFSub(asF64(operand(k, v)), mx))), s);
          });
          Value* sum = b_.CreateLoad(f64_, s, "sum");
          Value* logSum = n.isOp(Op::LogSoftmax) ? log(sum) : nullptr;
          inner([&](const std::vector<Value*>& v) {
            Value* d = b_.CreateFSub(asF64(operand(k, v)), mx);
            Value* y = logSum ? b_.CreateFSub(d, logSum) : b_.CreateFDiv(exp(d), sum);
            emitBody(k.body, v, convert(y, DType::F64, outT));
          });
        }
      }, outer, std::vector<Value*>(r, nullptr));
      return;
    }

    // reduce_* / argmax / global_avg_pool: the reduced operand axes, and how the output (the
    // domain) indexes the kept ones.
    const ReducedAxes axesOf = reducedAxes(n, r);
    const std::vector<bool>& reduced = axesOf.reduced;
    const bool keepdims = axesOf.keepdims;
    std::vector<size_t> kept, red;
    int64_t count = 1;
    for (size_t d = 0; d < r; ++d) {
      if (reduced[d]) {
        red.push_back(d);
        count *= X.type.shape[d].value();
      } else {
        kept.push_back(d);
      }
    }
    const int axis = split_->axis;
    const bool isArg = n.isOp(Op::ArgMax), isMax = n.isOp(Op::ReduceMax);
    std::vector<Value*> xv(r, nullptr);
    domainLoops(X.type.shape, axis, [&](const std::vector<Value*>& kv) {
      xv = kv;
      std::vector<Value*> outIdx;
      for (size_t d = 0; d < r; ++d) {
        if (!reduced[d]) outIdx.push_back(xv[d]);
        else if (keepdims) outIdx.push_back(c64(0));
      }
      if (outIdx.size() != k.domain.size()) fail("internal: reduction '{}' domain rank mismatch", n.name());
      if (isArg) {
        const size_t ax = red[0];
        const bool last = n.attrInt("select_last_index") != 0;
        // Two passes, each without a data-dependent branch or a long dependency chain: the
        // maximum (llvm.maximum: a NaN wins, as NaN counts as the largest value in numpy), then
        // the first index holding it (the last with select_last_index), found by walking the
        // axis towards that end and keeping every match.
        const int64_t extent = X.type.shape[ax].value();
        auto valueAt = [&](Value* i) {
          std::vector<Value*> at = xv;
          at[ax] = i;
          return asF64(operand(k, at));
        };
        llvm::AllocaInst* top = local(f64_, "top");
        b_.CreateStore(llvm::ConstantFP::getInfinity(f64_, true), top);
        forRange(c64(0), c64(extent), "x" + std::to_string(ax), [&](Value* i) {
          b_.CreateStore(b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, b_.CreateLoad(f64_, top), valueAt(i)), top);
        });
        Value* mx = b_.CreateLoad(f64_, top, "max");
        Value* nanMax = isNan(mx);
        llvm::AllocaInst* best = local(i64_, "best");
        b_.CreateStore(c64(0), best);
        forRange(c64(0), c64(extent), "y" + std::to_string(ax), [&](Value* j) {
          Value* i = last ? j : b_.CreateSub(c64(extent - 1), j);
          Value* v = valueAt(i);
          Value* match = b_.CreateSelect(nanMax, isNan(v), b_.CreateFCmpOEQ(v, mx));
          b_.CreateStore(b_.CreateSelect(match, i, b_.CreateLoad(i64_, best)), best);
        });
        emitBody(k.body, outIdx, convert(b_.CreateLoad(i64_, best), DType::I64, outT));
        return;
      }
      llvm::AllocaInst* acc = local(f64_, "acc");
      b_.CreateStore(isMax ? llvm::ConstantFP::getInfinity(f64_, true) : llvm::ConstantFP::get(f64_, 0.0), acc);
      domainLoops(X.type.shape, -1, [&](const std::vector<Value*>& v) {
        Value* x = asF64(operand(k, v));
        Value* a = b_.CreateLoad(f64_, acc);
        // llvm.maximum: a NaN wins (the reference's maxNaN), and the loop vectorises.
        b_.CreateStore(isMax ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, x) : b_.CreateFAdd(a, x), acc);
      }, red, xv);
      if (isMax) {
        // llvm.maximum orders -0 below +0; the reference keeps the first of equal values, so a
        // zero maximum takes the sign of the first zero (a scalar pass, only then).
        ifThen(b_.CreateFCmpOEQ(b_.CreateLoad(f64_, acc), llvm::ConstantFP::get(f64_, 0.0)), "zero", [&] {
          llvm::AllocaInst* found = local(i1_, "found");
          b_.CreateStore(b_.getFalse(), found);
          domainLoops(X.type.shape, -1, [&](const std::vector<Value*>& v) {
            Value* x = asF64(operand(k, v));
            Value* first = b_.CreateAnd(b_.CreateNot(b_.CreateLoad(i1_, found)), b_.CreateFCmpOEQ(x, llvm::ConstantFP::get(f64_, 0.0)));
            b_.CreateStore(b_.CreateSelect(first, x, b_.CreateLoad(f64_, acc)), acc);
            b_.CreateStore(b_.CreateOr(b_.CreateLoad(i1_, found), first), found);
          }, red, xv);
        });
      }
      Value* a = b_.CreateLoad(f64_, acc, n.name());
      if (n.isOp(Op::ReduceMean) || n.isOp(Op::GlobalAvgPool)) {
        a = b_.CreateFDiv(a, llvm::ConstantFP::get(f64_, static_cast<double>(count)));
        if (!ir::isFloat(outT)) a = b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, a);
      }
      emitBody(k.body, outIdx, convert(a, DType::F64, outT));
    }, kept, std::vector<Value*>(r, nullptr));  // the kept axes only: `red` is walked inside
  }

  // ---- irregular data movement

  void emitCopy(const Kernel& k) {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const DType t = accType(k);
    const int axis = split_->axis;
    const size_t r = X.type.rank();
    if (!n.isOp(Op::Pad) && !n.isOp(Op::Gather)) unsupported("node '{}' ({}): no LLVM IR for this copy template", n.name(), n.info().name);
    restrict_ = true;  // restrictAccess: measured 1.8x faster on pad, 10x on gather
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& vars) {
      Value* acc = nullptr;
      if (n.isOp(Op::Pad)) {
        const std::vector<int64_t>& pads = n.attrInts("pads");
        const std::string& mode = n.attrString("mode");
        std::vector<Value*> idx;
        Value* inBounds = b_.getTrue();
        for (size_t d = 0; d < r; ++d) {
          if (pads[d] == 0 && pads[r + d] == 0) {
            idx.push_back(vars[d]);
            continue;
          }
          const int64_t size = X.type.shape[d].value();
          Value* pv = b_.CreateSub(vars[d], c64(pads[d]));
          if (mode == "constant") {
            inBounds = b_.CreateAnd(inBounds, b_.CreateAnd(b_.CreateICmpSGE(pv, c64(0)), b_.CreateICmpSLT(pv, c64(size))));
            pv = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, pv, c64(size - 1)), c64(0));
          } else if (mode == "edge") {
            pv = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, pv, c64(size - 1)), c64(0));
          } else if (size == 1) {  // reflect
            pv = c64(0);
          } else {
            // Reflection without repeating the edge, folded into one period of 2*(size-1).
            const int64_t period = 2 * (size - 1);
            Value* m = b_.CreateSRem(pv, c64(period));
            m = b_.CreateSelect(b_.CreateICmpSLT(m, c64(0)), b_.CreateAdd(m, c64(period)), m);
            pv = b_.CreateSelect(b_.CreateICmpSGE(m, c64(size)), b_.CreateSub(c64(period), m), m);
          }
          idx.push_back(pv);
        }
        Value* v = convert(loadElem(X.id, idx, X.name), X.type.dtype, t);
        acc = mode == "constant" ? b_.CreateSelect(inBounds, v, constant(n.attrFloat("value"), t, regType(t))) : v;
      } else {
        const Buffer& I = p_.buffer(k.anchorInputs[1]);
        const size_t ax = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
        const size_t ri = I.type.rank();
        std::vector<Value*> iIdx;
        for (size_t d = 0; d < ri; ++d) iIdx.push_back(vars[ax + d]);
        const int64_t size = X.type.shape[ax].value();
        Value* at = convert(loadElem(I.id, iIdx, I.name), I.type.dtype, DType::I64);
        at = b_.CreateSelect(b_.CreateICmpSLT(at, c64(0)), b_.CreateAdd(at, c64(size)), at);
        // An index outside the axis is an error of the run (as in the interpreter); nothing outside
        // the table is read (an empty table is never read).
        Value* outside = b_.CreateOr(b_.CreateICmpSLT(at, c64(0)), b_.CreateICmpSGE(at, c64(size)));
        flagError(outside, kIndexError);
        if (size == 0) {
          acc = llvm::Constant::getNullValue(regType(t));
        } else {
          at = b_.CreateSelect(outside, c64(0), at);
          std::vector<Value*> idx;
          for (size_t d = 0; d < ax; ++d) idx.push_back(vars[d]);
          idx.push_back(at);
          for (size_t d = ax + 1; d < r; ++d) idx.push_back(vars[d - 1 + ri]);
          acc = convert(loadElem(X.id, idx, X.name), X.type.dtype, t);
        }
      }
      emitBody(k.body, vars, acc);
    });
    restrict_ = false;
  }

  // ---- the C ABI (policyc_model.h)

  llvm::Constant* cstr(const std::string& s) { return b_.CreateGlobalStringPtr(s, "str", 0, &m_); }
  llvm::GlobalVariable* constGlobal(llvm::Constant* init, const std::string& name) {
    auto* g = new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, name);
    return g;
  }
  llvm::Function* function(llvm::Type* ret, std::vector<llvm::Type*> params, const std::string& name, bool exported) {
    auto* f = llvm::Function::Create(llvm::FunctionType::get(ret, params, false),
                                     exported ? llvm::GlobalValue::ExternalLinkage : llvm::GlobalValue::InternalLinkage, name, m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    fn_ = f;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    return f;
  }

  void emitAbi(const std::vector<llvm::Function*>& kernels, const std::string& cName, const std::string& targetName) {
    // descriptors of the inputs and outputs
    auto* descTy = llvm::StructType::create(ctx_, {ptr_, i32_, i32_, ptr_}, "policyc_tensor_desc");
    auto descs = [&](const std::vector<std::pair<std::string, int>>& list, const std::string& what) {
      std::vector<llvm::Constant*> items;
      for (size_t i = 0; i < list.size(); ++i) {
        const Buffer& b = p_.buffer(list[i].second);
        std::vector<int64_t> shape;
        for (const ir::Dim& d : b.type.shape) shape.push_back(d.isBatch() ? -1 : d.value());
        llvm::Constant* arr = llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int64_t>(shape));
        auto* g = constGlobal(arr, fmt::format("pc_{}_shape_{}", what, i));
        items.push_back(llvm::ConstantStruct::get(descTy, {cstr(list[i].first), b_.getInt32(static_cast<uint32_t>(abiDType(b.type.dtype))),
                                                           b_.getInt32(static_cast<uint32_t>(shape.size())), g}));
      }
      return constGlobal(llvm::ConstantArray::get(llvm::ArrayType::get(descTy, items.size()), items), "pc_" + what);
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
    llvm::Function* run = function(i32_, {ptr_, ptr_, i64_, ptr_, i32_}, "pc_run", false);
    {
      auto a = run->arg_begin();
      Value* inputs = &*a++;
      Value* outputs = &*a++;
      Value* batch = &*a++;
      Value* ws = &*a++;
      Value* threads = &*a;
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
      }
      Value* t0 = nullptr;
      auto startTimer = [&](size_t ki) {
        if (o_.profile) t0 = b_.CreateCall(nowNs, {}, p_.kernels[ki].name + ".t0");
      };
      auto stopTimer = [&](size_t ki) {
        if (o_.profile) {
          b_.CreateCall(record, {profNs, profCalls, trace, c64(CodegenOptions::kTraceCapacity), traceCount, b_.getInt32(static_cast<uint32_t>(ki)),
                                 batch, t0});
        }
      };
      Value* minChunk = llvm::ConstantFP::get(f64_, o_.minChunkCost);
      Value* serial = b_.CreateOr(b_.CreateICmpEQ(threads, b_.getInt32(1)), b_.CreateIsNull(parallelFor_), "serial");
      for (size_t ki = 0; ki < kernels.size(); ++ki) {
        b_.CreateAlignedStore(b_.getInt32(static_cast<uint32_t>(ki)), running, llvm::Align(4))->setAtomic(llvm::AtomicOrdering::Monotonic);
        startTimer(ki);
        if (externFns_.count(ki)) {
          Value* rc = b_.CreateCall(externFnTy_, externFns_.at(ki), {ctx, threads}, p_.kernels[ki].name + ".rc");
          fails(b_.CreateICmpNE(rc, b_.getInt32(0)), POLICYC_ERROR_EXTERN);
          if (!kernels[ki]) {
            stopTimer(ki);
            continue;
          }
        }
        const ThreadSplit& sp = s_.kernels[ki].splitOf(implOf(ki));
        Value* units = unitsOf(sp, batch);
        if (llvm::isa<llvm::Instruction>(units)) units->setName(p_.kernels[ki].name + ".units");
        // One thread calls the kernel directly; more go through the support library's pool.
        ifElse(
            serial, p_.kernels[ki].name, [&] { b_.CreateCall(kernelFnTy_, kernels[ki], {ctx, c64(0), units}); },
            [&] {
              b_.CreateCall(parallelFor_, {threads, units, costOf(sp, batch), minChunk, kernels[ki], ctx});
            });
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

    // the descriptor
    auto* modelTy = llvm::StructType::create(ctx_, {i32_, i32_, ptr_, ptr_, i32_, ptr_, i32_, ptr_, ptr_, ptr_, ptr_}, "policyc_model");
    const uint64_t modelSize = m_.getDataLayout().getTypeAllocSize(modelTy);
    auto* model = constGlobal(
        llvm::ConstantStruct::get(modelTy, {b_.getInt32(POLICYC_ABI_VERSION), b_.getInt32(static_cast<uint32_t>(modelSize)),
                                            cstr(p_.name), cstr(targetName), b_.getInt32(static_cast<uint32_t>(p_.inputs.size())),
                                            inDescs, b_.getInt32(static_cast<uint32_t>(p_.outputs.size())), outDescs, wsBytes, run,
                                            cstr(o_.sourceHash)}),
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

  const KernelProgram& p_;
  const MemoryPlan& plan_;
  const Schedule& s_;
  const LlvmOptions& o_;

  std::map<int, int> inputIndex_, outputIndex_;
  llvm::MDNode* aliasDomain_ = nullptr;         // restrictAccess's scopes
  bool restrict_ = false;                       // the kernel being emitted gets them
  std::map<int, llvm::MDNode*> aliasScopes_;    // by root buffer (inputs, outputs, params)
  llvm::GlobalVariable* weightsGv_ = nullptr;
  llvm::FunctionType* kernelFnTy_ = nullptr;
  llvm::Function* parallelFor_ = nullptr;
  // --profile's counters (null without it)
  struct {
    llvm::GlobalVariable *ns = nullptr, *calls = nullptr, *trace = nullptr, *count = nullptr;
  } profile_;
  llvm::Function* threadWorkspace_ = nullptr;
  llvm::StructType* ctxTy_ = nullptr;
  Value* status_ = nullptr;                // the run's status (a kernel's)
  llvm::FunctionType* externFnTy_ = nullptr;
  llvm::Function* onednnConv_ = nullptr;
  llvm::Function* onednnConvRun_ = nullptr;
  std::map<size_t, ExternConv> externs_;       // by kernel index
  std::map<size_t, std::string> externImpl_;
  std::map<size_t, llvm::Function*> externFns_;

  // the kernel function being emitted (fn_: Builder's)
  Value *inputs_ = nullptr, *outputs_ = nullptr, *batch_ = nullptr, *ws_ = nullptr, *lo_ = nullptr, *hi_ = nullptr;
  llvm::Instruction* entryEnd_ = nullptr;
  std::map<int, Value*> roots_;
  const ThreadSplit* split_ = nullptr;  // of the kernel being emitted (the schedule's)
  bool faultyAnchor_ = false;
};

}  // namespace

LlvmModule::LlvmModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlvmModule::LlvmModule(LlvmModule&&) noexcept = default;
LlvmModule& LlvmModule::operator=(LlvmModule&&) noexcept = default;
LlvmModule::~LlvmModule() = default;
const std::string& LlvmModule::name() const { return impl_->name; }
const LlvmTarget& LlvmModule::target() const { return impl_->target; }
const std::string& LlvmModule::unoptimizedIr() const { return impl_->unoptimized; }
const std::string& LlvmModule::header() const { return impl_->header; }
double LlvmModule::emitSeconds() const { return impl_->emitSeconds; }
double LlvmModule::optimizeSeconds() const { return impl_->optimizeSeconds; }
namespace {

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
  // The generated two-panel microkernel everywhere; oneDNN for convs (through the support library).
  so.available = [](const Kernel& k, Impl im) { return im == Impl::Gemm4x32 || (isExtern(im) && k.kind == KernelKind::Conv); };
  const Schedule schedule = scheduleProgram(program, plan, so);
  impl->name = schedule.cName;
  impl->header = cHeader(program, schedule, impl->target.name);

  auto start = std::chrono::steady_clock::now();
  impl->context = std::make_unique<llvm::LLVMContext>();
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
  llvmbe::optimizeModule(m, *machine);
  impl->optimizeSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - emitted).count();
  return LlvmModule(std::move(impl));
}

LlvmModule generateLlvm(const ir::Graph& graph, const LlvmOptions& options) {
  try {
    PlannedProgram planned = planGraph(graph);
    return emitLlvm(planned.program, planned.plan, options);
  } catch (const UnsupportedError& e) {
    unsupported("unsupported in backend llvm: {}", e.what());
  }
}

}  // namespace policyc::codegen
