// fuse-horizontal: merges sibling layers that read the same input into one wider layer.
//
// Assumes: a verified graph; run after canonicalize (dense layers are `linear`) and cse.
// Guarantees: two or more `linear(x, W_i, b_i?)` reading the same x with param weights (and param
// or absent biases), or two or more `conv(x, W_i, b_i?)` with param weights, group 1 and identical
// attributes and kernel shapes, become one layer over the weights concatenated along the output
// axis ([N1+N2+..., K]; biases concatenated likewise, a missing bias as zeros when another member
// has one) followed by a `split` along the output axis (last axis for linear, axis 1 for conv)
// whose results take the members' names and users. Values and types are unchanged (the fused
// layer computes the same dot products). The fused layer and the split unite the members'
// provenance; the fused params unite the provenance of the params they concatenate. Members
// with non-param weights or biases, other attributes or another kernel shape, and dead ones (no
// users), are not merged; updatable weights merge only with updatable ones (sources concatenated
// alike), and a layer whose bias is not as updatable as its weight not at all.
// Then, when every result of a split feeds the same unary elementwise op and nothing else, that op
// moves above the split (one tanh over [batch,512] instead of two over [batch,256]), so the fused
// layer's epilogue can absorb it. Layers whose results the graph returns are not merged: they
// would have to be copied out of the split.
// Counters: "linear groups fused", "conv groups fused", "layers merged", "elementwise ops moved above split". Adds params (restoring
// topological order at the end); leaves the old ones for dce.
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include "rewrite.h"

namespace policyc::passes {
namespace {

using namespace detail;

// The grouping key of a layer that may be merged with siblings reading `x`; empty if it may not.
std::string siblingKey(const ir::Graph& graph, const Node* n, const Value* x) {
  if (!(n->isOp(Op::Linear) || n->isOp(Op::Conv)) || n->input(0) != x) return "";
  std::vector<Node*> users = graph.users(n->output());
  if (users.empty()) return "";  // dead: merging it would only widen the layer
  // A result the graph returns would have to be copied out of the fused layer's split: no gain.
  if (std::any_of(users.begin(), users.end(), [](const Node* u) { return u->kind() == ir::NodeKind::Output; })) {
    return "";
  }
  if (!isParam(n->input(1)) || (n->numInputs() == 3 && !isParam(n->input(2)))) return "";
  // Updatable weights merge only with updatable ones (the fused weight's source is theirs, moved),
  // and a layer's bias must be as updatable as its weight.
  const bool updatable = isUpdatable(n->input(1));
  if (n->numInputs() == 3 && isUpdatable(n->input(2)) != updatable) return "";
  const char* kind = updatable ? " updatable" : "";
  const ir::TensorType& w = n->input(1)->type();
  // Any widths N_i group together: same x means the same K.
  if (n->isOp(Op::Linear)) return fmt::format("linear {} K={}{}", ir::dtypeName(w.dtype), w.shape[1].str(), kind);
  if (n->attrInt("group") != 1) return "";
  std::string key = fmt::format("conv {}{}", ir::shapeStr(ir::Shape(w.shape.begin() + 1, w.shape.end())), kind);
  for (const auto& [name, value] : n->attrs()) key += fmt::format(" {}={}", name, ir::attrValueStr(value));
  return key;
}

Tensor concatRows(const std::vector<const Tensor*>& parts, ir::DType dtype, std::vector<int64_t> shape) {
  Tensor out(dtype, std::move(shape));
  size_t offset = 0;
  for (const Tensor* t : parts) {
    if (t->nbytes()) std::memcpy(out.bytes() + offset, t->bytes(), t->nbytes());
    offset += t->nbytes();
  }
  return out;
}

std::string joinNames(const std::vector<Node*>& nodes) {
  std::string out;
  for (const Node* n : nodes) out += (out.empty() ? "" : "+") + n->name();
  return out;
}

bool fuse(ir::Graph& graph, Value* x, const std::vector<Node*>& members, PassStats& stats) {
  Node* first = members.front();
  bool isConv = first->isOp(Op::Conv);
  bool anyBias = false;
  std::vector<int64_t> sizes;
  std::vector<const Tensor*> weights;
  std::vector<Node*> weightNodes, biasNodes;
  std::vector<std::string> weightProvenance, biasProvenance;
  std::vector<Tensor> zeros;
  zeros.reserve(2 * members.size());  // stable addresses: `biases` and `sources` point into it
  for (Node* m : members) {
    Node* w = paramNode(m->input(1));
    weightNodes.push_back(w);
    weights.push_back(&w->paramData());
    appendProvenance(weightProvenance, w->provenance());
    sizes.push_back(w->paramData().shape()[0]);
    anyBias = anyBias || m->numInputs() == 3;
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  const Tensor& w0 = *weights.front();
  std::vector<int64_t> wShape = w0.shape();
  wShape[0] = total;
  // Updatable members (siblingKey groups them apart): the sources concatenated the same way, a
  // missing bias's zeros literal zeros (source 0).
  const bool updatable = weightNodes.front()->isUpdatable();
  Moved fusedWeights{concatRows(weights, w0.dtype(), wShape), std::nullopt};
  if (updatable) {
    std::vector<const Tensor*> sources;
    for (const Node* w : weightNodes) sources.push_back(&w->paramSource());
    fusedWeights.source = concatRows(sources, ir::DType::I64, wShape);
  }
  Value* fusedW = addParam(graph, joinNames(weightNodes), std::move(fusedWeights), weightProvenance);
  std::vector<Value*> inputs{x, fusedW};
  if (anyBias) {
    std::vector<const Tensor*> biases, sources;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i]->numInputs() == 3) {
        Node* b = paramNode(members[i]->input(2));
        biasNodes.push_back(b);
        biases.push_back(&b->paramData());
        if (updatable) sources.push_back(&b->paramSource());
        appendProvenance(biasProvenance, b->provenance());
      } else {
        zeros.emplace_back(w0.dtype(), std::vector<int64_t>{sizes[i]});
        biases.push_back(&zeros.back());
        zeros.emplace_back(ir::DType::I64, std::vector<int64_t>{sizes[i]});
        sources.push_back(&zeros.back());
      }
    }
    Moved fusedBias{concatRows(biases, w0.dtype(), {total}), std::nullopt};
    if (updatable) fusedBias.source = concatRows(sources, ir::DType::I64, {total});
    inputs.push_back(addParam(graph, joinNames(biasNodes), std::move(fusedBias), biasProvenance));
  }

  std::vector<const Node*> replaced(members.begin(), members.end());
  std::vector<std::string> provenance = unionProvenance(graph, replaced);
  ir::AttrMap attrs = isConv ? first->attrs() : ir::AttrMap{};
  Node* fused = graph.addOp(first->op(), inputs, attrs, {graph.uniqueName(first->name() + ".fused")}, {}, provenance,
                            first);
  std::vector<std::string> names;
  for (Node* m : members) {
    names.push_back(m->name());
    graph.renameValue(m->output(), graph.uniqueName(m->name() + ".replaced"));
  }
  ir::AttrMap splitAttrs{{"axis", int64_t{isConv ? 1 : -1}}, {"split", sizes}};
  Node* split = graph.addOp(Op::Split, {fused->output()}, splitAttrs, names, {}, provenance, first);
  for (size_t i = 0; i < members.size(); ++i) {
    if (split->output(i)->type() != members[i]->output()->type()) {
      fail("internal: fuse-horizontal changed the type of '{}' from {} to {}", names[i],
           members[i]->output()->type().str(), split->output(i)->type().str());
    }
    graph.replaceAllUsesWith(members[i]->output(), split->output(i));
  }
  for (Node* m : members) graph.eraseNode(m);
  stats.add(isConv ? "conv groups fused" : "linear groups fused");
  stats.add("layers merged", static_cast<int64_t>(members.size()));
  return true;
}

// When every result of a split feeds the same unary elementwise op (same attributes) and nothing
// else, the op runs once on the split's input instead: PPO's two tanh after its fused first layer
// become one, which the fused layer's epilogue then absorbs.
bool sinkElementwiseIntoSplit(ir::Graph& graph, PassStats& stats) {
  for (const auto& node : graph.nodes()) {
    Node* split = node.get();
    if (!split->isOp(Op::Split)) continue;
    std::vector<Node*> users;
    for (size_t i = 0; i < split->numOutputs(); ++i) {
      std::vector<Node*> u = graph.users(split->output(i));
      if (u.size() != 1) break;
      users.push_back(u.front());
    }
    if (users.size() != split->numOutputs()) continue;
    const Node* first = users.front();
    if (!first->isOp() || first->info().fusion != ir::FusionKind::Elementwise || first->numInputs() != 1) continue;
    bool same = std::all_of(users.begin(), users.end(), [&](const Node* u) {
      return u->isOp(first->op()) && u->numInputs() == 1 && u->attrs() == first->attrs();
    });
    if (!same) continue;
    for (size_t i = 0; i < users.size(); ++i) {
      if (users[i]->input(0) != split->output(i)) same = false;
    }
    if (!same) continue;

    std::vector<const Node*> replaced(users.begin(), users.end());
    std::vector<std::string> provenance = unionProvenance(graph, replaced);
    Node* applied = graph.addOp(first->op(), {split->input(0)}, first->attrs(),
                                {graph.uniqueName(first->name() + ".whole")}, {}, provenance, split);
    std::vector<std::string> names;
    for (Node* u : users) {
      names.push_back(u->name());
      graph.renameValue(u->output(), graph.uniqueName(u->name() + ".replaced"));
    }
    Node* newSplit = graph.addOp(Op::Split, {applied->output()}, split->attrs(), names, {}, split->provenance(), split);
    for (size_t i = 0; i < users.size(); ++i) graph.replaceAllUsesWith(users[i]->output(), newSplit->output(i));
    for (Node* u : users) graph.eraseNode(u);
    graph.eraseNode(split);
    stats.add("elementwise ops moved above split", static_cast<int64_t>(users.size()));
    return true;
  }
  return false;
}

}  // namespace

PassStats fuseHorizontal(ir::Graph& graph) {
  PassStats stats;
  for (const char* counter : {"linear groups fused", "conv groups fused", "layers merged", "elementwise ops moved above split"}) {
    stats.add(counter, 0);
  }
  std::vector<Value*> candidates;
  for (const auto& n : graph.nodes()) {
    if (n->kind() != ir::NodeKind::Input && !n->isOp()) continue;
    for (size_t i = 0; i < n->numOutputs(); ++i) candidates.push_back(n->output(i));
  }
  // How many nodes read each value, counted in one pass (and again after a fusion changed the
  // graph): a value read once has no siblings, and graph.users() walks the whole graph, which
  // for every value of a long chain would take quadratic time.
  auto countUses = [&] {
    std::unordered_map<const Value*, int> count;
    for (const auto& n : graph.nodes()) {
      for (const Value* v : n->inputs()) ++count[v];
    }
    return count;
  };
  std::unordered_map<const Value*, int> uses = countUses();
  for (Value* x : candidates) {
    if (uses[x] < 2) continue;
    std::vector<std::pair<std::string, std::vector<Node*>>> groups;
    for (Node* user : graph.users(x)) {
      std::string key = siblingKey(graph, user, x);
      if (key.empty()) continue;
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
      if (it == groups.end()) {
        groups.emplace_back(key, std::vector<Node*>{user});
      } else {
        it->second.push_back(user);
      }
    }
    bool fused = false;
    for (const auto& [key, members] : groups) {
      if (members.size() >= 2) {
        fuse(graph, x, members, stats);
        fused = true;
      }
    }
    if (fused) uses = countUses();
  }
  restoreTopologicalOrder(graph);
  while (sinkElementwiseIntoSplit(graph, stats)) {
  }
  return stats;
}

}  // namespace policyc::passes
