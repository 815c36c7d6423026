// The x86 instruction-set extensions a compiled model may need and this machine has: checked
// before a model travels to another host (a pickled Policy, policyc.load_bytes), so that a host
// without them gets a clear error instead of an illegal instruction.
#pragma once

#include <string>
#include <vector>

namespace policyc::runtime {

// The extensions among those generated code uses (sse4.2, avx, avx2, fma, bmi, bmi2, f16c, avx512f,
// avx512cd, avx512bw, avx512dq, avx512vl, avx512bf16, avx512vnni) that this CPU has, in that order.
std::vector<std::string> hostCpuFeatures();

// What code compiled for `target` may use: x86-64-v3 and x86-64-v4 their levels' extensions,
// x86-64-v4-bf16 and x86-64-v4-amx x86-64-v4's and avx512bf16, generic none, native this
// machine's (hostCpuFeatures()); an unknown target (another architecture's triple) none of these.
std::vector<std::string> targetCpuFeatures(const std::string& target);

}  // namespace policyc::runtime
