// Attribute values: typed access and their text form.
#include "policyc/ir/attr.h"

#include <cmath>

#include <fmt/format.h>

#include "policyc/ir/error.h"

namespace policyc::ir {
namespace {

// Shortest text that reads back to the same double, always recognisable as a float.
std::string floatStr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

template <typename T>
const T& get(const AttrMap& attrs, const std::string& name, AttrKind kind) {
  auto it = attrs.find(name);
  if (it == attrs.end()) fail("missing attribute '{}'", name);
  if (!std::holds_alternative<T>(it->second)) {
    fail("attribute '{}' is {}, expected {}", name, attrKindName(attrKindOf(it->second)), attrKindName(kind));
  }
  return std::get<T>(it->second);
}

}  // namespace

const char* attrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::String: return "string";
    case AttrKind::Ints: return "ints";
    case AttrKind::Floats: return "floats";
  }
  return "?";
}

std::string attrValueStr(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return floatStr(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quote(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return fmt::format("[{}]", fmt::join(v, ","));
        } else {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + floatStr(v[i]);
          return out + "]";
        }
      },
      value);
}

int64_t attrInt(const AttrMap& a, const std::string& n) { return get<int64_t>(a, n, AttrKind::Int); }
double attrFloat(const AttrMap& a, const std::string& n) { return get<double>(a, n, AttrKind::Float); }
const std::string& attrString(const AttrMap& a, const std::string& n) {
  return get<std::string>(a, n, AttrKind::String);
}
const std::vector<int64_t>& attrInts(const AttrMap& a, const std::string& n) {
  return get<std::vector<int64_t>>(a, n, AttrKind::Ints);
}
const std::vector<double>& attrFloats(const AttrMap& a, const std::string& n) {
  return get<std::vector<double>>(a, n, AttrKind::Floats);
}
std::vector<int64_t> attrIntsOr(const AttrMap& a, const std::string& n, std::vector<int64_t> fallback) {
  return a.count(n) ? attrInts(a, n) : fallback;
}

std::vector<int64_t> windowAttr(const AttrMap& a, const std::string& n, size_t count, int64_t fallback) {
  std::vector<int64_t> v = attrIntsOr(a, n, {});
  if (v.empty()) v.assign(count, fallback);
  return v;
}

}  // namespace policyc::ir
