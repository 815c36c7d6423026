// policyc_roofline: the machine's bounds for one core — peak fp32 FMA rate (AVX2, and AVX-512
// where the CPU has it) and read bandwidth from L2, L3 and DRAM — for bench/peers/run.sh.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
volatile float gSink;  // keeps the measured loops from being optimised away

// 12 independent chains of 8-wide FMAs (named registers, not an array the compiler may keep in
// memory): enough to cover the FMA latency on both FMA pipes.
__attribute__((target("avx2,fma"), noinline)) double fmaGflops(long iterations) {
  __m256 a0 = _mm256_set1_ps(0.f), a1 = _mm256_set1_ps(1.f), a2 = _mm256_set1_ps(2.f), a3 = _mm256_set1_ps(3.f);
  __m256 a4 = _mm256_set1_ps(4.f), a5 = _mm256_set1_ps(5.f), a6 = _mm256_set1_ps(6.f), a7 = _mm256_set1_ps(7.f);
  __m256 a8 = _mm256_set1_ps(8.f), a9 = _mm256_set1_ps(9.f), a10 = _mm256_set1_ps(10.f), a11 = _mm256_set1_ps(11.f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  auto t0 = Clock::now();
  for (long n = 0; n < iterations; ++n) {
    a0 = _mm256_fmadd_ps(a0, m, c), a1 = _mm256_fmadd_ps(a1, m, c), a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c), a4 = _mm256_fmadd_ps(a4, m, c), a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c), a7 = _mm256_fmadd_ps(a7, m, c), a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c), a10 = _mm256_fmadd_ps(a10, m, c), a11 = _mm256_fmadd_ps(a11, m, c);
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8];
  _mm256_storeu_ps(out, sum);
  gSink = out[0];
  return static_cast<double>(iterations) * 12 * 8 * 2 / s / 1e9;
}

// The same with 16-wide AVX-512 FMAs: twice the AVX2 rate where the FMA units are 512 bits wide
// (Zen 5, server Intel), the same where they are 256 bits (Zen 4 runs AVX-512 in two halves).
__attribute__((target("avx512f"), noinline)) double fma512Gflops(long iterations) {
  __m512 a0 = _mm512_set1_ps(0.f), a1 = _mm512_set1_ps(1.f), a2 = _mm512_set1_ps(2.f), a3 = _mm512_set1_ps(3.f);
  __m512 a4 = _mm512_set1_ps(4.f), a5 = _mm512_set1_ps(5.f), a6 = _mm512_set1_ps(6.f), a7 = _mm512_set1_ps(7.f);
  __m512 a8 = _mm512_set1_ps(8.f), a9 = _mm512_set1_ps(9.f), a10 = _mm512_set1_ps(10.f), a11 = _mm512_set1_ps(11.f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  auto t0 = Clock::now();
  for (long n = 0; n < iterations; ++n) {
    a0 = _mm512_fmadd_ps(a0, m, c), a1 = _mm512_fmadd_ps(a1, m, c), a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c), a4 = _mm512_fmadd_ps(a4, m, c), a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c), a7 = _mm512_fmadd_ps(a7, m, c), a8 = _mm512_fmadd_ps(a8, m, c);
    a9 = _mm512_fmadd_ps(a9, m, c), a10 = _mm512_fmadd_ps(a10, m, c), a11 = _mm512_fmadd_ps(a11, m, c);
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  float out[16];
  _mm512_storeu_ps(out, sum);
  gSink = out[0];
  return static_cast<double>(iterations) * 12 * 16 * 2 / s / 1e9;
}

// Sums `floats` floats `passes` times with 8 independent 8-wide accumulators; GB/s read.
__attribute__((target("avx2,fma"), noinline)) double readGBps(const float* data, size_t floats, long passes) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  auto t0 = Clock::now();
  for (long p = 0; p < passes; ++p) {
    for (const float* q = data; q < data + floats; q += 64) {
      s0 = _mm256_add_ps(s0, _mm256_load_ps(q)), s1 = _mm256_add_ps(s1, _mm256_load_ps(q + 8));
      s2 = _mm256_add_ps(s2, _mm256_load_ps(q + 16)), s3 = _mm256_add_ps(s3, _mm256_load_ps(q + 24));
      s4 = _mm256_add_ps(s4, _mm256_load_ps(q + 32)), s5 = _mm256_add_ps(s5, _mm256_load_ps(q + 40));
      s6 = _mm256_add_ps(s6, _mm256_load_ps(q + 48)), s7 = _mm256_add_ps(s7, _mm256_load_ps(q + 56));
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                             _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
  float out[8];
  _mm256_storeu_ps(out, sum);
  gSink = out[0];
  return static_cast<double>(floats) * 4 * static_cast<double>(passes) / s / 1e9;
}

// The best of `repeats` runs, each sized to take about `seconds`.
template <typename F>
double best(int repeats, F&& f) {
  double b = 0;
  for (int i = 0; i < repeats; ++i) b = std::max(b, f());
  return b;
}

}  // namespace

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
  if (l2 <= 0 || l3 <= l2) {
    std::fprintf(stderr, "policyc_roofline: error: need 0 < L2 < L3, got %ld and %ld bytes\n", l2, l3);
    return 2;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "policyc_roofline: error: this CPU has no AVX2 + FMA; the roofline measures with them\n");
    return 2;
  }
  // Arrays well inside each level (half of L2; a quarter of L3, which other cores share) and far
  // outside the last one.
  const size_t l2Floats = static_cast<size_t>(l2 / 2 / 4) / 64 * 64;
  const size_t l3Floats = static_cast<size_t>(l3 / 4 / 4) / 64 * 64;
  const size_t dramFloats = static_cast<size_t>(l3) * 16 / 4 / 64 * 64;  // 512 MiB for a 32 MiB L3
  float* data = static_cast<float*>(std::aligned_alloc(64, dramFloats * 4));
  if (!data) {
    std::fprintf(stderr, "policyc_roofline: error: cannot allocate %zu MB\n", dramFloats * 4 >> 20);
    return 2;
  }
  for (size_t i = 0; i < dramFloats; ++i) data[i] = static_cast<float>(i & 1023) * 1e-3f;

  const double peak = best(5, [] { return fmaGflops(20'000'000); });
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const double peak512 = avx512 ? best(5, [] { return fma512Gflops(20'000'000); }) : 0.0;
  auto level = [&](size_t floats) {
    const long passes = std::max<long>(1, static_cast<long>((size_t{2} << 30) / (floats * 4)));  // ~2 GB a run
    readGBps(data, floats, 1);  // bring the array into the level
    return best(5, [&] { return readGBps(data, floats, passes); });
  };
  const double bwL2 = level(l2Floats), bwL3 = level(l3Floats), bwDram = level(dramFloats);
  std::free(data);

  std::printf("peak fp32 FMA (AVX2, 1 core)   %8.1f GFLOP/s\n", peak);
  if (avx512) std::printf("peak fp32 FMA (AVX-512)        %8.1f GFLOP/s\n", peak512);
  std::printf("read bandwidth, %5ld KiB (L2)  %8.1f GB/s   (L2 %ld KiB)\n", static_cast<long>(l2Floats * 4 >> 10), bwL2, l2 >> 10);
  std::printf("read bandwidth, %5ld MiB (L3)  %8.1f GB/s   (L3 %ld MiB)\n", static_cast<long>(l3Floats * 4 >> 20), bwL3, l3 >> 20);
  std::printf("read bandwidth, %5ld MiB (DRAM)%8.1f GB/s\n", static_cast<long>(dramFloats * 4 >> 20), bwDram);
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"peak_gflops\": " << peak << ", \"peak_avx512_gflops\": " << peak512 << ", \"l2_bytes\": " << l2 << ", \"l3_bytes\": " << l3 << ", \"bw_l2_gbps\": " << bwL2
      << ", \"bw_l3_gbps\": " << bwL3 << ", \"bw_dram_gbps\": " << bwDram << "}\n";
    if (!f) {
      std::fprintf(stderr, "policyc_roofline: error: cannot write '%s'\n", json.c_str());
      return 2;
    }
  }
  return 0;
}
