// What the fuzz harnesses share: a graph that survived a reader must print, parse back and print
// the same (the .pir round trip), and must be small enough to interpret quickly.
#pragma once

#include <cstdlib>
#include <cstdio>
#include <string>

#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/interpreter.h"
#include "policyc/ir/text.h"
#include "policyc/support/sizes.h"

namespace policyc::fuzz {

// A finding the sanitizers cannot see: report it and abort, so that libFuzzer keeps the input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Printing a verified graph and parsing it back gives the same graph (exact round trip).
inline void checkRoundTrip(const ir::Graph& graph) {
  ir::PrintedGraph printed = ir::printGraph(graph);
  std::unique_ptr<ir::Graph> again;
  try {
    again = ir::parseGraph(printed.text, "<printed>", printed.sidecar);
  } catch (const Error& e) {
    finding(std::string("a printed graph does not parse: ") + e.what());
  }
  if (ir::printGraph(*again).text != printed.text) finding("print -> parse -> print differs");
}

// Runs the reference interpreter at batch 1 on zeros when the graph's values are small: what it
// may reject is an Error, never a crash.
inline void interpretSmall(const ir::Graph& graph) {
  int64_t elements = 0;
  for (const auto& n : graph.nodes()) {
    for (size_t i = 0; i < n->numOutputs(); ++i) {
      auto count = sizes::numel(ir::evalShape(n->output(i)->type().shape, 1));
      if (!count) return;
      elements += *count;
      if (elements > (int64_t{1} << 20)) return;
    }
  }
  if (graph.nodes().size() > 256) return;
  std::vector<ir::Tensor> inputs;
  for (const ir::Value* in : graph.inputs()) inputs.emplace_back(in->type().dtype, ir::evalShape(in->type().shape, 1));
  try {
    ir::interpret(graph, inputs);
  } catch (const Error&) {
  }
}

}  // namespace policyc::fuzz
