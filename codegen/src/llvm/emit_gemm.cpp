// The LLVM emitter's GEMM templates: the general dot products, the packed microkernels and their
// panel epilogues, and the calls of oneDNN's primitives (convolutions are in emit_conv.cpp).
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
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "emitter.h"

namespace policyc::codegen::llvmemit {

llvm::Function* Emitter::emitExtern(const Kernel& k, const ExternKernel& e, const std::string& fnName) {
  const size_t ki = static_cast<size_t>(&k - p_.kernels.data());
  fn_ = llvm::Function::Create(externFnTy_, llvm::GlobalValue::InternalLinkage, fnName, m_);
  fn_->addFnAttr(llvm::Attribute::NoInline);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  roots_.clear();
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  Value* threads = fn_->getArg(1);
  threads->setName("threads");
  openBody(fn_->getArg(0));
  injectFaults(k);
  llvm::Instruction* since = mark();
  auto* slot = new llvm::GlobalVariable(m_, ptr_, false, llvm::GlobalValue::InternalLinkage,
                                        llvm::ConstantPointerNull::get(ptr_), fnName + ".onednn");
  llvm::Constant* shape = constGlobal(llvm::ConstantDataArray::get(ctx_, llvm::ArrayRef<int64_t>(e.shape)), fnName + ".shape");
  Value* name = cstr(k.name);
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  Value* weight = weightsAt(s_.paramOffset.at(W.root), "weight");
  Value* bias = weightsAt(s_.kernels[ki].packedBias, "bias");
  // An updatable weight: oneDNN's reordered copy follows set_weights (pc::dnnl_ext::Primitives).
  Value* generation = llvm::ConstantPointerNull::get(ptr_);
  if (p_.buffer(W.root).value->producer()->isUpdatable()) {
    generation = b_.CreateConstInBoundsGEP1_64(i8_, weightsLock(), llvmbe::kWeightsGenerationOffset, "generation");
  }
  Value* scratch = b_.CreateInBoundsGEP(i8_, ws_, externOffset(batch_), "scratch");
  Value* src = elemPtr(k.anchorInputs[0], {});
  llvm::Constant* null = llvm::ConstantPointerNull::get(ptr_);
  Value* rc = nullptr;
  if (e.linear) {
    Value* obj = b_.CreateCall(onednnLinear_, {slot, name, shape, cstr(e.postOps), weight, bias, generation}, "linear");
    Value* dst = e.store >= 0 ? elemPtr(e.store, {}) : scratch;  // onednn: the result rows the epilogue reads
    if (e.residual >= 0 && p_.buffer(e.residual).root != p_.buffer(e.store).root) {
      // The residual first: oneDNN's sum post-op adds what the destination holds.
      b_.CreateMemCpy(dst, llvm::Align(4), elemPtr(e.residual, {}), llvm::Align(4), b_.CreateMul(batch_, c64(e.shape[1] * 4)));
    }
    rc = b_.CreateCall(onednnLinearRun_, {obj, name, src, dst, batch_, threads}, "rc");
  } else {
    const int flags = (e.anyLayout ? 1 : 0) | (s_.kernels[ki].weightStorage == WeightStorage::Bf16Dot ? 2 : 0);  // policyc_rt_onednn_conv
    Value* conv = b_.CreateCall(onednnConv_, {slot, name, shape, b_.getInt32(flags), cstr(e.postOps), weight, bias, generation},
                                "conv");
    Value* sum = e.residual >= 0 ? elemPtr(e.residual, {}) : null;
    Value* dst = e.store >= 0 ? elemPtr(e.store, {}) : null;
    llvm::AllocaInst* result = local(ptr_, "result");
    rc = b_.CreateCall(onednnConvRun_, {conv, name, src, sum, dst, batch_, threads, scratch, result}, "rc");
  }
  tag(since, k.anchor);
  b_.CreateRet(rc);
  return fn_;
}

void Emitter::emitExternEpilogue(const Kernel& k, const ExternKernel& e) {
  const DType t = accType(k);
  Value* scratch = b_.CreateInBoundsGEP(i8_, ws_, externOffset(batch_));
  if (e.linear) {
    // Units are rows of the dense [batch, N] result.
    const int64_t N = e.shape[1];
    forRange(lo_, hi_, "i0", [&](Value* i0) {
      forCount(N, "i1", [&](Value* i1) {
        Value* at = b_.CreateAdd(b_.CreateMul(i0, c64(N)), i1);
        Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, scratch, at), "acc");
        emitBody(k.body, {i0, i1}, convert(a, DType::F32, t));
      });
    });
    return;
  }
  // Units are (image, channel) pairs, each walking its output rows in the NCHW result oneDNN
  // reordered over the source copy (pc::dnnl_ext::Conv::run).
  const int64_t M = e.shape[3], OH = e.shape[6], OW = e.shape[7];
  Value* result = scratch;
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* i0 = b_.CreateSDiv(u, c64(M), "i0");
    Value* i1 = b_.CreateSRem(u, c64(M), "i1");
    forCount(OH, "i2", [&](Value* i2) {
      forCount(OW, "i3", [&](Value* i3) {
        Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(u, c64(OH)), i2), c64(OW)), i3);
        Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, result, at), "acc");
        emitBody(k.body, {i0, i1, i2, i3}, convert(a, DType::F32, t));
      });
    });
  });
}

void Emitter::emitLinear(const Kernel& k) {
  const ir::Node& n = *k.anchor;
  const size_t R = k.domain.size();
  const int a = k.anchorInputs[0], bId = k.anchorInputs[1];
  const Buffer& A = p_.buffer(a);
  const Buffer& B = p_.buffer(bId);
  ir::Dim kExtent = A.type.shape.back();
  const int axis = split_->axis;
  const DType t = accType(k);
  restrict_ = true;
  // The operands' indices at output `vars` (k's axis left null: kAxisA, kAxisB), the scaling and
  // the bias's indices.
  struct Indices {
    std::vector<Value*> aIdx, bIdx, cIdx;
    int kAxisA = 0, kAxisB = 0;
    double alpha = 1, beta = 1;
  };
  const int biasId = k.anchorInputs.size() > 2 ? k.anchorInputs[2] : -1;
  auto indicesAt = [&](const std::vector<Value*>& vars) {
    Indices ix;
    std::vector<Value*>& aIdx = ix.aIdx;
    std::vector<Value*>& bIdx = ix.bIdx;
    std::vector<Value*>& cIdx = ix.cIdx;
    int& kAxisA = ix.kAxisA;
    int& kAxisB = ix.kAxisB;
    double& alpha = ix.alpha;
    double& beta = ix.beta;
    aIdx.assign(A.type.rank(), nullptr);
    bIdx.assign(B.type.rank(), nullptr);
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
    }
    return ix;
  };
  if (n.isOp(Op::Gemm)) kExtent = A.type.shape[n.attrInt("trans_a") != 0 ? 0 : 1];
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  if (ks.matmulRowQuads) {
    // Output rows four at a time (pc::matmulRows): for each k, B's row of N columns loaded once
    // as vectors and multiplied by each of the four rows' value k, each output's sum in k order
    // (the same bits as one row at a time); the epilogue on the row's vectors or value by value.
    const size_t mAxis = R - 2;
    const int64_t N = ks.matmulColumns, M = k.domain[mAxis].value();
    const int64_t L = s_.maskRegisters ? (N % 16 == 0 ? 16 : N % 8 == 0 ? 8 : 4) : (N % 8 == 0 ? 8 : 4);
    auto* vt = llvm::FixedVectorType::get(f32_, static_cast<unsigned>(L));
    const std::vector<ir::Dim> outer(k.domain.begin(), k.domain.begin() + static_cast<std::ptrdiff_t>(mAxis));
    domainLoops(outer, axis, [&](const std::vector<Value*>& outerVars) {
      forCount(M / 4, "mq", [&](Value* q) {
        auto rowVars = [&](int64_t r, Value* col) {
          std::vector<Value*> v = outerVars;
          v.push_back(b_.CreateAdd(b_.CreateMul(q, c64(4)), c64(r)));
          v.push_back(col);
          return v;
        };
        std::vector<llvm::AllocaInst*> acc;
        for (int64_t i = 0; i < 4 * (N / L); ++i) {
          acc.push_back(local(vt, "acc"));
          b_.CreateStore(llvm::Constant::getNullValue(vt), acc.back());
        }
        std::vector<Indices> rows;
        for (int64_t r = 0; r < 4; ++r) rows.push_back(indicesAt(rowVars(r, c64(0))));
        forRange(c64(0), dimValue(kExtent), "k", [&](Value* kk) {
          std::vector<Value*> bIdx = rows[0].bIdx;
          bIdx[static_cast<size_t>(rows[0].kAxisB)] = kk;
          Value* bRow = elemPtr(bId, bIdx);
          std::vector<Value*> w;
          for (int64_t c = 0; c < N / L; ++c) {
            w.push_back(b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(f32_, bRow, c64(c * L)), llvm::Align(4), "w"));
          }
          for (int64_t r = 0; r < 4; ++r) {
            std::vector<Value*> aIdx = rows[static_cast<size_t>(r)].aIdx;
            aIdx[static_cast<size_t>(rows[static_cast<size_t>(r)].kAxisA)] = kk;
            Value* x = b_.CreateVectorSplat(static_cast<unsigned>(L), loadElem(a, aIdx, A.name));
            for (int64_t c = 0; c < N / L; ++c) {
              llvm::AllocaInst* at = acc[static_cast<size_t>(r * (N / L) + c)];
              b_.CreateStore(fma(x, w[static_cast<size_t>(c)], b_.CreateLoad(vt, at)), at);
            }
          }
        });
        if (ks.vectorEpilogue) {  // each row's columns as vectors (KernelSchedule::vectorEpilogue)
          for (int64_t r = 0; r < 4; ++r) {
            for (int64_t c = 0; c < N / L; ++c) {
              emitBody(k.body, rowVars(r, c64(c * L)), b_.CreateLoad(vt, acc[static_cast<size_t>(r * (N / L) + c)]),
                       static_cast<unsigned>(L));
            }
          }
          return;
        }
        // Else value by value in a loop over each row's columns, which LLVM's vectoriser takes
        // (unrolled, a bool mask's lanes went one by one: an attention's masked scores 1.8x slower).
        llvm::AllocaInst* row = local(f32_, "rows", c64(4 * N));
        for (int64_t i = 0; i < 4 * (N / L); ++i) {
          b_.CreateAlignedStore(b_.CreateLoad(vt, acc[static_cast<size_t>(i)]), b_.CreateInBoundsGEP(f32_, row, c64(i * L)), llvm::Align(4));
        }
        for (int64_t r = 0; r < 4; ++r) {
          forRange(c64(0), c64(N), "col", [&](Value* j) {
            emitBody(k.body, rowVars(r, j), b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, b_.CreateAdd(c64(r * N), j))));
          }, true, true);
        }
      });
    });
    restrict_ = false;
    return;
  }
  // The output columns' loop kept rolled and vectorised: its dot products side by side (the
  // k loop inside unrolled whole, the columns' loop of 4 unrolled too and left scalar, a
  // batched 4x16 by 16x4 matmul ran 3x behind GCC's).
  if (axis != static_cast<int>(R) - 1) rolledAxis_ = static_cast<int>(R) - 1;
  domainLoops(k.domain, axis, [&](const std::vector<Value*>& vars) {
    Indices ix = indicesAt(vars);
    std::vector<Value*>& aIdx = ix.aIdx;
    std::vector<Value*>& bIdx = ix.bIdx;
    const std::vector<Value*>& cIdx = ix.cIdx;
    const int kAxisA = ix.kAxisA, kAxisB = ix.kAxisB;
    const double alpha = ix.alpha, beta = ix.beta;
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
  rolledAxis_ = -1;
  restrict_ = false;
}

// A narrowed panel into the chunk's buffer: int8 rows one by one (their scales stay with the tile), bf16 pairs two rows at a time.
void Emitter::widenPanel(const PanelRef& src, int64_t K, Value* dst) {
  if (src.storage != WeightStorage::Bf16Dot && src.storage != WeightStorage::Bf16) {
    forCount(K, "wk", [&](Value* q) {
      Value* at = b_.CreateMul(q, c64(kPanel));
      b_.CreateAlignedStore(loadPanelRow(src, at), b_.CreateInBoundsGEP(f32_, dst, at), llvm::Align(64));
    });
    return;
  }
  // bf16 pairs along k: rows 2q and 2q + 1 from pair row q.
  auto pairRows = [&](Value* q, bool both) {
    auto [even, odd] = loadPairRows(src, b_.CreateMul(q, c64(kLanes)));
    Value* at = b_.CreateMul(q, c64(2 * kPanel));
    b_.CreateAlignedStore(even, b_.CreateInBoundsGEP(f32_, dst, at), llvm::Align(64));
    if (both) b_.CreateAlignedStore(odd, b_.CreateInBoundsGEP(f32_, dst, b_.CreateAdd(at, c64(kPanel))), llvm::Align(64));
  };
  forCount(K / 2, "wq", [&](Value* q) { pairRows(q, true); });
  if (K % 2) pairRows(c64(K / 2), false);
}

Emitter::PanelRef Emitter::panelAt(size_t index, Value* j, const std::string& name) {
  const KernelSchedule& ks = s_.kernels[index];
  if (ks.widenedTiles) {  // the region's f32 panels (KernelSchedule::widenedTiles)
    PanelRef r;
    r.storage = WeightStorage::F32;
    r.stride = ks.panelStride;
    r.w = widenedPanel(ks, j, ks.panelStride / kPanel, name);
    return r;
  }
  llvm::Type* elem = ks.weightStorage == WeightStorage::Bf16 || ks.weightStorage == WeightStorage::Bf16Dot
                         ? i32_  // bf16 pairs along k
                     : ks.weightStorage == WeightStorage::Int8 ? i8_
                                                               : f32_;
  PanelRef r;
  r.storage = ks.weightStorage;
  r.stride = ks.panelStride;
  r.w = b_.CreateInBoundsGEP(elem, weightsAt(ks.packedWeight, "wp"), b_.CreateMul(j, c64(ks.panelStride)), name);
  if (ks.packedScale >= 0) r.scale = b_.CreateInBoundsGEP(f32_, weightsAt(ks.packedScale, "sp"), b_.CreateMul(j, c64(kPanel)), "scale");
  return r;
}

Value* Emitter::loadPanelRow(const PanelRef& ref, Value* at) {
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
  switch (ref.storage) {
    case WeightStorage::F32: return b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(f32_, ref.w, at), llvm::Align(4), "w");
    case WeightStorage::Int8: {
      // The scales are applied once, when the tile ends (scaledEnd), not per weight.
      llvm::Type* q = llvm::FixedVectorType::get(i8_, kLanes);
      Value* bits = b_.CreateAlignedLoad(q, b_.CreateInBoundsGEP(i8_, ref.w, at), llvm::Align(1), "wint8");
      return b_.CreateSIToFP(bits, vt, "w");
    }
    case WeightStorage::Bf16:
    case WeightStorage::Bf16Dot: break;  // pairs along k: loadPairRows, or gemmDotTile as they are
  }
  fail("internal error: a bf16 pair panel read a row at a time");
}

std::pair<Value*, Value*> Emitter::loadPairRows(const PanelRef& ref, Value* at) {
  llvm::Type* pairs = llvm::FixedVectorType::get(i32_, kLanes);
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
  Value* bits = b_.CreateAlignedLoad(pairs, b_.CreateInBoundsGEP(i32_, ref.w, at), llvm::Align(4), "wbf16");
  return {b_.CreateBitCast(b_.CreateShl(bits, 16), vt, "w"),
          b_.CreateBitCast(b_.CreateAnd(bits, llvm::ConstantInt::get(pairs, 0xffff0000u)), vt, "w")};
}

std::vector<std::vector<Value*>> Emitter::gemmDotTile(const std::vector<Value*>& rows, int panels, int64_t K, const PanelRef& w,
                                                      Value* bias, const ir::Node* node, Value* offsets) {
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
  llvm::Type* lanes = llvm::FixedVectorType::get(i32_, kLanes);
  llvm::Function* dot = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512);
  llvm::Type* pairs = dot->getFunctionType()->getParamType(1);  // <32 x bfloat>
  const int64_t Q = bf16PairRows(K);
  // The rows as bf16 pairs, 16 values at a time by vcvtneps2bf16 (pc::bf16Pairs): whole vectors
  // from contiguous rows, gathered through the offsets otherwise, zeros past K; each xb holds
  // whole 8-word vectors.
  llvm::Function* narrow = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512bf16_cvtneps2bf16_512);
  llvm::Type* words = llvm::FixedVectorType::get(i32_, kLanes / 2);
  const int64_t blocks = (K + kLanes - 1) / kLanes;
  std::vector<llvm::AllocaInst*> xb;
  for (size_t t = 0; t < rows.size(); ++t) {
    xb.push_back(local(llvm::ArrayType::get(i32_, static_cast<uint64_t>(blocks * kLanes / 2)), fmt::format("xb{}", t)));
    auto block = [&](Value* k0, int64_t count) {
      Value* v = nullptr;
      if (!offsets && count == kLanes) {
        v = b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(f32_, rows[t], k0), llvm::Align(4), "x16");
      } else {
        v = llvm::Constant::getNullValue(vt);
        for (int64_t i = 0; i < count; ++i) {
          Value* k = b_.CreateAdd(k0, c64(i));
          Value* at = offsets ? b_.CreateSExt(b_.CreateLoad(i32_, b_.CreateInBoundsGEP(i32_, offsets, k), "at"), i64_) : k;
          v = b_.CreateInsertElement(v, b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, rows[t], at), "x"), static_cast<uint64_t>(i));
        }
      }
      Value* pairs16 = b_.CreateBitCast(b_.CreateCall(narrow, {v}), words);
      b_.CreateAlignedStore(pairs16, b_.CreateInBoundsGEP(i32_, xb.back(), b_.CreateSDiv(k0, c64(2))), llvm::Align(4));
    };
    forCount(K / kLanes, "kb", [&](Value* kb) {
      llvm::Instruction* s0 = mark();
      block(b_.CreateMul(kb, c64(kLanes)), kLanes);
      tag(s0, node);
    });
    llvm::Instruction* s0 = mark();
    if (K % kLanes) block(c64(K / kLanes * kLanes), K % kLanes);
    tag(s0, node);
  }
  auto weights = [&](Value* q, int p) {
    Value* at = b_.CreateAdd(b_.CreateMul(q, c64(kLanes)), c64(static_cast<int64_t>(p) * w.stride));
    return b_.CreateBitCast(b_.CreateAlignedLoad(lanes, b_.CreateInBoundsGEP(i32_, w.w, at), llvm::Align(4), "w"), pairs);
  };
  auto input = [&](size_t t, Value* q) {
    Value* x = b_.CreateLoad(i32_, b_.CreateInBoundsGEP(i32_, xb[t], q), "xpair");
    return b_.CreateBitCast(b_.CreateVectorSplat(kLanes, x), pairs);
  };
  auto biasOf = [&](int p) {
    return b_.CreateAlignedLoad(vt, b_.CreateConstInBoundsGEP1_64(f32_, bias, static_cast<uint64_t>(p) * kLanes), llvm::Align(4), "bias");
  };
  llvm::Instruction* since = mark();
  if (rows.size() == 1 && panels == 1) {
    std::vector<llvm::AllocaInst*> acc;
    for (int i = 0; i < 4; ++i) {
      acc.push_back(local(vt, fmt::format("acc{}", i)));
      b_.CreateStore(i == 0 ? biasOf(0) : static_cast<Value*>(llvm::Constant::getNullValue(vt)), acc.back());
    }
    tag(since, node);
    auto step = [&](Value* q, int i) {
      llvm::AllocaInst* a = acc[static_cast<size_t>(i)];
      b_.CreateStore(b_.CreateCall(dot, {b_.CreateLoad(vt, a), input(0, q), weights(q, 0)}), a);
    };
    return {{fourWaySum(Q, acc, step, node)}};
  }
  std::vector<std::vector<llvm::AllocaInst*>> acc(rows.size(), std::vector<llvm::AllocaInst*>(static_cast<size_t>(panels)));
  for (int p = 0; p < panels; ++p) {
    Value* bv = biasOf(p);
    for (size_t t = 0; t < rows.size(); ++t) {
      acc[t][static_cast<size_t>(p)] = local(vt, fmt::format("acc{}{}", t, p));
      b_.CreateStore(bv, acc[t][static_cast<size_t>(p)]);
    }
  }
  tag(since, node);
  forCount(Q, "q", [&](Value* q) {
    llvm::Instruction* s0 = mark();
    std::vector<Value*> wv;
    for (int p = 0; p < panels; ++p) wv.push_back(weights(q, p));
    for (size_t t = 0; t < rows.size(); ++t) {
      Value* x = input(t, q);
      for (int p = 0; p < panels; ++p) {
        llvm::AllocaInst* a = acc[t][static_cast<size_t>(p)];
        b_.CreateStore(b_.CreateCall(dot, {b_.CreateLoad(vt, a), x, wv[static_cast<size_t>(p)]}), a);
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

Value* Emitter::scaledEnd(Value* acc, Value* scales, Value* bias) {
  if (!scales) return acc;
  // One fused multiply-add, as the C++ prelude's accEnd contracts (-ffp-contract=fast) and as the
  // tiles' products are: a multiply then an add rounds twice, and the backends' bits would differ.
  return b_.CreateIntrinsic(llvm::Intrinsic::fma, {acc->getType()}, {acc, scales, bias}, nullptr, acc->getName());
}

std::vector<std::vector<Value*>> Emitter::gemmTile(const std::vector<Value*>& rows, int panels, int64_t K, const PanelRef& w, Value* bias, const ir::Node* node, Value* offsets,
                                                   int64_t group) {
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
  if (w.storage == WeightStorage::Bf16Dot) return gemmDotTile(rows, panels, K, w, bias, node, offsets);
  if (rows.size() == 1 && panels == 1 && !offsets) return {{gemmRow(rows[0], K, w, bias, node)}};
  std::vector<std::vector<llvm::AllocaInst*>> acc(rows.size(), std::vector<llvm::AllocaInst*>(static_cast<size_t>(panels)));
  llvm::Instruction* since = mark();
  std::vector<Value*> scales(static_cast<size_t>(panels), nullptr), biases;
  for (int p = 0; p < panels; ++p) {
    Value* bv = b_.CreateAlignedLoad(vt, b_.CreateConstInBoundsGEP1_64(f32_, bias, static_cast<uint64_t>(p) * kLanes), llvm::Align(4), "bias");
    if (w.scale) scales[static_cast<size_t>(p)] = b_.CreateAlignedLoad(vt, b_.CreateConstInBoundsGEP1_64(f32_, w.scale, static_cast<uint64_t>(p) * kLanes), llvm::Align(4), "scales");
    biases.push_back(bv);
    for (size_t t = 0; t < rows.size(); ++t) {
      acc[t][static_cast<size_t>(p)] = local(vt, fmt::format("acc{}{}", t, p));
      b_.CreateStore(w.scale ? llvm::Constant::getNullValue(vt) : bv, acc[t][static_cast<size_t>(p)]);
    }
  }
  tag(since, node);
  // Where row q's value lies in each row: offsets[q], or q.
  auto offsetOf = [&](Value* q) { return offsets ? b_.CreateSExt(b_.CreateLoad(i32_, b_.CreateInBoundsGEP(i32_, offsets, q), "at"), i64_) : q; };
  // Row q of every panel's weights (wv) into every row's accumulators, the rows' values at `at`.
  auto stepAt = [&](Value* at, const std::vector<Value*>& wv) {
    for (size_t t = 0; t < rows.size(); ++t) {
      Value* x = b_.CreateVectorSplat(kLanes, b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, rows[t], at), "x"));
      for (int p = 0; p < panels; ++p) {
        llvm::AllocaInst* a = acc[t][static_cast<size_t>(p)];
        b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {x, wv[static_cast<size_t>(p)], b_.CreateLoad(vt, a)}), a);
      }
    }
  };
  auto step = [&](Value* q, const std::vector<Value*>& wv) { stepAt(offsetOf(q), wv); };
  auto panelRows = [&](Value* q) {
    std::vector<Value*> wv;
    for (int p = 0; p < panels; ++p) wv.push_back(loadPanelRow(w, b_.CreateAdd(b_.CreateMul(q, c64(kLanes)), c64(static_cast<int64_t>(p) * w.stride))));
    return wv;
  };
  if (w.storage == WeightStorage::Bf16) {
    // bf16 pairs along k: rows 2q2 and 2q2 + 1 from one load per panel (pc::loadPair); an odd K's
    // last row from the low halves of the last pair row.
    auto pairStep = [&](Value* q2, bool both) {
      llvm::Instruction* s0 = mark();
      std::vector<Value*> even, odd;
      for (int p = 0; p < panels; ++p) {
        auto [e, o] = loadPairRows(w, b_.CreateAdd(b_.CreateMul(q2, c64(kLanes)), c64(static_cast<int64_t>(p) * w.stride)));
        even.push_back(e);
        odd.push_back(o);
      }
      step(b_.CreateMul(q2, c64(2)), even);
      if (both) step(b_.CreateAdd(b_.CreateMul(q2, c64(2)), c64(1)), odd);
      tag(s0, node);
    };
    forCount(K / 2, "q2", [&](Value* q2) { pairStep(q2, true); });
    if (K % 2) pairStep(c64(K / 2), false);
  } else if (group > 1) {
    // A conv's taps along a window row (pc::gemm_rxp_by's G): one offset a group, the others
    // displacements from it.
    forCount(K / group, "taps", [&](Value* g) {
      llvm::Instruction* s0 = mark();
      Value* q0 = b_.CreateMul(g, c64(group));
      Value* at = offsetOf(q0);
      for (int64_t u = 0; u < group; ++u) stepAt(b_.CreateAdd(at, c64(u)), panelRows(b_.CreateAdd(q0, c64(u))));
      tag(s0, node);
    });
  } else {
    forRange(c64(0), c64(K), "q", [&](Value* q) {
      llvm::Instruction* s0 = mark();
      step(q, panelRows(q));
      tag(s0, node);
    });
  }
  std::vector<std::vector<Value*>> out(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    for (int p = 0; p < panels; ++p) {
      const size_t pi = static_cast<size_t>(p);
      out[t].push_back(scaledEnd(b_.CreateLoad(vt, acc[t][pi], node ? nodeLabel(node) : "acc"), scales[pi], biases[pi]));
    }
  }
  return out;
}

Value* Emitter::fourWaySum(int64_t count, const std::vector<llvm::AllocaInst*>& acc, const std::function<void(Value*, int)>& step,
                           const ir::Node* node) {
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
  forCount(count / 4, "q4", [&](Value* q4) {
    llvm::Instruction* s0 = mark();
    for (int i = 0; i < 4; ++i) step(b_.CreateAdd(b_.CreateMul(q4, c64(4)), c64(i)), i);
    tag(s0, node);
  });
  forRange(c64(count / 4 * 4), c64(count), "q", [&](Value* q) { step(q, 0); });
  llvm::Instruction* since = mark();
  Value* sum = b_.CreateFAdd(b_.CreateFAdd(b_.CreateLoad(vt, acc[0]), b_.CreateLoad(vt, acc[1])),
                             b_.CreateFAdd(b_.CreateLoad(vt, acc[2]), b_.CreateLoad(vt, acc[3])), node ? nodeLabel(node) : "acc");
  tag(since, node);
  return sum;
}

Value* Emitter::gemmRow(Value* row, int64_t K, const PanelRef& w, Value* bias, const ir::Node* node) {
  llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
  llvm::Instruction* since = mark();
  std::vector<llvm::AllocaInst*> acc;
  for (int i = 0; i < 4; ++i) {
    acc.push_back(local(vt, fmt::format("acc{}", i)));
    Value* init = i == 0 && !w.scale ? static_cast<Value*>(b_.CreateAlignedLoad(vt, bias, llvm::Align(4), "bias")) : llvm::Constant::getNullValue(vt);
    b_.CreateStore(init, acc.back());
  }
  Value* scales = w.scale ? b_.CreateAlignedLoad(vt, w.scale, llvm::Align(4), "scales") : nullptr;
  tag(since, node);
  auto step = [&](Value* q, int i) {
    Value* wq = nullptr;
    if (w.storage == WeightStorage::Bf16) {
      // Row q from pair row q / 2: the odd rows the high halves (q's parity folds where the
      // unrolled loop makes it known; GVN shares the load of rows 2k and 2k + 1).
      auto [e, o] = loadPairRows(w, b_.CreateMul(b_.CreateLShr(q, 1), c64(kLanes)));
      wq = b_.CreateSelect(b_.CreateTrunc(q, b_.getInt1Ty()), o, e, "w");
    } else {
      wq = loadPanelRow(w, b_.CreateMul(q, c64(kLanes)));
    }
    Value* x = b_.CreateVectorSplat(kLanes, b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, row, q), "x"));
    llvm::AllocaInst* a = acc[static_cast<size_t>(i)];
    b_.CreateStore(b_.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {x, wq, b_.CreateLoad(vt, a)}), a);
  };
  Value* sum = fourWaySum(K, acc, step, node);
  if (w.scale) {
    since = mark();
    sum = scaledEnd(sum, scales, b_.CreateAlignedLoad(vt, bias, llvm::Align(4), "bias"));
    tag(since, node);
  }
  return sum;
}

void Emitter::finishPanel(const Kernel& k, const std::vector<Value*>& rowVars, Value* n0, Value* acc, int64_t N, bool vec) {
  std::vector<Value*> vars = rowVars;
  if (vec) {
    vars.push_back(n0);
    emitBody(k.body, vars, acc, kLanes);
    return;
  }
  if (s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].vectorTail) {  // KernelSchedule::vectorTail
    vars.push_back(n0);
    const unsigned tail = static_cast<unsigned>(N % kLanes);
    ifElse(b_.CreateICmpSLE(b_.CreateAdd(n0, c64(kLanes)), c64(N)), "whole", [&] { emitBody(k.body, vars, acc, kLanes); },
           [&] { emitBody(k.body, vars, acc, kLanes, tail); });
    return;
  }
  llvm::AllocaInst* tmp = local(llvm::ArrayType::get(f32_, kLanes), "panel");
  b_.CreateAlignedStore(acc, tmp, llvm::Align(64));
  Value* end = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(n0, c64(kLanes)), c64(N));
  const DType t = accType(k);
  // At most 16 values, left scalar (as GCC leaves the C++ backend's loop): vectorised with its
  // run-time checks and tails, a policy head's 7 outputs a row took 1.4x the C++ backend's time.
  forRange(n0, end, "n", [&](Value* n) {
    Value* a = b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, tmp, b_.CreateSub(n, n0)), "acc");
    std::vector<Value*> v = rowVars;
    v.push_back(n);
    emitBody(k.body, v, convert(a, DType::F32, t));
  }, false);
}

Value* Emitter::linearRows(const Kernel& k) {
  std::vector<ir::Dim> lead(k.domain.begin(), k.domain.end() - 1);
  return product(b_, lead, -1, 1)(batch_);
}

std::vector<Value*> Emitter::linearRowVars(const Kernel& k, Value* r) {
  const size_t R = k.domain.size();
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
}

Value* Emitter::linearRowPtr(const Kernel& k, const std::vector<Value*>& vars) {
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  std::vector<Value*> idx(X.type.rank(), nullptr);
  for (size_t d = 0; d < vars.size(); ++d) idx[d] = vars[d];
  return elemPtr(X.id, idx);
}

void Emitter::emitDotRows(const Kernel& k) {
  const size_t index = static_cast<size_t>(&k - p_.kernels.data());
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  const int64_t N = packedN(p_, k), K = packedK(p_, k);
  const DType accT = accType(k);
  llvm::Type* v16 = llvm::FixedVectorType::get(f32_, 16);
  Value* zero = llvm::Constant::getNullValue(v16);
  Value* bp = weightsAt(s_.kernels[index].packedBias, "bp");
  Value* rows = linearRows(k);
  // `count` rows from r0 as pc::dotRows<count, N>: sixteen lanes of partial sums per row and
  // output over the blocks of 16 k's (the last one's lanes past K masked to +0), then lanes
  // l + 8, l + 4, l + 2, l + 1 into l, plus the bias.
  auto tile = [&](Value* r0, int64_t count) {
    std::vector<std::vector<Value*>> rv;
    std::vector<Value*> xp;
    for (int64_t t = 0; t < count; ++t) {
      rv.push_back(linearRowVars(k, b_.CreateAdd(r0, c64(t))));
      xp.push_back(linearRowPtr(k, rv.back()));
    }
    std::vector<llvm::AllocaInst*> acc;
    for (int64_t i = 0; i < count * N; ++i) {
      acc.push_back(local(v16, fmt::format("dot{}", i)));
      b_.CreateStore(zero, acc.back());
    }
    auto step = [&](Value* k0, Value* mask) {
      auto load = [&](Value* base) -> Value* {
        Value* at = b_.CreateInBoundsGEP(f32_, base, k0);
        if (mask) return b_.CreateMaskedLoad(v16, at, llvm::Align(4), mask, zero);
        return b_.CreateAlignedLoad(v16, at, llvm::Align(4));
      };
      std::vector<Value*> xv;
      for (Value* x : xp) xv.push_back(load(x));
      for (int64_t n = 0; n < N; ++n) {
        Value* wv = load(elemPtr(W.id, {c64(n), c64(0)}));
        for (int64_t t = 0; t < count; ++t) {
          llvm::AllocaInst* a = acc[static_cast<size_t>(t * N + n)];
          b_.CreateStore(fma(xv[static_cast<size_t>(t)], wv, b_.CreateLoad(v16, a)), a);
        }
      }
    };
    if (K >= 16) forCount(K / 16, "kb", [&](Value* kb) { step(b_.CreateMul(kb, c64(16)), nullptr); });
    if (K % 16) step(c64(K / 16 * 16), laneMask(16, 0, K % 16));
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        Value* a = b_.CreateLoad(v16, acc[static_cast<size_t>(t * N + n)]);
        Value* s8 = b_.CreateFAdd(b_.CreateShuffleVector(a, {0, 1, 2, 3, 4, 5, 6, 7}), b_.CreateShuffleVector(a, {8, 9, 10, 11, 12, 13, 14, 15}));
        Value* s4 = b_.CreateFAdd(b_.CreateShuffleVector(s8, {0, 1, 2, 3}), b_.CreateShuffleVector(s8, {4, 5, 6, 7}));
        auto lane = [&](unsigned l) { return b_.CreateExtractElement(s4, static_cast<uint64_t>(l)); };
        Value* sum = b_.CreateFAdd(b_.CreateFAdd(lane(0), lane(2)), b_.CreateFAdd(lane(1), lane(3)));
        sum = b_.CreateFAdd(sum, b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, bp, c64(n)), "bias"), nodeLabel(k.anchor));
        std::vector<Value*> vars = rv[static_cast<size_t>(t)];
        vars.push_back(c64(n));
        emitBody(k.body, vars, convert(sum, DType::F32, accT));
      }
    }
  };
  // Units: a tile of rows (dotRowsTile, the C++ backend's); past the last whole one, row by row.
  const int64_t T = dotRowsTile(N);
  forRange(lo_, hi_, "u", [&](Value* u) {
    Value* r = b_.CreateMul(u, c64(T), "r");
    ifElse(b_.CreateICmpSLE(b_.CreateAdd(r, c64(T)), rows), "tile", [&] { tile(r, T); },
           [&] { forRange(r, rows, "t", [&](Value* t) { tile(t, 1); }, false); });
  });
}

void Emitter::emitPackedLinear(const Kernel& k) {
  const size_t index = static_cast<size_t>(&k - p_.kernels.data());
  const int64_t N = packedN(p_, k), K = packedK(p_, k), panels = (N + kPanel - 1) / kPanel;
  const bool vec = s_.kernels[index].vectorEpilogue;
  const int per = panelGroup();
  Value* bp = weightsAt(s_.kernels[index].packedBias, "bp");
  Value* rows = linearRows(k);
  // Units: a quad of rows (an octet with gemm8x32) by a group of panels, as the C++ backend's.
  const int64_t T = impl_ ? rowsPerTile(*impl_) : 4;
  Value* quads = b_.CreateSDiv(b_.CreateAdd(rows, c64(T - 1)), c64(T), "quads");
  // The rows past the last whole quad run alone, whatever the tile rows (gemm6x16's sextets).
  Value* rowsQ = T == 6 ? b_.CreateMul(b_.CreateSDiv(rows, c64(4)), c64(4), "rowsQ") : nullptr;
  auto rowVars = [&](Value* r) { return linearRowVars(k, r); };
  auto rowPtr = [&](const std::vector<Value*>& v) { return linearRowPtr(k, v); };
  // Narrowed panels widened to f32 once for the many rows that pass them (KernelSchedule::widenRows).
  const KernelSchedule& ks = s_.kernels[index];
  llvm::AllocaInst *wide = nullptr, *wideJ = nullptr;
  Value* widened = nullptr;
  if (ks.widenBuffer && ks.loadWidened < 0) {
    wide = local(llvm::ArrayType::get(f32_, static_cast<uint64_t>(per * K * kPanel)), "wide");
    wideJ = local(i64_, "wideJ");
    b_.CreateStore(c64(-1), wideJ);
  }
  if (ks.widenRows) widened = b_.CreateICmpSGE(rows, c64(ks.widenRows), "widened");
  // Panels widened once, by the model's first kernel that runs many rows (KernelSchedule::loadWidened).
  if (ks.loadWidened >= 0) ifThen(widened, "widen.at.load", [&] { callWidenAtLoad(); });
  // Every other run walks the units backward (KernelSchedule::alternateUnits), as the C++ printer.
  Value* back = nullptr;
  if (ks.alternateUnits) {
    llvm::LoadInst* calls = b_.CreateAlignedLoad(i32_, callCounter(), llvm::Align(4), "calls");
    calls->setAtomic(llvm::AtomicOrdering::Monotonic);
    back = b_.CreateTrunc(calls, b_.getInt1Ty(), "back");
  }
  forRange(lo_, hi_, back ? "v" : "u", [&](Value* u) {
    if (back) u = b_.CreateSelect(back, b_.CreateSub(b_.CreateAdd(lo_, hi_), b_.CreateAdd(u, c64(1))), u, "u");
    // One group of panels (a head of up to 32 outputs): j is 0, so the column bounds below fold.
    Value* j = panels <= per ? c64(0) : b_.CreateMul(b_.CreateSDiv(u, quads), c64(per), "j");
    Value* r = b_.CreateMul(panels <= per ? u : b_.CreateSRem(u, quads), c64(T), "r");
    Value* jEnd = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateAdd(j, c64(per)), c64(panels));
    Value* bias = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(j, c64(kPanel)));
    // `count` rows from row r0 as one tile by `group` panels.
    auto rowTile = [&](Value* r0, int64_t count, const PanelRef& w, int group) {
      std::vector<std::vector<Value*>> rv;
      std::vector<Value*> ptrs;
      for (int64_t t = 0; t < count; ++t) {
        rv.push_back(rowVars(b_.CreateAdd(r0, c64(t))));
        ptrs.push_back(rowPtr(rv.back()));
      }
      auto acc = gemmTile(ptrs, group, K, w, bias, k.anchor);
      if (count == 8) {
        // Eight rows' accumulators to the stack, then the epilogue row by row in a loop (as the C++
        // backend's): sixteen epilogues inline after the tile (SiLU's exp each) made brax_ppo_silu's
        // 256 x 256 layers at batch 64 1.5x the C++ backend's time.
        llvm::Type* vt = acc[0][0]->getType();
        llvm::AllocaInst* tile = local(llvm::ArrayType::get(vt, static_cast<uint64_t>(count * group)), "tile");
        for (int64_t t = 0; t < count; ++t) {
          for (int p = 0; p < group; ++p) {
            b_.CreateAlignedStore(acc[static_cast<size_t>(t)][static_cast<size_t>(p)],
                                  b_.CreateConstInBoundsGEP2_32(tile->getAllocatedType(), tile, 0, static_cast<unsigned>(t * group + p)),
                                  llvm::Align(64));
          }
        }
        forCount(count, "t", [&](Value* t) {
          const std::vector<Value*> row = rowVars(b_.CreateAdd(r0, t));
          for (int p = 0; p < group; ++p) {
            Value* at = b_.CreateAdd(b_.CreateMul(t, c64(group)), c64(p));
            Value* v = b_.CreateAlignedLoad(vt, b_.CreateInBoundsGEP(tile->getAllocatedType(), tile, {c64(0), at}), llvm::Align(64), "acc");
            finishPanel(k, row, b_.CreateMul(b_.CreateAdd(j, c64(p)), c64(kPanel)), v, N, vec);
          }
        });
        return;
      }
      for (int64_t t = 0; t < count; ++t) {
        for (int p = 0; p < group; ++p) {
          finishPanel(k, rv[static_cast<size_t>(t)], b_.CreateMul(b_.CreateAdd(j, c64(p)), c64(kPanel)),
                      acc[static_cast<size_t>(t)][static_cast<size_t>(p)], N, vec);
        }
      }
    };
    // Rows [from, to) alone, by each of the unit's panels (panel jj from panelOf(jj)).
    auto singleRows = [&](Value* from, Value* to, const std::function<PanelRef(Value*)>& panelOf) {
      forRange(from, to, "t", [&](Value* t) {
        forRange(j, jEnd, "jj", [&](Value* jj) {
          std::vector<Value*> rv = rowVars(t);
          Value* bj = b_.CreateInBoundsGEP(f32_, bp, b_.CreateMul(jj, c64(kPanel)));
          auto acc = gemmTile({rowPtr(rv)}, 1, K, panelOf(jj), bj, k.anchor);
          finishPanel(k, rv, b_.CreateMul(jj, c64(kPanel)), acc[0][0], N, vec);
        });
      });
    };
    // The tiles of the quad from row q, from the panels `w`: the quad by a whole group; then the
    // quad by a last single panel; else row by row.
    auto quadTiles = [&](Value* q, const PanelRef& w, const std::function<PanelRef(Value*)>& panelOf) {
      Value* fullQuad = b_.CreateICmpSLE(b_.CreateAdd(q, c64(4)), rows);
      auto partial = [&] {
        ifElse(fullQuad, "quad1", [&] { rowTile(q, 4, w, 1); }, [&] { singleRows(q, rows, panelOf); });
      };
      if (per == 2) {
        ifElse(b_.CreateAnd(fullQuad, b_.CreateICmpEQ(jEnd, b_.CreateAdd(j, c64(2)))), "quad2", [&] { rowTile(q, 4, w, 2); }, partial);
      } else {
        partial();
      }
    };
    // The unit's tiles: its quad; or its octet by a pair of panels as one tile (unless `octets` is
    // false: the stored panels where KernelSchedule::octetsOnStored says no), else its two quads.
    // gemm6x16's unit (one panel): a sextet below the last whole quad (rowsQ), else the rows below
    // it as a quad or a pair (the unit starts at an even row: rowsQ is r + 4, r + 2 or at most
    // r), then the rest alone, as the C++ printer's: every row in a tile or alone as with quads.
    auto sextetTiles = [&](const PanelRef& w, const std::function<PanelRef(Value*)>& panelOf) {
      auto below = [&](int64_t n) { return b_.CreateICmpSLE(b_.CreateAdd(r, c64(n)), rowsQ); };
      ifElse(below(6), "sextet", [&] { rowTile(r, 6, w, 1); },
             [&] {
               ifElse(below(4), "quad", [&] { rowTile(r, 4, w, 1); }, [&] { ifThen(below(2), "pair", [&] { rowTile(r, 2, w, 1); }); });
               Value* from = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, r, rowsQ);
               singleRows(from, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, rows, b_.CreateAdd(r, c64(6))), panelOf);
             });
    };
    auto tiles = [&](const PanelRef& w, const std::function<PanelRef(Value*)>& panelOf, bool octets) {
      if (T == 6) return sextetTiles(w, panelOf);
      if (T != 8) return quadTiles(r, w, panelOf);
      Value* fullOctet = !octets ? static_cast<Value*>(b_.getFalse())
                                 : b_.CreateAnd(b_.CreateICmpSLE(b_.CreateAdd(r, c64(8)), rows), b_.CreateICmpEQ(jEnd, b_.CreateAdd(j, c64(2))));
      ifElse(
          fullOctet, "octet", [&] { rowTile(r, 8, w, 2); },
          [&] {
            forCount(2, "half", [&](Value* h) {
              Value* q = b_.CreateAdd(r, b_.CreateMul(h, c64(4)), "q");
              ifThen(b_.CreateICmpSLT(q, rows), "quad", [&] { quadTiles(q, w, panelOf); });
            });
          });
    };
    const PanelRef narrow = panelAt(index, j, "w");
    auto narrowPanel = [&](Value* jj) { return panelAt(index, jj, "wj"); };
    if (!ks.widenRows) return tiles(narrow, narrowPanel, ks.octetsOnStored());
    // A widened run's last rows read the same panels as its quads (every row the same values).
    ifElse(
        widened, "widened",
        [&] {
          if (!ks.widenBuffer) {  // bf16-dot pairs widened inside each tile (the Bf16 microkernels)
            auto asPairs = [](PanelRef p) {
              p.storage = WeightStorage::Bf16;
              return p;
            };
            tiles(asPairs(narrow), [&](Value* jj) { return asPairs(narrowPanel(jj)); }, true);
            return;
          }
          // This unit's panels: in the model's region, or widened into the chunk's buffer (once a unit's panels).
          Value* wideAt = wide;
          if (ks.loadWidened >= 0) {
            wideAt = widenedPanel(ks, j, K, "wide");
          } else {
            ifThen(b_.CreateICmpNE(j, b_.CreateLoad(i64_, wideJ)), "widen", [&] {
              forRange(c64(0), b_.CreateSub(jEnd, j), "wp", [&](Value* p) {
                widenPanel(panelAt(index, b_.CreateAdd(j, p), "src"), K, b_.CreateInBoundsGEP(f32_, wide, b_.CreateMul(p, c64(K * kPanel))));
              });
              b_.CreateStore(j, wideJ);
            });
          }
          // f32 panels from the buffer; int8's scales (the narrow panels') still end each tile
          auto widePanel = [&](PanelRef p, Value* jj) {
            p.w = b_.CreateInBoundsGEP(f32_, wideAt, b_.CreateMul(b_.CreateSub(jj, j), c64(K * kPanel)), "wj");
            p.storage = WeightStorage::F32;
            p.stride = K * kPanel;
            return p;
          };
          tiles(widePanel(narrow, j), [&](Value* jj) { return widePanel(narrowPanel(jj), jj); }, true);
        },
        [&] { tiles(narrow, narrowPanel, ks.octetsOnStored()); });
  });
}

}  // namespace policyc::codegen::llvmemit
