/* Running any policyc-compiled model from plain C99 through the generic descriptor API.
 *
 * Where main.c uses one model's typed wrapper, this program works with every compiled model: it
 * reads policyc_model_descriptor(), fills every input with a fixed observation, runs the model at
 * batch 1 in a workspace it allocates itself and prints the first values of every output.
 * Build: cc -std=c99 -I ../../runtime/include any_model.c ./MODEL.so -o any_model (README.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policyc/runtime/policyc_model.h"

static const char* const kDTypeNames[] = {"f32", "f64", "i32", "i64", "u8", "i8", "bool"};
static const size_t kDTypeSizes[] = {4, 8, 4, 8, 1, 1, 1};

static size_t numel_at(const policyc_tensor_desc* t, int64_t batch) {
  size_t n = 1;
  int32_t k;
  for (k = 0; k < t->rank; ++k) n *= (size_t)(t->shape[k] == -1 ? batch : t->shape[k]);
  return n;
}

/* A fixed, reproducible observation: small floats around zero, or bytes for image inputs. */
static void fill_observation(const policyc_tensor_desc* t, void* data, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    double v = 0.1 * (double)((int)(i % 11) - 5);
    switch (t->dtype) {
      case POLICYC_F32: ((float*)data)[i] = (float)v; break;
      case POLICYC_F64: ((double*)data)[i] = v; break;
      case POLICYC_I32: ((int32_t*)data)[i] = (int32_t)(i % 7); break;
      case POLICYC_I64: ((int64_t*)data)[i] = (int64_t)(i % 7); break;
      case POLICYC_U8: ((uint8_t*)data)[i] = (uint8_t)(i * 37 % 256); break;
      case POLICYC_I8: ((int8_t*)data)[i] = (int8_t)(i % 7); break;
      default: ((uint8_t*)data)[i] = (uint8_t)(i % 2); break;
    }
  }
}

static double element(const policyc_tensor_desc* t, const void* data, size_t i) {
  switch (t->dtype) {
    case POLICYC_F32: return ((const float*)data)[i];
    case POLICYC_F64: return ((const double*)data)[i];
    case POLICYC_I32: return ((const int32_t*)data)[i];
    case POLICYC_I64: return (double)((const int64_t*)data)[i];
    case POLICYC_U8: return ((const uint8_t*)data)[i];
    case POLICYC_I8: return ((const int8_t*)data)[i];
    default: return ((const uint8_t*)data)[i];
  }
}

int main(void) {
  const int64_t batch = 1;
  const policyc_model* model = policyc_model_descriptor();
  const void** inputs;
  void** outputs;
  void* workspace_block;
  void* workspace;
  size_t workspace_bytes;
  int32_t i;
  int rc;

  if (model->abi_version != POLICYC_ABI_VERSION) {
    fprintf(stderr, "model '%s' was built for policyc ABI version %u, this program for version %d\n", model->name,
            (unsigned)model->abi_version, POLICYC_ABI_VERSION);
    return 1;
  }
  printf("model %s (target %s): %d inputs, %d outputs\n", model->name, model->target, (int)model->num_inputs,
         (int)model->num_outputs);

  /* The caller owns every buffer. calloc(0) may return NULL, hence the +1. */
  inputs = (const void**)calloc((size_t)model->num_inputs + 1, sizeof(void*));
  outputs = (void**)calloc((size_t)model->num_outputs + 1, sizeof(void*));
  for (i = 0; i < model->num_inputs; ++i) {
    const policyc_tensor_desc* t = &model->inputs[i];
    size_t n = numel_at(t, batch);
    void* data = malloc(n * kDTypeSizes[t->dtype] + 1);
    fill_observation(t, data, n);
    inputs[i] = data;
  }
  for (i = 0; i < model->num_outputs; ++i) {
    const policyc_tensor_desc* t = &model->outputs[i];
    outputs[i] = calloc(numel_at(t, batch) + 1, kDTypeSizes[t->dtype]);
  }

  /* The workspace must be POLICYC_WORKSPACE_ALIGNMENT-aligned; C99 has no aligned_alloc, so
   * over-allocate and round the pointer up. Reuse it for every call: a run allocates nothing. */
  workspace_bytes = model->workspace_bytes(batch);
  workspace_block = malloc(workspace_bytes + POLICYC_WORKSPACE_ALIGNMENT);
  workspace = (void*)(((uintptr_t)workspace_block + POLICYC_WORKSPACE_ALIGNMENT - 1) &
                      ~(uintptr_t)(POLICYC_WORKSPACE_ALIGNMENT - 1));

  rc = model->run(inputs, outputs, batch, workspace, 1);
  if (rc != POLICYC_OK) {
    fprintf(stderr, "run failed with code %d\n", rc);
    return 1;
  }
  for (i = 0; i < model->num_outputs; ++i) {
    const policyc_tensor_desc* t = &model->outputs[i];
    size_t n = numel_at(t, batch);
    size_t k;
    int32_t d;
    printf("%s: %s[", t->name, kDTypeNames[t->dtype]);
    for (d = 0; d < t->rank; ++d) printf("%s%lld", d ? "," : "", (long long)(t->shape[d] == -1 ? batch : t->shape[d]));
    printf("] =");
    for (k = 0; k < n && k < 8; ++k) printf(" %.6g", element(t, outputs[i], k));
    printf("%s\n", n > 8 ? " ..." : "");
  }

  free(workspace_block);
  for (i = 0; i < model->num_inputs; ++i) free((void*)inputs[i]);
  for (i = 0; i < model->num_outputs; ++i) free(outputs[i]);
  free(inputs);
  free(outputs);
  return 0;
}
