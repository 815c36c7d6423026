// The C++ emitter's pooling templates: a window per output (Form::Pool), max pools by output
// rows (RowPoolGeometry: column maxima, the window step on registers) and average pools by rows.
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

std::string Emitter::emitPool(const Kernel& k) const {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  size_t nsp = X.type.rank() - 2;
  const std::vector<int64_t>& kernel = n.attrInts("kernel_shape");
  std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1);
  std::vector<int64_t> dil = spatialList(n, "dilations", nsp, 1);
  std::vector<int64_t> pads = spatialList(n, "pads", nsp * 2, 0);
  bool isMax = n.isOp(Op::MaxPool);
  // KernelSchedule::windowInside: fixed window loops, no bounds checks.
  const KernelSchedule& ks = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())];
  const bool inside = ks.windowInside;
  std::vector<std::string> vars = axisVars("i", k.domain.size());
  // KernelSchedule::vectorEpilogue (evenColumnPool): the output rows 8 columns at a time.
  const std::optional<std::string> vec = ks.vectorEpilogue ? vectorEpilogue(k, vars, "i3", 8) : std::nullopt;
  std::string indent;
  std::string s = openTemplate(k, accType(k), vars, indent, vec ? 3 : k.domain.size());
  std::vector<std::string> xIdx = {vars[0], vars[1]};
  if (vec) {
    const int64_t window = kernel[0] * kernel[1];
    s += fmt::format("{}// 8 outputs at a time, each window tap's 8 inputs in pc::evenLanes' order, added in the\n"
                     "{}// order of the one-by-one loop below, then put back in order\n",
                     indent, indent);
    s += fmt::format("{}int64_t i3 = 0;\n{}for (; i3 + 8 <= {}; i3 += 8) {{\n", indent, indent, k.domain[3].value());
    s += fmt::format("{}  pc::f32x8 sum = {{}};\n", indent);
    for (int64_t k0 = 0; k0 < kernel[0]; ++k0) {
      for (int64_t k1 = 0; k1 < kernel[1]; ++k1) {
        const std::string row = fmt::format("i2*{} + {}", strides[0], k0), col = fmt::format("i3*2 + {}", k1);
        s += fmt::format("{}  sum += pc::evenLanes({} + {});\n", indent, ptrName(X.root), addressOf(X.id, {vars[0], vars[1], row, col}));
      }
    }
    s += fmt::format("{}  pc::f32x8 v = pc::evenOrder(sum) / static_cast<float>({});\n", indent, window);
    s += indented(*vec, indent + "  ") + indent + "}\n";
    s += fmt::format("{}for (; i3 < {}; ++i3) {{\n", indent, k.domain[3].value());
    indent += "  ";
  }
  std::string cur = indent;
  if (inside) {
    int64_t window = 1;
    s += fmt::format("{}float acc = {};\n", indent, isMax ? "-pc::inf<float>()" : "0.0f");
    for (size_t d = 0; d < nsp; ++d) {
      std::string kv = fmt::format("k{}", d), pv = fmt::format("p{}", d);
      s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", cur, kv, kv, kernel[d], kv);
      cur += "  ";
      s += fmt::format("{}const int64_t {} = {}*{} + {}*{};\n", cur, pv, vars[2 + d], strides[d], kv, dil[d]);
      xIdx.push_back(pv);
      window *= kernel[d];
    }
    const std::string x = loadExpr(X.id, addressOf(X.id, xIdx));
    s += isMax ? fmt::format("{}acc = pc::maxNaNScan<float>(acc, {});\n", cur, x) : fmt::format("{}acc += {};\n", cur, x);
    for (size_t d = 0; d < nsp; ++d) {
      cur.resize(cur.size() - 2);
      s += cur + "}\n";
    }
    if (!isMax) s += fmt::format("{}acc = acc / static_cast<float>({});\n", indent, window);
    s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
    s += closeLoops(k.domain.size(), indent);
    return s;
  }
  if (isMax) {
    s += fmt::format("{}float acc = -pc::inf<float>();  // padding never wins\n", indent);
    for (size_t d = 0; d < nsp; ++d) {
      std::string kv = fmt::format("k{}", d), pv = fmt::format("p{}", d);
      s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", cur, kv, kv, kernel[d], kv);
      cur += "  ";
      s += fmt::format("{}const int64_t {} = {}*{} + {}*{} - {};\n", cur, pv, vars[2 + d], strides[d], kv, dil[d], pads[d]);
      s += fmt::format("{}if ({} < 0 || {} >= {}) continue;\n", cur, pv, pv, X.type.shape[2 + d].value());
      xIdx.push_back(pv);
    }
    s += fmt::format("{}acc = pc::maxNaNScan<float>(acc, {});\n", cur, loadExpr(X.id, addressOf(X.id, xIdx)));
  } else {
    // As onnxruntime: the window is clipped to the padded input; count_include_pad divides by
    // the clipped window's size, otherwise by the in-bounds count (none gives 0).
    s += fmt::format("{}float sum = 0.0f;\n{}int64_t count = 0, windowSize = 1;\n", indent, indent);
    for (size_t d = 0; d < nsp; ++d) {
      int64_t inD = X.type.shape[2 + d].value();
      s += fmt::format("{}const int64_t b{} = {}*{} - {};\n", indent, d, vars[2 + d], strides[d], pads[d]);
      s += fmt::format("{}const int64_t e{} = b{} + {} < {} ? b{} + {} : {};\n", indent, d, d, kernel[d],
                       inD + pads[nsp + d], d, kernel[d], inD + pads[nsp + d]);
      s += fmt::format("{}windowSize *= e{} - b{};\n", indent, d, d);
    }
    for (size_t d = 0; d < nsp; ++d) {
      std::string pv = fmt::format("p{}", d);
      s += fmt::format("{}for (int64_t {} = b{}; {} < e{}; ++{}) {{\n", cur, pv, d, pv, d, pv);
      cur += "  ";
      s += fmt::format("{}if ({} < 0 || {} >= {}) continue;\n", cur, pv, pv, X.type.shape[2 + d].value());
      xIdx.push_back(pv);
    }
    s += fmt::format("{}sum += {};\n{}++count;\n", cur, loadExpr(X.id, addressOf(X.id, xIdx)), cur);
  }
  for (size_t d = 0; d < nsp; ++d) {
    cur.resize(cur.size() - 2);
    s += cur + "}\n";
  }
  if (!isMax) {
    bool includePad = n.attrInt("count_include_pad") != 0;
    s += fmt::format("{}const float acc = count == 0 ? 0.0f : sum / static_cast<float>({});\n", indent,
                     includePad ? "windowSize" : "count");
  }
  s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
  s += closeLoops(k.domain.size(), indent);
  return s;
}

std::string Emitter::emitMaxPoolRows(const Kernel& k) const {
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const RowPoolGeometry g = rowPoolGeometry(p_, k);
  const std::vector<int64_t>&kernel = g.kernel, &st = g.strides, &dil = g.dilations, &pads = g.pads;
  const int64_t C = g.C, OH = g.OH, OW = g.OW, H = g.H, W = g.W, padL = g.padL, span = g.span, chunks = g.chunks,
                colSize = g.colSize;
  std::string s = emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  // g.chunks: the column maxima in registers (a row in memory, updated by loops of 20 or 21
  // columns, stalls on store forwarding); g.window: the window step on them too.
  const bool inRegisters = !g.window.empty();
  const std::vector<std::string> vars = {"i0", "i1", "i2", "i3"};
  const bool vec = s_.kernels[static_cast<size_t>(&k - p_.kernels.data())].vectorEpilogue && vectorEpilogue(k, vars, "0", 8);
  if (!vec) s += fmt::format("  float out[{}];\n", 8 * ((OW + 7) / 8));
  s += "  const float qnan = pc::nan<float>();\n";
  if (inRegisters) {
    s += "  const pc::f32x8 negInf = pc::splat8(-pc::inf<float>());\n";
  } else {
    s += "  auto mx = [](float m, float v) { return m > v ? m : v; };\n";
    s += fmt::format("  float col[{}];    // input columns {} to {} at col[{}..]\n", colSize, -padL, span - padL - 1, padL);
    s += fmt::format("  int32_t nanIn[{}];  // whether a NaN was in that column\n", colSize);
    s += "  int32_t nanBits;\n  std::memcpy(&nanBits, &qnan, sizeof nanBits);\n";
    s += fmt::format("  for (int64_t c = 0; c < {}; ++c) col[c] = -pc::inf<float>(), nanIn[c] = 0;  // padding never wins\n", colSize);
  }
  s += unitLoop();
  s += fmt::format("    const int64_t i0 = uq / {}, i1 = uq / {} % {}, i2 = uq % {};\n", C * OH, OH, C, OH);
  if (!inRegisters) s += fmt::format("    float* PC_RESTRICT cm = col + {};\n    int32_t* PC_RESTRICT cn = nanIn + {};\n", padL, padL);
  // With the window step on registers, one NaN flag for the whole unit: the rare unit that holds
  // a NaN reads its rows again for the flags per column (eight flag vectors beside the eight
  // maxima left GCC no registers for the step's shuffle masks: 1.3x LLVM's time).
  std::vector<std::string> ns;
  for (int64_t j = 0; j < chunks; ++j) ns.push_back(fmt::format("n{} = {{}}", j));
  if (chunks) {
    std::vector<std::string> ms;
    for (int64_t j = 0; j < chunks; ++j) ms.push_back(fmt::format("m{} = pc::splat8(-pc::inf<float>())", j));
    if (inRegisters) {
      s += fmt::format("    pc::f32x8 {}, nanAny = {{}};\n", fmt::join(ms, ", "));
    } else {
      s += fmt::format("    pc::f32x8 {};\n    pc::i32x8 {};\n", fmt::join(ms, ", "), fmt::join(ns, ", "));
    }
  } else {
    s += fmt::format("    for (int64_t iw = 0; iw < {}; ++iw) cm[iw] = -pc::inf<float>(), cn[iw] = 0;\n", W);
  }
  // The window's rows: each chunk's maxima (max), its NaN flags (flags), or both.
  auto rowsLoop = [&](const std::string& indent, bool max, bool flags) {
    std::string t = fmt::format("{}for (int64_t kh = 0; kh < {}; ++kh) {{\n", indent, kernel[0]);
    t += fmt::format("{}  const int64_t ih = i2*{} + kh*{} - {};\n", indent, st[0], dil[0], pads[0]);
    t += fmt::format("{}  if (ih < 0 || ih >= {}) continue;\n", indent, H);
    t += fmt::format("{}  const float* PC_RESTRICT row = {} + {};\n", indent, ptrName(X.root), addressOf(X.id, {"i0", "i1", "ih", "0"}));
    if (chunks) {
      auto load = [&](int64_t j) {
        const int64_t n = std::min<int64_t>(8, W - 8 * j);
        return n == 8 ? fmt::format("pc::load8(row + {})", 8 * j) : fmt::format("pc::loadFirst8<{}>(row + {}, -pc::inf<float>())", n, 8 * j);
      };
      if (inRegisters && max) {
        // One NaN test for the unit: the row's values summed in a tree into nanAny, which a NaN
        // keeps NaN (an inf beside a -inf makes one too: that unit takes the flags path, exact
        // as well). A compare a load left GCC moving masks through general registers and the
        // stack (1.3x LLVM's time).
        std::vector<std::string> xs;
        for (int64_t j = 0; j < chunks; ++j) {
          t += fmt::format("{}  const pc::f32x8 x{} = {}; m{} = pc::maxps(m{}, x{});\n", indent, j, load(j), j, j, j);
          xs.push_back(fmt::format("x{}", j));
        }
        while (xs.size() > 1) {
          std::vector<std::string> sums;
          for (size_t i = 0; i + 1 < xs.size(); i += 2) sums.push_back(fmt::format("({} + {})", xs[i], xs[i + 1]));
          if (xs.size() % 2) sums.push_back(xs.back());
          xs = sums;
        }
        t += fmt::format("{}  nanAny += {};\n", indent, xs[0]);
      } else {
        for (int64_t j = 0; j < chunks; ++j) {
          t += fmt::format("{}  {{ const pc::f32x8 x = {};{}{} }}\n", indent, load(j), max ? fmt::format(" m{} = pc::maxps(m{}, x);", j, j) : "",
                           flags ? fmt::format(" n{} |= x != x;", j) : "");
        }
      }
    } else {
      t += fmt::format("{}  for (int64_t iw = 0; iw < {}; ++iw) cm[iw] = mx(cm[iw], row[iw]), cn[iw] |= row[iw] != row[iw];\n", indent, W);
    }
    return t + indent + "}\n";
  };
  s += rowsLoop("    ", true, true);
  if (inRegisters) {
    // The window step on the registers (g.window): per 8 outputs, each window column's maxima
    // shuffled out of them, the maxima taken in window order.
    auto lanes = [](const ShuffledLanes& v, char reg, const std::string& fill) {
      if (v.steps.empty()) return fmt::format("{}{}", reg, v.whole);
      std::string e;
      for (const LaneShuffle& step : v.steps) {
        auto operand = [&](int r) { return r == LaneShuffle::kPrev ? e : r == LaneShuffle::kFill ? fill : fmt::format("{}{}", reg, r); };
        // __builtin_shufflevector: GCC (12 on) and clang both have it, GCC's __builtin_shuffle not clang.
        e = fmt::format("__builtin_shufflevector({}, {}, {})", operand(step.a), operand(step.b), fmt::join(step.mask, ", "));
      }
      return e;
    };
    // Every 8 outputs' window step; with `flags`, NaN where a window column's flag is set.
    auto steps = [&](bool flags) {
      std::string t;
      for (size_t o = 0; o < g.window.size(); ++o) {
        const std::vector<ShuffledLanes>& taps = g.window[o];
        t += fmt::format("    {{\n      pc::f32x8 w = {};\n", lanes(taps[0], 'm', "negInf"));
        if (flags) t += fmt::format("      pc::i32x8 nw = {};\n", lanes(taps[0], 'n', "pc::i32x8{}"));
        for (size_t kw = 1; kw < taps.size(); ++kw) {
          t += fmt::format("      {{ const pc::f32x8 x = {}; w = pc::maxps(w, x); }}\n", lanes(taps[kw], 'm', "negInf"));
          if (flags) t += fmt::format("      nw |= {};\n", lanes(taps[kw], 'n', "pc::i32x8{}"));
        }
        std::string result = flags ? "nw != 0 ? pc::splat8(qnan) : w" : "w";
        if (g.evenOrder) result = fmt::format("pc::evenOrder({})", result);  // RowPoolGeometry::evenOrder
        if (vec) {
          // The epilogue on the 8 outputs (KernelSchedule::vectorEpilogue).
          t += fmt::format("      pc::f32x8 v = {};\n", result);
          t += indented(*vectorEpilogue(k, vars, std::to_string(8 * o), 8), "      ");
          t += "    }\n";
        } else {
          t += fmt::format("      pc::store8(out + {}, {});\n    }}\n", 8 * o, result);
        }
      }
      return t;
    };
    s += "    if (!pc::anyLane(nanAny != nanAny)) {\n" + indented(steps(false), "  ");
    s += fmt::format("    }} else {{  // a NaN in the unit's rows: the flags per column\n      pc::i32x8 {};\n", fmt::join(ns, ", "));
    s += rowsLoop("      ", false, true) + indented(steps(true), "  ") + "    }\n";
  } else {
    for (int64_t j = 0; j < chunks; ++j) {
      s += fmt::format("    pc::store8(cm + {}, m{}), std::memcpy(cn + {}, &n{}, sizeof n{});\n", 8 * j, j, 8 * j, j, j);
    }
    std::string window = fmt::format("col[i3*{}]", st[1]), nans = fmt::format("nanIn[i3*{}]", st[1]);
    for (int64_t kw = 1; kw < kernel[1]; ++kw) {
      window = fmt::format("mx({}, col[i3*{} + {}])", window, st[1], kw * dil[1]);
      nans += fmt::format(" | nanIn[i3*{} + {}]", st[1], kw * dil[1]);
    }
    // NaN by its bits, a conditional move: as a float select GCC branches on every output.
    s += fmt::format("    for (int64_t i3 = 0; i3 < {}; ++i3) {{\n      const float m = {};\n      int32_t bits;\n", OW, window);
    s += "      std::memcpy(&bits, &m, sizeof bits);\n";
    s += fmt::format("      bits = ({}) ? nanBits : bits;\n      std::memcpy(out + i3, &bits, sizeof bits);\n    }}\n", nans);
  }
  if (!vec) s += fmt::format("    for (int64_t i3 = 0; i3 < {}; ++i3) {}\n", OW, callEpilogue(vars, "out[i3]"));
  s += "  }\n";
  return s;
}

std::string Emitter::emitAvgPoolRows(const Kernel& k) const {
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const RowPoolGeometry g = rowPoolGeometry(p_, k);
  const int64_t C = g.C, OH = g.OH, OW = g.OW, s1 = g.strides[1], padL = g.padL;
  std::string s = emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  const RowTaps& taps = g.taps;
  // taps.chunks: the sums in registers, each tap added on the lanes it reaches (pc::fmaLanes with
  // weight 1: x * 1 + sum is x + sum exactly).
  s += fmt::format("  alignas(64) float sum[{}];\n", taps.chunks ? taps.chunks * 16 : OW);
  s += unitLoop();
  s += fmt::format("    const int64_t i0 = uq / {}, i1 = uq / {} % {}, i2 = uq % {};\n", C * OH, OH, C, OH);
  if (taps.chunks) {
    std::vector<std::string> regs;
    for (int64_t j = 0; j < taps.chunks; ++j) regs.push_back(fmt::format("r{} = {{}}", j));
    s += fmt::format("    pc::RowChunk {};\n", fmt::join(regs, ", "));
  } else {
    s += fmt::format("    for (int64_t i3 = 0; i3 < {}; ++i3) sum[i3] = 0.0f;\n", OW);
  }
  // As onnxruntime: the window clipped to the padded input, [b0, e0) rows; [top, bottom) inside it.
  s += fmt::format("    const int64_t b0 = i2*{} - {}, e0 = b0 + {} < {} ? b0 + {} : {};\n", g.strides[0], g.pads[0], g.kernel[0], g.rowsEnd, g.kernel[0], g.rowsEnd);
  s += fmt::format("    const int64_t top = b0 < 0 ? 0 : b0, bottom = e0 < {} ? e0 : {};\n", g.H, g.H);
  s += "    for (int64_t ih = top; ih < bottom; ++ih) {\n";
  s += fmt::format("      const float* PC_RESTRICT row = {} + {};\n", ptrName(X.root), addressOf(X.id, {"i0", "i1", "ih", "0"}));
  for (size_t kw = 0; kw < taps.lo.size(); ++kw) {
    if (taps.lo[kw] >= taps.hi[kw]) continue;  // this window column never lies inside the input
    const int64_t off = static_cast<int64_t>(kw) - padL;
    if (taps.chunks) {
      for (const RowTaps::Lanes& l : taps.lanesOf(kw)) {
        s += fmt::format("      r{} = pc::fmaLanes{}<{}, {}>(r{}, row + {}, 1.0f);\n", l.chunk, taps.finiteWeights ? "Z" : "", l.first, l.last, l.chunk,
                         16 * l.chunk + l.first + off);
      }
      continue;
    }
    s += fmt::format("      for (int64_t i3 = {}; i3 < {}; ++i3) sum[i3] += row[i3*{} {} {}];\n", taps.lo[kw], taps.hi[kw], s1,
                     off < 0 ? '-' : '+', off < 0 ? -off : off);
  }
  s += "    }\n";
  // With the padding counted and no window clipped (every window inside the padded input), the
  // divisor is the window's size: the sums divided by it as whole vectors of 16 (the same bits
  // lane by lane; GCC split the loop below's divisions into parts of 8, 4, 2, 1 and 1, five
  // divisions a row where LLVM makes one: uint8_convbn's 3 x 3 pool 1.25x LLVM's time).
  const bool wholeWindows = (g.OH - 1) * g.strides[0] - g.pads[0] + g.kernel[0] <= g.rowsEnd &&
                            (g.OW - 1) * g.strides[1] - padL + g.kernel[1] <= g.colsEnd;
  const bool divided = g.includePad && wholeWindows && taps.chunks;
  for (int64_t j = 0; j < taps.chunks; ++j) {
    s += fmt::format("    pc::storeChunk(sum + {}, r{}{});\n", 16 * j, j, divided ? fmt::format(" / {}.0f", g.kernel[0] * g.kernel[1]) : "");
  }
  // The divisors in int32 (a row's columns and a window's size are small): GCC vectorises the
  // loop then, where AVX2 has no 64-bit multiply (uint8_convbn's 3 x 3 pool 1.15x faster). The
  // rows inside the input counted before it: a condition on them inside the loop GCC made a mask
  // of 16 lanes bit by bit on AVX-512 (30 instructions a unit; that pool 1.3x LLVM's time).
  s += "    const int32_t rowsIn = bottom > top ? static_cast<int32_t>(bottom - top) : 0;\n";
  s += fmt::format("    for (int64_t i3 = 0; i3 < {}; ++i3) {{\n", OW);
  s += fmt::format("      const int32_t b1 = static_cast<int32_t>(i3)*{} - {}, e1 = b1 + {} < {} ? b1 + {} : {};\n", s1, padL, g.kernel[1], g.colsEnd,
                   g.kernel[1], g.colsEnd);
  s += fmt::format("      const int32_t cols = (e1 < {} ? e1 : {}) - (b1 < 0 ? 0 : b1), count = cols > 0 ? rowsIn * cols : 0;\n",
                   g.W, g.W);
  // Otherwise as a constant when it is one, one vector division a chunk (LLVM finds the constant
  // itself; GCC divided by each lane's product in five parts).
  const std::string divisor = !g.includePad ? "count"
                              : wholeWindows ? fmt::format("{}", g.kernel[0] * g.kernel[1])
                                             : "static_cast<int32_t>(e0 - b0) * (e1 - b1)";
  s += divided ? "      const float acc = count == 0 ? 0.0f : sum[i3];\n"
               : fmt::format("      const float acc = count == 0 ? 0.0f : sum[i3] / static_cast<float>({});\n", divisor);
  s += fmt::format("      {}\n    }}\n  }}\n", callEpilogue({"i0", "i1", "i2", "i3"}, "acc"));
  return s;
}

}  // namespace policyc::codegen::cppemit
