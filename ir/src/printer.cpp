// The .pir printer: one line per node, weights inline or in a sidecar; the parser reads it back.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"

namespace policyc::ir {
namespace {

constexpr size_t kSidecarAlign = 64;

bool isIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

// A quoted .pir name: escape::printable's rule, which the parser's \xNN escapes read back.
std::string quoteName(std::string_view s) { return "\"" + escape::printable(s) + "\""; }

template <typename F>
std::string floatLiteral(F v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{}", v);  // shortest text that reads back to the same F
}

std::string inlineValues(const Tensor& t) {
  std::string out = "[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) out += ", ";
    switch (t.dtype()) {
      case DType::F32: out += floatLiteral(t.data<float>()[i]); break;
      case DType::F64: out += floatLiteral(t.data<double>()[i]); break;
      default: out += std::to_string(t.getAsInt(i)); break;
    }
  }
  return out + "]";
}

std::string locSuffix(const Node& n, const PrintOptions& options) {
  if (!options.provenance || n.provenance().empty()) return "";
  std::string out = " loc(";
  for (size_t i = 0; i < n.provenance().size(); ++i) out += (i ? ", " : "") + quoteName(n.provenance()[i]);
  return out + ")";
}

std::string value(const Value* v) { return "%" + formatName(v->name()); }

// An output name stands bare in `return (NAME=%v)`, where the lexer reads a leading digit or '.'
// as a number: such names are quoted (after '%', a value name may start with anything).
std::string outputName(std::string_view name) {
  const bool numberLike = !name.empty() && ((name[0] >= '0' && name[0] <= '9') || name[0] == '.');
  return numberLike ? quoteName(name) : formatName(name);
}

}  // namespace

std::string formatName(std::string_view name) {
  bool plain = !name.empty();
  for (char c : name) plain = plain && isIdentChar(c);
  return plain ? std::string(name) : quoteName(name);
}

PrintedGraph printGraph(const Graph& graph, const PrintOptions& options) {
  PrintedGraph out;
  std::string& s = out.text;
  s += fmt::format("graph {}(", formatName(graph.name()));
  bool first = true;
  for (const Value* in : graph.inputs()) {
    s += fmt::format("{}{}: {}", first ? "" : ", ", value(in), in->type().str());
    first = false;
  }
  s += ") {\n";
  for (const auto& node : graph.nodes()) {
    const Node& n = *node;
    switch (n.kind()) {
      case NodeKind::Input: break;
      case NodeKind::Param: {
        const Tensor& t = n.paramData();
        s += fmt::format("  {} = param {}", value(n.output()), n.output()->type().str());
        if (t.numel() <= options.inlineLimit) {
          s += " " + inlineValues(t);
        } else {
          size_t offset = (out.sidecar.size() + kSidecarAlign - 1) / kSidecarAlign * kSidecarAlign;
          out.sidecar.resize(offset + t.nbytes());
          std::memcpy(out.sidecar.data() + offset, t.bytes(), t.nbytes());
          s += fmt::format(" @{}", offset);
        }
        s += locSuffix(n, options);
        // A weight set_weights may replace (compile --updatable-weights); the parser skips comments.
        if (n.isUpdatable()) s += "  # updatable";
        s += "\n";
        break;
      }
      case NodeKind::Op: {
        const OpInfo& info = n.info();
        s += "  ";
        for (size_t i = 0; i < n.numOutputs(); ++i) s += (i ? ", " : "") + value(n.output(i));
        s += fmt::format(" = {}(", info.name);
        for (size_t i = 0; i < n.numInputs(); ++i) s += (i ? ", " : "") + value(n.input(i));
        s += ")";
        // Attributes in declaration order; defaults are left out (the parser fills them in).
        std::string attrs;
        for (const AttrSpec& spec : info.attrs) {
          auto it = n.attrs().find(std::string(spec.name));
          if (it == n.attrs().end() || (spec.defaultValue && *spec.defaultValue == it->second)) continue;
          attrs += fmt::format("{}{}={}", attrs.empty() ? "" : ", ", spec.name, attrValueStr(it->second));
        }
        if (!attrs.empty()) s += " {" + attrs + "}";
        s += " : ";
        for (size_t i = 0; i < n.numOutputs(); ++i) s += (i ? ", " : "") + n.output(i)->type().str();
        s += locSuffix(n, options) + "\n";
        break;
      }
      case NodeKind::Output: {
        s += "  return (";
        for (size_t i = 0; i < n.numInputs(); ++i) {
          s += fmt::format("{}{}={}", i ? ", " : "", outputName(n.outputNames()[i]), value(n.input(i)));
        }
        s += ")\n";
        break;
      }
    }
  }
  s += "}\n";
  return out;
}

void writePir(const Graph& graph, const std::string& path, const PrintOptions& options) {
  PrintedGraph printed = printGraph(graph, options);
  std::string sidecarPath = path + ".bin";
  // Whole files or none (temp file + rename), so a failure never leaves a half-written model.
  auto writeFile = [](const std::string& target, const void* data, size_t size) {
    asError([&] { files::writeAtomic(target, std::string_view(static_cast<const char*>(data), size)); });
  };
  if (!printed.sidecar.empty()) {
    writeFile(sidecarPath, printed.sidecar.data(), printed.sidecar.size());
  } else {
    std::error_code ec;
    std::filesystem::remove(sidecarPath, ec);
  }
  writeFile(path, printed.text.data(), printed.text.size());
}

}  // namespace policyc::ir
