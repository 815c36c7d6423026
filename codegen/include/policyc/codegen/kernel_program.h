// The kernel program: the loop-level IR between the graph and the backends.
//
// Lowering turns each graph node into a kernel: an iteration domain (extents, symbolic only in
// `batch`), an SSA body of loads, arithmetic and stores, and the graph nodes it came from.
// Linear/conv/pool/reductions are template kernels — the backend supplies the loop nest and
// microkernel — whose `body` is the pointwise epilogue applied to the template's result (and, for
// reductions, `prologue` computes the value the template reads). Fusion merges kernels by
// splicing bodies; it never changes what is computed, only where values live.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "policyc/ir/graph.h"

namespace policyc::codegen {

// ---- buffers

enum class BufferKind : uint8_t { Input, Output, Param, Temp };
const char* bufferKindName(BufferKind kind);

// A graph value in memory. `batch` may only be a buffer's outermost dimension, so every stride is
// a compile-time constant. A view (reshape, split) aliases part of its root buffer.
struct Buffer {
  int id = 0;
  std::string name;           // the graph value's name
  ir::TensorType type;
  BufferKind kind = BufferKind::Temp;
  const ir::Value* value = nullptr;
  int root = -1;              // the buffer that owns the memory (itself when not a view)
  int64_t offset = 0;         // elements from the root's start (per batch row when the root has batch)
  std::vector<int64_t> strides;  // in elements, one per dimension
  bool isView() const { return root != id; }
};

// ---- SSA bodies

// Index of one buffer dimension as an affine function of one domain axis: scale * i[axis] + offset;
// axis -1 means the constant `offset` (a broadcast dimension reads index 0).
struct IndexExpr {
  int axis = -1;
  int64_t scale = 1;
  int64_t offset = 0;
  bool operator==(const IndexExpr&) const = default;
};
using IndexMap = std::vector<IndexExpr>;  // one per buffer dimension

enum class Opcode : uint8_t {
  Load,    // buffer[index]
  Store,   // buffer[index] = args[0]
  Const,   // a scalar constant
  Acc,     // the template's result at this point (epilogues) / the value read (prologue input)
  Apply,   // an elementwise op of the op table (ir::Op) on args, with that node's attributes
};

struct Instr {
  Opcode opcode = Opcode::Const;
  ir::DType dtype = ir::DType::F32;  // result type (the stored value's for Store)
  std::vector<int> args;             // indices of earlier instructions of the same body
  int buffer = -1;                   // Load/Store
  IndexMap index;                    // Load/Store
  double constant = 0;               // Const
  ir::Op op = ir::Op::Identity;      // Apply
  const ir::Node* node = nullptr;    // Apply: the graph node (attributes, provenance)
};

// ---- kernels

enum class KernelKind : uint8_t {
  Pointwise,  // elementwise/broadcast/data movement: the loop nest over `domain` runs `body`
  Linear,     // template: linear/gemm/matmul [M,K]x[K,N]; domain [M,N]; epilogue in `body`
  Conv,       // template: convolution; domain = output shape; epilogue in `body`
  Pool,       // template: max/avg pooling; domain = output shape; epilogue in `body`
  Reduction,  // template: softmax, log_softmax, layer_norm, reduce_*, argmax, global_avg_pool
  Copy,       // template: pad, gather (irregular data movement)
};
const char* kernelKindName(KernelKind kind);

struct Kernel {
  std::string name;                       // describes the content: fused_linear_bias_tanh_1
  KernelKind kind = KernelKind::Pointwise;
  std::vector<ir::Dim> domain;
  // Template kernels: the anchor node (conv, linear, softmax, ...) and its operands' buffers.
  const ir::Node* anchor = nullptr;
  std::vector<int> anchorInputs;          // buffer ids of the anchor's operands (templates)
  int anchorOutput = -1;                  // where the template result lives when not fused away
  // Reduction: computes element j of the reduced operand (anchorInputs[0], then never stored) from
  // loads indexed over that operand's shape; prologueResult is the instruction holding the value.
  std::vector<Instr> prologue;
  int prologueResult = -1;
  std::vector<Instr> body;                // Pointwise: everything; templates: epilogue on Acc
  std::vector<const ir::Node*> sources;   // graph nodes, in graph order

  std::vector<int> reads() const;         // buffer ids read (anchor inputs, loads), sorted, unique
  std::vector<int> writes() const;        // buffer ids stored, sorted, unique
  bool isTemplate() const { return kind != KernelKind::Pointwise; }
  // Whether a run can fail in this kernel on its data: a gather's indices outside their axis, an
  // integer division by zero. Both backends give such kernels the run's status and return it after
  // them (POLICYC_ERROR_INDEX / POLICYC_ERROR_DIVISION); the interpreter fails the same way.
  bool canFail() const;
};

struct KernelProgram {
  std::string name;
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;            // in execution order
  std::vector<int> inputs;                // buffer ids, in the graph's signature order
  std::vector<std::pair<std::string, int>> outputs;
  // The weights a caller may replace at run time (ir::Graph::updatableWeights): Param buffers of
  // updatable params read them through their sources; empty unless compiled --updatable-weights.
  std::vector<ir::Graph::UpdatableWeight> weights;

  const Buffer& buffer(int id) const { return buffers.at(static_cast<size_t>(id)); }
  // Kernels that read buffer `id` (or a view of it), in order.
  std::vector<size_t> readersOf(int id) const;
};

// ---- building and transforming

// One kernel per op node (views — reshape, flatten, squeeze, unsqueeze, identity, dropout, and
// split along a dimension — alias their input and need no kernel). Throws policyc::Error naming
// the node for what codegen does not support (e.g. `batch` that is not the outermost dimension).
KernelProgram lowerGraph(const ir::Graph& graph);

// Gives every kernel a name describing its content and position: fused_linear_bias_tanh_1.
void nameKernels(KernelProgram& program);

struct FusionStats {
  int pointwise = 0;  // pointwise producers inlined into pointwise consumers
  int epilogues = 0;  // pointwise consumers moved into a template's epilogue
  int prologues = 0;  // pointwise producers moved into a reduction's prologue
};

// Fuses in place: pointwise chains and broadcasts into one loop nest; pointwise epilogues (bias,
// activation, residual add, scale/shift, clamp) into the linear/conv/pool that produces their
// input; pointwise producers into the reduction that reads them. A buffer is fused away only when
// exactly one kernel reads it, it is not a graph output and not a view, and the reader indexes it
// exactly as the producer wrote it (no duplicated work, no value lost). Renames the kernels.
FusionStats fuseKernels(KernelProgram& program);

// ---- cost (the profiler's GFLOP/s and GB/s, the roofline's bound)

// What one call of a kernel does at batch size b: flops = flopsStatic + flopsPerRow * b, and the
// same for bytes. FLOPs count a multiply-add as two and every elementwise op as one; bytes count
// every buffer the kernel reads or writes once (its cache traffic if nothing is re-fetched).
struct KernelCost {
  double flopsStatic = 0, flopsPerRow = 0;
  double bytesStatic = 0, bytesPerRow = 0;
  double flops(int64_t batch) const { return flopsStatic + flopsPerRow * static_cast<double>(batch); }
  double bytes(int64_t batch) const { return bytesStatic + bytesPerRow * static_cast<double>(batch); }
};
KernelCost kernelCost(const KernelProgram& program, const Kernel& kernel);
int64_t paramBytes(const KernelProgram& program);  // the weights every call reads (unpacked sizes)

// ---- printing (ir_pre_fusion.txt / ir_post_fusion.txt)

std::string printKernelProgram(const KernelProgram& program);
std::string printKernelList(const KernelProgram& program);  // one line per kernel: name, kind, domain
// kernels.svg: each kernel a cluster (filled by its kind) of the graph nodes it computes (ids
// "kKnJ"), the buffers in memory between kernels ("bB": kind, name, type) as cylinders.
std::string printKernelDot(const KernelProgram& program);
std::string kernelDotNodeId(size_t kernel, size_t node);  // "kKnJ": node J of kernel K in that picture

}  // namespace policyc::codegen
