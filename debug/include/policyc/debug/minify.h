// The minifier: shrinks a graph that fails (wrong outputs, a C++ compile error, a crash) to the
// few nodes that still fail the same way, each candidate judged in a child process.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "policyc/codegen/backend.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/tensor.h"

namespace policyc::debug {

enum class FailureKind { Accuracy, Compile, Crash };
FailureKind parseFailureKind(const std::string& text);  // accuracy | compile | crash; Error otherwise
const char* failureKindName(FailureKind kind);

struct MinifyOptions {
  FailureKind failure = FailureKind::Accuracy;
  codegen::Backend backend = codegen::kDefaultBackend;  // cpp | llvm
  bool fuse = true;              // false: --no-fuse
  std::string match;             // the child's output must contain this too (keeps the failure the same)
  std::string outDir;            // repro.pir (+ .bin), inputs/*.npy, repro.sh; the best so far as it goes
  std::string policyc;           // the policyc executable the children run
  double rtol = 1e-4, atol = 1e-4;
  double timeoutSeconds = 60;    // a candidate running longer counts as a crash (a hang)
  std::function<void(const std::string&)> progress;  // one line at a time
  // Each candidate tried on stderr: a counter redrawn in place on a terminal, a line otherwise.
  bool candidateProgress = false;
};

struct MinifyResult {
  bool reproduced = false;  // the original graph fails as asked (else there is nothing to minify)
  size_t startNodes = 0, endNodes = 0;
  size_t candidatesTried = 0;
  double seconds = 0;
  std::string reproScript;  // DIR/repro.sh
};

// `inputs` are the graph's inputs (signature order) that show the failure.
MinifyResult minify(const ir::Graph& graph, const std::vector<ir::Tensor>& inputs, const MinifyOptions& options);

}  // namespace policyc::debug
