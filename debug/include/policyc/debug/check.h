// The accuracy checker: a compiled model against the reference interpreter on the same inputs,
// per output, and per node to find the first one whose value diverges.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "policyc/driver/compile.h"
#include "policyc/driver/model_io.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/tensor.h"
#include "policyc/runtime/loader.h"

namespace policyc::debug {

using driver::TensorCheck;

struct CheckOptions {
  double rtol = 1e-4;
  double atol = 1e-4;
  // Where allclose fails, a float output still passes when its RMSE against a float64
  // interpreter run is at most rmseMultiplier x the fp32 interpreter's own RMSE + atol / 10.
  double rmseMultiplier = 2.0;
  int threads = 1;
  bool perNode = false;        // also find the first diverging node
  driver::CompileRequest compile;  // backend, passes, target, debug directory; output is chosen here
};

struct DivergingNode {
  std::string node;        // the node's name
  std::string op;          // its operator
  std::string provenance;  // names in the source model, comma-separated
  std::string kernel;      // the kernel that computes it
  std::vector<std::string> kernelNodes;  // every node that kernel computes ("%name (op)")
  TensorCheck check;
};

struct CheckReport {
  std::vector<TensorCheck> outputs;
  bool pass = true;
  std::optional<DivergingNode> firstDiverging;  // with perNode, when some node diverges
  size_t nodesCompared = 0;                     // with perNode
  std::string crash;  // with perNode: "signal 4 (Illegal instruction) in kernel relu_2" when the model crashed
  std::string so;                               // the compiled model that was checked
};

// Compiles `graph` (as imported) with options.compile into a temporary directory, runs it and the
// interpreter on `inputs` and compares every output. Compile errors are policyc::Error. With
// perNode the model first runs in a child process: a crash is reported (report.crash, and the
// crashing kernel's first node as firstDiverging) instead of taking the checker down.
CheckReport checkModel(const ir::Graph& graph, const std::vector<ir::Tensor>& inputs, const CheckOptions& options);

// The report as the CLI prints it.
std::string formatCheckReport(const CheckReport& report, const CheckOptions& options);

}  // namespace policyc::debug
