// The C++ emitter's GEMM templates: the general dot-product loops of linear layers, the packed-panel
// microkernel drivers with their (vector) epilogues, and the calls into oneDNN (convs: emit_conv.cpp).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "emitter.h"

namespace policyc::codegen::cppemit {

std::string Emitter::emitOnednnObject(const Kernel& k, size_t index, Impl im) const {
  std::optional<PostOpPlan> plan = im == Impl::OnednnPostOps ? postOpPlan(p_, k) : std::nullopt;
  std::string post;
  if (plan) {
    for (const PostOp& op : plan->ops) {
      if (!post.empty()) post += ", ";
      post += op.alg.empty() ? "{dnnl::algorithm::undef, 0.0f, 0.0f, true}"
                             : fmt::format("{{dnnl::algorithm::{}, {}, {}, false}}", op.alg, literal(op.alpha, DType::F32),
                                           literal(op.beta, DType::F32));
    }
  }
  const std::string weight = fmt::format("reinterpret_cast<const float*>(pc_weights + {})", s_.paramOffset.at(p_.buffer(k.anchorInputs[1]).root));
  const std::string bias = fmt::format("reinterpret_cast<const float*>(pc_weights + {})", s_.kernels[index].packedBias);
  // An updatable weight: oneDNN's reordered copy follows set_weights (pc::dnnl_ext::Primitives).
  const bool updatable = p_.buffer(p_.buffer(k.anchorInputs[1]).root).value->producer()->isUpdatable();
  const std::string generation = updatable ? "&pc_weights_lock.generation" : "nullptr";
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  if (k.kind == KernelKind::Linear) {
    return fmt::format("static pc::dnnl_ext::Linear {}({{{}, {}, {}, {{{}}}}}, {}, {}, {});\n", objectName(index, im), packedK(k),
                       packedN(k), X.strides[0], post, weight, bias, generation);
  }
  const ir::Node& n = *k.anchor;
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
  return fmt::format("static pc::dnnl_ext::Conv {}({{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {{{}}}, {}, {}}}, {}, {}, {});\n",
                     objectName(index, im), X.type.shape[1].value(), X.type.shape[2].value(), X.type.shape[3].value(),
                     k.domain[1].value(), W.type.shape[2].value(), W.type.shape[3].value(), k.domain[2].value(),
                     k.domain[3].value(), st[0], st[1], dil[0], dil[1], pads[0], pads[1], pads[2], pads[3], X.strides[0], post,
                     im == Impl::OnednnPostOps ? "true" : "false",
                     s_.kernels[index].weightStorage == WeightStorage::Bf16Dot ? "true /* bf16 */" : "false", weight, bias, generation);
}

std::string Emitter::emitOnednnCall(const Kernel& k, size_t index, Impl im) const {
  std::optional<PostOpPlan> plan = im == Impl::OnednnPostOps ? postOpPlan(p_, k) : std::nullopt;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const std::string obj = objectName(index, im);
  const std::string x = fmt::format("{} + {}", ptrName(X.root), X.offset);
  std::string s = anchorComment(k);
  s += "  try {\n";
  auto ptrOf = [&](int id) { return ptrName(p_.buffer(id).root); };
  if (k.kind == KernelKind::Linear) {
    const int64_t N = packedN(k);
    if (plan) {
      if (plan->residual >= 0 && p_.buffer(plan->residual).root != p_.buffer(plan->store).root) {
        s += fmt::format("    // the residual first: oneDNN's sum post-op adds what the destination holds\n"
                         "    std::memcpy({}, {}, sizeof(float) * {} * batch);\n",
                         ptrOf(plan->store), ptrOf(plan->residual), N);
      }
      s += fmt::format("    {}.run({}, {}, batch, threads);\n", obj, x, ptrOf(plan->store));
    } else {
      s += "    float* result = reinterpret_cast<float*>(ws + pc_extern_offset(batch));\n";
      s += fmt::format("    {}.run({}, result, batch, threads);\n", obj, x);
      s += indented(emitEpilogueLambda(k, DType::F32), "  ");  // inside the try block
      s += fmt::format("    pc::parallelFor(threads, {}, {}, kMinChunkCost, [&](int64_t lo, int64_t hi) {{\n"
                       "      for (int64_t i0 = lo; i0 < hi; ++i0) {{\n"
                       "        for (int64_t i1 = 0; i1 < {}; ++i1) epilogue(i0, i1, result[i0*{} + i1]);\n"
                       "      }}\n    }});\n",
                       unitsExpr(*split_), costExpr(*split_), N, N);
    }
  } else {
    const int64_t M = k.domain[1].value(), P = k.domain[2].value() * k.domain[3].value(), OW = k.domain[3].value();
    const std::string residual = plan && plan->residual >= 0 ? ptrOf(plan->residual) : "nullptr";
    s += "    float* scratch = reinterpret_cast<float*>(ws + pc_extern_offset(batch));\n";
    if (plan) {
      s += fmt::format("    {}.run({}, {}, {}, batch, threads, scratch);\n", obj, x, residual, ptrOf(plan->store));
    } else {
      s += fmt::format("    const float* result = {}.run({}, nullptr, nullptr, batch, threads, scratch);  // NCHW\n", obj, x);
      s += indented(emitEpilogueLambda(k, DType::F32), "  ");  // inside the try block
      s += fmt::format("    pc::parallelFor(threads, {}, {}, kMinChunkCost, [&](int64_t lo, int64_t hi) {{\n"
                       "      for (int64_t u = lo; u < hi; ++u) {{\n"
                       "        const int64_t i0 = u / {}, i1 = u % {};\n"
                       "        const float* a = result + u*{};\n"
                       "        for (int64_t i2 = 0; i2 < {}; ++i2) {{\n"
                       "          for (int64_t i3 = 0; i3 < {}; ++i3) epilogue(i0, i1, i2, i3, a[i2*{} + i3]);\n"
                       "        }}\n      }}\n    }});\n",
                       unitsExpr(*split_), costExpr(*split_), M, M, P, P / OW, OW, OW);
    }
  }
  s += fmt::format("  }} catch (const std::exception& e) {{\n"
                   "    pc_extern_failed(\"{}\", e.what());\n    return false;\n  }}\n  return true;\n",
                   fnName(k, im));
  return s;
}

std::string Emitter::emitLinear(const Kernel& k) const {
  const ir::Node& n = *k.anchor;
  std::vector<std::string> vars = axisVars("i", k.domain.size());
  size_t R = k.domain.size();
  int a = k.anchorInputs[0], b = k.anchorInputs[1];
  const Buffer& A = p_.buffer(a);
  const Buffer& B = p_.buffer(b);
  std::vector<std::string> aIdx(A.type.rank(), "0"), bIdx(B.type.rank(), "0");
  std::string kExtent;
  std::string bias;
  double alpha = 1, beta = 1;
  if (n.isOp(Op::Linear)) {
    for (size_t d = 0; d + 1 < A.type.rank(); ++d) aIdx[d] = vars[d];
    aIdx.back() = "k";
    bIdx[0] = vars[R - 1];
    bIdx[1] = "k";
    kExtent = dimStr(A.type.shape.back());
    if (k.anchorInputs.size() > 2) bias = loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], {vars[R - 1]}));
  } else if (n.isOp(Op::Gemm)) {
    bool ta = n.attrInt("trans_a") != 0, tb = n.attrInt("trans_b") != 0;
    aIdx = ta ? std::vector<std::string>{"k", vars[0]} : std::vector<std::string>{vars[0], "k"};
    bIdx = tb ? std::vector<std::string>{vars[1], "k"} : std::vector<std::string>{"k", vars[1]};
    kExtent = dimStr(A.type.shape[ta ? 0 : 1]);
    alpha = n.attrFloat("alpha");
    beta = n.attrFloat("beta");
    if (k.anchorInputs.size() > 2) {
      const Buffer& C = p_.buffer(k.anchorInputs[2]);
      std::vector<std::string> cIdx(C.type.rank(), "0");
      for (size_t d = 0; d < C.type.rank(); ++d) {
        size_t od = R - C.type.rank() + d;
        bool bc = C.type.shape[d].isStatic() && C.type.shape[d].value() == 1 &&
                  !(k.domain[od].isStatic() && k.domain[od].value() == 1);
        cIdx[d] = bc ? "0" : vars[od];
      }
      bias = loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], cIdx));
    }
  } else {  // matmul with numpy broadcasting; 1-D operands have no row / column dimension
    size_t ra = A.type.rank(), rb = B.type.rank();
    bool hasM = ra >= 2, hasN = rb >= 2;
    size_t nb = R - (hasM ? 1 : 0) - (hasN ? 1 : 0);
    std::string mVar = hasM ? vars[nb] : "0";
    std::string nVar = hasN ? vars[nb + (hasM ? 1 : 0)] : "0";
    auto batchIdx = [&](const Buffer& X, size_t rx, std::vector<std::string>& idx) {
      for (size_t d = 0; d + 2 < rx; ++d) {
        size_t od = nb - (rx - 2) + d;
        bool bc = X.type.shape[d].isStatic() && X.type.shape[d].value() == 1 &&
                  !(k.domain[od].isStatic() && k.domain[od].value() == 1);
        idx[d] = bc ? "0" : vars[od];
      }
    };
    if (ra == 1) {
      aIdx[0] = "k";
    } else {
      batchIdx(A, ra, aIdx);
      aIdx[ra - 2] = mVar;
      aIdx[ra - 1] = "k";
    }
    if (rb == 1) {
      bIdx[0] = "k";
    } else {
      batchIdx(B, rb, bIdx);
      bIdx[rb - 2] = "k";
      bIdx[rb - 1] = nVar;
    }
    kExtent = dimStr(A.type.shape.back());
  }
  DType t = accType(k);
  std::string indent;
  // A matmul's innermost output axis, static N = 4j <= 64 columns contiguous in B
  // (KernelSchedule::matmulColumns): each output row's N sums as vectors (pc::matmulRow, k
  // ascending as in the loop below: the same bits).
  // GCC left the short column loop scalar (multi_input's 4 x 16 by 16 x 4 matmul 1.35x LLVM's
  // time, whose SLP vectoriser takes the four columns as one vector).
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  if (ks.matmulColumns) {
    const int64_t N = ks.matmulColumns;
    // Output rows four at a time (KernelSchedule::matmulRowQuads; B does not depend on the row).
    const bool quads = ks.matmulRowQuads;
    const size_t mAxis = R - 2;
    std::string s = openTemplate(k, t, vars, indent, quads ? R - 2 : R - 1);
    std::vector<std::string> bRow = bIdx;
    bRow.back() = "0";
    size_t opened = R - 1;
    if (quads) {
      const std::string& m = vars[mAxis];
      s += fmt::format("{}for (int64_t {}q = 0; {}q < {}; {}q += 4) {{\n", indent, m, m, k.domain[mAxis].value(), m);
      s += fmt::format("{}  float accs4[4][{}];\n", indent, N);
      s += fmt::format("{}  pc::matmulRows<4, {}>({}, [&](int64_t r, int64_t k) {{ const int64_t {} = {}q + r; return {}; }}, "
                       "[&](int64_t k) {{ return &{}; }}, accs4);\n",
                       indent, N, kExtent, m, m, loadExpr(a, addressOf(a, aIdx)), loadExpr(b, addressOf(b, bRow)));
      s += fmt::format("{}  for (int64_t {} = {}q; {} < {}q + 4; ++{}) {{\n", indent, m, m, m, m, m);
      indent += "    ";
      s += fmt::format("{}const float (&accs)[{}] = accs4[{} - {}q];\n", indent, N, m, m);
      opened = R;
    } else {
      s += fmt::format("{}float accs[{}];\n", indent, N);
      s += fmt::format("{}pc::matmulRow<{}>({}, [&](int64_t k) {{ return {}; }}, [&](int64_t k) {{ return &{}; }}, accs);\n", indent, N,
                       kExtent, loadExpr(a, addressOf(a, aIdx)), loadExpr(b, addressOf(b, bRow)));
    }
    // The epilogue on vectors of the row's columns where it has a vector form (an attention's
    // additive mask, broadcast over the heads: the scalar loop left GCC's code 1.6x LLVM's).
    const int width = N % 16 == 0 ? 16 : N % 8 == 0 ? 8 : 0;
    const std::optional<std::string> vec = width && !ks.anchorFault ? vectorEpilogue(k, vars, "c0", width) : std::nullopt;
    if (vec) {
      s += fmt::format("{}for (int64_t c0 = 0; c0 < {}; c0 += {}) {{\n", indent, N, width);
      s += fmt::format("{}  pc::f32x{} v = pc::load{}(accs + c0);\n", indent, width, width);
      s += indented(*vec, indent + "  ");
      s += fmt::format("{}}}\n", indent);
      return s + closeLoops(opened, indent);
    }
    s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", indent, vars[R - 1], vars[R - 1], N, vars[R - 1]);
    s += fmt::format("{}  {}\n", indent, callEpilogue(vars, "accs[" + vars[R - 1] + "]"));
    s += fmt::format("{}}}\n", indent);
    return s + closeLoops(opened, indent);
  }
  std::string s = openTemplate(k, t, vars, indent);
  // f32 accumulates in f32 (the packed microkernels' precision); f64 and integers in double, as
  // the interpreter, integers then stored saturating.
  const DType accT = t == DType::F32 ? DType::F32 : DType::F64;
  const char* accC = ctype(accT);
  s += fmt::format("{}{} acc = 0;\n", indent, accC);
  s += fmt::format("{}for (int64_t k = 0; k < {}; ++k) acc += {}({}) * {}({});\n", indent, kExtent, accC,
                   loadExpr(a, addressOf(a, aIdx)), accC, loadExpr(b, addressOf(b, bIdx)));
  if (alpha != 1) s += fmt::format("{}acc *= {};\n", indent, literal(alpha, accT));
  if (!bias.empty()) {
    s += beta != 1 ? fmt::format("{}acc += {} * {}({});\n", indent, literal(beta, accT), accC, bias)
                   : fmt::format("{}acc += {}({});\n", indent, accC, bias);
  }
  s += fmt::format("{}{}\n", indent, callEpilogue(vars, convertExpr("acc", accT, t)));
  s += closeLoops(k.domain.size(), indent);
  return s;
}

std::string Emitter::widenAtLoad() const {
  return fmt::format("pc::widenAtLoad(&pc_widen_state, pc_widen_jobs, {}, pc_weights, pc_widened);", s_.loadWidened.size());
}

std::string Emitter::packedPointers(size_t index) const {
  const KernelSchedule& ks = s_.kernels[index];
  const char* type = ks.weightStorage == WeightStorage::Bf16      ? "pc::bf16x2"  // bf16 pairs along k, widened
                     : ks.weightStorage == WeightStorage::Bf16Dot ? "uint32_t"  // bf16 pairs along k: products in bf16
                     : ks.weightStorage == WeightStorage::Int8    ? "int8_t"
                                                                  : "float";
  std::string s;
  if (ks.widenedTiles) {
    s += "  " + widenAtLoad() + "\n";
    s += fmt::format("  const float* PC_RESTRICT wp = pc_widened + {};  // {} weights widened once (KernelSchedule::widenedTiles)\n",
                     ks.loadWidened, weightStorageName(ks.weightStorage));
  } else {
    s += fmt::format("  const {}* PC_RESTRICT wp = reinterpret_cast<const {}*>(pc_weights + {});{}\n", type, type, ks.packedWeight,
                     ks.weightStorage == WeightStorage::F32 ? "" : fmt::format("  // {} weights", weightStorageName(ks.weightStorage)));
  }
  s += fmt::format("  const float* PC_RESTRICT bp = reinterpret_cast<const float*>(pc_weights + {});\n", ks.packedBias);
  if (ks.packedScale >= 0) {
    s += fmt::format("  const float* PC_RESTRICT sp = reinterpret_cast<const float*>(pc_weights + {});  // per-column scales\n",
                     ks.packedScale);
  }
  return s;
}

std::string Emitter::scaleArg(size_t index, const std::string& panel) const {
  return s_.kernels[index].packedScale >= 0 ? fmt::format(", sp + {}*16", panel) : "";
}

std::string Emitter::panelEpilogue(int64_t N, const std::string& indent, const std::string& call, int64_t width, const std::string& j) {
  std::string s = fmt::format("{}const int64_t nEnd = {}*16 + {} < {} ? {}*16 + {} : {};\n", indent, j, width, N, j, width, N);
  s += fmt::format("{}for (int64_t n = {}*16; n < nEnd; ++n) {};\n", indent, j, call);
  return s;
}

std::optional<std::string> Emitter::vectorEpilogue(const Kernel& k, const std::vector<std::string>& vars, const std::string& col,
                                                   int width, int lanes) const {
  const std::vector<Instr>& b = k.body;
  if (b.size() < 2 || b[0].opcode != Opcode::Acc || b[0].dtype != DType::F32) return std::nullopt;
  const bool partial = lanes > 0 && lanes < width;
  if (partial && width != 8) return std::nullopt;
  std::string code;
  int current = 0;  // the instruction whose value v holds
  bool stored = false;
  // Operands loaded densely along the output's last axis (a residual, or an additive mask
  // broadcast along the leading axes) and f32 constants: instruction -> vector. One index term
  // walks the last axis with unit stride; the others are whatever the scalar form's address is.
  // Bool operands (a `where`'s condition) -> lane masks.
  std::map<int, std::string> loaded, masks;
  // Products only in a body without sums: a sum after a product could contract into an FMA here
  // and not in the scalar form.
  const bool hasSums = std::any_of(b.begin(), b.end(), [](const Instr& in) {
    return in.opcode == Opcode::Apply && (in.op == Op::Add || in.op == Op::Sub);
  });
  auto dense = [&](const Instr& in) {
    const Buffer& buf = p_.buffer(in.buffer);
    if (buf.type.dtype != DType::F32 && (buf.type.dtype != DType::Bool || partial)) return false;
    int along = 0;
    for (size_t d = 0; d < in.index.size(); ++d) {
      if (in.index[d].axis != static_cast<int>(vars.size()) - 1) continue;
      if (in.index[d].scale * buf.strides[d] != 1) return false;
      ++along;
    }
    return along == 1;
  };
  auto operand = [&](int a) -> std::optional<std::string> {
    if (a == current) return std::string("v");
    if (loaded.count(a)) return loaded.at(a);
    return std::nullopt;
  };
  for (size_t i = 1; i < b.size(); ++i) {
    const Instr& in = b[i];
    if (in.opcode == Opcode::Load) {
      if (!dense(in)) return std::nullopt;
      std::vector<std::string> at(vars.begin(), vars.end() - 1);
      at.push_back(col);
      const std::string from = fmt::format("{} + {}", ptrName(p_.buffer(in.buffer).root), address(in.buffer, in.index, at));
      if (p_.buffer(in.buffer).type.dtype == DType::Bool) {
        masks[static_cast<int>(i)] = fmt::format("m{}", i);
        code += fmt::format("const pc::i32x{} m{} = pc::boolLanes{}({});\n", width, i, width, from);
        continue;
      }
      loaded[static_cast<int>(i)] = fmt::format("l{}", i);
      code += partial ? fmt::format("const pc::f32x8 l{} = pc::loadFirst8<{}>({}, 0.0f);\n", i, lanes, from)
                      : fmt::format("const pc::f32x{} l{} = pc::load{}({});\n", width, i, width, from);
      continue;
    }
    // v and a residual or constant: their sum or difference, or (in a body without sums) product.
    const bool sumOrProduct = in.op == Op::Add || in.op == Op::Sub || (in.op == Op::Mul && !hasSums);
    if (in.opcode == Opcode::Apply && sumOrProduct && in.args.size() == 2 && in.dtype == DType::F32 &&
        !faulty(in.node, InjectedFault::Kind::Accuracy)) {
      const std::optional<std::string> x = operand(in.args[0]), y = operand(in.args[1]);
      if (!x || !y || (*x != "v" && *y != "v")) return std::nullopt;
      code += fmt::format("// {}\nv = {} {} {};\n", sourceStr(in.node), *x, in.op == Op::Add ? '+' : in.op == Op::Sub ? '-' : '*', *y);
      current = static_cast<int>(i);
      continue;
    }
    if (in.opcode == Opcode::Const && in.dtype == DType::F32) {
      loaded[static_cast<int>(i)] = fmt::format("c{}", i);
      code += fmt::format("const pc::f32x{} c{} = pc::splat{}({});\n", width, i, width, literal(in.constant, DType::F32));
      continue;
    }
    // where(a mask, x, y) over v and operands (a masked attention score).
    if (in.opcode == Opcode::Apply && in.op == Op::Where && in.args.size() == 3 && in.dtype == DType::F32 && masks.count(in.args[0]) &&
        !faulty(in.node, InjectedFault::Kind::Accuracy)) {
      const std::optional<std::string> x = operand(in.args[1]), y = operand(in.args[2]);
      if (!x || !y || (*x != "v" && *y != "v")) return std::nullopt;
      code += fmt::format("// {}\nv = {} ? {} : {};\n", sourceStr(in.node), masks.at(in.args[0]), *x, *y);
      current = static_cast<int>(i);
      continue;
    }
    if (in.opcode == Opcode::Store) {
      // v stored densely along the output's last axis from column `col`.
      const Buffer& out = p_.buffer(in.buffer);
      if (in.args[0] != current || out.type.dtype != DType::F32 || out.strides.back() != 1) return std::nullopt;
      for (size_t d = 0; d < in.index.size(); ++d) {
        if (in.index[d].axis != static_cast<int>(d) || in.index[d].scale != 1 || in.index[d].offset != 0) return std::nullopt;
      }
      std::vector<std::string> at(vars.begin(), vars.end() - 1);
      at.push_back(col);
      const std::string to = fmt::format("{} + {}", ptrName(out.root), address(in.buffer, in.index, at));
      code += partial ? fmt::format("pc::storeFirst8<{}>({}, v);\n", lanes, to) : fmt::format("pc::store{}({}, v);\n", width, to);
      stored = true;
      continue;
    }
    if (in.opcode != Opcode::Apply || in.args != std::vector<int>{current} || in.dtype != DType::F32 ||
        faulty(in.node, InjectedFault::Kind::Accuracy)) {
      return std::nullopt;
    }
    if (in.op == Op::Tanh && (width == 16 || width == 8)) {
      code += fmt::format("// {}\nv = {};\n", sourceStr(in.node), width == 16 ? "pc::tanh16(v)" : "pc::tanhv(v)");
    } else if (in.op == Op::Relu) {
      code += fmt::format("// {}\nv = {};\n", sourceStr(in.node), width == 16 ? "pc::relu16(v)" : "v < 0.0f ? 0.0f : v");
    } else if (in.op == Op::Exp || in.op == Op::Sigmoid) {
      code += fmt::format("// {}\nv = pc::{}Lanes(v);\n", sourceStr(in.node), in.op == Op::Exp ? "exp" : "sigmoid");
    } else if (in.op == Op::Silu) {
      // pc::silu lane by lane (x * sigmoid(x)): scalar, brax_ppo_silu's 256 x 256 layers at batch 1
      // took 1.6x the LLVM build's time.
      code += fmt::format("// {}\nv = v * pc::sigmoidLanes(v);\n", sourceStr(in.node));
    } else if (in.op == Op::Clip && in.node) {
      code += fmt::format("// {}\nv = pc::clipLanes(v, {}, {});\n", sourceStr(in.node), literal(in.node->attrFloat("min"), DType::F32),
                          literal(in.node->attrFloat("max"), DType::F32));
    } else if (in.op == Op::LeakyRelu && in.node) {
      // A select on lanes (the scalar form's branch on the sign mispredicted on every other value
      // once a call's outputs outgrew the branch history: uint8_convbn's stem 8x slower at batch 64).
      code += fmt::format("// {}\nv = v < 0.0f ? v * {} : v;\n", sourceStr(in.node), literal(in.node->attrFloat("alpha"), DType::F32));
    } else {
      return std::nullopt;
    }
    current = static_cast<int>(i);
  }
  if (!stored) return std::nullopt;
  return code;
}

std::pair<std::string, std::string> Emitter::oneLine(const std::string& code) {
  // Comments inside the one-line lambda would swallow the code after them: keep them above.
  std::string comments, body;
  for (size_t p0 = 0, p1; p0 < code.size(); p0 = p1 + 1) {
    p1 = code.find('\n', p0);
    if (p1 == std::string::npos) p1 = code.size();
    std::string line = code.substr(p0, p1 - p0);
    if (line.rfind("// ", 0) == 0) {
      comments += "  " + line + "\n";
    } else {
      body += (body.empty() ? "" : " ") + line;
    }
  }
  return {comments, body};
}

Emitter::LinearRows Emitter::linearRows(const Kernel& k) const {
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const size_t R = k.domain.size();
  LinearRows l;
  l.vars = axisVars("i", R);
  l.rows = "1";
  for (size_t d = 0; d + 1 < R; ++d) l.rows += " * " + dimStr(k.domain[d]);
  std::vector<std::string> idx(X.type.rank(), "0");
  std::string rem = "r";
  for (size_t d = R - 1; d-- > 0;) {
    if (d == 0) {
      l.decomp += fmt::format("const int64_t {} = {}; ", l.vars[0], rem);
    } else {
      l.decomp += fmt::format("const int64_t {} = {} % {}; const int64_t {}q = {} / {}; ", l.vars[d], rem, dimStr(k.domain[d]),
                              l.vars[d], rem, dimStr(k.domain[d]));
      rem = l.vars[d] + "q";
    }
    idx[d] = l.vars[d];
  }
  l.rowFn = fmt::format("  auto row = [&](int64_t r) -> const float* {{ {}return {} + {}; }};\n", l.decomp, ptrName(X.root), addressOf(X.id, idx));
  std::vector<std::string> callVars(l.vars.begin(), l.vars.end() - 1);
  callVars.push_back("n");
  l.finishFn = fmt::format("  auto finish = [&](int64_t r, int64_t n, float acc) {{ {}{} }};\n", l.decomp, callEpilogue(callVars, "acc"));
  return l;
}

std::string Emitter::emitDotRows(const Kernel& k, size_t index) const {
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  const int64_t N = packedN(k), K = packedK(k);
  const LinearRows l = linearRows(k);
  // A row's outputs (up to 8) as one vector where the schedule vectorises the epilogue and this
  // printer has its vector form (a policy head's tanh: GCC left the column loop scalar).
  const KernelSchedule& ks = s_.kernels[index];
  std::optional<std::string> vec;
  if (N <= 8 && (ks.vectorEpilogue || ks.vectorTail)) vec = vectorEpilogue(k, l.vars, "0", 8, N < 8 ? static_cast<int>(N) : 0);
  std::string s = vec ? "" : emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  const int64_t T = dotRowsTile(N);
  s += fmt::format("  // dot_rows: x [rows, {}] by the weight's {} row(s) of {} as dot products along k, {} rows a unit\n", K, N, K, T);
  s += fmt::format("  const float* PC_RESTRICT wr = {} + {};\n", ptrName(W.root), W.offset);
  s += fmt::format("  const float* PC_RESTRICT bp = reinterpret_cast<const float*>(pc_weights + {});\n", s_.kernels[index].packedBias);
  s += l.rowFn;
  if (vec) {
    const auto [comments, body] = oneLine(*vec);
    s += "  // the epilogue on a row's outputs at once\n" + comments;
    s += fmt::format("  auto finishRow = [&](int64_t r, const float* acc) {{ {}pc::f32x8 v = pc::load8(acc); {} }};\n", l.decomp, body);
  } else {
    s += l.finishFn;
    s += fmt::format("  auto finishRow = [&](int64_t r, const float* acc) {{ for (int64_t n = 0; n < {}; ++n) finish(r, n, acc[n]); }};\n", N);
  }
  // zeros past the outputs: the vector epilogue reads 8 lanes (no denormal or NaN garbage)
  s += fmt::format("  const int64_t rows = {};\n  float out[4][16] = {{}};\n", l.rows);
  s += unitLoop();
  std::vector<std::string> ptrs = {"row(r)"};
  for (int64_t t = 1; t < T; ++t) ptrs.push_back(fmt::format("row(r + {})", t));
  s += fmt::format("    const int64_t r = static_cast<int64_t>(uq * {});\n", T);
  s += fmt::format("    if (r + {} <= rows) {{\n      const float* xs[{}] = {{{}}};\n", T, T, fmt::join(ptrs, ", "));
  s += fmt::format("      pc::dotRows<{}, {}>({}, xs, wr, bp, out);\n", T, N, K);
  s += fmt::format("      for (int64_t t = 0; t < {}; ++t) finishRow(r + t, out[t]);\n", T);
  s += "      continue;\n    }\n";
  s += "    for (int64_t t = r; t < rows; ++t) {  // the last rows one by one: the same sums\n";
  s += fmt::format("      const float* x1[1] = {{row(t)}};\n      pc::dotRows<1, {}>({}, x1, wr, bp, out);\n", N, K);
  s += "      finishRow(t, out[0]);\n    }\n  }\n";
  return s;
}

std::string Emitter::emitPackedLinear(const Kernel& k, size_t index, int64_t per, int64_t tileRows) const {
  int64_t N = packedN(k), K = packedK(k);
  int64_t panels = (N + kPanel - 1) / kPanel;
  const LinearRows l = linearRows(k);
  const std::vector<std::string>& vars = l.vars;
  const std::string& decomp = l.decomp;
  const std::string& rowsExpr = l.rows;
  const KernelSchedule& ks = s_.kernels[index];
  std::optional<std::string> vec = ks.vectorEpilogue && !ks.directRows ? vectorEpilogue(k, vars) : std::nullopt;
  std::string s = vec || ks.directRows ? "" : emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  s += fmt::format("  // x [rows, {}] times the weight packed as [{} panels][{}][16] (bias folded into bp).\n", K, panels, K);
  s += packedPointers(index);
  s += l.rowFn;
  if (ks.directRows) {
    // KernelSchedule::directRows: the epilogue only stores; the microkernels write there.
    const Instr& store = k.body[1];
    std::vector<std::string> at(vars.begin(), vars.end() - 1);
    at.push_back("n0");
    s += fmt::format("  // the microkernels write the output's rows, {} floats apart\n", ks.directRows);
    const Buffer& out = p_.buffer(store.buffer);
    s += fmt::format("  auto dst = [&](int64_t r, int64_t n0) -> float* {{ {}return {} + {}; }};  // -> %{}\n", decomp,
                     ptrName(out.root), address(store.buffer, store.index, at), cComment(ir::formatName(out.name)));
  } else if (!vec) {
    s += l.finishFn;
  } else {
    const auto [comments, body] = oneLine(*vec);
    s += "  // the epilogue on a whole panel (16 columns) at once\n" + comments;
    s += fmt::format("  auto finish16 = [&](int64_t r, int64_t n0, pc::f32x16 v) {{ {}{} }};\n", decomp, body);
  }
  s += fmt::format("  const int64_t rows = {};\n", rowsExpr);
  // Units of work: a quad of rows (an octet with gemm8x32) times a pair of panels (32 columns; the
  // last may be single), pair-major, so the pair (2 x K x 16 floats) stays in cache while every
  // row passes. A unit always runs the same microkernels (8 or 4 rows, or the last rows one by
  // one), whichever chunk it falls in; a row is in a tile of 8 or 4 rows (the same bits: each
  // output sums over k in order) or, past the last whole quad, alone, whatever the tile rows.
  // Units of more than four rows (gemm8x32's octets by a pair of panels, gemm6x16's sextets by one
  // panel) run as one tile where whole, else as quads and single rows.
  const bool wideUnits = tileRows > 4;
  const int64_t tilePanels = tileRows == 8 ? 2 : 1;
  s += fmt::format("  const int64_t quads = (rows + {}) / {};{}\n", tileRows - 1, tileRows,
                   tileRows == 8 ? "  // octets of rows" : tileRows == 6 ? "  // sextets of rows" : "");
  if (!ks.directRows && !vec) s += "  float out[4][32];\n  float out16[4][16];\n";
  if (wideUnits && !ks.directRows && !vec) s += fmt::format("  float out{0}[{0}][{1}];\n", tileRows, 16 * tilePanels);
  if (tileRows == 6) {
    s += "  const int64_t rowsQ = rows / 4 * 4;  // the rows past the last whole quad run alone\n";
    if (!ks.directRows && !vec) s += "  float out2[2][16];\n";
  }
  if (ks.loadWidened >= 0) {
    s += fmt::format("  // {} panels widened to f32 once, by the model's first run of many rows (KernelSchedule::loadWidened)\n",
                     weightStorageName(ks.weightStorage));
  } else if (ks.widenBuffer) {
    s += fmt::format("  // {} panels widened to f32 once for the many rows that pass them (KernelSchedule::widenRows)\n",
                     weightStorageName(ks.weightStorage));
    s += fmt::format("  alignas(64) {} wide[{}];\n  int64_t wideJ = -1;\n", ks.weightStorage == WeightStorage::Int8 ? "pc::WideI8" : "float",
                     per * K * kPanel);
  } else if (ks.widenRows) {
    s += "  // many rows: the bf16 pairs widened inside each tile, f32 FMAs (KernelSchedule::widenRows)\n";
  }
  if (ks.widenRows) s += fmt::format("  const bool widened = rows >= {};\n", ks.widenRows);
  if (ks.loadWidened >= 0) {
    s += "  if (widened) " + widenAtLoad() + "\n";
  }
  // Where many rows widen bf16-dot pairs inside each tile: the same weights as bf16x2.
  const std::string pairs = "reinterpret_cast<const pc::bf16x2*>(w)";
  if (ks.alternateUnits) {
    s += "  // every other run walks the units backward: it starts on the panels the last run ended on,\n"
         "  // still in L2 (KernelSchedule::alternateUnits)\n"
         "  const bool back = (__atomic_load_n(&pc_calls, __ATOMIC_RELAXED) & 1u) != 0;\n"
         "  for (int64_t v = lo; v < hi; ++v) {\n    const int64_t u = back ? lo + hi - 1 - v : v;\n"
         "    const uint64_t uq = static_cast<uint64_t>(u);\n";
  } else {
    s += unitLoop();
  }
  if (panels <= per) {  // one group of panels (a head of up to 32 outputs): j is 0, so the column bounds below fold
    s += fmt::format("    const int64_t j = 0, r = uq * {};\n", tileRows);
  } else {
    s += fmt::format("    const int64_t j = uq / quads * {}, r = uq % quads * {};\n", per, tileRows);
  }
  s += fmt::format("    const auto* PC_RESTRICT w = wp + j*{};\n", s_.kernels[index].panelStride);
  s += fmt::format("    const int64_t jEnd = j + {} < {} ? j + {} : {};  // one past the unit's last panel\n", per, panels, per, panels);
  if (ks.loadWidened >= 0) {
    s += fmt::format("    const float* PC_RESTRICT wide = pc_widened + {} + j*{};\n", ks.loadWidened, K * kPanel);
  }
  // The scalar epilogue of `width` columns from panel `panel` of row `row`, held in a stack tile
  // at `acc` (column n at acc[n - panel*16]), column by column. (A whole-panel epilogue, `vec`,
  // takes its rows from the microkernels' registers instead: the _fin calls below.)
  auto finishing = [&](const std::string& indent, const std::string& row, const std::string& panel,
                       const std::string& acc, int64_t width) {
    return panelEpilogue(N, indent, fmt::format("finish({}, n, {}[n - {}*16])", row, acc, panel), width, panel);
  };
  // Where a quad's tile of `width` columns goes: the output's rows, or a stack tile that the
  // epilogue then reads row by row.
  auto tile = [&](const std::string& row, const std::string& panel, int64_t width) {
    if (ks.directRows) return fmt::format("dst({}, {}*16), {}", row, panel, ks.directRows);
    return fmt::format("{}[0], {}", width == 32 ? "out" : "out16", width);
  };
  auto finishTile = [&](const std::string& in, const std::string& r, int64_t width) -> std::string {
    if (ks.directRows) return "";
    const std::string acc = width == 32 ? "out[t]" : "out16[t]";
    return in + "  for (int64_t t = 0; t < 4; ++t) {\n" + finishing(in + "    ", r + " + t", "j", acc, width) + in + "  }\n";
  };
  // The quad of rows from row `r` as one tile, from the panels at `w`. A whole-panel epilogue
  // takes the rows from the microkernel's accumulators (pc::gemm_4x32_fin: no stack tile).
  auto quadCall = [&](const std::string& w, const std::string& in, const std::string& r, int64_t width) {
    const std::string call = fmt::format("{}  pc::gemm_4x{}{}({}, row({}), row({} + 1), row({} + 2), row({} + 3), {}, bp + j*16, ", in,
                                         width, vec ? "_fin" : "", K, r, r, r, r, w);
    if (vec) {
      return call + fmt::format("[&](int64_t t, int64_t c, pc::f32x16 v) {{ finish16({} + t, j*16 + c, v); }}{});\n", r,
                                scaleArg(index, "j"));
    }
    return call + fmt::format("{}{});\n", tile(r, "j", width), scaleArg(index, "j")) + finishTile(in, r, width);
  };
  auto quadTiles = [&](const std::string& w, const std::string& in, const std::string& r) {
    std::string t;
    auto quad = [&](int64_t width) { return quadCall(w, in, r, width); };
    if (per == 2) {
      t += fmt::format("{}if ({} + 4 <= rows && jEnd == j + 2) {{\n", in, r) + quad(32);
      t += in + "  continue;\n" + in + "}\n";
    }
    t += fmt::format("{}if ({} + 4 <= rows) {{\n", in, r) + quad(16);
    t += in + "  continue;\n" + in + "}\n";
    return t;
  };
  // R rows from row r (8 by the pair; 6 or 2 by one panel) as one tile from the panels at `from`.
  auto rowsTile = [&](int64_t R, const std::string& from, const std::string& in) {
    const int64_t cols = R == 8 ? 32 : 16;
    const std::string kernel = fmt::format("pc::gemm_{}x{}", R, cols), x = fmt::format("x{}", R);
    std::string t;
    std::vector<std::string> rowsOf;
    for (int64_t q = 0; q < R; ++q) rowsOf.push_back(q ? fmt::format("row(r + {})", q) : "row(r)");
    t += fmt::format("{}  const float* {}[{}] = {{{}}};\n", in, x, R, fmt::join(rowsOf, ", "));
    if (ks.directRows) {
      t += fmt::format("{}  {}({}, {}, {}, bp + j*16, {}{});\n", in, kernel, K, x, from, tile("r", "j", cols), scaleArg(index, "j"));
    } else if (vec) {
      t += fmt::format("{}  {}_fin({}, {}, {}, bp + j*16, [&](int64_t t, int64_t c, pc::f32x16 v) {{ finish16(r + t, j*16 + c, v); }}{});\n",
                       in, kernel, K, x, from, scaleArg(index, "j"));
    } else {
      t += fmt::format("{}  {}({}, {}, {}, bp + j*16, out{}{});\n", in, kernel, K, x, from, R, scaleArg(index, "j"));
      t += fmt::format("{}  for (int64_t t = 0; t < {}; ++t) {{\n", in, R) +
           finishing(in + "    ", "r + t", "j", fmt::format("out{}[t]", R), cols) + in + "  }\n";
    }
    return t;
  };
  // The unit's rows as one tile where whole: an octet by the pair, a sextet below the last whole
  // quad (rowsQ: the rows past it run alone, whatever the tile rows).
  auto wholeUnitTile = [&](const std::string& from, const std::string& in) {
    std::string t = tileRows == 8 ? fmt::format("{}if (r + 8 <= rows && jEnd == j + 2) {{\n", in) : fmt::format("{}if (r + 6 <= rowsQ) {{\n", in);
    return t + rowsTile(tileRows, from, in) + in + "  continue;\n" + in + "}\n";
  };
  const std::string widePanels = ks.widenBuffer ? "wide" : pairs;
  if (ks.widenRows) {
    s += "    if (widened) {\n";
    if (ks.widenBuffer && ks.loadWidened < 0) {
      s += fmt::format("      if (j != wideJ) {{\n        pc::widenPanels({}, w, {}, jEnd - j, wide);\n        wideJ = j;\n      }}\n", K,
                       ks.panelStride);
    }
    s += tileRows == 8 ? wholeUnitTile(widePanels, "      ") : quadTiles(widePanels, "      ", "r");
    s += "    }\n";
  }
  if (tileRows == 6) {
    // A sextet below rowsQ, else the rows below it as a quad or a pair (a unit starts at an even
    // row: rowsQ is r + 4, r + 2 or at most r), then the rest alone.
    s += wholeUnitTile("w", "    ");
    s += "    if (r + 4 <= rowsQ) {\n" + quadCall("w", "    ", "r", 16) + "    } else if (r + 2 <= rowsQ) {\n" + rowsTile(2, "w", "    ") + "    }\n";
    s += "    for (int64_t t = r > rowsQ ? r : rowsQ; t < rows && t < r + 6; ++t) {\n";
  } else if (wideUnits) {
    // The unit's rows as one tile (KernelSchedule::octetsOnStored), else its quads and last rows.
    if (ks.octetsOnStored()) s += wholeUnitTile("w", "    ");
    s += "    for (int64_t q = r; q < r + 8 && q < rows; q += 4) {\n";
    if (ks.widenRows) s += "      if (widened) {\n" + quadTiles(widePanels, "        ", "q") + "      }\n";
    s += quadTiles("w", "      ", "q");
    s += "      for (int64_t t = q; t < rows; ++t) {\n";
  } else {
    s += quadTiles("w", "    ", "r");
    s += "    for (int64_t t = r; t < rows; ++t) {\n";
  }
  const std::string d = tileRows == 8 ? "  " : "";  // the octets' last rows sit one loop deeper (in the quads' loop)
  s += d + "      for (int64_t jj = j; jj < jEnd; ++jj) {\n";
  // One row by panel jj from `from`: into the output's row, the stack tile, or (a whole-panel
  // epilogue) from the accumulators.
  auto single = [&](const std::string& from) {
    if (vec) {
      return fmt::format("pc::gemm_1x16_fin({}, row(t), {}, bp + jj*16, [&](int64_t, int64_t c, pc::f32x16 v) {{ finish16(t, jj*16 + c, v); }}{});",
                         K, from, scaleArg(index, "jj"));
    }
    return fmt::format("pc::gemm_1x16({}, row(t), {}, bp + jj*16, {}{});", K, from, ks.directRows ? "dst(t, jj*16)" : "out16[0]",
                       scaleArg(index, "jj"));
  };
  const std::string stored = single(fmt::format("wp + jj*{}", ks.panelStride));
  if (ks.widenRows) {
    // the last rows from the widened panels too: every row of the run multiplies the same values
    const std::string from = ks.widenBuffer ? fmt::format("wide + (jj - j)*{}", K * kPanel)
                                            : fmt::format("reinterpret_cast<const pc::bf16x2*>(wp + jj*{})", ks.panelStride);
    s += fmt::format("{0}        if (widened) {1}\n{0}        else {2}\n", d, single(from), stored);
  } else {
    s += d + "        " + stored + "\n";
  }
  if (!ks.directRows && !vec) s += finishing(d + "        ", "t", "jj", "out16[0]", 16);
  s += tileRows == 8 ? "        }\n      }\n    }\n  }\n" : "      }\n    }\n  }\n";
  return s;
}

}  // namespace policyc::codegen::cppemit
