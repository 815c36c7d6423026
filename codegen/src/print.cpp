// Printing the kernel program: ir_pre_fusion.txt / ir_post_fusion.txt and the one-line list.
#include <map>
#include <set>

#include <fmt/format.h>

#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"

namespace policyc::codegen {
namespace {

std::string domainStr(const std::vector<ir::Dim>& domain) { return ir::shapeStr(domain); }

std::string indexStr(const IndexMap& map) {
  std::vector<std::string> parts;
  for (const IndexExpr& e : map) {
    if (e.axis < 0) {
      parts.push_back(std::to_string(e.offset));
      continue;
    }
    std::string s = e.scale == 1 ? fmt::format("i{}", e.axis) : fmt::format("{}*i{}", e.scale, e.axis);
    if (e.offset) s += fmt::format("{:+}", e.offset);
    parts.push_back(s);
  }
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string bufferRef(const KernelProgram& p, int id) { return "%" + ir::formatName(p.buffer(id).name); }

std::string attrsOf(const ir::Node& n) {
  std::vector<std::string> parts;
  for (const ir::AttrSpec& spec : n.info().attrs) {
    auto it = n.attrs().find(std::string(spec.name));
    if (it == n.attrs().end() || (spec.defaultValue && *spec.defaultValue == it->second)) continue;
    parts.push_back(fmt::format("{}={}", spec.name, ir::attrValueStr(it->second)));
  }
  return parts.empty() ? "" : fmt::format(" {{{}}}", fmt::join(parts, ", "));
}

void printBody(std::string& out, const KernelProgram& p, const std::vector<Instr>& body) {
  for (size_t i = 0; i < body.size(); ++i) {
    const Instr& in = body[i];
    std::vector<std::string> args;
    for (int a : in.args) args.push_back(fmt::format("%{}", a));
    switch (in.opcode) {
      case Opcode::Load:
        out += fmt::format("    %{} = load {}{} : {}\n", i, bufferRef(p, in.buffer), indexStr(in.index), ir::dtypeName(in.dtype));
        break;
      case Opcode::Store:
        out += fmt::format("    store {}{} = {}\n", bufferRef(p, in.buffer), indexStr(in.index), args.at(0));
        break;
      case Opcode::Const:
        out += fmt::format("    %{} = const {} : {}\n", i, ir::attrValueStr(in.constant), ir::dtypeName(in.dtype));
        break;
      case Opcode::Acc: out += fmt::format("    %{} = acc : {}\n", i, ir::dtypeName(in.dtype)); break;
      case Opcode::Apply:
        out += fmt::format("    %{} = {}({}){} : {}    # {}\n", i, ir::opInfo(in.op).name, fmt::join(args, ", "),
                           in.node ? attrsOf(*in.node) : "", ir::dtypeName(in.dtype),
                           in.node ? "%" + ir::formatName(in.node->name()) : "");
        break;
    }
  }
}

std::string sourceStr(const ir::Node* n) {
  std::string s = fmt::format("%{} ({})", ir::formatName(n->name()), n->info().name);
  std::vector<std::string> origins;
  for (const std::string& origin : n->provenance()) origins.push_back(escape::printable(origin));  // the model's text
  if (!origins.empty()) s += fmt::format(" from \"{}\"", fmt::join(origins, "\", \""));
  return s;
}

}  // namespace

const char* bufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::Input: return "input";
    case BufferKind::Output: return "output";
    case BufferKind::Param: return "param";
    case BufferKind::Temp: return "temp";
  }
  return "?";
}

const char* kernelKindName(KernelKind kind) {
  switch (kind) {
    case KernelKind::Pointwise: return "pointwise";
    case KernelKind::Linear: return "linear";
    case KernelKind::Conv: return "conv";
    case KernelKind::Pool: return "pool";
    case KernelKind::Reduction: return "reduction";
    case KernelKind::Copy: return "copy";
  }
  return "?";
}

std::string printKernelList(const KernelProgram& p) {
  std::string out;
  for (const Kernel& k : p.kernels) {
    std::vector<std::string> ops;
    for (const ir::Node* n : k.sources) ops.emplace_back(n->info().name);
    out += fmt::format("{} {} {} <- {}\n", k.name, kernelKindName(k.kind), domainStr(k.domain), fmt::join(ops, ", "));
  }
  return out;
}

std::string printKernelProgram(const KernelProgram& p) {
  std::string out = fmt::format("kernel program {}: {} kernels\n\nbuffers:\n", ir::formatName(p.name), p.kernels.size());
  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::Param && p.readersOf(b.id).empty()) continue;  // folded into constants
    out += fmt::format("  {} {} {}", bufferRef(p, b.id), bufferKindName(b.kind), b.type.str());
    if (b.isView()) out += fmt::format(" view of {} offset {} strides [{}]", bufferRef(p, b.root), b.offset, fmt::join(b.strides, ","));
    out += "\n";
  }
  for (const Kernel& k : p.kernels) {
    out += fmt::format("\nkernel {} ({}) domain {}\n", k.name, kernelKindName(k.kind), domainStr(k.domain));
    out += "  sources:";
    for (size_t i = 0; i < k.sources.size(); ++i) out += fmt::format("{} {}", i ? "," : "", sourceStr(k.sources[i]));
    out += "\n  reads:";
    std::vector<int> reads = k.reads(), writes = k.writes();
    for (size_t i = 0; i < reads.size(); ++i) out += fmt::format("{} {} {}", i ? "," : "", bufferRef(p, reads[i]), p.buffer(reads[i]).type.str());
    out += "\n  writes:";
    for (size_t i = 0; i < writes.size(); ++i) out += fmt::format("{} {} {}", i ? "," : "", bufferRef(p, writes[i]), p.buffer(writes[i]).type.str());
    out += "\n";
    if (k.anchor) {
      std::vector<std::string> operands;
      for (size_t i = 0; i < k.anchorInputs.size(); ++i) {
        operands.push_back(i == 0 && !k.prologue.empty() ? "prologue" : bufferRef(p, k.anchorInputs[i]));
      }
      out += fmt::format("  template: {}({}){}\n", k.anchor->info().name, fmt::join(operands, ", "), attrsOf(*k.anchor));
    }
    if (!k.prologue.empty()) {
      out += fmt::format("  prologue (result %{}):\n", k.prologueResult);
      printBody(out, p, k.prologue);
    }
    out += k.anchor ? "  epilogue:\n" : "  body:\n";
    printBody(out, p, k.body);
  }
  return out;
}

namespace {
std::string_view kernelFill(KernelKind kind) {
  switch (kind) {
    case KernelKind::Linear: return "#fbe3d4";
    case KernelKind::Conv: return "#fbe3d4";
    case KernelKind::Pool: return "#fdf0e6";
    case KernelKind::Reduction: return "#e5e2f0";
    case KernelKind::Copy: return "#eeeeee";
    case KernelKind::Pointwise: return "#e6f0f7";
  }
  return "#ffffff";
}
}  // namespace

std::string kernelDotNodeId(size_t kernel, size_t node) { return fmt::format("k{}n{}", kernel, node); }

std::string printKernelDot(const KernelProgram& p) {
  // Ids from positions only (kernel k, its j-th node, buffer b): names appear escaped in labels.
  std::string out = fmt::format("digraph \"{}\" {{\n", escape::dot(p.name));
  out += "  rankdir=TB; compound=true;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  out += "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#606060\"];\n";
  // Where each buffer's root is written and read, by which kernel's node.
  std::map<std::string, std::pair<size_t, size_t>> producerOf;  // value name -> (kernel, node)
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kernel = p.kernels[k];
    out += fmt::format("  subgraph cluster_k{0} {{\n    label=\"{1} ({2})\"; style=\"rounded,filled\"; fillcolor=\"{3}\"; "
                       "fontname=\"Helvetica\"; fontsize=11;\n",
                       k, escape::dot(kernel.name), kernelKindName(kernel.kind), kernelFill(kernel.kind));
    for (size_t j = 0; j < kernel.sources.size(); ++j) {
      const ir::Node& n = *kernel.sources[j];
      out += fmt::format("    {0} [id=\"{0}\", shape=box, style=\"rounded,filled\", fillcolor=\"{1}\", label=\"{2}\\n{3}\"];\n", kernelDotNodeId(k, j),
                         ir::dotFill(n.info().fusion), escape::dot(n.info().name), escape::dot(n.name()));
      for (size_t o = 0; o < n.numOutputs(); ++o) producerOf[n.output(o)->name()] = {k, j};
    }
    out += "  }\n";
  }
  // Edges between nodes of one kernel; buffers (in memory) between kernels.
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kernel = p.kernels[k];
    for (size_t j = 0; j < kernel.sources.size(); ++j) {
      for (const ir::Value* v : kernel.sources[j]->inputs()) {
        auto it = producerOf.find(v->name());
        if (it != producerOf.end() && it->second.first == k) {
          out += fmt::format("  {} -> {};\n", kernelDotNodeId(k, it->second.second), kernelDotNodeId(k, j));
        }
      }
    }
  }
  auto readerNode = [&](const Kernel& kernel, const std::string& value) -> size_t {
    for (size_t j = 0; j < kernel.sources.size(); ++j) {
      for (const ir::Value* v : kernel.sources[j]->inputs()) {
        if (v->name() == value) return j;
      }
    }
    return 0;
  };
  std::set<int> drawn;
  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::Param) continue;  // weights: listed in the kernel table, not drawn
    bool used = false;
    for (size_t k = 0; k < p.kernels.size() && !used; ++k) {
      for (int id : p.kernels[k].reads()) used = used || p.buffer(id).root == b.id || id == b.id;
      for (int id : p.kernels[k].writes()) used = used || id == b.id;
    }
    if (!used && b.kind == BufferKind::Temp) continue;  // fused away: lives in registers
    drawn.insert(b.id);
    const char* fill = b.kind == BufferKind::Temp ? "#ffffff" : "#a6dba0";
    out += fmt::format("  b{0} [id=\"b{0}\", shape=cylinder, style=filled, fillcolor=\"{1}\", fontsize=9, label=\"{2} {3}\\n{4}{5}\"];\n", b.id,
                       fill, bufferKindName(b.kind), escape::dot(b.name), escape::dot(b.type.str()), b.isView() ? "\\n(a view)" : "");
  }
  // A view (a split, a reshape) shares its root's memory: drawn from its root, dashed.
  for (const Buffer& b : p.buffers) {
    if (b.isView() && b.kind != BufferKind::Param && drawn.count(b.id) && drawn.count(b.root)) {
      out += fmt::format("  b{} -> b{} [style=dashed, label=\"view\"];\n", b.root, b.id);
    }
  }
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kernel = p.kernels[k];
    if (kernel.sources.empty()) continue;
    for (int id : kernel.reads()) {
      const Buffer& b = p.buffer(id);
      if (b.kind == BufferKind::Param) continue;
      out += fmt::format("  b{} -> {} [lhead=cluster_k{}];\n", id, kernelDotNodeId(k, readerNode(kernel, b.name)), k);
    }
    for (int id : kernel.writes()) {
      const Buffer& b = p.buffer(id);
      auto it = producerOf.find(b.name);
      size_t j = it != producerOf.end() && it->second.first == k ? it->second.second : kernel.sources.size() - 1;
      out += fmt::format("  {} -> b{} [ltail=cluster_k{}];\n", kernelDotNodeId(k, j), id, k);
    }
  }
  out += "}\n";
  return out;
}

}  // namespace policyc::codegen
