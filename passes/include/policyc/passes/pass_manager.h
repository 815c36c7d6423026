// The pass manager: passes registered by name, the default pipeline, and a log of what each did.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policyc/ir/graph.h"

namespace policyc::passes {

// What a pass did, as named counters ("folded", "removed"); it changed the graph iff a counter
// is non-zero.
class PassStats {
 public:
  void add(std::string_view what, int64_t n = 1);
  int64_t get(std::string_view what) const;
  bool changed() const;
  const std::vector<std::pair<std::string, int64_t>>& counters() const { return counters_; }
  std::string str() const;  // "2 folded, 1 removed" or "no change"

 private:
  std::vector<std::pair<std::string, int64_t>> counters_;
};

using PassFn = PassStats (*)(ir::Graph&);

struct PassInfo {
  std::string_view name;
  PassFn run;
  bool fusion;  // turned off by --no-fuse
  std::string_view description;
};

std::span<const PassInfo> allPasses();
const PassInfo* findPass(std::string_view name);  // nullptr if unknown

// The default pipeline, in order (pipeline.cpp).
std::vector<std::string> defaultPipeline();

struct PipelineOptions {
  std::optional<std::vector<std::string>> passes;  // run exactly these (--passes=a,b,c)
  std::vector<std::string> disabled;               // --disable-pass NAME (repeatable)
  std::vector<std::string> printAfter;             // --print-after NAME|all
  bool noFusion = false;                           // skip passes marked fusion
  bool verifyEach = true;                          // run the verifier after every pass
  // Called after each pass that ran (for --print-after and semantic-preservation tests).
  std::function<void(std::string_view pass, const PassStats&, const ir::Graph&)> afterPass;
};

struct PassLogEntry {
  std::string pass;
  PassStats stats;
  double milliseconds = 0;
  std::string graphAfter;  // the .pir text, when the pass changed the graph
};

struct PipelineResult {
  std::vector<PassLogEntry> log;
  std::string printed;  // the --print-after output
};

// Runs the pipeline on `graph` in place. Unknown pass names (in passes, disabled or printAfter)
// are an error listing the known ones; a verifier failure after a pass names that pass.
PipelineResult runPipeline(ir::Graph& graph, const PipelineOptions& options = {});

// The passes.log text: every pass that ran, changed or not, its counters and time, and the graph
// after it when it changed.
std::string formatPassLog(const PipelineResult& result);

// The registered pass functions.
#define POLICYC_PASS(name, fn, fusion, description) PassStats fn(ir::Graph& graph);
#include "policyc/passes/passes.def"
#undef POLICYC_PASS

}  // namespace policyc::passes
