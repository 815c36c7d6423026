// The LLVM emitter's kernel functions and the other templates: pointwise loop nests, reductions
// (rows and axes) and copies (pad, gather); pooling is in emit_pool.cpp, the reductions' row
// helpers (sums, maxima, short rows) in emit_rows.cpp.
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

std::vector<Emitter::Variant> Emitter::emitKernel(const Kernel& k) {
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  impl_.reset();
  if (ks.impls.empty()) return {{std::nullopt, nullptr, emitKernelFn(k, k.name, nullptr)}};
  std::vector<Variant> out;
  for (Impl im : ks.impls) {
    impl_ = im;
    // One implementation keeps the kernel's name; several are told apart by theirs.
    const std::string name = ks.impls.size() == 1 ? k.name : fmt::format("{}.{}", k.name, implName(im));
    Variant v{im};
    if (isExtern(im)) {
      const std::optional<ExternKernel> e = externKernel(p_, k, implName(im));
      if (!e) fail("internal: kernel '{}' was scheduled with implementation {}, which it lacks", k.name, implName(im));
      v.externFn = emitExtern(k, *e, name);
      // The generated epilogue over oneDNN's result (implementation onednn), split like a kernel.
      if (im == Impl::Onednn) v.fn = emitKernelFn(k, name + ".epilogue", &*e);
    } else {
      v.fn = emitKernelFn(k, name, nullptr);
    }
    out.push_back(v);
  }
  impl_.reset();
  return out;
}

void Emitter::injectFaults(const Kernel& k) {
  for (const ir::Node* n : k.sources) {
    if (faulty(n, InjectedFault::Kind::Compile)) {
      fail("the LLVM compiler failed: injected compile fault in node '{}' ({}) of kernel {}", n->name(), n->info().name, k.name);
    }
    if (faulty(n, InjectedFault::Kind::Crash)) b_.CreateIntrinsic(llvm::Intrinsic::trap, {}, {});
  }
}

llvm::Function* Emitter::emitKernelFn(const Kernel& k, const std::string& name, const ExternKernel* epilogueOf) {
  fn_ = llvm::Function::Create(kernelFnTy_, llvm::GlobalValue::InternalLinkage, name, m_);
  fn_->addFnAttr(llvm::Attribute::NoInline);  // kernels stay separate functions: profiles show them by name
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->addFnAttr("frame-pointer", "none");
  roots_.clear();
  const size_t ki = static_cast<size_t>(&k - p_.kernels.data());
  // A packed GEMM's tile rows copied out one by one, not through calls of memcpy (as the C++
  // backend's -fno-tree-loop-distribute-patterns): a policy head's 7 to 15 outputs a row went
  // through four calls a tile (1.3-1.5x the C++ backend's time). Other kernels keep the idiom:
  // a gather's rows took 4x without it.
  if (s_.kernels[ki].form == Form::PackedGemm) fn_->addFnAttr("no-builtin-memcpy");
  split_ = &s_.kernels[ki].splitOf(impl_);
  faultyAnchor_ = s_.kernels[ki].anchorFault;
  disjointTemps_ = s_.kernels[ki].disjointTemps;
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
  if (epilogueOf) {
    emitExternEpilogue(k, *epilogueOf);
  } else {
    switch (s_.kernels[ki].form) {
      case Form::Pointwise: emitPointwise(k); break;
      case Form::Gemm: emitLinear(k); break;
      case Form::PackedGemm: impl_ == Impl::DotRows ? emitDotRows(k) : emitPackedLinear(k); break;
      case Form::DirectConv: emitConv(k); break;
      case Form::PackedConv:
        if (impl_ == Impl::ConvRows) emitConvRows(k);
        else if (impl_ == Impl::WinogradF23) emitWinograd(k);
        else emitPackedConv(k);
        break;
      case Form::Pool: emitPool(k); break;
      case Form::MaxPoolRows: emitMaxPoolRows(k); break;
      case Form::AvgPoolRows: emitAvgPoolRows(k); break;
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

void Emitter::emitPointwise(const Kernel& k) {
  const int axis = split_->axis;
  restrict_ = true;
  // Only loops along which every access is unit stride (or invariant) are vectorised: after the
  // innermost loop is unrolled the vectorizer would otherwise take an outer, strided one.
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  scalarAxes_ = ks.stridedAxes;
  unrollInner_ = ks.unrollCalls;
  // Collapsed axes (KernelSchedule::collapseFrom) loop once; the last walks their run.
  auto nest = [&](bool vectorInner) {
    rolledAxis_ = vectorInner ? ks.vectorAxis : -1;
    domainLoops(loopExtents(k, ks), axis, [&](const std::vector<Value*>& vars) { emitBody(k.body, vars, nullptr); },
                loopOrder(k, ks, vectorInner), std::vector<Value*>(k.domain.size(), nullptr));
  };
  if (ks.transpose) {
    emitTransposeTiles(k, *ks.transpose);
  } else if (ks.vectorAxis >= 0) {
    // KernelSchedule::vectorAxis innermost where its loop is long enough.
    Value* n = ks.vectorAxis == axis ? b_.CreateSub(hi_, lo_) : dimValue(k.domain[static_cast<size_t>(ks.vectorAxis)]);
    ifElse(b_.CreateICmpSGE(n, c64(KernelSchedule::kVectorAxisMin)), "rows", [&] { nest(true); }, [&] { nest(false); });
  } else {
    nest(false);
  }
  scalarAxes_.clear();
  unrollInner_ = 0;
  rolledAxis_ = -1;
  restrict_ = false;
}

void Emitter::emitTransposeTiles(const Kernel& k, const TransposeTiles& t) {
  const Instr &load = k.body[0], &store = k.body[1];
  const size_t last = k.domain.size() - 1, across = t.loadAxis;
  const int64_t n = k.domain[across].value(), m = k.domain[last].value(), T = t.tile, A = t.across;
  llvm::Type* vt = llvm::FixedVectorType::get(memType(p_.buffer(load.buffer).type.dtype), static_cast<unsigned>(A));
  std::vector<ir::Dim> outer = k.domain;
  outer[across] = outer[last] = 1;
  domainLoops(outer, split_->axis, [&](const std::vector<Value*>& outerVars) {
    std::vector<Value*> vars = outerVars;
    forCount(n / A, "tb", [&](Value* tb) {
      forCount(m / T, "ta", [&](Value* ta) {
        Value* b0 = b_.CreateMul(tb, c64(A));
        Value* a0 = b_.CreateMul(ta, c64(T));
        // Row j: the values at last-axis index a0 + j along `across`.
        std::vector<Value*> rows;
        for (int64_t j = 0; j < T; ++j) {
          vars[across] = b0;
          vars[last] = b_.CreateAdd(a0, c64(j));
          llvm::LoadInst* v = b_.CreateAlignedLoad(vt, elemPtr(load.buffer, indices(load.index, vars)), llvm::Align(4));
          restrictAccess(v, load.buffer);
          rows.push_back(v);
        }
        if (A == 16) {  // eight rows of 16 as sixteen columns of 8
          const std::vector<Value*> columns = transpose8x16(rows);
          for (int64_t i = 0; i < A; ++i) {
            vars[across] = b_.CreateAdd(b0, c64(i));
            vars[last] = a0;
            restrictAccess(b_.CreateAlignedStore(columns[static_cast<size_t>(i)], elemPtr(store.buffer, indices(store.index, vars)), llvm::Align(4)),
                           store.buffer);
          }
          return;
        }
        // log2(T) rounds of zips of rows j and j + T/2 transpose the tile.
        const int64_t h = T / 2;
        std::vector<int> lo, hi;
        for (int64_t l = 0; l < h; ++l) {
          lo.insert(lo.end(), {static_cast<int>(l), static_cast<int>(l + T)});
          hi.insert(hi.end(), {static_cast<int>(l + h), static_cast<int>(l + h + T)});
        }
        for (int64_t round = 1; round < T; round *= 2) {
          std::vector<Value*> next(static_cast<size_t>(T));
          for (int64_t j = 0; j < h; ++j) {
            next[static_cast<size_t>(2 * j)] = b_.CreateShuffleVector(rows[static_cast<size_t>(j)], rows[static_cast<size_t>(j + h)], lo);
            next[static_cast<size_t>(2 * j + 1)] = b_.CreateShuffleVector(rows[static_cast<size_t>(j)], rows[static_cast<size_t>(j + h)], hi);
          }
          rows = next;
        }
        for (int64_t i = 0; i < T; ++i) {
          vars[across] = b_.CreateAdd(b0, c64(i));
          vars[last] = a0;
          restrictAccess(b_.CreateAlignedStore(rows[static_cast<size_t>(i)], elemPtr(store.buffer, indices(store.index, vars)), llvm::Align(4)), store.buffer);
        }
      });
    });
    // The values outside whole tiles, one at a time.
    auto values = [&](int64_t bLo, int64_t bHi, int64_t aLo, int64_t aHi) {
      if (bLo >= bHi || aLo >= aHi) return;
      forRange(c64(bLo), c64(bHi), "rb", [&](Value* b) {
        forRange(c64(aLo), c64(aHi), "ra", [&](Value* a) {
          vars[across] = b;
          vars[last] = a;
          emitBody(k.body, vars, nullptr);
        });
      });
    };
    values(0, n - n % A, m - m % T, m);
    values(n - n % A, n, 0, m);
  });
}

Value* Emitter::operand(const Kernel& k, const std::vector<Value*>& idx) {
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  if (k.prologue.empty()) return loadElem(X.id, idx, X.name);
  std::vector<Value*> v = emitBody(k.prologue, idx, nullptr);
  return convert(v[static_cast<size_t>(k.prologueResult)], k.prologue[static_cast<size_t>(k.prologueResult)].dtype, X.type.dtype);
}

void Emitter::emitReduction(const Kernel& k) {
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
    // KernelSchedule::rowsAcross: rows eight at a time first (softmaxRows8), the rest one at a time
    // below from the first row past them (the loops start at its index of the first axis and skip
    // the rows before it there).
    const int64_t across = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].rowsAcross;
    Value* const lo = lo_;
    Value* rest = across ? softmaxRows8(k, across) : nullptr;
    if (rest) lo_ = b_.CreateSDiv(rest, c64(across));
    // The outer loops walk only the kept axes (the reduced ones are walked by `inner`).
    std::vector<Value*> vars(r, nullptr);
    domainLoops(k.domain, splitAt, [&](const std::vector<Value*>& ov) {
      vars = ov;
      auto row = [&] {
        auto inner = [&](const std::function<void(const std::vector<Value*>&)>& f) {
          domainLoops(k.domain, -1, f, reduced, vars);
        };
        llvm::AllocaInst* a = local(f64_, "a");
        llvm::AllocaInst* s = local(f64_, "s");
        if (ln) {
          int64_t cols = 1;
          for (size_t d : reduced) cols *= k.domain[d].value();
          const bool normRow = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].normRow != 0;
          auto at = [&](Value* j) {
            std::vector<Value*> idx = vars;
            idx[reduced[0]] = j;
            return operand(k, idx);
          };
          b_.CreateStore(llvm::ConstantFP::get(f64_, 0.0), a);
          if (normRow) {  // KernelSchedule::normRow: both sums through sumOf, as the C++ backend's pc::sumOf
            b_.CreateStore(sumOf(cols, at), a);
          } else {
            inner([&](const std::vector<Value*>& v) { b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, a), asF64(operand(k, v))), a); });
          }
          Value* mean = b_.CreateFDiv(b_.CreateLoad(f64_, a), llvm::ConstantFP::get(f64_, static_cast<double>(cols)), "mean");
          b_.CreateStore(llvm::ConstantFP::get(f64_, 0.0), s);
          if (normRow) {
            b_.CreateStore(sumOf(cols, [&](Value* j) {
                             Value* d = b_.CreateFPTrunc(b_.CreateFSub(asF64(at(j)), mean), f32_);
                             return b_.CreateFMul(d, d);
                           }),
                           s);
          } else {
            inner([&](const std::vector<Value*>& v) {
              Value* d = b_.CreateFSub(asF64(operand(k, v)), mean);
              b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, s), b_.CreateFMul(d, d)), s);
            });
          }
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
          auto normalised = [&](const std::vector<Value*>& v) {
            Value* y = b_.CreateFMul(b_.CreateFMul(b_.CreateFSub(asF64(operand(k, v)), mean), invStd), paramAt(k.anchorInputs[1], v));
            if (k.anchorInputs.size() > 2) y = b_.CreateFAdd(y, paramAt(k.anchorInputs[2], v));
            return convert(y, DType::F64, outT);
          };
          if (s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].normStaged) {
            // KernelSchedule::normStaged: the row into a buffer, then the epilogue over it.
            llvm::Type* et = regType(outT, 0);
            llvm::AllocaInst* staged = local(llvm::ArrayType::get(et, static_cast<uint64_t>(cols)), "row");
            auto slot = [&](const std::vector<Value*>& v) { return b_.CreateInBoundsGEP(et, staged, v[reduced[0]]); };
            inner([&](const std::vector<Value*>& v) { b_.CreateStore(normalised(v), slot(v)); });
            inner([&](const std::vector<Value*>& v) { emitBody(k.body, v, b_.CreateLoad(et, slot(v))); });
          } else {
            inner([&](const std::vector<Value*>& v) { emitBody(k.body, v, normalised(v)); });
          }
        } else {
          if (xT == DType::F32 && reduced.size() == 1) {
            // The row's maximum vectorised (maxOf).
            b_.CreateStore(asF64(maxOf(k.domain[reduced[0]].value(), [&](Value* i) {
                             std::vector<Value*> at = vars;
                             at[reduced[0]] = i;
                             return operand(k, at);
                           })), a);
          } else {
            b_.CreateStore(llvm::ConstantFP::getInfinity(f64_, true), a);
            inner([&](const std::vector<Value*>& v) { b_.CreateStore(maxNaN(b_.CreateLoad(f64_, a), asF64(operand(k, v)), true), a); });
          }
          Value* mx = b_.CreateLoad(f64_, a, "max");
          b_.CreateStore(llvm::ConstantFP::get(f64_, 0.0), s);
          // KernelSchedule::keptExps: the row's exps kept for the second pass.
          const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
          const int64_t kept = ks.keptExps;
          llvm::Type* et = ks.f32Exps ? f32_ : f64_;
          llvm::AllocaInst* e = kept ? local(llvm::ArrayType::get(et, static_cast<uint64_t>(kept)), "exps") : nullptr;
          auto keptAt = [&](const std::vector<Value*>& v) { return b_.CreateInBoundsGEP(et, e, v[reduced[0]]); };
          if (ks.f32Exps) {
            // KernelSchedule::f32Exps: the exps in f32 first (a loop that vectorises), then their sum.
            Value* mx32 = b_.CreateFPTrunc(mx, f32_);  // exact: the maximum of f32 values
            inner([&](const std::vector<Value*>& v) { b_.CreateStore(exp(b_.CreateFSub(operand(k, v), mx32)), keptAt(v)); });
            b_.CreateStore(sumOf(kept, [&](Value* j) { return b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, e, j)); }), s);
          } else {
            inner([&](const std::vector<Value*>& v) {
              Value* t = exp(b_.CreateFSub(asF64(operand(k, v)), mx));
              if (e) b_.CreateStore(t, keptAt(v));
              b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, s), t), s);
            });
          }
          Value* sum = b_.CreateLoad(f64_, s, "sum");
          Value* logSum = n.isOp(Op::LogSoftmax) ? log(sum) : nullptr;
          inner([&](const std::vector<Value*>& v) {
            Value* d = b_.CreateFSub(asF64(operand(k, v)), mx);
            Value* kept64 = e ? convert(b_.CreateLoad(et, keptAt(v)), ks.f32Exps ? DType::F32 : DType::F64, DType::F64) : nullptr;
            Value* y = logSum ? b_.CreateFSub(d, logSum) : b_.CreateFDiv(e ? kept64 : exp(d), sum);
            emitBody(k.body, v, convert(y, DType::F64, outT));
          });
        }
      };
      if (!rest) {
        row();
        return;
      }
      Value* flat = vars[0];  // the row's number
      for (size_t d = 1; d < axis; ++d) flat = b_.CreateAdd(b_.CreateMul(flat, c64(k.domain[d].value())), vars[d]);
      ifThen(b_.CreateICmpSGE(flat, rest), "row", row);
    }, outer, std::vector<Value*>(r, nullptr));
    lo_ = lo;
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
  const bool isArg = n.isOp(Op::ArgMax), isMax = n.isOp(Op::ReduceMax), isProd = n.isOp(Op::ReduceProd);
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
      const int64_t extent = X.type.shape[ax].value();
      // The operand at index i of the reduced axis.
      auto valueAtIndex = [&](Value* i) {
        std::vector<Value*> at = xv;
        at[ax] = i;
        return operand(k, at);
      };
      if (xT == DType::F32 && extent > 0 && extent <= KernelSchedule::kShortRow) {
        // A short row in one pass without a branch on where its maximum lies (argmaxShort).
        emitBody(k.body, outIdx, convert(argmaxShort(extent, last, valueAtIndex), DType::I64, outT));
        return;
      }
      // Two passes: the maximum (maxOf for f32, llvm.maximum otherwise: a NaN wins, as NaN
      // counts as the largest value in numpy), then the first index holding it (the last with
      // select_last_index).
      Value* mx = nullptr;
      if (xT == DType::F32) {
        mx = asF64(maxOf(extent, valueAtIndex));
      } else {
        llvm::AllocaInst* top = local(f64_, "top");
        b_.CreateStore(llvm::ConstantFP::getInfinity(f64_, true), top);
        forRange(c64(0), c64(extent), "x" + std::to_string(ax), [&](Value* i) {
          b_.CreateStore(b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, b_.CreateLoad(f64_, top), asF64(valueAtIndex(i))), top);
        });
        mx = b_.CreateLoad(f64_, top, "max");
      }
      Value* nanMax = isNan(mx);
      // The scan stops at the first match from its end (as the C++ backend's): on average half
      // the row, where keeping every match would walk all of it. One loop per case, so that each
      // compares once per value; for f32 the common case compares kScanLanes values a step.
      llvm::AllocaInst* best = local(i64_, "best");
      b_.CreateStore(c64(0), best);
      const std::string name = "y" + std::to_string(ax);
      auto scan = [&](const std::function<Value*(Value*)>& match) {
        llvm::BasicBlock* done = block(name + ".done");
        scanStage(extent, name, done, best, [&](Value* j) {
          Value* i = last ? b_.CreateSub(c64(extent - 1), j) : j;
          return std::pair{match(valueAtIndex(i)), i};
        });
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
      };
      ifElse(
          nanMax, "nan", [&] { scan([&](Value* v) { return isNan(v); }); },
          [&] {
            if (xT == DType::F32) {
              b_.CreateStore(findEqual(extent, b_.CreateFPTrunc(mx, f32_), last, valueAtIndex), best);  // exact: an f32 value
            } else {
              scan([&](Value* v) { return b_.CreateFCmpOEQ(asF64(v), mx); });
            }
          });
      emitBody(k.body, outIdx, convert(b_.CreateLoad(i64_, best), DType::I64, outT));
      return;
    }
    llvm::AllocaInst* acc = local(f64_, "acc");
    b_.CreateStore(isMax ? llvm::ConstantFP::getInfinity(f64_, true) : llvm::ConstantFP::get(f64_, isProd ? 1.0 : 0.0), acc);
    if (isMax && xT == DType::F32) {
      // The innermost reduced axis in one maxOf (the reference's value, zeros' signs and NaNs
      // included); the outer reduced axes combine those maxima in order.
      const size_t innermost = red.back();
      std::vector<size_t> outerRed(red.begin(), red.end() - 1);
      auto combine = [&](const std::vector<Value*>& v) {
        Value* m = asF64(maxOf(X.type.shape[innermost].value(), [&](Value* i) {
          std::vector<Value*> at = v;
          at[innermost] = i;
          return operand(k, at);
        }));
        Value* a = b_.CreateLoad(f64_, acc);
        // The first NaN, else the larger; ties keep the earlier (as the reference's maxNaN).
        Value* larger = b_.CreateSelect(b_.CreateFCmpOLT(a, m), m, a);
        b_.CreateStore(b_.CreateSelect(isNan(a), a, b_.CreateSelect(isNan(m), m, larger)), acc);
      };
      if (outerRed.empty()) {
        combine(xv);
      } else {
        domainLoops(X.type.shape, -1, combine, outerRed, xv);
      }
    } else if (const std::optional<KernelSchedule::SumRun>& run = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].sumRun) {
      // The run through sumOf (KernelSchedule::sumRun); the other reduced axes are loops around it.
      std::vector<size_t> outerRed;
      for (size_t d : red) {
        if (d < run->first || d > run->last) outerRed.push_back(d);
      }
      auto add = [&](const std::vector<Value*>& v) {
        std::vector<Value*> at = v;
        for (size_t d = run->first; d <= run->last; ++d) at[d] = c64(0);
        Value* start = run->first == run->last ? nullptr : elemPtr(X.id, at);  // contiguous axes, no prologue
        Value* sum = sumOf(run->count, [&](Value* j) {
          if (start) return static_cast<Value*>(b_.CreateLoad(f32_, b_.CreateInBoundsGEP(f32_, start, j), escape::printable(X.name)));
          std::vector<Value*> idx = v;
          idx[run->first] = j;
          return operand(k, idx);
        });
        b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64_, acc), sum), acc);
      };
      if (outerRed.empty()) {
        add(xv);
      } else {
        domainLoops(X.type.shape, -1, add, outerRed, xv);
      }
    } else {
      domainLoops(X.type.shape, -1, [&](const std::vector<Value*>& v) {
        Value* x = asF64(operand(k, v));
        Value* a = b_.CreateLoad(f64_, acc);
        // llvm.maximum: a NaN wins (the reference's maxNaN), and the loop vectorises.
        b_.CreateStore(isMax    ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, x)
                       : isProd ? b_.CreateFMul(a, x)
                                : b_.CreateFAdd(a, x),
                       acc);
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
    }
    Value* a = b_.CreateLoad(f64_, acc, escape::printable(n.name()));
    if (n.isOp(Op::ReduceMean) || n.isOp(Op::GlobalAvgPool)) {
      a = b_.CreateFDiv(a, llvm::ConstantFP::get(f64_, static_cast<double>(count)));
      if (!ir::isFloat(outT)) a = b_.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, a);
    }
    emitBody(k.body, outIdx, convert(a, DType::F64, outT));
  }, kept, std::vector<Value*>(r, nullptr));  // the kept axes only: `red` is walked inside
}

Value* Emitter::checkedIndex(Value* at, int64_t size) {
  at = b_.CreateSelect(b_.CreateICmpSLT(at, c64(0)), b_.CreateAdd(at, c64(size)), at);
  Value* outside = b_.CreateOr(b_.CreateICmpSLT(at, c64(0)), b_.CreateICmpSGE(at, c64(size)));
  flagError(outside, kIndexError);
  return b_.CreateSelect(outside, c64(0), at);
}

void Emitter::emitCopy(const Kernel& k) {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const DType t = accType(k);
  const int axis = split_->axis;
  const size_t r = X.type.rank();
  if (!n.isOp(Op::Pad) && !n.isOp(Op::Gather) && !n.isOp(Op::GatherElements)) unsupported("node '{}' ({}): no LLVM IR for this copy template", n.name(), n.info().name);
  restrict_ = true;  // restrictAccess: measured 1.8x faster on pad, 10x on gather
  if (const std::optional<PadRows> rows = padRows(p_, k, *split_)) {
    const bool vec = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].vectorEpilogue;
    std::vector<size_t> outer(r - 1);
    for (size_t d = 0; d + 1 < r; ++d) outer[d] = d;
    domainLoops(k.domain, axis, [&](const std::vector<Value*>& rowVars) {
      const std::vector<int64_t>& pads = n.attrInts("pads");
      std::vector<Value*> idx;
      Value* inBounds = b_.getTrue();
      for (size_t d = 0; d + 1 < r; ++d) {
        Value* pv = pads[d] ? b_.CreateSub(rowVars[d], c64(pads[d])) : rowVars[d];
        if (pads[d] || pads[r + d]) {
          inBounds = b_.CreateAnd(inBounds, b_.CreateAnd(b_.CreateICmpSGE(pv, c64(0)), b_.CreateICmpSLT(pv, c64(X.type.shape[d].value()))));
        }
        idx.push_back(pv);
      }
      Value* value = constant(n.attrFloat("value"), t, regType(t));
      auto loop = [&](int64_t from, int64_t to, bool copy) {
        if (copy && vec && to - from >= kLanes) {
          // The copied part 16 values at a time (KernelSchedule::vectorEpilogue): as scalar
          // code LLVM unrolls it fully and, its source and destination both in the workspace,
          // does not vectorise it.
          llvm::Type* vt = llvm::FixedVectorType::get(f32_, kLanes);
          forCount((to - from) / kLanes, "chunk", [&](Value* c) {
            Value* i = b_.CreateAdd(c64(from), b_.CreateMul(c, c64(kLanes)));
            std::vector<Value*> vars = rowVars, at = idx;
            vars[r - 1] = i;
            at.push_back(b_.CreateSub(i, c64(rows->head)));
            llvm::LoadInst* x = b_.CreateAlignedLoad(vt, elemPtr(X.id, at), llvm::Align(4), escape::printable(X.name));
            restrictAccess(x, X.id);
            emitBody(k.body, vars, x, kLanes);
          });
          from += (to - from) / kLanes * kLanes;
        }
        if (from >= to) return;
        forRange(c64(from), c64(to), "i", [&](Value* i) {
          std::vector<Value*> vars = rowVars, at = idx;
          vars[r - 1] = i;
          at.push_back(b_.CreateSub(i, c64(rows->head)));
          emitBody(k.body, vars, copy ? convert(loadElem(X.id, at, X.name), X.type.dtype, t) : value);
        });
      };
      const int64_t end = k.domain[r - 1].value(), mid = rows->head + rows->width;
      ifElse(inBounds, "row", [&] { loop(0, rows->head, false), loop(rows->head, mid, true), loop(mid, end, false); },
             [&] { loop(0, end, false); });
    }, outer, std::vector<Value*>(r, nullptr));
    restrict_ = false;
    return;
  }
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
    } else if (n.isOp(Op::GatherElements)) {
      // The index at the output's own position; the data read there with the axis replaced by it.
      const Buffer& I = p_.buffer(k.anchorInputs[1]);
      const size_t ax = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
      const int64_t size = X.type.shape[ax].value();
      Value* at = checkedIndex(convert(loadElem(I.id, vars, I.name), I.type.dtype, DType::I64), size);
      if (size == 0) {
        acc = llvm::Constant::getNullValue(regType(t));
      } else {
        std::vector<Value*> idx = vars;
        idx[ax] = at;
        acc = convert(loadElem(X.id, idx, X.name), X.type.dtype, t);
      }
    } else {
      const Buffer& I = p_.buffer(k.anchorInputs[1]);
      const size_t ax = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
      const size_t ri = I.type.rank();
      std::vector<Value*> iIdx;
      for (size_t d = 0; d < ri; ++d) iIdx.push_back(vars[ax + d]);
      const int64_t size = X.type.shape[ax].value();
      // (an empty table is never read)
      Value* at = checkedIndex(convert(loadElem(I.id, iIdx, I.name), I.type.dtype, DType::I64), size);
      if (size == 0) {
        acc = llvm::Constant::getNullValue(regType(t));
      } else {
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

}  // namespace policyc::codegen::llvmemit
