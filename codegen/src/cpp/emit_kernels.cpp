// The C++ emitter's kernel functions and the other templates: pointwise loop nests, reductions
// (rows and axes) and copies (pad, gather); pooling is in emit_pool.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "emitter.h"

namespace policyc::codegen::cppemit {

namespace {
// The maximum of `value` over `var` in [0, n) for f32 values: pc::maxShort for a short row
// (KernelSchedule::kShortRow; two vectors, no branch per value), else pc::maxOf.
std::string maxOfCall(const ir::Dim& n, const std::string& var, const std::string& value) {
  if (n.isStatic() && n.value() > 0 && n.value() <= KernelSchedule::kShortRow) return fmt::format("pc::maxShort<{}>([&](int64_t {}) {{ return {}; }})", n.value(), var, value);
  return fmt::format("pc::maxOf({}, [&](int64_t {}) {{ return {}; }})", dimStr(n), var, value);
}
}  // namespace

std::string Emitter::emitKernel(const Kernel& k, size_t index) {
  auto it = impls_.find(index);
  if (it == impls_.end()) return emitKernelFn(k, index, std::nullopt);
  std::string s;
  for (Impl im : it->second) s += emitKernelFn(k, index, im);
  return s;
}

std::string Emitter::fnName(const Kernel& k, std::optional<Impl> im) const {
  for (const auto& [ki, v] : impls_) {
    if (&p_.kernels[ki] == &k && v.size() > 1 && im) return fmt::format("{}__{}", k.name, implName(*im));
  }
  return k.name;
}

std::string Emitter::emitKernelFn(const Kernel& k, size_t index, std::optional<Impl> impl) {
  split_ = &s_.kernels[index].splitOf(impl);
  faultyAnchor_ = s_.kernels[index].anchorFault;
  const std::string name = fnName(k, impl);
  const bool ext = impl && isExtern(*impl);
  std::string s = fmt::format("// kernel {} ({}) domain {}{}\n", name, kernelKindName(k.kind), cComment(ir::shapeStr(k.domain)),
                              impl ? fmt::format(", implementation {}", implName(*impl)) : "");
  for (const ir::Node* n : k.sources) s += fmt::format("//   {}\n", sourceStr(n));
  std::string objects = ext ? emitOnednnObject(k, index, *impl) : "";
  s += objects;
  std::set<int> roots;
  for (int id : k.reads()) roots.insert(p_.buffer(id).root);
  for (int id : k.writes()) roots.insert(p_.buffer(id).root);
  if (packable(k)) {
    // Read through their packed copies (conv_rows and dot_rows read the weight as it is).
    if (impl != Impl::ConvRows && impl != Impl::DotRows) roots.erase(p_.buffer(k.anchorInputs[1]).root);
    if (k.anchorInputs.size() > 2) roots.erase(p_.buffer(k.anchorInputs[2]).root);
  }
  std::vector<RootPtr> ptrs;
  for (int r : roots) {
    if (p_.buffer(r).kind == BufferKind::Param && !s_.paramOffset.count(r)) continue;
    ptrs.push_back(rootPtr(r, s_.kernels[index].disjointTemps));
  }
  // A pointwise kernel's body takes the root pointers as parameters, restrict where they may be:
  // GCC honours restrict on a parameter (inlined too), not on a local pointer into the
  // workspace, and without it did not combine a row's scalar loads and stores into vectors (SLP:
  // a [64, 8] division 4x slower). The LLVM printer's alias scopes say the same. Not the other
  // forms: a generic average pool's loop nest so took 4x its time.
  const std::string signature = "const void* const* inputs, void* const* outputs, int64_t batch, unsigned char* ws,\n    int* status, int64_t lo, int64_t hi";
  std::string wrapper;
  auto locals = [&] {
    for (const RootPtr& r : ptrs) s += fmt::format("  {} {} = {};\n", r.type, r.name, r.init);
  };
  if (ext) {
    s += fmt::format("PC_KERNEL bool {}(const void* const* inputs, void* const* outputs, int64_t batch, unsigned char* ws,\n"
                     "    int32_t threads) {{\n",
                     name);
    s += "  (void)inputs; (void)outputs;\n";
    locals();
  } else if (s_.kernels[index].form == Form::Pointwise) {
    // status: where the kernel reports a value outside an operator's domain (pc::report).
    std::vector<std::string> params, args;
    for (const RootPtr& r : ptrs) params.push_back(fmt::format("{} {}", r.type, r.name)), args.push_back(r.init);
    s += fmt::format("PC_INLINE void {}_body({}{}) {{\n", name, signature, params.empty() ? "" : fmt::format(",\n    {}", fmt::join(params, ",\n    ")));
    s += "  (void)inputs; (void)outputs; (void)batch; (void)ws; (void)status; (void)lo; (void)hi;\n";
    wrapper = fmt::format("PC_KERNEL void {}({}) {{\n  {}_body(inputs, outputs, batch, ws, status, lo, hi{});\n}}\n\n", name, signature, name,
                          args.empty() ? "" : fmt::format(",\n      {}", fmt::join(args, ",\n      ")));
  } else {
    s += fmt::format("PC_KERNEL void {}({}) {{\n", name, signature);
    s += "  (void)inputs; (void)outputs; (void)batch; (void)ws; (void)status; (void)lo; (void)hi;\n";
    locals();
  }
  for (const ir::Node* n : k.sources) {
    if (faulty(n, InjectedFault::Kind::Compile)) {
      s += fmt::format("  policyc_injected_compile_fault;  // INJECTED FAULT in {}\n", sourceStr(n));
    } else if (faulty(n, InjectedFault::Kind::Crash)) {
      s += fmt::format("  __builtin_trap();  // INJECTED FAULT in {}\n", sourceStr(n));
    }
  }
  const int64_t per = impl ? panelsPerTile(*impl) : 2;
  if (ext) {
    s += emitOnednnCall(k, index, *impl);
  } else {
    switch (s_.kernels[index].form) {
      case Form::Pointwise: s += emitPointwise(k); break;
      case Form::Gemm: s += emitLinear(k); break;
      case Form::PackedGemm:
        s += impl == Impl::DotRows ? emitDotRows(k, index) : emitPackedLinear(k, index, per, impl ? rowsPerTile(*impl) : 4);
        break;
      case Form::DirectConv: s += emitConv(k, index); break;
      case Form::PackedConv:
        s += impl == Impl::ConvRows ? emitConvRows(k, index) : impl == Impl::WinogradF23 ? emitWinograd(k, index) : emitPackedConv(k, index, impl);
        break;
      case Form::Pool: s += emitPool(k); break;
      case Form::MaxPoolRows: s += emitMaxPoolRows(k); break;
      case Form::AvgPoolRows: s += emitAvgPoolRows(k); break;
      case Form::RowReduction:
      case Form::AxisReduction: s += emitReduction(k); break;
      case Form::Copy: s += emitCopy(k); break;
    }
  }
  s += "}\n\n" + wrapper;
  return s;
}

std::string Emitter::emitPointwise(const Kernel& k) const {
  const int axis = split_->axis;
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  if (ks.vectorAxis >= 0) {
    // KernelSchedule::vectorAxis innermost where its loop is long enough.
    const std::string n = ks.vectorAxis == axis ? "hi - lo" : dimStr(k.domain[static_cast<size_t>(ks.vectorAxis)]);
    return fmt::format("  if ({} >= {}) {{\n{}  }} else {{\n{}  }}\n", n, KernelSchedule::kVectorAxisMin,
                       pointwiseNest(k, ks, loopOrder(k, ks, true), "    "), pointwiseNest(k, ks, loopOrder(k, ks, false), "    "));
  }
  return pointwiseNest(k, ks, loopOrder(k, ks, false), "  ");
}

std::string Emitter::pointwiseNest(const Kernel& k, const KernelSchedule& ks, const std::vector<size_t>& order, std::string indent) const {
  BodyCtx c{"v", axisVars("i", k.domain.size()), ""};
  const int axis = split_->axis;
  // Each instruction goes in the outermost loop its operands allow (a per-channel parameter's
  // load, and what is computed from it alone, outside the loops over the pixels). GCC would not
  // hoist them itself: it cannot prove the stores leave the weights alone. Not in a kernel that
  // can fail (a hoisted division would report for iterations that never run), nor over an empty
  // inner extent (a hoisted load would read past an empty buffer).
  const std::vector<int> level = loopLevels(k, order);
  std::vector<std::vector<size_t>> at(k.domain.size() + 1);  // at[L + 1]: inside loop L (L = -1: before all)
  for (size_t i = 0; i < k.body.size(); ++i) at[static_cast<size_t>(level[i] + 1)].push_back(i);
  std::string s = emitBody(k.body, c, indent, &at[0]);
  // Collapsed axes (KernelSchedule::collapseFrom) loop once; the last walks their run.
  const std::vector<ir::Dim> extents = loopExtents(k, ks);
  for (size_t li = 0; li < order.size(); ++li) {
    const size_t d = order[li];
    if (d >= ks.collapseFrom && d + 1 < k.domain.size()) {
      s += fmt::format("{}{{\n{}  const int64_t {} = 0;  // collapsed into {}'s loop\n", indent, indent, c.vars[d], c.vars.back());
      indent += "  ";
    } else {
      // KernelSchedule::unrollCalls: the innermost loop's libm calls at call sites of their own.
      // Else an innermost loop of 32 values or more unrolled 4 times (after GCC vectorises it:
      // 4 vectors an iteration, as LLVM's vectoriser interleaves them; hard_sigmoid over
      // [64, 256] took 1.5-3.3 us rolled, 1.4-2.0 so).
      const int unroll = ks.unrollCalls ? ks.unrollCalls : (!extents[d].isStatic() || extents[d].value() >= 32) ? 4 : 0;
      if (unroll && li + 1 == order.size()) s += fmt::format("{}#pragma GCC unroll {}\n", indent, unroll);
      s += loopHeader(c.vars[d], dimStr(extents[d]), static_cast<int>(d) == axis, indent);
      // KernelSchedule::stridedAxes: an outer loop along which the accesses stride stays scalar
      // where the innermost loop fills a vector (8 values or more, which GCC's SLP combines).
      // GCC 12 has no pragma for it, but does not vectorise a loop holding an asm statement; it
      // had vectorised a [batch, 10] copy across the rows, a value at a time into vectors
      // (2.6x slower than its rows as one vector each). Rows of 4 it did better across them.
      // So too the loops around KernelSchedule::vectorAxis moved innermost: GCC had vectorised a
      // [batch, 6] softplus chain along its 6 (restrict made that look possible), 4x slower.
      const ir::Dim& inner = extents[order.back()];
      const bool aroundVectorAxis = ks.vectorAxis >= 0 && order.back() == static_cast<size_t>(ks.vectorAxis);
      if (!ks.transpose && li + 1 < order.size() &&
          (aroundVectorAxis || (d < ks.stridedAxes.size() && ks.stridedAxes[d] && (!inner.isStatic() || inner.value() >= 8)))) {
        s += fmt::format("{}__asm__ volatile(\"\");\n", indent);
      }
    }
    s += emitBody(k.body, c, indent, &at[li + 1]);
  }
  s += closeLoops(k.domain.size(), indent);
  return s;
}

std::vector<int> Emitter::loopLevels(const Kernel& k, const std::vector<size_t>& order) {
  const int inner = static_cast<int>(k.domain.size()) - 1;
  bool safe = !k.canFail();
  for (const ir::Dim& d : k.domain) safe = safe && (d.isBatch() || d.value() > 0);
  std::vector<int> level(k.body.size(), inner);
  if (!safe) return level;
  std::vector<int> position(order.size());  // of each axis's loop, outermost 0
  for (size_t li = 0; li < order.size(); ++li) position[order[li]] = static_cast<int>(li);
  for (size_t i = 0; i < k.body.size(); ++i) {
    const Instr& in = k.body[i];
    int l = -1;
    switch (in.opcode) {
      case Opcode::Load:
        for (const IndexExpr& e : in.index) {
          if (e.axis >= 0) l = std::max(l, position[static_cast<size_t>(e.axis)]);
        }
        break;
      case Opcode::Const: break;
      case Opcode::Apply:
        for (int a : in.args) l = std::max(l, level[static_cast<size_t>(a)]);
        break;
      case Opcode::Store:
      case Opcode::Acc: l = inner; break;
    }
    level[i] = l;
  }
  return level;
}

std::string Emitter::emitOperandLambda(const Kernel& k, const Buffer& X) const {
  std::vector<std::string> xv = axisVars("x", X.type.rank());
  std::string params;
  for (size_t d = 0; d < xv.size(); ++d) params += fmt::format("{}int64_t {}", d ? ", " : "", xv[d]);
  DType t = X.type.dtype;
  std::string s = fmt::format("  // the reduced operand {} at [{}]\n", cComment(X.type.str()), fmt::join(xv, ", "));
  s += fmt::format("  auto operand = [&]({}) -> {} {{\n", params, ctype(t));
  if (!k.prologue.empty()) {
    BodyCtx c{"p", xv, ""};
    s += "    // prologue\n";
    s += emitBody(k.prologue, c, "    ");
    s += fmt::format("    return static_cast<{}>(p{});\n", ctype(t), k.prologueResult);
  } else {
    std::vector<std::string> idx(xv.begin(), xv.end());
    s += fmt::format("    return {};\n", loadExpr(X.id, addressOf(X.id, idx)));
  }
  s += "  };\n";
  return s;
}

std::string Emitter::operandCall(const std::vector<std::string>& idx) const {
  return fmt::format("operand({})", fmt::join(idx, ", "));
}

std::string Emitter::emitReduction(const Kernel& k) const {
  const ir::Node& n = *k.anchor;
  // The operand's type: with a prologue, anchorInputs[0] is never stored but keeps its type.
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  size_t r = X.type.rank();
  std::vector<std::string> vars = axisVars("i", k.domain.size());
  std::string s = emitEpilogueLambda(k, accType(k));
  s += emitOperandLambda(k, X);
  s += anchorComment(k);
  DType outT = accType(k);
  const char* OT = ctype(outT);

  if (n.isOp(Op::Softmax) || n.isOp(Op::LogSoftmax) || n.isOp(Op::LayerNorm)) {
    // Rows along the trailing axes (softmax: one axis), every other axis is a loop.
    size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
    bool ln = n.isOp(Op::LayerNorm);
    std::vector<size_t> reduced;
    for (size_t d = axis; d < (ln ? r : axis + 1); ++d) reduced.push_back(d);
    std::vector<size_t> outer;
    for (size_t d = 0; d < r; ++d) {
      if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) outer.push_back(d);
    }
    std::string indent = "  ";
    const int splitAt = split_->axis;
    const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
    // A softmax over short rows (KernelSchedule::kShortRow) along the last axis, its rows split
    // between threads by the first: eight rows at a time, a row a vector lane (pc::softmaxRows8;
    // the same bits as one row at a time, below, which takes the rows past the last eight).
    // `across`: the rows an index of the first axis holds (KernelSchedule::rowsAcross).
    const int64_t across = ks.rowsAcross;
    // The outer axes' indices of row `q` (rows in the loops' order), and the reduced one `j`.
    // Divided as unsigned (a row is never negative): shifts and masks where signed division by a
    // power of two takes sign fixups, over 8 rows a block twice a block (a softmax over rows of 8
    // 40.5 -> 25.3 us for 2048 rows).
    auto rowIndices = [&](const std::string& q, const std::string& j) {
      std::string t = fmt::format("const uint64_t uq = {}; const int64_t {} = uq / {}", q, vars[0], across);
      int64_t inner = across;
      for (size_t i = 1; i < outer.size(); ++i) {
        inner /= k.domain[outer[i]].value();
        t += fmt::format(", {} = uq / {} % {}", vars[outer[i]], inner, k.domain[outer[i]].value());
      }
      return t + fmt::format(", {} = {};", vars[reduced[0]], j);
    };
    if (across) {
      s += fmt::format("{}int64_t rb = lo * {};\n{}for (; rb + 8 <= hi * {}; rb += 8) {{\n", indent, across, indent, across);
      s += fmt::format("{}  pc::softmaxRows8<{}{}>([&](int64_t r, int64_t j) {{ {} return static_cast<float>({}); }},\n", indent, ks.keptExps,
                       n.isOp(Op::LogSoftmax) ? ", true" : "",
                       rowIndices("(rb + r)", "j"), operandCall(vars));
      s += fmt::format("{}      [&](int64_t r, int64_t j, float y) {{ {} {} }});\n{}}}\n", indent, rowIndices("(rb + r)", "j"),
                       callEpilogue(vars, fmt::format("static_cast<{}>(y)", OT)), indent);
      // The rows left (fewer than eight), one at a time.
      s += fmt::format("{}for (int64_t {} = rb / {}; {} < hi; ++{}) {{\n", indent, vars[0], across, vars[0], vars[0]);
      indent += "  ";
      for (size_t i = 1; i < outer.size(); ++i) s += loopHeader(vars[outer[i]], dimStr(k.domain[outer[i]]), false, indent);
      std::string flat = vars[0];
      for (size_t i = 1; i < outer.size(); ++i) flat = fmt::format("({}) * {} + {}", flat, k.domain[outer[i]].value(), vars[outer[i]]);
      s += fmt::format("{}if ({} < rb) continue;\n", indent, flat);
    } else {
      for (size_t d : outer) s += loopHeader(vars[d], dimStr(k.domain[d]), static_cast<int>(d) == splitAt, indent);
    }
    auto innerLoops = [&](const std::string& body) {
      std::string t;
      std::string ind = indent;
      for (size_t d : reduced) {
        t += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", ind, vars[d], vars[d], dimStr(k.domain[d]), vars[d]);
        ind += "  ";
      }
      t += ind + body + "\n";
      for (size_t i = 0; i < reduced.size(); ++i) {
        ind.resize(ind.size() - 2);
        t += ind + "}\n";
      }
      return t;
    };
    std::string x = operandCall(vars);
    if (ln) {
      int64_t cols = 1;
      for (size_t d : reduced) cols *= k.domain[d].value();
      s += fmt::format("{}double mean = 0, var = 0;\n", indent);
      const bool normRow = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].normRow != 0;
      if (normRow) {
        // KernelSchedule::normRow: both sums through pc::sumOf.
        const std::string v = vars[reduced[0]];
        s += fmt::format("{}mean = pc::sumOf({}, [&](int64_t {}) {{ return {}; }});\n", indent, cols, v, x);
        s += fmt::format("{}mean /= {};\n", indent, cols);
        s += fmt::format("{}var = pc::sumOf({}, [&](int64_t {}) {{ const float d = static_cast<float>(double({}) - mean); return d * d; }});\n",
                         indent, cols, v, x);
      } else {
        s += innerLoops(fmt::format("mean += {};", x));
        s += fmt::format("{}mean /= {};\n", indent, cols);
        s += innerLoops(fmt::format("{{ const double d = {} - mean; var += d * d; }}", x));
      }
      s += fmt::format("{}var /= {};\n", indent, cols);
      s += fmt::format("{}const double invStd = 1.0 / pc::sqrt(var + {});\n", indent, literal(n.attrFloat("epsilon"), DType::F64));
      // scale and bias broadcast against the normalised shape.
      auto paramAt = [&](int id) {
        const Buffer& P = p_.buffer(id);
        std::vector<std::string> idx(P.type.rank(), "0");
        size_t lead = r - P.type.rank();
        for (size_t d = 0; d < P.type.rank(); ++d) {
          bool bc = P.type.shape[d].isStatic() && P.type.shape[d].value() == 1 &&
                    !(k.domain[lead + d].isStatic() && k.domain[lead + d].value() == 1);
          idx[d] = bc ? "0" : vars[lead + d];
        }
        return loadExpr(id, addressOf(id, idx));
      };
      std::string y = fmt::format("double y = ({} - mean) * invStd * {};", x, paramAt(k.anchorInputs[1]));
      if (k.anchorInputs.size() > 2) y += fmt::format(" y += {};", paramAt(k.anchorInputs[2]));
      // One vector of doubles of the target's width a block: 4 (AVX2), 8 (AVX-512).
      const int64_t block = narrowVectorTarget(o_.target) ? 4 : 8;
      if (normRow && cols % block == 0 && !mathHeavy(k)) {
        // Blocks of values, the block's loop kept scalar: GCC then converts a block's floats to
        // a vector of doubles and back, as LLVM does. Vectorising the row's loop 8 floats at a
        // time on AVX2, it split and joined halves (extracts and inserts): layer_norm 1.3x slower.
        // Not under a transcendental epilogue (a tanh), which the row's vector loop computes 8 at
        // a time and blocks of 4 did not (1.6x slower).
        const std::string v = vars[reduced[0]];
        s += fmt::format("{}for (int64_t {}b = 0; {}b < {}; {}b += {}) {{\n{}  __asm__ volatile(\"\");\n", indent, v, v, cols, v, block, indent);
        s += fmt::format("{}  {} o[{}];\n", indent, OT, block);
        s += fmt::format("{}  for (int64_t l = 0; l < {}; ++l) {{ const int64_t {} = {}b + l; {} o[l] = static_cast<{}>(y); }}\n", indent, block, v, v, y, OT);
        s += fmt::format("{}  for (int64_t l = 0; l < {}; ++l) {{ const int64_t {} = {}b + l; {} }}\n{}}}\n", indent, block, v, v,
                         callEpilogue(vars, "o[l]"), indent);
      } else if (ks.normStaged) {
        // KernelSchedule::normStaged: the row normalised into a buffer first (doubles, 8 lanes a
        // vector), then the epilogue over it in a loop of its own (floats, 16 lanes a vector).
        const std::string v = vars[reduced[0]];
        s += fmt::format("{}{} row[{}];\n", indent, OT, cols);
        s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{ {} row[{}] = static_cast<{}>(y); }}\n", indent, v, v, cols, v, y, v, OT);
        s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{ {} }}\n", indent, v, v, cols, v, callEpilogue(vars, fmt::format("row[{}]", v)));
      } else {
        s += innerLoops(fmt::format("{{ {} {} }}", y, callEpilogue(vars, fmt::format("static_cast<{}>(y)", OT))));
      }
    } else {
      s += fmt::format("{}double maxValue = -pc::inf<double>(), sum = 0;\n", indent);
      if (X.type.dtype == DType::F32 && reduced.size() == 1) {
        // The row's maximum vectorised (pc::maxOf).
        s += fmt::format("{}maxValue = {};\n", indent, maxOfCall(k.domain[reduced[0]], vars[reduced[0]], x));
      } else {
        s += innerLoops(fmt::format("maxValue = pc::maxNaNScan<double>(maxValue, {});", x));
      }
      // KernelSchedule::keptExps: the row's exps kept for the second pass.
      const int64_t kept = ks.keptExps;
      if (kept && ks.f32Exps) {
        // KernelSchedule::f32Exps: the exps in f32 first, then their sum.
        const std::string j = vars[reduced[0]];
        s += fmt::format("{}float e[{}];\n", indent, kept);
        if (kept <= KernelSchedule::kShortRow && reduced.size() == 1) {
          // A short row: its exps eight lanes at a time (pc::expFull; the lanes past the row
          // are exps of -inf, not kept).
          for (int64_t c = 0; c < kept; c += 8) {
            s += fmt::format("{}{{\n{}  const pc::f32x8 ev = pc::expFull(pc::rowLanes8<{}, {}>([&](int64_t {}) {{ return static_cast<float>({}); }}) - static_cast<float>(maxValue));\n",
                             indent, indent, c, kept, j, x);
            s += fmt::format("{}  for (int64_t l = 0; l < {}; ++l) e[{} + l] = ev[l];\n{}}}\n", indent, std::min<int64_t>(8, kept - c), c, indent);
          }
        } else {
          s += innerLoops(fmt::format("e[{}] = pc::exp(static_cast<float>({}) - static_cast<float>(maxValue));", j, x));
          // The exps read back from memory as vectors (as pc::sumOf's staged values): a row's
          // loops unrolled whole, GCC kept them in registers and gathered pc::sumOf's vectors
          // lane by lane (softmax over 64 at 1.4x LLVM's time).
          s += fmt::format("{}__asm__ volatile(\"\" : : \"r\"(e) : \"memory\");\n", indent);
        }
        s += fmt::format("{}sum = pc::sumOf({}, [&](int64_t {}) {{ return e[{}]; }});\n", indent, kept, j, j);
      } else if (kept) {
        s += fmt::format("{}double e[{}];\n", indent, kept);
        s += innerLoops(fmt::format("{{ const double t = pc::exp(double({}) - maxValue); e[{}] = t; sum += t; }}", x, vars[reduced[0]]));
      } else {
        s += innerLoops(fmt::format("sum += pc::exp(double({}) - maxValue);", x));
      }
      // log_softmax: the sum's log once a row (GCC called libm's log for every value).
      if (n.isOp(Op::LogSoftmax)) s += fmt::format("{}const double logSum = pc::log(sum);\n", indent);
      std::string y = n.isOp(Op::LogSoftmax) ? fmt::format("double({}) - maxValue - logSum", x)
                      : kept                 ? fmt::format("double(e[{}]) / sum", vars[reduced[0]])
                                             : fmt::format("pc::exp(double({}) - maxValue) / sum", x);
      s += innerLoops(callEpilogue(vars, fmt::format("static_cast<{}>({})", OT, y)));
    }
    for (size_t i = 0; i < outer.size(); ++i) {
      indent.resize(indent.size() - 2);
      s += indent + "}\n";
    }
    return s;
  }

  // reduce_* / argmax / global_avg_pool: which operand axes are reduced, and how the output
  // (the domain) indexes the kept ones.
  const ReducedAxes axesOf = reducedAxes(n, r);
  const std::vector<bool>& reduced = axesOf.reduced;
  const bool keepdims = axesOf.keepdims;
  std::vector<std::string> xv = axisVars("x", r);
  std::vector<std::string> outIdx;  // domain index in terms of x variables
  for (size_t d = 0; d < r; ++d) {
    if (!reduced[d]) outIdx.push_back(xv[d]);
    else if (keepdims) outIdx.push_back("0");
  }
  if (outIdx.size() != k.domain.size()) fail("internal: reduction '{}' domain rank mismatch", n.name());
  std::string indent = "  ";
  const int axis = split_->axis;
  int64_t count = 1;
  for (size_t d = 0; d < r; ++d) {
    if (reduced[d]) count *= X.type.shape[d].value();
  }
  std::string x = operandCall(xv);
  bool isArg = n.isOp(Op::ArgMax);
  bool isMax = n.isOp(Op::ReduceMax);
  const bool isProd = n.isOp(Op::ReduceProd);
  const std::optional<KernelSchedule::SumRun>& run = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].sumRun;
  // The result of one row's sum `acc`: a mean divides it, then the epilogue takes it.
  auto finishSum = [&](const std::string& ind) {
    std::string t;
    if (n.isOp(Op::ReduceMean) || n.isOp(Op::GlobalAvgPool)) {
      t += fmt::format("{}acc /= {};\n", ind, static_cast<double>(count) == 0 ? "0.0" : std::to_string(count));
      if (!ir::isFloat(outT)) t += fmt::format("{}acc = pc::trunc(acc);\n", ind);
    }
    return t + fmt::format("{}{}\n", ind, callEpilogue(outIdx, fmt::format("pc::cast<{}, double>(acc)", OT)));
  };
  // Sums (products) of short f32 rows (rows x0 of [rows, 8]: shorter than a sumOf run) eight
  // rows at a time, a row a vector lane (pc::rowSums8: the same order of adds), the rows past the
  // last eight one by one below. GCC vectorised neither the short row nor the rows around it.
  const bool rowsAcross = !isArg && !isMax && !run && r == 2 && !reduced[0] && reduced[1] && X.type.dtype == DType::F32 &&
                          X.type.shape[1].isStatic() && X.type.shape[1].value() == 8;
  if (rowsAcross) {
    const bool split = axis == 0;
    s += fmt::format("{}int64_t xb = {};\n", indent, split ? "lo" : "0");
    const std::string end = split ? "hi" : dimStr(X.type.shape[0]);
    s += fmt::format("{}for (; xb + 8 <= {}; xb += 8) {{\n", indent, end);
    s += fmt::format("{}  double sums[8];\n", indent);
    s += fmt::format("{}  pc::rowSums8<{}, {}>({}, [&](int64_t r, int64_t j) {{ return {}; }}, sums);\n", indent, X.type.shape[1].value(),
                     isProd, isProd ? "1.0" : "0.0", operandCall({"xb + r", "j"}));
    s += fmt::format("{}  for (int64_t {} = xb; {} < xb + 8; ++{}) {{\n", indent, xv[0], xv[0], xv[0]);
    s += fmt::format("{}    double acc = sums[{} - xb];\n", indent, xv[0]);
    s += finishSum(indent + "    ");
    s += fmt::format("{}  }}\n{}}}\n", indent, indent);
    s += fmt::format("{}for (int64_t {} = xb; {} < {}; ++{}) {{\n", indent, xv[0], xv[0], end, xv[0]);
    indent += "  ";
  } else {
    for (size_t d = 0; d < r; ++d) {
      if (!reduced[d]) s += loopHeader(xv[d], dimStr(X.type.shape[d]), static_cast<int>(d) == axis, indent);
    }
  }
  if (isArg) {
    size_t ax = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
    bool last = n.attrInt("select_last_index") != 0;
    const int64_t N = X.type.shape[ax].value();
    s += fmt::format("{}int64_t best = 0;\n", indent);
    if (X.type.dtype == DType::F32 && N > 0 && N <= KernelSchedule::kShortRow) {
      // A short row as two vectors, its maximum and the matching lanes by movemask
      // (pc::argmaxShort): no branch on where the match lies, which a predictor cannot know.
      s += fmt::format("{}best = pc::argmaxShort<{}, {}>([&](int64_t {}) {{ return {}; }});\n", indent, N, last, xv[ax], x);
    } else if (X.type.dtype == DType::F32 && N > 0) {
      // f32: the maximum first (pc::maxOf, vectorised), then the first (last) index holding it;
      // NaN counts as the largest value, as in numpy.
      s += fmt::format("{}const float m = pc::maxOf({}, [&](int64_t {}) {{ return {}; }});\n", indent, N, xv[ax], x);
      const std::string scan = last ? fmt::format("for (int64_t {0} = {1} - 1; {0} >= 0; --{0})", xv[ax], N)
                                    : fmt::format("for (int64_t {0} = 0; {0} < {1}; ++{0})", xv[ax], N);
      // One loop per case; the common one compares sixteen values a step (pc::findEqual,
      // KernelSchedule::kScanLanes), the rare NaN maximum one at a time.
      s += fmt::format("{}if (m != m) {{\n", indent);
      s += fmt::format("{}  {} {{\n", indent, scan);
      s += fmt::format("{}    if ({} != {}) {{ best = {}; break; }}\n", indent, x, x, xv[ax]);
      s += fmt::format("{}  }}\n{}}} else {{\n", indent, indent);
      s += fmt::format("{}  best = pc::findEqual<{}>({}, m, [&](int64_t {}) {{ return {}; }});\n", indent, last, N, xv[ax], x);
      s += fmt::format("{}}}\n", indent);
    } else {
      std::vector<std::string> first = xv;
      first[ax] = "0";
      s += fmt::format("{}double bestValue = {};\n", indent, operandCall(first));
      s += fmt::format("{}for (int64_t {} = 1; {} < {}; ++{}) {{\n", indent, xv[ax], xv[ax], N, xv[ax]);
      s += fmt::format("{}  const double v = {};\n", indent, x);
      s += fmt::format("{}  // NaN counts as the largest value, as in numpy.\n", indent);
      s += fmt::format("{}  const bool better = bestValue != bestValue ? false : (v != v || v > bestValue);\n", indent);
      if (last) {
        s += fmt::format("{}  const bool tie = v != v ? bestValue != bestValue : v == bestValue;\n", indent);
        s += fmt::format("{}  if (better || tie) {{ best = {}; bestValue = v; }}\n", indent, xv[ax]);
      } else {
        s += fmt::format("{}  if (better) {{ best = {}; bestValue = v; }}\n", indent, xv[ax]);
      }
      s += indent + "}\n";
    }
    s += fmt::format("{}{}\n", indent, callEpilogue(outIdx, fmt::format("static_cast<{}>(best)", OT)));
  } else {
    s += fmt::format("{}double acc = {};\n", indent, isMax ? "-pc::inf<double>()" : isProd ? "1" : "0");
    // An f32 maximum over X's contiguous last axis takes it in one pc::maxOf (vectorised from 16
    // values). Over a strided axis the maximum per element stays: GCC vectorises neither across
    // the kept axes then (LLVM does, with its maxOf unrolled: 0.3 against 2.5 us at batch 64 for
    // multi_input's reduce_max over 4 rows of 16), and pc::maxOf's selects cost 2x the branches.
    size_t innermost = r;
    for (size_t d = 0; d < r; ++d) {
      if (reduced[d]) innermost = d;
    }
    const bool vecMax = isMax && X.type.dtype == DType::F32 && innermost == r - 1 && (!k.prologue.empty() || X.strides.back() == 1);
    if (isMax && X.type.dtype == DType::F32 && !vecMax) {
      // In f32 (the maximum of f32 values is one of them): GCC then vectorises the kept axis 8
      // lanes a vector, where doubles took 4 and a conversion each.
      s += fmt::format("{}float accF = -pc::inf<float>();\n{}bool nanSeen = false;\n", indent, indent);
    }
    // Axes not walked by a loop here: pc::maxOf's, or the run of pc::sumOf (KernelSchedule::sumRun).
    auto inner = [&](size_t d) { return run ? d >= run->first && d <= run->last : vecMax && d == innermost; };
    std::string ind = indent;
    for (size_t d = 0; d < r; ++d) {
      if (!reduced[d] || inner(d)) continue;
      s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", ind, xv[d], xv[d], X.type.shape[d].value(), xv[d]);
      ind += "  ";
    }
    if (run) {
      std::string value;
      if (run->first == run->last) {
        std::vector<std::string> at = xv;
        at[run->first] = "j";
        value = operandCall(at);
      } else {  // axes contiguous in memory (no prologue): value j of the run at its start + j
        std::vector<std::string> at = xv;
        for (size_t d = run->first; d <= run->last; ++d) at[d] = "0";
        value = loadExpr(X.id, addressOf(X.id, at) + " + j");
      }
      s += fmt::format("{}acc += pc::sumOf{}({}, [&](int64_t j) {{ return {}; }});\n", ind, run->staged ? "<true>" : "", run->count, value);
    } else if (vecMax) {
      s += fmt::format("{}acc = pc::maxNaNScan<double>(acc, {});\n", ind, maxOfCall(X.type.shape[innermost], xv[innermost], x));
    } else if (isMax && X.type.dtype == DType::F32) {
      // Over a strided axis: the larger by a select (ties keep the earlier), any NaN beside it,
      // branch-free, so that GCC unrolls the short reduced loop and vectorises the kept one
      // around it (a scan's branch per value kept it scalar: 2 against LLVM's 0.2 us for
      // multi_input's maximum over 4 rows of 16 at batch 64).
      s += fmt::format("{}{{ const float v = {}; accF = v > accF ? v : accF; nanSeen |= v != v; }}\n", ind, x);
    } else {
      s += isMax    ? fmt::format("{}acc = pc::maxNaNScan<double>(acc, {});\n", ind, x)
           : isProd ? fmt::format("{}acc *= {};\n", ind, x)
                    : fmt::format("{}acc += {};\n", ind, x);
    }
    for (size_t d = 0; d < r; ++d) {
      if (!reduced[d] || inner(d)) continue;
      ind.resize(ind.size() - 2);
      s += ind + "}\n";
    }
    if (isMax && X.type.dtype == DType::F32 && !vecMax) s += fmt::format("{}acc = nanSeen ? pc::nan<double>() : double(accF);\n", indent);
    s += finishSum(indent);
  }
  for (size_t d = 0; d < r; ++d) {
    if (reduced[d]) continue;
    indent.resize(indent.size() - 2);
    s += indent + "}\n";
  }
  return s;
}

std::string Emitter::checkedIndex(const std::string& indent, const std::string& index, int64_t size) {
  std::string s = fmt::format("{}int64_t at = static_cast<int64_t>({});\n", indent, index);
  s += fmt::format("{}if (at < 0) at += {};\n", indent, size);
  s += fmt::format("{}if (at < 0 || at >= {}) {{ pc::report(status, pc::kIndexError); at = 0; }}\n", indent, size);
  return s;
}

std::string Emitter::emitCopy(const Kernel& k) const {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  std::vector<std::string> vars = axisVars("i", k.domain.size());
  DType t = accType(k);
  std::string indent;
  size_t r = X.type.rank();
  // A gather reads its index once per index element, in the loop of the index's last axis,
  // not once per copied value (the loops inside stay a plain, vectorisable copy). Not over an
  // empty inner extent: the index would be checked for a copy that never happens.
  size_t indexLoops = k.domain.size();
  if (n.isOp(Op::Gather)) {
    indexLoops = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r)) + p_.buffer(k.anchorInputs[1]).type.rank();
    for (size_t d = indexLoops; d < k.domain.size(); ++d) {
      if (!k.domain[d].isBatch() && k.domain[d].value() == 0) indexLoops = k.domain.size();
    }
  }
  if (const std::optional<PadRows> rows = padRows(p_, k, *split_)) {
    std::string s = openTemplate(k, t, vars, indent, r - 1);
    const std::vector<int64_t>& pads = n.attrInts("pads");
    std::vector<std::string> idx;
    std::string inBounds;
    for (size_t d = 0; d + 1 < r; ++d) {
      if (pads[d] == 0 && pads[r + d] == 0) {
        idx.push_back(vars[d]);
        continue;
      }
      s += fmt::format("{}const int64_t p{} = {} - {};\n", indent, d, vars[d], pads[d]);
      inBounds += fmt::format("{}p{} >= 0 && p{} < {}", inBounds.empty() ? "" : " && ", d, d, X.type.shape[d].value());
      idx.push_back(fmt::format("p{}", d));
    }
    const std::string& i = vars[r - 1];
    idx.push_back(rows->head ? fmt::format("{} - {}", i, rows->head) : i);
    const std::string value = literal(n.attrFloat("value"), t);
    const std::string x = fmt::format("static_cast<{}>({})", ctype(t), loadExpr(X.id, addressOf(X.id, idx)));
    auto loop = [&](const std::string& in, int64_t from, int64_t to, const std::string& acc) {
      return from < to ? fmt::format("{}for (int64_t {} = {}; {} < {}; ++{}) {}\n", in, i, from, i, to, i, callEpilogue(vars, acc)) : "";
    };
    const int64_t end = k.domain[r - 1].value(), mid = rows->head + rows->width;
    if (inBounds.empty()) {
      s += loop(indent, 0, rows->head, value) + loop(indent, rows->head, mid, x) + loop(indent, mid, end, value);
    } else {
      s += fmt::format("{}if ({}) {{\n", indent, inBounds);
      s += loop(indent + "  ", 0, rows->head, value) + loop(indent + "  ", rows->head, mid, x) + loop(indent + "  ", mid, end, value);
      s += fmt::format("{}}} else {{\n{}{}}}\n", indent, loop(indent + "  ", 0, end, value), indent);
    }
    s += closeLoops(r - 1, indent);
    return s;
  }
  std::string s = openTemplate(k, t, vars, indent, indexLoops);
  if (n.isOp(Op::Pad)) {
    const std::vector<int64_t>& pads = n.attrInts("pads");
    const std::string& mode = n.attrString("mode");
    std::vector<std::string> idx;
    std::string inBounds;
    for (size_t d = 0; d < r; ++d) {
      std::string pv = fmt::format("p{}", d);
      if (pads[d] == 0 && pads[r + d] == 0) {
        idx.push_back(vars[d]);
        continue;
      }
      int64_t size = X.type.shape[d].value();
      s += fmt::format("{}int64_t {} = {} - {};\n", indent, pv, vars[d], pads[d]);
      if (mode == "constant") {
        inBounds += fmt::format("{}{} >= 0 && {} < {}", inBounds.empty() ? "" : " && ", pv, pv, size);
      } else if (mode == "edge") {
        s += fmt::format("{}{} = {} < 0 ? 0 : ({} >= {} ? {} : {});\n", indent, pv, pv, pv, size, size - 1, pv);
      } else {  // reflect without repeating the edge
        if (size == 1) {
          s += fmt::format("{}{} = 0;\n", indent, pv);
        } else {
          s += fmt::format("{}while ({} < 0 || {} >= {}) {} = {} < 0 ? -{} : {} - {};\n", indent, pv, pv, size, pv, pv, pv,
                           2 * (size - 1), pv);
        }
      }
      idx.push_back(pv);
    }
    std::string load = loadExpr(X.id, addressOf(X.id, idx));
    if (mode == "constant" && !inBounds.empty()) {
      s += fmt::format("{}const {} acc = ({}) ? static_cast<{}>({}) : {};\n", indent, ctype(t), inBounds, ctype(t), load,
                       literal(n.attrFloat("value"), t));
    } else {
      s += fmt::format("{}const {} acc = {};\n", indent, ctype(t), load);
    }
  } else if (n.isOp(Op::Gather)) {
    const Buffer& I = p_.buffer(k.anchorInputs[1]);
    size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
    size_t ri = I.type.rank();
    std::vector<std::string> iIdx;
    for (size_t d = 0; d < ri; ++d) iIdx.push_back(vars[axis + d]);
    int64_t size = X.type.shape[axis].value();
    s += checkedIndex(indent, loadExpr(I.id, addressOf(I.id, iIdx)), size);
    for (size_t d = indexLoops; d < k.domain.size(); ++d) s += loopHeader(vars[d], dimStr(k.domain[d]), static_cast<int>(d) == split_->axis, indent);
    std::vector<std::string> idx;
    for (size_t d = 0; d < axis; ++d) idx.push_back(vars[d]);
    idx.push_back("at");
    for (size_t d = axis + 1; d < r; ++d) idx.push_back(vars[d - 1 + ri]);
    if (size == 0) {
      s += fmt::format("{}const {} acc = {}(0);\n", indent, ctype(t), ctype(t));
    } else {
      s += fmt::format("{}const {} acc = {};\n", indent, ctype(t), convertExpr(loadExpr(X.id, addressOf(X.id, idx)), X.type.dtype, t));
    }
  } else if (n.isOp(Op::GatherElements)) {
    // The index at the output's own position; the data read there with the axis replaced by it.
    const Buffer& I = p_.buffer(k.anchorInputs[1]);
    const size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
    const int64_t size = X.type.shape[axis].value();
    s += checkedIndex(indent, loadExpr(I.id, addressOf(I.id, vars)), size);
    std::vector<std::string> idx = vars;
    idx[axis] = "at";
    if (size == 0) {
      s += fmt::format("{}const {} acc = {}(0);\n", indent, ctype(t), ctype(t));
    } else {
      s += fmt::format("{}const {} acc = {};\n", indent, ctype(t), convertExpr(loadExpr(X.id, addressOf(X.id, idx)), X.type.dtype, t));
    }
  } else {
    unsupported("node '{}' ({}): no C++ for this copy template", n.name(), n.info().name);
  }
  s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
  s += closeLoops(k.domain.size(), indent);
  return s;
}

}  // namespace policyc::codegen::cppemit
