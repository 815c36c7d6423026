// The LLVM emitter (private to codegen/src/llvm): the Emitter class, which builds a scheduled
// kernel program as one LLVM module — one function per kernel (named after it, every value named
// and tagged !policyc.node after the graph node it computes), the schedule's weights as one
// aligned constant global, the same microkernel shapes as the C++ backend (4 rows x 2 panels of 16
// columns), and the C ABI. It stands on builder.h (types, control flow, conversions, math, one
// body instruction). Split by concern:
//   emit_module.cpp   entry, weights, support declarations, oneDNN choices, the ABI in IR
//   emit_kernels.cpp  kernel functions; pointwise, pooling, reduction and copy templates
//   emit_gemm.cpp     GEMM and conv templates, packed microkernels, oneDNN convs
//   emit_body.cpp     addresses and noalias scopes, SSA bodies, loop nests, thread split numbers
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <llvm/IR/IRBuilder.h>

#include "builder.h"
#include "llvm_internal.h"
#include "packing.h"
#include "schedule.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"

namespace policyc::codegen::llvmemit {

using llvmbe::isSignedInt;
using llvmbe::nodeLabel;
using ir::DType;
using ir::Op;
using llvm::Value;

constexpr int64_t kWeightAlign = 64;  // the blob's alignment (schedule.cpp lays it out)
constexpr unsigned kLanes = 16;  // the vector epilogue's width: one weight panel

inline int abiDType(DType t) { return static_cast<int>(t); }  // policyc_dtype follows ir::DType's order

class Emitter : llvmbe::Builder {
 public:
  Emitter(const KernelProgram& p, const MemoryPlan& plan, const Schedule& s, const LlvmOptions& o, llvm::Module& m)
      : Builder(m), p_(p), plan_(plan), s_(s), o_(o) {}

  void run(const std::string& cName, const std::string& targetName);

 private:
  // ---- weights

  bool usesExtern() const { return s_.usesExtern; }
  // The workspace as a + b * batch (the schedule's), the extern kernels' scratch at
  // externOffset(batch) (as the C++ backend's pc_extern_offset).
  // batch < 0 or over the largest the workspace allows.
  // The run function `name` over pc_run_rows (Schedule::rowBlock; emit_module.cpp).
  llvm::Function* emitRowBlocks(llvm::Function* rows, const std::string& name);
  Value* badBatch(Value* batch) { return b_.CreateOr(b_.CreateICmpSLT(batch, c64(0)), b_.CreateICmpSGT(batch, c64(s_.maxBatch))); }
  int64_t workspaceStatic() const { return s_.workspaceStatic; }
  int64_t workspacePerBatch() const { return s_.workspacePerBatch; }
  Value* externOffset(Value* batch);

  // The schedule's weights blob as one aligned constant.
  void layoutWeights();
  // The model's pc::WeightsLock (updatable weights), created on first use.
  llvm::GlobalVariable* weightsLock();
  // pc_calls, the runs so far (Schedule::countsCalls), created on first use.
  llvm::GlobalVariable* callCounter();
  // The region of f32 panels widened once (Schedule::loadWidened): zeroed, created on first use;
  // and the call that fills it unless the model's first run of many rows already did.
  llvm::GlobalVariable* widenRegion();
  void callWidenAtLoad();
  // Panel j of a kernel's widened layer in that region: K rows of kPanel floats each, from the
  // kernel's offset there (KernelSchedule::loadWidened), as pc::widenPanels writes them.
  Value* widenedPanel(const KernelSchedule& ks, Value* j, int64_t K, const std::string& name);
  // A policyc_tensor_desc array named pc_WHAT of (name, type) pairs (inputs, outputs, weights).
  llvm::GlobalVariable* descArray(const std::vector<std::pair<std::string, ir::TensorType>>& tensors, const std::string& what);
  Value* weightsAt(int64_t offset, const std::string& name);

  void declareSupport();

  // ---- buffers

  // The pointer to a root buffer's memory, computed once per kernel function.
  Value* rootPtr(int root);

  // Element offset of buffer `id` at per-dimension indices (null: 0); a view adds its offset.
  Value* offsetOf(int id, const std::vector<Value*>& perDim);
  Value* elemPtr(int id, const std::vector<Value*>& perDim);
  // Per-dimension indices of an index map over the domain variables.
  std::vector<Value*> indices(const IndexMap& index, const std::vector<Value*>& vars);
  Value* loadElem(int id, const std::vector<Value*>& perDim, const std::string& name);
  void storeElem(int id, const std::vector<Value*>& perDim, Value* v);

  // The C ABI's contract, as the C++ backend's PC_RESTRICT pointers say it: inputs, outputs and
  // weights are distinct arrays, so an access through one never aliases an access through
  // another or through the workspace, and a kernel's temporaries are distinct where the schedule
  // finds them disjoint (KernelSchedule::disjointTemps; otherwise they get no scope). Scoped
  // noalias metadata, one scope per such root buffer; on pointwise, copy and dot-product
  // (Form::Gemm) kernels only (measured: it lets the loop vectorizer take an u8 image's
  // cast-and-scale, 3x faster, pad 2x, gather 10x, a batched matmul without overlap checks 2.8x,
  // but makes it vectorise the pools' window loops with gathers, 5x slower).
  void restrictAccess(llvm::Instruction* access, int id);

  // ---- bodies

  // Whether node `n` is one POLICYC_INJECT_FAULT miscompiles in this way.
  bool faulty(const ir::Node* n, InjectedFault::Kind kind) const;
  Value* plusOne(Value* v, DType t) { return ir::isFloat(t) ? b_.CreateFAdd(v, fc(1, v)) : b_.CreateAdd(v, constant(1, t, v->getType())); }

  // Emits `body` at the insertion point. With width > 0 every value is a vector of `width` lanes
  // along the last domain axis (vars.back() is the first lane's index; the schedule's
  // KernelSchedule::vectorEpilogue says where).
  // Returns the values (prologues return one).
  // `lanes` < width: the loads and stores along the last axis touch only the first `lanes` values
  // (an implicit GEMM tile's positions, KernelSchedule::tileEpilogue).
  std::vector<Value*> emitBody(const std::vector<Instr>& body, const std::vector<Value*>& vars, Value* acc, unsigned width = 0,
                               unsigned lanes = 0);
  // The first `lanes` floats at `at` into a vector of `width` (the rest zero), and back: plain
  // loads and stores of 4, 2 and 1 floats, as the C++ prelude's storeFirst8.
  Value* loadFirst(Value* at, unsigned width, unsigned lanes, int id);
  // Eight <8 x float> rows as eight columns (x[t][n] -> c[n][t]), as the C++ prelude's
  // pc::transposeTile does: three rounds of shuffles that x86 has as single instructions.
  std::vector<Value*> transpose8x8(const std::vector<Value*>& x);
  // Eight <16 x float> rows as sixteen <8 x float> columns (column c: lane t is x[t] lane c), in
  // three rounds of eight two-source shuffles where 8 x 8 blocks take 64 with their halves'
  // extracts: an implicit GEMM tile's epilogue (gap_cnn's first conv 600 -> 530 us at batch 64).
  std::vector<Value*> transpose8x16(const std::vector<Value*>& x);
  void storeFirst(Value* v, Value* at, unsigned lanes, int id);

  static bool usesAxis(const IndexMap& index, size_t axis);

  DType accType(const Kernel& k) const;

  // ---- kernels

  Value* dimValue(const ir::Dim& d) { return d.isBatch() ? batch_ : c64(d.value()); }
  // The product of `dims` except `skip`, in the run function (batch = its argument).
  static std::function<Value*(Value*)> product(llvm::IRBuilder<>& b, const std::vector<ir::Dim>& dims, int skip, int64_t scale);
  // A ThreadSplit's numbers in the run function (batch = its argument).
  Value* affine(int64_t perBatch, int64_t fixed, Value* batch);
  Value* unitsOf(const ThreadSplit& sp, Value* batch);
  Value* costOf(const ThreadSplit& sp, Value* batch);

  // Loops over `domain` (axis `split` over [lo, hi)), calling body(vars) innermost.
  void domainLoops(const std::vector<ir::Dim>& domain, int split, const std::function<void(const std::vector<Value*>&)>& body, const std::vector<size_t>& order = {}, std::vector<Value*> vars = {});

  // What the run function calls for one implementation of a kernel: the oneDNN call (extern
  // implementations), then the generated function split between threads (the kernel's form, or
  // the epilogue over oneDNN's result; null when oneDNN's post-ops did all of it).
  struct Variant {
    std::optional<Impl> impl;  // none: the kernel has no implementations to choose from
    llvm::Function* externFn = nullptr;
    llvm::Function* fn = nullptr;
  };
  // Every implementation of kernel `k` the schedule emits (one Variant for other kernels).
  std::vector<Variant> emitKernel(const Kernel& k);

  // POLICYC_INJECT_FAULT's compile and crash kinds for a kernel's nodes: the emitter fails, or the
  // kernel function traps where the insertion point is (every kernel function, oneDNN's too).
  void injectFaults(const Kernel& k);

  // The generated function of `k` in implementation impl_: its form, or with `epilogueOf` the
  // epilogue over that oneDNN conv's result.
  llvm::Function* emitKernelFn(const Kernel& k, const std::string& name, const ExternKernel* epilogueOf);

  // ---- oneDNN extern kernels (the support library's policyc_rt_onednn_conv* and _linear*)

  // i32 NAME(ctx, threads): the primitive (created on the first call), run by oneDNN's own
  // threads; with post-ops it computes the whole epilogue and stores the result.
  llvm::Function* emitExtern(const Kernel& k, const ExternKernel& e, const std::string& name);

  // The generated epilogue over oneDNN's result in the scratch area (implementation onednn): a
  // linear kernel's [batch, N] rows, a unit per row; a conv's NHWC result after the source copy,
  // a unit per (image, channel) pair walking the output positions.
  void emitExternEpilogue(const Kernel& k, const ExternKernel& e);

  // A kernel function's entry: the run's arguments from `ctx` (a pc_run_ctx), then a branch to
  // the body, where the insertion point is left. Root pointers go at the end of the entry block.
  void openBody(Value* ctx);

  void emitPointwise(const Kernel& k);
  // A transpose by tiles (KernelSchedule::transpose), inside the loops of the other axes.
  void emitTransposeTiles(const Kernel& k, const TransposeTiles& t);

  // ---- linear

  // The general linear / gemm / matmul: one dot product per output element.
  void emitLinear(const Kernel& k);

  // A packed weight panel: its first weight (f32, bf16 pairs along k as i32, or int8 as i8:
  // KernelSchedule::weightStorage) and, for int8, its first column's scale (null otherwise).
  struct PanelRef {
    Value* w = nullptr;
    Value* scale = nullptr;
    WeightStorage storage = WeightStorage::F32;
    int64_t stride = 0;  // elements from one panel to the next (KernelSchedule::panelStride)
  };
  // Panel j of the packed weight of kernel `index`.
  PanelRef panelAt(size_t index, Value* j, const std::string& name);
  // One narrowed panel widened to K rows of kPanel floats at dst (the layout of pc::widenPanels).
  void widenPanel(const PanelRef& src, int64_t K, Value* dst);
  // The 16 weights at element `at` of a panel's storage as <16 x float>: f32, or int8 converted
  // (its scales wait for scaledEnd). bf16 pairs go through loadPairRows.
  Value* loadPanelRow(const PanelRef& ref, Value* at);
  // Rows 2q and 2q + 1 of a bf16 pair panel (Bf16, Bf16Dot) from the pair row at i32 element
  // `at`, as <16 x float>: a shift and a mask of one load (pc::loadPair).
  std::pair<Value*, Value*> loadPairRows(const PanelRef& ref, Value* at);
  // An int8 tile's accumulator (started at zero) times the panel's column scales plus the bias,
  // once at the end (as pc::accEnd); `acc` itself without scales.
  Value* scaledEnd(Value* acc, Value* scales, Value* bias);

  // The microkernel: `rows` row pointers (x_t[q] at rows[t] + q, or rows[t] + offsets[q] with an
  // i32 offset table: conv windows read in place) times `panels` consecutive weight panels from
  // `w` (panel p's row q at w + p*w.stride + q*16), each column starting from its bias. Returns
  // acc[t][p], one <16 x float> per row and panel; sums over q in order. `group` > 1
  // (KernelSchedule::tapGroup, f32 and int8 panels): offsets[q + u] = offsets[q] + u within groups
  // of that many q, one offset loaded a group.
  std::vector<std::vector<Value*>> gemmTile(const std::vector<Value*>& rows, int panels, int64_t K, const PanelRef& w, Value* bias, const ir::Node* node, Value* offsets = nullptr,
                                            int64_t group = 1);

  // gemmTile over bf16 pairs (WeightStorage::Bf16Dot, as pc::gemmDot): the rows rounded to bf16
  // pairs into a local array first (vcvtneps2bf16), then per pair of k one vdpbf16ps per row and
  // panel; a lone row and panel through four accumulators over pairs in turn, summed as
  // (a + b) + (c + d).
  std::vector<std::vector<Value*>> gemmDotTile(const std::vector<Value*>& rows, int panels, int64_t K, const PanelRef& w, Value* bias,
                                               const ir::Node* node, Value* offsets);

  // Steps q in [0, count) into four accumulators in turn (step(q, i) adds step q into acc[i]; the
  // last count % 4 all into acc[0]), summed as (a + b) + (c + d): one row's dot products without a
  // chain of dependent instructions (gemmRow, gemmDotTile).
  Value* fourWaySum(int64_t count, const std::vector<llvm::AllocaInst*>& acc, const std::function<void(Value*, int)>& step,
                    const ir::Node* node);

  // One row times one panel: four accumulators over interleaved q (a chain of dependent FMAs
  // would wait on the FMA latency), summed as (a + b) + (c + d) at the end.
  Value* gemmRow(Value* row, int64_t K, const PanelRef& w, Value* bias, const ir::Node* node);

  // The epilogue of one panel's 16 results (`acc`) of the output row given by `rowVars` (the
  // leading domain variables), columns from `n0`: on the whole vector when the body allows it,
  // else column by column up to N.
  void finishPanel(const Kernel& k, const std::vector<Value*>& rowVars, Value* n0, Value* acc, int64_t N, bool vec);

  // Linear with a constant weight: rows of x times weight panels, a quad of rows times a group of
  // panels per unit of work (a pair for gemm4x32, one for gemm4x16; group-major, so the group
  // stays in cache while every row passes).
  void emitPackedLinear(const Kernel& k);
  // A linear layer as Impl::DotRows (pc::dotRows' order): dotRowsTile(N) rows a unit by the
  // weight's (at most 12) rows as they are, dot products along k; the last rows one by one.
  void emitDotRows(const Kernel& k);
  // A linear kernel's rows (its leading dims flattened): their count, row r's domain variables
  // and its pointer into x.
  Value* linearRows(const Kernel& k);
  std::vector<Value*> linearRowVars(const Kernel& k, Value* r);
  Value* linearRowPtr(const Kernel& k, const std::vector<Value*>& vars);
  // The panels a microkernel call covers in implementation impl_ (gemm4x16: 1, else 2).
  int panelGroup() const { return impl_ ? static_cast<int>(panelsPerTile(*impl_)) : 2; }

  // ---- conv

  // 2-D conv with a constant weight as an implicit GEMM: the patches of four output positions are
  // gathered (im2col, zeros for padding) into stack rows and multiplied by the weight panels.
  void emitPackedConv(const Kernel& k);

  // Any conv (groups, 1-D/3-D, non-constant weights): direct loops.
  void emitConv(const Kernel& k);
  // 2-D conv as Impl::ConvRows (schedule.h, ConvRowTiles): an output row by a block of output
  // channels, each chunk of 16 columns a <16 x float> per channel.
  void emitConvRows(const Kernel& k);
  // Input row `ih` of image i0, channel c of X into `row`: `width` floats, `left` of padding
  // first, the padding and a row outside the image zero (a padded image's rows, a Winograd
  // band's; the C++ printer's paddedRowCopy).
  void copyPaddedRow(const Buffer& X, Value* i0, Value* c, Value* ih, Value* row, int64_t left, int64_t width);
  // 2-D conv as Impl::WinogradF23 (schedule.h, WinogradTiles), as the C++ printer's emitWinograd.
  void emitWinograd(const Kernel& k);
  // The transforms of a run of `lanes` (1 to 8, or 16) tiles, addition by addition as the prelude's
  // pc::winogradInput (rows: the band's four rows; value (i, j) to v + (i*4 + j) * stride) and
  // pc::winogradOutput (products at m + (i*4 + j) * stride; the two output rows to y0 and y1).
  void winogradInput(const std::vector<Value*>& rows, int64_t x0, int64_t lanes, Value* v, int64_t stride);
  void winogradOutput(Value* m, int64_t stride, Value* bias, int64_t lanes, Value* y0, Value* y1);
  // *reg (16 floats of an output row in registers, RowTaps::chunks) plus the 16 values at `at`
  // times wv, on lanes [l.first, l.last) only: the others neither read nor changed.
  void addTap(llvm::AllocaInst* reg, Value* at, const RowTaps::Lanes& l, Value* wv, int id, bool finiteWeight);

  // ---- pooling

  void emitPool(const Kernel& k);

  // 2-D max pooling an output row at a time (as the C++ backend): first the column-wise maximum
  // over the window's input rows, into a row padded with -inf on both sides; then each output the
  // maximum of its window's columns of that. The maximum is `m > v ? m : v` (no data-dependent
  // branch) and NaNs are tracked beside it in flags (ONNX: a NaN in the window gives NaN), so
  // both loops vectorise.
  void emitMaxPoolRows(const Kernel& k);
  // 2-D average pooling an output row at a time, as the C++ printer's emitAvgPoolRows.
  void emitAvgPoolRows(const Kernel& k);

  // ---- reductions

  // The reduced operand at `idx` (its own index): a load, or the fused prologue.
  Value* operand(const Kernel& k, const std::vector<Value*>& idx);

  void emitReduction(const Kernel& k);

  // The maximum of f(0), ..., f(n - 1) for f32 values f returns, as the C++ prelude's pc::maxOf:
  // sixteen running maxima as selects on one <16 x float> (the sixteen loads of consecutive
  // values become one), a NaN mask beside, then the lanes and the tail. Exactly the reference's
  // value: NaN (the quiet one) when a value is NaN, for a zero maximum the first zero (its sign).
  Value* maxOf(int64_t n, const std::function<Value*(Value*)>& f);
  // The largest lane of a float vector without NaN lanes (a > b ? a : b), by halving the vector.
  Value* laneMax(Value* v);
  // The first index i in [0, n) with f(i) == m (f32; `last`: the last one), n when none, as the
  // C++ prelude's pc::findEqual: KernelSchedule::kScanLanes values a step compared as one vector,
  // the rest one at a time.
  Value* findEqual(int64_t n, Value* m, bool last, const std::function<Value*(Value*)>& f);
  // The index of the largest of f(0), ..., f(n - 1) for n <= KernelSchedule::kShortRow f32 values, as the C++
  // prelude's pc::argmaxShort: the row as one vector (-inf past it), NaN lanes or else the lanes
  // equal to the maximum (found by halving) as an integer mask, its first set bit (`last`: its
  // last). NaN counts as the largest value, as in numpy.
  Value* argmaxShort(int64_t n, bool last, const std::function<Value*(Value*)>& f);
  // A loop over j in [0, count) that leaves at the first j whose hit(j) = {condition, value}
  // holds, storing the value in `result` and branching to `found`; the insertion point is left
  // where the loop ends without a hit.
  void scanStage(int64_t count, const std::string& name, llvm::BasicBlock* found, llvm::AllocaInst* result,
                 const std::function<std::pair<Value*, Value*>(Value*)>& hit);
  // The sum of n f32 values f(0), ..., f(n - 1) in double, in pc::sumOf's order (KernelSchedule::sumRun).
  Value* sumOf(int64_t n, const std::function<Value*(Value*)>& f);
  // A softmax's rows eight at a time from the chunk's first (KernelSchedule::rowsAcross: `across`
  // rows an index of the first axis), as pc::softmaxRows8; returns the first row it left.
  Value* softmaxRows8(const Kernel& k, int64_t across);

  // ---- irregular data movement

  void emitCopy(const Kernel& k);
  // A gather's index `at` (i64) for an axis of `size` values, as the C++ backend's checkedIndex:
  // a negative one counts from the end; one outside the axis flags an index error and reads
  // element 0.
  Value* checkedIndex(Value* at, int64_t size);

  // ---- the C ABI (policyc_model.h)

  llvm::Constant* cstr(const std::string& s) { return b_.CreateGlobalStringPtr(s, "str", 0, &m_); }
  llvm::GlobalVariable* constGlobal(llvm::Constant* init, const std::string& name);
  llvm::Function* function(llvm::Type* ret, std::vector<llvm::Type*> params, const std::string& name, bool exported);

  void emitAbi(const std::vector<std::vector<Variant>>& kernels, const std::string& cName, const std::string& targetName);

  // Tuning builds: pc_tune_choice (the candidate each kernel runs) and the autotuner's exported
  // hooks policyc_tune_candidates(kernel) and policyc_tune_select(kernel, candidate), as the C++
  // backend's.
  void emitTuningHooks(const std::vector<std::vector<Variant>>& kernels);
  // The index into `variants` kernel ki runs at this batch: the schedule's dispatch by batch
  // range, or in a tuning build the selected candidate.
  Value* variantIndex(size_t ki, const std::vector<Variant>& variants, Value* batch);

  const KernelProgram& p_;
  const MemoryPlan& plan_;
  const Schedule& s_;
  const LlvmOptions& o_;

  std::map<int, int> inputIndex_, outputIndex_;
  llvm::MDNode* aliasDomain_ = nullptr;         // restrictAccess's scopes
  bool restrict_ = false;                       // the kernel being emitted gets them
  bool disjointTemps_ = false;                  // and its temporaries get theirs
  int unrollInner_ = 0;                         // domainLoops: the innermost loop unrolled this many times (KernelSchedule::unrollCalls)
  int rolledAxis_ = -1;                         // domainLoops: this axis's loop is vectorised, not unrolled whole
  std::map<int, llvm::MDNode*> aliasScopes_;    // by root buffer
  llvm::GlobalVariable* weightsGv_ = nullptr;
  llvm::StructType* descTy_ = nullptr;  // policyc_tensor_desc
  llvm::GlobalVariable* weightsLock_ = nullptr;  // weightsLock()
  llvm::GlobalVariable* calls_ = nullptr;        // callCounter()
  llvm::GlobalVariable* widenRegion_ = nullptr;  // widenRegion()
  llvm::FunctionType* kernelFnTy_ = nullptr;
  llvm::Function* parallelFor_ = nullptr;
  // --profile's counters (null without it)
  struct {
    llvm::GlobalVariable *ns = nullptr, *calls = nullptr, *trace = nullptr, *count = nullptr;
  } profile_;
  llvm::Function* threadWorkspace_ = nullptr;
  llvm::StructType* ctxTy_ = nullptr;
  Value* status_ = nullptr;                // the run's status (a kernel's)
  llvm::FunctionType* externFnTy_ = nullptr;
  llvm::Function* onednnConv_ = nullptr;
  llvm::Function* onednnConvRun_ = nullptr;
  llvm::Function* onednnLinear_ = nullptr;
  llvm::Function* onednnLinearRun_ = nullptr;
  llvm::GlobalVariable* tuneChoice_ = nullptr;  // tuning builds: i32 per kernel
  std::optional<Impl> impl_;                   // of the kernel function being emitted

  // the kernel function being emitted (fn_: Builder's)
  Value *inputs_ = nullptr, *outputs_ = nullptr, *batch_ = nullptr, *ws_ = nullptr, *lo_ = nullptr, *hi_ = nullptr;
  llvm::Instruction* entryEnd_ = nullptr;
  std::map<int, Value*> roots_;
  const ThreadSplit* split_ = nullptr;  // of the kernel being emitted (the schedule's)
  std::vector<bool> scalarAxes_;  // domainLoops leaves these axes' loops unvectorised
  bool faultyAnchor_ = false;
};

}  // namespace policyc::codegen::llvmemit
