/* The C ABI every policyc-compiled model implements (versioned; C99 and C++).
 *
 * A compiled model is a shared object exporting one function, policyc_model_descriptor(), that
 * returns a static descriptor: the model's name, its inputs and outputs (name, dtype, shape with
 * -1 for the batch dimension), the workspace it needs for a batch size, and its run function.
 * The caller owns all memory: inputs, outputs and the workspace. A run allocates nothing (except
 * in oneDNN extern kernels: small handles per call, primitives at a new batch size or thread count).
 * Concurrent runs on one model are safe when each uses its own workspace; results are bitwise
 * identical for every thread count.
 */
#ifndef POLICYC_RUNTIME_POLICYC_MODEL_H_
#define POLICYC_RUNTIME_POLICYC_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of the structs or functions below. */
#define POLICYC_ABI_VERSION 1

/* The workspace must be aligned to this many bytes. */
#define POLICYC_WORKSPACE_ALIGNMENT 64

typedef enum policyc_dtype {
  POLICYC_F32 = 0,
  POLICYC_F64 = 1,
  POLICYC_I32 = 2,
  POLICYC_I64 = 3,
  POLICYC_U8 = 4,
  POLICYC_I8 = 5,
  POLICYC_BOOL = 6
} policyc_dtype;

typedef struct policyc_tensor_desc {
  const char* name;
  int32_t dtype;          /* a policyc_dtype */
  int32_t rank;
  const int64_t* shape;   /* rank entries; -1 is the batch dimension */
} policyc_tensor_desc;

/* Return codes of run(). */
#define POLICYC_OK 0
#define POLICYC_ERROR_ARGUMENT (-1)  /* a null pointer, a negative or too large batch, a thread count < 1 */
#define POLICYC_ERROR_WORKSPACE (-2) /* a workspace that is not aligned */
#define POLICYC_ERROR_EXTERN (-3)    /* an extern library kernel (oneDNN) failed; it said why on stderr */
/* A value outside an operator's domain, found while running: the outputs are not valid. Every
 * backend and the reference interpreter agree on these (docs/security.md). */
#define POLICYC_ERROR_INDEX (-4)     /* an index (Gather) outside its axis */
#define POLICYC_ERROR_DIVISION (-5)  /* an integer division by zero */

typedef struct policyc_model {
  uint32_t abi_version;   /* POLICYC_ABI_VERSION of the compiler that built the model */
  uint32_t struct_size;   /* sizeof(policyc_model) there: lets newer loaders read older models */
  const char* name;
  const char* target;     /* what the code was compiled for, e.g. "x86-64-v3" */
  int32_t num_inputs;
  const policyc_tensor_desc* inputs;
  int32_t num_outputs;
  const policyc_tensor_desc* outputs;
  /* Bytes of workspace a run at this batch size needs (a + b * batch); SIZE_MAX for a batch larger
   * than the model accepts (run returns POLICYC_ERROR_ARGUMENT for it). */
  size_t (*workspace_bytes)(int64_t batch);
  /* Runs the model: inputs[i] and outputs[i] point to C-order arrays of the described dtype and
   * shape (batch substituted). batch 0 is valid and touches nothing. threads >= 1. */
  int (*run)(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace, int32_t threads);
  /* Since struct_size covers it: 16 hex digits identifying the model and options that produced
   * this code (the compile cache checks it against its key); "" when unknown. */
  const char* source_hash;
  /* Since struct_size covers it: the weights a caller may replace at run time (a model compiled
   * with --updatable-weights; 0 and nulls otherwise). Each is f32, named and shaped as the model
   * file has it (no batch dimension). */
  int32_t num_weights;
  const policyc_tensor_desc* weights;
  /* Replaces `count` weights: given[i] names one of `weights` with its dtype and shape, data[i]
   * holds its new values (C order); the others keep theirs. Everything is checked before anything
   * is written (POLICYC_ERROR_ARGUMENT: an unknown or repeated name, another dtype or shape, a
   * null array, a value that is not finite); the values are copied into the compiled layout once, here, not per run. Safe
   * against concurrent runs: it waits for the runs in flight, holds new ones back while it writes,
   * and every run sees either the old weights or the new ones, never a mix. */
  int (*set_weights)(int32_t count, const policyc_tensor_desc* given, const void* const* data);
  /* Copies weight `index`'s current values into `out` (as many f32 as its shape holds). */
  int (*get_weights)(int32_t index, void* out);
  /* Since struct_size covers it: the precision the model was compiled with ("fp32",
   * "bf16-weights", "bf16", "int8-weights"; docs/precision.md); older models are fp32. */
  const char* precision;
} policyc_model;

/* struct_size of the first models of ABI version 1, which end before source_hash. */
#define POLICYC_MODEL_STRUCT_SIZE_V1 (offsetof(policyc_model, run) + sizeof(void*))
/* struct_size of models that end at source_hash (before the weights). */
#define POLICYC_MODEL_STRUCT_SIZE_V1_HASH (offsetof(policyc_model, source_hash) + sizeof(void*))

/* struct_size of models that end at get_weights (before the precision). */
#define POLICYC_MODEL_STRUCT_SIZE_V1_WEIGHTS (offsetof(policyc_model, get_weights) + sizeof(void*))

/* The one symbol a compiled model exports. */
const policyc_model* policyc_model_descriptor(void);
typedef const policyc_model* (*policyc_model_descriptor_fn)(void);

/* ---- Profiling (an extension for `policyc bench --profile`; a loader may ignore it)
 *
 * Every compiled model also exports policyc_profile_data(): what each kernel is and costs. A model
 * built with profiling (`policyc compile --profile`) also times every kernel of every run on the
 * calling thread: per-kernel totals, and the first trace_capacity kernel calls as trace events. */

typedef struct policyc_kernel_info {
  const char* name;        /* the kernel function, e.g. "fused_conv_bias_relu_3" */
  const char* nodes;       /* the graph nodes it computes, comma-separated */
  const char* kind;        /* linear, conv, pool, reduction, copy, pointwise */
  double flops_static;     /* FLOPs per call: flops_static + flops_per_row * batch */
  double flops_per_row;
  double bytes_static;     /* bytes read and written per call, the same way */
  double bytes_per_row;
} policyc_kernel_info;

typedef struct policyc_trace_event {
  int32_t kernel;          /* index into kernels */
  /* Which thread: 0 the one that called run (one event per kernel call), i > 0 the model's i-th
   * worker thread (one event per chunk it ran of a kernel split between threads). */
  int32_t thread;
  int64_t batch;
  uint64_t start_ns;       /* CLOCK_MONOTONIC */
  uint64_t duration_ns;
} policyc_trace_event;

typedef struct policyc_profile {
  int32_t num_kernels;
  int32_t instrumented;    /* 1: the counters below are kept; 0: they are null */
  const policyc_kernel_info* kernels;  /* in execution order */
  int64_t weight_bytes;    /* parameters the model reads per call */
  uint64_t* kernel_ns;     /* per kernel: nanoseconds summed over calls */
  uint64_t* kernel_calls;  /* per kernel: calls */
  policyc_trace_event* trace;
  int64_t trace_capacity;
  int64_t* trace_count;    /* events recorded (stops at trace_capacity) */
  void (*reset)(void);     /* zeroes the counters and the trace */
} policyc_profile;

const policyc_profile* policyc_profile_data(void);
typedef const policyc_profile* (*policyc_profile_data_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* POLICYC_RUNTIME_POLICYC_MODEL_H_ */
