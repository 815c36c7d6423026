// The C++ emitter's convolution templates: implicit-GEMM convs on packed panels (microkernel tiles
// over gathered or contiguous patches), conv_rows' direct convs by output rows, and the loop nest
// of every other conv.
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
