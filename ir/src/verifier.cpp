// The graph verifier: structure, operands, attributes and types, checked against the op table.
#include "policyc/ir/verifier.h"

#include <unordered_set>

#include "policyc/ir/error.h"
#include "policyc/support/sizes.h"

namespace policyc::ir {
namespace {

std::string describe(const Node& n) {
  if (n.kind() == NodeKind::Op) return fmt::format("node '{}' ({})", n.name(), n.info().name);
  if (n.kind() == NodeKind::Output) return "the output node";
  return fmt::format("{} '{}'", nodeKindName(n.kind()), n.name());
}

// A value's type within the limits of support/sizes.h: its rank, and the elements of one batch row.
void checkLimits(const Value& v) {
  const Shape& shape = v.type().shape;
  if (static_cast<int64_t>(shape.size()) > sizes::kMaxRank) {
    fail("value '{}' has {} dimensions (at most {})", v.name(), shape.size(), sizes::kMaxRank);
  }
  if (!sizes::numel(evalShape(shape, 1))) {
    fail("value '{}' of type {} has more than 2^31-1 elements per batch row (the limit of one tensor)", v.name(), v.type().str());
  }
}

void verifyOp(const Node& n) {
  const OpInfo& info = n.info();
  AttrMap completed = completeAttrs(info, n.attrs());
  if (completed.size() != n.attrs().size()) {
    for (const auto& [name, value] : completed) {
      if (!n.attrs().count(name)) fail("attribute '{}' is missing (defaults are filled in when nodes are built)", name);
    }
  }
  for (const auto& [name, value] : n.attrs()) {
    if (attrKindOf(value) != info.findAttr(name)->kind) {
      fail("attribute '{}' is {}, expected {}", name, attrKindName(attrKindOf(value)),
           attrKindName(info.findAttr(name)->kind));
    }
  }
  std::vector<TensorType> inputTypes;
  for (Value* v : n.inputs()) inputTypes.push_back(v->type());
  std::vector<TensorType> expected =
      inferOutputTypes(n.op(), inputTypes, n.attrs(), static_cast<int>(n.numOutputs()));
  for (size_t i = 0; i < n.numOutputs(); ++i) {
    if (n.output(i)->type() != expected[i]) {
      fail("output '{}' is declared {} but the operator gives {}", n.output(i)->name(), n.output(i)->type().str(),
           expected[i].str());
    }
  }
}

}  // namespace

void verify(const Graph& graph) {
  std::unordered_set<const Value*> defined;
  std::unordered_set<std::string> names;
  bool inputsDone = false;
  const auto& nodes = graph.nodes();
  if (nodes.empty() || nodes.back()->kind() != NodeKind::Output) {
    throw VerifyError(fmt::format("verifier: graph '{}' has no output node (return)", graph.name()), nullptr);
  }
  if (static_cast<int64_t>(nodes.size()) > sizes::kMaxNodes) {
    throw VerifyError(fmt::format("verifier: graph '{}' has {} nodes (at most {})", graph.name(), nodes.size(), sizes::kMaxNodes), nullptr);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    try {
      if (n.kind() == NodeKind::Input) {
        if (inputsDone) fail("inputs must come before every other node");
      } else {
        inputsDone = true;
      }
      if (n.kind() == NodeKind::Output && i + 1 != nodes.size()) fail("the output node must be the last node");
      for (size_t k = 0; k < n.numInputs(); ++k) {
        const Value* v = n.input(k);
        if (!v) fail("operand {} is null", k);
        if (!defined.count(v)) {
          fail("operand {} '{}' is not defined before this node (dangling value or cycle)", k, v->name());
        }
      }
      for (size_t k = 0; k < n.numOutputs(); ++k) {
        const Value* v = n.output(k);
        if (v->producer() != &n || v->index() != static_cast<int>(k)) fail("output {} has a wrong producer link", k);
        if (v->name().empty()) fail("output {} has no name", k);
        // Names reach the C ABI as C strings (the descriptor): a NUL byte would cut them short.
        if (v->name().find('\0') != std::string::npos) fail("value name '{}' contains a NUL byte", v->name());
        if (!names.insert(v->name()).second) fail("value name '{}' is defined twice", v->name());
        for (Dim d : v->type().shape) {
          if (d.isStatic() && d.value() < 0) fail("value '{}' has a negative dimension", v->name());
        }
        checkLimits(*v);
        defined.insert(v);
      }
      switch (n.kind()) {
        case NodeKind::Input:
        case NodeKind::Param:
          if (n.numInputs() != 0 || n.numOutputs() != 1) fail("must have no operands and one value");
          if (n.kind() == NodeKind::Param) {
            const Tensor& t = n.paramData();
            if (t.type() != n.output()->type()) {
              fail("data is {} but the value is declared {}", t.type().str(), n.output()->type().str());
            }
            if (t.nbytes() != static_cast<size_t>(t.numel()) * dtypeSize(t.dtype())) fail("data has a wrong size");
          }
          break;
        case NodeKind::Op: verifyOp(n); break;
        case NodeKind::Output:
          if (n.numInputs() == 0) fail("the graph returns nothing");
          if (n.outputNames().size() != n.numInputs()) fail("names and values of the return differ in number");
          {
            std::unordered_set<std::string> outNames;
            for (const std::string& name : n.outputNames()) {
              if (name.empty()) fail("an output has an empty name");
              if (name.find('\0') != std::string::npos) fail("output name '{}' contains a NUL byte", name);
              if (!outNames.insert(name).second) fail("output name '{}' is used twice", name);
            }
          }
          break;
      }
    } catch (const Error& e) {
      throw VerifyError(fmt::format("verifier: {} in graph '{}': {}", describe(n), graph.name(), e.what()), &n);
    }
  }
}

}  // namespace policyc::ir
