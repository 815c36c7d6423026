/* A hand-written policyc model for the runtime tests: y = 2 * obs + bias, total[b] = sum_j y[b,j].
 *
 * Build: cc -shared -fPIC -I runtime/include tests/data/abi/affine_model.c -o affine.so
 * Variants for the loader's error paths:
 *   -DPOLICYC_TEST_ABI_VERSION=999   a model built for another ABI version
 *   -DPOLICYC_TEST_NO_DESCRIPTOR     a shared object without policyc_model_descriptor
 *   -DPOLICYC_TEST_BAD_DTYPE         a descriptor whose first input has dtype 42
 *   -DPOLICYC_TEST_DUPLICATE_NAME    a descriptor whose two inputs are both named 'obs'
 *   -DPOLICYC_TEST_V1_STRUCT         a descriptor of the first ABI 1 layout (no source_hash)
 *   -DPOLICYC_TEST_HASH_STRUCT       a descriptor of the layout that ends at source_hash (no weights;
 *                                    the fields past it hold garbage a loader must not read)
 * The run goes through the workspace (rows are computed there, then copied out, and a marker at
 * its start is checked at the end), so two runs sharing one workspace give wrong results.
 */
#include <stddef.h>
#include <stdint.h>

#include "policyc/runtime/policyc_model.h"

#ifndef POLICYC_TEST_ABI_VERSION
#define POLICYC_TEST_ABI_VERSION POLICYC_ABI_VERSION
#endif
#ifdef POLICYC_TEST_DUPLICATE_NAME
#define BIAS_NAME "obs"
#else
#define BIAS_NAME "bias"
#endif
#ifdef POLICYC_TEST_BAD_DTYPE
#define OBS_DTYPE 42
#else
#define OBS_DTYPE POLICYC_F32
#endif

static const int64_t kObsShape[] = {-1, 4};
static const int64_t kBiasShape[] = {4};
static const int64_t kYShape[] = {-1, 4};
static const int64_t kTotalShape[] = {-1};

static const policyc_tensor_desc kInputs[] = {
    {"obs", OBS_DTYPE, 2, kObsShape},
    {BIAS_NAME, POLICYC_F32, 1, kBiasShape},
};
static const policyc_tensor_desc kOutputs[] = {
    {"y", POLICYC_F32, 2, kYShape},
    {"total", POLICYC_F32, 1, kTotalShape},
};

/* The workspace of the last run on the calling thread, for tests that look at workspaces. */
static __thread void* tLastWorkspace;
void* policyc_test_last_workspace(void) { return tLastWorkspace; }

static size_t workspace_bytes(int64_t batch) { return 64 + (size_t)batch * 4 * sizeof(float); }

static int run(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace, int32_t threads) {
  if (!inputs || !outputs || batch < 0 || threads < 1) return POLICYC_ERROR_ARGUMENT;
  if (batch == 0) return POLICYC_OK;
  if (!workspace) return POLICYC_ERROR_ARGUMENT;
  if ((uintptr_t)workspace % POLICYC_WORKSPACE_ALIGNMENT != 0) return POLICYC_ERROR_WORKSPACE;
  tLastWorkspace = workspace;
  const float* obs = (const float*)inputs[0];
  const float* bias = (const float*)inputs[1];
  float* y = (float*)outputs[0];
  float* total = (float*)outputs[1];
  volatile int64_t* marker = (volatile int64_t*)workspace;
  float* scratch = (float*)((char*)workspace + 64);
  int64_t mark = (int64_t)(obs[0] * 1024.0f) * 1000003 + batch;
  *marker = mark;
  /* Rows are split into `threads` chunks, run one after the other: the result is independent of
   * the thread count, as the ABI requires. */
  int64_t chunk = (batch + threads - 1) / threads;
  for (int64_t start = 0; start < batch; start += chunk) {
    int64_t end = start + chunk < batch ? start + chunk : batch;
    for (int64_t b = start; b < end; ++b) {
      for (int j = 0; j < 4; ++j) scratch[b * 4 + j] = 2.0f * obs[b * 4 + j] + bias[j];
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    float sum = 0.0f;
    for (int j = 0; j < 4; ++j) {
      y[b * 4 + j] = scratch[b * 4 + j];
      sum += scratch[b * 4 + j];
    }
    total[b] = sum;
  }
  if (*marker != mark) return -3; /* another run wrote into this workspace meanwhile */
  return POLICYC_OK;
}

/* POLICYC_TEST_V1_STRUCT: a model of the first ABI 1 layout, without source_hash (loaders read it). */
#if defined(POLICYC_TEST_V1_STRUCT)
#define POLICYC_TEST_STRUCT_SIZE POLICYC_MODEL_STRUCT_SIZE_V1
#elif defined(POLICYC_TEST_HASH_STRUCT)
#define POLICYC_TEST_STRUCT_SIZE POLICYC_MODEL_STRUCT_SIZE_V1_HASH
#elif defined(POLICYC_TEST_WEIGHTS_STRUCT)
#define POLICYC_TEST_STRUCT_SIZE POLICYC_MODEL_STRUCT_SIZE_V1_WEIGHTS
#else
#define POLICYC_TEST_STRUCT_SIZE sizeof(policyc_model)
#endif

#ifdef POLICYC_TEST_HASH_STRUCT
#define POLICYC_TEST_WEIGHTS 7, (const policyc_tensor_desc*)1, NULL, NULL
#else
#define POLICYC_TEST_WEIGHTS 0, NULL, NULL, NULL /* no weights to replace */
#endif

/* POLICYC_TEST_PRECISION: the precision the descriptor names (a layout that ends before it: not read). */
#ifndef POLICYC_TEST_PRECISION
#define POLICYC_TEST_PRECISION "fp32"
#endif

static const policyc_model kModel = {
    POLICYC_TEST_ABI_VERSION, POLICYC_TEST_STRUCT_SIZE, "affine", "generic",
    2, kInputs, 2, kOutputs, workspace_bytes, run, "0123456789abcdef", POLICYC_TEST_WEIGHTS, POLICYC_TEST_PRECISION,
};

#ifdef POLICYC_TEST_NO_DESCRIPTOR
const policyc_model* not_the_descriptor(void) { return &kModel; }
#else
const policyc_model* policyc_model_descriptor(void) { return &kModel; }
#endif
