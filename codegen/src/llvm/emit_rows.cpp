// The LLVM emitter's row helpers of the reductions: sums in sumOf's order (sumOf), maxima
// (maxOf, laneMax), a short row's argmax and first-match scans, a softmax's rows eight at a time.
#include <algorithm>
#include <functional>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include "emitter.h"

namespace policyc::codegen::llvmemit {

Value* Emitter::sumOf(int64_t n, const std::function<Value*(Value*)>& f) {
  // As pc::sumOf: value i into lane i % 16 of sixteen partial sums in double, then lane l and
  // l + 8 added, then those eight pairwise.
  auto* vt = llvm::FixedVectorType::get(f64_, 16);
  llvm::AllocaInst* lanes = local(vt, "sum.lanes");
  b_.CreateStore(llvm::Constant::getNullValue(vt), lanes);
  const int64_t whole = n / 16 * 16;
  if (whole > 0) {
    forRange(c64(0), c64(n / 16), "q", [&](Value* q) {
      Value* base = b_.CreateMul(q, c64(16));
      Value* v = llvm::PoisonValue::get(vt);
      for (unsigned l = 0; l < 16; ++l) v = b_.CreateInsertElement(v, b_.CreateFPExt(f(b_.CreateAdd(base, c64(l))), f64_), l);
      b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(vt, lanes), v), lanes);
    }, false);  // already a vector loop
  }
  Value* acc = b_.CreateLoad(vt, lanes);
  for (int64_t i = whole; i < n; ++i) {  // the tail (under 16 values), straight-line
    const unsigned l = static_cast<unsigned>(i % 16);
    acc = b_.CreateInsertElement(acc, b_.CreateFAdd(b_.CreateExtractElement(acc, l), b_.CreateFPExt(f(c64(i)), f64_)), l);
  }
  std::vector<Value*> q;
  for (unsigned l = 0; l < 8; ++l) q.push_back(b_.CreateFAdd(b_.CreateExtractElement(acc, l), b_.CreateExtractElement(acc, l + 8)));
  return b_.CreateFAdd(b_.CreateFAdd(b_.CreateFAdd(q[0], q[1]), b_.CreateFAdd(q[2], q[3])),
                       b_.CreateFAdd(b_.CreateFAdd(q[4], q[5]), b_.CreateFAdd(q[6], q[7])), "sum");
}

Value* Emitter::softmaxRows8(const Kernel& k, int64_t across) {
  const size_t r = k.domain.size(), axis = r - 1;
  const int64_t N = k.domain[axis].value();
  auto* v8 = llvm::FixedVectorType::get(f32_, 8);
  auto* d8 = llvm::FixedVectorType::get(f64_, 8);
  Value* first = b_.CreateMul(lo_, c64(across), "rows.first");
  Value* blocks = b_.CreateSDiv(b_.CreateSub(b_.CreateMul(hi_, c64(across)), first), c64(8), "blocks");
  // Row q's domain variables (its value j: the last), divided as unsigned as the C++ printer's
  // (a row is never negative: shifts and masks for powers of two).
  auto rowVars = [&](Value* q) {
    std::vector<Value*> v(r, nullptr);
    int64_t inner = across;
    v[0] = b_.CreateUDiv(q, c64(across));
    for (size_t d = 1; d < axis; ++d) {
      inner /= k.domain[d].value();
      v[d] = b_.CreateURem(b_.CreateUDiv(q, c64(inner)), c64(k.domain[d].value()));
    }
    return v;
  };
  forRange(c64(0), blocks, "rb", [&](Value* bi) {
    Value* rb = b_.CreateAdd(first, b_.CreateMul(bi, c64(8)));
    std::vector<std::vector<Value*>> rows;
    for (int64_t t = 0; t < 8; ++t) rows.push_back(rowVars(b_.CreateAdd(rb, c64(t))));
    // Value j of the eight rows as one vector: rows of up to 8 as row vectors turned by shuffles
    // (their loads combine into vector loads), longer ones lane by lane.
    std::vector<Value*> x;
    auto valueAt = [&](unsigned t, int64_t j) {
      std::vector<Value*> at = rows[t];
      at[axis] = c64(j);
      return operand(k, at);
    };
    if (N <= 8) {
      for (unsigned t = 0; t < 8; ++t) {
        Value* v = llvm::Constant::getNullValue(v8);
        for (int64_t j = 0; j < N; ++j) v = b_.CreateInsertElement(v, valueAt(t, j), static_cast<uint64_t>(j));
        x.push_back(v);
      }
      x = transpose8x8(x);
      x.resize(static_cast<size_t>(N));
    } else {
      for (int64_t j = 0; j < N; ++j) {
        Value* v = llvm::PoisonValue::get(v8);
        for (unsigned t = 0; t < 8; ++t) v = b_.CreateInsertElement(v, valueAt(t, j), t);
        x.push_back(v);
      }
    }
    // Their maximum (NaN where a row holds one).
    Value* m = llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(8), llvm::ConstantFP::getInfinity(f32_, true));
    Value* nans = llvm::Constant::getNullValue(llvm::FixedVectorType::get(i1_, 8));
    for (Value* v : x) {
      m = b_.CreateSelect(b_.CreateFCmpOGT(v, m), v, m);
      nans = b_.CreateOr(nans, isNan(v));
    }
    m = b_.CreateSelect(nans, llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(8), llvm::ConstantFP::getNaN(f32_)), m);
    // The exps, two values' a 16-lane vector (as pc::softmaxRows8: one 8-lane exp a value took
    // twice as long); their sum in double in sumOf's order (value j in lane j % 16 of the partial
    // sums: lanes l and l + 8 added, then those pairwise); each exp over it.
    std::vector<Value*> w;
    std::vector<int> both(16), low(8), high(8);
    for (int l = 0; l < 16; ++l) both[static_cast<size_t>(l)] = l;
    for (int l = 0; l < 8; ++l) low[static_cast<size_t>(l)] = l, high[static_cast<size_t>(l)] = l + 8;
    for (int64_t j = 0; j < N; j += 2) {
      Value* d = b_.CreateFSub(x[static_cast<size_t>(j)], m);
      if (j + 1 == N) {
        w.push_back(b_.CreateFPExt(exp(d), d8));
        break;
      }
      Value* e = exp(b_.CreateShuffleVector(d, b_.CreateFSub(x[static_cast<size_t>(j + 1)], m), both));
      w.push_back(b_.CreateFPExt(b_.CreateShuffleVector(e, low), d8));
      w.push_back(b_.CreateFPExt(b_.CreateShuffleVector(e, high), d8));
    }
    Value* zero = llvm::Constant::getNullValue(d8);
    std::vector<Value*> q;
    for (int64_t l = 0; l < 8; ++l) {
      q.push_back(b_.CreateFAdd(l < N ? w[static_cast<size_t>(l)] : zero, l + 8 < N ? w[static_cast<size_t>(l + 8)] : zero));
    }
    Value* sum = b_.CreateFAdd(b_.CreateFAdd(b_.CreateFAdd(q[0], q[1]), b_.CreateFAdd(q[2], q[3])),
                               b_.CreateFAdd(b_.CreateFAdd(q[4], q[5]), b_.CreateFAdd(q[6], q[7])), "sum");
    const DType outT = accType(k);
    std::vector<Value*> y;
    if (k.anchor->isOp(Op::LogSoftmax)) {
      // (x - max) - log(sum) in double, libm's log of each row's sum.
      Value* logs = llvm::PoisonValue::get(d8);
      for (unsigned t = 0; t < 8; ++t) logs = b_.CreateInsertElement(logs, log(b_.CreateExtractElement(sum, t)), t);
      Value* mw = b_.CreateFPExt(m, d8);
      for (int64_t j = 0; j < N; ++j) {
        y.push_back(b_.CreateFPTrunc(b_.CreateFSub(b_.CreateFSub(b_.CreateFPExt(x[static_cast<size_t>(j)], d8), mw), logs), v8));
      }
    } else {
      for (int64_t j = 0; j < N; ++j) y.push_back(b_.CreateFPTrunc(b_.CreateFDiv(w[static_cast<size_t>(j)], sum), v8));
    }
    // Back to rows where they were turned: row t's results one vector.
    const bool turned = N <= 8;
    if (turned) {
      y.resize(8, llvm::Constant::getNullValue(v8));
      y = transpose8x8(y);
    }
    for (unsigned t = 0; t < 8; ++t) {
      for (int64_t j = 0; j < N; ++j) {
        std::vector<Value*> at = rows[t];
        at[axis] = c64(j);
        Value* value = turned ? b_.CreateExtractElement(y[t], static_cast<uint64_t>(j)) : b_.CreateExtractElement(y[static_cast<size_t>(j)], t);
        emitBody(k.body, at, convert(value, DType::F32, outT));
      }
    }
  }, false);  // a vector loop already
  return b_.CreateAdd(first, b_.CreateMul(blocks, c64(8)), "rows.rest");
}

Value* Emitter::laneMax(Value* v) {
  const unsigned lanes = static_cast<unsigned>(llvm::cast<llvm::FixedVectorType>(v->getType())->getNumElements());
  for (unsigned w = lanes / 2; w >= 1; w /= 2) {
    std::vector<int> lo(w), hi(w);
    for (unsigned l = 0; l < w; ++l) lo[l] = static_cast<int>(l), hi[l] = static_cast<int>(l + w);
    Value* a = b_.CreateShuffleVector(v, lo);
    Value* b = b_.CreateShuffleVector(v, hi);
    v = b_.CreateSelect(b_.CreateFCmpOGT(a, b), a, b);
  }
  return b_.CreateExtractElement(v, uint64_t{0});
}

Value* Emitter::maxOf(int64_t n, const std::function<Value*(Value*)>& f) {
  const int64_t whole = n / kLanes * kLanes;
  llvm::AllocaInst* top = local(f32_, "top");
  llvm::AllocaInst* bad = local(i1_, "bad");
  b_.CreateStore(llvm::ConstantFP::getInfinity(f32_, true), top);
  b_.CreateStore(b_.getFalse(), bad);
  if (whole > 0) {
    auto* vt = llvm::FixedVectorType::get(f32_, kLanes);
    // NaN lanes as all-ones i32 lanes (pc::maxOf's mask vectors): kept as i1 lanes, each step's
    // compares were packed to bytes before the or (five more instructions a step). One unordered
    // compare of a step's two halves flags both (pc::eitherNaN). With mask registers
    // (Schedule::maskRegisters) i1 lanes, one compare of the step's vector with itself.
    constexpr unsigned half = kLanes / 2;
    const bool maskRegs = s_.maskRegisters;
    auto* mt = maskRegs ? llvm::FixedVectorType::get(i1_, kLanes) : llvm::FixedVectorType::get(i32_, half);
    std::vector<int> loLanes(half), hiLanes(half);
    for (unsigned l = 0; l < half; ++l) loLanes[l] = static_cast<int>(l), hiLanes[l] = static_cast<int>(half + l);
    llvm::AllocaInst* lanes = local(vt, "lanes");
    llvm::AllocaInst* nanLanes = local(mt, "nan.lanes");
    b_.CreateStore(llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(kLanes), llvm::ConstantFP::getInfinity(f32_, true)), lanes);
    b_.CreateStore(llvm::Constant::getNullValue(mt), nanLanes);
    auto maxSel = [&](Value* a, Value* b) { return b_.CreateSelect(b_.CreateFCmpOGT(a, b), a, b); };
    // kLanes values at base into the running maxima `into` and their NaN mask `nans`.
    auto step = [&](Value* base, llvm::AllocaInst* into, llvm::AllocaInst* nans) {
      Value* v = llvm::PoisonValue::get(vt);
      for (unsigned l = 0; l < kLanes; ++l) v = b_.CreateInsertElement(v, f(b_.CreateAdd(base, c64(l))), l);
      b_.CreateStore(maxSel(v, b_.CreateLoad(vt, into)), into);
      Value* flags = maskRegs ? b_.CreateFCmpUNO(v, v)
                              : b_.CreateSExt(b_.CreateFCmpUNO(b_.CreateShuffleVector(v, loLanes), b_.CreateShuffleVector(v, hiLanes)), mt);
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(mt, nans), flags), nans);
    };
    int64_t done = 0;
    if (n >= 2 * kLanes) {
      // Two sets of running maxima, as pc::maxOf: one set's selects are a chain of dependent
      // instructions (3 cycles each), twice as slow over 1024 values.
      llvm::AllocaInst* lanes2 = local(vt, "lanes2");
      llvm::AllocaInst* nanLanes2 = local(mt, "nan.lanes2");
      b_.CreateStore(b_.CreateLoad(vt, lanes), lanes2);
      b_.CreateStore(llvm::Constant::getNullValue(mt), nanLanes2);
      forRange(c64(0), c64(n / (2 * kLanes)), "q", [&](Value* q) {
        Value* base = b_.CreateMul(q, c64(2 * kLanes));
        step(base, lanes, nanLanes);
        step(b_.CreateAdd(base, c64(kLanes)), lanes2, nanLanes2);
      }, false, false, 2);  // already a vector loop; unrolled whole, the row's loads outlived the registers
      b_.CreateStore(maxSel(b_.CreateLoad(vt, lanes2), b_.CreateLoad(vt, lanes)), lanes);
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(mt, nanLanes2), b_.CreateLoad(mt, nanLanes)), nanLanes);
      done = n / (2 * kLanes) * 2 * kLanes;
    }
    if (done < whole) step(c64(done), lanes, nanLanes);
    // The lanes' maximum, as pc::maxOf (no lane holds a NaN; any order gives the same value, a
    // zero maximum is looked up below).
    b_.CreateStore(laneMax(b_.CreateLoad(vt, lanes)), top);
    Value* anyNan = b_.CreateOrReduce(b_.CreateLoad(mt, nanLanes));
    b_.CreateStore(maskRegs ? anyNan : b_.CreateICmpNE(anyNan, b_.getInt32(0)), bad);
  }
  forRange(c64(whole), c64(n), "t", [&](Value* i) {
    Value* v = f(i);
    Value* t = b_.CreateLoad(f32_, top);
    b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(v, t), v, t), top);
    b_.CreateStore(b_.CreateOr(b_.CreateLoad(i1_, bad), isNan(v)), bad);
  });
  // Rare: the first zero of a zero maximum, by a scalar pass.
  Value* zero = llvm::ConstantFP::get(f32_, 0.0);
  ifThen(b_.CreateFCmpOEQ(b_.CreateLoad(f32_, top), zero), "zero", [&] {
    llvm::AllocaInst* found = local(i1_, "found");
    b_.CreateStore(b_.getFalse(), found);
    forRange(c64(0), c64(n), "z", [&](Value* i) {
      Value* v = f(i);
      Value* take = b_.CreateAnd(b_.CreateNot(b_.CreateLoad(i1_, found)), b_.CreateFCmpOEQ(v, zero));
      b_.CreateStore(b_.CreateSelect(take, v, b_.CreateLoad(f32_, top)), top);
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(i1_, found), take), found);
    });
  });
  b_.CreateStore(b_.CreateSelect(b_.CreateLoad(i1_, bad), llvm::ConstantFP::getNaN(f32_), b_.CreateLoad(f32_, top)), top);
  return b_.CreateLoad(f32_, top, "max");
}

void Emitter::scanStage(int64_t count, const std::string& name, llvm::BasicBlock* found, llvm::AllocaInst* result,
                        const std::function<std::pair<Value*, Value*>(Value*)>& hit) {
  llvm::AllocaInst* at = local(i64_, name + ".at");
  b_.CreateStore(c64(0), at);
  llvm::BasicBlock* head = block(name + ".head");
  llvm::BasicBlock* body = block(name + ".body");
  llvm::BasicBlock* next = block(name + ".next");
  llvm::BasicBlock* take = block(name + ".take");
  llvm::BasicBlock* exit = block(name + ".exit");
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  Value* j = b_.CreateLoad(i64_, at, name);
  b_.CreateCondBr(b_.CreateICmpSLT(j, c64(count)), body, exit);
  b_.SetInsertPoint(body);
  const auto [cond, index] = hit(j);
  b_.CreateCondBr(cond, take, next);
  b_.SetInsertPoint(next);
  b_.CreateStore(b_.CreateAdd(j, c64(1)), at);
  b_.CreateBr(head);
  b_.SetInsertPoint(take);
  b_.CreateStore(index, result);
  b_.CreateBr(found);
  b_.SetInsertPoint(exit);
}

Value* Emitter::findEqual(int64_t n, Value* m, bool last, const std::function<Value*(Value*)>& f) {
  constexpr unsigned L = KernelSchedule::kScanLanes;
  const int64_t whole = n / L * L;
  llvm::AllocaInst* result = local(i64_, "found");
  b_.CreateStore(c64(n), result);
  llvm::BasicBlock* done = block("find.done");
  Value* mv = b_.CreateVectorSplat(L, m);
  // Bit l of the mask: f(base + l) == m (the L loads of consecutive values become one).
  auto bitsAt = [&](Value* base) {
    Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(f32_, L));
    for (unsigned l = 0; l < L; ++l) v = b_.CreateInsertElement(v, f(b_.CreateAdd(base, c64(l))), l);
    return b_.CreateBitCast(b_.CreateFCmpOEQ(v, mv), b_.getIntNTy(L));
  };
  auto step = [&](Value* j) {
    Value* base = last ? b_.CreateSub(c64(whole - L), b_.CreateMul(j, c64(L))) : b_.CreateMul(j, c64(L));
    Value* bits = bitsAt(base);
    Value* lane = last ? b_.CreateSub(c64(L - 1), b_.CreateZExt(b_.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz, bits, b_.getTrue()), i64_))
                       : b_.CreateZExt(b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, bits, b_.getTrue()), i64_);
    return std::pair{b_.CreateICmpNE(bits, llvm::ConstantInt::get(bits->getType(), 0)), b_.CreateAdd(base, lane)};
  };
  auto tail = [&](Value* j) {
    Value* i = last ? b_.CreateSub(c64(n - 1), j) : b_.CreateAdd(c64(whole), j);
    return std::pair{b_.CreateFCmpOEQ(f(i), m), i};
  };
  // Forwards the whole steps first; backwards the values past them first.
  if (last && n > whole) scanStage(n - whole, "find.tail", done, result, tail);
  if (whole > 0) scanStage(whole / L, "find.step", done, result, step);
  if (!last && n > whole) scanStage(n - whole, "find.tail", done, result, tail);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  return b_.CreateLoad(i64_, result, "found");
}

Value* Emitter::argmaxShort(int64_t n, bool last, const std::function<Value*(Value*)>& f) {
  static_assert(KernelSchedule::kShortRow <= kLanes, "a short row fits one vector");
  auto* vt = llvm::FixedVectorType::get(f32_, kLanes);
  Value* v = llvm::PoisonValue::get(vt);
  for (unsigned l = 0; l < kLanes; ++l) {
    v = b_.CreateInsertElement(v, static_cast<int64_t>(l) < n ? f(c64(l)) : llvm::ConstantFP::getInfinity(f32_, true), l);
  }
  llvm::Type* bitsT = b_.getIntNTy(kLanes);
  Value* nans = b_.CreateBitCast(b_.CreateFCmpUNO(v, v), bitsT);
  // The maximum (where a lane is NaN, `nans` decides instead).
  Value* top = b_.CreateVectorSplat(kLanes, laneMax(v));
  // The row's lanes only: with a maximum of -inf the lanes past the row match too.
  Value* eq = b_.CreateAnd(b_.CreateBitCast(b_.CreateFCmpOEQ(v, top), bitsT), llvm::ConstantInt::get(bitsT, (uint64_t{1} << n) - 1));
  Value* bits = b_.CreateSelect(b_.CreateICmpNE(nans, llvm::ConstantInt::get(bitsT, 0)), nans, eq);
  Value* lane = last ? b_.CreateSub(llvm::ConstantInt::get(bitsT, kLanes - 1), b_.CreateBinaryIntrinsic(llvm::Intrinsic::ctlz, bits, b_.getTrue()))
                     : b_.CreateBinaryIntrinsic(llvm::Intrinsic::cttz, bits, b_.getTrue());
  return b_.CreateZExt(lane, i64_, "best");
}

}  // namespace policyc::codegen::llvmemit
