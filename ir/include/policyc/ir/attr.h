// Operator attributes: a small typed value per name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace policyc::ir {

enum class AttrKind : uint8_t { Int, Float, String, Ints, Floats };

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

// Sorted by name; printers order attributes as the op table declares them instead.
using AttrMap = std::map<std::string, AttrValue>;

inline AttrKind attrKindOf(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }
const char* attrKindName(AttrKind kind);  // "int", "float", "string", "ints", "floats"
std::string attrValueStr(const AttrValue& value);  // text form, as the .pir printer writes it

}  // namespace policyc::ir

namespace policyc::ir {

// Typed reads of an attribute that the op table guarantees to exist (defaults are filled in
// when a node is built or parsed); a missing or mistyped one throws policyc::Error.
int64_t attrInt(const AttrMap& attrs, const std::string& name);
double attrFloat(const AttrMap& attrs, const std::string& name);
const std::string& attrString(const AttrMap& attrs, const std::string& name);
const std::vector<int64_t>& attrInts(const AttrMap& attrs, const std::string& name);
const std::vector<double>& attrFloats(const AttrMap& attrs, const std::string& name);
// For attributes some ops of a family lack (avg_pool has no dilations): `fallback` when absent.
std::vector<int64_t> attrIntsOr(const AttrMap& attrs, const std::string& name, std::vector<int64_t> fallback);
// A window attribute of conv and the pools (strides, dilations, pads, kernel_shape): its values,
// or `count` copies of `fallback` where it is absent or empty (ONNX's defaults).
std::vector<int64_t> windowAttr(const AttrMap& attrs, const std::string& name, size_t count, int64_t fallback);

}  // namespace policyc::ir
