// Run-time support of LLVM-backend models with oneDNN extern kernels: the C++ backend's
// pc::dnnl_ext::Conv and Linear (model_runtime/policyc_onednn.h) behind a C interface the emitted
// IR calls.
// A separate archive from support.cpp: only models that use oneDNN link it (and libdnnl).
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "policyc/runtime/policyc_model.h"  // the prelude's error codes
#include "../../model_runtime/policyc_prelude.h"  // the thread pool the batch slices run on
#include "../../model_runtime/policyc_onednn.h"

namespace {

// "relu:0:0;sum;linear:2:1" (ExternKernel::postOps) as post-ops.
std::vector<pc::dnnl_ext::PostOp> parsePostOps(const char* text) {
  static const std::pair<const char*, dnnl::algorithm> kAlgorithms[] = {
      {"relu", dnnl::algorithm::eltwise_relu},       {"tanh", dnnl::algorithm::eltwise_tanh},
      {"logistic", dnnl::algorithm::eltwise_logistic}, {"elu", dnnl::algorithm::eltwise_elu},
      {"exp", dnnl::algorithm::eltwise_exp},         {"abs", dnnl::algorithm::eltwise_abs},
      {"sqrt", dnnl::algorithm::eltwise_sqrt},       {"log", dnnl::algorithm::eltwise_log},
      {"gelu_erf", dnnl::algorithm::eltwise_gelu_erf}, {"swish", dnnl::algorithm::eltwise_swish},
      {"soft_relu", dnnl::algorithm::eltwise_soft_relu}, {"hardswish", dnnl::algorithm::eltwise_hardswish},
      {"linear", dnnl::algorithm::eltwise_linear}};
  std::vector<pc::dnnl_ext::PostOp> ops;
  std::string all = text ? text : "";
  for (size_t p = 0; p < all.size();) {
    size_t end = all.find(';', p);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(p, end - p);
    p = end + 1;
    if (item == "sum") {
      ops.push_back({dnnl::algorithm::undef, 0.0f, 0.0f, true});
      continue;
    }
    const size_t c1 = item.find(':'), c2 = item.find(':', c1 + 1);
    const std::string name = item.substr(0, c1);
    dnnl::algorithm alg = dnnl::algorithm::undef;
    for (const auto& [n, a] : kAlgorithms) {
      if (name == n) alg = a;
    }
    if (alg == dnnl::algorithm::undef || c1 == std::string::npos || c2 == std::string::npos) {
      throw std::runtime_error("unknown post-op '" + item + "'");
    }
    ops.push_back({alg, std::strtof(item.c_str() + c1 + 1, nullptr), std::strtof(item.c_str() + c2 + 1, nullptr), false});
  }
  return ops;
}

std::mutex gCreate;
// Every primitive object created, reachable for as long as the process runs (a model's slot may
// live in JIT memory that leak checkers do not scan); never destroyed: oneDNN's own statics may
// be gone by the time exit-time destructors run.
std::vector<void*>* gCreated = new std::vector<void*>;

}  // namespace

// The generated IR's view of a failure (the C++ backend's pc_extern_failed): said once.
extern "C" __attribute__((visibility("hidden"))) void policyc_rt_extern_failed(const char* kernel, const char* what) {
  static std::once_flag once;
  std::call_once(once, [&] { std::fprintf(stderr, "policyc: oneDNN failed in kernel %s: %s\n", kernel, what); });
}

namespace {

// The object in *slot, made by `create` on the first call (any thread); null after a failure.
template <class Create>
void* createOnce(void** slot, const char* kernel, Create create) {
  void* ready = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (ready) return ready;
  std::lock_guard<std::mutex> lock(gCreate);
  if (*slot) return *slot;
  try {
    void* made = create();
    gCreated->push_back(made);
    __atomic_store_n(slot, made, __ATOMIC_RELEASE);
    return made;
  } catch (const std::exception& e) {
    policyc_rt_extern_failed(kernel, e.what());
    return nullptr;
  }
}

// Runs `run` (a primitive's execution): 0, or POLICYC_ERROR_EXTERN (-3) with what oneDNN said.
template <class Run>
int32_t runOrReport(void* object, const char* kernel, Run run) {
  if (!object) return -3;
  try {
    run();
    return 0;
  } catch (const std::exception& e) {
    policyc_rt_extern_failed(kernel, e.what());
    return -3;
  }
}

}  // namespace

extern "C" {

// The conv object in *slot, created on the first call (any thread); null after a failure.
__attribute__((visibility("hidden"))) void* policyc_rt_onednn_conv(void** slot, const char* kernel, const int64_t* s,
                                                                    int32_t flags, const char* postOps, const float* weight,
                                                                    const float* bias, const uint64_t* generation) {
  // flags: 1 anyLayout, 2 bf16 (pc::dnnl_ext::ConvShape).
  return createOnce(slot, kernel, [&] {
    pc::dnnl_ext::ConvShape shape{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                  s[12], s[13], s[14], s[15], s[16], parsePostOps(postOps), (flags & 1) != 0, (flags & 2) != 0};
    return static_cast<void*>(new pc::dnnl_ext::Conv(std::move(shape), weight, bias, generation));
  });
}

// Runs it (pc::dnnl_ext::Conv::run); *result is the NCHW result without post-ops. 0 or
// POLICYC_ERROR_EXTERN (-3).
__attribute__((visibility("hidden"))) int32_t policyc_rt_onednn_conv_run(void* conv, const char* kernel, const float* src,
                                                                          const float* sum, float* dst, int64_t batch,
                                                                          int32_t threads, float* scratch, const float** result) {
  return runOrReport(conv, kernel, [&] { *result = static_cast<pc::dnnl_ext::Conv*>(conv)->run(src, sum, dst, batch, threads, scratch); });
}

// The inner product object in *slot (shape: K, N, the source's row stride), created on the first
// call; null after a failure.
__attribute__((visibility("hidden"))) void* policyc_rt_onednn_linear(void** slot, const char* kernel, const int64_t* s,
                                                                      const char* postOps, const float* weight, const float* bias,
                                                                      const uint64_t* generation) {
  return createOnce(slot, kernel, [&] {
    pc::dnnl_ext::LinearShape shape{s[0], s[1], s[2], parsePostOps(postOps)};
    return static_cast<void*>(new pc::dnnl_ext::Linear(std::move(shape), weight, bias, generation));
  });
}

// Runs it (pc::dnnl_ext::Linear::run): dst = x W^T + b, then the post-ops (a sum post-op adds
// what dst holds). 0 or POLICYC_ERROR_EXTERN (-3).
__attribute__((visibility("hidden"))) int32_t policyc_rt_onednn_linear_run(void* linear, const char* kernel, const float* x,
                                                                            float* dst, int64_t batch, int32_t threads) {
  return runOrReport(linear, kernel, [&] { static_cast<pc::dnnl_ext::Linear*>(linear)->run(x, dst, batch, threads); });
}

}  // extern "C"
