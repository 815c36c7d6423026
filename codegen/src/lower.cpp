// Lowering: one kernel per graph op; views alias memory and need no kernel.
#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "packing.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/error.h"

namespace policyc::codegen {
namespace {

using ir::Op;

bool isViewOp(Op op) {
  switch (op) {
    case Op::Reshape:
    case Op::Flatten:
    case Op::Squeeze:
    case Op::Unsqueeze:
    case Op::Identity:
    case Op::Dropout:
    case Op::Split: return true;
    default: return false;
  }
}

std::vector<int64_t> contiguousStrides(const ir::Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i].value();
  return strides;
}

// Numpy broadcasting of an operand of `shape` against a domain of rank `rank`: leading
// dimensions are missing, size-1 dimensions of a larger domain read index 0.
IndexMap broadcastMap(const ir::Shape& shape, const std::vector<ir::Dim>& domain) {
  IndexMap map;
  size_t lead = domain.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    const ir::Dim& dim = shape[d];
    const ir::Dim& out = domain[lead + d];
    bool broadcast = dim.isStatic() && dim.value() == 1 && !(out.isStatic() && out.value() == 1);
    map.push_back(broadcast ? IndexExpr{-1, 0, 0} : IndexExpr{static_cast<int>(lead + d), 1, 0});
  }
  return map;
}

IndexMap identityMap(size_t rank) {
  IndexMap map;
  for (size_t d = 0; d < rank; ++d) map.push_back({static_cast<int>(d), 1, 0});
  return map;
}

class Lowering {
 public:
  explicit Lowering(const ir::Graph& graph) : graph_(graph) { program_.name = graph.name(); }

  KernelProgram run() {
    for (const auto& node : graph_.nodes()) {
      const ir::Node& n = *node;
      try {
        switch (n.kind()) {
          case ir::NodeKind::Input: program_.inputs.push_back(newBuffer(n.output(), BufferKind::Input)); break;
          case ir::NodeKind::Param: newBuffer(n.output(), BufferKind::Param); break;
          case ir::NodeKind::Op: lowerOp(n); break;
          case ir::NodeKind::Output: lowerOutputs(n); break;
        }
      } catch (const UnsupportedError& e) {
        if (n.kind() == ir::NodeKind::Op) unsupported("node '{}' ({}): {}", n.name(), n.info().name, e.what());
        throw;
      } catch (const Error& e) {
        if (n.kind() == ir::NodeKind::Op) fail("codegen: node '{}' ({}): {}", n.name(), n.info().name, e.what());
        throw;
      }
    }
    return std::move(program_);
  }

 private:
  int newBuffer(const ir::Value* value, BufferKind kind) {
    const ir::Shape& shape = value->type().shape;
    for (size_t d = 1; d < shape.size(); ++d) {
      if (shape[d].isBatch()) unsupported("value '{}' has 'batch' in dimension {}; codegen needs it outermost", value->name(), d);
    }
    Buffer b;
    b.id = static_cast<int>(program_.buffers.size());
    b.name = value->name();
    b.type = value->type();
    b.kind = kind;
    b.value = value;
    b.root = b.id;
    b.strides = contiguousStrides(shape);
    program_.buffers.push_back(b);
    bufferOf_[value] = b.id;
    return b.id;
  }

  int bufferFor(const ir::Value* value) const {
    auto it = bufferOf_.find(value);
    if (it == bufferOf_.end()) fail("internal: value '{}' has no buffer", value->name());
    return it->second;
  }

  void lowerView(const ir::Node& n) {
    const Buffer in = program_.buffer(bufferFor(n.input(0)));
    if (n.op() == Op::Split) {
      int64_t axis = n.attrInt("axis");
      if (axis < 0) axis += static_cast<int64_t>(in.type.rank());
      if (in.type.shape[static_cast<size_t>(axis)].isBatch()) unsupported("a split along 'batch'");
      int64_t start = 0;
      for (size_t i = 0; i < n.numOutputs(); ++i) {
        int id = newBuffer(n.output(i), BufferKind::Temp);
        Buffer& v = program_.buffers[static_cast<size_t>(id)];
        v.root = in.root;
        v.offset = in.offset + start * in.strides[static_cast<size_t>(axis)];
        v.strides = in.strides;
        start += n.output(i)->type().shape[static_cast<size_t>(axis)].value();
      }
      return;
    }
    std::optional<std::vector<int64_t>> strides = reshapeStrides(in, n.output()->type().shape);
    if (!strides) unsupported("a reshape of the strided view '{}' that would need a copy", in.name);
    int id = newBuffer(n.output(), BufferKind::Temp);
    Buffer& v = program_.buffers[static_cast<size_t>(id)];
    v.root = in.root;
    v.offset = in.offset;
    v.strides = *strides;
  }

  // Strides that let a view of `in` be read as `shape` without a copy (numpy's no-copy reshape):
  // dimensions are matched in groups of equal element count, and each group of the input must be
  // laid out contiguously relative to itself. Size-1 dimensions take any stride.
  static std::optional<std::vector<int64_t>> reshapeStrides(const Buffer& in, const ir::Shape& shape) {
    auto size = [](const ir::Dim& d) { return d.isBatch() ? int64_t{-1} : d.value(); };
    std::vector<int64_t> oldDims, oldStrides;
    for (size_t i = 0; i < in.type.shape.size(); ++i) {
      if (size(in.type.shape[i]) == 1) continue;
      oldDims.push_back(size(in.type.shape[i]));
      oldStrides.push_back(in.strides[i]);
    }
    std::vector<int64_t> newDims;
    for (const ir::Dim& d : shape) newDims.push_back(size(d));
    std::vector<int64_t> result(newDims.size(), 1);
    size_t oi = 0, ni = 0;
    while (ni < newDims.size()) {
      if (newDims[ni] == 1) {
        result[ni] = 1;
        ++ni;
        continue;
      }
      if (oi >= oldDims.size()) return std::nullopt;
      // `batch` matches only `batch`, one to one.
      if (newDims[ni] < 0 || oldDims[oi] < 0) {
        if (newDims[ni] != oldDims[oi]) return std::nullopt;
        result[ni++] = oldStrides[oi++];
        continue;
      }
      size_t oj = oi, nj = ni;
      int64_t np = newDims[ni], op = oldDims[oi];
      while (np != op) {
        if (np < op) {
          if (++nj >= newDims.size() || newDims[nj] < 0) return std::nullopt;
          np *= newDims[nj];
        } else {
          if (++oj >= oldDims.size() || oldDims[oj] < 0) return std::nullopt;
          op *= oldDims[oj];
        }
      }
      for (size_t k = oi; k < oj; ++k) {
        if (oldStrides[k] != oldDims[k + 1] * oldStrides[k + 1]) return std::nullopt;
      }
      result[nj] = oldStrides[oj];
      for (size_t k = nj; k > ni; --k) result[k - 1] = result[k] * newDims[k];
      ni = nj + 1;
      oi = oj + 1;
    }
    if (oi != oldDims.size()) return std::nullopt;
    return result;
  }

  Kernel newKernel(const ir::Node& n, KernelKind kind) {
    Kernel k;
    k.kind = kind;
    k.domain = n.output()->type().shape;
    k.sources = {&n};
    return k;
  }

  // Appends a load of `value` indexed by `map`; scalar params become constants, except updatable
  // ones (their value changes at run time).
  int load(Kernel& k, const ir::Value* value, IndexMap map) {
    int id = bufferFor(value);
    const Buffer& b = program_.buffer(id);
    if (b.kind == BufferKind::Param && b.value->producer()->paramData().numel() == 1 && !b.value->producer()->isUpdatable()) {
      Instr c;
      c.opcode = Opcode::Const;
      c.dtype = b.type.dtype;
      c.constant = b.value->producer()->paramData().getAsDouble(0);
      k.body.push_back(c);
      return static_cast<int>(k.body.size()) - 1;
    }
    Instr l;
    l.opcode = Opcode::Load;
    l.dtype = b.type.dtype;
    l.buffer = id;
    l.index = std::move(map);
    k.body.push_back(l);
    return static_cast<int>(k.body.size()) - 1;
  }

  void store(Kernel& k, int buffer, int arg, IndexMap map) {
    Instr s;
    s.opcode = Opcode::Store;
    s.dtype = program_.buffer(buffer).type.dtype;
    s.buffer = buffer;
    s.args = {arg};
    s.index = std::move(map);
    k.body.push_back(s);
  }

  void lowerElementwise(const ir::Node& n) {
    Kernel k = newKernel(n, KernelKind::Pointwise);
    std::vector<int> args;
    for (size_t i = 0; i < n.numInputs(); ++i) {
      const ir::Value* in = n.input(i);
      IndexMap map;
      if (n.op() == Op::BatchNorm && i > 0) {
        // Per-channel parameters: dimension 0 of the [C] operand follows domain axis 1.
        map = {IndexExpr{1, 1, 0}};
      } else {
        map = broadcastMap(in->type().shape, k.domain);
      }
      args.push_back(load(k, in, std::move(map)));
    }
    Instr a;
    a.opcode = Opcode::Apply;
    a.dtype = n.output()->type().dtype;
    a.op = n.op();
    a.node = &n;
    a.args = args;
    k.body.push_back(a);
    int out = newBuffer(n.output(), BufferKind::Temp);
    store(k, out, static_cast<int>(k.body.size()) - 1, identityMap(k.domain.size()));
    program_.kernels.push_back(std::move(k));
  }

  // Transpose and slice read their input through an affine map: pure data movement.
  void lowerMove(const ir::Node& n) {
    Kernel k = newKernel(n, KernelKind::Pointwise);
    const ir::Shape& inShape = n.input(0)->type().shape;
    size_t rank = inShape.size();
    IndexMap map(rank);
    if (n.op() == Op::Transpose) {
      std::vector<int64_t> perm = n.attrInts("perm");
      if (perm.empty()) {
        for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
      }
      for (size_t outAxis = 0; outAxis < perm.size(); ++outAxis) {
        map[static_cast<size_t>(perm[outAxis])] = IndexExpr{static_cast<int>(outAxis), 1, 0};
      }
    } else {  // slice
      map = identityMap(rank);
      const auto& starts = n.attrInts("starts");
      std::vector<int64_t> axes = n.attrInts("axes");
      std::vector<int64_t> steps = n.attrInts("steps");
      if (axes.empty()) {
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t axis = axes[i] < 0 ? axes[i] + static_cast<int64_t>(rank) : axes[i];
        int64_t step = steps.empty() ? 1 : steps[i];
        const ir::Dim& dim = inShape[static_cast<size_t>(axis)];
        if (dim.isBatch()) continue;  // shape inference allows only full slices of batch
        int64_t size = dim.value();
        int64_t start = starts[i] < 0 ? starts[i] + size : starts[i];
        start = step > 0 ? std::clamp<int64_t>(start, 0, size) : std::clamp<int64_t>(start, 0, size - 1);
        map[static_cast<size_t>(axis)] = IndexExpr{static_cast<int>(axis), step, start};
      }
    }
    int arg = load(k, n.input(0), std::move(map));
    int out = newBuffer(n.output(), BufferKind::Temp);
    store(k, out, arg, identityMap(k.domain.size()));
    program_.kernels.push_back(std::move(k));
  }

  // Concat: one copy kernel per operand, each writing its slab of the output.
  void lowerConcat(const ir::Node& n) {
    int out = newBuffer(n.output(), BufferKind::Temp);
    size_t rank = n.output()->type().rank();
    int64_t axis = n.attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(rank);
    int64_t start = 0;
    for (const ir::Value* in : n.inputs()) {
      Kernel k = newKernel(n, KernelKind::Pointwise);
      k.domain = in->type().shape;
      int arg = load(k, in, identityMap(rank));
      IndexMap map = identityMap(rank);
      map[static_cast<size_t>(axis)].offset = start;
      store(k, out, arg, std::move(map));
      program_.kernels.push_back(std::move(k));
      const ir::Dim& d = in->type().shape[static_cast<size_t>(axis)];
      if (d.isBatch()) unsupported("a concat along 'batch'");
      start += d.value();
    }
  }

  void lowerTemplate(const ir::Node& n, KernelKind kind) {
    Kernel k = newKernel(n, kind);
    k.anchor = &n;
    for (const ir::Value* in : n.inputs()) k.anchorInputs.push_back(bufferFor(in));
    Instr acc;
    acc.opcode = Opcode::Acc;
    acc.dtype = n.output()->type().dtype;
    k.body.push_back(acc);
    int out = newBuffer(n.output(), BufferKind::Temp);
    k.anchorOutput = out;
    store(k, out, 0, identityMap(k.domain.size()));
    program_.kernels.push_back(std::move(k));
  }

  // Kernels run every batch row on its own (and split rows between threads): a reduction across
  // the batch dimension has no kernel.
  static void rejectBatchReduction(const ir::Node& n) {
    const ir::Shape& shape = n.input(0)->type().shape;
    const size_t rank = shape.size();
    std::vector<bool> reduced(rank, false);
    if (n.isOp(Op::Softmax) || n.isOp(Op::LogSoftmax) || n.isOp(Op::LayerNorm)) {
      int64_t axis = n.attrInt("axis");
      size_t from = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
      for (size_t d = from; d < rank && (n.isOp(Op::LayerNorm) || d == from); ++d) reduced[d] = true;
    } else {
      reduced = reducedAxes(n, rank).reduced;
    }
    for (size_t d = 0; d < rank; ++d) {
      if (reduced[d] && shape[d].isBatch()) {
        unsupported("it reduces over the batch dimension, which compiled kernels do not (backend interp runs it)");
      }
    }
  }

  void lowerOp(const ir::Node& n) {
    if (isViewOp(n.op())) return lowerView(n);
    switch (n.op()) {
      case Op::Transpose:
      case Op::Slice: return lowerMove(n);
      case Op::Concat: return lowerConcat(n);
      case Op::Gemm:
      case Op::MatMul:
      case Op::Linear: return lowerTemplate(n, KernelKind::Linear);
      case Op::Conv: return lowerTemplate(n, KernelKind::Conv);
      case Op::MaxPool:
      case Op::AvgPool: return lowerTemplate(n, KernelKind::Pool);
      case Op::Softmax:
      case Op::LogSoftmax:
      case Op::LayerNorm:
      case Op::ReduceMean:
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceProd:
      case Op::ArgMax:
      case Op::GlobalAvgPool:
        rejectBatchReduction(n);
        return lowerTemplate(n, KernelKind::Reduction);
      case Op::Pad:
      case Op::Gather:
      case Op::GatherElements: return lowerTemplate(n, KernelKind::Copy);
      default: break;
    }
    if (n.info().fusion == ir::FusionKind::Elementwise) return lowerElementwise(n);
    unsupported("operator {} has no lowering to kernels", n.info().name);
  }

  // Graph outputs get memory of their own (the caller's): a temporary that is computed by a kernel
  // becomes the output buffer; inputs, params, views and values returned twice are copied.
  void lowerOutputs(const ir::Node& n) {
    for (size_t i = 0; i < n.numInputs(); ++i) {
      const ir::Value* v = n.input(i);
      const std::string& name = n.outputNames()[i];
      int id = bufferFor(v);
      Buffer& b = program_.buffers[static_cast<size_t>(id)];
      bool aliased = std::any_of(program_.buffers.begin(), program_.buffers.end(),
                                 [&](const Buffer& o) { return o.id != id && o.root == id; });
      if (b.kind == BufferKind::Temp && !b.isView() && !aliased) {
        b.kind = BufferKind::Output;
        program_.outputs.emplace_back(name, id);
        continue;
      }
      Kernel k;
      k.kind = KernelKind::Pointwise;
      k.domain = v->type().shape;
      k.sources = {v->producer()};
      int arg = load(k, v, identityMap(k.domain.size()));
      Buffer out;
      out.id = static_cast<int>(program_.buffers.size());
      out.name = name;
      out.type = v->type();
      out.kind = BufferKind::Output;
      out.value = v;
      out.root = out.id;
      out.strides = contiguousStrides(v->type().shape);
      program_.buffers.push_back(out);
      store(k, out.id, arg, identityMap(k.domain.size()));
      program_.kernels.push_back(std::move(k));
      program_.outputs.emplace_back(name, out.id);
    }
  }

  const ir::Graph& graph_;
  KernelProgram program_;
  std::unordered_map<const ir::Value*, int> bufferOf_;
};

}  // namespace

KernelProgram lowerGraph(const ir::Graph& graph) {
  KernelProgram program = Lowering(graph).run();
  program.weights = graph.updatableWeights();
  nameKernels(program);
  return program;
}

}  // namespace policyc::codegen
