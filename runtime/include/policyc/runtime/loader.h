// Loading a compiled policyc model (.so) with dlopen and running it safely from C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "policyc/runtime/policyc_model.h"

namespace policyc::runtime {

// Every failure of the loader: a file that cannot be loaded or is not a valid policyc model, and a
// run with tensors that do not match the model. The message is one complete line.
class ModelError : public std::runtime_error {
 public:
  explicit ModelError(const std::string& message) : std::runtime_error(message) {}
};

const char* dtypeName(policyc_dtype dtype);  // "f32", "u8", ...; "?" outside the enum
size_t dtypeSize(policyc_dtype dtype);       // bytes per element; 0 outside the enum

// One input or output of a model, copied out of its descriptor. shape[i] == -1 is the batch.
struct TensorSpec {
  std::string name;
  policyc_dtype dtype = POLICYC_F32;
  std::vector<int64_t> shape;

  std::vector<int64_t> shapeAt(int64_t batch) const;  // the batch substituted
  int64_t numelAt(int64_t batch) const;
  std::string str() const;                            // "f32[batch,17]"
};

// A tensor the caller owns: dtype, shape and C-order data; the view borrows both the shape and the
// data. run() never writes through an input view (the const constructor exists for inputs).
struct TensorView {
  policyc_dtype dtype = POLICYC_F32;
  std::span<const int64_t> shape;
  void* data = nullptr;

  TensorView() = default;
  TensorView(policyc_dtype d, std::span<const int64_t> s, void* p) : dtype(d), shape(s), data(p) {}
  TensorView(policyc_dtype d, std::span<const int64_t> s, const void* p)
      : dtype(d), shape(s), data(const_cast<void*>(p)) {}
};

// Why the bytes of a file cannot be a shared object for this machine that dlopen can map whole
// (bad magic, class, byte order, machine or type; headers or segments past the end of the file:
// a truncated file); "" when none is found. Reads only the bytes given.
std::string sharedObjectProblem(std::span<const std::byte> image);
// The same for a file (which must be a regular file); throws ModelError naming it.
void checkSharedObject(const std::string& soPath);

// A loaded model. Move-only; the shared object stays loaded until the Model is destroyed.
//
// Thread safety: run() may be called concurrently on one Model from any number of threads; each
// thread runs in its own workspace, owned by the Model, 64-byte aligned, allocated on that
// thread's first run and grown only when a larger batch needs more. A steady-state run (same or
// smaller batch on a thread that has run before) allocates nothing. The workspace of a thread
// that has exited is reused by a later thread with the same id and freed with the Model.
class Model {
 public:
  // checkSharedObject, dlopen(RTLD_NOW | RTLD_LOCAL) + policyc_model_descriptor(); checks the ABI
  // version and the descriptor. Throws ModelError: dlopen's own message for a missing or non-ELF file,
  // "'x.so' is not a policyc model (no symbol policyc_model_descriptor)", "'x.so' was built for
  // policyc ABI version 7, this runtime reads version 1", "'x.so': invalid descriptor: ...".
  static Model load(const std::string& soPath);
  // A model whose code something else keeps in memory (a JIT): the same checks of the descriptor
  // as load(); `owner` is kept alive as long as the Model, `symbols` answers symbol(). `path`
  // names the model in messages.
  static Model adopt(const std::string& path, const policyc_model* descriptor, const policyc_profile* profile,
                     std::shared_ptr<void> owner, std::function<void*(const char*)> symbols);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  const std::string& path() const;
  const std::string& name() const;
  const std::string& target() const;
  // The descriptor's source_hash (what produced the code); "" for a model without one.
  const std::string& sourceHash() const;
  // The descriptor's precision ("fp32" for models from before it was recorded).
  const std::string& precision() const;
  const std::vector<TensorSpec>& inputs() const;
  const std::vector<TensorSpec>& outputs() const;
  const policyc_model& descriptor() const;
  // The kernels' names, nodes and costs, and in a model compiled with profiling their timers
  // (policyc_model.h); null for a model that does not export policyc_profile_data.
  const policyc_profile* profile() const;
  // Another symbol the shared object exports (e.g. the autotuner's policyc_tune_select); null if none.
  void* symbol(const char* name) const;

  // Bytes of workspace a run at this batch size needs; throws for a batch outside 0..2^31-1 or
  // larger than the model accepts.
  size_t workspaceBytes(int64_t batch) const;

  // Runs the model on the caller's tensors, in the model's order of inputs and outputs, after
  // checking their count, dtypes and shapes against the descriptor at `batch` (errors name the
  // tensor: "input 'obs': expected f32[batch,17], got f32[2,16]"). batch 0 checks and returns.
  void run(std::span<const TensorView> inputs, std::span<TensorView> outputs, int64_t batch, int threads = 1) const;

  // The weights setWeights may replace (a model compiled with --updatable-weights; empty for any
  // other), named and shaped as the model file has them, f32.
  const std::vector<TensorSpec>& weights() const;
  // Replaces the named weights (the others keep their values). Each is checked first — a name
  // the model has, given once, f32 of its shape ("weight 'fc.bias': expected f32[64], got
  // f32[32]") — so a bad call changes nothing. The model packs the values into its compiled layout
  // here, once; concurrent run() calls see the old weights or the new ones, never a mix.
  void setWeights(std::span<const std::pair<std::string, TensorView>> weights) const;
  // Weight `index` (of weights()) as the model now has it: weights()[index].numelAt(1) floats into `out`.
  void getWeight(size_t index, float* out) const;

  // The model's own run function, with no checks and the caller's workspace (workspaceBytes(batch)
  // bytes, aligned to POLICYC_WORKSPACE_ALIGNMENT); returns its POLICYC_* code.
  int runUnchecked(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace, int threads) const;

 private:
  struct State;
  explicit Model(std::unique_ptr<State> state);
  static std::unique_ptr<State> describe(const std::string& path, const policyc_model* descriptor, const policyc_profile* profile);
  std::unique_ptr<State> state_;
};

}  // namespace policyc::runtime
