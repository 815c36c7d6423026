// The reference interpreter: runs any graph on concrete inputs, naively and obviously correctly.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "policyc/ir/graph.h"
#include "policyc/ir/tensor.h"

namespace policyc::ir {

struct InterpreterOptions {
  // Keep every intermediate in double precision instead of rounding to f32 after each op
  // (the float64 reference the accuracy checker compares errors against). Outputs are then
  // returned as f64 tensors where the graph says f32.
  bool float64 = false;
  // Called after each op node with its output tensors (for per-node comparison, recording).
  std::function<void(const Node&, const std::vector<Tensor>&)> onNode;
};

// Inputs in the graph's signature order. Their dtypes must match exactly and their shapes must
// match the declared ones with one consistent value for `batch` (batch 0 allowed); otherwise
// policyc::Error naming the input. Outputs in the order of the graph's return.
std::vector<Tensor> interpret(const Graph& graph, const std::vector<Tensor>& inputs,
                              const InterpreterOptions& options = {});

// Same, with inputs and outputs by name (unknown or missing input names are errors).
std::map<std::string, Tensor> interpretNamed(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                             const InterpreterOptions& options = {});

// Evaluates one op on concrete tensors (the importer folds constants with it).
std::vector<Tensor> evaluateOp(Op op, const std::vector<Tensor>& inputs, const AttrMap& attrs, int numOutputs = 1);

}  // namespace policyc::ir
