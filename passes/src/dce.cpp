// dce: removes the ops and params that no graph output depends on.
//
// Assumes: a graph with its output node.
// Guarantees: every remaining op and param contributes to some output; inputs stay (they are the
// model's signature) even when unused; the order of the rest is unchanged. Counters: "ops removed",
// "params removed".
#include "rewrite.h"

namespace policyc::passes {

PassStats eliminateDeadCode(ir::Graph& graph) {
  auto count = [&](ir::NodeKind kind) {
    int64_t n = 0;
    for (const auto& node : graph.nodes()) n += node->kind() == kind ? 1 : 0;
    return n;
  };
  int64_t ops = count(ir::NodeKind::Op);
  int64_t params = count(ir::NodeKind::Param);
  graph.removeDeadNodes();
  PassStats stats;
  stats.add("ops removed", ops - count(ir::NodeKind::Op));
  stats.add("params removed", params - count(ir::NodeKind::Param));
  return stats;
}

}  // namespace policyc::passes
