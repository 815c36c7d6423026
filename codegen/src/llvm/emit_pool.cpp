// The LLVM emitter's pooling templates: a window per output (Form::Pool), max pools by output
// rows (RowPoolGeometry: column maxima, the window step on registers) and average pools by rows.
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

void Emitter::emitPool(const Kernel& k) {
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
  // KernelSchedule::windowInside: fixed window loops, no bounds checks.
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  const bool inside = ks.windowInside;
  // One output, at vars.
  auto one = [&](const std::vector<Value*>& vars) {
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
      if (inside) {
        forCount(kernel[d], "k" + std::to_string(d), [&](Value* kd) {
          xIdx.push_back(b_.CreateAdd(begin[d], b_.CreateMul(kd, c64(dil[d]))));
          spatial(d + 1);
          xIdx.pop_back();
        });
        return;
      }
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
      r = b_.CreateSelect(b_.CreateLoad(i1_, nan), llvm::ConstantFP::getNaN(f32_), b_.CreateLoad(f32_, acc), escape::printable(n.name()));
    } else {
      Value* cnt = inside ? c64(window) : b_.CreateLoad(i64_, count);
      Value* div = b_.CreateSIToFP(includePad ? windowSize : cnt, f32_);
      r = b_.CreateSelect(b_.CreateICmpEQ(cnt, c64(0)), llvm::ConstantFP::get(f32_, 0.0), b_.CreateFDiv(b_.CreateLoad(f32_, acc), div), escape::printable(n.name()));
    }
    tag(since, &n);
    emitBody(k.body, vars, convert(r, DType::F32, t));
  };
  if (!ks.vectorEpilogue) {
    // Inside, the outputs along the last axis are vectorised (strided loads); unrolled whole
    // first (a row of 10), they stayed scalar.
    if (inside && axis != static_cast<int>(k.domain.size()) - 1) rolledAxis_ = static_cast<int>(k.domain.size()) - 1;
    domainLoops(k.domain, axis, one);
    rolledAxis_ = -1;
    return;
  }
  // KernelSchedule::vectorEpilogue (evenColumnPool): as the C++ printer's pc::evenLanes, 8 outputs
  // at a time, each window tap's 8 inputs the even lanes of 16 loaded in the order kEvenLanes (an
  // in-lane shuffle), added in the scalar loop's order, put back in order once; the rest of the
  // row one by one.
  const int64_t OW = k.domain[3].value(), whole = OW / 8 * 8;
  llvm::Type* v16 = llvm::FixedVectorType::get(f32_, 16);
  domainLoops(k.domain, axis, [&](const std::vector<Value*>& outer) {
    forRange(c64(0), c64(whole / 8), "c8", [&](Value* c) {
      llvm::Instruction* since = mark();
      Value* i3 = b_.CreateMul(c, c64(8), "i3");
      Value* sum = llvm::Constant::getNullValue(llvm::FixedVectorType::get(f32_, 8));
      for (int64_t k0 = 0; k0 < kernel[0]; ++k0) {
        Value* row = b_.CreateAdd(b_.CreateMul(outer[2], c64(strides[0])), c64(k0));
        for (int64_t k1 = 0; k1 < kernel[1]; ++k1) {
          Value* at = elemPtr(X.id, {outer[0], outer[1], row, b_.CreateAdd(b_.CreateMul(i3, c64(2)), c64(k1))});
          llvm::Instruction* x = b_.CreateAlignedLoad(v16, at, llvm::Align(4), escape::printable(X.name));
          restrictAccess(x, X.id);
          sum = b_.CreateFAdd(sum, b_.CreateShuffleVector(x, kEvenLanes));
        }
      }
      Value* v = b_.CreateShuffleVector(sum, {0, 1, 4, 5, 2, 3, 6, 7});
      v = b_.CreateFDiv(v, b_.CreateVectorSplat(8, llvm::ConstantFP::get(f32_, static_cast<double>(window))), escape::printable(n.name()));
      tag(since, &n);
      emitBody(k.body, {outer[0], outer[1], outer[2], i3}, v, 8);
    }, false);  // already vectors
    forRange(c64(whole), c64(OW), "i3", [&](Value* i3) { one({outer[0], outer[1], outer[2], i3}); });
  }, {0, 1, 2}, std::vector<Value*>(4, nullptr));
}

void Emitter::emitMaxPoolRows(const Kernel& k) {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const RowPoolGeometry g = rowPoolGeometry(p_, k);
  const std::vector<int64_t>&kernel = g.kernel, &st = g.strides, &dil = g.dilations, &pads = g.pads;
  const int64_t C = g.C, OH = g.OH, OW = g.OW, H = g.H, W = g.W, padL = g.padL, chunks = g.chunks, colSize = g.colSize;
  const DType t = accType(k);
  // g.chunks: the column maxima in registers (a masked load fills the last chunk's columns past
  // the row with -inf).
  llvm::AllocaInst* col = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(colSize)), "col");
  llvm::AllocaInst* nanIn = local(llvm::ArrayType::get(i8_, static_cast<uint64_t>(colSize)), "nanIn");
  llvm::AllocaInst* out = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(8 * ((OW + 7) / 8))), "out");
  const bool vec = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].vectorEpilogue;
  // g.window: the window step on the registers too, and one NaN test for the whole unit, as the
  // C++ printer (the rows' values summed into nanAny, which a NaN keeps NaN): the rare unit that
  // holds a NaN reads its rows again for the flags per column (i32 lanes there; i8 lanes were
  // packed from the compares at every row).
  const bool inRegisters = !g.window.empty();
  llvm::Type* v8 = llvm::FixedVectorType::get(f32_, 8);
  llvm::Type* b8 = llvm::FixedVectorType::get(inRegisters ? i32_ : i8_, 8);
  std::vector<llvm::AllocaInst*> ms, ns;
  for (int64_t j = 0; j < chunks; ++j) ms.push_back(local(v8, "m" + std::to_string(j))), ns.push_back(local(b8, "n" + std::to_string(j)));
  llvm::AllocaInst* nanAny = inRegisters ? local(v8, "nanAny") : nullptr;
  Value* negInf8 = b_.CreateVectorSplat(8, llvm::ConstantFP::getInfinity(f32_, true));
  Value* negInf = llvm::ConstantFP::getInfinity(f32_, true);
  Value* noNan = llvm::Constant::getNullValue(b8);
  auto colAt = [&](Value* i) { return b_.CreateInBoundsGEP(f32_, col, i); };
  auto nanAt = [&](Value* i) { return b_.CreateInBoundsGEP(i8_, nanIn, i); };
  if (!inRegisters) {  // the window step through memory: padding never wins
    forCount(colSize, "c", [&](Value* c) {
      b_.CreateStore(negInf, colAt(c));
      b_.CreateStore(b_.getInt8(0), nanAt(c));
    });
  }
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* i0 = b_.CreateSDiv(u, c64(C * OH), "i0");
    Value* i1 = b_.CreateSRem(b_.CreateSDiv(u, c64(OH)), c64(C), "i1");
    Value* i2 = b_.CreateSRem(u, c64(OH), "i2");
    for (int64_t j = 0; j < chunks; ++j) {
      b_.CreateStore(negInf8, ms[static_cast<size_t>(j)]);
      if (!inRegisters) b_.CreateStore(noNan, ns[static_cast<size_t>(j)]);
    }
    if (inRegisters) b_.CreateStore(llvm::Constant::getNullValue(v8), nanAny);
    if (!chunks) {
      forCount(W, "iw", [&](Value* iw) {
        Value* at = b_.CreateAdd(iw, c64(padL));
        b_.CreateStore(negInf, colAt(at));
        b_.CreateStore(b_.getInt8(0), nanAt(at));
      });
    }
    // The window's rows: each chunk's maxima (max), its NaN flags (flags), or both.
    auto rows = [&](bool max, bool flags) {
      forCount(kernel[0], "kh", [&](Value* kh) {
        Value* ih = b_.CreateSub(b_.CreateAdd(b_.CreateMul(i2, c64(st[0])), b_.CreateMul(kh, c64(dil[0]))), c64(pads[0]));
        ifThen(b_.CreateAnd(b_.CreateICmpSGE(ih, c64(0)), b_.CreateICmpSLT(ih, c64(H))), "inside", [&] {
          Value* row = elemPtr(X.id, {i0, i1, ih, nullptr});
          std::vector<Value*> xs;  // the row's values, summed into nanAny
          for (int64_t j = 0; j < chunks; ++j) {
            const int64_t lanes = std::min<int64_t>(8, W - 8 * j);
            Value* at = b_.CreateInBoundsGEP(f32_, row, c64(8 * j));
            llvm::Instruction* x = nullptr;
            if (lanes == 8) {
              x = b_.CreateAlignedLoad(v8, at, llvm::Align(4), escape::printable(X.name));
            } else {
              x = b_.CreateMaskedLoad(v8, at, llvm::Align(4), laneMask(8, 0, lanes), negInf8, escape::printable(X.name));
            }
            restrictAccess(x, X.id);
            if (max) {
              Value* m = b_.CreateLoad(v8, ms[static_cast<size_t>(j)]);
              b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(m, x), m, x), ms[static_cast<size_t>(j)]);
            }
            if (inRegisters && max) {
              xs.push_back(x);
            } else if (flags) {
              llvm::AllocaInst* into = ns[static_cast<size_t>(j)];
              Value* nan = inRegisters ? b_.CreateSExt(isNan(x), b8) : b_.CreateZExt(isNan(x), b8);
              b_.CreateStore(b_.CreateOr(b_.CreateLoad(b8, into), nan), into);
            }
          }
          while (xs.size() > 1) {  // pairwise, as the C++ printer's tree
            std::vector<Value*> sums;
            for (size_t i = 0; i + 1 < xs.size(); i += 2) sums.push_back(b_.CreateFAdd(xs[i], xs[i + 1]));
            if (xs.size() % 2) sums.push_back(xs.back());
            xs = sums;
          }
          if (!xs.empty()) b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(v8, nanAny), xs[0]), nanAny);
          if (chunks) return;
          forCount(W, "iw", [&](Value* iw) {
            Value* at = b_.CreateAdd(iw, c64(padL));
            Value* v = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, iw), escape::printable(X.name));
            Value* m = b_.CreateLoad(f32_, colAt(at));
            b_.CreateStore(b_.CreateSelect(b_.CreateFCmpOGT(m, v), m, v), colAt(at));
            b_.CreateStore(b_.CreateOr(b_.CreateLoad(i8_, nanAt(at)), b_.CreateZExt(isNan(v), i8_)), nanAt(at));
          });
        });
      });
    };
    rows(true, true);
    if (inRegisters) {
      // The window step on the registers (g.window): per 8 outputs, each window column's maxima
      // shuffled out of them, the maxima taken in window order.
      auto lanes = [&](const ShuffledLanes& v, const std::vector<llvm::AllocaInst*>& regs, llvm::Type* type, Value* fill) -> Value* {
        auto reg = [&](int r) -> Value* { return b_.CreateLoad(type, regs[static_cast<size_t>(r)]); };
        if (v.steps.empty()) return reg(v.whole);
        Value* e = nullptr;
        for (const LaneShuffle& step : v.steps) {
          auto operand = [&](int r) { return r == LaneShuffle::kPrev ? e : r == LaneShuffle::kFill ? fill : reg(r); };
          e = b_.CreateShuffleVector(operand(step.a), operand(step.b), llvm::ArrayRef<int>(step.mask.data(), step.mask.size()));
        }
        return e;
      };
      Value* nan8 = b_.CreateVectorSplat(8, llvm::ConstantFP::getNaN(f32_));
      // Every 8 outputs' window step; with `flags`, NaN where a window column's flag is set.
      auto steps = [&](bool flags) {
        for (size_t o = 0; o < g.window.size(); ++o) {
          const std::vector<ShuffledLanes>& taps = g.window[o];
          llvm::Instruction* since = mark();
          Value* w = lanes(taps[0], ms, v8, negInf8);
          Value* nw = flags ? lanes(taps[0], ns, b8, noNan) : nullptr;
          for (size_t kw = 1; kw < taps.size(); ++kw) {
            Value* x = lanes(taps[kw], ms, v8, negInf8);
            w = b_.CreateSelect(b_.CreateFCmpOGT(w, x), w, x);
            if (flags) nw = b_.CreateOr(nw, lanes(taps[kw], ns, b8, noNan));
          }
          Value* r = flags ? b_.CreateSelect(b_.CreateICmpNE(nw, noNan), nan8, w, escape::printable(n.name())) : w;
          if (g.evenOrder) r = b_.CreateShuffleVector(r, kEvenOrder);  // RowPoolGeometry::evenOrder
          tag(since, &n);
          if (vec) {
            emitBody(k.body, {i0, i1, i2, c64(8 * static_cast<int64_t>(o))}, r, 8);  // KernelSchedule::vectorEpilogue
          } else {
            b_.CreateAlignedStore(r, b_.CreateInBoundsGEP(f32_, out, c64(8 * static_cast<int64_t>(o))), llvm::Align(4));
          }
        }
      };
      ifElse(b_.CreateNot(b_.CreateOrReduce(isNan(b_.CreateLoad(v8, nanAny)))), "nan", [&] { steps(false); }, [&] {
        // a NaN in the unit's rows: the flags per column
        for (llvm::AllocaInst* flag : ns) b_.CreateStore(noNan, flag);
        rows(false, true);
        steps(true);
      });
      if (vec) return;
      forCount(OW, "i3", [&](Value* i3) {
        Value* r = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, out, i3), escape::printable(n.name()));
        emitBody(k.body, {i0, i1, i2, i3}, convert(r, DType::F32, t));
      });
      return;
    }
    for (int64_t j = 0; j < chunks; ++j) {
      b_.CreateAlignedStore(b_.CreateLoad(v8, ms[static_cast<size_t>(j)]), colAt(c64(padL + 8 * j)), llvm::Align(4));
      b_.CreateAlignedStore(b_.CreateLoad(b8, ns[static_cast<size_t>(j)]), nanAt(c64(padL + 8 * j)), llvm::Align(1));
    }
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
      Value* r = b_.CreateSelect(b_.CreateICmpNE(nan, b_.getInt8(0)), llvm::ConstantFP::getNaN(f32_), m, escape::printable(n.name()));
      tag(since, &n);
      emitBody(k.body, {i0, i1, i2, i3}, convert(r, DType::F32, t));
    });
  });
}

void Emitter::emitAvgPoolRows(const Kernel& k) {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const RowPoolGeometry g = rowPoolGeometry(p_, k);
  const int64_t C = g.C, OH = g.OH, OW = g.OW, s1 = g.strides[1], padL = g.padL;
  const DType t = accType(k);
  const RowTaps& taps = g.taps;
  llvm::AllocaInst* sum = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(taps.chunks ? taps.chunks * 16 : OW)), "sum");
  llvm::Type* v16 = llvm::FixedVectorType::get(f32_, 16);
  std::vector<llvm::AllocaInst*> regs;
  for (int64_t j = 0; j < taps.chunks; ++j) regs.push_back(local(v16, "sum" + std::to_string(j)));
  Value* one = b_.CreateVectorSplat(16, llvm::ConstantFP::get(f32_, 1.0));
  auto sumAt = [&](Value* i) { return b_.CreateInBoundsGEP(f32_, sum, i); };
  auto smin = [&](Value* a, Value* b) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, a, b); };
  auto smax = [&](Value* a, Value* b) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, a, b); };
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* i0 = b_.CreateSDiv(u, c64(C * OH), "i0");
    Value* i1 = b_.CreateSRem(b_.CreateSDiv(u, c64(OH)), c64(C), "i1");
    Value* i2 = b_.CreateSRem(u, c64(OH), "i2");
    if (taps.chunks) {
      for (llvm::AllocaInst* reg : regs) b_.CreateStore(llvm::Constant::getNullValue(v16), reg);
    } else {
      b_.CreateMemSet(sum, b_.getInt8(0), c64(OW * 4), llvm::Align(4));
    }
    // As onnxruntime: the window clipped to the padded input, [b0, e0) rows; [r0, r1) inside it.
    Value* b0 = b_.CreateSub(b_.CreateMul(i2, c64(g.strides[0])), c64(g.pads[0]));
    Value* e0 = smin(b_.CreateAdd(b0, c64(g.kernel[0])), c64(g.rowsEnd));
    Value* r0 = smax(b0, c64(0));
    Value* r1 = smin(e0, c64(g.H));
    forRange(r0, r1, "ih", [&](Value* ih) {
      Value* row = elemPtr(X.id, {i0, i1, ih, nullptr});
      for (size_t kw = 0; kw < taps.lo.size(); ++kw) {
        if (taps.lo[kw] >= taps.hi[kw]) continue;  // this window column never lies inside the input
        const int64_t off = static_cast<int64_t>(kw) - padL;
        if (taps.chunks) {
          for (const RowTaps::Lanes& l : taps.lanesOf(kw)) {
            addTap(regs[static_cast<size_t>(l.chunk)], b_.CreateGEP(f32_, row, c64(16 * l.chunk + off)), l, one, X.id, taps.finiteWeights);
          }
          continue;
        }
        forRange(c64(taps.lo[kw]), c64(taps.hi[kw]), "i3", [&](Value* i3) {
          llvm::LoadInst* x = b_.CreateLoad(f32_, b_.CreateGEP(f32_, row, b_.CreateAdd(b_.CreateMul(i3, c64(s1)), c64(off))),
                                            escape::printable(X.name));
          restrictAccess(x, X.id);
          b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f32_, sumAt(i3)), x), sumAt(i3));
        });
      }
    });
    for (int64_t j = 0; j < taps.chunks; ++j) {
      b_.CreateAlignedStore(b_.CreateLoad(v16, regs[static_cast<size_t>(j)]), sumAt(c64(16 * j)), llvm::Align(4));
    }
    forCount(OW, "i3", [&](Value* i3) {
      llvm::Instruction* since = mark();
      Value* b1 = b_.CreateSub(b_.CreateMul(i3, c64(s1)), c64(padL));
      Value* e1 = smin(b_.CreateAdd(b1, c64(g.kernel[1])), c64(g.colsEnd));
      Value* cols = b_.CreateSub(smin(e1, c64(g.W)), smax(b1, c64(0)));
      Value* rows = b_.CreateSub(r1, r0);
      Value* count = b_.CreateSelect(b_.CreateAnd(b_.CreateICmpSGT(rows, c64(0)), b_.CreateICmpSGT(cols, c64(0))), b_.CreateMul(rows, cols), c64(0));
      Value* div = b_.CreateSIToFP(g.includePad ? b_.CreateMul(b_.CreateSub(e0, b0), b_.CreateSub(e1, b1)) : count, f32_);
      Value* r = b_.CreateSelect(b_.CreateICmpEQ(count, c64(0)), llvm::ConstantFP::get(f32_, 0.0),
                                 b_.CreateFDiv(b_.CreateLoad(f32_, sumAt(i3)), div), escape::printable(n.name()));
      tag(since, &n);
      emitBody(k.body, {i0, i1, i2, i3}, convert(r, DType::F32, t));
    });
  });
}

}  // namespace policyc::codegen::llvmemit
