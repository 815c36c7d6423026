// This machine's bounds for one core: the peak fp32 FMA rate (AVX2, and AVX-512 where the CPU has
// it) and the read bandwidth from L2, L3 and DRAM — what `policyc bench --profile` sets each
// kernel's time against, and what bench/peers/run.sh prints (policyc_roofline).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace policyc::tools {

struct Roofline {
  double peakGflops = 0;        // fp32 FMA, 8-wide (AVX2)
  double peakAvx512Gflops = 0;  // 16-wide; 0 without AVX-512
  long l2Bytes = 512L << 10, l3Bytes = 32L << 20;  // the cache sizes the levels are measured within
  double bwL2 = 0, bwL3 = 0, bwDram = 0;  // GB/s read

  // The FMA peak generated code can reach here: the AVX-512 one where there is one.
  double peak() const { return peakAvx512Gflops > 0 ? peakAvx512Gflops : peakGflops; }
  // The read bandwidth of the level that holds `bytes` (half of L2 and a quarter of L3 count as
  // inside, as when measuring: the rest of the cache holds everything else).
  double bandwidthFor(double bytes) const;
  // The least time (microseconds) `flops` and `bytes` can take on one core: the larger of the two.
  double boundUs(double flops, double bytes) const;
};

// The arrays each level is measured with, in floats: well inside L2 (half of it) and L3 (a
// quarter, which other cores share), and far outside the last level.
struct RooflineArrays {
  size_t l2Floats, l3Floats, dramFloats;
};
RooflineArrays rooflineArrays(long l2Bytes, long l3Bytes);

// Measures it (a few seconds; `repeats` best-of runs of each loop, about `gigabytes` read per run
// of each level). Error on a CPU without AVX2 + FMA or when the DRAM array cannot be allocated.
Roofline measureRoofline(long l2Bytes, long l3Bytes, int repeats = 5, double gigabytes = 2.0);

std::string rooflineJson(const Roofline& r);
std::optional<Roofline> parseRooflineJson(const std::string& text);

// The roofline `policyc bench --profile` uses: from `path` when given (policyc_roofline --json),
// else this machine's, measured once and kept in the compile cache per CPU model.
Roofline machineRoofline(const std::string& path);

}  // namespace policyc::tools
