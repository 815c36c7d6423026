// The roofline measurement (roofline.h): hand-written AVX2/AVX-512 loops, best of several runs.
#include "roofline.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "policyc/driver/autotune.h"
#include "policyc/driver/compile.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/ir/error.h"
#include "policyc/support/files.h"

namespace policyc::tools {

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

// The best of `repeats` runs of `f`.
template <typename F>
double best(int repeats, F&& f) {
  double b = 0;
  for (int i = 0; i < repeats; ++i) b = std::max(b, f());
  return b;
}

}  // namespace

double Roofline::bandwidthFor(double bytes) const {
  if (bytes <= static_cast<double>(l2Bytes) / 2) return bwL2;
  if (bytes <= static_cast<double>(l3Bytes) / 4) return bwL3;
  return bwDram;
}

double Roofline::boundUs(double flops, double bytes) const {
  const double compute = peak() > 0 ? flops / (peak() * 1e3) : 0;
  const double bw = bandwidthFor(bytes);
  const double memory = bw > 0 ? bytes / (bw * 1e3) : 0;
  return std::max(compute, memory);
}

RooflineArrays rooflineArrays(long l2, long l3) {
  return {static_cast<size_t>(l2 / 2 / 4) / 64 * 64, static_cast<size_t>(l3 / 4 / 4) / 64 * 64,
          static_cast<size_t>(l3) * 16 / 4 / 64 * 64};  // DRAM: 512 MiB for a 32 MiB L3
}

Roofline measureRoofline(long l2, long l3, int repeats, double gigabytes) {
  if (l2 <= 0 || l3 <= l2) fail("the roofline needs 0 < L2 < L3, got {} and {} bytes", l2, l3);
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) fail("this CPU has no AVX2 + FMA; the roofline measures with them");
  Roofline r;
  r.l2Bytes = l2;
  r.l3Bytes = l3;
  const auto [l2Floats, l3Floats, dramFloats] = rooflineArrays(l2, l3);
  std::unique_ptr<float, decltype(&std::free)> data(static_cast<float*>(std::aligned_alloc(64, dramFloats * 4)), &std::free);
  if (!data) fail("cannot allocate {} MB for the roofline's DRAM array", dramFloats * 4 >> 20);
  for (size_t i = 0; i < dramFloats; ++i) data.get()[i] = static_cast<float>(i & 1023) * 1e-3f;
  r.peakGflops = best(repeats, [] { return fmaGflops(20'000'000); });
  if (__builtin_cpu_supports("avx512f")) r.peakAvx512Gflops = best(repeats, [] { return fma512Gflops(20'000'000); });
  auto level = [&](size_t floats) {
    const long passes = std::max<long>(1, static_cast<long>(gigabytes * (1 << 30) / static_cast<double>(floats * 4)));
    readGBps(data.get(), floats, 1);  // bring the array into the level
    return best(repeats, [&] { return readGBps(data.get(), floats, passes); });
  };
  r.bwL2 = level(l2Floats);
  r.bwL3 = level(l3Floats);
  r.bwDram = level(dramFloats);
  return r;
}

std::string rooflineJson(const Roofline& r) {
  nlohmann::json j = {{"peak_gflops", r.peakGflops}, {"peak_avx512_gflops", r.peakAvx512Gflops}, {"l2_bytes", r.l2Bytes},
                      {"l3_bytes", r.l3Bytes},       {"bw_l2_gbps", r.bwL2},                    {"bw_l3_gbps", r.bwL3},
                      {"bw_dram_gbps", r.bwDram}};
  return j.dump() + "\n";
}

std::optional<Roofline> parseRooflineJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  Roofline r;
  try {
    r.peakGflops = j.at("peak_gflops").get<double>();
    r.peakAvx512Gflops = j.value("peak_avx512_gflops", 0.0);
    r.l2Bytes = j.at("l2_bytes").get<long>();
    r.l3Bytes = j.at("l3_bytes").get<long>();
    r.bwL2 = j.at("bw_l2_gbps").get<double>();
    r.bwL3 = j.at("bw_l3_gbps").get<double>();
    r.bwDram = j.at("bw_dram_gbps").get<double>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  if (!(r.peakGflops > 0 && r.bwL2 > 0 && r.bwL3 > 0 && r.bwDram > 0)) return std::nullopt;
  return r;
}

Roofline machineRoofline(const std::string& path) {
  auto read = [](const std::filesystem::path& p) -> std::optional<Roofline> {
    std::ifstream f(p);
    if (!f) return std::nullopt;
    return parseRooflineJson(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
  };
  if (!path.empty()) {
    std::optional<Roofline> r = read(path);
    if (!r) fail("'{}' is not a roofline (the JSON of policyc_roofline --json)", path);
    return *r;
  }
  const std::filesystem::path cached =
      driver::cacheDir() / fmt::format("roofline-{:016x}.json", driver::textHash(driver::cpuModel()));
  if (std::optional<Roofline> r = read(cached)) return *r;
  fmt::print(stderr, "policyc: measuring this machine's roofline once (a few seconds; kept in {})\n", cached.string());
  Roofline r = measureRoofline(512L << 10, 32L << 20, 3, 1.0);
  std::error_code ec;
  std::filesystem::create_directories(cached.parent_path(), ec);
  asError([&] { files::writeAtomic(cached, rooflineJson(r)); });
  return r;
}

}  // namespace policyc::tools
