// The LLVM emitter's IR-building layer: types and constants of the op table's dtypes,
// structured control flow (loops, ifs, entry-block locals), provenance tags, conversions with the
// interpreter's integer semantics, the math functions as polynomial IR (exp, log, tanh, sigmoid,
// erf) on scalars and vectors alike, and `apply`: one instruction of a kernel body. Nothing here
// knows the kernel program's buffers or the C ABI (emitter.h builds those on top of it).
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/error.h"
#include "policyc/support/escape.h"

namespace policyc::codegen::llvmbe {

using ir::DType;
using ir::Op;
using llvm::Value;

inline bool isSignedInt(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::I8; }

// Model-provided names reach value names and metadata strings only through escape::printable, so
// module.ll reads as plain ASCII whatever bytes a name holds.
inline std::string nodeLabel(const ir::Node* n) { return n ? escape::printable(n->name()) : std::string(); }

class Builder {
 public:
  explicit Builder(llvm::Module& m) : m_(m), ctx_(m.getContext()), b_(ctx_) {
    f32_ = b_.getFloatTy();
    f64_ = b_.getDoubleTy();
    i1_ = b_.getInt1Ty();
    i8_ = b_.getInt8Ty();
    i32_ = b_.getInt32Ty();
    i64_ = b_.getInt64Ty();
    ptr_ = b_.getPtrTy();
    nodeMd_ = ctx_.getMDKindID("policyc.node");
  }

 protected:
  // ---- types and constants

  llvm::Type* regType(DType t) const {
    switch (t) {
      case DType::F32: return f32_;
      case DType::F64: return f64_;
      case DType::I32: return i32_;
      case DType::I64: return i64_;
      case DType::U8:
      case DType::I8: return i8_;
      case DType::Bool: return i1_;
    }
    return f32_;
  }
  llvm::Type* memType(DType t) const { return t == DType::Bool ? i8_ : regType(t); }
  // The register type at `width` lanes (0: a scalar).
  llvm::Type* regType(DType t, unsigned width) const {
    llvm::Type* s = regType(t);
    return width ? llvm::FixedVectorType::get(s, width) : s;
  }
  Value* c64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }
  // A constant of dtype t at the shape of `like` (scalar or vector).
  Value* constant(double v, DType t, llvm::Type* like) {
    llvm::Type* s = regType(t);
    llvm::Constant* c = nullptr;
    if (ir::isFloat(t)) {
      c = llvm::ConstantFP::get(s, v);
    } else if (t == DType::Bool) {
      c = llvm::ConstantInt::get(s, v != 0 ? 1 : 0);
    } else {
      // An unbounded integer bound (Clip's default -inf/inf) is the type's own limit; NaN is 0.
      const unsigned bits = s->getIntegerBitWidth();
      llvm::APInt lo = isSignedInt(t) ? llvm::APInt::getSignedMinValue(bits) : llvm::APInt::getMinValue(bits);
      llvm::APInt hi = isSignedInt(t) ? llvm::APInt::getSignedMaxValue(bits) : llvm::APInt::getMaxValue(bits);
      if (std::isnan(v)) c = llvm::ConstantInt::get(s, 0);
      else if (std::isinf(v)) c = llvm::ConstantInt::get(ctx_, v < 0 ? lo : hi);
      else c = llvm::ConstantInt::get(s, static_cast<uint64_t>(static_cast<int64_t>(v)), isSignedInt(t));
    }
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(like)) return llvm::ConstantVector::getSplat(vt->getElementCount(), c);
    return c;
  }
  Value* fc(double v, Value* like) { return constant(v, like->getType()->getScalarType()->isDoubleTy() ? DType::F64 : DType::F32, like->getType()); }

  // ---- structured control flow

  llvm::BasicBlock* block(const std::string& name) { return llvm::BasicBlock::Create(ctx_, name, fn_); }

  // for (i = lo; i < hi; ++i) body(i); with vectorize = false the loop vectorizer leaves it
  // alone (llvm.loop.vectorize.width 1); with vectorizeRolled it is vectorised where the loop
  // vectorizer can (its cost model declined short rows) and not unrolled whole before
  // (llvm.loop.unroll.disable: a short loop unrolled whole stays scalar).
  // unrollCount > 0: the loop unrolled that many times (llvm.loop.unroll.count).
  void forRange(Value* lo, Value* hi, const std::string& name, const std::function<void(Value*)>& body, bool vectorize = true,
                bool vectorizeRolled = false, int unrollCount = 0) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    llvm::BasicBlock* head = block(name + ".head");
    llvm::BasicBlock* loop = block(name + ".body");
    llvm::BasicBlock* exit = block(name + ".exit");
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* i = b_.CreatePHI(i64_, 2, name);
    i->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, hi), loop, exit);
    b_.SetInsertPoint(loop);
    body(i);
    Value* next = b_.CreateAdd(i, c64(1), name + ".next", false, true);  // nsw only: loops may start below 0
    i->addIncoming(next, b_.GetInsertBlock());
    llvm::BranchInst* latch = b_.CreateBr(head);
    std::vector<llvm::Metadata*> hints;
    if (!vectorize) {
      hints.push_back(loopHint("llvm.loop.vectorize.width", b_.getInt32(1)));
    } else if (vectorizeRolled) {
      hints.push_back(loopHint("llvm.loop.unroll.disable"));
      hints.push_back(loopHint("llvm.loop.vectorize.enable", b_.getTrue()));
    }
    if (unrollCount > 0) hints.push_back(loopHint("llvm.loop.unroll.count", b_.getInt32(unrollCount)));
    setLoopHints(latch, hints);
    b_.SetInsertPoint(exit);
  }
  // One llvm.loop hint: its name and, for most, a value.
  llvm::MDNode* loopHint(const char* name, llvm::Constant* value = nullptr) {
    if (!value) return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name)});
    return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name), llvm::ConstantAsMetadata::get(value)});
  }
  // A loop's hints on its latch, as its distinct loop ID (none: nothing attached).
  void setLoopHints(llvm::BranchInst* latch, std::vector<llvm::Metadata*> hints) {
    if (hints.empty()) return;
    hints.insert(hints.begin(), nullptr);
    llvm::MDNode* loopId = llvm::MDNode::getDistinct(ctx_, hints);
    loopId->replaceOperandWith(0, loopId);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loopId);
  }
  void forCount(int64_t n, const std::string& name, const std::function<void(Value*)>& body) { forRange(c64(0), c64(n), name, body); }
  void ifThen(Value* cond, const std::string& name, const std::function<void()>& then) {
    llvm::BasicBlock* t = block(name + ".then");
    llvm::BasicBlock* e = block(name + ".end");
    b_.CreateCondBr(cond, t, e);
    b_.SetInsertPoint(t);
    then();
    b_.CreateBr(e);
    b_.SetInsertPoint(e);
  }
  void ifElse(Value* cond, const std::string& name, const std::function<void()>& then, const std::function<void()>& other) {
    llvm::BasicBlock* t = block(name + ".then");
    llvm::BasicBlock* f = block(name + ".else");
    llvm::BasicBlock* e = block(name + ".end");
    b_.CreateCondBr(cond, t, f);
    b_.SetInsertPoint(t);
    then();
    b_.CreateBr(e);
    b_.SetInsertPoint(f);
    other();
    b_.CreateBr(e);
    b_.SetInsertPoint(e);
  }
  // A mutable local (an alloca in the entry block; SROA turns it into SSA values).
  llvm::AllocaInst* local(llvm::Type* t, const std::string& name, Value* count = nullptr) {
    llvm::IRBuilder<> e(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* a = e.CreateAlloca(t, count, name);
    a->setAlignment(llvm::Align(64));
    return a;
  }

  // Tags every instruction emitted since `mark` (the block's last instruction then) with the node.
  llvm::Instruction* mark() { return b_.GetInsertBlock()->empty() ? nullptr : &b_.GetInsertBlock()->back(); }
  void tag(llvm::Instruction* since, const ir::Node* node) {
    if (!node) return;
    // !{value name, operator, the source model's nodes it came from}: as output_code.cpp's comments.
    std::vector<llvm::Metadata*> parts = {llvm::MDString::get(ctx_, nodeLabel(node)), llvm::MDString::get(ctx_, node->info().name)};
    for (const std::string& origin : node->provenance()) parts.push_back(llvm::MDString::get(ctx_, escape::printable(origin)));
    llvm::MDNode* md = llvm::MDNode::get(ctx_, parts);
    llvm::BasicBlock* bb = b_.GetInsertBlock();
    auto it = since ? std::next(since->getIterator()) : bb->begin();
    for (; it != bb->end(); ++it) {
      if (!it->getMetadata(nodeMd_)) it->setMetadata(nodeMd_, md);
    }
  }

  // ---- conversions and the op table's scalar semantics (on scalars or vectors)

  Value* convert(Value* v, DType from, DType to) {
    if (from == to) return v;
    llvm::Type* t = regType(to);
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType())) t = llvm::FixedVectorType::get(t, vt->getNumElements());
    if (to == DType::Bool) {
      return ir::isFloat(from) ? b_.CreateFCmpUNE(v, llvm::Constant::getNullValue(v->getType()))
                               : b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    }
    if (ir::isFloat(from) && ir::isFloat(to)) return b_.CreateFPCast(v, t);
    if (ir::isFloat(from)) {
      // ONNX / numpy: truncation toward zero, NaN -> 0, saturation (the .sat intrinsics exactly).
      auto id = isSignedInt(to) ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
      return b_.CreateIntrinsic(id, {t, v->getType()}, {v});
    }
    if (ir::isFloat(to)) return isSignedInt(from) ? b_.CreateSIToFP(v, t) : b_.CreateUIToFP(v, t);
    if (from == DType::Bool) return b_.CreateZExt(v, t);
    // Integers to integers saturate, as pc::cast: every dtype's values fit in i64 (u8 is the only
    // unsigned one), so clamp there to the target's range.
    llvm::Type* wide = intLike(v, i64_);
    Value* w = b_.CreateIntCast(v, wide, isSignedInt(from));
    if (to != DType::I64) {
      const int bits = static_cast<int>(ir::dtypeSize(to)) * 8;
      const int64_t lo = isSignedInt(to) ? -(int64_t{1} << (bits - 1)) : 0;
      const int64_t hi = isSignedInt(to) ? (int64_t{1} << (bits - 1)) - 1 : (int64_t{1} << bits) - 1;
      w = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, w, ic(hi, wide)), ic(lo, wide));
    }
    return b_.CreateTrunc(w, t);
  }

  // Records in the kernel's error local that `cond` (an i1 or a vector of them) held somewhere.
  // The bits are the C++ prelude's pc::kIndexError and pc::kDivisionError.
  static constexpr uint32_t kIndexError = 1, kDivisionError = 2;
  void flagError(Value* cond, uint32_t bit) {
    if (!errors_) fail("internal: a kernel that can fail was not marked so (Kernel::canFail)");
    if (cond->getType()->isVectorTy()) cond = b_.CreateOrReduce(cond);
    Value* bits = b_.CreateSelect(cond, b_.getInt32(bit), b_.getInt32(0));
    b_.CreateStore(b_.CreateOr(b_.CreateLoad(i32_, errors_), bits), errors_);
  }
  // Integer arithmetic saturates (the interpreter's semantics, as the C++ backend's pc::add).
  Value* satBinary(llvm::Intrinsic::ID signedId, llvm::Intrinsic::ID unsignedId, Value* x, Value* y, DType t) {
    return b_.CreateBinaryIntrinsic(isSignedInt(t) ? signedId : unsignedId, x, y);
  }
  Value* satMul(Value* x, Value* y, DType t) {
    auto id = isSignedInt(t) ? llvm::Intrinsic::smul_fix_sat : llvm::Intrinsic::umul_fix_sat;
    return b_.CreateIntrinsic(id, {x->getType()}, {x, y, b_.getInt32(0)});
  }

  Value* isNan(Value* x) { return b_.CreateFCmpUNO(x, x); }
  Value* fabs(Value* x) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  Value* fma(Value* a, Value* b, Value* c) { return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {a->getType()}, {a, b, c}); }
  // The constant mask of a masked load or store over `width` lanes: lanes [first, last) on.
  llvm::Constant* laneMask(int64_t width, int64_t first, int64_t last) {
    std::vector<llvm::Constant*> on;
    for (int64_t i = 0; i < width; ++i) on.push_back(b_.getInt1(i >= first && i < last));
    return llvm::ConstantVector::get(on);
  }
  Value* poly(Value* x, std::initializer_list<double> coeffs) {  // Horner, highest degree first
    auto it = coeffs.begin();
    Value* y = fc(*it++, x);
    for (; it != coeffs.end(); ++it) y = fma(y, x, fc(*it, x));
    return y;
  }
  llvm::Type* intLike(Value* x, llvm::Type* elem) {
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(x->getType())) return llvm::FixedVectorType::get(elem, vt->getNumElements());
    return elem;
  }
  Value* ic(int64_t v, llvm::Type* t) {
    auto* c = llvm::ConstantInt::get(t->getScalarType(), static_cast<uint64_t>(v), true);
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t)) return llvm::ConstantVector::getSplat(vt->getElementCount(), c);
    return c;
  }
  bool isF32(Value* x) const { return x->getType()->getScalarType()->isFloatTy(); }

  // exp (f32: Cephes polynomial within 1.5e-6 relative, selects only; f64: llvm.exp).
  Value* exp(Value* x) {
    if (!isF32(x)) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x);
    llvm::Type* it = intLike(x, i32_);
    Value* x0 = b_.CreateSelect(isNan(x), fc(0, x), x);
    Value* c = b_.CreateSelect(b_.CreateFCmpOLT(x0, fc(-87.3365, x)), fc(-87.3365, x), x0);
    c = b_.CreateSelect(b_.CreateFCmpOGT(c, fc(88.7228, x)), fc(88.7228, x), c);
    Value* t = fma(c, fc(1.44269504088896341, x), fc(0.5, x));
    // floor(t) as one vroundps (|t| < 2^31: the same value as through integer conversions, which
    // took three more instructions and registers the loop of a long polynomial had none to spare).
    Value* fx = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, t);
    Value* n = b_.CreateFPToSI(fx, it);
    Value* r = fma(fx, fc(-0.693359375, x), c);
    r = fma(fx, fc(2.12194440e-4, x), r);
    Value* z = b_.CreateFMul(r, r);
    Value* y = poly(r, {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1});
    y = b_.CreateFAdd(fma(y, z, r), fc(1.0, x));
    // 2^n as two factors: n reaches 128 near the top of the range.
    Value* n1 = b_.CreateAShr(n, ic(1, it));
    Value* s1 = b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(n1, ic(127, it)), ic(23, it)), x->getType());
    Value* s2 = b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(b_.CreateSub(n, n1), ic(127, it)), ic(23, it)), x->getType());
    Value* e = b_.CreateFMul(b_.CreateFMul(y, s1), s2);
    e = b_.CreateSelect(b_.CreateFCmpOGT(x, fc(88.7228, x)), fc(INFINITY, x), e);
    e = b_.CreateSelect(b_.CreateFCmpOLT(x, fc(-103.972, x)), fc(0, x), e);
    return b_.CreateSelect(isNan(x), x, e, "exp");
  }
  // log (f32: Cephes logf, denormals scaled first; x < 0 -> NaN, 0 -> -inf, inf -> inf).
  Value* log(Value* x) {
    if (!isF32(x)) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, x);
    llvm::Type* it = intLike(x, i32_);
    Value* tiny = b_.CreateFCmpOLT(x, fc(1.17549435e-38, x));
    Value* xs = b_.CreateSelect(tiny, b_.CreateFMul(x, fc(8388608.0, x)), x);  // 2^23
    Value* bits = b_.CreateBitCast(xs, it);
    Value* e = b_.CreateSub(b_.CreateAnd(b_.CreateLShr(bits, ic(23, it)), ic(0xff, it)), ic(126, it));
    e = b_.CreateSelect(tiny, b_.CreateSub(e, ic(23, it)), e);
    Value* m = b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(bits, ic(0x807fffff, it)), ic(0x3f000000, it)), x->getType());
    Value* fe = b_.CreateSIToFP(e, x->getType());
    Value* lowM = b_.CreateFCmpOLT(m, fc(0.707106781186547524, x));
    fe = b_.CreateSelect(lowM, b_.CreateFSub(fe, fc(1, x)), fe);
    m = b_.CreateSelect(lowM, b_.CreateFSub(b_.CreateFAdd(m, m), fc(1, x)), b_.CreateFSub(m, fc(1, x)));
    Value* z = b_.CreateFMul(m, m);
    Value* y = poly(m, {7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                        -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1});
    y = b_.CreateFMul(b_.CreateFMul(y, m), z);
    y = fma(fe, fc(-2.12194440e-4, x), y);
    y = fma(z, fc(-0.5, x), y);
    Value* r = fma(fe, fc(0.693359375, x), b_.CreateFAdd(m, y));
    r = b_.CreateSelect(b_.CreateFCmpOEQ(x, fc(INFINITY, x)), x, r);
    r = b_.CreateSelect(b_.CreateFCmpOEQ(x, fc(0, x)), fc(-INFINITY, x), r);
    r = b_.CreateSelect(b_.CreateFCmpOLT(x, fc(0, x)), fc(NAN, x), r);
    return b_.CreateSelect(isNan(x), x, r, "log");
  }
  // tanh (f32: pc::tanh's rational approximation, x P(x^2) / Q(x^2) up to |x| = 7.99881172, +-1
  // past it, x itself under 0.0004; f64: libm).
  Value* tanh(Value* x) {
    if (!isF32(x)) return callLibm("tanh", x);
    Value* z = b_.CreateFMul(x, x);
    Value* p = b_.CreateFMul(x, poly(z, {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                                         1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03}));
    Value* q = poly(z, {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03});
    Value* a = fabs(x);
    Value* one = b_.CreateSelect(b_.CreateFCmpOLT(x, fc(0, x)), fc(-1, x), fc(1, x));
    Value* r = b_.CreateSelect(b_.CreateFCmpOLT(a, fc(0.0004, x)), x,
                               b_.CreateSelect(b_.CreateFCmpOGT(a, fc(7.99881172180175781, x)), one, b_.CreateFDiv(p, q)));
    return b_.CreateSelect(isNan(x), x, r, "tanh");
  }
  Value* sigmoid(Value* x) {
    Value* e = exp(b_.CreateFNeg(fabs(x)));
    Value* d = b_.CreateFAdd(fc(1, x), e);
    // One division of the selected numerator (the C++ prelude's pc::sigmoid, the same bits).
    Value* r = b_.CreateFDiv(b_.CreateSelect(b_.CreateFCmpOGE(x, fc(0, x)), fc(1, x), e), d);
    return b_.CreateSelect(isNan(x), x, r, "sigmoid");
  }
  // erf (f32: Abramowitz-Stegun 7.1.26 on |x|, within 1.5e-7 absolute; f64: libm).
  Value* erf(Value* x) {
    if (!isF32(x)) return callLibm("erf", x);
    Value* a = fabs(x);
    Value* t = b_.CreateFDiv(fc(1, x), fma(a, fc(0.3275911, x), fc(1, x)));
    Value* p = b_.CreateFMul(poly(t, {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592}), t);
    // 1 - p e as one fused multiply-add: the C++ prelude's `1.0f - p * t * pc::exp(...)` is
    // contracted so (-ffp-contract=fast), and the two backends' erf (GELU) differed by an ulp.
    Value* y = fma(b_.CreateFNeg(p), exp(b_.CreateFNeg(b_.CreateFMul(a, a))), fc(1, x));
    Value* r = b_.CreateIntrinsic(llvm::Intrinsic::copysign, {x->getType()}, {y, x});
    return b_.CreateSelect(isNan(x), x, r, "erf");
  }
  // A libm function of one double/float argument, lane by lane for vectors (cold paths only).
  Value* callLibm(const std::string& name, Value* x) {
    llvm::Type* t = x->getType();
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t)) {
      Value* r = llvm::PoisonValue::get(vt);
      for (unsigned l = 0; l < vt->getNumElements(); ++l) r = b_.CreateInsertElement(r, callLibm(name, b_.CreateExtractElement(x, l)), l);
      return r;
    }
    const std::string fnName = t->isFloatTy() ? name + "f" : name;
    llvm::FunctionCallee f = m_.getOrInsertFunction(fnName, llvm::FunctionType::get(t, {t}, false));
    return b_.CreateCall(f, {x});
  }
  Value* maxNaN(Value* a, Value* b, bool isMax) {
    Value* r = isMax ? b_.CreateSelect(b_.CreateFCmpOLT(a, b), b, a) : b_.CreateSelect(b_.CreateFCmpOLT(b, a), b, a);
    r = b_.CreateSelect(isNan(b), b, r);
    return b_.CreateSelect(isNan(a), a, r);
  }
  // x < y and x > y in dtype t (floats: ordered, false with a NaN).
  Value* lessThan(Value* x, Value* y, DType t) {
    if (ir::isFloat(t)) return b_.CreateFCmpOLT(x, y);
    return isSignedInt(t) ? b_.CreateICmpSLT(x, y) : b_.CreateICmpULT(x, y);
  }
  Value* notNan(Value* x, Value* r, DType t) { return ir::isFloat(t) ? b_.CreateSelect(isNan(x), x, r) : r; }
  // y clamped to [0, 1] on its bits, as pc::clamp01: a sign bit makes it +0 (-0 and a negative
  // NaN included), then the signed minimum with 1's bits (a positive NaN is 1). Two integer ops
  // and a minimum vectorise as such in both compilers (GCC made two float selects four compares).
  Value* clamp01(Value* y) {
    llvm::Type* ft = y->getType();
    const unsigned bits = ft->getScalarSizeInBits();
    llvm::Type* it = ft->isVectorTy() ? static_cast<llvm::Type*>(llvm::VectorType::getInteger(llvm::cast<llvm::VectorType>(ft))) : b_.getIntNTy(bits);
    Value* i = b_.CreateBitCast(y, it);
    i = b_.CreateAnd(i, b_.CreateNot(b_.CreateAShr(i, llvm::ConstantInt::get(it, bits - 1))));
    Value* one = llvm::ConstantInt::get(it, bits == 32 ? 0x3f800000ull : 0x3ff0000000000000ull);
    return b_.CreateBitCast(b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, i, one), ft);
  }

  Value* apply(const Instr& in, const std::vector<Value*>& a, const std::vector<DType>& at) {
    const ir::Node& n = *in.node;
    const DType T = in.dtype;
    const bool fl = ir::isFloat(T);
    auto arg = [&](size_t i) { return convert(a[i], at[i], T); };
    auto attr = [&](const char* name, Value* like) { return constant(n.attrFloat(name), T, like->getType()); };
    switch (in.op) {
      case Op::Add: return fl ? b_.CreateFAdd(arg(0), arg(1)) : satBinary(llvm::Intrinsic::sadd_sat, llvm::Intrinsic::uadd_sat, arg(0), arg(1), T);
      case Op::Sub: return fl ? b_.CreateFSub(arg(0), arg(1)) : satBinary(llvm::Intrinsic::ssub_sat, llvm::Intrinsic::usub_sat, arg(0), arg(1), T);
      case Op::Mul: return fl ? b_.CreateFMul(arg(0), arg(1)) : satMul(arg(0), arg(1), T);
      case Op::Div: {
        if (fl) return b_.CreateFDiv(arg(0), arg(1));
        // C truncation; division by zero is an error of the run (the result 0), lowest / -1
        // saturates (neither may reach the division instruction: both trap on x86).
        Value* x = arg(0);
        Value* y = arg(1);
        Value* zero = b_.CreateICmpEQ(y, llvm::Constant::getNullValue(y->getType()));
        flagError(zero, kDivisionError);
        Value* safe = b_.CreateSelect(zero, ic(1, y->getType()), y);
        if (!isSignedInt(T)) return b_.CreateSelect(zero, llvm::Constant::getNullValue(y->getType()), b_.CreateUDiv(x, safe));
        Value* minusOne = b_.CreateICmpEQ(safe, llvm::Constant::getAllOnesValue(y->getType()));
        safe = b_.CreateSelect(minusOne, ic(1, y->getType()), safe);
        Value* q = b_.CreateSDiv(x, safe);
        q = b_.CreateSelect(minusOne, b_.CreateBinaryIntrinsic(llvm::Intrinsic::ssub_sat, llvm::Constant::getNullValue(x->getType()), x), q);
        return b_.CreateSelect(zero, llvm::Constant::getNullValue(y->getType()), q);
      }
      case Op::Pow: {
        if (!fl) {
          Value* r = powf(convert(a[0], at[0], DType::F64), convert(a[1], at[1], DType::F64));
          return convert(b_.CreateSelect(isNan(r), fc(0, r), b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, r)), DType::F64, T);
        }
        Value* x = arg(0);
        Value* y = arg(1);
        return b_.CreateSelect(b_.CreateFCmpOEQ(y, fc(2, y)), b_.CreateFMul(x, x), powf(x, y));
      }
      case Op::Min:
      case Op::Max: {
        const bool isMax = in.op == Op::Max;
        if (fl) return maxNaN(arg(0), arg(1), isMax);
        Value* x = arg(0);
        Value* y = arg(1);
        Value* less = isSignedInt(T) ? b_.CreateICmpSLT(x, y) : b_.CreateICmpULT(x, y);
        return isMax ? b_.CreateSelect(less, y, x) : b_.CreateSelect(less, x, y);
      }
      case Op::Equal:
      case Op::Less:
      case Op::Greater:
      case Op::LessOrEqual:
      case Op::GreaterOrEqual: {
        // Compared in the operands' common type (they share one after the type checks); floats
        // ordered (false with a NaN).
        Value* x = a[0];
        Value* y = convert(a[1], at[1], at[0]);
        DType ct = at[0];
        const bool f = ir::isFloat(ct), s = isSignedInt(ct);
        using P = llvm::CmpInst::Predicate;
        P p = P::ICMP_EQ;
        switch (in.op) {
          case Op::Equal: p = f ? P::FCMP_OEQ : P::ICMP_EQ; break;
          case Op::Less: p = f ? P::FCMP_OLT : s ? P::ICMP_SLT : P::ICMP_ULT; break;
          case Op::Greater: p = f ? P::FCMP_OGT : s ? P::ICMP_SGT : P::ICMP_UGT; break;
          case Op::LessOrEqual: p = f ? P::FCMP_OLE : s ? P::ICMP_SLE : P::ICMP_ULE; break;
          default: p = f ? P::FCMP_OGE : s ? P::ICMP_SGE : P::ICMP_UGE; break;
        }
        return f ? b_.CreateFCmp(p, x, y) : b_.CreateICmp(p, x, y);
      }
      case Op::And: return b_.CreateAnd(convert(a[0], at[0], DType::Bool), convert(a[1], at[1], DType::Bool));
      case Op::Or: return b_.CreateOr(convert(a[0], at[0], DType::Bool), convert(a[1], at[1], DType::Bool));
      case Op::Xor: return b_.CreateXor(convert(a[0], at[0], DType::Bool), convert(a[1], at[1], DType::Bool));
      case Op::Mod: {
        if (fl) return b_.CreateFRem(arg(0), arg(1));  // C's fmod
        // As pc::mod: a zero divisor is an error of the run (the result 0); lowest % -1 is 0
        // (neither reaches the instruction, which traps on x86).
        Value* x = arg(0);
        Value* y = arg(1);
        llvm::Type* t = y->getType();
        Value* zero = b_.CreateICmpEQ(y, llvm::Constant::getNullValue(t));
        flagError(zero, kDivisionError);
        const bool s = isSignedInt(T);
        Value* special = s ? b_.CreateOr(zero, b_.CreateICmpEQ(y, llvm::Constant::getAllOnesValue(t))) : zero;
        Value* safe = b_.CreateSelect(special, ic(1, t), y);
        Value* r = s ? b_.CreateSRem(x, safe) : b_.CreateURem(x, safe);
        if (s && n.attrInt("fmod") == 0) {
          // The divisor's sign: a nonzero remainder whose sign differs from the divisor's gets it added.
          Value* nz = b_.CreateICmpNE(r, llvm::Constant::getNullValue(t));
          Value* differ = b_.CreateXor(b_.CreateICmpSLT(r, llvm::Constant::getNullValue(t)),
                                       b_.CreateICmpSLT(safe, llvm::Constant::getNullValue(t)));
          r = b_.CreateSelect(b_.CreateAnd(nz, differ), b_.CreateAdd(r, safe), r);
        }
        return b_.CreateSelect(special, llvm::Constant::getNullValue(t), r);
      }
      case Op::Where: return b_.CreateSelect(convert(a[0], at[0], DType::Bool), arg(1), arg(2));
      case Op::Expand: return a[0];  // the broadcast is in the load's index
      case Op::Neg: {
        if (fl) return b_.CreateFNeg(arg(0));
        Value* x = arg(0);
        return satBinary(llvm::Intrinsic::ssub_sat, llvm::Intrinsic::usub_sat, llvm::Constant::getNullValue(x->getType()), x, T);
      }
      case Op::Abs: {
        if (T == DType::Bool || T == DType::U8) return a[0];
        if (fl) return fabs(arg(0));
        Value* x = arg(0);  // |lowest| saturates
        return b_.CreateSelect(b_.CreateICmpSLT(x, llvm::Constant::getNullValue(x->getType())),
                               b_.CreateBinaryIntrinsic(llvm::Intrinsic::ssub_sat, llvm::Constant::getNullValue(x->getType()), x), x);
      }
      case Op::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, arg(0));
      case Op::Exp: return exp(arg(0));
      case Op::Log: return log(arg(0));
      case Op::Erf: return erf(arg(0));
      case Op::Relu: {
        Value* x = arg(0);
        Value* zero = llvm::Constant::getNullValue(x->getType());
        return b_.CreateSelect(lessThan(x, zero, T), zero, x);  // NaN stays NaN
      }
      case Op::Sigmoid: return sigmoid(arg(0));
      case Op::Tanh: return tanh(arg(0));
      case Op::Softplus: {
        Value* x = arg(0);
        Value* r = b_.CreateFAdd(b_.CreateSelect(b_.CreateFCmpOGT(x, fc(0, x)), x, fc(0, x)),
                                 log(b_.CreateFAdd(fc(1, x), exp(b_.CreateFNeg(fabs(x))))));
        return b_.CreateSelect(isNan(x), x, r);
      }
      case Op::Not: return b_.CreateNot(convert(a[0], at[0], DType::Bool));
      case Op::Sin: return callLibm("sin", arg(0));
      case Op::Cos: return callLibm("cos", arg(0));
      case Op::Tan: return callLibm("tan", arg(0));
      case Op::Asin: return callLibm("asin", arg(0));
      case Op::Acos: return callLibm("acos", arg(0));
      case Op::Atan: return callLibm("atan", arg(0));
      case Op::Sinh: return callLibm("sinh", arg(0));
      case Op::Cosh: return callLibm("cosh", arg(0));
      case Op::Asinh: return callLibm("asinh", arg(0));
      case Op::Acosh: return callLibm("acosh", arg(0));
      case Op::Atanh: return callLibm("atanh", arg(0));
      case Op::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, arg(0));
      case Op::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, arg(0));
      case Op::Round: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, arg(0));
      case Op::LeakyRelu: {
        Value* x = arg(0);
        if (!fl) break;
        return b_.CreateSelect(b_.CreateFCmpOLT(x, fc(0, x)), b_.CreateFMul(attr("alpha", x), x), x);
      }
      case Op::Elu: {
        Value* x = arg(0);
        Value* em1 = b_.CreateFSub(exp(x), fc(1, x));
        return b_.CreateSelect(b_.CreateFCmpOLT(x, fc(0, x)), b_.CreateFMul(attr("alpha", x), em1), x);
      }
      case Op::Selu: {
        Value* x = arg(0);
        Value* g = attr("gamma", x);
        Value* em1 = b_.CreateFSub(exp(x), fc(1, x));
        return b_.CreateSelect(b_.CreateFCmpOLE(x, fc(0, x)), b_.CreateFMul(b_.CreateFMul(g, attr("alpha", x)), em1), b_.CreateFMul(g, x));
      }
      case Op::HardSigmoid: {
        Value* x = arg(0);
        Value* y = clamp01(fma(attr("alpha", x), x, attr("beta", x)));
        return b_.CreateSelect(isNan(x), x, y);
      }
      case Op::Clip: {
        Value* x = arg(0);
        Value* lo = attr("min", x);
        Value* hi = attr("max", x);
        Value* y = b_.CreateSelect(lessThan(x, lo, T), lo, x);
        y = b_.CreateSelect(lessThan(hi, y, T), hi, y);
        return notNan(x, y, T);
      }
      case Op::Silu: {
        Value* x = arg(0);
        return b_.CreateFMul(x, sigmoid(x));
      }
      case Op::Gelu: {
        Value* x = arg(0);
        Value* e = erf(b_.CreateFMul(x, fc(0.70710678118654752440, x)));
        return b_.CreateFMul(b_.CreateFMul(fc(0.5, x), x), b_.CreateFAdd(fc(1, x), e));
      }
      case Op::HardSwish: {
        Value* x = arg(0);
        Value* y = clamp01(b_.CreateFAdd(b_.CreateFDiv(x, fc(6, x)), fc(0.5, x)));
        return b_.CreateSelect(isNan(x), x, b_.CreateFMul(x, y));
      }
      case Op::Cast: return convert(a[0], at[0], T);
      case Op::BatchNorm: {
        Value* x = arg(0);
        Value* inv = b_.CreateFDiv(fc(1, x), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, b_.CreateFAdd(arg(4), attr("epsilon", x))));
        return fma(b_.CreateFMul(b_.CreateFSub(x, arg(3)), inv), arg(1), arg(2));
      }
      default: break;
    }
    unsupported("node '{}' ({}): no LLVM IR for this elementwise operator", n.name(), n.info().name);
  }
  Value* powf(Value* x, Value* y) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, y); }


  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  llvm::Type *f32_, *f64_, *i1_, *i8_, *i32_, *i64_;
  llvm::PointerType* ptr_;
  unsigned nodeMd_ = 0;
  llvm::Function* fn_ = nullptr;           // the function being emitted
  llvm::AllocaInst* errors_ = nullptr;     // what the kernel being emitted found (Kernel::canFail)
};

}  // namespace policyc::codegen::llvmbe
