// cse: merges ops and params that compute the same value.
//
// Assumes: a verified, topologically ordered graph; ops are pure (every policyc op is).
// Guarantees: no two params hold bit-identical data of the same type, and no two ops apply the
// same operator with equal attributes (compared by their exact text form, so -0.0 and 0.0
// differ) to the same operands in the same order. Of each set of equals the first in graph order
// stays, takes over the others' users and unites their provenance; the others are erased.
// Values are unchanged bit for bit. Counters: "params merged", "ops merged".
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "rewrite.h"

namespace policyc::passes {
namespace {

using namespace detail;

std::string opKey(const Node& n) {
  std::string key = fmt::format("{} {}", n.info().name, n.numOutputs());
  for (const Value* v : n.inputs()) key += fmt::format(" {}", fmt::ptr(v));
  for (const auto& [name, value] : n.attrs()) key += fmt::format(" {}={}", name, ir::attrValueStr(value));
  for (size_t i = 0; i < n.numOutputs(); ++i) key += " " + n.output(i)->type().str();
  return key;
}

size_t paramHash(const Tensor& t) {
  std::string_view bytes(reinterpret_cast<const char*>(t.bytes()), t.nbytes());
  return std::hash<std::string_view>{}(bytes) ^ (std::hash<std::string>{}(t.type().str()) << 1);
}

void merge(ir::Graph& graph, Node* keep, Node* duplicate) {
  for (size_t i = 0; i < keep->numOutputs(); ++i) graph.replaceAllUsesWith(duplicate->output(i), keep->output(i));
  appendProvenance(keep->provenance(), duplicate->provenance());
  graph.eraseNode(duplicate);
}

// Two params are one value when their data are bit-equal and, for updatable params, their sources
// too: two weights that happen to be equal now (zero biases at initialisation) are not the same
// weight once set_weights replaces one of them.
bool sameParam(const Node& a, const Node& b) {
  if (!a.paramData().bitEqual(b.paramData()) || a.isUpdatable() != b.isUpdatable()) return false;
  return !a.isUpdatable() || a.paramSource().bitEqual(b.paramSource());
}

}  // namespace

PassStats eliminateCommonSubexpressions(ir::Graph& graph) {
  PassStats stats;
  stats.add("params merged", 0);
  stats.add("ops merged", 0);
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  std::unordered_map<size_t, std::vector<Node*>> params;
  std::unordered_map<std::string, Node*> ops;
  // In graph order: once an op's operands are merged, its own duplicates have equal keys.
  for (Node* n : nodes) {
    if (n->kind() == ir::NodeKind::Param) {
      std::vector<Node*>& bucket = params[paramHash(n->paramData())];
      auto same = std::find_if(bucket.begin(), bucket.end(),
                               [&](const Node* p) { return sameParam(*p, *n); });
      if (same == bucket.end()) {
        bucket.push_back(n);
      } else {
        merge(graph, *same, n);
        stats.add("params merged");
      }
    } else if (n->isOp()) {
      auto [it, inserted] = ops.emplace(opKey(*n), n);
      if (!inserted) {
        merge(graph, it->second, n);
        stats.add("ops merged");
      }
    }
  }
  return stats;
}

}  // namespace policyc::passes
