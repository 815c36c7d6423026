// A graph as a Graphviz DOT digraph (graph_imported.svg, graph_optimized.svg, `policyc dump
// --format dot|svg`): one node per graph node, coloured by how fusion treats its op.
#include <unordered_map>

#include <fmt/format.h>

#include "policyc/ir/text.h"
#include "policyc/support/escape.h"

namespace policyc::ir {

std::string_view dotFill(FusionKind kind) {
  switch (kind) {
    case FusionKind::GemmLike: return "#f4a582";
    case FusionKind::Window: return "#fddbc7";
    case FusionKind::Reduction: return "#b2abd2";
    case FusionKind::Elementwise: return "#d1e5f0";
    case FusionKind::Injective: return "#e0e0e0";
    case FusionKind::Opaque: return "#ffffbf";
  }
  return "#ffffff";
}

std::string dotNodeId(std::string_view prefix, size_t index) { return fmt::format("{}n{}", prefix, index); }

std::string printDot(const Graph& graph, std::string_view idPrefix) {
  // Ids are made from node positions, never from names: a name only ever appears escaped inside a
  // label or tooltip, so no model text can become DOT syntax or an id in the SVG.
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < graph.nodes().size(); ++i) position[graph.nodes()[i].get()] = i;
  std::string out = fmt::format("digraph \"{}\" {{\n", escape::dot(graph.name()));
  out += "  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n";
  out += "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#606060\"];\n";
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& n = *graph.nodes()[i];
    const std::string id = dotNodeId(idPrefix, i);
    std::string label, attrs;
    switch (n.kind()) {
      case NodeKind::Input:
        label = fmt::format("input {}\\n{}", escape::dot(n.name()), escape::dot(n.output()->type().str()));
        attrs = "shape=ellipse, fillcolor=\"#a6dba0\"";
        break;
      case NodeKind::Param:
        label = fmt::format("{}\\n{}", escape::dot(n.name()), escape::dot(n.output()->type().str()));
        attrs = "shape=note, fillcolor=\"#f7f7f7\", fontsize=8";
        break;
      case NodeKind::Output: {
        std::string names;
        for (const std::string& name : n.outputNames()) names += (names.empty() ? "" : ", ") + escape::dot(name);
        label = "return\\n" + names;
        attrs = "shape=ellipse, fillcolor=\"#a6dba0\"";
        break;
      }
      case NodeKind::Op: {
        std::string types;
        for (size_t o = 0; o < n.numOutputs(); ++o) types += (o ? ", " : "") + escape::dot(n.output(o)->type().str());
        label = fmt::format("{}\\n{}\\n{}", escape::dot(n.info().name), escape::dot(n.name()), types);
        attrs = fmt::format("fillcolor=\"{}\"", dotFill(n.info().fusion));
        break;
      }
    }
    std::string tooltip = n.provenance().empty() ? escape::dot(n.name())
                                                 : fmt::format("from {}", escape::dot(fmt::format("{}", fmt::join(n.provenance(), ", "))));
    out += fmt::format("  {0} [id=\"{0}\", label=\"{1}\", tooltip=\"{2}\", {3}];\n", id, label, tooltip, attrs);
  }
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& n = *graph.nodes()[i];
    for (const Value* v : n.inputs()) {
      if (!v->producer()) continue;
      out += fmt::format("  {} -> {};\n", dotNodeId(idPrefix, position.at(v->producer())), dotNodeId(idPrefix, i));
    }
  }
  out += "}\n";
  return out;
}

}  // namespace policyc::ir
