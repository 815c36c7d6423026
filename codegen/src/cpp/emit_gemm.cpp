// The C++ emitter's GEMM and convolution templates: the general dot-product loops, the packed-panel
// microkernel drivers with their (vector) epilogues, direct convs, and the calls into oneDNN.
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

std::string Emitter::emitPackedConv(const Kernel& k, size_t index, std::optional<Impl> impl) const {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  std::vector<int64_t> st = spatialList(n, "strides", 2, 1);
  std::vector<int64_t> dil = spatialList(n, "dilations", 2, 1);
  std::vector<int64_t> pads = spatialList(n, "pads", 4, 0);
  int64_t C = X.type.shape[1].value(), H = X.type.shape[2].value(), Wd = X.type.shape[3].value();
  int64_t KH = W.type.shape[2].value(), KW = W.type.shape[3].value();
  int64_t M = packedN(k), K = packedK(k);
  int64_t OH = k.domain[2].value(), OW = k.domain[3].value();
  int64_t panels = (M + kPanel - 1) / kPanel;
  // Panels and positions per microkernel call: gemm4x32 (the default) two panels of 4 positions,
  // an odd last panel alone; gemm4x16 one; gemm6x16 one panel of 6 positions.
  const int64_t per = panelsPerTile(impl.value_or(Impl::Gemm4x32)), R = rowsPerTile(impl.value_or(Impl::Gemm4x32));
  std::string s = emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  s += fmt::format("  // implicit GEMM: [{} positions, K={}] patches times the weight packed as [{} panels][{}][16].\n",
                   OH * OW, K, panels, K);
  s += packedPointers(index);
  s += "  auto gather = [&](int64_t i0, int64_t pos, float* PC_RESTRICT dst) {\n";
  s += fmt::format("    const int64_t oh = pos / {}, ow = pos % {};\n", OW, OW);
  s += fmt::format("    for (int64_t c = 0; c < {}; ++c) {{\n", C);
  s += fmt::format("      for (int64_t kh = 0; kh < {}; ++kh, dst += {}) {{\n", KH, KW);
  s += fmt::format("        const int64_t ih = oh*{} + kh*{} - {};\n", st[0], dil[0], pads[0]);
  s += fmt::format("        if (ih < 0 || ih >= {}) {{ for (int64_t kw = 0; kw < {}; ++kw) dst[kw] = 0.0f; continue; }}\n", H, KW);
  s += fmt::format("        for (int64_t kw = 0; kw < {}; ++kw) {{\n", KW);
  s += fmt::format("          const int64_t iw = ow*{} + kw*{} - {};\n", st[1], dil[1], pads[1]);
  s += fmt::format("          dst[kw] = iw >= 0 && iw < {} ? {} : 0.0f;\n", Wd, loadExpr(X.id, addressOf(X.id, {"i0", "c", "ih", "iw"})));
  s += "        }\n      }\n    }\n  };\n";
  // Windows inside the input read it directly through an offset table; others are gathered. With
  // a padded image (KernelSchedule::paddedImage) every whole tile reads the padded copy.
  const std::optional<KernelSchedule::PaddedImage>& padded = s_.kernels[index].paddedImage;
  std::vector<std::string> offsets;
  const std::vector<int64_t> xs = padded ? std::vector<int64_t>{0, padded->H * padded->W, padded->W, 1} : X.strides;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) offsets.push_back(std::to_string(c * xs[1] + kh * dil[0] * xs[2] + kw * dil[1] * xs[3]));
  s += fmt::format("  static const int32_t window[{}] = {{{}}};\n", K, fmt::join(offsets, ","));
  const int64_t P = OH * OW, tiles = (P + R - 1) / R;
  if (padded) {
    // Only the rows this chunk's tiles of the image read: with threads, each chunk pads its own.
    s += fmt::format("  // the image, zero-padded ({} x {} x {}): the rows this chunk's tiles of it read\n", padded->C, padded->H,
                     padded->W);
    s += fmt::format("  alignas(64) float padded[{}];\n  int64_t copied = -1;\n", padded->floats());
    s += "  auto padImage = [&](int64_t i0) {\n";
    s += fmt::format("    const int64_t u0 = lo > i0*{0} ? lo - i0*{0} : 0, u1 = hi < (i0 + 1)*{0} ? hi - i0*{0} : {0};\n", tiles);
    s += fmt::format("    const int64_t r0 = u0*{0}/{1}*{2}, last = u1*{0} < {3} ? u1*{0} - 1 : {4}, r1 = last/{1}*{2} + {5};\n", R, OW,
                     st[0], P, P - 1, (KH - 1) * dil[0] + 1);
    s += fmt::format("    for (int64_t c = 0; c < {}; ++c)\n      for (int64_t r = r0; r < r1; ++r) {{\n", C);
    s += fmt::format("        float* PC_RESTRICT row = padded + (c*{} + r)*{};\n        const int64_t ih = r - {};\n", padded->H,
                     padded->W, padded->top);
    s += paddedRowCopy(X, padded->left, padded->W, "        ");
    s += "      }\n    copied = i0;\n  };\n";
    s += fmt::format("  auto origin = [&](int64_t, int64_t pos) {{ return padded + pos / {} * {} * {} + pos % {} * {}; }};\n", OW, st[0],
                     padded->W, OW, st[1]);
  } else {
    s += fmt::format("  auto inside = [&](int64_t pos) {{ const int64_t oh = pos / {}, ow = pos % {}; "
                     "return oh*{} - {} >= 0 && oh*{} - {} + {} < {} && ow*{} - {} >= 0 && ow*{} - {} + {} < {}; }};\n",
                     OW, OW, st[0], pads[0], st[0], pads[0], (KH - 1) * dil[0], H, st[1], pads[1], st[1], pads[1],
                     (KW - 1) * dil[1], Wd);
    s += fmt::format("  auto origin = [&](int64_t i0, int64_t pos) {{ const int64_t ih = pos / {} * {} - {}, iw = pos % {} * {} - {}, c = 0; "
                     "return {} + {}; }};\n",
                     OW, st[0], pads[0], OW, st[1], pads[1], ptrName(X.root), addressOf(X.id, {"i0", "c", "ih", "iw"}));
  }
  s += fmt::format("  alignas(32) float patch[{}][{}];\n  float out[{}][32];\n", R, K, R);
  if (panels % 2 || per == 1) s += fmt::format("  float out16[{}][16];\n", R);
  if (s_.kernels[index].tileEpilogue) s += "  alignas(32) float columns[32][8];\n";
  // body(j, width) over every panel, indented by `in`: one at a time, or pairs and an odd last one alone.
  auto byPanelGroups = [&](const std::string& in, const std::function<std::string(const std::string&, int)>& body) {
    std::string t;
    if (per == 1) t += fmt::format("{}for (int64_t j = 0; j < {}; ++j) {{\n", in, panels) + body("j", 16) + in + "}\n";
    if (per == 2 && panels >= 2) t += fmt::format("{}for (int64_t j = 0; j + 2 <= {}; j += 2) {{\n", in, panels) + body("j", 32) + in + "}\n";
    if (per == 2 && panels % 2) t += fmt::format("{}{{\n{}  const int64_t j = {};\n", in, in, panels - 1) + body("j", 16) + in + "}\n";
    return t;
  };
  // A tile of `rows` positions from pos, the first `count` of them real (the others repeat the
  // last), indented by `in`: its windows read in place (from the padded image, or the input where
  // every one lies inside it), else gathered into patches; its epilogue a channel's positions at
  // a time (KernelSchedule::tileEpilogue: pc::transposeTile, the first `count` lanes stored), else
  // value by value.
  auto tileCode = [&](int64_t rows, int64_t count, const std::string& in) {
    std::vector<std::string> positions, origins, gathered;
    for (int64_t t = 0; t < count; ++t) positions.push_back(t ? fmt::format("pos + {}", t) : "pos");
    for (int64_t t = 0; t < rows; ++t) {
      origins.push_back(fmt::format("origin(i0, {})", positions[static_cast<size_t>(std::min(t, count - 1))]));
      gathered.push_back(fmt::format("patch[{}]", std::min(t, count - 1)));
    }
    std::string c;
    if (padded) {
      c += in + "if (i0 != copied) padImage(i0);  // every window lies inside the padded image\n";
    } else {
      c += fmt::format("{}const bool direct = inside({});\n", in, fmt::join(positions, ") && inside("));
      c += fmt::format("{}if (!direct) for (int64_t t = 0; t < {}; ++t) gather(i0, pos + t, patch[t]);\n", in, count);
    }
    // The tile's rows: the window origins in the input, or the gathered patches.
    c += fmt::format("{}const float* origins[{}] = {{{}}};\n", in, rows, fmt::join(origins, ", "));
    if (!padded) c += fmt::format("{}const float* gathered[{}] = {{{}}};\n", in, rows, fmt::join(gathered, ", "));
    const std::optional<std::string> vectorCode =
        s_.kernels[index].tileEpilogue ? vectorEpilogue(k, {"i0", "n", "oh", "ow"}, "ow", 8, static_cast<int>(count)) : std::nullopt;
    // Panels two at a time (pc::gemm_4x32: twice the accumulators), an odd last one alone.
    // Channel outer, position inner in the epilogue: the tile's positions of a channel are adjacent
    // in memory, while channels are a plane apart (often 4 KB: every channel in one cache set).
    auto block = [&](const std::string& j, int width) {
      const std::string kern = fmt::format("{}x{}", rows, width);
      const std::string o = width == 32 ? "out" : "out16";
      // The four-row tiles (pc::gemm_4x16_by, gemm_4x2v_by) take every k's offset from the table.
      const int64_t G = rows == 4 ? 1 : s_.kernels[index].tapGroup;
      const std::string inPlace = fmt::format("pc::gemm_{}_at{}({}, window, origins, wp + {}*{}, bp + {}*16, {}{});\n", kern,
                                              G > 1 ? fmt::format("<{}>", G) : "", K, j, s_.kernels[index].panelStride, j, o,
                                              scaleArg(index, j));
      std::string t;
      if (padded) {
        t = in + "  " + inPlace;
      } else {
        t = in + "  if (direct) {\n" + in + "    " + inPlace;
        t += fmt::format("{}  }} else {{\n{}    pc::gemm_{}({}, gathered, wp + {}*{}, bp + {}*16, {}{});\n{}  }}\n", in, in, kern, K, j,
                         s_.kernels[index].panelStride, j, o, scaleArg(index, j), in);
      }
      t += fmt::format("{}  const int64_t nEnd = {}*16 + {} < {} ? {}*16 + {} : {};\n", in, j, width, M, j, width, M);
      if (vectorCode) {
        t += fmt::format("{}  pc::transposeTile<{}, {}>({}, columns);\n", in, rows, width, o);
        t += fmt::format("{}  const int64_t oh = pos / {}, ow = pos % {};\n", in, OW, OW);
        t += fmt::format("{}  for (int64_t n = {}*16; n < nEnd; ++n) {{\n{}    pc::f32x8 v = pc::load8(columns[n - {}*16]);\n", in, j, in, j);
        return t + indented(*vectorCode, in + "    ") + in + "  }\n";
      }
      t += fmt::format("{}  for (int64_t n = {}*16; n < nEnd; ++n) {{\n{}    for (int64_t t = 0; t < {}; ++t) "
                       "epilogue(i0, n, (pos + t) / {}, (pos + t) % {}, {}[t][n - j*16]);\n{}  }}\n",
                       in, j, in, count, OW, OW, o, in);
      return t;
    };
    return c + byPanelGroups(in, block);
  };
  // Units of work: a tile of R output positions (4, 6 or 8) of one image, every panel.
  // The last positions that do not fill a tile run one by one, whichever chunk they fall in.
  s += unitLoop();
  s += fmt::format("    const int64_t i0 = uq / {}, pos = uq % {} * {};\n", tiles, tiles, R);
  s += fmt::format("    if (pos + {} <= {}) {{\n", R, P);
  s += tileCode(R, R, "      ");
  s += "      continue;\n    }\n";
  // The last tile's positions (P % R of them; only the last tile of an image gets here): as one
  // tile where there are enough (convTailTile; GAP CNN's 6 x 6 conv: 4 of 36 positions one by
  // one took a fifth of its time), the rest one by one.
  const int64_t tailRows = convTailTile(P, R), covered = convTailCovered(P, R);
  if (tailRows) s += "    {\n" + tileCode(tailRows, covered, "      ") + "    }\n";
  s += fmt::format("    for (int64_t t0 = pos{}; t0 < {}; ++t0) {{\n", covered ? fmt::format(" + {}", covered) : "", P);
  s += "      const int64_t t = t0 - pos;\n      gather(i0, t0, patch[0]);\n";
  s += fmt::format("      for (int64_t j = 0; j < {}; ++j) {{\n", panels);
  s += fmt::format("        pc::gemm_1x16({}, patch[0], wp + j*{}, bp + j*16, out[0]{});\n", K, s_.kernels[index].panelStride, scaleArg(index, "j"));
  s += panelEpilogue(M, "        ", fmt::format("epilogue(i0, n, t0 / {}, t0 % {}, out[0][n - j*16])", OW, OW));
  s += "      }\n    }\n  }\n";
  return s;
}

std::string Emitter::paddedRowCopy(const Buffer& X, int64_t left, int64_t width, const std::string& in) const {
  const int64_t H = X.type.shape[2].value(), W = X.type.shape[3].value();
  // The padding by memset: GCC 12 vectorised a zeroing loop of five floats in this branch into
  // wrong code at -O3 with AVX-512 (ONNX's convtranspose_pads test, a 9 x 5 image).
  std::string s = fmt::format("{}if (ih < 0 || ih >= {}) {{ std::memset(row, 0, {} * sizeof(float)); continue; }}\n", in, H, width);
  if (left > 0) s += fmt::format("{}std::memset(row, 0, {} * sizeof(float));\n", in, left);
  s += fmt::format("{}for (int64_t iw = 0; iw < {}; ++iw) row[iw + {}] = {};\n", in, W, left,
                   loadExpr(X.id, addressOf(X.id, {"i0", "c", "ih", "iw"})));
  if (width > left + W) s += fmt::format("{}std::memset(row + {}, 0, {} * sizeof(float));\n", in, left + W, width - left - W);
  return s;
}

std::string Emitter::chunkEpilogue(const Kernel& k, const std::string& row, int64_t col, bool bias, const std::string& indent, int width,
                                   int lanes) const {
  std::string s = fmt::format("{}pc::f32x{} v = pc::load{}({}){};\n", indent, width, width, row, bias ? fmt::format(" + pc::splat{}(bias)", width) : "");
  return s + indented(*vectorEpilogue(k, axisVars("i", k.domain.size()), std::to_string(col), width, lanes), indent);
}

std::string Emitter::emitConvRows(const Kernel& k, size_t index) const {
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  const ConvRowTiles& t = *s_.kernels[index].convRows;
  const int64_t C = t.C, H = t.H, KH = t.KH, M = t.M, OH = t.OH, OW = t.OW;
  const bool bias = t.bias;
  const bool vec = s_.kernels[index].vectorEpilogue && vectorEpilogue(k, axisVars("i", 4), "0");
  std::string s = emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  const bool pair = t.rows == 2;
  s += fmt::format("  // conv_rows: {} by {} output channels at a time, {} chunk(s) of 16 lanes, {} a pass\n",
                   pair ? "two output rows" : "an output row", t.channels, t.taps.chunks, t.passChunks);
  if (bias) s += fmt::format("  const float* PC_RESTRICT bp = reinterpret_cast<const float*>(pc_weights + {});\n", s_.kernels[index].packedBias);
  // Signed (unitLoop's unsigned quotients measured 1.05-1.1x slower here: GCC allocates the
  // blocks' twelve accumulators differently).
  s += "  for (int64_t u = lo; u < hi; ++u) {\n";
  s += fmt::format("    const int64_t i0 = u / {}, m0 = u % {} / {} * {}, oh = u % {} * {};\n", t.blocks * t.rowUnits, t.blocks * t.rowUnits,
                   t.rowUnits, t.channels, t.rowUnits, t.rows);
  // A block of `cb` channels from m0 (the full ones, then a narrower last one).
  auto block = [&](int64_t cb, const std::string& in) {
    std::string b;
    // A pass over the input adds into the accumulators of chunks j0 .. j0 + pc - 1 (a{o}_{jj}).
    for (int64_t j0 = 0; j0 < t.taps.chunks; j0 += t.passChunks) {
      const int64_t pc = std::min(t.passChunks, t.taps.chunks - j0);
      auto acc = [&](int64_t o, int64_t j) { return fmt::format("a{}_{}", o, j - j0); };
      b += in + "{\n";
      std::vector<std::string> regs;
      for (int64_t o = 0; o < cb; ++o) {
        for (int64_t j = j0; j < j0 + pc; ++j) regs.push_back(acc(o, j) + "{}");
      }
      b += fmt::format("{}  pc::RowChunk {};\n", in, fmt::join(regs, ", "));
      b += fmt::format("{}  for (int64_t c = 0; c < {}; ++c) {{\n", in, C);
      // A row of one chunk: the window's rows unrolled. In a rolled loop (its `continue` on the
      // padding rows) GCC kept one of the 6 x 2 AVX2 accumulators on the stack, a load and a
      // store on its chain each tap (impala's 32-channel 16 x 16 conv 1.25x slower than LLVM,
      // which unrolls it itself). Rows of two chunks ran 1.2x slower unrolled.
      if (KH <= 8 && pc == 1) b += fmt::format("{}    #pragma GCC unroll {}\n", in, KH);
      b += fmt::format("{}    for (int64_t k0 = 0; k0 < {}; ++k0) {{\n", in, KH);
      b += fmt::format("{}      const int64_t p0 = oh*{} + k0*{} - {};\n", in, t.strideH, t.dilationH, t.padTop);
      if (pair) {
        // The second row's input row, and which of the two lie inside (the second also inside the output).
        b += fmt::format("{}      const int64_t p1 = p0 + {};\n", in, t.strideH);
        b += fmt::format("{}      const bool in0 = p0 >= 0 && p0 < {}, in1 = oh + 1 < {} && p1 >= 0 && p1 < {};\n", in, H, OH, H);
        b += fmt::format("{}      if (!in0 && !in1) continue;\n", in);
        b += fmt::format("{}      const float* xr = {} + {};\n", in, ptrName(X.root), addressOf(X.id, {"i0", "c", "p0", "0"}));
        b += fmt::format("{}      const float* xr1 = {} + {};\n", in, ptrName(X.root), addressOf(X.id, {"i0", "c", "p1", "0"}));
      } else {
        b += fmt::format("{}      if (p0 < 0 || p0 >= {}) continue;\n", in, H);
        b += fmt::format("{}      const float* PC_RESTRICT xr = {} + {};\n", in, ptrName(X.root), addressOf(X.id, {"i0", "c", "p0", "0"}));
      }
      b += fmt::format("{}      const float* PC_RESTRICT wr = {} + {};\n", in, ptrName(W.root), addressOf(W.id, {"m0", "c", "k0", "0"}));
      // The taps of this window row (`flags`: a pair's row flags, constants where both rows lie
      // inside, the common case, so that no select remains there; as the LLVM printer).
      auto taps = [&](const std::string& flags, const std::string& tin) {
        std::string r;
        for (size_t k1 = 0; k1 < t.taps.lo.size(); ++k1) {
          const int64_t off = t.taps.offset(k1);
          for (const RowTaps::Lanes& l : t.taps.lanesOf(k1)) {
            if (l.chunk < j0 || l.chunk >= j0 + pc) continue;
            const int64_t j = l.chunk;
            const std::string load = pair ? fmt::format("pc::loadRows2<{}, {}>(xr + {}, xr1 + {}, {})", l.first, l.last, l.first + off,
                                                        l.first + off, flags)
                                          : fmt::format("pc::loadChunk<{}, {}>(xr + {})", l.first, l.last, 16 * j + l.first + off);
            r += fmt::format("{}{{\n{}  const pc::RowChunk x = {};\n", tin, tin, load);
            for (int64_t o = 0; o < cb; ++o) {
              r += fmt::format("{}  {} = pc::fmaChunk({}, x, wr[{}]);\n", tin, acc(o, j), acc(o, j), o * W.strides[0] + static_cast<int64_t>(k1) * W.strides[3]);
            }
            r += tin + "}\n";
          }
        }
        return r;
      };
      if (pair) {
        b += fmt::format("{}      if (in0 && in1) {{\n{}{}      }} else {{\n{}{}      }}\n", in, taps("true, true", in + "        "), in,
                         taps("in0, in1", in + "        "), in);
      } else {
        b += taps("", in + "      ");
      }
      b += in + "    }\n" + in + "  }\n";
      // The epilogue along each chunk's columns, a channel at a time.
      b += fmt::format("{}  alignas(64) float row[16];\n", in);
      for (int64_t j = j0; j < j0 + pc; ++j) {
        const int64_t cols = std::min<int64_t>(16, OW - 16 * j);
        for (int64_t o = 0; o < cb; ++o) {
          b += fmt::format("{}  pc::storeChunk(row, {});\n", in, acc(o, j));
          if (bias) b += fmt::format("{}  {{\n{}    const float bias = bp[m0 + {}];\n", in, in, o);
          else b += in + "  {\n";
          if (vec) {
            // The epilogue on the whole chunk (KernelSchedule::vectorEpilogue).
            b += fmt::format("{}    const int64_t i1 = m0 + {}, i2 = oh;\n", in, o);
            b += chunkEpilogue(k, "row", 16 * j, bias, in + "    ");
          } else if (pair) {
            b += fmt::format("{}    for (int64_t c = 0; c < {}; ++c) epilogue(i0, m0 + {}, oh, c, row[c]{});\n", in, OW, o, bias ? " + bias" : "");
            b += fmt::format("{}    if (oh + 1 < {}) for (int64_t c = 0; c < {}; ++c) epilogue(i0, m0 + {}, oh + 1, c, row[8 + c]{});\n", in, OH, OW, o,
                             bias ? " + bias" : "");
          } else {
            b += fmt::format("{}    for (int64_t c = 0; c < {}; ++c) epilogue(i0, m0 + {}, oh, {} + c, row[c]{});\n", in, cols, o, 16 * j,
                             bias ? " + bias" : "");
          }
          b += in + "  }\n";
        }
      }
      b += in + "}\n";
    }
    return b;
  };
  const int64_t full = M / t.channels, last = M % t.channels;
  if (last == 0) {
    s += block(t.channels, "    ");
  } else {
    s += fmt::format("    if (m0 < {}) {{\n", full * t.channels);
    s += block(t.channels, "      ");
    s += "    } else {\n";
    s += block(last, "      ");
    s += "    }\n";
  }
  s += "  }\n";
  return s;
}

std::string Emitter::emitConv(const Kernel& k, size_t index) const {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const Buffer& W = p_.buffer(k.anchorInputs[1]);
  size_t nsp = X.type.rank() - 2;
  std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1);
  std::vector<int64_t> dil = spatialList(n, "dilations", nsp, 1);
  std::vector<int64_t> pads = spatialList(n, "pads", nsp * 2, 0);
  int64_t group = n.attrInt("group");
  int64_t C = X.type.shape[1].value();
  int64_t M = k.domain[1].value();
  int64_t gc = C / group, gm = M / group;
  std::vector<std::string> vars = axisVars("i", k.domain.size());
  std::string indent;
  if (const std::optional<RowTaps> taps = convRowTaps(p_, k, *split_)) {
    // An output row at a time (schedule.h, RowTaps): per tap, one loop over the columns it
    // reaches, which the compiler vectorises; then the epilogue along the row.
    const int64_t OW = k.domain[3].value(), H = X.type.shape[2].value();
    // taps->chunks: the row in registers, each tap's columns added on the lanes it reaches
    // (pc::fmaLanes). The same sums in the same order either way.
    const int64_t chunks = taps->chunks;
    const bool inRegisters = chunks > 0;
    // The epilogue on the chunks (KernelSchedule::vectorEpilogue), where this printer has it: a
    // partial last chunk's lanes by vectors of 8, the last of them partial (pc::storeFirst8).
    const int64_t tail = OW % 16;
    const bool vec = s_.kernels[index].vectorEpilogue && vectorEpilogue(k, vars) &&
                     (tail == 0 || (vectorEpilogue(k, vars, "0", 8) && (tail % 8 == 0 || vectorEpilogue(k, vars, "0", 8, static_cast<int>(tail % 8)))));
    std::string s;
    if (vec) {
      s = anchorComment(k);
      indent = "  ";
      for (size_t d = 0; d < 3; ++d) s += loopHeader(vars[d], dimStr(k.domain[d]), static_cast<int>(d) == split_->axis, indent);
    } else {
      s = openTemplate(k, accType(k), vars, indent, 3);
    }
    if (inRegisters) {
      std::vector<std::string> regs;
      for (int64_t j = 0; j < chunks; ++j) regs.push_back(fmt::format("r{} = {{}}", j));
      s += fmt::format("{}pc::RowChunk {};\n", indent, fmt::join(regs, ", "));
    } else {
      s += fmt::format("{}float row[{}] = {{}};\n", indent, OW);
    }
    s += fmt::format("{}const int64_t g = {} / {};\n", indent, vars[1], gm);
    s += fmt::format("{}for (int64_t c = 0; c < {}; ++c) {{\n", indent, gc);
    s += fmt::format("{}  for (int64_t k0 = 0; k0 < {}; ++k0) {{\n", indent, W.type.shape[2].value());
    s += fmt::format("{}    const int64_t p0 = {}*{} + k0*{} - {};\n", indent, vars[2], strides[0], dil[0], pads[0]);
    s += fmt::format("{}    if (p0 < 0 || p0 >= {}) continue;\n", indent, H);
    for (size_t k1 = 0; k1 < taps->lo.size(); ++k1) {
      if (taps->lo[k1] >= taps->hi[k1]) continue;  // this window column never lies inside the input
      const int64_t off = static_cast<int64_t>(k1) * dil[1] - pads[1];
      const std::string w = loadExpr(W.id, addressOf(W.id, {vars[1], "c", "k0", std::to_string(k1)}));
      const std::string ch = fmt::format("g*{} + c", gc);
      if (inRegisters) {
        s += fmt::format("{}    {{\n{}      const float w = {};\n", indent, indent, w);
        for (const RowTaps::Lanes& l : taps->lanesOf(k1)) {
          s += fmt::format("{}      r{} = pc::fmaLanes<{}, {}>(r{}, {} + {}, w);\n", indent, l.chunk, l.first, l.last, l.chunk,
                           ptrName(X.root), addressOf(X.id, {vars[0], ch, "p0", std::to_string(16 * l.chunk + l.first + off)}));
        }
      } else {
        const std::string p1 = fmt::format("{}*{} {} {}", vars[3], strides[1], off < 0 ? '-' : '+', off < 0 ? -off : off);
        s += fmt::format("{}    {{\n{}      const float w = {};\n", indent, indent, w);
        s += fmt::format("{}      for (int64_t {} = {}; {} < {}; ++{}) row[{}] += {} * w;\n", indent, vars[3], taps->lo[k1], vars[3],
                         taps->hi[k1], vars[3], vars[3], loadExpr(X.id, addressOf(X.id, {vars[0], ch, "p0", p1})));
      }
      s += indent + "    }\n";
    }
    s += indent + "  }\n" + indent + "}\n";
    if (inRegisters) {
      s += fmt::format("{}alignas(64) float row[{}];\n", indent, chunks * 16);
      for (int64_t j = 0; j < chunks; ++j) s += fmt::format("{}pc::storeChunk(row + {}, r{});\n", indent, 16 * j, j);
    }
    // The bias loaded once a row: GCC would reload it after every store of the epilogue.
    if (k.anchorInputs.size() > 2) {
      s += fmt::format("{}const float bias = {};\n", indent, loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], {vars[1]})));
    }
    if (vec) {
      for (int64_t j = 0; j < chunks; ++j) {
        if (16 * j + 16 <= OW) {
          s += indent + "{\n" + chunkEpilogue(k, fmt::format("row + {}", 16 * j), 16 * j, k.anchorInputs.size() > 2, indent + "  ");
          s += indent + "}\n";
          continue;
        }
        for (int64_t col = 16 * j; col < OW; col += 8) {
          const int lanes = static_cast<int>(std::min<int64_t>(8, OW - col));
          s += indent + "{\n" + chunkEpilogue(k, fmt::format("row + {}", col), col, k.anchorInputs.size() > 2, indent + "  ", 8, lanes);
          s += indent + "}\n";
        }
      }
      s += closeLoops(3, indent);
      return s;
    }
    s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", indent, vars[3], vars[3], OW, vars[3]);
    s += fmt::format("{}  float acc = row[{}];\n", indent, vars[3]);
    if (k.anchorInputs.size() > 2) s += fmt::format("{}  acc += bias;\n", indent);
    s += fmt::format("{}  {}\n{}}}\n", indent, callEpilogue(vars, "acc"), indent);
    s += closeLoops(3, indent);
    return s;
  }
  std::string s = openTemplate(k, accType(k), vars, indent);
  s += fmt::format("{}float acc = 0.0f;\n", indent);
  s += fmt::format("{}const int64_t g = {} / {};\n", indent, vars[1], gm);
  s += fmt::format("{}for (int64_t c = 0; c < {}; ++c) {{\n", indent, gc);
  std::string in2 = indent + "  ";
  std::string cur = in2;
  std::vector<std::string> xIdx = {vars[0], fmt::format("g*{} + c", gc)};
  std::vector<std::string> wIdx = {vars[1], "c"};
  for (size_t d = 0; d < nsp; ++d) {
    int64_t kd = W.type.shape[2 + d].value();
    int64_t inD = X.type.shape[2 + d].value();
    std::string kv = fmt::format("k{}", d), pv = fmt::format("p{}", d);
    s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", cur, kv, kv, kd, kv);
    cur += "  ";
    s += fmt::format("{}const int64_t {} = {}*{} + {}*{} - {};\n", cur, pv, vars[2 + d], strides[d], kv, dil[d], pads[d]);
    s += fmt::format("{}if ({} < 0 || {} >= {}) continue;\n", cur, pv, pv, inD);
    xIdx.push_back(pv);
    wIdx.push_back(kv);
  }
  // An explicit fused multiply-add, as the LLVM printer's: GCC's contraction of `acc += x * w`
  // depends on how it vectorizes the loop nest (3-D convs without padding were left unfused).
  s += fmt::format("{}acc = __builtin_fmaf({}, {}, acc);\n", cur, loadExpr(X.id, addressOf(X.id, xIdx)), loadExpr(W.id, addressOf(W.id, wIdx)));
  for (size_t d = 0; d < nsp; ++d) {
    cur.resize(cur.size() - 2);
    s += cur + "}\n";
  }
  s += indent + "}\n";
  if (k.anchorInputs.size() > 2) {
    s += fmt::format("{}acc += {};\n", indent, loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], {vars[1]})));
  }
  s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
  s += closeLoops(k.domain.size(), indent);
  return s;
}

}  // namespace policyc::codegen::cppemit
