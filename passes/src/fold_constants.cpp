// fold-constants: evaluates ops whose operands are all params and makes their results params.
//
// Assumes: a verified graph.
// Guarantees: every op whose operands are all params (after earlier folds in the same run, so
// whole constant sub-graphs fold in one run) is replaced by one param per result, with the op's
// output name, type and provenance; the values are what the interpreter computes (the op's
// reference kernel, rounded to the dtype), bit for bit. Ops whose results would have more than
// kMaxFoldedElements elements, and ops the reference kernel rejects (integer division by zero, an
// index out of range), are left for run time. An op reading updatable params (whose values change
// at run time) folds only when it moves data (an Injective op: transpose, concat, slice, ...; a
// pad only with zeros) and its other operands are fixed integer params (gather's indices): its
// results are updatable, their sources the same op applied to the operands' sources; any other op
// on them is left for run time. Counter: "folded". Leaves the operand params for dce.
#include "policyc/ir/interpreter.h"
#include "rewrite.h"

namespace policyc::passes {
namespace {

using namespace detail;

constexpr int64_t kMaxFoldedElements = int64_t{16} << 20;

bool foldable(const Node& n) {
  if (!n.isOp() || n.numInputs() == 0) return false;
  for (const Value* v : n.inputs()) {
    if (!isParam(v)) return false;
  }
  int64_t elements = 0;
  for (size_t i = 0; i < n.numOutputs(); ++i) {
    const ir::Shape& shape = n.output(i)->type().shape;
    if (!ir::isStaticShape(shape)) return false;
    elements += ir::staticNumel(ir::evalShape(shape, 1));
  }
  return elements <= kMaxFoldedElements;
}

bool readsUpdatable(const Node& n) {
  return std::any_of(n.inputs().begin(), n.inputs().end(), [](const Value* v) { return paramNode(v)->isUpdatable(); });
}

// Whether an op reading updatable params only moves their elements (see the header).
bool movesUpdatableData(const Node& n) {
  if (n.info().fusion != ir::FusionKind::Injective) return false;
  if (n.isOp(Op::Pad) && (n.attrString("mode") != "constant" || n.attrFloat("value") != 0.0)) return false;
  for (const Value* v : n.inputs()) {
    const Node* p = paramNode(v);
    if (!p->isUpdatable() && ir::isFloat(p->paramData().dtype())) return false;
  }
  return true;
}

}  // namespace

PassStats foldConstants(ir::Graph& graph) {
  PassStats stats;
  std::vector<Node*> ops;
  for (const auto& n : graph.nodes()) {
    if (n->isOp()) ops.push_back(n.get());
  }
  for (Node* n : ops) {
    if (!foldable(*n)) continue;
    const bool updatable = readsUpdatable(*n);
    if (updatable && !movesUpdatableData(*n)) continue;
    std::vector<Tensor> inputs, sourceInputs;
    for (const Value* v : n->inputs()) {
      const Node* p = v->producer();
      inputs.push_back(p->paramData());
      sourceInputs.push_back(p->isUpdatable() ? p->paramSource() : p->paramData());
    }
    std::vector<Tensor> results, sources;
    try {
      results = ir::evaluateOp(n->op(), inputs, n->attrs(), static_cast<int>(n->numOutputs()));
      if (updatable) sources = ir::evaluateOp(n->op(), sourceInputs, n->attrs(), static_cast<int>(n->numOutputs()));
    } catch (const Error&) {
      continue;  // fails at run time as well; keep the op so the error is reported there
    }
    bool sameTypes = results.size() == n->numOutputs();
    for (size_t i = 0; sameTypes && i < results.size(); ++i) sameTypes = results[i].type() == n->output(i)->type();
    if (!sameTypes) continue;
    for (size_t i = 0; i < results.size(); ++i) {
      Value* old = n->output(i);
      std::string name = old->name();
      graph.renameValue(old, graph.uniqueName(name + ".folded"));
      Value* param = graph.addParam(name, std::move(results[i]), n->provenance());
      if (updatable) param->producer()->setParamSource(std::move(sources[i]));
      graph.replaceAllUsesWith(old, param);
    }
    graph.eraseNode(n);
    stats.add("folded");
  }
  stats.add("folded", 0);
  restoreTopologicalOrder(graph);
  return stats;
}

}  // namespace policyc::passes
