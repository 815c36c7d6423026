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
  // With compile.cpp.precision other than fp32 (--precision): the outputs are judged against the
  // precision budget (docs/precision.md) instead of rtol/atol: a float output's mean |difference|
  // at most budgetFraction (5% for bf16, 10% for int8) of the fp32 reference's RMS, and, for a
  // discrete head (a float output whose last dim is at least 2), the argmax of at least
  // minAgreement of its rows the same as the reference's.
  double minAgreement = 0.995;
  // The discrete heads (outputs whose argmax is the action); unset: isDiscreteHead decides.
  std::optional<std::vector<std::string>> discrete;
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

// One output's accuracy under reduced precision (CheckOptions::minAgreement).
struct OutputAccuracy {
  std::string name, type;
  double meanAbs = 0, maxAbs = 0;  // |compiled - fp32 interpreter| over every element
  double refRms = 0;               // the fp32 reference's root mean square
  double budget = 0;               // the largest mean |difference| that passes
  std::optional<double> agreement;  // a discrete head (CheckOptions::discrete): the fraction of rows whose argmax agrees
  int64_t rows = 0;                 // rows the agreement is over
  bool pass = true;
};
// Whether output `name` of `graph` looks like a discrete head: a float output whose last dim is
// at least 2 and that a softmax or log-softmax computes, or whose name says logits,
// probabilities, log-probabilities or Q-values (logit, prob, logp, q_value, qvalue, or "q").
// A Gaussian's mean, a continuous action or RLlib's action_dist_inputs are not (--discrete names
// them where they are).
bool isDiscreteHead(const ir::Graph& graph, const std::string& name);
// The precision budget's mean |difference| as a fraction of the reference's RMS.
double precisionBudgetFraction(codegen::Precision precision);
// The 95% Wilson score interval of an agreement measured as `fraction` of `rows` rows: how far
// the agreement over all observations may lie from the one measured (1000 random rows at 99.3%:
// 98.6% to 99.7%).
std::pair<double, double> agreementInterval(double fraction, int64_t rows);

struct CheckReport {
  std::vector<TensorCheck> outputs;
  std::vector<OutputAccuracy> accuracy;  // under reduced precision, instead of outputs
  std::vector<std::pair<std::string, codegen::WeightStorage>> layers;  // ... and each layer's weight storage
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
