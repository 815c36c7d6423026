// The C++ emitter's Winograd F(2x2, 3x3) convolution (Impl::WinogradF23, schedule.h's
// WinogradTiles): a band of tile rows a unit, its input transformed, 16 GEMMs, the outputs
// transformed back into rows that the epilogue takes eight columns at a time.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "emitter.h"

namespace policyc::codegen::cppemit {

std::string Emitter::emitWinograd(const Kernel& k, size_t index) const {
  const KernelSchedule& ks = s_.kernels[index];
  const WinogradTiles& t = *ks.winograd;
  const Buffer& X = p_.buffer(k.anchorInputs[0]);
  const int64_t C = t.C, M = t.M, R = t.rows, P = t.panels, TW = t.TW, BR = t.bandRows;
  const int64_t bandH = t.bandH(), bandW = t.bandW();
  std::string s = emitEpilogueLambda(k, accType(k));
  s += anchorComment(k);
  s += fmt::format("  // winograd_f23: units of {} row(s) of {} tiles (2 x 2 outputs each, {} tiles), {} output channels a GEMM tile\n", BR, TW,
                   t.tiles(), R);
  s += fmt::format("  const float* PC_RESTRICT up = reinterpret_cast<const float*>(pc_weights + {});  // U[16][{}][{}]{}\n", ks.winogradWeight,
                   M, C, t.bf16 ? ", bf16 values: products in bf16" : "");
  s += fmt::format("  const float* PC_RESTRICT bp = reinterpret_cast<const float*>(pc_weights + {});\n", ks.packedBias);
  s += "  alignas(64) static const float zeros[32] = {};\n";
  // The band's rows and the products' are read 16 and 8 floats at a time past a short run's end.
  s += fmt::format("  alignas(64) float band[{}];  // [{}][{}][{}], the input rows the unit's tiles read, padding zeroed\n",
                   t.bandFloats() + 16, C, bandH, bandW);
  s += fmt::format("  alignas(64) float V[{}];  // the transformed inputs [16][{}][{}][16], {} floats apart\n", t.inputFloats(), P, C,
                   t.inputStride());
  s += fmt::format("  alignas(64) float Mt[{}];  // a channel group's products [16][{}][{}], {} floats apart\n", t.productFloats() + 8, R,
                   16 * P, t.productStride());
  s += fmt::format("  alignas(64) float yrow[2][{}];  // two output rows of a channel\n", 2 * TW + 8);
  s += "  std::memset(band + " + std::to_string(t.bandFloats()) + ", 0, 16 * sizeof(float));\n";
  if (t.tiles() % 16) {
    // The last vector's lanes past the band's tiles: zeros the GEMMs multiply (never written).
    s += fmt::format("  for (int64_t xi = 0; xi < 16; ++xi) std::memset(V + xi*{} + {}, 0, {} * sizeof(float));\n", t.inputStride(),
                     (P - 1) * C * 16, C * 16);
  }
  s += unitLoop();
  s += fmt::format("    const int64_t i0 = uq / {}, ty0 = uq % {} * {};\n", t.bands, t.bands, BR);
  s += fmt::format("    for (int64_t c = 0; c < {}; ++c)\n      for (int64_t r = 0; r < {}; ++r) {{\n", C, bandH);
  s += fmt::format("        float* PC_RESTRICT row = band + (c*{} + r)*{};\n        const int64_t ih = 2*ty0 + r - {};\n", bandH, bandW,
                   t.padTop);
  s += paddedRowCopy(X, t.padLeft, bandW, "        ");
  s += "      }\n";
  // V: tile t = ty * TW + tx of channel c at V[xi][t / 16][c][t % 16], tile row by tile row in
  // runs that stay in one vector (WinogradTiles::inputRuns).
  s += fmt::format("    for (int64_t c = 0; c < {}; ++c) {{\n", C);
  s += fmt::format("      const float* PC_RESTRICT b0 = band + c*{};\n", bandH * bandW);
  s += fmt::format("      float* PC_RESTRICT vc = V + c*16;\n");
  for (int64_t ty = 0; ty < BR; ++ty) {
    const int64_t r0 = 2 * ty * bandW;
    s += fmt::format("      {{\n        const float* const r[4] = {{b0 + {}, b0 + {}, b0 + {}, b0 + {}}};\n", r0, r0 + bandW, r0 + 2 * bandW,
                     r0 + 3 * bandW);
    for (const WinogradTiles::Run& run : t.inputRuns(ty)) {
      s += fmt::format("        pc::winogradInput<{}>(r, {}, vc + {}, {});\n", run.count, run.x0, run.panel * C * 16 + run.lane,
                       t.inputStride());
    }
    s += "      }\n";
  }
  s += "    }\n";
  if (t.bf16) {
    // Products in bf16: each panel of V rewritten in place as bf16 pairs along the channels.
    s += fmt::format("    for (int64_t xi = 0; xi < 16; ++xi)\n      for (int64_t p = 0; p < {}; ++p) pc::winogradPairs(V + xi*{} + p*{}, {});\n", P,
                     t.inputStride(), C * 16, C);
  }
  // The 16 GEMMs of a group of R output channels (the last group's rows past M repeat its last
  // channel, computed and dropped), then that group's outputs.
  s += fmt::format("    for (int64_t m0 = 0; m0 < {}; m0 += {}) {{\n", M, R);
  s += "      for (int64_t xi = 0; xi < 16; ++xi) {\n";
  s += fmt::format("        const float* x[{}];\n", R);
  s += fmt::format("        for (int64_t r = 0; r < {}; ++r) x[r] = up + (xi*{} + (m0 + r < {} ? m0 + r : {}))*{};\n", R, M, M, M - 1, C);
  // The tile inlined (pc::gemm_rxp_to, K and the strides constants): out of line (pc::gemm_8x32),
  // the kernel took 1.25x the LLVM build's time.
  const int64_t per = R == 8 ? 2 : 1;  // vectors of tiles a call: two with AVX-512 (an odd last one alone), one without
  for (int64_t q = 0; q < P; q += per) {
    if (t.bf16) {  // U's rows rounded to pairs by the tile, V's panels C * 16 words apart
      s += fmt::format("        pc::gemmDot<{}, {}>({}, pc::Contiguous{{}}, x, reinterpret_cast<const uint32_t*>(V + xi*{} + {}), {}, zeros, "
                       "Mt + xi*{} + {}, {});\n",
                       R, std::min(per, P - q), C, t.inputStride(), q * C * 16, C * 16, t.productStride(), q * 16, 16 * P);
      continue;
    }
    s += fmt::format("        pc::gemm_rxp_to<{}, {}, 1>({}, [](int64_t q) {{ return q; }}, x, V + xi*{} + {}, zeros, "
                     "pc::RowsAt{{Mt + xi*{} + {}, {}}}, nullptr);\n",
                     R, std::min(per, P - q), C, t.inputStride(), q * C * 16, t.productStride(), q * 16, 16 * P);
  }
  s += "      }\n";
  s += fmt::format("      for (int64_t i1 = m0; i1 < m0 + {} && i1 < {}; ++i1) {{\n", R, M);
  s += fmt::format("        const float* PC_RESTRICT mr = Mt + (i1 - m0)*{};\n        const float bias = bp[i1];\n", 16 * P);
  s += fmt::format("        for (int64_t ty = 0; ty < {} && ty0 + ty < {}; ++ty) {{\n", BR, t.TH);
  s += fmt::format("          const float* PC_RESTRICT mt = mr + ty*{};\n", TW);
  for (const WinogradTiles::Run& run : t.outputRuns()) {
    s += fmt::format("          pc::winogradOutput<{}>(mt + {}, {}, bias, yrow[0] + {}, yrow[1] + {});\n", run.count, run.x0, t.productStride(),
                     2 * run.x0, 2 * run.x0);
  }
  s += fmt::format("          for (int64_t half = 0; half < 2 && 2*(ty0 + ty) + half < {}; ++half) {{\n", t.OH);
  s += "            const int64_t i2 = 2*(ty0 + ty) + half;\n";
  if (ks.tileEpilogue && vectorEpilogue(k, axisVars("i", 4), "0", 8)) {
    // The epilogue on 8 columns at a time (a last chunk of fewer: its first lanes).
    for (int64_t col = 0; col < t.OW; col += 8) {
      s += "            {\n";
      s += chunkEpilogue(k, fmt::format("yrow[half] + {}", col), col, false, "              ", 8, static_cast<int>(std::min<int64_t>(8, t.OW - col)) % 8);
      s += "            }\n";
    }
  } else {
    s += fmt::format("            for (int64_t c = 0; c < {}; ++c) epilogue(i0, i1, i2, c, yrow[half][c]);\n", t.OW);
  }
  s += "          }\n        }\n      }\n    }\n  }\n";
  return s;
}

}  // namespace policyc::codegen::cppemit
