// The C++ emitter (private to codegen/src/cpp): the Emitter class, which prints a scheduled kernel
// program as output_code.cpp, and the helpers its files share. Split by concern:
//   emit_module.cpp   the file in order, the run function, the descriptor and the typed wrappers
//   emit_kernels.cpp  kernel functions; pointwise, pooling, reduction and copy templates
//   emit_gemm.cpp     linear layers' templates, packed-panel drivers, vector epilogues, oneDNN calls
//   emit_conv.cpp     conv templates: implicit GEMM on panels, conv_rows, the general loop nest
//   emit_pool.cpp     pooling templates; emit_winograd.cpp: winograd_f23
//   emit_expr.cpp     addresses, elementwise expressions, SSA bodies, loops, epilogue lambdas
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "packing.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"
#include "schedule.h"

namespace policyc::codegen::cppemit {

using ir::DType;
using ir::Op;
// Model-provided text reaches the generated C++ only through escape.h: comments, string literals
// and identifiers each have their rule.
using escape::cComment;
using escape::cIdentifier;
using escape::cString;

// The C ABI's dtype code (policyc_model.h).
int abiDType(DType t);
// A C++ literal of `v` as dtype `t`.
std::string literal(double v, DType t);
// "%name (op) from "origin"" for comments (escaped).
std::string sourceStr(const ir::Node* n);
inline std::string dimStr(const ir::Dim& d) { return d.isBatch() ? "batch" : std::to_string(d.value()); }

// A linear expression over loop variables: sum coef[v] * v + constant.
struct Affine {
  std::vector<std::pair<std::string, int64_t>> terms;
  int64_t constant = 0;
  void add(const std::string& var, int64_t coef) {
    if (coef == 0) return;
    for (auto& [v, c] : terms) {
      if (v == var) {
        c += coef;
        return;
      }
    }
    terms.emplace_back(var, coef);
  }
  std::string str() const {
    std::string s;
    for (const auto& [v, c] : terms) {
      if (c == 0) continue;
      if (!s.empty()) s += " + ";
      s += c == 1 ? v : fmt::format("{}*{}", v, c);
    }
    if (constant != 0 || s.empty()) s += s.empty() ? std::to_string(constant) : fmt::format(" + {}", constant);
    return s;
  }
};

class Emitter {
 public:
  Emitter(const KernelProgram& p, const MemoryPlan& plan, const CppOptions& o) : p_(p), plan_(plan), o_(o) {}

  GeneratedCpp run();

 private:
  // ---- names and addresses

  std::string uniqueBufferName(const Buffer& b);

  const std::string& ptrName(int root) const { return bufferNames_[static_cast<size_t>(root)]; }

  // The pointer to a root buffer's memory: its declared type, its name, where it points.
  struct RootPtr {
    std::string type, name, init;
  };
  RootPtr rootPtr(int root, bool restrictTemp) const;  // restrictTemp: KernelSchedule::disjointTemps

  // Element offset of `index` in buffer `id` (a view adds its offset and strides to its root's).
  std::string address(int id, const IndexMap& index, const std::vector<std::string>& vars) const;
  // Same, for a list of per-dimension index expressions (strings) of buffer `id`.
  std::string addressOf(int id, const std::vector<std::string>& perDim) const;
  std::string ref(int id, const std::string& addr) const;
  std::string loadExpr(int id, const std::string& addr) const;

  // ---- weights

  bool packable(const Kernel& k) const { return codegen::packable(p_, k); }
  int64_t packedN(const Kernel& k) const { return codegen::packedN(p_, k); }
  int64_t packedK(const Kernel& k) const { return codegen::packedK(p_, k); }

  std::string emitWeightsBlock() const;

  // ---- implementations of GEMM/conv kernels

  // `code` (whole lines) with `indent` before every line.
  static std::string indented(const std::string& code, const std::string& indent);

  std::string objectName(size_t index, Impl im) const { return fmt::format("pc_dnnl_{}_{}", index, implName(im)); }

  // The oneDNN object of kernel `index` (its primitives per batch size and its reordered weight).
  std::string emitOnednnObject(const Kernel& k, size_t index, Impl im) const;

  // The body of an extern kernel: oneDNN computes the anchor (and with post-ops the epilogue);
  // otherwise the generated epilogue runs on oneDNN's result, split between the threads.
  std::string emitOnednnCall(const Kernel& k, size_t index, Impl im) const;

  // ---- bodies

  struct BodyCtx {
    std::string prefix;                 // value names: v3 (body), p3 (prologue)
    std::vector<std::string> vars;      // loop variable of each domain axis
    std::string acc;                    // the template's result (epilogues)
  };

  std::string valueName(const BodyCtx& c, int i) const { return fmt::format("{}{}", c.prefix, i); }

  // `expr` of type `from` as `to`: pc::cast's saturating conversion (the interpreter's).
  static std::string convertExpr(const std::string& expr, DType from, DType to);

  std::string applyExpr(const Instr& in, const std::vector<std::string>& a, const std::vector<DType>& at) const;

  // Emits `body` as statements at `indent`; returns the code. Loads and stores go through the
  // buffers' index maps over `c.vars`.
  // With `only`, just the instructions it names (in body order).
  std::string emitBody(const std::vector<Instr>& body, const BodyCtx& c, const std::string& indent,
                       const std::vector<size_t>* only = nullptr) const;

  // Opens loops over `domain` with variables `vars`; returns the code and the indentation inside.
  // The loop of axis `split` runs over the kernel's chunk [lo, hi) instead of its whole extent.
  static std::string openLoops(const std::vector<ir::Dim>& domain, const std::vector<std::string>& vars, std::string& indent,
                               int split = -1);
  static std::string loopHeader(const std::string& var, const std::string& extent, bool split, std::string& indent);
  // The loop over a chunk's units [lo, hi) (two spaces in) and `uq`, the unit as unsigned, which
  // the printers divide into the unit's indices: units are never negative, and GCC divides an
  // unsigned value by a power of two with a shift, where a signed quotient took five instructions
  // more (a max pool's 8 outputs spent 25 instructions on their indices).
  static std::string unitLoop();

  static std::string closeLoops(size_t count, std::string& indent);

  static std::vector<std::string> axisVars(const char* base, size_t rank);

  // The epilogue as a lambda the template calls once per output element.
  std::string emitEpilogueLambda(const Kernel& k, DType accType) const;

  // The start of a template over its domain: the epilogue lambda, the anchor's comment and the
  // domain's first `loops` loops (the schedule's split loop over [lo, hi)); `indent` ends inside.
  std::string openTemplate(const Kernel& k, DType accType, const std::vector<std::string>& vars, std::string& indent,
                           size_t loops = SIZE_MAX) const;

  std::string callEpilogue(const std::vector<std::string>& vars, const std::string& acc) const;

  // ---- kernels

  // Whether node `n` is one POLICYC_INJECT_FAULT miscompiles in this way.
  bool faulty(const ir::Node* n, InjectedFault::Kind kind) const;

  // The kernel's function, or one per implementation for a kernel with several.
  std::string emitKernel(const Kernel& k, size_t index);

  // A kernel's function; one of several implementations of it has the implementation's name appended.
  std::string fnName(const Kernel& k, std::optional<Impl> im) const;

  std::string emitKernelFn(const Kernel& k, size_t index, std::optional<Impl> impl);

  std::string emitPointwise(const Kernel& k) const;
  // The loop nest of a pointwise kernel in this order of its axes (loopOrder), at `indent`.
  std::string pointwiseNest(const Kernel& k, const KernelSchedule& ks, const std::vector<size_t>& order, std::string indent) const;
  // The loop each instruction of a pointwise body runs in, by its position in `order` (loopOrder;
  // -1: before the loops): a load in the innermost loop of an axis its index uses, an op in its
  // operands' innermost, a store in the innermost of all; everything innermost when hoisting is
  // not safe (see emitPointwise).
  static std::vector<int> loopLevels(const Kernel& k, const std::vector<size_t>& order);

  std::string anchorComment(const Kernel& k) const { return fmt::format("  // {}\n", sourceStr(k.anchor)); }

  DType accType(const Kernel& k) const;

  // linear / gemm / matmul: one dot product per output element (the general form).
  std::string emitLinear(const Kernel& k) const;

  std::string packedPointers(size_t index) const;
  // The call that widens the model's narrowed panels into pc_widened unless a run already did
  // (Schedule::loadWidened), as a statement.
  std::string widenAtLoad() const;
  // ", sp + PANEL*16": an int8 layer's scales of panel PANEL as the microkernels' last argument.
  std::string scaleArg(size_t index, const std::string& panel) const;

  // The scalar epilogue over the `width` columns from panel `j` on (the last ones may not exist).
  static std::string panelEpilogue(int64_t N, const std::string& indent, const std::string& call, int64_t width = 16,
                                   const std::string& j = "j");

  // Where the schedule runs an epilogue on whole 16-column panels or chunks (8 columns: a max
  // pool's) (KernelSchedule::vectorEpilogue), the vector code when this printer has it: a chain
  // of tanh/relu on v (pc::tanh16, pc::relu16; at width 8 pc::tanhv and a select), each value it stores stored densely
  // along the output's last axis from column `col`; else nullopt, and the columns go through
  // the scalar epilogue, which the C++ compiler vectorises or not. `lanes` < 8 at width 8: only
  // the first `lanes` values are loaded and stored (an implicit GEMM tile's positions, a direct
  // conv row's last columns).
  std::optional<std::string> vectorEpilogue(const Kernel& k, const std::vector<std::string>& vars,
                                            const std::string& col = "n0", int width = 16, int lanes = 0) const;

  // linear with a constant weight: rows of x times weight panels of 16 columns, 4 rows at a time.
  // `per` panels per unit of work: 2 runs the 4x32 microkernel (two panels), 1 the 4x16 one.
  // per: panels a tile (gemm4x32 2, gemm4x16 1); tileRows: rows a unit (8 for gemm8x32, else 4).
  std::string emitPackedLinear(const Kernel& k, size_t index, int64_t per = 2, int64_t tileRows = 4) const;
  // A linear layer as Impl::DotRows: dotRowsTile(N) rows at a time by the weight's (at most 12)
  // rows, as it is, through pc::dotRows; the last rows one by one; the scalar epilogue.
  std::string emitDotRows(const Kernel& k, size_t index) const;
  // A linear kernel's rows (all leading dims flattened): the domain's variables, the rows'
  // count, the statements that decompose row r into them, `row(r)` (its pointer into x) and
  // `finish(r, n, acc)` (the scalar epilogue of output n), as C++ lambdas.
  struct LinearRows {
    std::vector<std::string> vars;
    std::string rows, decomp, rowFn, finishFn;
  };
  LinearRows linearRows(const Kernel& k) const;
  // vectorEpilogue's code as one line for a lambda's body, its comments apart (returned first).
  static std::pair<std::string, std::string> oneLine(const std::string& code);

  // 2-D conv with a constant weight as an implicit GEMM: a tile of output positions (4, or 6 for
  // gemm6x16) reads its windows in place, or gathers them (im2col, zeros for padding) into a stack
  // buffer, or with a padded image (KernelSchedule::paddedImage) reads every window from it, and is
  // multiplied by the weight panels (two at a time for gemm4x32, an odd last one alone).
  std::string emitPackedConv(const Kernel& k, size_t index, std::optional<Impl> impl) const;

  std::string emitConv(const Kernel& k, size_t index) const;
  // A conv row chunk's epilogue on `width` (16 or 8) columns from `col`
  // (KernelSchedule::vectorEpilogue): v = the floats at `row` (plus `bias`), then the epilogue's
  // vector code, at width 8 on its first `lanes` columns only where 0 < lanes < 8 (a row's last
  // columns); the axis variables i0..i2 in scope.
  // Input row `ih` of image i0, channel c of X (the variables in scope) into `row`, `width` floats
  // from `left` columns of padding on, the padding and the rows outside the image zero (`continue`
  // in the loop over rows for those): a padded image's rows, a Winograd band's.
  std::string paddedRowCopy(const Buffer& X, int64_t left, int64_t width, const std::string& in) const;
  std::string chunkEpilogue(const Kernel& k, const std::string& row, int64_t col, bool bias, const std::string& indent, int width = 16,
                            int lanes = 0) const;
  // 2-D conv as Impl::ConvRows (schedule.h, ConvRowTiles): an output row by a block of output
  // channels, each chunk of 16 columns a RowChunk per channel.
  std::string emitConvRows(const Kernel& k, size_t index) const;
  // 2-D conv as Impl::WinogradF23 (schedule.h, WinogradTiles): pc::winogradInput, the GEMM
  // tiles over the transformed inputs, pc::winogradOutput and the epilogue by 8 columns.
  std::string emitWinograd(const Kernel& k, size_t index) const;

  std::string emitPool(const Kernel& k) const;

  // 2-D max pooling an output row at a time: first the column-wise maximum over the window's
  // input rows, into a row padded with -inf on both sides; then each output the maximum of its
  // window's columns of that. The maximum is `m > v ? m : v` (one maxss, no branch: a data-
  // dependent branch mispredicts on half the elements of real activations) and NaNs are
  // tracked beside it in flags (ONNX: a NaN in the window gives NaN), so both loops vectorise.
  std::string emitMaxPoolRows(const Kernel& k) const;
  // 2-D average pooling an output row at a time: per window row inside the input and window
  // column, one loop adding that tap to the outputs it reaches inside the input (RowPoolGeometry
  // lo/hi); the sums in the order of the window per output; then each output divided by its
  // clipped window's size or its count of input values.
  std::string emitAvgPoolRows(const Kernel& k) const;

  // The reduced operand as a function of its own index: a load, or the fused prologue.
  std::string emitOperandLambda(const Kernel& k, const Buffer& X) const;

  std::string operandCall(const std::vector<std::string>& idx) const;

  std::string emitReduction(const Kernel& k) const;

  std::string emitCopy(const Kernel& k) const;
  // Lines that read a gather's index `index` into `at` for an axis of `size` values: a negative
  // index counts from the end; one outside the axis is an error of the run (as in the
  // interpreter) and reads element 0, so nothing outside the data is read.
  static std::string checkedIndex(const std::string& indent, const std::string& index, int64_t size);

  // ---- ABI

  std::string tensorDescs(const char* what, const std::vector<int>& ids, const std::vector<std::string>& names) const;
  // A policyc_tensor_desc array named pc_WHAT of (name, type) pairs.
  static std::string descArray(const char* what, const std::vector<std::pair<std::string, ir::TensorType>>& tensors);
  // set_weights / get_weights and the run's read lock (a model with updatable weights).
  std::string emitWeightUpdates() const;

  // policyc_profile_data(): every kernel's name, nodes and cost; with o_.profile also the counters
  // pc_run updates after each kernel (on the calling thread; a kernel split between threads is
  // timed as a whole).
  std::string emitProfile() const;
  // The run function over pc_run_rows: with row blocks (Schedule::rowBlock) a block of rows at a
  // time, the first block with the caller's arguments (so that it checks them); else one call.
  std::string emitRowBlocks(const std::string& runName) const;

  // A ThreadSplit's numbers as C++ expressions in `batch`.
  static std::string affineExpr(int64_t perBatch, int64_t fixed);
  static std::string unitsExpr(const ThreadSplit& sp);
  static std::string costExpr(const ThreadSplit& sp);

  // The statement of pc_run that runs kernel i (with implementation `im`), split between threads.
  std::string kernelCall(size_t i, std::optional<Impl> im) const;

  // The autotuner's hooks (tuning builds), or the creation of the oneDNN primitives the model's
  // dispatch uses at the tuning batch sizes when the model is loaded.
  std::string emitTuning() const;

  std::string emitAbi(const std::string& name) const;

  const ThreadSplit* split_ = nullptr;  // of the kernel being emitted (the schedule's)
  bool faultyAnchor_ = false;  // the kernel being emitted is a template whose anchor gets the fault
  Schedule s_;                                      // what to emit (schedule.h)
  std::map<size_t, std::vector<Impl>> impls_;       // s_'s implementations per tunable kernel
  std::map<size_t, ImplDispatch> dispatch_;         // s_'s dispatch (not tuning)

  const KernelProgram& p_;
  const MemoryPlan& plan_;
  const CppOptions& o_;
  std::map<int, int> inputIndex_, outputIndex_;
  std::vector<std::string> bufferNames_;
};

}  // namespace policyc::codegen::cppemit
