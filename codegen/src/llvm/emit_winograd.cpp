// The LLVM emitter's Winograd F(2x2, 3x3) convolution (Impl::WinogradF23, schedule.h's
// WinogradTiles), as the C++ printer's emitWinograd: the same transforms (the prelude's
// pc::winogradInput and pc::winogradOutput, addition by addition), GEMM tiles and epilogue.
#include <algorithm>
#include <string>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>

#include "emitter.h"

namespace policyc::codegen::llvmemit {

namespace {
// The even or the odd lanes of two `width`-lane vectors' 2 x width (as the prelude's pc::halfLanes).
std::vector<int> halfLanes(int width, bool odd) {
  std::vector<int> m;
  for (int i = 0; i < width; ++i) m.push_back(2 * i + (odd ? 1 : 0));
  return m;
}
// Two vectors' lanes interleaved, a's lane i then b's, from lane `from` of each (`width` lanes).
std::vector<int> interleaved(int width, int from) {
  std::vector<int> m;
  for (int i = 0; i < width / 2; ++i) {
    m.push_back(from + i);
    m.push_back(width + from + i);
  }
  return m;
}
}  // namespace

void Emitter::winogradInput(const std::vector<Value*>& rows, int64_t x0, int64_t lanes, Value* v, int64_t stride) {
  const int width = lanes == 16 ? 16 : 8;
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, static_cast<unsigned>(width));
  auto load = [&](Value* row, int64_t at) {
    return b_.CreateAlignedLoad(vt, b_.CreateConstInBoundsGEP1_64(f32_, row, static_cast<uint64_t>(2 * x0 + at)), llvm::Align(4));
  };
  Value* q[4][4];
  for (int i = 0; i < 4; ++i) {
    Value* l0 = load(rows[static_cast<size_t>(i)], 0);
    Value* l1 = load(rows[static_cast<size_t>(i)], width);
    Value* l2 = load(rows[static_cast<size_t>(i)], 2);
    Value* l3 = load(rows[static_cast<size_t>(i)], width + 2);
    Value* a = b_.CreateShuffleVector(l0, l1, halfLanes(width, false));
    Value* bb = b_.CreateShuffleVector(l0, l1, halfLanes(width, true));
    Value* c = b_.CreateShuffleVector(l2, l3, halfLanes(width, false));
    Value* d = b_.CreateShuffleVector(l2, l3, halfLanes(width, true));
    q[i][0] = b_.CreateFSub(a, c);
    q[i][1] = b_.CreateFAdd(bb, c);
    q[i][2] = b_.CreateFSub(c, bb);
    q[i][3] = b_.CreateFSub(bb, d);
  }
  auto store = [&](Value* x, int64_t which) {
    Value* ptr = b_.CreateConstInBoundsGEP1_64(f32_, v, static_cast<uint64_t>(which * stride));
    if (lanes == width) b_.CreateAlignedStore(x, ptr, llvm::Align(4));
    else storeFirst(x, ptr, static_cast<unsigned>(lanes), -1);
  };
  for (int j = 0; j < 4; ++j) {
    store(b_.CreateFSub(q[0][j], q[2][j]), j);
    store(b_.CreateFAdd(q[1][j], q[2][j]), 4 + j);
    store(b_.CreateFSub(q[2][j], q[1][j]), 8 + j);
    store(b_.CreateFSub(q[1][j], q[3][j]), 12 + j);
  }
}

void Emitter::winogradOutput(Value* m, int64_t stride, Value* bias, int64_t lanes, Value* y0, Value* y1) {
  const int width = lanes == 16 ? 16 : 8;
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, static_cast<unsigned>(width));
  auto load = [&](int64_t which) {
    return b_.CreateAlignedLoad(vt, b_.CreateConstInBoundsGEP1_64(f32_, m, static_cast<uint64_t>(which * stride)), llvm::Align(4));
  };
  Value* s[4][2];
  for (int i = 0; i < 4; ++i) {
    Value* a = load(4 * i);
    Value* bb = load(4 * i + 1);
    Value* c = load(4 * i + 2);
    Value* d = load(4 * i + 3);
    s[i][0] = b_.CreateFAdd(b_.CreateFAdd(a, bb), c);
    s[i][1] = b_.CreateFSub(b_.CreateFSub(bb, c), d);
  }
  Value* bv = b_.CreateVectorSplat(static_cast<unsigned>(width), bias);
  Value* y[2][2];
  for (int j = 0; j < 2; ++j) {
    y[0][j] = b_.CreateFAdd(b_.CreateFAdd(b_.CreateFAdd(s[0][j], s[1][j]), s[2][j]), bv);
    y[1][j] = b_.CreateFAdd(b_.CreateFSub(b_.CreateFSub(s[1][j], s[2][j]), s[3][j]), bv);
  }
  // 2 x lanes columns: the first `width` from the low halves' lanes, the rest from the high halves'.
  auto store = [&](Value* x, Value* at, int64_t count) {
    if (count == width) b_.CreateAlignedStore(x, at, llvm::Align(4));
    else storeFirst(x, at, static_cast<unsigned>(count), -1);
  };
  Value* out[2] = {y0, y1};
  for (int i = 0; i < 2; ++i) {
    store(b_.CreateShuffleVector(y[i][0], y[i][1], interleaved(width, 0)), out[i], std::min<int64_t>(2 * lanes, width));
    if (2 * lanes > width) {
      store(b_.CreateShuffleVector(y[i][0], y[i][1], interleaved(width, width / 2)),
            b_.CreateConstInBoundsGEP1_64(f32_, out[i], static_cast<uint64_t>(width)), 2 * lanes - width);
    }
  }
}

void Emitter::emitWinograd(const Kernel& k) {
  const size_t index = static_cast<size_t>(&k - p_.kernels.data());
  const KernelSchedule& ks = s_.kernels[index];
  const WinogradTiles& t = *ks.winograd;
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const int64_t C = t.C, M = t.M, R = t.rows, P = t.panels, TW = t.TW, BR = t.bandRows;
  const int64_t bandH = t.bandH(), bandW = t.bandW();
  const DType accT = accType(k);
  Value* up = weightsAt(ks.winogradWeight, "up");
  Value* bp = weightsAt(ks.packedBias, "bp");
  Value* zeros = constGlobal(llvm::ConstantAggregateZero::get(llvm::ArrayType::get(f32_, 32)), k.name + ".zeros");
  // The stack buffers of the C++ printer's (their slack: a short run reads past its end).
  Value* band = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(t.bandFloats() + 16)), "band");
  Value* V = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(t.inputFloats())), "V");
  Value* Mt = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(t.productFloats() + 8)), "Mt");
  Value* yrow = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(2 * (2 * TW + 8))), "yrow");
  llvm::Constant* zero8 = llvm::ConstantInt::get(llvm::Type::getInt8Ty(ctx_), 0);
  b_.CreateMemSet(b_.CreateConstInBoundsGEP1_64(f32_, band, static_cast<uint64_t>(t.bandFloats())), zero8, 64, llvm::MaybeAlign(4));
  if (t.tiles() % 16) {
    // The last vector's lanes past the band's tiles: zeros the GEMMs multiply (never written).
    for (int64_t xi = 0; xi < 16; ++xi) {
      b_.CreateMemSet(b_.CreateConstInBoundsGEP1_64(f32_, V, static_cast<uint64_t>(xi * t.inputStride() + (P - 1) * C * 16)), zero8,
                      static_cast<uint64_t>(C * 16 * 4), llvm::MaybeAlign(4));
    }
  }
  auto at = [&](Value* base, Value* offset) { return b_.CreateInBoundsGEP(f32_, base, offset); };
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* i0 = b_.CreateUDiv(u, c64(t.bands), "i0");
    Value* ty0 = b_.CreateMul(b_.CreateURem(u, c64(t.bands)), c64(BR), "ty0");
    // The band: the input rows 2 ty0 - padTop on, zero outside the image.
    forCount(C, "c", [&](Value* c) {
      forCount(bandH, "r", [&](Value* r) {
        Value* row = at(band, b_.CreateMul(b_.CreateAdd(b_.CreateMul(c, c64(bandH)), r), c64(bandW)));
        copyPaddedRow(X, i0, c, b_.CreateSub(b_.CreateAdd(b_.CreateMul(ty0, c64(2)), r), c64(t.padTop)), row, t.padLeft, bandW);
      });
    });
    // V: tile t = ty * TW + tx of channel c at V[xi][t / 16][c][t % 16], tile row by tile row in
    // runs that stay in one vector (WinogradTiles::inputRuns).
    forCount(C, "c", [&](Value* c) {
      Value* b0 = at(band, b_.CreateMul(c, c64(bandH * bandW)));
      Value* vc = at(V, b_.CreateMul(c, c64(16)));
      for (int64_t ty = 0; ty < BR; ++ty) {
        std::vector<Value*> rows;
        for (int64_t i = 0; i < 4; ++i) rows.push_back(b_.CreateConstInBoundsGEP1_64(f32_, b0, static_cast<uint64_t>((2 * ty + i) * bandW)));
        for (const WinogradTiles::Run& run : t.inputRuns(ty)) {
          winogradInput(rows, run.x0, run.count, b_.CreateConstInBoundsGEP1_64(f32_, vc, static_cast<uint64_t>(run.panel * C * 16 + run.lane)),
                        t.inputStride());
        }
      }
    });
    if (t.bf16) {
      // Products in bf16: each panel of V rewritten in place as bf16 pairs along the channels
      // (pc::winogradPairs: row c2 after rows 2c2 and 2c2 + 1 are read).
      llvm::Function* narrow = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512bf16_cvtneps2bf16_512);
      llvm::Type* vt = llvm::FixedVectorType::get(f32_, 16);
      llvm::Type* halves = llvm::FixedVectorType::get(llvm::Type::getInt16Ty(ctx_), 16);
      llvm::Type* words = llvm::FixedVectorType::get(i32_, 16);
      auto pairs = [&](Value* a, Value* b) {
        auto widen = [&](Value* x) { return b_.CreateZExt(b_.CreateBitCast(b_.CreateCall(narrow, {x}), halves), words); };
        return b_.CreateOr(widen(a), b_.CreateShl(widen(b), 16), "pairs");
      };
      forCount(16, "xi", [&](Value* xi) {
        for (int64_t p = 0; p < P; ++p) {
          Value* panel = at(V, b_.CreateAdd(b_.CreateMul(xi, c64(t.inputStride())), c64(p * C * 16)));
          auto row = [&](Value* c) { return b_.CreateAlignedLoad(vt, at(panel, b_.CreateMul(c, c64(16))), llvm::Align(4), "v"); };
          auto store = [&](Value* c2, Value* x) { b_.CreateAlignedStore(x, b_.CreateInBoundsGEP(i32_, panel, b_.CreateMul(c2, c64(16))), llvm::Align(4)); };
          forCount(C / 2, "c2", [&](Value* c2) {
            Value* even = b_.CreateMul(c2, c64(2));
            store(c2, pairs(row(even), row(b_.CreateAdd(even, c64(1)))));
          });
          if (C % 2) store(c64(C / 2), pairs(row(c64(C - 1)), llvm::Constant::getNullValue(vt)));
        }
      });
    }
    // The 16 GEMMs of a group of R output channels (the last group's rows past M repeat its last
    // channel, computed and dropped), then the group's outputs.
    forRange(c64(0), c64((M + R - 1) / R), "g", [&](Value* g) {
      Value* m0 = b_.CreateMul(g, c64(R), "m0");
      forCount(16, "xi", [&](Value* xi) {
        std::vector<Value*> rows;
        for (int64_t r = 0; r < R; ++r) {
          Value* m = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b_.CreateAdd(m0, c64(r)), c64(M - 1));
          rows.push_back(at(up, b_.CreateMul(b_.CreateAdd(b_.CreateMul(xi, c64(M)), m), c64(C))));
        }
        Value* v = at(V, b_.CreateMul(xi, c64(t.inputStride())));
        Value* mt = at(Mt, b_.CreateMul(xi, c64(t.productStride())));
        // Two vectors of tiles a call with AVX-512 (an odd last one alone), one without, as the C++ printer's.
        for (int64_t q = 0; q < P; q += R == 8 ? 2 : 1) {
          const int64_t per = std::min<int64_t>(R == 8 ? 2 : 1, P - q);
          PanelRef w;
          w.w = b_.CreateConstInBoundsGEP1_64(f32_, v, static_cast<uint64_t>(q * C * 16));
          w.stride = C * 16;
          if (t.bf16) w.storage = WeightStorage::Bf16Dot;  // V's panels as pairs; U's rows rounded by the tile
          auto acc = gemmTile(rows, static_cast<int>(per), C, w, zeros, &n);
          for (int64_t r = 0; r < R; ++r) {
            for (int64_t p = 0; p < per; ++p) {
              b_.CreateAlignedStore(acc[static_cast<size_t>(r)][static_cast<size_t>(p)],
                                    b_.CreateConstInBoundsGEP1_64(f32_, mt, static_cast<uint64_t>(r * 16 * P + (q + p) * 16)), llvm::Align(4));
            }
          }
        }
      });
      Value* mEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b_.CreateAdd(m0, c64(R)), c64(M));
      forRange(m0, mEnd, "i1", [&](Value* i1) {
        Value* mr = at(Mt, b_.CreateMul(b_.CreateSub(i1, m0), c64(16 * P)));
        Value* bias = b_.CreateLoad(f32_, at(bp, i1), "bias");
        Value* tyEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, c64(BR), b_.CreateSub(c64(t.TH), ty0));
        forRange(c64(0), tyEnd, "ty", [&](Value* ty) {
          Value* y1 = b_.CreateConstInBoundsGEP1_64(f32_, yrow, static_cast<uint64_t>(2 * TW + 8));
          Value* mt = at(mr, b_.CreateMul(ty, c64(TW)));
          for (const WinogradTiles::Run& run : t.outputRuns()) {
            winogradOutput(b_.CreateConstInBoundsGEP1_64(f32_, mt, static_cast<uint64_t>(run.x0)), t.productStride(), bias, run.count,
                           b_.CreateConstInBoundsGEP1_64(f32_, yrow, static_cast<uint64_t>(2 * run.x0)),
                           b_.CreateConstInBoundsGEP1_64(f32_, y1, static_cast<uint64_t>(2 * run.x0)));
          }
          Value* r0 = b_.CreateMul(b_.CreateAdd(ty0, ty), c64(2));
          forRange(c64(0), b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, c64(2), b_.CreateSub(c64(t.OH), r0)), "half", [&](Value* half) {
            Value* i2 = b_.CreateAdd(r0, half, "i2");
            Value* row = at(yrow, b_.CreateMul(half, c64(2 * TW + 8)));
            if (ks.tileEpilogue) {
              // The epilogue on 8 columns at a time (a row of 4: its first 4 lanes).
              llvm::Type* v8 = llvm::FixedVectorType::get(f32_, 8);
              for (int64_t col = 0; col < t.OW; col += 8) {
                Value* y = b_.CreateAlignedLoad(v8, b_.CreateConstInBoundsGEP1_64(f32_, row, static_cast<uint64_t>(col)), llvm::Align(4), "acc");
                emitBody(k.body, {i0, i1, i2, c64(col)}, y, 8, static_cast<unsigned>(std::min<int64_t>(8, t.OW - col)));
              }
            } else {
              forCount(t.OW, "i3", [&](Value* i3) {
                Value* a = b_.CreateLoad(f32_, at(row, i3), "acc");
                emitBody(k.body, {i0, i1, i2, i3}, convert(a, DType::F32, accT));
              });
            }
          });
        });
      });
    });
  });
}

}  // namespace policyc::codegen::llvmemit
