// The graph verifier: rejects malformed graphs with a message naming the node.
#pragma once

#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"

namespace policyc::ir {

// Checks: a single output node, last; inputs first; every operand defined earlier in the
// same graph (which also rules out cycles); unique value names; op arity; attributes complete
// and well typed; every op's output types equal what its shape function infers; params' data
// matching their type; the limits of policyc/support/sizes.h (nodes per graph, rank, elements per
// tensor or batch row). Throws VerifyError("verifier: node '%x' (gemm): ...") on the first problem
// found.
void verify(const Graph& graph);

// What verify() throws: the message, and the node it is about (null for the graph as a whole), so
// that a reader can point at the node's place in its file.
class VerifyError : public Error {
 public:
  VerifyError(const std::string& message, const Node* node) : Error(message), node_(node) {}
  const Node* node() const { return node_; }

 private:
  const Node* node_;
};

}  // namespace policyc::ir
