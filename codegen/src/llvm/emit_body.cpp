// The LLVM emitter's memory access and bodies: root pointers, element addresses and noalias
// scopes, SSA bodies (scalar and 16-lane), loop nests and the thread split's numbers in IR.
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

#include "emitter.h"

namespace policyc::codegen::llvmemit {

Value* Emitter::rootPtr(int root) {
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

Value* Emitter::offsetOf(int id, const std::vector<Value*>& perDim) {
  const Buffer& b = p_.buffer(id);
  Value* off = c64(b.offset);
  for (size_t d = 0; d < perDim.size(); ++d) {
    if (!perDim[d] || b.strides[d] == 0) continue;
    off = b_.CreateAdd(off, b.strides[d] == 1 ? perDim[d] : b_.CreateMul(perDim[d], c64(b.strides[d])));
  }
  return off;
}

Value* Emitter::elemPtr(int id, const std::vector<Value*>& perDim) {
  const Buffer& b = p_.buffer(id);
  return b_.CreateGEP(memType(b.type.dtype), rootPtr(b.root), offsetOf(id, perDim));
}

std::vector<Value*> Emitter::indices(const IndexMap& index, const std::vector<Value*>& vars) {
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

Value* Emitter::loadElem(int id, const std::vector<Value*>& perDim, const std::string& name) {
  DType t = p_.buffer(id).type.dtype;
  llvm::LoadInst* v = b_.CreateLoad(memType(t), elemPtr(id, perDim), escape::printable(name));  // `name` is a buffer's: the model's
  restrictAccess(v, id);
  return t == DType::Bool ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
}

void Emitter::storeElem(int id, const std::vector<Value*>& perDim, Value* v) {
  DType t = p_.buffer(id).type.dtype;
  if (t == DType::Bool) v = b_.CreateZExt(v, i8_);
  restrictAccess(b_.CreateStore(v, elemPtr(id, perDim)), id);
}

void Emitter::restrictAccess(llvm::Instruction* access, int id) {
  if (!restrict_ || id < 0) return;  // id -1: a local of the kernel's
  if (!aliasDomain_) {
    llvm::MDBuilder md(ctx_);
    aliasDomain_ = md.createAnonymousAliasScopeDomain("policyc.roots");
    for (const Buffer& b : p_.buffers) {
      if (b.root == b.id) aliasScopes_[b.id] = md.createAnonymousAliasScope(aliasDomain_, escape::printable(b.name));
    }
  }
  // A temporary's scope says nothing where the kernel's temporaries may share memory.
  const int root = p_.buffer(id).root;
  const auto scoped = [&](int r) { return disjointTemps_ || p_.buffer(r).kind != BufferKind::Temp; };
  if (!scoped(root)) return;
  std::vector<llvm::Metadata*> others;
  for (const auto& [r, scope] : aliasScopes_) {
    if (r != root && scoped(r)) others.push_back(scope);
  }
  access->setMetadata(llvm::LLVMContext::MD_alias_scope, llvm::MDNode::get(ctx_, {aliasScopes_.at(root)}));
  if (!others.empty()) access->setMetadata(llvm::LLVMContext::MD_noalias, llvm::MDNode::get(ctx_, others));
}

bool Emitter::faulty(const ir::Node* n, InjectedFault::Kind kind) const {
  return n && o_.fault && o_.fault->kind == kind && n->isOp() && o_.fault->op == n->info().name;
}

Value* Emitter::loadFirst(Value* at, unsigned width, unsigned lanes, int id) {
  Value* v = llvm::Constant::getNullValue(llvm::FixedVectorType::get(f32_, width));
  for (unsigned l = 0; l < lanes;) {
    const unsigned part = lanes - l >= 4 ? 4 : lanes - l >= 2 ? 2 : 1;
    Value* ptr = b_.CreateConstInBoundsGEP1_64(f32_, at, l);
    llvm::LoadInst* x = b_.CreateAlignedLoad(part == 1 ? static_cast<llvm::Type*>(f32_) : llvm::FixedVectorType::get(f32_, part), ptr,
                                             llvm::Align(4));
    restrictAccess(x, id);
    if (part == 1) {
      v = b_.CreateInsertElement(v, x, static_cast<uint64_t>(l));
    } else {
      // x widened to `width` lanes, then lanes [l, l + part) taken from it.
      std::vector<int> wide(width, -1), mix;
      for (unsigned i = 0; i < part; ++i) wide[i] = static_cast<int>(i);
      Value* xw = b_.CreateShuffleVector(x, wide);
      for (unsigned i = 0; i < width; ++i) mix.push_back(i >= l && i < l + part ? static_cast<int>(width + i - l) : static_cast<int>(i));
      v = b_.CreateShuffleVector(v, xw, mix);
    }
    l += part;
  }
  return v;
}

void Emitter::storeFirst(Value* v, Value* at, unsigned lanes, int id) {
  for (unsigned l = 0; l < lanes;) {
    const unsigned part = lanes - l >= 4 ? 4 : lanes - l >= 2 ? 2 : 1;
    Value* ptr = b_.CreateConstInBoundsGEP1_64(f32_, at, l);
    Value* x = nullptr;
    if (part == 1) {
      x = b_.CreateExtractElement(v, static_cast<uint64_t>(l));
    } else {
      std::vector<int> take;
      for (unsigned i = 0; i < part; ++i) take.push_back(static_cast<int>(l + i));
      x = b_.CreateShuffleVector(v, take);
    }
    restrictAccess(b_.CreateAlignedStore(x, ptr, llvm::Align(4)), id);
    l += part;
  }
}

std::vector<Value*> Emitter::emitBody(const std::vector<Instr>& body, const std::vector<Value*>& vars, Value* acc, unsigned width,
                                      unsigned lanes) {
  const bool partial = width && lanes && lanes < width;
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
          if (partial) {
            v[i] = loadFirst(elemPtr(in.buffer, idx), width, lanes, in.buffer);  // f32 only (vectorBody)
          } else {
            v[i] = b_.CreateAlignedLoad(vt, elemPtr(in.buffer, idx), llvm::Align(4), escape::printable(buf.name));
            restrictAccess(llvm::cast<llvm::Instruction>(v[i]), in.buffer);
          }
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
        if (partial) {
          storeFirst(val, elemPtr(in.buffer, idx), lanes, in.buffer);
        } else if (width) {
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

bool Emitter::usesAxis(const IndexMap& index, size_t axis) {
  for (const IndexExpr& e : index) {
    if (e.axis == static_cast<int>(axis)) return true;
  }
  return false;
}

DType Emitter::accType(const Kernel& k) const {
  for (const Instr& i : k.body) {
    if (i.opcode == Opcode::Acc) return i.dtype;
  }
  return k.anchor->output()->type().dtype;
}

std::function<Value*(Value*)> Emitter::product(llvm::IRBuilder<>& b, const std::vector<ir::Dim>& dims, int skip, int64_t scale) {
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

Value* Emitter::affine(int64_t perBatch, int64_t fixed, Value* batch) {
  if (perBatch == 0) return c64(fixed);
  Value* v = perBatch == 1 ? batch : b_.CreateMul(batch, c64(perBatch));
  return fixed ? b_.CreateAdd(v, c64(fixed)) : v;
}

Value* Emitter::unitsOf(const ThreadSplit& sp, Value* batch) {
  Value* u = affine(sp.rowsPerBatch, sp.rowsFixed, batch);
  if (sp.tile > 1) u = b_.CreateSDiv(b_.CreateAdd(u, c64(sp.tile - 1)), c64(sp.tile));
  return sp.mult > 1 ? b_.CreateMul(u, c64(sp.mult)) : u;
}

Value* Emitter::costOf(const ThreadSplit& sp, Value* batch) {
  Value* c = b_.CreateSIToFP(affine(sp.costPerBatch, sp.costFixed, batch), f64_);
  if (!sp.tileCost) return c;
  Value* rows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, affine(sp.rowsPerBatch, sp.rowsFixed, batch), c64(sp.tile));
  return b_.CreateFMul(c, b_.CreateSIToFP(rows, f64_));
}

void Emitter::domainLoops(const std::vector<ir::Dim>& domain, int split, const std::function<void(const std::vector<Value*>&)>& body, const std::vector<size_t>& order, std::vector<Value*> vars) {
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
    forRange(
        lo, hi, "i" + std::to_string(d),
        [&](Value* i) {
          vars[d] = i;
          level(li + 1);
        },
        // A body of libm calls (unrollInner_) is not vectorised: its calls stay scalar, and the
        // vector loop only put each result into a lane (pow at batch 1 took 1.3x the C++ time).
        (d >= scalarAxes_.size() || !scalarAxes_[d]) && !(li + 1 == axes.size() && unrollInner_), rolledAxis_ == static_cast<int>(d),
        li + 1 == axes.size() ? unrollInner_ : 0);
  };
  level(0);
}

void Emitter::openBody(Value* ctx) {
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

}  // namespace policyc::codegen::llvmemit
