// Which instruction-set extensions this CPU has (GCC's __builtin_cpu_supports) and which a
// target's code may use (cpu.h).
#include "policyc/runtime/cpu.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace policyc::runtime {

namespace {
const std::vector<std::string> kV3 = {"sse4.2", "avx", "avx2", "fma", "bmi", "bmi2", "f16c"};
const std::vector<std::string> kV4Extra = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"};
}  // namespace

std::vector<std::string> hostCpuFeatures() {
  std::vector<std::string> have;
#if defined(__x86_64__)
  __builtin_cpu_init();
  // __builtin_cpu_supports takes only string literals: one line per extension.
  if (__builtin_cpu_supports("sse4.2")) have.push_back("sse4.2");
  if (__builtin_cpu_supports("avx")) have.push_back("avx");
  if (__builtin_cpu_supports("avx2")) have.push_back("avx2");
  if (__builtin_cpu_supports("fma")) have.push_back("fma");
  if (__builtin_cpu_supports("bmi")) have.push_back("bmi");
  if (__builtin_cpu_supports("bmi2")) have.push_back("bmi2");
  // clang 14's __builtin_cpu_supports does not know "f16c": CPUID leaf 1, ECX bit 29, in both.
  if (unsigned a = 0, b = 0, c = 0, d = 0; __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C))
    have.push_back("f16c");
  if (__builtin_cpu_supports("avx512f")) have.push_back("avx512f");
  if (__builtin_cpu_supports("avx512cd")) have.push_back("avx512cd");
  if (__builtin_cpu_supports("avx512bw")) have.push_back("avx512bw");
  if (__builtin_cpu_supports("avx512dq")) have.push_back("avx512dq");
  if (__builtin_cpu_supports("avx512vl")) have.push_back("avx512vl");
  if (__builtin_cpu_supports("avx512bf16")) have.push_back("avx512bf16");
  if (__builtin_cpu_supports("avx512vnni")) have.push_back("avx512vnni");
#endif
  return have;
}

std::vector<std::string> targetCpuFeatures(const std::string& target) {
  if (target == "native") return hostCpuFeatures();
  const bool v4 = target == "x86-64-v4" || target == "x86-64-v4-bf16" || target == "x86-64-v4-amx";
  std::vector<std::string> f;
  if (target == "x86-64-v3" || v4) f = kV3;
  if (v4) f.insert(f.end(), kV4Extra.begin(), kV4Extra.end());
  // x86-64-v4-amx's code has no AMX instructions (oneDNN picks its kernels where it runs).
  if (target == "x86-64-v4-bf16" || target == "x86-64-v4-amx") f.push_back("avx512bf16");
  return f;
}

}  // namespace policyc::runtime
