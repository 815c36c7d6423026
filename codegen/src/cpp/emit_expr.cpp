// The C++ emitter's expressions: addresses, loads and stores, every elementwise operator as a C++
// expression over the prelude, SSA bodies, loop headers and epilogue lambdas.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "emitter.h"

namespace policyc::codegen::cppemit {

int abiDType(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F64: return 1;
    case DType::I32: return 2;
    case DType::I64: return 3;
    case DType::U8: return 4;
    case DType::I8: return 5;
    case DType::Bool: return 6;
  }
  return 0;
}

// A C++ literal of `v` as dtype `t`.
std::string literal(double v, DType t) {
  const char* ty = ctype(t);
  if (ir::isFloat(t)) {
    if (std::isnan(v)) return fmt::format("pc::nan<{}>()", ty);
    if (std::isinf(v)) return fmt::format("{}pc::inf<{}>()", v < 0 ? "-" : "", ty);
  } else if (t != DType::Bool && (std::isnan(v) || std::isinf(v))) {
    // An unbounded integer bound (Clip's default -inf/inf) is the type's own limit; NaN is 0.
    if (std::isnan(v)) return fmt::format("{}(0)", ty);
    return fmt::format("std::numeric_limits<{}>::{}()", ty, v < 0 ? "lowest" : "max");
  }
  switch (t) {
    case DType::F32:
    case DType::F64: {
      std::string s = t == DType::F32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return t == DType::F32 ? s + "f" : s;
    }
    case DType::Bool: return v != 0 ? "true" : "false";
    case DType::I64: return fmt::format("INT64_C({})", static_cast<int64_t>(v));
    default: return fmt::format("{}({})", ty, static_cast<int64_t>(v));
  }
}

std::string sourceStr(const ir::Node* n) {
  std::string s = fmt::format("%{} ({})", cComment(ir::formatName(n->name())), n->info().name);
  std::vector<std::string> origins;
  for (const std::string& origin : n->provenance()) origins.push_back(cComment(origin));
  if (!origins.empty()) s += fmt::format(" from \"{}\"", fmt::join(origins, "\", \""));
  return s;
}

std::string Emitter::address(int id, const IndexMap& index, const std::vector<std::string>& vars) const {
  const Buffer& b = p_.buffer(id);
  Affine a;
  a.constant = b.offset;
  for (size_t d = 0; d < index.size(); ++d) {
    const IndexExpr& e = index[d];
    if (e.axis < 0) {
      a.constant += e.offset * b.strides[d];
    } else {
      a.add(vars.at(static_cast<size_t>(e.axis)), e.scale * b.strides[d]);
      a.constant += e.offset * b.strides[d];
    }
  }
  return a.str();
}

std::string Emitter::addressOf(int id, const std::vector<std::string>& perDim) const {
  const Buffer& b = p_.buffer(id);
  std::string s = b.offset ? std::to_string(b.offset) : "";
  for (size_t d = 0; d < perDim.size(); ++d) {
    if (perDim[d] == "0" || b.strides[d] == 0) continue;
    if (!s.empty()) s += " + ";
    s += b.strides[d] == 1 ? perDim[d] : fmt::format("({})*{}", perDim[d], b.strides[d]);
  }
  return s.empty() ? "0" : s;
}

std::string Emitter::ref(int id, const std::string& addr) const {
  return fmt::format("{}[{}]", ptrName(p_.buffer(id).root), addr);
}

std::string Emitter::loadExpr(int id, const std::string& addr) const {
  std::string r = ref(id, addr);
  return p_.buffer(id).type.dtype == DType::Bool ? fmt::format("({} != 0)", r) : r;
}

std::string Emitter::indented(const std::string& code, const std::string& indent) {
  std::string s;
  for (size_t p0 = 0; p0 < code.size();) {
    size_t p1 = code.find('\n', p0);
    if (p1 == std::string::npos) p1 = code.size() - 1;
    s += indent + code.substr(p0, p1 - p0 + 1);
    p0 = p1 + 1;
  }
  return s;
}

std::string Emitter::convertExpr(const std::string& expr, DType from, DType to) {
  return from == to ? expr : fmt::format("pc::cast<{}, {}>({})", ctype(to), ctype(from), expr);
}

std::string Emitter::applyExpr(const Instr& in, const std::vector<std::string>& a, const std::vector<DType>& at) const {
  const ir::Node& n = *in.node;
  const char* T = ctype(in.dtype);
  auto f = [&](const char* attr) { return literal(n.attrFloat(attr), in.dtype); };
  // Arithmetic in the result type (as the interpreter rounds each op's result to it); integers
  // saturate (pc::add, ...), floats are plain C++ so that the compiler vectorises them.
  auto arg = [&](size_t i) { return convertExpr(a[i], at[i], in.dtype); };
  const bool fl = ir::isFloat(in.dtype);
  switch (in.op) {
    case Op::Add: return fl ? fmt::format("{} + {}", arg(0), arg(1)) : fmt::format("pc::add<{}>({}, {})", T, arg(0), arg(1));
    case Op::Sub: return fl ? fmt::format("{} - {}", arg(0), arg(1)) : fmt::format("pc::sub<{}>({}, {})", T, arg(0), arg(1));
    case Op::Mul: return fl ? fmt::format("{} * {}", arg(0), arg(1)) : fmt::format("pc::mul<{}>({}, {})", T, arg(0), arg(1));
    case Op::Div: return fl ? fmt::format("{} / {}", arg(0), arg(1)) : fmt::format("pc::div<{}>({}, {}, status)", T, arg(0), arg(1));
    case Op::Pow: return fmt::format("pc::pow<{}>({}, {})", T, arg(0), arg(1));
    case Op::Min: return fmt::format("pc::minNaN<{}>({}, {})", T, arg(0), arg(1));
    case Op::Max: return fmt::format("pc::maxNaN<{}>({}, {})", T, arg(0), arg(1));
    case Op::Equal: return fmt::format("{} == {}", a[0], a[1]);
    case Op::Less: return fmt::format("{} < {}", a[0], a[1]);
    case Op::Greater: return fmt::format("{} > {}", a[0], a[1]);
    case Op::LessOrEqual: return fmt::format("{} <= {}", a[0], a[1]);
    case Op::GreaterOrEqual: return fmt::format("{} >= {}", a[0], a[1]);
    case Op::And: return fmt::format("{} && {}", a[0], a[1]);
    case Op::Or: return fmt::format("{} || {}", a[0], a[1]);
    case Op::Xor: return fmt::format("{} != {}", a[0], a[1]);
    case Op::Mod: return fmt::format("pc::mod<{}>({}, {}, {}, status)", T, arg(0), arg(1), n.attrInt("fmod") != 0);
    case Op::Where: return fmt::format("{} ? {} : {}", a[0], arg(1), arg(2));
    case Op::Expand: return a[0];  // the broadcast is in the load's index
    case Op::Neg: return fl ? fmt::format("-{}", arg(0)) : fmt::format("pc::neg<{}>({})", T, arg(0));
    case Op::Abs: return in.dtype == DType::Bool || in.dtype == DType::U8 ? a[0] : fmt::format("pc::abs<{}>({})", T, arg(0));
    case Op::Sqrt: return fmt::format("pc::sqrt({})", arg(0));
    case Op::Exp: return fmt::format("pc::exp({})", arg(0));
    case Op::Log: return fmt::format("pc::log({})", arg(0));
    case Op::Erf: return fmt::format("pc::erf({})", arg(0));
    case Op::Relu: return fmt::format("pc::relu<{}>({})", T, arg(0));
    case Op::Sigmoid: return fmt::format("pc::sigmoid<{}>({})", T, arg(0));
    case Op::Tanh: return fmt::format("pc::tanh({})", arg(0));
    case Op::Softplus: return fmt::format("pc::softplus<{}>({})", T, arg(0));
    case Op::Not: return fmt::format("!({} != 0)", a[0]);
    case Op::Sin: return fmt::format("pc::sin({})", arg(0));
    case Op::Cos: return fmt::format("pc::cos({})", arg(0));
    case Op::Tan: return fmt::format("pc::tan({})", arg(0));
    case Op::Asin: return fmt::format("pc::asin({})", arg(0));
    case Op::Acos: return fmt::format("pc::acos({})", arg(0));
    case Op::Atan: return fmt::format("pc::atan({})", arg(0));
    case Op::Sinh: return fmt::format("pc::sinh({})", arg(0));
    case Op::Cosh: return fmt::format("pc::cosh({})", arg(0));
    case Op::Asinh: return fmt::format("pc::asinh({})", arg(0));
    case Op::Acosh: return fmt::format("pc::acosh({})", arg(0));
    case Op::Atanh: return fmt::format("pc::atanh({})", arg(0));
    case Op::Floor: return fmt::format("pc::floor({})", arg(0));
    case Op::Ceil: return fmt::format("pc::ceil({})", arg(0));
    case Op::Round: return fmt::format("pc::nearbyint({})", arg(0));
    case Op::LeakyRelu: return fmt::format("pc::leakyRelu<{}>({}, {})", T, arg(0), f("alpha"));
    case Op::Elu: return fmt::format("pc::elu<{}>({}, {})", T, arg(0), f("alpha"));
    case Op::Selu: return fmt::format("pc::selu<{}>({}, {}, {})", T, arg(0), f("alpha"), f("gamma"));
    case Op::HardSigmoid: return fmt::format("pc::hardSigmoid<{}>({}, {}, {})", T, arg(0), f("alpha"), f("beta"));
    case Op::Clip: return fmt::format("pc::clip<{}>({}, {}, {})", T, arg(0), f("min"), f("max"));
    case Op::Silu: return fmt::format("pc::silu<{}>({})", T, arg(0));
    case Op::Gelu: return fmt::format("pc::gelu<{}>({})", T, arg(0));
    case Op::HardSwish: return fmt::format("pc::hardSwish<{}>({})", T, arg(0));
    case Op::Cast: return fmt::format("pc::cast<{}, {}>({})", T, ctype(at[0]), a[0]);
    case Op::BatchNorm:
      return fmt::format("pc::batchNorm<{}>({}, {}, {}, {}, {}, {})", T, arg(0), arg(1), arg(2), arg(3), arg(4),
                         f("epsilon"));
    default: break;
  }
  unsupported("node '{}' ({}): no C++ for this elementwise operator", n.name(), n.info().name);
}

std::string Emitter::emitBody(const std::vector<Instr>& body, const BodyCtx& c, const std::string& indent, const std::vector<size_t>* only) const {
  std::string s;
  const size_t count = only ? only->size() : body.size();
  for (size_t o = 0; o < count; ++o) {
    const size_t i = only ? (*only)[o] : o;
    const Instr& in = body[i];
    std::string v = valueName(c, static_cast<int>(i));
    std::vector<std::string> args;
    std::vector<DType> argTypes;
    for (int a : in.args) {
      args.push_back(valueName(c, a));
      argTypes.push_back(body[static_cast<size_t>(a)].dtype);
    }
    switch (in.opcode) {
      case Opcode::Load:
        s += fmt::format("{}const {} {} = {};\n", indent, ctype(in.dtype), v,
                         loadExpr(in.buffer, address(in.buffer, in.index, c.vars)));
        break;
      case Opcode::Store: {
        const Buffer& b = p_.buffer(in.buffer);
        std::string val = convertExpr(args[0], argTypes[0], b.type.dtype);
        s += fmt::format("{}{} = {};  // -> %{}\n", indent, ref(in.buffer, address(in.buffer, in.index, c.vars)), val,
                         cComment(ir::formatName(b.name)));
        break;
      }
      case Opcode::Const:
        s += fmt::format("{}const {} {} = {};\n", indent, ctype(in.dtype), v, literal(in.constant, in.dtype));
        break;
      case Opcode::Acc:
        s += fmt::format("{}const {} {} = {};\n", indent, ctype(in.dtype), v,
                         faultyAnchor_ ? fmt::format("static_cast<{}>({} + 1)  /* INJECTED FAULT */", ctype(in.dtype), c.acc) : c.acc);
        break;
      case Opcode::Apply: {
        if (in.node) s += fmt::format("{}// {}\n", indent, sourceStr(in.node));
        std::string expr = applyExpr(in, args, argTypes);
        if (faulty(in.node, InjectedFault::Kind::Accuracy)) {
          expr = fmt::format("static_cast<{}>(({}) + 1)  /* INJECTED FAULT */", ctype(in.dtype), expr);
        }
        s += fmt::format("{}const {} {} = {};\n", indent, ctype(in.dtype), v, expr);
        break;
      }
    }
  }
  return s;
}

std::string Emitter::openLoops(const std::vector<ir::Dim>& domain, const std::vector<std::string>& vars, std::string& indent, int split) {
  std::string s;
  for (size_t d = 0; d < domain.size(); ++d) s += loopHeader(vars[d], dimStr(domain[d]), static_cast<int>(d) == split, indent);
  return s;
}

std::string Emitter::loopHeader(const std::string& var, const std::string& extent, bool split, std::string& indent) {
  std::string s = split ? fmt::format("{}for (int64_t {} = lo; {} < hi; ++{}) {{\n", indent, var, var, var)
                        : fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", indent, var, var, extent, var);
  indent += "  ";
  return s;
}

std::string Emitter::unitLoop() {
  return "  for (int64_t u = lo; u < hi; ++u) {\n    const uint64_t uq = static_cast<uint64_t>(u);\n";
}

std::string Emitter::closeLoops(size_t count, std::string& indent) {
  std::string s;
  for (size_t d = 0; d < count; ++d) {
    indent.resize(indent.size() - 2);
    s += indent + "}\n";
  }
  return s;
}

std::vector<std::string> Emitter::axisVars(const char* base, size_t rank) {
  std::vector<std::string> v;
  for (size_t d = 0; d < rank; ++d) v.push_back(fmt::format("{}{}", base, d));
  return v;
}

std::string Emitter::emitEpilogueLambda(const Kernel& k, DType accType) const {
  BodyCtx c{"v", axisVars("i", k.domain.size()), "acc"};
  std::string params;
  for (const std::string& v : c.vars) params += fmt::format("int64_t {}, ", v);
  std::string s = fmt::format("  // epilogue: applied to each result `acc` before it is stored\n  auto epilogue = [&]({}{} acc) {{\n",
                              params, ctype(accType));
  s += emitBody(k.body, c, "    ");
  s += "  };\n";
  return s;
}

std::string Emitter::openTemplate(const Kernel& k, DType accType, const std::vector<std::string>& vars, std::string& indent,
                                  size_t loops) const {
  std::string s = emitEpilogueLambda(k, accType);
  s += anchorComment(k);
  indent = "  ";
  for (size_t d = 0; d < std::min(loops, k.domain.size()); ++d) {
    s += loopHeader(vars[d], dimStr(k.domain[d]), static_cast<int>(d) == split_->axis, indent);
  }
  return s;
}

std::string Emitter::callEpilogue(const std::vector<std::string>& vars, const std::string& acc) const {
  std::string s = "epilogue(";
  for (const std::string& v : vars) s += v + ", ";
  return s + acc + ");";
}

bool Emitter::faulty(const ir::Node* n, InjectedFault::Kind kind) const {
  return n && o_.fault && o_.fault->kind == kind && n->isOp() && o_.fault->op == n->info().name;
}

DType Emitter::accType(const Kernel& k) const {
  for (const Instr& i : k.body) {
    if (i.opcode == Opcode::Acc) return i.dtype;
  }
  return k.anchor->output()->type().dtype;
}

}  // namespace policyc::codegen::cppemit
