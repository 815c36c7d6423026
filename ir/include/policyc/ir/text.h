// The .pir text form of a graph: printer and parser, an exact round trip (weights bit-exact).
//
//   graph ppo_mlp(%obs: f32[batch,17]) {
//     %w0 = param f32[256,17] @0                      # bytes in the sidecar, at offset 0
//     %shape = param i64[2] [1, -1]                   # small tensors inline
//     %fc0 = gemm(%obs, %w0, %b0) {trans_b=1} : f32[batch,256] loc("/pi_fc0/Gemm")
//     %a, %b = split(%fc0) {axis=1} : f32[batch,128], f32[batch,128]
//     return (action_dist_inputs=%out, vf=%vf)
//   }
//
// Names that are not identifiers ([A-Za-z0-9_.]+) print quoted: %"onnx::Gemm_3".
// The sidecar of FILE.pir is FILE.pir.bin; tensors start at 64-byte aligned offsets.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "policyc/ir/graph.h"

namespace policyc::ir {

struct PrintOptions {
  // Params with at most this many elements print inline; larger ones go to the sidecar.
  int64_t inlineLimit = 16;
  // Print provenance as loc("...") (the parser reads it back).
  bool provenance = true;
};

struct PrintedGraph {
  std::string text;
  std::vector<std::byte> sidecar;  // empty when every param printed inline
};

PrintedGraph printGraph(const Graph& graph, const PrintOptions& options = {});
// Writes PATH and, when needed, PATH.bin (removes a stale PATH.bin otherwise).
void writePir(const Graph& graph, const std::string& path, const PrintOptions& options = {});

// Parses .pir text. `sourceName` appears in error messages ("model.pir:12:7: expected ...");
// `sidecar` holds the bytes `@offset` refers to. The result is verified.
std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view sourceName = "<string>",
                                  std::span<const std::byte> sidecar = {});
// Reads PATH (and PATH.bin when the text refers to it).
std::unique_ptr<Graph> readPir(const std::string& path);

// Quotes a name for %name / output-name positions when it is not a plain identifier.
std::string formatName(std::string_view name);

// The graph as a Graphviz DOT digraph: a box per op (its op, name and output types, filled by
// its FusionKind), inputs, params and the return; node ids are `idPrefix` + "n" + the node's
// position, so several graphs can share one page (model text appears only escaped, in labels).
std::string printDot(const Graph& graph, std::string_view idPrefix = "");
std::string dotNodeId(std::string_view idPrefix, size_t nodeIndex);
std::string_view dotFill(FusionKind kind);  // the fill colour printDot gives an op of this kind

}  // namespace policyc::ir
