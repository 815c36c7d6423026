// Run-time support of LLVM-backend models: the thread pool (the C++ backend's, from its prelude),
// the typed wrappers' per-thread workspace and the profiler's bookkeeping, behind a C interface
// the emitted IR calls. Linked into the compiler (the JIT resolves these symbols to it) and, as a
// static archive embedded in the compiler, into every shared object the backend builds.
#include <cstddef>

#include "policyc/runtime/policyc_model.h"  // the prelude's error codes
#include "../../model_runtime/policyc_prelude.h"

extern "C" {

// Runs fn(ctx, lo, hi) over [0, units) in at most `threads` chunks (pc::parallelFor);
// `trace`: a profiled run's pc::ChunkTrace (each chunk a trace event of its thread), else null.
__attribute__((visibility("hidden"))) void policyc_rt_parallel_for(int32_t threads, int64_t units, double costPerUnit,
                                                                    double minChunkCost,
                                                                    void (*fn)(void*, int64_t, int64_t), void* ctx,
                                                                    const pc::ChunkTrace* trace) {
  pc::parallelFor(threads, units, costPerUnit, minChunkCost, [&](int64_t lo, int64_t hi) { fn(ctx, lo, hi); }, trace);
}

// A model's run in row blocks (pc::runRowBlocks): `rows` is its pc_run_rows.
__attribute__((visibility("hidden"))) int32_t policyc_rt_row_blocks(pc::RunRowsFn rows, size_t (*workspaceBytes)(int64_t), int64_t block,
                                                                  int64_t maxBatch, const int64_t* inputRowBytes, int32_t numInputs,
                                                                  const int64_t* outputRowBytes, int32_t numOutputs,
                                                                  const void* const* inputs, void* const* outputs, int64_t batch,
                                                                  void* workspace, int32_t threads) {
  const pc::RowBlocks m{rows, workspaceBytes, block, maxBatch, inputRowBytes, numInputs, outputRowBytes, numOutputs};
  return pc::runRowBlocks(m, inputs, outputs, batch, workspace, threads);
}

// The calling thread's workspace of at least `bytes` (64-byte aligned), grown when a larger
// batch needs more, freed when the thread exits; null when the allocation fails (or nothing
// was ever needed).
__attribute__((visibility("hidden"))) void* policyc_rt_thread_workspace(int64_t bytes) {
  struct Workspace {
    void* p = nullptr;
    size_t bytes = 0;
    ~Workspace() { std::free(p); }
  };
  static thread_local Workspace w;
  const size_t need = (static_cast<size_t>(bytes < 0 ? 0 : bytes) + 63) / 64 * 64;
  if (need > w.bytes) {
    std::free(w.p);
    w.p = std::aligned_alloc(64, need);
    w.bytes = w.p ? need : 0;
  }
  return w.p;
}

// The profiler's clock and bookkeeping (models built with --profile): pc::nowNs and
// pc::profileRecord, as the C++ backend's models call them.
__attribute__((visibility("hidden"))) uint64_t policyc_rt_now_ns() { return pc::nowNs(); }
__attribute__((visibility("hidden"))) void policyc_rt_profile_record(uint64_t* ns, uint64_t* calls, policyc_trace_event* trace,
                                                                      int64_t capacity, int64_t* count, int32_t kernel, int64_t batch,
                                                                      uint64_t t0) {
  pc::profileRecord(ns, calls, trace, capacity, count, kernel, batch, t0);
}

static_assert(offsetof(pc::WeightsLock, generation) == 48, "llvm_internal.h: kWeightsGenerationOffset");

// Weights replaced at run time (models with updatable weights): pc::setWeights / pc::getWeights
// and the run's read lock, on the model's own blob, table and lock (a zeroed global of
// pc::kWeightsLockBytes).
__attribute__((visibility("hidden"))) int32_t policyc_rt_set_weights(unsigned char* blob, int64_t table, void* lock,
                                                                     const policyc_tensor_desc* weights, int32_t count,
                                                                     const policyc_tensor_desc* given, const void* const* data) {
  return pc::setWeights(blob, table, static_cast<pc::WeightsLock*>(lock), weights, count, given, data);
}
__attribute__((visibility("hidden"))) int32_t policyc_rt_get_weights(unsigned char* blob, int64_t table, void* lock,
                                                                     const policyc_tensor_desc* weights, int32_t index, void* out) {
  return pc::getWeights(blob, table, static_cast<pc::WeightsLock*>(lock), weights, index, out);
}
__attribute__((visibility("hidden"))) void policyc_rt_weights_read_lock(void* lock) {
  pc::weightsReadLock(static_cast<pc::WeightsLock*>(lock));
}
__attribute__((visibility("hidden"))) void policyc_rt_weights_read_unlock(void* lock) {
  pc::weightsReadUnlock(static_cast<pc::WeightsLock*>(lock));
}

// Narrowed panels widened once into the model's region of f32 panels (Schedule::loadWidened).
__attribute__((visibility("hidden"))) void policyc_rt_widen_at_load(int32_t* state, const pc::WidenJob* jobs, int32_t count,
                                                                     const unsigned char* blob, float* region) {
  pc::widenAtLoad(state, jobs, count, blob, region);
}

}  // extern "C"
