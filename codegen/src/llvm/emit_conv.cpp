// The LLVM emitter's convolution templates: the implicit GEMM over packed panels (gemm4x32,
// gemm4x16), conv_rows (ConvRowTiles), and the direct convs by rows or by output element.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include "emitter.h"

namespace policyc::codegen::llvmemit {

std::vector<Value*> Emitter::transpose8x8(const std::vector<Value*>& x) {
  std::vector<Value*> a(8), b(8), c(8);
  for (size_t i = 0; i < 8; i += 2) {  // unpack pairs of rows (vunpcklps, vunpckhps)
    a[i] = b_.CreateShuffleVector(x[i], x[i + 1], {0, 8, 1, 9, 4, 12, 5, 13});
    a[i + 1] = b_.CreateShuffleVector(x[i], x[i + 1], {2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (size_t i = 0; i < 8; i += 4) {  // pairs of pairs (vshufps)
    b[i] = b_.CreateShuffleVector(a[i], a[i + 2], {0, 1, 8, 9, 4, 5, 12, 13});
    b[i + 1] = b_.CreateShuffleVector(a[i], a[i + 2], {2, 3, 10, 11, 6, 7, 14, 15});
    b[i + 2] = b_.CreateShuffleVector(a[i + 1], a[i + 3], {0, 1, 8, 9, 4, 5, 12, 13});
    b[i + 3] = b_.CreateShuffleVector(a[i + 1], a[i + 3], {2, 3, 10, 11, 6, 7, 14, 15});
  }
  for (size_t q = 0; q < 4; ++q) {  // halves (vperm2f128)
    c[q] = b_.CreateShuffleVector(b[q], b[q + 4], {0, 1, 2, 3, 8, 9, 10, 11});
    c[q + 4] = b_.CreateShuffleVector(b[q], b[q + 4], {4, 5, 6, 7, 12, 13, 14, 15});
  }
  return c;
}

std::vector<Value*> Emitter::transpose8x16(const std::vector<Value*>& x) {
  std::vector<Value*> a(8), b(8), c(16);
  for (size_t i = 0; i < 8; i += 2) {  // unpack pairs of rows (vunpcklps, vunpckhps)
    a[i] = b_.CreateShuffleVector(x[i], x[i + 1], {0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29});
    a[i + 1] = b_.CreateShuffleVector(x[i], x[i + 1], {2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31});
  }
  // b[4g + j], 128-bit lane L: rows 4g..4g+3 of column 4L + j (vunpcklpd, vunpckhpd)
  for (size_t g = 0; g < 8; g += 4) {
    b[g] = b_.CreateShuffleVector(a[g], a[g + 2], {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29});
    b[g + 1] = b_.CreateShuffleVector(a[g], a[g + 2], {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31});
    b[g + 2] = b_.CreateShuffleVector(a[g + 1], a[g + 3], {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29});
    b[g + 3] = b_.CreateShuffleVector(a[g + 1], a[g + 3], {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31});
  }
  // The two row groups' lanes L side by side (vpermt2ps): columns j and 4 + j, 8 + j and 12 + j.
  const std::vector<int> low = {0, 1, 2, 3, 4, 5, 6, 7}, high = {8, 9, 10, 11, 12, 13, 14, 15};
  for (size_t j = 0; j < 4; ++j) {
    Value* lo = b_.CreateShuffleVector(b[j], b[j + 4], {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23});
    Value* hi = b_.CreateShuffleVector(b[j], b[j + 4], {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31});
    c[j] = b_.CreateShuffleVector(lo, low);
    c[4 + j] = b_.CreateShuffleVector(lo, high);
    c[8 + j] = b_.CreateShuffleVector(hi, low);
    c[12 + j] = b_.CreateShuffleVector(hi, high);
  }
  return c;
}

void Emitter::emitPackedConv(const Kernel& k) {
  const size_t index = static_cast<size_t>(&k - p_.kernels.data());
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
  const int64_t C = X.type.shape[1].value(), H = X.type.shape[2].value(), Wd = X.type.shape[3].value();
  const int64_t KH = W.type.shape[2].value(), KW = W.type.shape[3].value();
  const int64_t M = packedN(p_, k), K = packedK(p_, k), OW = k.domain[3].value(), P = k.domain[2].value() * OW;
  // Tiles of R output positions (4, or 6 for gemm6x16) by one panel group.
  const int64_t R = impl_ ? rowsPerTile(*impl_) : 4;
  const int64_t panels = (M + kPanel - 1) / kPanel, tiles = (P + R - 1) / R;
  Value* bp = weightsAt(s_.kernels[index].packedBias, "bp");
  if (s_.kernels[index].widenedTiles) callWidenAtLoad();  // its panels widened once (KernelSchedule::widenedTiles)
  llvm::AllocaInst* patch = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(R * K)), "patch");
  const DType t = accType(k);
  // Windows inside the input are read in place through a table of offsets (c, kh, kw order);
  // gathered patches (windows over the padding) through the identity table.
  // With a padded image (KernelSchedule::paddedImage) every whole tile reads the padded copy.
  const std::optional<KernelSchedule::PaddedImage>& padded = s_.kernels[index].paddedImage;
  std::vector<int32_t> window, identity;
  const std::vector<int64_t> xs = padded ? std::vector<int64_t>{0, padded->H * padded->W, padded->W, 1} : X.strides;
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
  // The padded image, per image a chunk of work meets (`copied`: the image it holds, -1 before the
  // first): the rows its tiles of that image read, their padding zeroed, as the C++ printer's.
  llvm::AllocaInst* paddedBuf = padded ? local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(padded->floats())), "padded") : nullptr;
  llvm::AllocaInst* copied = padded ? local(i64_, "copied") : nullptr;
  if (padded) b_.CreateStore(c64(-1), copied);
  auto padImage = [&](Value* i0) {
    Value* first = b_.CreateMul(i0, c64(tiles));
    Value* u0 = b_.CreateSub(b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, lo_, first), first);
    Value* u1 = b_.CreateSub(b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, hi_, b_.CreateAdd(first, c64(tiles))), first);
    Value* r0 = b_.CreateMul(b_.CreateSDiv(b_.CreateMul(u0, c64(R)), c64(OW)), c64(st[0]));
    Value* last = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateSub(b_.CreateMul(u1, c64(R)), c64(1)), c64(P - 1));
    Value* r1 = b_.CreateAdd(b_.CreateMul(b_.CreateSDiv(last, c64(OW)), c64(st[0])), c64((KH - 1) * dil[0] + 1));
    forCount(C, "c", [&](Value* c) {
      forRange(r0, r1, "r", [&](Value* r) {
        Value* row = b_.CreateInBoundsGEP(f32_, paddedBuf, b_.CreateMul(b_.CreateAdd(b_.CreateMul(c, c64(padded->H)), r), c64(padded->W)));
        copyPaddedRow(X, i0, c, b_.CreateSub(r, c64(padded->top)), row, padded->left, padded->W);
      });
    });
    b_.CreateStore(i0, copied);
  };
  auto origin = [&](Value* i0, Value* pos) {
    if (padded) {
      Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateSDiv(pos, c64(OW)), c64(st[0] * padded->W)),
                               b_.CreateMul(b_.CreateSRem(pos, c64(OW)), c64(st[1])));
      return b_.CreateInBoundsGEP(f32_, paddedBuf, at);
    }
    Value* ih = b_.CreateSub(b_.CreateMul(b_.CreateSDiv(pos, c64(OW)), c64(st[0])), c64(pads[0]));
    Value* iw = b_.CreateSub(b_.CreateMul(b_.CreateSRem(pos, c64(OW)), c64(st[1])), c64(pads[1]));
    return elemPtr(X.id, {i0, nullptr, ih, iw});
  };
  // patch row `slot` = the window of output position `pos` of image i0 (c, kh, kw order): where
  // the window lies inside the input, copied without a test a value (LLVM unrolls and vectorises
  // it: with a store of zero and a branch per value, sb3_multi_input's 576-value patches of a
  // 3 x 3 conv on 3 x 3 images, one position each, took 1.3x the C++ build's time); else each
  // value zero or read where it lies inside.
  auto gather = [&](Value* i0, Value* pos, int64_t slot) {
    Value* oh = b_.CreateSDiv(pos, c64(OW));
    Value* ow = b_.CreateSRem(pos, c64(OW));
    Value* dst = b_.CreateConstInBoundsGEP1_64(f32_, patch, static_cast<uint64_t>(slot * K));
    auto windowLoops = [&](bool checked) {
      forCount(C, "c", [&](Value* c) {
        forCount(KH, "kh", [&](Value* kh) {
          Value* ih = b_.CreateSub(b_.CreateAdd(b_.CreateMul(oh, c64(st[0])), b_.CreateMul(kh, c64(dil[0]))), c64(pads[0]));
          Value* okH = b_.CreateAnd(b_.CreateICmpSGE(ih, c64(0)), b_.CreateICmpSLT(ih, c64(H)));
          forCount(KW, "kw", [&](Value* kw) {
            Value* iw = b_.CreateSub(b_.CreateAdd(b_.CreateMul(ow, c64(st[1])), b_.CreateMul(kw, c64(dil[1]))), c64(pads[1]));
            Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(c, c64(KH)), kh), c64(KW)), kw);
            Value* slotPtr = b_.CreateInBoundsGEP(f32_, dst, at);
            if (!checked) {
              b_.CreateStore(loadElem(X.id, {i0, c, ih, iw}, X.name), slotPtr);
              return;
            }
            Value* ok = b_.CreateAnd(okH, b_.CreateAnd(b_.CreateICmpSGE(iw, c64(0)), b_.CreateICmpSLT(iw, c64(Wd))));
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
    ifElse(inside(pos), "window.inside", [&] { windowLoops(false); }, [&] { windowLoops(true); });
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
  // KernelSchedule::tileEpilogue: the tile's R accumulators of a panel (16 channels each)
  // transposed in three rounds of shuffles (transpose8x16, as pc::transposeTile's with AVX-512),
  // a channel's R positions then one vector through the epilogue.
  llvm::FixedVectorType* v8 = llvm::FixedVectorType::get(f32_, 8);
  llvm::AllocaInst* columns = s_.kernels[index].tileEpilogue ? local(llvm::ArrayType::get(f32_, kLanes * 8), "columns") : nullptr;
  // The tile's first `lanes` positions are stored.
  auto finishTile = [&](Value* i0, Value* pos, Value* j, const std::vector<Value*>& acc, int64_t lanes) {
    std::vector<Value*> x;
    for (size_t tq = 0; tq < 8; ++tq) x.push_back(tq < acc.size() ? acc[tq] : llvm::Constant::getNullValue(acc[0]->getType()));
    const std::vector<Value*> c = transpose8x16(x);
    for (size_t q = 0; q < c.size(); ++q) {
      b_.CreateAlignedStore(c[q], b_.CreateConstInBoundsGEP1_64(f32_, columns, static_cast<uint64_t>(q * 8)), llvm::Align(32));
    }
    Value* n0 = b_.CreateMul(j, c64(kPanel));
    Value* end = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(n0, c64(kLanes)), c64(M));
    Value* oh = b_.CreateSDiv(pos, c64(OW));
    Value* ow = b_.CreateSRem(pos, c64(OW));
    forRange(n0, end, "n", [&](Value* nn) {
      Value* col = b_.CreateInBoundsGEP(f32_, columns, b_.CreateMul(b_.CreateSub(nn, n0), c64(8)));
      emitBody(k.body, {i0, nn, oh, ow}, b_.CreateAlignedLoad(v8, col, llvm::Align(32), "acc"), 8, static_cast<unsigned>(lanes));
    });
  };
  // tile(j, group) over every panel: one at a time, or pairs and an odd last one alone.
  auto byPanelGroups = [&](const std::function<void(Value*, int)>& tile) {
    if (panelGroup() == 1) {
      forRange(c64(0), c64(panels), "j", [&](Value* j) { tile(j, 1); });
      return;
    }
    if (panels >= 2) forRange(c64(0), c64(panels / 2), "jp", [&](Value* jp) { tile(b_.CreateMul(jp, c64(2)), 2); });
    if (panels % 2) tile(c64(panels - 1), 1);
  };
  // A tile of `rowsN` positions from pos, the first `count` of them real (the others repeat the
  // last): its windows read in place (from the padded image, or the input where every one lies
  // inside it), else gathered into patches; its epilogue a channel's positions at a time where
  // the schedule says so (tileEpilogue), else value by value.
  auto runTile = [&](Value* i0, Value* pos, int64_t rowsN, int64_t count) {
    Value* direct = b_.getTrue();  // with a padded image, every window is inside it
    if (padded) {
      ifThen(b_.CreateICmpNE(i0, b_.CreateLoad(i64_, copied)), "pad", [&] { padImage(i0); });
    } else {
      for (int64_t tq = 0; tq < count; ++tq) direct = b_.CreateAnd(direct, inside(b_.CreateAdd(pos, c64(tq))));
      direct->setName("direct");
      ifThen(b_.CreateNot(direct), "gather", [&] {
        for (int64_t tq = 0; tq < count; ++tq) gather(i0, b_.CreateAdd(pos, c64(tq)), tq);
      });
    }
    std::vector<Value*> rows;
    for (int64_t tq = 0; tq < rowsN; ++tq) {
      const int64_t real = std::min(tq, count - 1);
      Value* row = b_.CreateConstInBoundsGEP1_64(f32_, patch, static_cast<uint64_t>(real * K));
      rows.push_back(b_.CreateSelect(direct, origin(i0, b_.CreateAdd(pos, c64(real))), row));
    }
    Value* offsets = b_.CreateSelect(direct, windowTable, identityTable, "offsets");
    auto tile = [&](Value* j, int per) {
      const PanelRef w = panelAt(index, j, "w");
      Value* bias = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(j, c64(kPanel)));
      auto acc = gemmTile(rows, per, K, w, bias, &n, offsets, s_.kernels[index].tapGroup);
      for (int p = 0; p < per; ++p) {
        if (columns) {
          std::vector<Value*> rowsOfPanel;
          for (int64_t tq = 0; tq < rowsN; ++tq) rowsOfPanel.push_back(acc[static_cast<size_t>(tq)][static_cast<size_t>(p)]);
          finishTile(i0, pos, b_.CreateAdd(j, c64(p)), rowsOfPanel, count);
          continue;
        }
        for (int64_t tq = 0; tq < count; ++tq) {
          finish(i0, b_.CreateAdd(pos, c64(tq)), b_.CreateAdd(j, c64(p)), acc[static_cast<size_t>(tq)][static_cast<size_t>(p)]);
        }
      }
    };
    byPanelGroups(tile);
  };
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* i0 = b_.CreateSDiv(u, c64(tiles), "i0");
    Value* pos = b_.CreateMul(b_.CreateSRem(u, c64(tiles)), c64(R), "pos");
    ifElse(
        b_.CreateICmpSLE(b_.CreateAdd(pos, c64(R)), c64(P)), "tile", [&] { runTile(i0, pos, R, R); },
        [&] {
          // The last tile's positions (P % R): as one tile where there are enough
          // (convTailTile), the rest one by one (as the C++ backend's).
          const int64_t tailRows = convTailTile(P, R), covered = convTailCovered(P, R);
          if (tailRows) runTile(i0, pos, tailRows, covered);
          forRange(covered ? b_.CreateAdd(pos, c64(covered)) : pos, c64(P), "t0", [&](Value* t0) {
            gather(i0, t0, 0);
            forCount(panels, "j", [&](Value* j) {
              const PanelRef w = panelAt(index, j, "w");
              Value* bias = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(j, c64(kPanel)));
              auto acc = gemmTile({b_.CreateConstInBoundsGEP1_64(f32_, patch, 0)}, 1, K, w, bias, &n);
              finish(i0, t0, j, acc[0][0]);
            });
          });
        });
  });
}

void Emitter::copyPaddedRow(const Buffer& X, Value* i0, Value* c, Value* ih, Value* row, int64_t left, int64_t width) {
  const int64_t H = X.type.shape[2].value(), W = X.type.shape[3].value();
  llvm::Constant* zero8 = llvm::ConstantInt::get(llvm::Type::getInt8Ty(ctx_), 0);
  Value* inRow = b_.CreateAnd(b_.CreateICmpSGE(ih, c64(0)), b_.CreateICmpSLT(ih, c64(H)));
  ifElse(
      inRow, "inside",
      [&] {
        if (left > 0) b_.CreateMemSet(row, zero8, static_cast<uint64_t>(left * 4), llvm::MaybeAlign(4));
        forCount(W, "iw", [&](Value* iw) {
          b_.CreateStore(loadElem(X.id, {i0, c, ih, iw}, X.name), b_.CreateInBoundsGEP(f32_, row, b_.CreateAdd(iw, c64(left))));
        });
        if (width > left + W) {
          b_.CreateMemSet(b_.CreateConstInBoundsGEP1_64(f32_, row, static_cast<uint64_t>(left + W)), zero8,
                          static_cast<uint64_t>((width - left - W) * 4), llvm::MaybeAlign(4));
        }
      },
      [&] { b_.CreateMemSet(row, zero8, static_cast<uint64_t>(width * 4), llvm::MaybeAlign(4)); });
}

void Emitter::addTap(llvm::AllocaInst* reg, Value* at, const RowTaps::Lanes& l, Value* wv, int id, bool finiteWeight) {
  llvm::Type* v16 = reg->getAllocatedType();
  Value* acc = b_.CreateLoad(v16, reg);
  Value* r = nullptr;
  llvm::Instruction* x = nullptr;
  if (l.first == 0 && l.last == 16) {
    x = b_.CreateAlignedLoad(v16, at, llvm::Align(4));
    r = fma(x, wv, acc);
  } else {
    Value* mask = laneMask(16, l.first, l.last);
    if (finiteWeight) {
      // Lanes past the row read copysign(0, -w): their products are -0 (RowTaps::finiteWeights).
      Value* zero = b_.CreateCopySign(llvm::Constant::getNullValue(v16), b_.CreateFNeg(wv));
      x = b_.CreateMaskedLoad(v16, at, llvm::Align(4), mask, zero);
      r = fma(x, wv, acc);
    } else {
      x = b_.CreateMaskedLoad(v16, at, llvm::Align(4), mask, llvm::PoisonValue::get(v16));
      r = b_.CreateSelect(mask, fma(x, wv, acc), acc);
    }
  }
  restrictAccess(x, id);
  b_.CreateStore(r, reg);
}

void Emitter::emitConvRows(const Kernel& k) {
  const size_t index = static_cast<size_t>(&k - p_.kernels.data());
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  const ConvRowTiles& t = *s_.kernels[index].convRows;
  const int64_t C = t.C, H = t.H, KH = t.KH, M = t.M, OH = t.OH, OW = t.OW;
  const bool bias = t.bias;
  const bool vec = s_.kernels[index].vectorEpilogue;
  const DType accT = accType(k);
  llvm::Type* v16 = llvm::FixedVectorType::get(f32_, 16);
  Value* bp = bias ? weightsAt(s_.kernels[index].packedBias, "bp") : nullptr;
  // A block of `cb` channels from m0 (the full ones, then a narrower last one), as the C++ printer:
  // a pass over the input adds into the accumulators of chunks j0 .. j0 + pc - 1 (acc[o * pc + jj]).
  auto block = [&](Value* i0, Value* m0, Value* oh, int64_t cb) {
    for (int64_t j0 = 0; j0 < t.taps.chunks; j0 += t.passChunks) {
      const int64_t pc = std::min(t.passChunks, t.taps.chunks - j0);
      std::vector<llvm::AllocaInst*> acc;
      for (int64_t o = 0; o < cb; ++o) {
        for (int64_t jj = 0; jj < pc; ++jj) {
          acc.push_back(local(v16, fmt::format("a{}_{}", o, jj)));
          b_.CreateStore(llvm::Constant::getNullValue(v16), acc.back());
        }
      }
      forCount(C, "c", [&](Value* c) {
        forCount(KH, "k0", [&](Value* k0) {
          Value* p0 = b_.CreateSub(b_.CreateAdd(b_.CreateMul(oh, c64(t.strideH)), b_.CreateMul(k0, c64(t.dilationH))), c64(t.padTop));
          Value* in0 = b_.CreateAnd(b_.CreateICmpSGE(p0, c64(0)), b_.CreateICmpSLT(p0, c64(H)), "in0");
          Value* p1 = nullptr;
          Value* in1 = nullptr;
          Value* inside = in0;
          if (t.rows == 2) {
            // The second output row's input row (pc::loadRows2): inside the input and the output.
            p1 = b_.CreateAdd(p0, c64(t.strideH));
            in1 = b_.CreateAnd(b_.CreateICmpSLT(b_.CreateAdd(oh, c64(1)), c64(OH)),
                               b_.CreateAnd(b_.CreateICmpSGE(p1, c64(0)), b_.CreateICmpSLT(p1, c64(H))), "in1");
            inside = b_.CreateOr(in0, in1);
          }
          // The taps of this window row; `both`: a pair whose two input rows lie inside.
          auto taps = [&](bool both) {
            for (size_t k1 = 0; k1 < t.taps.lo.size(); ++k1) {
              const int64_t off = t.taps.offset(k1);
              for (const RowTaps::Lanes& l : t.taps.lanesOf(k1)) {
                if (l.chunk < j0 || l.chunk >= j0 + pc) continue;
                const int64_t j = l.chunk;
                Value* x = nullptr;
                if (t.rows == 2) {
                  // Lanes 8.. from the second row (its lane 8's column at lane 0's - 8), each half
                  // by a masked load with a constant mask, joined by a shuffle. Where a row lies
                  // outside, its half is loaded from a row clamped into the input and zeroed: a
                  // mask computed at run time made LLVM scalarise the loads (2 GFLOP/s), and one
                  // masked load taking the other as its pass-through read the first row a float
                  // early. Both rows inside (the common case) need neither.
                  Value* zero = llvm::Constant::getNullValue(v16);
                  auto half = [&](Value* p, Value* in, int64_t base, int64_t col) {
                    Value* row = both ? p : b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, p, c64(H - 1)), c64(0));
                    Value* v = b_.CreateMaskedLoad(v16, elemPtr(X.id, {i0, c, row, c64(col)}), llvm::Align(4), laneMask(16, base + l.first, base + l.last), zero);
                    return both ? v : b_.CreateSelect(in, v, zero);
                  };
                  Value* x0 = half(p0, in0, 0, 16 * j + off);
                  Value* x1 = half(p1, in1, 8, off - 8);
                  x = b_.CreateShuffleVector(x0, x1, {0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31}, "x");
                } else {
                  // lane 0's column: may lie outside the row; the lanes past it read 0 (pc::loadChunk)
                  Value* at = elemPtr(X.id, {i0, c, p0, c64(16 * j + off)});
                  x = l.first == 0 && l.last == 16
                          ? static_cast<Value*>(b_.CreateAlignedLoad(v16, at, llvm::Align(4), "x"))
                          : b_.CreateMaskedLoad(v16, at, llvm::Align(4), laneMask(16, l.first, l.last), llvm::Constant::getNullValue(v16), "x");
                }
                for (int64_t o = 0; o < cb; ++o) {
                  Value* w = loadElem(W.id, {b_.CreateAdd(m0, c64(o)), c, k0, c64(static_cast<int64_t>(k1))}, W.name);
                  llvm::AllocaInst* a = acc[static_cast<size_t>(o * pc + j - j0)];
                  b_.CreateStore(fma(x, b_.CreateVectorSplat(16, w), b_.CreateLoad(v16, a)), a);
                }
              }
            }
          };
          if (t.rows == 2) {
            ifElse(b_.CreateAnd(in0, in1), "both", [&] { taps(true); }, [&] { ifThen(inside, "inside", [&] { taps(false); }); });
          } else {
            ifThen(inside, "inside", [&] { taps(false); });
          }
        });
      });
      // The epilogue along each chunk's columns, a channel at a time.
      for (int64_t j = j0; j < j0 + pc; ++j) {
        const int64_t cols = std::min<int64_t>(16, OW - 16 * j);
        for (int64_t o = 0; o < cb; ++o) {
          Value* m = b_.CreateAdd(m0, c64(o));
          Value* r = b_.CreateLoad(v16, acc[static_cast<size_t>(o * pc + j - j0)]);
          Value* bv = bias ? b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, bp, m), "bias") : nullptr;
          if (vec) {
            if (bv) r = b_.CreateFAdd(r, b_.CreateVectorSplat(16, bv), nodeLabel(&n));
            emitBody(k.body, {i0, m, oh, c64(16 * j)}, r, 16);
            continue;
          }
          llvm::AllocaInst* row = local(llvm::ArrayType::get(f32_, 16), "row");
          b_.CreateAlignedStore(r, row, llvm::Align(4));
          // A row's columns from lane `from` (the second of a pair from lane 8).
          auto finishRow = [&](Value* r2, int64_t from, int64_t count, int64_t col0) {
            forCount(count, "i3", [&](Value* i3) {
              Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, b_.CreateAdd(i3, c64(from))), "acc");
              if (bv) a = b_.CreateFAdd(a, bv, nodeLabel(&n));
              emitBody(k.body, {i0, m, r2, b_.CreateAdd(i3, c64(col0))}, convert(a, DType::F32, accT));
            });
          };
          if (t.rows == 2) {
            finishRow(oh, 0, OW, 0);
            Value* oh1 = b_.CreateAdd(oh, c64(1));
            ifThen(b_.CreateICmpSLT(oh1, c64(OH)), "second", [&] { finishRow(oh1, 8, OW, 0); });
          } else {
            finishRow(oh, 0, cols, 16 * j);
          }
        }
      }
    }
  };
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* i0 = b_.CreateSDiv(u, c64(t.blocks * t.rowUnits), "i0");
    Value* m0 = b_.CreateMul(b_.CreateSDiv(b_.CreateSRem(u, c64(t.blocks * t.rowUnits)), c64(t.rowUnits)), c64(t.channels), "m0");
    Value* oh = b_.CreateMul(b_.CreateSRem(u, c64(t.rowUnits)), c64(t.rows), "oh");
    const int64_t full = M / t.channels, last = M % t.channels;
    if (last == 0) {
      block(i0, m0, oh, t.channels);
    } else {
      ifElse(
          b_.CreateICmpSLT(m0, c64(full * t.channels)), "full", [&] { block(i0, m0, oh, t.channels); },
          [&] { block(i0, m0, oh, last); });
    }
  });
}

void Emitter::emitConv(const Kernel& k) {
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
  if (const std::optional<RowTaps> taps = convRowTaps(p_, k, *split_)) {
    // An output row at a time (schedule.h, RowTaps): per tap, one loop over the columns it
    // reaches, which the loop vectorizer takes; then the epilogue along the row.
    const int64_t OW = k.domain[3].value(), H = X.type.shape[2].value();
    std::vector<Value*> vars(4, nullptr);
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& rv) {
      vars = rv;
      // taps->chunks: the row as chunks of 16 columns (allocas SROA keeps in registers), each
      // tap added on the lanes it reaches by a masked load and FMA; else the row in memory.
      const int64_t chunks = taps->chunks;
      llvm::Type* v16 = llvm::FixedVectorType::get(f32_, 16);
      std::vector<llvm::AllocaInst*> regs;
      for (int64_t j = 0; j < chunks; ++j) {
        regs.push_back(local(v16, "row" + std::to_string(j)));
        b_.CreateStore(llvm::Constant::getNullValue(v16), regs.back());
      }
      llvm::AllocaInst* row = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(chunks ? chunks * 16 : OW)), "row");
      if (!chunks) b_.CreateMemSet(row, b_.getInt8(0), c64(OW * 4), llvm::Align(4));
      Value* g = b_.CreateSDiv(vars[1], c64(gm));
      forCount(gc, "c", [&](Value* c) {
        Value* ch = b_.CreateAdd(b_.CreateMul(g, c64(gc)), c);
        forCount(W.type.shape[2].value(), "k0", [&](Value* k0) {
          Value* p0 = b_.CreateSub(b_.CreateAdd(b_.CreateMul(vars[2], c64(strides[0])), b_.CreateMul(k0, c64(dil[0]))), c64(pads[0]));
          ifThen(b_.CreateAnd(b_.CreateICmpSGE(p0, c64(0)), b_.CreateICmpSLT(p0, c64(H))), "inside", [&] {
            for (size_t k1 = 0; k1 < taps->lo.size(); ++k1) {
              if (taps->lo[k1] >= taps->hi[k1]) continue;  // this window column never lies inside the input
              Value* w = convert(loadElem(W.id, {vars[1], c, k0, c64(static_cast<int64_t>(k1))}, W.name), W.type.dtype, DType::F32);
              const int64_t off = static_cast<int64_t>(k1) * dil[1] - pads[1];
              if (chunks) {
                Value* wv = b_.CreateVectorSplat(16, w);
                for (const RowTaps::Lanes& l : taps->lanesOf(k1)) {
                  // lane 0's column: may lie outside the row
                  addTap(regs[static_cast<size_t>(l.chunk)], elemPtr(X.id, {vars[0], ch, p0, c64(16 * l.chunk + off)}), l, wv, X.id,
                         taps->finiteWeights);
                }
                continue;
              }
              forRange(c64(taps->lo[k1]), c64(taps->hi[k1]), "i3", [&](Value* i3) {
                Value* p1 = b_.CreateAdd(b_.CreateMul(i3, c64(strides[1])), c64(off));
                Value* x = convert(loadElem(X.id, {vars[0], ch, p0, p1}, X.name), X.type.dtype, DType::F32);
                Value* at = b_.CreateInBoundsGEP(f32_, row, i3);
                b_.CreateStore(fma(x, w, b_.CreateLoad(f32_, at)), at);
              });
            }
          });
        });
      });
      for (int64_t j = 0; j < chunks; ++j) {
        b_.CreateAlignedStore(b_.CreateLoad(v16, regs[static_cast<size_t>(j)]), b_.CreateInBoundsGEP(f32_, row, c64(16 * j)), llvm::Align(4));
      }
      forCount(OW, "i3", [&](Value* i3) {
        Value* r = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, i3), "acc");
        if (k.anchorInputs.size() > 2) {
          const Buffer& Bv = p_.buffer(k.anchorInputs[2]);
          r = b_.CreateFAdd(r, convert(loadElem(Bv.id, {vars[1]}, Bv.name), Bv.type.dtype, DType::F32), nodeLabel(&n));
        }
        std::vector<Value*> v = vars;
        v[3] = i3;
        emitBody(k.body, v, convert(r, DType::F32, t));
      });
    }, {0, 1, 2}, std::vector<Value*>(4, nullptr));
    return;
  }
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

}  // namespace policyc::codegen::llvmemit
