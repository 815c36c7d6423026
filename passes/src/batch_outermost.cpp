// batch-outermost: gives every value its batch dim first, as code generation needs (a kernel's
// outermost loop runs over the batch and splits it between threads).
//
// Exports put it elsewhere on the way through a layer: nn.MultiheadAttention works on [T, batch,
// E] between a transpose in and a transpose out. Such a value is rebuilt with its batch moved to
// the front and the other dims in order; the ops between the two transposes are rebuilt on the
// moved values (elementwise ops, reshapes, matmuls, softmax and reductions, slices, concats,
// layer norm), so that the transpose out reads a batch-first value and becomes a plain one. Where
// a chain meets an op without a rule, it is left as it was (code generation then names the value).
//
// Assumes: a verified, topologically ordered graph with inferred types.
// Guarantees: every value the graph's outputs read is computed as before, bit for bit (only data
// movement changes); the rebuilt chain replaces the old one only where a batch-first value takes
// the place of one. Counters: "values moved" (values rebuilt batch-first), "uses replaced".
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "rewrite.h"

namespace policyc::passes {
namespace {

using namespace detail;

// The position of the (first) batch dim, or -1.
int batchPos(const ir::TensorType& t) {
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i].isBatch()) return static_cast<int>(i);
  }
  return -1;
}

int batchCount(const ir::TensorType& t) {
  return static_cast<int>(std::count_if(t.shape.begin(), t.shape.end(), [](ir::Dim d) { return d.isBatch(); }));
}

// The permutation moving dim p to the front, the others in order.
std::vector<int64_t> frontPerm(int p, size_t rank) {
  std::vector<int64_t> perm{p};
  for (size_t i = 0; i < rank; ++i) {
    if (static_cast<int>(i) != p) perm.push_back(static_cast<int64_t>(i));
  }
  return perm;
}

// Where axis `a` of a value with its batch at `p` lands once the batch is moved to the front.
int64_t movedAxis(int64_t a, int p) { return a < p ? a + 1 : a == p ? 0 : a; }

ir::TensorType frontType(const ir::TensorType& t) {
  const int p = batchPos(t);
  if (p <= 0) return t;
  ir::TensorType out = t;
  out.shape.clear();
  for (int64_t i : frontPerm(p, t.rank())) out.shape.push_back(t.shape[static_cast<size_t>(i)]);
  return out;
}

class Mover {
 public:
  explicit Mover(ir::Graph& graph) : graph_(graph) {}

  PassStats run() {
    PassStats stats;
    stats.add("values moved", 0);
    stats.add("uses replaced", 0);
    std::vector<Node*> nodes;
    for (const auto& n : graph_.nodes()) nodes.push_back(n.get());
    std::vector<Node*> replaced;
    for (Node* n : nodes) {
      if (!n->isOp() || n->numOutputs() != 1) continue;
      Value* out = n->output();
      const int p = batchPos(out->type());
      bool reads = false;
      for (const Value* v : n->inputs()) reads = reads || moved_.count(v);
      if (p <= 0 && !reads) continue;
      if (p > 0 && batchCount(out->type()) != 1) continue;
      before_ = n;
      const size_t mark = added_.size();
      Value* nv = rebuild(n, p);
      if (nv && nv->type() != frontType(out->type())) nv = nullptr;  // a rule's safety net
      if (!nv) {
        dropSince(mark);
        continue;
      }
      if (p > 0) {
        moved_[out] = nv;
        stats.add("values moved");
        continue;
      }
      // The batch is back in front: the rebuilt value takes the old one's name and users.
      const std::string name = out->name();
      graph_.renameValue(out, graph_.uniqueName(name + ".replaced"));
      if (nv->producer()->isOp() && nv != n->input(0) && !graph_.findValue(name)) graph_.renameValue(nv, name);
      graph_.replaceAllUsesWith(out, nv);
      replaced.push_back(n);
      stats.add("uses replaced");
    }
    // Rebuilt values no replacement reached, then the old chains the replacements left unused.
    for (auto it = added_.rbegin(); it != added_.rend(); ++it) eraseUnused(graph_, {*it});
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = *it;
      if (n->isOp() && n->numOutputs() == 1 && (moved_.count(n->output()) || std::find(replaced.begin(), replaced.end(), n) != replaced.end())) {
        eraseUnused(graph_, {n});
      }
    }
    if (stats.get("uses replaced") == 0) {
      stats = PassStats();
      stats.add("values moved", 0);
      stats.add("uses replaced", 0);
    }
    return stats;
  }

 private:
  // `v` right-aligned to `rank` dims and with its batch (at `p` of that rank) in front: a moved
  // value, or a batchless one unsqueezed and transposed. nullptr when `v` cannot be had so.
  Value* toFront(Value* v, size_t rank, int p) {
    const ir::TensorType& t = v->type();
    auto it = moved_.find(v);
    if (it != moved_.end()) {
      // Right-aligned to `rank`, its batch must land where the result's is; the 1s it gains in
      // front go after the batch once that leads.
      const size_t gained = rank - std::min(rank, t.rank());
      if (t.rank() > rank || batchPos(t) + static_cast<int>(gained) != p) return nullptr;
      if (gained == 0) return it->second;
      std::vector<int64_t> axes(gained);
      std::iota(axes.begin(), axes.end(), 1);
      return add(Op::Unsqueeze, {it->second}, {{"axes", axes}}, v->name() + ".ranked");
    }
    const int q = batchPos(t);
    if (q >= 0) {
      // Already in front and staying there, or a batch that would not be where the result's is.
      return q == 0 && p <= 0 ? v : nullptr;
    }
    if (p <= 0) return v;
    if (t.rank() > rank) return nullptr;
    Value* r = v;
    if (t.rank() < rank) {
      std::vector<int64_t> axes(rank - t.rank());
      std::iota(axes.begin(), axes.end(), 0);
      r = add(Op::Unsqueeze, {r}, {{"axes", axes}}, v->name() + ".ranked");
    }
    return add(Op::Transpose, {r}, {{"perm", frontPerm(p, rank)}}, v->name() + ".batch_first");
  }

  // What `n` computes with the batch of its output moved to the front (its output itself when
  // that is already so), from the moved values of its inputs; nullptr when no rule applies.
  Value* rebuild(Node* n, int p) {
    Value* out = n->output();
    const size_t rank = out->type().rank();
    const std::string name = out->name() + ".batch_first";
    const ir::AttrMap& attrs = n->attrs();
    const Op op = n->op();
    if (n->info().fusion == ir::FusionKind::Elementwise && op != Op::BatchNorm) {
      std::vector<Value*> ins;
      for (Value* v : n->inputs()) {
        Value* m = toFront(v, rank, p);
        if (!m) return nullptr;
        ins.push_back(m);
      }
      return add(op, ins, attrs, name);
    }
    Value* x = n->input(0);
    auto mx = moved_.find(x);
    Value* xm = mx != moved_.end() ? mx->second : x;
    const int q = batchPos(x->type());  // where x has it (xm has it in front)
    if (mx == moved_.end() && q > 0) return nullptr;  // x itself could not be moved
    switch (op) {
      case Op::Identity:
      case Op::Dropout: return xm;
      case Op::Linear: {
        // x [..., K] times W^T: any order of the leading dims, K staying last.
        if (p < 0 || static_cast<size_t>(p) + 1 >= rank || q != p) return nullptr;
        std::vector<Value*> ins = n->inputs();
        ins[0] = xm;
        return add(op, ins, attrs, name);
      }
      case Op::Transpose: {
        std::vector<int64_t> perm = n->attrInts("perm");
        if (perm.empty()) {
          for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
        }
        // out'[j] = out[front[j]] = x[perm[front[j]]] = xm[moved(perm[front[j]])].
        std::vector<int64_t> front = p > 0 ? frontPerm(p, rank) : frontPerm(0, rank);
        std::vector<int64_t> combined;
        for (int64_t j : front) {
          const int64_t a = perm[static_cast<size_t>(j)];
          combined.push_back(mx != moved_.end() ? movedAxis(a, q) : a);
        }
        bool identity = true;
        for (size_t i = 0; i < combined.size(); ++i) identity = identity && combined[i] == static_cast<int64_t>(i);
        return identity ? xm : add(Op::Transpose, {xm}, {{"perm", combined}}, name);
      }
      case Op::Reshape:
      case Op::Squeeze:
      case Op::Unsqueeze:
      case Op::Flatten: {
        // Row-major order is kept when as many elements come before the batch on both sides: the
        // dims before it and those after it are reshaped among themselves.
        if (batchCount(x->type()) != 1 || batchCount(out->type()) != 1) return nullptr;
        auto before = [](const ir::TensorType& t) {
          int64_t count = 1;
          for (int i = 0; i < batchPos(t); ++i) count *= t.shape[static_cast<size_t>(i)].value();
          return count;
        };
        if (before(x->type()) != before(out->type())) return nullptr;
        std::vector<int64_t> shape;
        for (const ir::Dim& d : frontType(out->type()).shape) shape.push_back(d.isBatch() ? -1 : d.value());
        return add(Op::Reshape, {xm}, {{"shape", shape}}, name);
      }
      case Op::MatMul: {
        Value* b = n->input(1);
        if (x->type().rank() < 2 || b->type().rank() < 2) return nullptr;
        if (p >= 0 && static_cast<size_t>(p) + 2 < rank) {
          // The batch among the matmul's batch dims: both operands move it the same way.
          Value* am = toFront(x, rank, p);
          Value* bm = toFront(b, rank, p);
          if (!am || !bm) return nullptr;
          return add(op, {am, bm}, attrs, name);
        }
        if (p >= 0 && static_cast<size_t>(p) + 2 == rank && mx != moved_.end() && batchPos(b->type()) < 0 &&
            q + 2 == static_cast<int>(x->type().rank())) {
          // The batch is A's rows and B broadcasts (a linear layer over [T, batch, E]): with A's
          // batch in front, the batch is one more leading dim of the product.
          const ir::Shape& bs = b->type().shape;
          if (!std::all_of(bs.begin(), bs.end() - 2, [](ir::Dim d) { return d == ir::Dim(1); })) return nullptr;
          return add(op, {xm, b}, attrs, name);
        }
        return nullptr;
      }
      default: break;
    }
    // Ops along axes: the axes renumbered, the batch itself not among them.
    if (mx == moved_.end() || q <= 0) return nullptr;
    auto axis = [&](int64_t a, size_t r) -> std::optional<int64_t> {
      const auto rr = static_cast<int64_t>(r);
      if (a < -rr || a >= rr) return std::nullopt;
      if (a < 0) a += rr;
      if (a == q) return std::nullopt;
      return movedAxis(a, q);
    };
    const size_t xr = x->type().rank();
    ir::AttrMap na = attrs;
    switch (op) {
      case Op::Softmax:
      case Op::LogSoftmax:
      case Op::ArgMax:
      case Op::Concat: {
        std::optional<int64_t> a = axis(n->attrInt("axis"), xr);
        if (!a) return nullptr;
        na["axis"] = *a;
        std::vector<Value*> ins;
        for (Value* v : n->inputs()) {
          Value* m = op == Op::Concat ? toFront(v, xr, q) : moved_.at(v);
          if (!m) return nullptr;
          ins.push_back(m);
        }
        return add(op, ins, na, name);
      }
      case Op::ReduceMean:
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceProd:
      case Op::Slice: {
        std::vector<int64_t> axes = n->attrInts("axes");
        if (axes.empty()) {
          if (op != Op::Slice) return nullptr;  // every axis, the batch among them
          axes.resize(n->attrInts("starts").size());
          std::iota(axes.begin(), axes.end(), 0);
        }
        for (int64_t& a : axes) {
          std::optional<int64_t> m = axis(a, xr);
          if (!m) return nullptr;
          a = *m;
        }
        na["axes"] = axes;
        return add(op, {xm}, na, name);
      }
      case Op::LayerNorm: {
        // Normalises over the dims from `axis` on; those keep their positions when the batch
        // before them moves to the front.
        int64_t a = n->attrInt("axis");
        if (a < 0) a += static_cast<int64_t>(xr);
        if (a <= q) return nullptr;
        std::vector<Value*> ins = n->inputs();
        ins[0] = xm;
        return add(op, ins, attrs, name);
      }
      default: return nullptr;
    }
  }

  Value* add(Op op, std::vector<Value*> inputs, ir::AttrMap attrs, const std::string& base) {
    Node* node;
    try {
      node = graph_.addOp(op, std::move(inputs), std::move(attrs), std::vector<std::string>{graph_.uniqueName(base)}, {},
                          before_->provenance(), before_);
    } catch (const Error&) {
      return nullptr;  // the op rejects the moved operands: the rule does not apply
    }
    added_.push_back(node);
    return node->output();
  }

  void dropSince(size_t mark) {
    while (added_.size() > mark) {
      eraseUnused(graph_, {added_.back()});
      added_.pop_back();
    }
  }

  ir::Graph& graph_;
  const Node* before_ = nullptr;
  std::vector<Node*> added_;
  std::unordered_map<const Value*, Value*> moved_;  // value with its batch inside -> the same, batch first
};

}  // namespace

PassStats batchOutermost(ir::Graph& graph) { return Mover(graph).run(); }

}  // namespace policyc::passes
