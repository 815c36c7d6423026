// infer-shapes: recomputes every op's output types from its operands' types.
//
// Assumes: a topologically ordered graph whose ops accept their operands (the verifier's
// conditions, except that declared output types may be stale, e.g. after an importer or a pass
// changed an input's type).
// Guarantees: every op's output types are what its shape function gives for its current operand
// types, with the symbolic batch dim propagated; nothing else changes. Counter: "updated" (values
// whose type changed). A shape function's rejection is an error naming the node.
#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "rewrite.h"

namespace policyc::passes {

PassStats inferShapes(ir::Graph& graph) {
  PassStats stats;
  for (const auto& node : graph.nodes()) {
    if (!node->isOp()) continue;
    std::vector<ir::TensorType> inputTypes;
    for (const ir::Value* v : node->inputs()) inputTypes.push_back(v->type());
    std::vector<ir::TensorType> types;
    try {
      types = ir::inferOutputTypes(node->op(), inputTypes, node->attrs(), static_cast<int>(node->numOutputs()));
    } catch (const Error& e) {
      fail("node '{}' ({}): {}", node->name(), node->info().name, e.what());
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (node->output(i)->type() == types[i]) continue;
      node->output(i)->setType(types[i]);
      stats.add("updated");
    }
  }
  stats.add("updated", 0);
  return stats;
}

}  // namespace policyc::passes
