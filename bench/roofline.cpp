// policyc_roofline: the machine's bounds for one core (tools/roofline.h) — peak fp32 FMA rate
// (AVX2, and AVX-512 where the CPU has it) and read bandwidth from L2, L3 and DRAM — for
// bench/peers/run.sh; `policyc bench --profile` measures the same once and caches it.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "policyc/ir/error.h"
#include "roofline.h"

int main(int argc, char** argv) {
  std::string json;
  // The cache sizes that decide which level holds a model's weights. This machine's virtual CPU
  // reports none through cpuid or sysfs (and sysconf's are made up), so they are options, with the
  // documented sizes of the reference machine as defaults.
  long l2 = 512L << 10, l3 = 32L << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--l2-kib" && i + 1 < argc) {
      l2 = std::atol(argv[++i]) << 10;
    } else if (a == "--l3-mib" && i + 1 < argc) {
      l3 = std::atol(argv[++i]) << 20;
    } else {
      std::fprintf(stderr, "usage: policyc_roofline [--json FILE] [--l2-kib N (512)] [--l3-mib N (32)]\n");
      return 2;
    }
  }
  policyc::tools::Roofline r;
  try {
    r = policyc::tools::measureRoofline(l2, l3);
  } catch (const policyc::Error& e) {
    std::fprintf(stderr, "policyc_roofline: error: %s\n", e.what());
    return 2;
  }
  const auto [l2Floats, l3Floats, dramFloats] = policyc::tools::rooflineArrays(l2, l3);
  std::printf("peak fp32 FMA (AVX2, 1 core)   %8.1f GFLOP/s\n", r.peakGflops);
  if (r.peakAvx512Gflops > 0) std::printf("peak fp32 FMA (AVX-512)        %8.1f GFLOP/s\n", r.peakAvx512Gflops);
  std::printf("read bandwidth, %5ld KiB (L2)  %8.1f GB/s   (L2 %ld KiB)\n", static_cast<long>(l2Floats * 4 >> 10), r.bwL2, l2 >> 10);
  std::printf("read bandwidth, %5ld MiB (L3)  %8.1f GB/s   (L3 %ld MiB)\n", static_cast<long>(l3Floats * 4 >> 20), r.bwL3, l3 >> 20);
  std::printf("read bandwidth, %5ld MiB (DRAM)%8.1f GB/s\n", static_cast<long>(dramFloats * 4 >> 20), r.bwDram);
  if (!json.empty()) {
    std::ofstream f(json);
    f << policyc::tools::rooflineJson(r);
    if (!f) {
      std::fprintf(stderr, "policyc_roofline: error: cannot write '%s'\n", json.c_str());
      return 2;
    }
  }
  return 0;
}
