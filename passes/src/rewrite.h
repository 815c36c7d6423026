// What the graph passes share: matching params and users, provenance, node replacement, reordering.
//
// Passes rewrite in place through ir::Graph's primitives. New params are appended before the
// output node (the Graph API has no other place for them), so a pass that adds params ends with
// restoreTopologicalOrder(), which moves every node after the nodes it reads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/ops.h"
#include "policyc/passes/pass_manager.h"

namespace policyc::passes::detail {

using ir::Node;
using ir::Op;
using ir::Tensor;
using ir::Value;

// ---- matching

// The param node that defines `v`, or nullptr.
inline Node* paramNode(const Value* v) {
  Node* p = v ? v->producer() : nullptr;
  return p && p->kind() == ir::NodeKind::Param ? p : nullptr;
}
inline bool isParam(const Value* v) { return paramNode(v) != nullptr; }
// A param whose values the caller may replace at run time: a pass may move its elements (and its
// source with them, see ir::Node::paramSource) but not compute with or compare its values.
inline bool isUpdatable(const Value* v) {
  Node* p = paramNode(v);
  return p && p->isUpdatable();
}

// The op node of kind `op` that defines `v`, or nullptr.
inline Node* producerOp(const Value* v, Op op) {
  Node* p = v ? v->producer() : nullptr;
  return p && p->isOp(op) ? p : nullptr;
}

// Whether `user` is the only node (graph output included) that reads `v`.
inline bool onlyUsedBy(const ir::Graph& graph, const Value* v, const Node* user) {
  std::vector<Node*> users = graph.users(v);
  return users.size() == 1 && users.front() == user;
}

// The value of a one-element fixed param (any shape with one element), when `v` is one.
inline std::optional<double> scalarParam(const Value* v) {
  Node* p = paramNode(v);
  if (!p || p->isUpdatable() || p->paramData().numel() != 1) return std::nullopt;
  return p->paramData().getAsDouble(0);
}

// Whether `v` is a one-element param equal to `want` within `tol` (relative to `want`).
inline bool isScalarParam(const Value* v, double want, double tol = 0) {
  std::optional<double> s = scalarParam(v);
  return s && std::abs(*s - want) <= tol * std::abs(want);
}

// ---- tensors

inline std::vector<double> toDoubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.getAsDouble(i);
  return out;
}

inline Tensor fromDoubles(ir::DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.setAsDouble(i, values[i]);
  return t;
}

// A [rows, cols] matrix transposed to [cols, rows], bit-exact.
inline Tensor transpose2d(const Tensor& t) {
  int64_t rows = t.shape()[0];
  int64_t cols = t.shape()[1];
  Tensor out(t.dtype(), {cols, rows});
  size_t size = ir::dtypeSize(t.dtype());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(out.bytes() + (c * rows + r) * size, t.bytes() + (r * cols + c) * size, size);
    }
  }
  return out;
}

// The n per-channel values a param broadcasts as along one axis of a rank-`rank` value: the param,
// right-aligned to that rank, must be 1 in every other dim and n or 1 in `axis` (so broadcasting
// it changes no shape). A one-element param gives n copies. nullopt when it does not fit.
inline std::optional<std::vector<double>> perChannel(const Tensor& t, size_t rank, size_t axis, int64_t n) {
  const std::vector<int64_t>& shape = t.shape();
  if (shape.size() > rank) return std::nullopt;
  size_t offset = rank - shape.size();
  bool alongAxis = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (offset + i == axis && shape[i] == n) {
      alongAxis = true;
      continue;
    }
    return std::nullopt;
  }
  std::vector<double> values = toDoubles(t);
  if (!alongAxis) return std::vector<double>(static_cast<size_t>(n), values.empty() ? 0.0 : values[0]);
  return values;
}

// A param's elements moved (transposed, broadcast, concatenated): the data, and for an updatable
// param its source moved the same way, so the result stays updatable.
struct Moved {
  Tensor data;
  std::optional<Tensor> source;
};

// `move` (Tensor -> Tensor, for any dtype) applied to p's data and, when p is updatable, its source.
template <typename Move>
Moved moveParam(const Node* p, Move&& move) {
  Moved m{move(p->paramData()), std::nullopt};
  if (p->isUpdatable()) m.source = move(p->paramSource());
  return m;
}

// perChannel of param p as a [n] tensor of p's dtype, moved (see Moved); nullopt when it does not fit.
inline std::optional<Moved> channelRow(const Node* p, size_t rank, size_t axis, int64_t n) {
  if (!perChannel(p->paramData(), rank, axis, n)) return std::nullopt;
  return moveParam(p, [&](const Tensor& t) { return fromDoubles(t.dtype(), {n}, *perChannel(t, rank, axis, n)); });
}

// ---- provenance

// Appends the entries of `from` not already in `into`, in order.
inline void appendProvenance(std::vector<std::string>& into, const std::vector<std::string>& from) {
  for (const std::string& p : from) {
    if (std::find(into.begin(), into.end(), p) == into.end()) into.push_back(p);
  }
}

// The union of the nodes' provenance, taking the nodes in graph order.
inline std::vector<std::string> unionProvenance(const ir::Graph& graph, std::vector<const Node*> nodes) {
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < graph.nodes().size(); ++i) position[graph.nodes()[i].get()] = i;
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](const Node* a, const Node* b) { return position[a] < position[b]; });
  std::vector<std::string> out;
  for (const Node* n : nodes) appendProvenance(out, n->provenance());
  return out;
}

// ---- building

// A new param named after `base` (made unique).
inline Value* addParam(ir::Graph& graph, std::string_view base, Tensor data, std::vector<std::string> provenance) {
  return graph.addParam(graph.uniqueName(base), std::move(data), std::move(provenance));
}

// A new param from moved elements, updatable when they came from an updatable param.
inline Value* addParam(ir::Graph& graph, std::string_view base, Moved moved, std::vector<std::string> provenance) {
  Value* v = addParam(graph, base, std::move(moved.data), std::move(provenance));
  if (moved.source) v->producer()->setParamSource(std::move(*moved.source));
  return v;
}

// Adds `op` just before `root` to compute what `root` computes, and moves root's uses to it. The
// new node takes the output names of `nameFrom` (root by default), which are renamed away; the
// replaced nodes are left for the caller to erase. Returns nullptr, changing nothing, when the op
// rejects the operands or would give other output types than root's (a rewrite never changes a
// value's type).
inline Node* replaceOp(ir::Graph& graph, Node* root, Op op, std::vector<Value*> inputs, ir::AttrMap attrs,
                       std::vector<std::string> provenance, Node* nameFrom = nullptr) {
  if (!nameFrom) nameFrom = root;
  std::vector<ir::TensorType> types;
  try {
    attrs = ir::completeAttrs(ir::opInfo(op), std::move(attrs));
    std::vector<ir::TensorType> inputTypes;
    for (const Value* v : inputs) inputTypes.push_back(v->type());
    types = ir::inferOutputTypes(op, inputTypes, attrs, static_cast<int>(root->numOutputs()));
  } catch (const Error&) {
    return nullptr;
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != root->output(i)->type()) return nullptr;
  }
  if (nameFrom->numOutputs() != root->numOutputs()) nameFrom = root;
  std::vector<std::string> names;
  for (size_t i = 0; i < nameFrom->numOutputs(); ++i) {
    Value* v = nameFrom->output(i);
    names.push_back(v->name());
    graph.renameValue(v, graph.uniqueName(v->name() + ".replaced"));
  }
  Node* node = graph.addOp(op, std::move(inputs), std::move(attrs), std::move(names), std::move(types),
                           std::move(provenance), root);
  for (size_t i = 0; i < root->numOutputs(); ++i) graph.replaceAllUsesWith(root->output(i), node->output(i));
  return node;
}

// Erases the given nodes, each once nothing reads it any more (pass them root first).
inline void eraseUnused(ir::Graph& graph, const std::vector<Node*>& nodes) {
  for (Node* n : nodes) {
    bool used = false;
    for (size_t i = 0; i < n->numOutputs(); ++i) used = used || !graph.users(n->output(i)).empty();
    if (!used) graph.eraseNode(n);
  }
}

// ---- ordering

inline bool isTopologicallyOrdered(const ir::Graph& graph) {
  std::unordered_set<const Value*> defined;
  for (const auto& n : graph.nodes()) {
    for (const Value* v : n->inputs()) {
      if (!defined.count(v)) return false;
    }
    for (size_t i = 0; i < n->numOutputs(); ++i) defined.insert(n->output(i));
  }
  return true;
}

// Rebuilds the graph so that every node comes after the nodes it reads, moving as little as
// possible: a node keeps its place unless it is needed earlier (new params move up to their
// first reader). Names, attributes, types, data and provenance are kept.
inline void restoreTopologicalOrder(ir::Graph& graph) {
  if (isTopologicallyOrdered(graph)) return;
  std::vector<const Node*> order;
  std::unordered_set<const Node*> placed;
  auto place = [&](const Node* root) {
    // Iterative post-order: a node is placed after the producers of its operands.
    std::vector<std::pair<const Node*, size_t>> stack{{root, 0}};
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (placed.count(n)) {
        stack.pop_back();
        continue;
      }
      if (next < n->numInputs()) {
        const Node* p = n->input(next++)->producer();
        if (!placed.count(p)) stack.emplace_back(p, 0);
        continue;
      }
      placed.insert(n);
      order.push_back(n);
      stack.pop_back();
    }
  };
  for (const auto& n : graph.nodes()) place(n.get());

  ir::Graph rebuilt(graph.name());
  std::unordered_map<const Value*, Value*> map;
  for (const Node* n : order) {
    switch (n->kind()) {
      case ir::NodeKind::Input: map[n->output()] = rebuilt.addInput(n->output()->name(), n->output()->type()); break;
      case ir::NodeKind::Param:
        map[n->output()] = rebuilt.addParam(n->output()->name(), n->paramData(), n->provenance());
        map[n->output()]->producer()->setModelWeight(n->isModelWeight());
        if (n->isUpdatable()) map[n->output()]->producer()->setParamSource(n->paramSource());
        break;
      case ir::NodeKind::Op: {
        std::vector<Value*> inputs;
        for (const Value* v : n->inputs()) inputs.push_back(map.at(v));
        std::vector<std::string> names;
        std::vector<ir::TensorType> types;
        for (size_t i = 0; i < n->numOutputs(); ++i) {
          names.push_back(n->output(i)->name());
          types.push_back(n->output(i)->type());
        }
        Node* copy = rebuilt.addOp(n->op(), inputs, n->attrs(), names, types, n->provenance());
        for (size_t i = 0; i < n->numOutputs(); ++i) map[n->output(i)] = copy->output(i);
        break;
      }
      case ir::NodeKind::Output: {
        std::vector<std::pair<std::string, Value*>> outputs;
        for (size_t i = 0; i < n->numInputs(); ++i) outputs.emplace_back(n->outputNames()[i], map.at(n->input(i)));
        rebuilt.setOutputs(std::move(outputs));
        break;
      }
    }
  }
  rebuilt.setUpdatableWeights(graph.updatableWeights());
  graph = std::move(rebuilt);
}

}  // namespace policyc::passes::detail
