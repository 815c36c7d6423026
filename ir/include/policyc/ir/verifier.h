// The graph verifier: rejects malformed graphs with a message naming the node.
#pragma once

#include "policyc/ir/graph.h"

namespace policyc::ir {

// Checks: a single output node, last; inputs first; every operand defined earlier in the
// same graph (which also rules out cycles); unique value names; op arity; attributes complete
// and well typed; every op's output types equal what its shape function infers; params' data
// matching their type. Throws policyc::Error("verifier: node '%x' (gemm): ...") on the first
// problem found.
void verify(const Graph& graph);

}  // namespace policyc::ir
