// The C++ emitter: one function per kernel of the fused kernel program, the weights blob, the
// descriptor of the C ABI and the model's C header.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "cpp_embedded.h"
#include "packing.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"

namespace policyc::codegen {
namespace {

using ir::DType;
using ir::Op;

constexpr size_t kWeightAlign = 64;

const char* ctype(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32_t";
    case DType::I64: return "int64_t";
    case DType::U8: return "uint8_t";
    case DType::I8: return "int8_t";
    case DType::Bool: return "bool";
  }
  return "float";
}
// Element type of a buffer in memory (bool is one byte, 0 or 1).
const char* storageType(DType t) { return t == DType::Bool ? "uint8_t" : ctype(t); }

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

// Model-provided text reaches the generated C++ only through escape.h: comments, string literals
// and identifiers each have their rule.
using escape::cComment;
using escape::cIdentifier;
using escape::cString;

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A name a generated identifier must not take: C and C++ keywords and alternative tokens, the
// types and macros the model header and wrappers use, the wrappers' own locals, and policyc's
// prefixes (pc_, PC_, policyc, POLICYC) and the compiler's (__, _X).
bool reservedCName(const std::string& n) {
  static const std::set<std::string> words = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char",
      "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit",
      "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
      "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if",
      "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or",
      "or_eq", "private", "protected", "public", "register", "reinterpret_cast", "requires", "restrict", "return",
      "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this",
      "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual",
      "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
      "uint16_t", "uint32_t", "uint64_t", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t", "NULL", "INT64_C", "UINT64_C",
      "errno", "assert", "offsetof", "main", "std", "pc", "batch", "workspace", "ins", "outs", "need", "w"};
  if (words.count(n)) return true;
  const std::string u = upper(n);
  if (u.rfind("PC_", 0) == 0 || u.rfind("POLICYC", 0) == 0) return true;
  return n.rfind("__", 0) == 0 || (n.size() > 1 && n[0] == '_' && std::isupper(static_cast<unsigned char>(n[1])));
}

std::string sourceStr(const ir::Node* n) {
  std::string s = fmt::format("%{} ({})", cComment(ir::formatName(n->name())), n->info().name);
  std::vector<std::string> origins;
  for (const std::string& origin : n->provenance()) origins.push_back(cComment(origin));
  if (!origins.empty()) s += fmt::format(" from \"{}\"", fmt::join(origins, "\", \""));
  return s;
}

std::string dimStr(const ir::Dim& d) { return d.isBatch() ? "batch" : std::to_string(d.value()); }

std::vector<int64_t> spatialList(const ir::Node& n, const char* name, size_t count, int64_t fallback) {
  std::vector<int64_t> v = ir::attrIntsOr(n.attrs(), name, {});
  if (v.empty()) v.assign(count, fallback);
  return v;
}

int64_t normalizeAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// A linear expression over loop variables: sum coef[v] * v + constant.
struct Affine {
  std::vector<std::pair<std::string, int64_t>> terms;
  int64_t constant = 0;
  void add(const std::string& var, int64_t coef) {
    if (coef == 0) return;
    for (auto& [v, c] : terms) {
      if (v == var) {
        c += coef;
        return;
      }
    }
    terms.emplace_back(var, coef);
  }
  std::string str() const {
    std::string s;
    for (const auto& [v, c] : terms) {
      if (c == 0) continue;
      if (!s.empty()) s += " + ";
      s += c == 1 ? v : fmt::format("{}*{}", v, c);
    }
    if (constant != 0 || s.empty()) s += s.empty() ? std::to_string(constant) : fmt::format(" + {}", constant);
    return s;
  }
};

// ---- kernels with packed weights, and their implementations

enum class Impl : int { Gemm4x32, Gemm4x16, Onednn, OnednnPostOps };
constexpr const char* kImplNames[] = {"gemm4x32", "gemm4x16", "onednn", "onednn_postops"};
const char* implName(Impl i) { return kImplNames[static_cast<int>(i)]; }
bool isExtern(Impl i) { return i == Impl::Onednn || i == Impl::OnednnPostOps; }
std::optional<Impl> implByName(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kImplNames[i]) return static_cast<Impl>(i);
  }
  return std::nullopt;
}

// Whether buffer `id` is a dense, non-view f32 array indexed by `index` exactly as the domain
// (element [i0, i1, ...] at the C-order position): what oneDNN reads or writes as a plain tensor.
bool plainOverDomain(const KernelProgram& p, const Kernel& k, int id, const IndexMap& index) {
  const Buffer& b = p.buffer(id);
  if (b.isView() || b.type.dtype != DType::F32 || b.type.rank() != k.domain.size() || index.size() != k.domain.size()) return false;
  int64_t stride = 1;
  for (size_t d = k.domain.size(); d-- > 0;) {
    if (index[d].axis != static_cast<int>(d) || index[d].scale != 1 || index[d].offset != 0) return false;
    if (!(b.type.shape[d] == k.domain[d])) return false;
    if (d > 0 && b.strides[d] != stride) return false;
    if (d > 0) stride *= k.domain[d].value();
  }
  return true;
}

// oneDNN runs linear on a row-major [batch, K] operand and conv on an NCHW one whose channel,
// row and column strides are dense (any batch stride, any offset).
bool onednnEligible(const KernelProgram& p, const Kernel& k) {
  if (!packable(p, k)) return false;
  // An epilogue that can fail on its data (an integer division) reports through the run's status,
  // which oneDNN's extern call does not carry.
  if (k.canFail()) return false;
  const Buffer& x = p.buffer(k.anchorInputs[0]);
  if (k.domain.empty() || !k.domain[0].isBatch()) return false;
  for (const Instr& in : k.body) {
    if (in.opcode == Opcode::Acc && in.dtype != DType::F32) return false;
  }
  // Linear rows must be dense too: oneDNN 2.6 runs an inner product on strided rows (a split
  // view) with its reference implementation, hundreds of times slower.
  if (k.kind == KernelKind::Linear) return x.type.rank() == 2 && x.type.shape[0].isBatch() && x.strides[1] == 1 && x.strides[0] == packedK(p, k);
  int64_t h = x.type.shape[2].value(), w = x.type.shape[3].value();
  return x.type.shape[0].isBatch() && x.strides[3] == 1 && x.strides[2] == w && x.strides[1] == h * w;
}

// The epilogue as oneDNN post-ops: eltwise ops and x*a+b on the running value, at most one
// residual add (a sum post-op: the residual is copied into the destination first), then one
// plain store.
struct PostOp {
  std::string alg;  // dnnl::algorithm enumerator; empty: sum
  double alpha = 0, beta = 0;
  const ir::Node* node = nullptr;
};
struct PostOpPlan {
  std::vector<PostOp> ops;
  int store = -1;      // the buffer the result goes to
  int residual = -1;   // the buffer a sum post-op adds (-1: none)
};

std::optional<PostOpPlan> postOpPlan(const KernelProgram& p, const Kernel& k) {
  const std::vector<Instr>& b = k.body;
  if (b.empty() || b[0].opcode != Opcode::Acc || b[0].dtype != DType::F32) return std::nullopt;
  PostOpPlan plan;
  int cur = 0;
  auto isConst = [&](int i) { return b[static_cast<size_t>(i)].opcode == Opcode::Const; };
  for (size_t i = 1; i < b.size(); ++i) {
    const Instr& in = b[i];
    if (in.opcode == Opcode::Const) continue;
    if (in.opcode == Opcode::Load) {
      if (!plainOverDomain(p, k, in.buffer, in.index)) return std::nullopt;
      continue;
    }
    if (in.opcode == Opcode::Store) {
      if (i + 1 != b.size() || in.args[0] != cur || !plainOverDomain(p, k, in.buffer, in.index)) return std::nullopt;
      plan.store = in.buffer;
      return plan;
    }
    if (in.opcode != Opcode::Apply || in.dtype != DType::F32) return std::nullopt;
    const ir::Node& n = *in.node;
    PostOp op{"", 0, 0, in.node};
    if (in.args.size() == 1) {
      if (in.args[0] != cur) return std::nullopt;
      switch (in.op) {
        case Op::Relu: op.alg = "eltwise_relu"; break;
        case Op::LeakyRelu: op.alg = "eltwise_relu"; op.alpha = n.attrFloat("alpha"); break;
        case Op::Tanh: op.alg = "eltwise_tanh"; break;
        case Op::Sigmoid: op.alg = "eltwise_logistic"; break;
        case Op::Elu: op.alg = "eltwise_elu"; op.alpha = n.attrFloat("alpha"); break;
        case Op::Exp: op.alg = "eltwise_exp"; break;
        case Op::Abs: op.alg = "eltwise_abs"; break;
        case Op::Sqrt: op.alg = "eltwise_sqrt"; break;
        case Op::Log: op.alg = "eltwise_log"; break;
        case Op::Gelu: op.alg = "eltwise_gelu_erf"; break;
        case Op::Silu: op.alg = "eltwise_swish"; op.alpha = 1; break;
        case Op::Softplus: op.alg = "eltwise_soft_relu"; break;
        case Op::HardSwish: op.alg = "eltwise_hardswish"; break;
        default: return std::nullopt;
      }
    } else if (in.args.size() == 2 && (in.args[0] == cur || in.args[1] == cur) && in.args[0] != in.args[1]) {
      const int other = in.args[0] == cur ? in.args[1] : in.args[0];
      const bool first = in.args[0] == cur;
      const Instr& o = b[static_cast<size_t>(other)];
      if (isConst(other) && o.dtype == DType::F32) {
        op.alg = "eltwise_linear";
        const double c = o.constant;
        if (in.op == Op::Add) {
          op.alpha = 1, op.beta = c;
        } else if (in.op == Op::Sub) {
          op.alpha = first ? 1 : -1, op.beta = first ? -c : c;
        } else if (in.op == Op::Mul) {
          op.alpha = c;
        } else {
          return std::nullopt;
        }
      } else if (in.op == Op::Add && o.opcode == Opcode::Load && plan.residual < 0) {
        plan.residual = o.buffer;  // op.alg stays empty: a sum
      } else {
        return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
    // Consecutive x*a+b fold into one: oneDNN 2.6's GEMM inner product computes a chain of two
    // eltwise_linear post-ops wrongly (measured: the second one's b is lost).
    if (op.alg == "eltwise_linear" && !plan.ops.empty() && plan.ops.back().alg == "eltwise_linear") {
      PostOp& prev = plan.ops.back();
      prev.beta = op.alpha * prev.beta + op.beta;
      prev.alpha = op.alpha * prev.alpha;
    } else {
      plan.ops.push_back(op);
    }
    cur = static_cast<int>(i);
  }
  return std::nullopt;  // no store
}

// Whether a source node of `k` gets an injected accuracy fault (POLICYC_INJECT_FAULT).
bool hasAccuracyFault(const Kernel& k, const std::optional<InjectedFault>& fault) {
  if (!fault || fault->kind != InjectedFault::Kind::Accuracy) return false;
  for (const ir::Node* n : k.sources) {
    if (n->isOp() && n->info().name == fault->op) return true;
  }
  return false;
}

std::vector<Impl> candidatesOf(const KernelProgram& p, const Kernel& k, bool allowExtern,
                               const std::optional<InjectedFault>& fault = std::nullopt) {
  if (!packable(p, k)) return {};
  std::vector<Impl> v = {Impl::Gemm4x32, Impl::Gemm4x16};
  if (allowExtern && onednnEligible(p, k)) {
    v.push_back(Impl::Onednn);
    // An injected fault lives in the generated epilogue: keep the epilogue generated.
    if (postOpPlan(p, k) && !hasAccuracyFault(k, fault)) v.push_back(Impl::OnednnPostOps);
  }
  return v;
}

// The heuristic of --mode default for a kernel at batch sizes around `batch` (measured on the
// reference policies, docs/performance.md): oneDNN's convolution for convs (its direct kernels
// beat the generated implicit GEMM at every batch size, the layout copies included), with the
// epilogue as post-ops (and oneDNN's own layouts) when those are cheap ones — relu, x*a+b, a
// residual sum — and as generated code otherwise (oneDNN 2.6's tanh post-op, for one, is several
// times slower than its logistic); the generated two-panel microkernel for linear layers, where
// oneDNN's fixed per-call cost is larger than the whole layer at small batches.
Impl heuristicImpl(const KernelProgram& p, const Kernel& k, int64_t batch, bool allowExtern,
                   const std::optional<InjectedFault>& fault) {
  (void)batch;
  std::vector<Impl> c = candidatesOf(p, k, allowExtern, fault);
  auto has = [&](Impl i) { return std::find(c.begin(), c.end(), i) != c.end(); };
  if (k.kind != KernelKind::Conv || !has(Impl::Onednn)) return Impl::Gemm4x32;
  if (has(Impl::OnednnPostOps)) {
    bool cheap = true;
    const std::optional<PostOpPlan> plan = postOpPlan(p, k);
    for (const PostOp& op : plan->ops) cheap = cheap && (op.alg.empty() || op.alg == "eltwise_relu" || op.alg == "eltwise_linear");
    if (cheap) return Impl::OnednnPostOps;
  }
  return Impl::Onednn;
}

class Emitter {
 public:
  Emitter(const KernelProgram& p, const MemoryPlan& plan, const CppOptions& o) : p_(p), plan_(plan), o_(o) {}

  GeneratedCpp run() {
    marchFlag(o_.target);  // validates the name
    GeneratedCpp g;
    g.name = cIdentifier(o_.name.empty() ? p_.name : o_.name, 64);
    if (reservedCName(g.name)) g.name = "m_" + g.name;  // pc_run, policyc_model_descriptor, int_run ... stay distinct
    g.target = o_.target;
    for (size_t i = 0; i < p_.inputs.size(); ++i) inputIndex_[p_.inputs[i]] = static_cast<int>(i);
    for (size_t i = 0; i < p_.outputs.size(); ++i) outputIndex_[p_.outputs[i].second] = static_cast<int>(i);
    for (const Buffer& b : p_.buffers) bufferNames_.push_back(uniqueBufferName(b));
    planImpls();
    layoutWeights();
    nameWrapperParams();

    std::string kernels;
    for (size_t k = 0; k < p_.kernels.size(); ++k) kernels += emitKernel(p_.kernels[k], k);

    std::string& s = g.source;
    s += fmt::format("// Generated by policyc from model '{}' for target {}: one function per kernel of the\n",
                     cComment(p_.name), o_.target);
    s += "// post-fusion kernel program (`policyc dump MODEL --stage post-fusion`); comments name the graph\n";
    s += "// nodes each block implements. Weights enter through .incbin (see pc_weights below).\n";
    s += kPolicycModelHeader;
    s += "\n";
    s += kPolicycPrelude;
    s += "\n";
    if (usesExtern()) {
      s += kPolicycOnednnPrelude;
      s += "\n";
      g.libraries = {"dnnl", "gomp"};
    }
    if (!o_.injectLine.empty()) s += o_.injectLine + "\n";
    s += emitWeightsBlock();
    s += fmt::format("\n// Workspace: {} + {}*batch bytes.\nstatic const int64_t kStaticBytes = {};\nstatic const int64_t kPerBatchBytes = {};\n",
                     workspaceStatic(), workspacePerBatch(), plan_.staticBytes, plan_.perBatchBytes);
    if (usesExtern()) {
      s += fmt::format("// oneDNN kernels' NHWC copies and results, after the buffers of the memory plan.\n"
                       "static const int64_t kExternPerBatchBytes = {};\n"
                       "static inline int64_t pc_extern_offset(int64_t batch) {{ return (kStaticBytes + kPerBatchBytes * batch + 63) / 64 * 64; }}\n",
                       externPerBatch_);
    }
    s += fmt::format("// With threads > 1, a kernel is split only into chunks of at least this much work.\n"
                     "static const double kMinChunkCost = {};\n", literal(o_.minChunkCost, DType::F64));
    s += "\n" + kernels;
    s += emitAbi(g.name);
    g.header = emitHeader(g.name);
    g.weights = std::move(weights_);
    for (const auto& [ki, d] : dispatch_) g.dispatch[p_.kernels[ki].name] = d;
    return g;
  }

 private:
  // ---- names and addresses

  // C names of the typed wrappers' parameters (inputs, then outputs): unique even in upper case
  // (the header's NAME_X_SIZE macros), and never a keyword, a type or macro the header or the
  // wrappers use, or a name of policyc's own (reservedCName).
  void nameWrapperParams() {
    std::set<std::string> used;
    std::vector<std::string> names;
    for (int id : p_.inputs) names.push_back(p_.buffer(id).name);
    for (const auto& [n, id] : p_.outputs) names.push_back(n);
    for (const std::string& n : names) {
      std::string base = cIdentifier(n);
      if (reservedCName(base)) base = "v_" + base;  // a reserved prefix stays reserved with any suffix
      std::string name = base;
      for (int i = 1; used.count(upper(name)); ++i) name = fmt::format("{}_{}", base, i);
      used.insert(upper(name));
      paramNames_.push_back(name);
    }
  }

  std::string uniqueBufferName(const Buffer& b) {
    std::string base = cIdentifier(b.name, 32);
    std::string name = fmt::format("b{}_{}", b.id, base);
    return name;
  }

  const std::string& ptrName(int root) const { return bufferNames_[static_cast<size_t>(root)]; }

  // Declaration of the pointer to a root buffer's memory.
  std::string rootDecl(int root) const {
    const Buffer& b = p_.buffer(root);
    const char* ty = storageType(b.type.dtype);
    const std::string& n = ptrName(root);
    switch (b.kind) {
      case BufferKind::Input:
        return fmt::format("const {}* PC_RESTRICT {} = static_cast<const {}*>(inputs[{}]);", ty, n, ty, inputIndex_.at(root));
      case BufferKind::Output:
        return fmt::format("{}* PC_RESTRICT {} = static_cast<{}*>(outputs[{}]);", ty, n, ty, outputIndex_.at(root));
      case BufferKind::Param:
        return fmt::format("const {}* PC_RESTRICT {} = reinterpret_cast<const {}*>(pc_weights + {});", ty, n, ty,
                           paramOffset_.at(root));
      case BufferKind::Temp: {
        const MemorySlot* slot = plan_.slotOf(root);
        if (!slot) fail("internal: temporary '{}' has no memory slot", b.name);
        std::string off = slot->perBatch ? fmt::format("kStaticBytes + {}*batch", slot->offset) : std::to_string(slot->offset);
        return fmt::format("{}* {} = reinterpret_cast<{}*>(ws + {});", ty, n, ty, off);
      }
    }
    return "";
  }

  // Element offset of `index` in buffer `id` (a view adds its offset and strides to its root's).
  std::string address(int id, const IndexMap& index, const std::vector<std::string>& vars) const {
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
  // Same, for a list of per-dimension index expressions (strings) of buffer `id`.
  std::string addressOf(int id, const std::vector<std::string>& perDim) const {
    const Buffer& b = p_.buffer(id);
    std::string s = b.offset ? std::to_string(b.offset) : "";
    for (size_t d = 0; d < perDim.size(); ++d) {
      if (perDim[d] == "0" || b.strides[d] == 0) continue;
      if (!s.empty()) s += " + ";
      s += b.strides[d] == 1 ? perDim[d] : fmt::format("({})*{}", perDim[d], b.strides[d]);
    }
    return s.empty() ? "0" : s;
  }
  std::string ref(int id, const std::string& addr) const {
    return fmt::format("{}[{}]", ptrName(p_.buffer(id).root), addr);
  }
  std::string loadExpr(int id, const std::string& addr) const {
    std::string r = ref(id, addr);
    return p_.buffer(id).type.dtype == DType::Bool ? fmt::format("({} != 0)", r) : r;
  }

  // ---- weights

  void appendBlob(const void* data, size_t bytes) {
    weights_.resize((weights_.size() + kWeightAlign - 1) / kWeightAlign * kWeightAlign);
    const auto* c = static_cast<const unsigned char*>(data);
    weights_.insert(weights_.end(), c, c + bytes);
  }

  bool packable(const Kernel& k) const { return codegen::packable(p_, k); }
  int64_t packedN(const Kernel& k) const { return codegen::packedN(p_, k); }
  int64_t packedK(const Kernel& k) const { return codegen::packedK(p_, k); }

  void layoutWeights() {
    std::set<int> raw;
    for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
      const Kernel& k = p_.kernels[ki];
      std::vector<int> reads = k.reads();
      for (int id : reads) {
        int root = p_.buffer(id).root;
        if (p_.buffer(root).kind != BufferKind::Param) continue;
        // Weights and biases of packed kernels are read only through their packed copies, except
        // the weight of a oneDNN kernel (reordered into oneDNN's layout when the model loads).
        if (packable(k) && id == k.anchorInputs[1] && needsRawWeight(ki)) {
          raw.insert(root);
          continue;
        }
        if (packable(k) && (id == k.anchorInputs[1] || (k.anchorInputs.size() > 2 && id == k.anchorInputs[2]))) continue;
        raw.insert(root);
      }
    }
    for (int root : raw) {
      const ir::Tensor& t = p_.buffer(root).value->producer()->paramData();
      appendBlob(t.bytes(), t.nbytes());
      paramOffset_[root] = weights_.size() - t.nbytes();
    }
    // Weights [N,K] packed into panels of kPanel columns: panel j holds W[j*16 + c, k] at
    // [k][c], so the microkernel streams one panel contiguously (zero padding past N).
    for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
      const Kernel& k = p_.kernels[ki];
      if (!packable(k)) continue;
      std::vector<float> packed = packWeightPanels(p_, k);
      appendBlob(packed.data(), packed.size() * sizeof(float));
      packedOffset_[ki] = weights_.size() - packed.size() * sizeof(float);
      std::vector<float> bias = packBiasPanels(p_, k);
      appendBlob(bias.data(), bias.size() * sizeof(float));
      packedBiasOffset_[ki] = weights_.size() - bias.size() * sizeof(float);
    }
    weights_.resize((weights_.size() + kWeightAlign - 1) / kWeightAlign * kWeightAlign);
  }

  std::string emitWeightsBlock() const {
    std::string s = "\n// The weights blob (weights.bin, ";
    s += fmt::format("{} bytes): every param the kernels read, 64-byte aligned; linear weights\n", weights_.size());
    s += "// packed into panels of 16 output columns. The build writes the blob next to this file and\n";
    s += "// defines PC_WEIGHTS_FILE to its path.\n";
    if (weights_.empty()) return s + "static const unsigned char* const pc_weights = nullptr;\n";
    s += "#ifndef PC_WEIGHTS_FILE\n#define PC_WEIGHTS_FILE \"weights.bin\"\n#endif\n";
    s += "__asm__(\".section .rodata\\n\"\n        \".balign 64\\n\"\n        \"pc_weights_blob:\\n\"\n"
         "        \".incbin \\\"\" PC_WEIGHTS_FILE \"\\\"\\n\"\n        \".previous\\n\");\n";
    s += "extern \"C\" const unsigned char pc_weights_blob[] __attribute__((visibility(\"hidden\")));\n";
    s += "static const unsigned char* const pc_weights = pc_weights_blob;\n";
    return s;
  }

  // ---- implementations of GEMM/conv kernels

  void planImpls() {
    std::vector<int64_t> batches = o_.tuneBatches;
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    if (batches.empty() || batches.front() < 1) fail("the tuning batch sizes must be positive (got {})", fmt::join(o_.tuneBatches, ","));
    batches_ = batches;
    std::optional<Impl> forced;
    if (!o_.forceImpl.empty()) {
      forced = implByName(o_.forceImpl);
      if (!forced) fail("unknown implementation '{}' (valid: {})", o_.forceImpl, fmt::join(kImplNames, ", "));
    }
    const ImplChoice heuristic = heuristicChoice(p_, batches, o_.externKernels, o_.fault);
    for (size_t ki = 0; ki < p_.kernels.size(); ++ki) {
      const Kernel& k = p_.kernels[ki];
      std::vector<Impl> c = candidatesOf(p_, k, o_.externKernels, o_.fault);
      if (c.empty()) continue;
      if (o_.tuning) {
        impls_[ki] = c;
        continue;
      }
      ImplDispatch d = heuristic.at(k.name);
      if (o_.choice && o_.choice->count(k.name)) d = o_.choice->at(k.name);
      if (forced && std::find(c.begin(), c.end(), *forced) != c.end()) d = {{-1, implName(*forced)}};
      if (d.empty() || d.back().maxBatch != -1) fail("internal: the implementation choice of kernel '{}' has no range for every batch", k.name);
      std::vector<Impl> used;
      for (const ImplRange& r : d) {
        std::optional<Impl> im = implByName(r.impl);
        if (!im || std::find(c.begin(), c.end(), *im) == c.end()) {
          std::vector<std::string> names;
          for (Impl i : c) names.push_back(implName(i));
          fail("kernel '{}' has no implementation '{}' (candidates: {})", k.name, r.impl, fmt::join(names, ", "));
        }
        if (std::find(used.begin(), used.end(), *im) == used.end()) used.push_back(*im);
      }
      impls_[ki] = used;
      dispatch_[ki] = d;
    }
    for (const auto& [ki, v] : impls_) {
      for (Impl im : v) {
        if (!isExtern(im)) continue;
        const Kernel& k = p_.kernels[ki];
        int64_t floats = 0;
        if (k.kind == KernelKind::Conv) {
          // As pc::dnnl_ext::Conv::srcPerRow + dstPerRow: with oneDNN's own layouts, channels
          // rounded up to 16 (nChw16c).
          const ir::Shape& x = p_.buffer(k.anchorInputs[0]).type.shape;
          auto channels = [&](int64_t c) { return im == Impl::OnednnPostOps ? (c + 15) / 16 * 16 : c; };
          floats = channels(x[1].value()) * x[2].value() * x[3].value() +
                   channels(k.domain[1].value()) * k.domain[2].value() * k.domain[3].value();
        } else if (im == Impl::Onednn) {
          floats = k.domain[1].value();
        }
        externPerBatch_ = std::max(externPerBatch_, (floats * 4 + 63) / 64 * 64);
      }
    }
  }

  bool needsRawWeight(size_t ki) const {
    auto it = impls_.find(ki);
    if (it == impls_.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), isExtern);
  }
  bool usesExtern() const {
    for (const auto& [ki, v] : impls_) {
      if (needsRawWeight(ki)) return true;
    }
    return false;
  }
  // The workspace as a + b * batch: the memory plan's, then (rounded to 64 bytes) the extern kernels' scratch.
  int64_t workspaceStatic() const { return usesExtern() ? (plan_.staticBytes + 63) / 64 * 64 : plan_.staticBytes; }
  int64_t workspacePerBatch() const {
    return usesExtern() ? (plan_.perBatchBytes + 63) / 64 * 64 + externPerBatch_ : plan_.perBatchBytes;
  }

  // `code` (whole lines) with `indent` before every line.
  static std::string indented(const std::string& code, const std::string& indent) {
    std::string s;
    for (size_t p0 = 0; p0 < code.size();) {
      size_t p1 = code.find('\n', p0);
      if (p1 == std::string::npos) p1 = code.size() - 1;
      s += indent + code.substr(p0, p1 - p0 + 1);
      p0 = p1 + 1;
    }
    return s;
  }

  std::string objectName(size_t index, Impl im) const { return fmt::format("pc_dnnl_{}_{}", index, implName(im)); }

  // The oneDNN object of kernel `index` (its primitives per batch size and its reordered weight).
  std::string emitOnednnObject(const Kernel& k, size_t index, Impl im) const {
    std::optional<PostOpPlan> plan = im == Impl::OnednnPostOps ? postOpPlan(p_, k) : std::nullopt;
    std::string post;
    if (plan) {
      for (const PostOp& op : plan->ops) {
        if (!post.empty()) post += ", ";
        post += op.alg.empty() ? "{dnnl::algorithm::undef, 0.0f, 0.0f, true}"
                               : fmt::format("{{dnnl::algorithm::{}, {}, {}, false}}", op.alg, literal(op.alpha, DType::F32),
                                             literal(op.beta, DType::F32));
      }
    }
    const std::string weight = fmt::format("reinterpret_cast<const float*>(pc_weights + {})", paramOffset_.at(p_.buffer(k.anchorInputs[1]).root));
    const std::string bias = fmt::format("reinterpret_cast<const float*>(pc_weights + {})", packedBiasOffset_.at(index));
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    if (k.kind == KernelKind::Linear) {
      return fmt::format("static pc::dnnl_ext::Linear {}({{{}, {}, {}, {{{}}}}}, {}, {});\n", objectName(index, im), packedK(k),
                         packedN(k), X.strides[0], post, weight, bias);
    }
    const ir::Node& n = *k.anchor;
    const Buffer& W = p_.buffer(k.anchorInputs[1]);
    std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
    return fmt::format("static pc::dnnl_ext::Conv {}({{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {{{}}}, {}}}, {}, {});\n",
                       objectName(index, im), X.type.shape[1].value(), X.type.shape[2].value(), X.type.shape[3].value(),
                       k.domain[1].value(), W.type.shape[2].value(), W.type.shape[3].value(), k.domain[2].value(),
                       k.domain[3].value(), st[0], st[1], dil[0], dil[1], pads[0], pads[1], pads[2], pads[3], X.strides[0], post,
                       im == Impl::OnednnPostOps ? "true" : "false", weight, bias);
  }

  // The body of an extern kernel: oneDNN computes the anchor (and with post-ops the epilogue);
  // otherwise the generated epilogue runs on oneDNN's result, split between the threads.
  std::string emitOnednnCall(const Kernel& k, size_t index, Impl im) const {
    std::optional<PostOpPlan> plan = im == Impl::OnednnPostOps ? postOpPlan(p_, k) : std::nullopt;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const std::string obj = objectName(index, im);
    const std::string x = fmt::format("{} + {}", ptrName(X.root), X.offset);
    std::string s = anchorComment(k);
    s += "  try {\n";
    auto ptrOf = [&](int id) { return ptrName(p_.buffer(id).root); };
    if (k.kind == KernelKind::Linear) {
      const int64_t N = packedN(k);
      if (plan) {
        if (plan->residual >= 0 && p_.buffer(plan->residual).root != p_.buffer(plan->store).root) {
          s += fmt::format("    // the residual first: oneDNN's sum post-op adds what the destination holds\n"
                           "    std::memcpy({}, {}, sizeof(float) * {} * batch);\n",
                           ptrOf(plan->store), ptrOf(plan->residual), N);
        }
        s += fmt::format("    {}.run({}, {}, batch, threads);\n", obj, x, ptrOf(plan->store));
      } else {
        s += "    float* result = reinterpret_cast<float*>(ws + pc_extern_offset(batch));\n";
        s += fmt::format("    {}.run({}, result, batch, threads);\n", obj, x);
        s += indented(emitEpilogueLambda(k, DType::F32), "  ");  // inside the try block
        s += fmt::format("    pc::parallelFor(threads, batch, {}.0, kMinChunkCost, [&](int64_t lo, int64_t hi) {{\n"
                         "      for (int64_t i0 = lo; i0 < hi; ++i0) {{\n"
                         "        for (int64_t i1 = 0; i1 < {}; ++i1) epilogue(i0, i1, result[i0*{} + i1]);\n"
                         "      }}\n    }});\n",
                         N * static_cast<int64_t>(k.body.size()), N, N);
      }
    } else {
      const int64_t M = k.domain[1].value(), P = k.domain[2].value() * k.domain[3].value(), OW = k.domain[3].value();
      const std::string residual = plan && plan->residual >= 0 ? ptrOf(plan->residual) : "nullptr";
      s += "    float* scratch = reinterpret_cast<float*>(ws + pc_extern_offset(batch));\n";
      if (plan) {
        s += fmt::format("    {}.run({}, {}, {}, batch, threads, scratch);\n", obj, x, residual, ptrOf(plan->store));
      } else {
        s += fmt::format("    const float* result = {}.run({}, nullptr, nullptr, batch, threads, scratch);  // NHWC\n", obj, x);
        s += indented(emitEpilogueLambda(k, DType::F32), "  ");  // inside the try block
        s += fmt::format("    pc::parallelFor(threads, batch * {}, {}.0, kMinChunkCost, [&](int64_t lo, int64_t hi) {{\n"
                         "      for (int64_t u = lo; u < hi; ++u) {{\n"
                         "        const int64_t i0 = u / {}, i1 = u % {};\n"
                         "        const float* a = result + i0*{} + i1;\n"
                         "        for (int64_t pos = 0; pos < {}; ++pos) epilogue(i0, i1, pos / {}, pos % {}, a[pos*{}]);\n"
                         "      }}\n    }});\n",
                         M, P * static_cast<int64_t>(k.body.size()), M, M, P * M, P, OW, OW, M);
      }
    }
    s += fmt::format("  }} catch (const std::exception& e) {{\n"
                     "    pc_extern_failed(\"{}\", e.what());\n    return false;\n  }}\n  return true;\n",
                     fnName(k, im));
    return s;
  }

  // ---- bodies

  struct BodyCtx {
    std::string prefix;                 // value names: v3 (body), p3 (prologue)
    std::vector<std::string> vars;      // loop variable of each domain axis
    std::string acc;                    // the template's result (epilogues)
  };

  std::string valueName(const BodyCtx& c, int i) const { return fmt::format("{}{}", c.prefix, i); }

  // `expr` of type `from` as `to`: pc::cast's saturating conversion (the interpreter's).
  static std::string convertExpr(const std::string& expr, DType from, DType to) {
    return from == to ? expr : fmt::format("pc::cast<{}, {}>({})", ctype(to), ctype(from), expr);
  }

  std::string applyExpr(const Instr& in, const std::vector<std::string>& a, const std::vector<DType>& at) const {
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
      case Op::Where: return fmt::format("{} ? {} : {}", a[0], arg(1), arg(2));
      case Op::Neg: return fl ? fmt::format("-{}", arg(0)) : fmt::format("pc::neg<{}>({})", T, arg(0));
      case Op::Abs: return in.dtype == DType::Bool || in.dtype == DType::U8 ? a[0] : fmt::format("pc::abs<{}>({})", T, arg(0));
      case Op::Sqrt: return fmt::format("std::sqrt({})", arg(0));
      case Op::Exp: return fmt::format("pc::exp({})", arg(0));
      case Op::Log: return fmt::format("std::log({})", arg(0));
      case Op::Erf: return fmt::format("std::erf({})", arg(0));
      case Op::Relu: return fmt::format("pc::relu<{}>({})", T, arg(0));
      case Op::Sigmoid: return fmt::format("pc::sigmoid<{}>({})", T, arg(0));
      case Op::Tanh: return fmt::format("pc::tanh({})", arg(0));
      case Op::Softplus: return fmt::format("pc::softplus<{}>({})", T, arg(0));
      case Op::Not: return fmt::format("!({} != 0)", a[0]);
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

  // Emits `body` as statements at `indent`; returns the code. Loads and stores go through the
  // buffers' index maps over `c.vars`.
  std::string emitBody(const std::vector<Instr>& body, const BodyCtx& c, const std::string& indent) const {
    std::string s;
    for (size_t i = 0; i < body.size(); ++i) {
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

  // Opens loops over `domain` with variables `vars`; returns the code and the indentation inside.
  // The loop of axis `split` runs over the kernel's chunk [lo, hi) instead of its whole extent.
  static std::string openLoops(const std::vector<ir::Dim>& domain, const std::vector<std::string>& vars,
                               std::string& indent, int split = -1) {
    std::string s;
    for (size_t d = 0; d < domain.size(); ++d) s += loopHeader(vars[d], dimStr(domain[d]), static_cast<int>(d) == split, indent);
    return s;
  }
  static std::string loopHeader(const std::string& var, const std::string& extent, bool split, std::string& indent) {
    std::string s = split ? fmt::format("{}for (int64_t {} = lo; {} < hi; ++{}) {{\n", indent, var, var, var)
                          : fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", indent, var, var, extent, var);
    indent += "  ";
    return s;
  }

  // ---- splitting a kernel between threads

  // The first axis that is not statically 1: the loop a kernel over `dims` splits; -1 for none.
  static int splitAxis(const std::vector<ir::Dim>& dims, const std::vector<bool>& eligible = {}) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (!eligible.empty() && !eligible[d]) continue;
      if (dims[d].isBatch() || dims[d].value() != 1) return static_cast<int>(d);
    }
    return -1;
  }
  // The product of `dims` except axis `skip`, as a C++ expression in `batch`.
  static std::string productExpr(const std::vector<ir::Dim>& dims, int skip = -1) {
    int64_t fixed = 1;
    bool hasBatch = false;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (static_cast<int>(d) == skip) continue;
      if (dims[d].isBatch()) {
        hasBatch = true;
      } else {
        fixed *= dims[d].value();
      }
    }
    return hasBatch ? fmt::format("batch*{}", fixed) : std::to_string(fixed);
  }
  // Records how the kernel being emitted splits: `units` chunks of the iteration space, each
  // costing about `costPerUnit` multiply-adds.
  void setSplit(const std::string& units, const std::string& costPerUnit) const {
    split_ = {units, costPerUnit};
  }
  // A kernel whose loops over `domain` split at axis `axis` (-1: runs whole), each domain point
  // costing `pointCost`.
  void setDomainSplit(const std::vector<ir::Dim>& domain, int axis, int64_t pointCost) const {
    if (axis < 0) {
      setSplit("1", "1.0");
      return;
    }
    setSplit(dimStr(domain[static_cast<size_t>(axis)]),
             fmt::format("{}.0 * ({})", std::max<int64_t>(pointCost, 1), productExpr(domain, axis)));
  }
  static std::string closeLoops(size_t count, std::string& indent) {
    std::string s;
    for (size_t d = 0; d < count; ++d) {
      indent.resize(indent.size() - 2);
      s += indent + "}\n";
    }
    return s;
  }

  static std::vector<std::string> axisVars(const char* base, size_t rank) {
    std::vector<std::string> v;
    for (size_t d = 0; d < rank; ++d) v.push_back(fmt::format("{}{}", base, d));
    return v;
  }

  // The epilogue as a lambda the template calls once per output element.
  std::string emitEpilogueLambda(const Kernel& k, DType accType) const {
    BodyCtx c{"v", axisVars("i", k.domain.size()), "acc"};
    std::string params;
    for (const std::string& v : c.vars) params += fmt::format("int64_t {}, ", v);
    std::string s = fmt::format("  // epilogue: applied to each result `acc` before it is stored\n  auto epilogue = [&]({}{} acc) {{\n",
                                params, ctype(accType));
    s += emitBody(k.body, c, "    ");
    s += "  };\n";
    return s;
  }

  std::string callEpilogue(const std::vector<std::string>& vars, const std::string& acc) const {
    std::string s = "epilogue(";
    for (const std::string& v : vars) s += v + ", ";
    return s + acc + ");";
  }

  // ---- kernels

  // Whether node `n` is one POLICYC_INJECT_FAULT miscompiles in this way.
  bool faulty(const ir::Node* n, InjectedFault::Kind kind) const {
    return n && o_.fault && o_.fault->kind == kind && n->isOp() && o_.fault->op == n->info().name;
  }

  // The kernel's function, or one per implementation for a kernel with several.
  std::string emitKernel(const Kernel& k, size_t index) {
    auto it = impls_.find(index);
    if (it == impls_.end()) return emitKernelFn(k, index, std::nullopt);
    std::string s;
    for (Impl im : it->second) s += emitKernelFn(k, index, im);
    return s;
  }

  // A kernel's function; one of several implementations of it has the implementation's name appended.
  std::string fnName(const Kernel& k, std::optional<Impl> im) const {
    for (const auto& [ki, v] : impls_) {
      if (&p_.kernels[ki] == &k && v.size() > 1 && im) return fmt::format("{}__{}", k.name, implName(*im));
    }
    return k.name;
  }

  std::string emitKernelFn(const Kernel& k, size_t index, std::optional<Impl> impl) {
    split_ = Split{};
    faultyAnchor_ = k.kind != KernelKind::Pointwise && faulty(k.anchor, InjectedFault::Kind::Accuracy);
    const std::string name = fnName(k, impl);
    const bool ext = impl && isExtern(*impl);
    std::string s = fmt::format("// kernel {} ({}) domain {}{}\n", name, kernelKindName(k.kind), cComment(ir::shapeStr(k.domain)),
                                impl ? fmt::format(", implementation {}", implName(*impl)) : "");
    for (const ir::Node* n : k.sources) s += fmt::format("//   {}\n", sourceStr(n));
    std::string objects = ext ? emitOnednnObject(k, index, *impl) : "";
    s += objects;
    if (ext) {
      s += fmt::format("PC_KERNEL bool {}(const void* const* inputs, void* const* outputs, int64_t batch, unsigned char* ws,\n"
                       "    int32_t threads) {{\n",
                       name);
      s += "  (void)inputs; (void)outputs;\n";
    } else {
      // status: where the kernel reports a value outside an operator's domain (pc::report).
      s += fmt::format("PC_KERNEL void {}(const void* const* inputs, void* const* outputs, int64_t batch, unsigned char* ws,\n"
                       "    int* status, int64_t lo, int64_t hi) {{\n",
                       name);
      s += "  (void)inputs; (void)outputs; (void)batch; (void)ws; (void)status; (void)lo; (void)hi;\n";
    }
    for (const ir::Node* n : k.sources) {
      if (faulty(n, InjectedFault::Kind::Compile)) {
        s += fmt::format("  policyc_injected_compile_fault;  // INJECTED FAULT in {}\n", sourceStr(n));
      } else if (faulty(n, InjectedFault::Kind::Crash)) {
        s += fmt::format("  __builtin_trap();  // INJECTED FAULT in {}\n", sourceStr(n));
      }
    }
    std::set<int> roots;
    for (int id : k.reads()) roots.insert(p_.buffer(id).root);
    for (int id : k.writes()) roots.insert(p_.buffer(id).root);
    if (packable(k)) {
      roots.erase(p_.buffer(k.anchorInputs[1]).root);
      if (k.anchorInputs.size() > 2) roots.erase(p_.buffer(k.anchorInputs[2]).root);
    }
    for (int r : roots) {
      if (p_.buffer(r).kind == BufferKind::Param && !paramOffset_.count(r)) continue;
      s += "  " + rootDecl(r) + "\n";
    }
    const int64_t per = impl == Impl::Gemm4x16 ? 1 : 2;
    if (ext) {
      s += emitOnednnCall(k, index, *impl);
    } else {
      switch (k.kind) {
        case KernelKind::Pointwise: s += emitPointwise(k); break;
        case KernelKind::Linear: s += packable(k) ? emitPackedLinear(k, index, per) : emitLinear(k); break;
        case KernelKind::Conv: s += packable(k) ? emitPackedConv(k, index, per) : emitConv(k); break;
        case KernelKind::Pool: s += emitPool(k); break;
        case KernelKind::Reduction: s += emitReduction(k); break;
        case KernelKind::Copy: s += emitCopy(k); break;
      }
    }
    s += "}\n\n";
    splits_[{index, impl ? static_cast<int>(*impl) : -1}] = split_;
    return s;
  }

  std::string emitPointwise(const Kernel& k) const {
    BodyCtx c{"v", axisVars("i", k.domain.size()), ""};
    std::string indent = "  ";
    int axis = splitAxis(k.domain);
    setDomainSplit(k.domain, axis, static_cast<int64_t>(k.body.size()) / 4);
    std::string s = openLoops(k.domain, c.vars, indent, axis);
    s += emitBody(k.body, c, indent);
    s += closeLoops(k.domain.size(), indent);
    return s;
  }

  std::string anchorComment(const Kernel& k) const { return fmt::format("  // {}\n", sourceStr(k.anchor)); }

  DType accType(const Kernel& k) const {
    for (const Instr& i : k.body) {
      if (i.opcode == Opcode::Acc) return i.dtype;
    }
    return k.anchor->output()->type().dtype;
  }

  // linear / gemm / matmul: one dot product per output element (the general form).
  std::string emitLinear(const Kernel& k) const {
    const ir::Node& n = *k.anchor;
    std::vector<std::string> vars = axisVars("i", k.domain.size());
    size_t R = k.domain.size();
    int a = k.anchorInputs[0], b = k.anchorInputs[1];
    const Buffer& A = p_.buffer(a);
    const Buffer& B = p_.buffer(b);
    std::vector<std::string> aIdx(A.type.rank(), "0"), bIdx(B.type.rank(), "0");
    std::string kExtent;
    std::string bias;
    double alpha = 1, beta = 1;
    if (n.isOp(Op::Linear)) {
      for (size_t d = 0; d + 1 < A.type.rank(); ++d) aIdx[d] = vars[d];
      aIdx.back() = "k";
      bIdx[0] = vars[R - 1];
      bIdx[1] = "k";
      kExtent = dimStr(A.type.shape.back());
      if (k.anchorInputs.size() > 2) bias = loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], {vars[R - 1]}));
    } else if (n.isOp(Op::Gemm)) {
      bool ta = n.attrInt("trans_a") != 0, tb = n.attrInt("trans_b") != 0;
      aIdx = ta ? std::vector<std::string>{"k", vars[0]} : std::vector<std::string>{vars[0], "k"};
      bIdx = tb ? std::vector<std::string>{vars[1], "k"} : std::vector<std::string>{"k", vars[1]};
      kExtent = dimStr(A.type.shape[ta ? 0 : 1]);
      alpha = n.attrFloat("alpha");
      beta = n.attrFloat("beta");
      if (k.anchorInputs.size() > 2) {
        const Buffer& C = p_.buffer(k.anchorInputs[2]);
        std::vector<std::string> cIdx(C.type.rank(), "0");
        for (size_t d = 0; d < C.type.rank(); ++d) {
          size_t od = R - C.type.rank() + d;
          bool bc = C.type.shape[d].isStatic() && C.type.shape[d].value() == 1 &&
                    !(k.domain[od].isStatic() && k.domain[od].value() == 1);
          cIdx[d] = bc ? "0" : vars[od];
        }
        bias = loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], cIdx));
      }
    } else {  // matmul with numpy broadcasting; 1-D operands have no row / column dimension
      size_t ra = A.type.rank(), rb = B.type.rank();
      bool hasM = ra >= 2, hasN = rb >= 2;
      size_t nb = R - (hasM ? 1 : 0) - (hasN ? 1 : 0);
      std::string mVar = hasM ? vars[nb] : "0";
      std::string nVar = hasN ? vars[nb + (hasM ? 1 : 0)] : "0";
      auto batchIdx = [&](const Buffer& X, size_t rx, std::vector<std::string>& idx) {
        for (size_t d = 0; d + 2 < rx; ++d) {
          size_t od = nb - (rx - 2) + d;
          bool bc = X.type.shape[d].isStatic() && X.type.shape[d].value() == 1 &&
                    !(k.domain[od].isStatic() && k.domain[od].value() == 1);
          idx[d] = bc ? "0" : vars[od];
        }
      };
      if (ra == 1) {
        aIdx[0] = "k";
      } else {
        batchIdx(A, ra, aIdx);
        aIdx[ra - 2] = mVar;
        aIdx[ra - 1] = "k";
      }
      if (rb == 1) {
        bIdx[0] = "k";
      } else {
        batchIdx(B, rb, bIdx);
        bIdx[rb - 2] = "k";
        bIdx[rb - 1] = nVar;
      }
      kExtent = dimStr(A.type.shape.back());
    }
    DType t = accType(k);
    std::string s = emitEpilogueLambda(k, t);
    s += anchorComment(k);
    std::string indent = "  ";
    int axis = splitAxis(k.domain);
    setDomainSplit(k.domain, axis, (kExtent == "batch" ? 64 : std::stoll(kExtent)));
    s += openLoops(k.domain, vars, indent, axis);
    // f32 accumulates in f32 (the packed microkernels' precision); f64 and integers in double, as
    // the interpreter, integers then stored saturating.
    const DType accT = t == DType::F32 ? DType::F32 : DType::F64;
    const char* accC = ctype(accT);
    s += fmt::format("{}{} acc = 0;\n", indent, accC);
    s += fmt::format("{}for (int64_t k = 0; k < {}; ++k) acc += {}({}) * {}({});\n", indent, kExtent, accC,
                     loadExpr(a, addressOf(a, aIdx)), accC, loadExpr(b, addressOf(b, bIdx)));
    if (alpha != 1) s += fmt::format("{}acc *= {};\n", indent, literal(alpha, accT));
    if (!bias.empty()) {
      s += beta != 1 ? fmt::format("{}acc += {} * {}({});\n", indent, literal(beta, accT), accC, bias)
                     : fmt::format("{}acc += {}({});\n", indent, accC, bias);
    }
    s += fmt::format("{}{}\n", indent, callEpilogue(vars, convertExpr("acc", accT, t)));
    s += closeLoops(k.domain.size(), indent);
    return s;
  }

  std::string packedPointers(size_t index) const {
    return fmt::format("  const float* PC_RESTRICT wp = reinterpret_cast<const float*>(pc_weights + {});\n"
                       "  const float* PC_RESTRICT bp = reinterpret_cast<const float*>(pc_weights + {});\n",
                       packedOffset_.at(index), packedBiasOffset_.at(index));
  }

  // Stores panel j of `out` (16 columns, the last panel clipped to N) through the epilogue.
  // The scalar epilogue over the `width` columns from panel `j` on (the last ones may not exist).
  static std::string panelEpilogue(int64_t N, const std::string& indent, const std::string& call, int64_t width = 16,
                                   const std::string& j = "j") {
    std::string s = fmt::format("{}const int64_t nEnd = {}*16 + {} < {} ? {}*16 + {} : {};\n", indent, j, width, N, j, width, N);
    s += fmt::format("{}for (int64_t n = {}*16; n < nEnd; ++n) {};\n", indent, j, call);
    return s;
  }

  // A linear epilogue that is a chain of tanh/relu on acc stored contiguously along the output's
  // last axis runs on whole 16-column panels at once (pc::tanh16); else nullopt.
  std::optional<std::string> vectorEpilogue(const Kernel& k, const std::vector<std::string>& vars) const {
    const std::vector<Instr>& b = k.body;
    if (faultyAnchor_) return std::nullopt;  // the scalar epilogue carries the injected fault
    if (b.size() < 2 || b[0].opcode != Opcode::Acc || b[0].dtype != DType::F32) return std::nullopt;
    std::string v = "v";
    std::string code;
    for (size_t i = 1; i + 1 < b.size(); ++i) {
      const Instr& in = b[i];
      if (in.opcode != Opcode::Apply || in.args != std::vector<int>{static_cast<int>(i) - 1} || in.dtype != DType::F32 ||
          faulty(in.node, InjectedFault::Kind::Accuracy)) {
        return std::nullopt;
      }
      if (in.op == Op::Tanh) {
        code += fmt::format("// {}\n v = pc::tanh16(v); ", sourceStr(in.node));
      } else if (in.op == Op::Relu) {
        code += fmt::format("// {}\n v = v < 0.0f ? 0.0f : v; ", sourceStr(in.node));
      } else {
        return std::nullopt;
      }
    }
    const Instr& st = b.back();
    const Buffer& out = p_.buffer(st.buffer);
    if (st.opcode != Opcode::Store || st.args[0] != static_cast<int>(b.size()) - 2 || out.type.dtype != DType::F32 ||
        out.strides.back() != 1) {
      return std::nullopt;
    }
    for (size_t d = 0; d < st.index.size(); ++d) {
      if (st.index[d].axis != static_cast<int>(d) || st.index[d].scale != 1 || st.index[d].offset != 0) return std::nullopt;
    }
    std::vector<std::string> at(vars.begin(), vars.end() - 1);
    at.push_back("n0");
    return code + fmt::format("pc::store16({} + {}, v);", ptrName(out.root), address(st.buffer, st.index, at));
  }

  // linear with a constant weight: rows of x times weight panels of 16 columns, 4 rows at a time.
  // `per` panels per unit of work: 2 runs the 4x32 microkernel (two panels), 1 the 4x16 one.
  std::string emitPackedLinear(const Kernel& k, size_t index, int64_t per = 2) const {
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    int64_t N = packedN(k), K = packedK(k);
    int64_t panels = (N + kPanel - 1) / kPanel;
    size_t R = k.domain.size();
    std::vector<std::string> vars = axisVars("i", R);
    std::string rowsExpr = "1";
    for (size_t d = 0; d + 1 < R; ++d) rowsExpr += " * " + dimStr(k.domain[d]);
    // Row r of x (all leading dims flattened) as its index variables.
    std::string decomp;
    std::vector<std::string> idx(X.type.rank(), "0");
    {
      std::string rem = "r";
      for (size_t d = R - 1; d-- > 0;) {
        if (d == 0) {
          decomp += fmt::format("const int64_t {} = {}; ", vars[0], rem);
        } else {
          decomp += fmt::format("const int64_t {} = {} % {}; const int64_t {}q = {} / {}; ", vars[d], rem,
                                dimStr(k.domain[d]), vars[d], rem, dimStr(k.domain[d]));
          rem = vars[d] + "q";
        }
        idx[d] = vars[d];
      }
    }
    std::vector<std::string> callVars(vars.begin(), vars.end() - 1);
    callVars.push_back("n");
    std::optional<std::string> vec = N % kPanel == 0 ? vectorEpilogue(k, vars) : std::nullopt;
    std::string s = vec ? "" : emitEpilogueLambda(k, accType(k));
    s += anchorComment(k);
    s += fmt::format("  // x [rows, {}] times the weight packed as [{} panels][{}][16] (bias folded into bp).\n", K, panels, K);
    s += packedPointers(index);
    s += fmt::format("  auto row = [&](int64_t r) -> const float* {{ {}return {} + {}; }};\n", decomp, ptrName(X.root),
                     addressOf(X.id, idx));
    if (!vec) {
      s += fmt::format("  auto finish = [&](int64_t r, int64_t n, float acc) {{ {}{} }};\n", decomp, callEpilogue(callVars, "acc"));
    } else {
      // Comments inside the one-line lambda would swallow the code after them: keep them above.
      std::string comments, body;
      for (size_t p0 = 0, p1; p0 < vec->size(); p0 = p1 + 1) {
        p1 = vec->find('\n', p0);
        if (p1 == std::string::npos) p1 = vec->size();
        std::string line = vec->substr(p0, p1 - p0);
        if (line.rfind("// ", 0) == 0) {
          comments += "  " + line + "\n";
        } else {
          body += line;
        }
      }
      s += "  // the epilogue on a whole panel (16 columns) at once\n" + comments;
      s += fmt::format("  auto finish16 = [&](int64_t r, int64_t n0, const float* acc) {{ {}pc::f32x16 v = pc::load16(acc);{} }};\n",
                       decomp, body);
    }
    s += fmt::format("  const int64_t rows = {};\n", rowsExpr);
    // Units of work: a quad of rows times a pair of panels (32 columns; the last may be single),
    // pair-major, so the pair (2 x K x 16 floats) stays in cache while every row passes. A unit
    // always runs the same microkernel (4 rows, or the last rows one by one), whichever chunk it
    // falls in.
    const int64_t pairs = (panels + per - 1) / per;
    setSplit(fmt::format("({} + 3) / 4 * {}", rowsExpr, pairs),
             fmt::format("{}.0 * ({} < 4 ? {} : 4)", per * kPanel * K, rowsExpr, rowsExpr));
    s += "  const int64_t quads = (rows + 3) / 4;\n";
    s += "  float out[4][32];\n  float out16[4][16];\n";
    s += "  for (int64_t u = lo; u < hi; ++u) {\n";
    s += fmt::format("    const int64_t j = u / quads * {}, r = u % quads * 4;\n", per);
    s += fmt::format("    const float* PC_RESTRICT w = wp + j*{};\n", K * kPanel);
    s += fmt::format("    const int64_t jEnd = j + {} < {} ? j + {} : {};  // one past the unit's last panel\n", per, panels, per, panels);
    // The epilogue of `width` columns from panel `panel` of row `row`, held at `acc` (column n at
    // acc[n - panel*16]): whole panels at once, or column by column.
    auto finishing = [&](const std::string& indent, const std::string& row, const std::string& panel,
                         const std::string& acc, int64_t width) {
      if (!vec) return panelEpilogue(N, indent, fmt::format("finish({}, n, {}[n - {}*16])", row, acc, panel), width, panel);
      std::string t;
      for (int64_t c = 0; c < width; c += kPanel) {
        t += fmt::format("{}finish16({}, {}*16{}, {}{});\n", indent, row, panel, c ? fmt::format(" + {}", c) : "", acc,
                         c ? fmt::format(" + {}", c) : "");
      }
      return t;
    };
    if (per == 2) {
      s += "    if (r + 4 <= rows && jEnd == j + 2) {\n";
      s += fmt::format("      pc::gemm_4x32({}, row(r), row(r + 1), row(r + 2), row(r + 3), w, bp + j*16, out);\n", K);
      s += "      for (int64_t t = 0; t < 4; ++t) {\n" + finishing("        ", "r + t", "j", "out[t]", 32) + "      }\n";
      s += "      continue;\n    }\n";
    }
    s += "    if (r + 4 <= rows) {\n";
    s += fmt::format("      pc::gemm_4x16({}, row(r), row(r + 1), row(r + 2), row(r + 3), w, bp + j*16, out16);\n", K);
    s += "      for (int64_t t = 0; t < 4; ++t) {\n" + finishing("        ", "r + t", "j", "out16[t]", 16) + "      }\n";
    s += "      continue;\n    }\n";
    s += "    for (int64_t t = r; t < rows; ++t) {\n";
    s += "      for (int64_t jj = j; jj < jEnd; ++jj) {\n";
    s += fmt::format("        pc::gemm_1x16({}, row(t), wp + jj*{}, bp + jj*16, out16[0]);\n", K, K * kPanel);
    s += finishing("        ", "t", "jj", "out16[0]", 16);
    s += "      }\n    }\n  }\n";
    return s;
  }

  // 2-D conv with a constant weight as an implicit GEMM: the patches of four output positions are
  // gathered (im2col, zeros for padding) into a stack buffer and multiplied by the weight panels.
  // `per` panels per microkernel call: 2 runs the 4x32 microkernel (an odd last panel 4x16), 1 only 4x16.
  std::string emitPackedConv(const Kernel& k, size_t index, int64_t per = 2) const {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const Buffer& W = p_.buffer(k.anchorInputs[1]);
    std::vector<int64_t> st = spatialList(n, "strides", 2, 1);
    std::vector<int64_t> dil = spatialList(n, "dilations", 2, 1);
    std::vector<int64_t> pads = spatialList(n, "pads", 4, 0);
    int64_t C = X.type.shape[1].value(), H = X.type.shape[2].value(), Wd = X.type.shape[3].value();
    int64_t KH = W.type.shape[2].value(), KW = W.type.shape[3].value();
    int64_t M = packedN(k), K = packedK(k);
    int64_t OH = k.domain[2].value(), OW = k.domain[3].value();
    int64_t panels = (M + kPanel - 1) / kPanel;
    std::string s = emitEpilogueLambda(k, accType(k));
    s += anchorComment(k);
    s += fmt::format("  // implicit GEMM: [{} positions, K={}] patches times the weight packed as [{} panels][{}][16].\n",
                     OH * OW, K, panels, K);
    s += packedPointers(index);
    s += "  auto gather = [&](int64_t i0, int64_t pos, float* PC_RESTRICT dst) {\n";
    s += fmt::format("    const int64_t oh = pos / {}, ow = pos % {};\n", OW, OW);
    s += fmt::format("    for (int64_t c = 0; c < {}; ++c) {{\n", C);
    s += fmt::format("      for (int64_t kh = 0; kh < {}; ++kh, dst += {}) {{\n", KH, KW);
    s += fmt::format("        const int64_t ih = oh*{} + kh*{} - {};\n", st[0], dil[0], pads[0]);
    s += fmt::format("        if (ih < 0 || ih >= {}) {{ for (int64_t kw = 0; kw < {}; ++kw) dst[kw] = 0.0f; continue; }}\n", H, KW);
    s += fmt::format("        for (int64_t kw = 0; kw < {}; ++kw) {{\n", KW);
    s += fmt::format("          const int64_t iw = ow*{} + kw*{} - {};\n", st[1], dil[1], pads[1]);
    s += fmt::format("          dst[kw] = iw >= 0 && iw < {} ? {} : 0.0f;\n", Wd, loadExpr(X.id, addressOf(X.id, {"i0", "c", "ih", "iw"})));
    s += "        }\n      }\n    }\n  };\n";
    // Windows inside the input read it directly through an offset table; others are gathered.
    std::vector<std::string> offsets;
    const std::vector<int64_t>& xs = X.strides;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) offsets.push_back(std::to_string(c * xs[1] + kh * dil[0] * xs[2] + kw * dil[1] * xs[3]));
    s += fmt::format("  static const int32_t window[{}] = {{{}}};\n", K, fmt::join(offsets, ","));
    s += fmt::format("  auto inside = [&](int64_t pos) {{ const int64_t oh = pos / {}, ow = pos % {}; "
                     "return oh*{} - {} >= 0 && oh*{} - {} + {} < {} && ow*{} - {} >= 0 && ow*{} - {} + {} < {}; }};\n",
                     OW, OW, st[0], pads[0], st[0], pads[0], (KH - 1) * dil[0], H, st[1], pads[1], st[1], pads[1],
                     (KW - 1) * dil[1], Wd);
    s += fmt::format("  auto origin = [&](int64_t i0, int64_t pos) {{ const int64_t ih = pos / {} * {} - {}, iw = pos % {} * {} - {}, c = 0; "
                     "return {} + {}; }};\n",
                     OW, st[0], pads[0], OW, st[1], pads[1], ptrName(X.root), addressOf(X.id, {"i0", "c", "ih", "iw"}));
    s += fmt::format("  alignas(32) float patch[4][{}];\n  float out[4][32];\n", K);
    if (panels % 2 || per == 1) s += "  float out16[4][16];\n";
    // Units of work: a quad of output positions of one image, every panel. The last positions
    // that do not fill a quad run one by one, whichever chunk they fall in.
    int64_t P = OH * OW, quads = (P + 3) / 4;
    setSplit(fmt::format("batch * {}", quads), std::to_string(4 * kPanel * K * panels) + ".0");
    s += "  for (int64_t u = lo; u < hi; ++u) {\n";
    s += fmt::format("    const int64_t i0 = u / {}, pos = u % {} * 4;\n", quads, quads);
    s += fmt::format("    if (pos + 4 <= {}) {{\n", P);
    s += "      const bool direct = inside(pos) && inside(pos + 1) && inside(pos + 2) && inside(pos + 3);\n";
    s += "      if (!direct) for (int64_t t = 0; t < 4; ++t) gather(i0, pos + t, patch[t]);\n";
    // Panels two at a time (pc::gemm_4x32: twice the accumulators), an odd last one alone.
    // Channel outer, position inner in the epilogue: the four positions of a channel are adjacent
    // in memory, while channels are a plane apart (often 4 KB: every channel in one cache set).
    auto block = [&](const std::string& j, int width) {
      const std::string kern = width == 32 ? "4x32" : "4x16";
      const std::string o = width == 32 ? "out" : "out16";
      std::string t = fmt::format("        if (direct) {{\n          pc::gemm_{}_at({}, window, origin(i0, pos), origin(i0, pos + 1), "
                                  "origin(i0, pos + 2), origin(i0, pos + 3), wp + {}*{}, bp + {}*16, {});\n",
                                  kern, K, j, K * kPanel, j, o);
      t += fmt::format("        }} else {{\n          pc::gemm_{}({}, patch[0], patch[1], patch[2], patch[3], wp + {}*{}, bp + {}*16, {});\n        }}\n",
                       kern, K, j, K * kPanel, j, o);
      const std::string value = o + "[t][n - j*16]";
      t += fmt::format("        const int64_t nEnd = {}*16 + {} < {} ? {}*16 + {} : {};\n", j, width, M, j, width, M);
      t += fmt::format("        for (int64_t n = {}*16; n < nEnd; ++n) {{\n          for (int64_t t = 0; t < 4; ++t) "
                       "epilogue(i0, n, (pos + t) / {}, (pos + t) % {}, {});\n        }}\n",
                       j, OW, OW, value);
      return t;
    };
    if (per == 1) {
      s += fmt::format("      for (int64_t j = 0; j < {}; ++j) {{\n", panels);
      s += block("j", 16);
      s += "      }\n";
    }
    if (per == 2 && panels >= 2) {
      s += fmt::format("      for (int64_t j = 0; j + 2 <= {}; j += 2) {{\n", panels);
      s += block("j", 32);
      s += "      }\n";
    }
    if (per == 2 && panels % 2) {
      s += fmt::format("      {{\n        const int64_t j = {};\n", panels - 1);
      s += block("j", 16);
      s += "      }\n";
    }
    s += "      continue;\n    }\n";
    s += fmt::format("    for (int64_t t0 = pos; t0 < {}; ++t0) {{\n", P);
    s += "      const int64_t t = t0 - pos;\n      gather(i0, t0, patch[0]);\n";
    s += fmt::format("      for (int64_t j = 0; j < {}; ++j) {{\n", panels);
    s += fmt::format("        pc::gemm_1x16({}, patch[0], wp + j*{}, bp + j*16, out[0]);\n", K, K * kPanel);
    s += panelEpilogue(M, "        ", fmt::format("epilogue(i0, n, t0 / {}, t0 % {}, out[0][n - j*16])", OW, OW));
    s += "      }\n    }\n  }\n";
    return s;
  }

  std::string emitConv(const Kernel& k) const {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const Buffer& W = p_.buffer(k.anchorInputs[1]);
    size_t nsp = X.type.rank() - 2;
    std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1);
    std::vector<int64_t> dil = spatialList(n, "dilations", nsp, 1);
    std::vector<int64_t> pads = spatialList(n, "pads", nsp * 2, 0);
    int64_t group = n.attrInt("group");
    int64_t C = X.type.shape[1].value();
    int64_t M = k.domain[1].value();
    int64_t gc = C / group, gm = M / group;
    std::vector<std::string> vars = axisVars("i", k.domain.size());
    std::string s = emitEpilogueLambda(k, accType(k));
    s += anchorComment(k);
    std::string indent = "  ";
    int axis = splitAxis(k.domain);
    setDomainSplit(k.domain, axis, packedK(k));
    s += openLoops(k.domain, vars, indent, axis);
    s += fmt::format("{}float acc = 0.0f;\n", indent);
    s += fmt::format("{}const int64_t g = {} / {};\n", indent, vars[1], gm);
    s += fmt::format("{}for (int64_t c = 0; c < {}; ++c) {{\n", indent, gc);
    std::string in2 = indent + "  ";
    std::string cur = in2;
    std::vector<std::string> xIdx = {vars[0], fmt::format("g*{} + c", gc)};
    std::vector<std::string> wIdx = {vars[1], "c"};
    for (size_t d = 0; d < nsp; ++d) {
      int64_t kd = W.type.shape[2 + d].value();
      int64_t inD = X.type.shape[2 + d].value();
      std::string kv = fmt::format("k{}", d), pv = fmt::format("p{}", d);
      s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", cur, kv, kv, kd, kv);
      cur += "  ";
      s += fmt::format("{}const int64_t {} = {}*{} + {}*{} - {};\n", cur, pv, vars[2 + d], strides[d], kv, dil[d], pads[d]);
      s += fmt::format("{}if ({} < 0 || {} >= {}) continue;\n", cur, pv, pv, inD);
      xIdx.push_back(pv);
      wIdx.push_back(kv);
    }
    s += fmt::format("{}acc += {} * {};\n", cur, loadExpr(X.id, addressOf(X.id, xIdx)), loadExpr(W.id, addressOf(W.id, wIdx)));
    for (size_t d = 0; d < nsp; ++d) {
      cur.resize(cur.size() - 2);
      s += cur + "}\n";
    }
    s += indent + "}\n";
    if (k.anchorInputs.size() > 2) {
      s += fmt::format("{}acc += {};\n", indent, loadExpr(k.anchorInputs[2], addressOf(k.anchorInputs[2], {vars[1]})));
    }
    s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
    s += closeLoops(k.domain.size(), indent);
    return s;
  }

  std::string emitPool(const Kernel& k) const {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    size_t nsp = X.type.rank() - 2;
    const std::vector<int64_t>& kernel = n.attrInts("kernel_shape");
    std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1);
    std::vector<int64_t> dil = spatialList(n, "dilations", nsp, 1);
    std::vector<int64_t> pads = spatialList(n, "pads", nsp * 2, 0);
    bool isMax = n.isOp(Op::MaxPool);
    if (isMax && nsp == 2 && X.type.dtype == DType::F32 && X.strides[3] == 1 && X.type.shape[3].value() <= 4096) {
      return emitMaxPoolRows(k);
    }
    std::vector<std::string> vars = axisVars("i", k.domain.size());
    std::string s = emitEpilogueLambda(k, accType(k));
    s += anchorComment(k);
    std::string indent = "  ";
    int64_t window = 1;
    for (int64_t kd : kernel) window *= kd;
    int axis = splitAxis(k.domain);
    setDomainSplit(k.domain, axis, window);
    s += openLoops(k.domain, vars, indent, axis);
    std::vector<std::string> xIdx = {vars[0], vars[1]};
    std::string cur = indent;
    if (isMax) {
      s += fmt::format("{}float acc = -pc::inf<float>();  // padding never wins\n", indent);
      for (size_t d = 0; d < nsp; ++d) {
        std::string kv = fmt::format("k{}", d), pv = fmt::format("p{}", d);
        s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", cur, kv, kv, kernel[d], kv);
        cur += "  ";
        s += fmt::format("{}const int64_t {} = {}*{} + {}*{} - {};\n", cur, pv, vars[2 + d], strides[d], kv, dil[d], pads[d]);
        s += fmt::format("{}if ({} < 0 || {} >= {}) continue;\n", cur, pv, pv, X.type.shape[2 + d].value());
        xIdx.push_back(pv);
      }
      s += fmt::format("{}acc = pc::maxNaN<float>(acc, {});\n", cur, loadExpr(X.id, addressOf(X.id, xIdx)));
    } else {
      // As onnxruntime: the window is clipped to the padded input; count_include_pad divides by
      // the clipped window's size, otherwise by the in-bounds count (none gives 0).
      s += fmt::format("{}float sum = 0.0f;\n{}int64_t count = 0, windowSize = 1;\n", indent, indent);
      for (size_t d = 0; d < nsp; ++d) {
        int64_t inD = X.type.shape[2 + d].value();
        s += fmt::format("{}const int64_t b{} = {}*{} - {};\n", indent, d, vars[2 + d], strides[d], pads[d]);
        s += fmt::format("{}const int64_t e{} = b{} + {} < {} ? b{} + {} : {};\n", indent, d, d, kernel[d],
                         inD + pads[nsp + d], d, kernel[d], inD + pads[nsp + d]);
        s += fmt::format("{}windowSize *= e{} - b{};\n", indent, d, d);
      }
      for (size_t d = 0; d < nsp; ++d) {
        std::string pv = fmt::format("p{}", d);
        s += fmt::format("{}for (int64_t {} = b{}; {} < e{}; ++{}) {{\n", cur, pv, d, pv, d, pv);
        cur += "  ";
        s += fmt::format("{}if ({} < 0 || {} >= {}) continue;\n", cur, pv, pv, X.type.shape[2 + d].value());
        xIdx.push_back(pv);
      }
      s += fmt::format("{}sum += {};\n{}++count;\n", cur, loadExpr(X.id, addressOf(X.id, xIdx)), cur);
    }
    for (size_t d = 0; d < nsp; ++d) {
      cur.resize(cur.size() - 2);
      s += cur + "}\n";
    }
    if (!isMax) {
      bool includePad = n.attrInt("count_include_pad") != 0;
      s += fmt::format("{}const float acc = count == 0 ? 0.0f : sum / static_cast<float>({});\n", indent,
                       includePad ? "windowSize" : "count");
    }
    s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
    s += closeLoops(k.domain.size(), indent);
    return s;
  }

  // 2-D max pooling an output row at a time: first the column-wise maximum over the window's
  // input rows, into a row padded with -inf on both sides; then each output the maximum of its
  // window's columns of that. The maximum is `m > v ? m : v` (one maxss, no branch: a data-
  // dependent branch mispredicts on half the elements of real activations) and NaNs are
  // tracked beside it in flags (ONNX: a NaN in the window gives NaN), so both loops vectorise.
  std::string emitMaxPoolRows(const Kernel& k) const {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    const std::vector<int64_t>& kernel = n.attrInts("kernel_shape");
    std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
    const int64_t C = k.domain[1].value(), OH = k.domain[2].value(), OW = k.domain[3].value();
    const int64_t H = X.type.shape[2].value(), W = X.type.shape[3].value();
    const int64_t padL = pads[1], span = std::max(padL + W, (OW - 1) * st[1] + (kernel[1] - 1) * dil[1] + 1);
    std::string s = emitEpilogueLambda(k, accType(k));
    s += anchorComment(k);
    setSplit(fmt::format("batch * {}", C * OH), fmt::format("{}.0", OW * kernel[1] + W * kernel[0]));
    s += "  auto mx = [](float m, float v) { return m > v ? m : v; };\n";
    s += fmt::format("  float col[{}], out[{}];  // input columns {} to {} at col[{}..]\n", span, OW, -padL, span - padL - 1, padL);
    s += fmt::format("  int32_t nanIn[{}];       // whether a NaN was in that column\n", span);
    s += fmt::format("  for (int64_t c = 0; c < {}; ++c) col[c] = -pc::inf<float>(), nanIn[c] = 0;  // padding never wins\n", span);
    s += "  for (int64_t u = lo; u < hi; ++u) {\n";
    s += fmt::format("    const int64_t i0 = u / {}, i1 = u / {} % {}, i2 = u % {};\n", C * OH, OH, C, OH);
    s += fmt::format("    float* PC_RESTRICT cm = col + {};\n    int32_t* PC_RESTRICT cn = nanIn + {};\n", padL, padL);
    s += fmt::format("    for (int64_t iw = 0; iw < {}; ++iw) cm[iw] = -pc::inf<float>(), cn[iw] = 0;\n", W);
    s += fmt::format("    for (int64_t kh = 0; kh < {}; ++kh) {{\n", kernel[0]);
    s += fmt::format("      const int64_t ih = i2*{} + kh*{} - {};\n", st[0], dil[0], pads[0]);
    s += fmt::format("      if (ih < 0 || ih >= {}) continue;\n", H);
    s += fmt::format("      const float* PC_RESTRICT row = {} + {};\n", ptrName(X.root), addressOf(X.id, {"i0", "i1", "ih", "0"}));
    s += fmt::format("      for (int64_t iw = 0; iw < {}; ++iw) cm[iw] = mx(cm[iw], row[iw]), cn[iw] |= row[iw] != row[iw];\n", W);
    s += "    }\n";
    std::string window = fmt::format("col[i3*{}]", st[1]), nans = fmt::format("nanIn[i3*{}]", st[1]);
    for (int64_t kw = 1; kw < kernel[1]; ++kw) {
      window = fmt::format("mx({}, col[i3*{} + {}])", window, st[1], kw * dil[1]);
      nans += fmt::format(" | nanIn[i3*{} + {}]", st[1], kw * dil[1]);
    }
    s += fmt::format("    for (int64_t i3 = 0; i3 < {}; ++i3) out[i3] = ({}) ? pc::nan<float>() : {};\n", OW, nans, window);
    s += fmt::format("    for (int64_t i3 = 0; i3 < {}; ++i3) {}\n", OW, callEpilogue({"i0", "i1", "i2", "i3"}, "out[i3]"));
    s += "  }\n";
    return s;
  }

  // The reduced operand as a function of its own index: a load, or the fused prologue.
  std::string emitOperandLambda(const Kernel& k, const Buffer& X) const {
    std::vector<std::string> xv = axisVars("x", X.type.rank());
    std::string params;
    for (size_t d = 0; d < xv.size(); ++d) params += fmt::format("{}int64_t {}", d ? ", " : "", xv[d]);
    DType t = X.type.dtype;
    std::string s = fmt::format("  // the reduced operand {} at [{}]\n", cComment(X.type.str()), fmt::join(xv, ", "));
    s += fmt::format("  auto operand = [&]({}) -> {} {{\n", params, ctype(t));
    if (!k.prologue.empty()) {
      BodyCtx c{"p", xv, ""};
      s += "    // prologue\n";
      s += emitBody(k.prologue, c, "    ");
      s += fmt::format("    return static_cast<{}>(p{});\n", ctype(t), k.prologueResult);
    } else {
      std::vector<std::string> idx(xv.begin(), xv.end());
      s += fmt::format("    return {};\n", loadExpr(X.id, addressOf(X.id, idx)));
    }
    s += "  };\n";
    return s;
  }

  std::string operandCall(const std::vector<std::string>& idx) const {
    return fmt::format("operand({})", fmt::join(idx, ", "));
  }

  std::string emitReduction(const Kernel& k) const {
    const ir::Node& n = *k.anchor;
    // The operand's type: with a prologue, anchorInputs[0] is never stored but keeps its type.
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    size_t r = X.type.rank();
    std::vector<std::string> vars = axisVars("i", k.domain.size());
    std::string s = emitEpilogueLambda(k, accType(k));
    s += emitOperandLambda(k, X);
    s += anchorComment(k);
    DType outT = accType(k);
    const char* OT = ctype(outT);

    if (n.isOp(Op::Softmax) || n.isOp(Op::LogSoftmax) || n.isOp(Op::LayerNorm)) {
      // Rows along the trailing axes (softmax: one axis), every other axis is a loop.
      size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
      bool ln = n.isOp(Op::LayerNorm);
      std::vector<size_t> reduced;
      for (size_t d = axis; d < (ln ? r : axis + 1); ++d) reduced.push_back(d);
      std::vector<size_t> outer;
      for (size_t d = 0; d < r; ++d) {
        if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) outer.push_back(d);
      }
      std::string indent = "  ";
      std::vector<bool> eligible(r, false);
      for (size_t d : outer) eligible[d] = true;
      int splitAt = splitAxis(k.domain, eligible);
      setDomainSplit(k.domain, splitAt, 4);
      for (size_t d : outer) s += loopHeader(vars[d], dimStr(k.domain[d]), static_cast<int>(d) == splitAt, indent);
      auto innerLoops = [&](const std::string& body) {
        std::string t;
        std::string ind = indent;
        for (size_t d : reduced) {
          t += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", ind, vars[d], vars[d], dimStr(k.domain[d]), vars[d]);
          ind += "  ";
        }
        t += ind + body + "\n";
        for (size_t i = 0; i < reduced.size(); ++i) {
          ind.resize(ind.size() - 2);
          t += ind + "}\n";
        }
        return t;
      };
      std::string x = operandCall(vars);
      if (ln) {
        int64_t cols = 1;
        for (size_t d : reduced) cols *= k.domain[d].value();
        s += fmt::format("{}double mean = 0, var = 0;\n", indent);
        s += innerLoops(fmt::format("mean += {};", x));
        s += fmt::format("{}mean /= {};\n", indent, cols);
        s += innerLoops(fmt::format("{{ const double d = {} - mean; var += d * d; }}", x));
        s += fmt::format("{}var /= {};\n", indent, cols);
        s += fmt::format("{}const double invStd = 1.0 / std::sqrt(var + {});\n", indent, literal(n.attrFloat("epsilon"), DType::F64));
        // scale and bias broadcast against the normalised shape.
        auto paramAt = [&](int id) {
          const Buffer& P = p_.buffer(id);
          std::vector<std::string> idx(P.type.rank(), "0");
          size_t lead = r - P.type.rank();
          for (size_t d = 0; d < P.type.rank(); ++d) {
            bool bc = P.type.shape[d].isStatic() && P.type.shape[d].value() == 1 &&
                      !(k.domain[lead + d].isStatic() && k.domain[lead + d].value() == 1);
            idx[d] = bc ? "0" : vars[lead + d];
          }
          return loadExpr(id, addressOf(id, idx));
        };
        std::string body = fmt::format("{{ double y = ({} - mean) * invStd * {};", x, paramAt(k.anchorInputs[1]));
        if (k.anchorInputs.size() > 2) body += fmt::format(" y += {};", paramAt(k.anchorInputs[2]));
        body += fmt::format(" {} }}", callEpilogue(vars, fmt::format("static_cast<{}>(y)", OT)));
        s += innerLoops(body);
      } else {
        s += fmt::format("{}double maxValue = -pc::inf<double>(), sum = 0;\n", indent);
        s += innerLoops(fmt::format("maxValue = pc::maxNaN<double>(maxValue, {});", x));
        s += innerLoops(fmt::format("sum += std::exp(double({}) - maxValue);", x));
        std::string y = n.isOp(Op::LogSoftmax) ? fmt::format("double({}) - maxValue - std::log(sum)", x)
                                               : fmt::format("std::exp(double({}) - maxValue) / sum", x);
        s += innerLoops(callEpilogue(vars, fmt::format("static_cast<{}>({})", OT, y)));
      }
      for (size_t i = 0; i < outer.size(); ++i) {
        indent.resize(indent.size() - 2);
        s += indent + "}\n";
      }
      return s;
    }

    // reduce_* / argmax / global_avg_pool: which operand axes are reduced, and how the output
    // (the domain) indexes the kept ones.
    const ReducedAxes axesOf = reducedAxes(n, r);
    const std::vector<bool>& reduced = axesOf.reduced;
    const bool keepdims = axesOf.keepdims;
    std::vector<std::string> xv = axisVars("x", r);
    std::vector<std::string> outIdx;  // domain index in terms of x variables
    for (size_t d = 0; d < r; ++d) {
      if (!reduced[d]) outIdx.push_back(xv[d]);
      else if (keepdims) outIdx.push_back("0");
    }
    if (outIdx.size() != k.domain.size()) fail("internal: reduction '{}' domain rank mismatch", n.name());
    std::string indent = "  ";
    std::vector<bool> eligible(r);
    for (size_t d = 0; d < r; ++d) eligible[d] = !reduced[d];
    int axis = splitAxis(X.type.shape, eligible);
    if (axis < 0) {
      setSplit("1", "1.0");
    } else {
      setSplit(dimStr(X.type.shape[static_cast<size_t>(axis)]), fmt::format("1.0 * ({})", productExpr(X.type.shape, axis)));
    }
    for (size_t d = 0; d < r; ++d) {
      if (!reduced[d]) s += loopHeader(xv[d], dimStr(X.type.shape[d]), static_cast<int>(d) == axis, indent);
    }
    int64_t count = 1;
    for (size_t d = 0; d < r; ++d) {
      if (reduced[d]) count *= X.type.shape[d].value();
    }
    std::string x = operandCall(xv);
    bool isArg = n.isOp(Op::ArgMax);
    bool isMax = n.isOp(Op::ReduceMax);
    if (isArg) {
      size_t ax = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
      bool last = n.attrInt("select_last_index") != 0;
      s += fmt::format("{}int64_t best = 0;\n", indent);
      std::vector<std::string> first = xv;
      first[ax] = "0";
      s += fmt::format("{}double bestValue = {};\n", indent, operandCall(first));
      s += fmt::format("{}for (int64_t {} = 1; {} < {}; ++{}) {{\n", indent, xv[ax], xv[ax], X.type.shape[ax].value(), xv[ax]);
      s += fmt::format("{}  const double v = {};\n", indent, x);
      s += fmt::format("{}  // NaN counts as the largest value, as in numpy.\n", indent);
      s += fmt::format("{}  const bool better = bestValue != bestValue ? false : (v != v || v > bestValue);\n", indent);
      if (last) {
        s += fmt::format("{}  const bool tie = v != v ? bestValue != bestValue : v == bestValue;\n", indent);
        s += fmt::format("{}  if (better || tie) {{ best = {}; bestValue = v; }}\n", indent, xv[ax]);
      } else {
        s += fmt::format("{}  if (better) {{ best = {}; bestValue = v; }}\n", indent, xv[ax]);
      }
      s += indent + "}\n";
      s += fmt::format("{}{}\n", indent, callEpilogue(outIdx, fmt::format("static_cast<{}>(best)", OT)));
    } else {
      s += fmt::format("{}double acc = {};\n", indent, isMax ? "-pc::inf<double>()" : "0");
      std::string ind = indent;
      for (size_t d = 0; d < r; ++d) {
        if (!reduced[d]) continue;
        s += fmt::format("{}for (int64_t {} = 0; {} < {}; ++{}) {{\n", ind, xv[d], xv[d], X.type.shape[d].value(), xv[d]);
        ind += "  ";
      }
      s += isMax ? fmt::format("{}acc = pc::maxNaN<double>(acc, {});\n", ind, x) : fmt::format("{}acc += {};\n", ind, x);
      for (size_t d = 0; d < r; ++d) {
        if (!reduced[d]) continue;
        ind.resize(ind.size() - 2);
        s += ind + "}\n";
      }
      if (n.isOp(Op::ReduceMean) || n.isOp(Op::GlobalAvgPool)) {
        s += fmt::format("{}acc /= {};\n", indent, static_cast<double>(count) == 0 ? "0.0" : std::to_string(count));
        if (!ir::isFloat(outT)) s += fmt::format("{}acc = std::trunc(acc);\n", indent);
      }
      s += fmt::format("{}{}\n", indent, callEpilogue(outIdx, fmt::format("pc::cast<{}, double>(acc)", OT)));
    }
    for (size_t d = 0; d < r; ++d) {
      if (reduced[d]) continue;
      indent.resize(indent.size() - 2);
      s += indent + "}\n";
    }
    return s;
  }

  std::string emitCopy(const Kernel& k) const {
    const ir::Node& n = *k.anchor;
    const Buffer& X = p_.buffer(k.anchorInputs[0]);
    std::vector<std::string> vars = axisVars("i", k.domain.size());
    DType t = accType(k);
    std::string s = emitEpilogueLambda(k, t);
    s += anchorComment(k);
    std::string indent = "  ";
    int splitAt = splitAxis(k.domain);
    setDomainSplit(k.domain, splitAt, 1);
    s += openLoops(k.domain, vars, indent, splitAt);
    size_t r = X.type.rank();
    if (n.isOp(Op::Pad)) {
      const std::vector<int64_t>& pads = n.attrInts("pads");
      const std::string& mode = n.attrString("mode");
      std::vector<std::string> idx;
      std::string inBounds;
      for (size_t d = 0; d < r; ++d) {
        std::string pv = fmt::format("p{}", d);
        if (pads[d] == 0 && pads[r + d] == 0) {
          idx.push_back(vars[d]);
          continue;
        }
        int64_t size = X.type.shape[d].value();
        s += fmt::format("{}int64_t {} = {} - {};\n", indent, pv, vars[d], pads[d]);
        if (mode == "constant") {
          inBounds += fmt::format("{}{} >= 0 && {} < {}", inBounds.empty() ? "" : " && ", pv, pv, size);
        } else if (mode == "edge") {
          s += fmt::format("{}{} = {} < 0 ? 0 : ({} >= {} ? {} : {});\n", indent, pv, pv, pv, size, size - 1, pv);
        } else {  // reflect without repeating the edge
          if (size == 1) {
            s += fmt::format("{}{} = 0;\n", indent, pv);
          } else {
            s += fmt::format("{}while ({} < 0 || {} >= {}) {} = {} < 0 ? -{} : {} - {};\n", indent, pv, pv, size, pv, pv, pv,
                             2 * (size - 1), pv);
          }
        }
        idx.push_back(pv);
      }
      std::string load = loadExpr(X.id, addressOf(X.id, idx));
      if (mode == "constant" && !inBounds.empty()) {
        s += fmt::format("{}const {} acc = ({}) ? static_cast<{}>({}) : {};\n", indent, ctype(t), inBounds, ctype(t), load,
                         literal(n.attrFloat("value"), t));
      } else {
        s += fmt::format("{}const {} acc = {};\n", indent, ctype(t), load);
      }
    } else if (n.isOp(Op::Gather)) {
      const Buffer& I = p_.buffer(k.anchorInputs[1]);
      size_t axis = static_cast<size_t>(normalizeAxis(n.attrInt("axis"), r));
      size_t ri = I.type.rank();
      std::vector<std::string> iIdx;
      for (size_t d = 0; d < ri; ++d) iIdx.push_back(vars[axis + d]);
      int64_t size = X.type.shape[axis].value();
      s += fmt::format("{}int64_t at = static_cast<int64_t>({});\n", indent, loadExpr(I.id, addressOf(I.id, iIdx)));
      s += fmt::format("{}if (at < 0) at += {};\n", indent, size);
      // An index outside the axis is an error of the run (as in the interpreter); nothing outside
      // the table is read (an empty table is never read).
      s += fmt::format("{}if (at < 0 || at >= {}) {{ pc::report(status, pc::kIndexError); at = 0; }}\n", indent, size);
      std::vector<std::string> idx;
      for (size_t d = 0; d < axis; ++d) idx.push_back(vars[d]);
      idx.push_back("at");
      for (size_t d = axis + 1; d < r; ++d) idx.push_back(vars[d - 1 + ri]);
      if (size == 0) {
        s += fmt::format("{}const {} acc = {}(0);\n", indent, ctype(t), ctype(t));
      } else {
        s += fmt::format("{}const {} acc = {};\n", indent, ctype(t), convertExpr(loadExpr(X.id, addressOf(X.id, idx)), X.type.dtype, t));
      }
    } else {
      unsupported("node '{}' ({}): no C++ for this copy template", n.name(), n.info().name);
    }
    s += fmt::format("{}{}\n", indent, callEpilogue(vars, "acc"));
    s += closeLoops(k.domain.size(), indent);
    return s;
  }

  // ---- ABI

  std::string tensorDescs(const char* what, const std::vector<int>& ids, const std::vector<std::string>& names) const {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
      const Buffer& b = p_.buffer(ids[i]);
      std::vector<std::string> dims;
      for (const ir::Dim& d : b.type.shape) dims.push_back(d.isBatch() ? "-1" : std::to_string(d.value()));
      if (dims.empty()) dims.push_back("0");  // a zero-length array is not C++
      s += fmt::format("static const int64_t pc_{}_shape_{}[] = {{{}}};\n", what, i, fmt::join(dims, ", "));
    }
    s += fmt::format("static const policyc_tensor_desc pc_{}[] = {{\n", what);
    for (size_t i = 0; i < ids.size(); ++i) {
      const Buffer& b = p_.buffer(ids[i]);
      s += fmt::format("  {{\"{}\", {}, {}, pc_{}_shape_{}}},\n", cString(names[i]), abiDType(b.type.dtype), b.type.rank(),
                       what, i);
    }
    if (ids.empty()) s += "  {nullptr, 0, 0, nullptr},\n";
    s += "};\n";
    return s;
  }

  // policyc_profile_data(): every kernel's name, nodes and cost; with o_.profile also the counters
  // pc_run updates after each kernel (on the calling thread; a kernel split between threads is
  // timed as a whole).
  std::string emitProfile() const {
    std::string s = "// ---- profiling data (policyc_profile_data(), policyc_model.h)\n\n";
    s += "static const policyc_kernel_info pc_kernel_info[] = {\n";
    for (const Kernel& k : p_.kernels) {
      std::vector<std::string> nodes;
      for (const ir::Node* n : k.sources) nodes.push_back(n->name());
      const KernelCost c = kernelCost(p_, k);
      s += fmt::format("  {{\"{}\", \"{}\", \"{}\", {:.17g}, {:.17g}, {:.17g}, {:.17g}}},\n", cString(k.name),
                       cString(fmt::format("{}", fmt::join(nodes, ","))), kernelKindName(k.kind), c.flopsStatic,
                       c.flopsPerRow, c.bytesStatic, c.bytesPerRow);
    }
    if (p_.kernels.empty()) s += "  {\"\", \"\", \"\", 0, 0, 0, 0},\n";
    s += "};\n";
    const size_t n = std::max<size_t>(p_.kernels.size(), 1);
    if (o_.profile) {
      s += fmt::format("static uint64_t pc_profile_ns[{}];\nstatic uint64_t pc_profile_calls[{}];\n", n, n);
      s += fmt::format("static constexpr int64_t kTraceCapacity = {};\n", CppOptions::kTraceCapacity);
      s += "static policyc_trace_event pc_trace[kTraceCapacity];\nstatic int64_t pc_trace_count = 0;\n";
      s += "static void pc_profile_reset() {\n"
           "  std::memset(pc_profile_ns, 0, sizeof pc_profile_ns);\n"
           "  std::memset(pc_profile_calls, 0, sizeof pc_profile_calls);\n"
           "  __atomic_store_n(&pc_trace_count, 0, __ATOMIC_RELAXED);\n}\n";
      s += "static void pc_profile_record(int kernel, int64_t batch, uint64_t t0) {\n"
           "  pc::profileRecord(pc_profile_ns, pc_profile_calls, pc_trace, kTraceCapacity, &pc_trace_count, kernel, batch, t0);\n}\n";
      s += fmt::format("static const policyc_profile pc_profile = {{{}, 1, pc_kernel_info, {}, pc_profile_ns, pc_profile_calls, pc_trace, kTraceCapacity, &pc_trace_count, pc_profile_reset}};\n\n",
                       p_.kernels.size(), paramBytes(p_));
    } else {
      s += fmt::format("static const policyc_profile pc_profile = {{{}, 0, pc_kernel_info, {}, nullptr, nullptr, nullptr, 0, nullptr, nullptr}};\n\n",
                       p_.kernels.size(), paramBytes(p_));
    }
    return s;
  }

  // The statement of pc_run that runs kernel i (with implementation `im`), split between threads.
  std::string kernelCall(size_t i, std::optional<Impl> im) const {
    const Kernel& k = p_.kernels[i];
    const std::string fn = fnName(k, im);
    if (im && isExtern(*im)) return fmt::format("if (!{}(inputs, outputs, batch, ws, threads)) return POLICYC_ERROR_EXTERN;\n", fn);
    const Split& sp = splits_.at({i, im ? static_cast<int>(*im) : -1});
    std::string check = k.canFail() ? " if (pc_status != 0) return pc::statusCode(pc_status);" : "";
    if (sp.units == "1") return fmt::format("{}(inputs, outputs, batch, ws, &pc_status, 0, 1);{}\n", fn, check);
    return fmt::format("pc::runKernel({}, threads, {}, {}, kMinChunkCost, inputs, outputs, batch, ws, &pc_status);{}\n", fn,
                       sp.units, sp.costPerUnit, check);
  }

  // The autotuner's hooks (tuning builds), or the creation of the oneDNN primitives the model's
  // dispatch uses at the tuning batch sizes when the model is loaded.
  std::string emitTuning() const {
    std::string s;
    if (o_.tuning) {
      const size_t n = std::max<size_t>(p_.kernels.size(), 1);
      std::vector<std::string> lists(n, "\"\"");
      std::vector<size_t> counts(n, 0);
      for (const auto& [ki, v] : impls_) {
        std::vector<std::string> names;
        for (Impl im : v) names.push_back(implName(im));
        lists[ki] = fmt::format("\"{}\"", fmt::join(names, ","));
        counts[ki] = v.size();
      }
      s += "// ---- autotuning: every implementation of every GEMM/conv kernel, chosen at run time\n";
      s += fmt::format("static int pc_tune_choice[{}] = {{}};\n", n);
      s += fmt::format("static const int pc_tune_count[{}] = {{{}}};\n", n, fmt::join(counts, ", "));
      s += fmt::format("static const char* const pc_tune_names[{}] = {{{}}};\n", n, fmt::join(lists, ", "));
      s += "#define PC_TUNE_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n";
      s += fmt::format("// The implementations of kernel `kernel`, comma-separated (\"\" for one without).\n"
                       "PC_TUNE_EXPORT const char* policyc_tune_candidates(int kernel) {{\n"
                       "  return kernel >= 0 && kernel < {} ? pc_tune_names[kernel] : nullptr;\n}}\n", p_.kernels.size());
      s += fmt::format("// Runs kernel `kernel` with its implementation `candidate` from now on; -1 when it has none such.\n"
                       "PC_TUNE_EXPORT int policyc_tune_select(int kernel, int candidate) {{\n"
                       "  if (kernel < 0 || kernel >= {} || candidate < 0 || candidate >= pc_tune_count[kernel]) return -1;\n"
                       "  pc_tune_choice[kernel] = candidate;\n  return 0;\n}}\n\n", p_.kernels.size());
      return s;
    }
    std::string prep;
    for (const auto& [ki, d] : dispatch_) {
      for (int64_t b : batches_) {
        for (const ImplRange& r : d) {
          if (r.maxBatch >= 0 && b > r.maxBatch) continue;
          std::optional<Impl> im = implByName(r.impl);
          if (im && isExtern(*im)) prep += fmt::format("    {}.prepare({}, 1);\n", objectName(ki, *im), b);
          break;
        }
      }
    }
    if (prep.empty()) return s;
    s += "// oneDNN JIT-compiles a primitive when it is created (tens of ms): create the ones the tuning\n"
         "// batch sizes use (1 thread) now, when the model is loaded; others on their first run.\n";
    s += "static const bool pc_extern_prepared = [] {\n  try {\n" + prep +
         "  } catch (const std::exception&) {\n    // The first run at that batch size reports the error.\n  }\n  return true;\n}();\n\n";
    return s;
  }

  std::string emitAbi(const std::string& name) const {
    std::string s = "// ---- the C ABI (runtime/include/policyc/runtime/policyc_model.h)\n\n";
    std::vector<int> ins = p_.inputs, outs;
    std::vector<std::string> inNames, outNames;
    for (int id : ins) inNames.push_back(p_.buffer(id).name);
    for (const auto& [n, id] : p_.outputs) {
      outs.push_back(id);
      outNames.push_back(n);
    }
    s += tensorDescs("inputs", ins, inNames);
    s += tensorDescs("outputs", outs, outNames);
    // A batch over the largest the workspace arithmetic allows is refused: SIZE_MAX bytes, and run
    // returns POLICYC_ERROR_ARGUMENT (codegen::maxBatch).
    s += fmt::format("\nstatic constexpr int64_t pc_max_batch = INT64_C({});\n", maxBatch(workspaceStatic(), workspacePerBatch()));
    s += "static size_t pc_workspace_bytes(int64_t batch) {\n";
    s += "  if (batch > pc_max_batch) return SIZE_MAX;\n";
    s += fmt::format("  return static_cast<size_t>({} + {} * (batch < 0 ? 0 : batch));\n}}\n\n", workspaceStatic(), workspacePerBatch());
    s += "// With threads > 1 each large kernel is split into chunks of whole units (see pc::parallelFor);\n"
         "// the kernels still run one after another.\n";
    // Which kernel a run is in: `policyc check --per-node` reads it from a signal handler when the
    // model crashes (one relaxed store per kernel; concurrent runs may overwrite each other's).
    std::vector<std::string> names;
    for (const Kernel& k : p_.kernels) names.push_back(fmt::format("\"{}\"", cString(k.name)));
    if (names.empty()) names.push_back("\"\"");
    s += fmt::format("static const char* const pc_kernel_names[] = {{{}}};\n", fmt::join(names, ", "));
    s += "static int pc_running_kernel = -1;\n\n";
    s += emitProfile();
    s += emitTuning();
    s += "static int pc_run(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace, int32_t threads) {\n";
    s += "  if (batch < 0 || batch > pc_max_batch || threads < 1) return POLICYC_ERROR_ARGUMENT;\n";
    if (o_.profile) s += "  uint64_t pc_profile_t0 = 0;\n";
    s += "  if (batch == 0) return POLICYC_OK;\n";
    // Every tensor with elements needs memory; an empty one (a zero in its shape) may be null.
    auto nullChecks = [&](const char* array, const std::vector<int>& ids) {
      std::string t;
      if (ids.empty()) return t;
      t += fmt::format("  if ({} == nullptr) return POLICYC_ERROR_ARGUMENT;\n", array);
      for (size_t i = 0; i < ids.size(); ++i) {
        bool empty = false;
        for (const ir::Dim& d : p_.buffer(ids[i]).type.shape) empty = empty || (d.isStatic() && d.value() == 0);
        if (!empty) t += fmt::format("  if ({}[{}] == nullptr) return POLICYC_ERROR_ARGUMENT;\n", array, i);
      }
      return t;
    };
    s += nullChecks("inputs", ins);
    s += nullChecks("outputs", outs);
    s += "  if (pc_workspace_bytes(batch) > 0 && workspace == nullptr) return POLICYC_ERROR_ARGUMENT;\n";
    s += "  if (reinterpret_cast<uintptr_t>(workspace) % POLICYC_WORKSPACE_ALIGNMENT != 0) return POLICYC_ERROR_WORKSPACE;\n";
    s += "  unsigned char* ws = static_cast<unsigned char*>(workspace);\n";
    s += "  int pc_status = 0;  // what kernels report of values outside an operator's domain (pc::report)\n";
    s += "  (void)pc_status;\n";
    for (size_t i = 0; i < p_.kernels.size(); ++i) {
      s += fmt::format("  __atomic_store_n(&pc_running_kernel, {}, __ATOMIC_RELAXED);\n", i);
      if (o_.profile) s += "  pc_profile_t0 = pc::nowNs();\n";
      auto it = impls_.find(i);
      if (it == impls_.end()) {
        s += "  " + kernelCall(i, std::nullopt);
      } else if (o_.tuning) {
        s += fmt::format("  switch (pc_tune_choice[{}]) {{\n", i);
        for (size_t c = 0; c < it->second.size(); ++c) {
          s += fmt::format("    {}: {}      break;\n", c + 1 == it->second.size() ? "default" : fmt::format("case {}", c),
                           kernelCall(i, it->second[c]));
        }
        s += "  }\n";
      } else {
        const ImplDispatch& d = dispatch_.at(i);
        for (size_t r = 0; r < d.size(); ++r) {
          std::optional<Impl> im = implByName(d[r].impl);
          if (d.size() == 1) {
            s += "  " + kernelCall(i, im);
          } else {
            s += fmt::format("  {}{{\n    {}  }}\n", r == 0 ? fmt::format("if (batch <= {}) ", d[r].maxBatch)
                                                    : d[r].maxBatch < 0 ? "else " : fmt::format("else if (batch <= {}) ", d[r].maxBatch),
                             kernelCall(i, im));
          }
        }
      }
      if (o_.profile) s += fmt::format("  pc_profile_record({}, batch, pc_profile_t0);\n", i);
    }
    s += "  return POLICYC_OK;\n}\n\n";
    s += fmt::format("static const policyc_model pc_model = {{\n  POLICYC_ABI_VERSION, sizeof(policyc_model), \"{}\", \"{}\",\n",
                     cString(p_.name), cString(o_.target));
    s += fmt::format("  {}, pc_inputs, {}, pc_outputs, pc_workspace_bytes, pc_run, \"{}\"}};\n\n", ins.size(), outs.size(),
                     cString(o_.sourceHash));
    s += "#define PC_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n";
    s += "PC_EXPORT const policyc_model* policyc_model_descriptor(void) { return &pc_model; }\n";
    s += "PC_EXPORT const policyc_profile* policyc_profile_data(void) { return &pc_profile; }\n";
    s += "// Debugging aid, not part of the ABI: the kernel the last run entered (\"\" before any).\n";
    s += "PC_EXPORT const char* policyc_debug_running_kernel(void) {\n"
         "  const int k = __atomic_load_n(&pc_running_kernel, __ATOMIC_RELAXED);\n"
         "  return k < 0 ? \"\" : pc_kernel_names[k];\n}\n";
    s += fmt::format("PC_EXPORT const policyc_model* {}_descriptor(void) {{ return &pc_model; }}\n", name);
    // The typed wrappers.
    std::string params, ptrsIn, ptrsOut;
    for (size_t i = 0; i < ins.size(); ++i) {
      params += fmt::format("const {}* {}, ", storageType(p_.buffer(ins[i]).type.dtype), paramNames_[i]);
      ptrsIn += fmt::format("{}{}", i ? ", " : "", paramNames_[i]);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      params += fmt::format("{}* {}, ", storageType(p_.buffer(outs[i]).type.dtype), paramNames_[ins.size() + i]);
      ptrsOut += fmt::format("{}{}", i ? ", " : "", paramNames_[ins.size() + i]);
    }
    auto arrays = [&]() {
      std::string t;
      t += fmt::format("  const void* const ins[] = {{{}}};\n", ins.empty() ? "nullptr" : ptrsIn);
      t += fmt::format("  void* const outs[] = {{{}}};\n", outs.empty() ? "nullptr" : ptrsOut);
      return t;
    };
    s += fmt::format("PC_EXPORT int {}_run_with_workspace({}int64_t batch, void* workspace) {{\n", name, params);
    s += arrays();
    s += "  return pc_run(ins, outs, batch, workspace, 1);\n}\n";
    s += "// Without a workspace: a per-thread one that grows when a larger batch needs it (allocation only then).\n";
    s += fmt::format("PC_EXPORT int {}_run({}int64_t batch) {{\n", name, params);
    s += "  struct Workspace { void* p = nullptr; size_t bytes = 0; ~Workspace() { std::free(p); } };\n";
    s += "  static thread_local Workspace w;\n";
    s += "  if (batch < 0 || batch > pc_max_batch) return POLICYC_ERROR_ARGUMENT;\n";
    s += "  const size_t need = (pc_workspace_bytes(batch) + 63) / 64 * 64;\n";
    s += "  if (need > w.bytes) {\n    std::free(w.p);\n    w.p = std::aligned_alloc(64, need);\n";
    s += "    w.bytes = w.p ? need : 0;\n    if (!w.p) return POLICYC_ERROR_WORKSPACE;\n  }\n";
    s += arrays();
    s += "  return pc_run(ins, outs, batch, need ? w.p : nullptr, 1);\n}\n";
    return s;
  }

  std::string emitHeader(const std::string& name) const {
    std::string up;
    for (char c : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string s = fmt::format("/* {}.h: the C interface of the policyc-compiled model '{}' (target {}). */\n", name,
                                cComment(p_.name), o_.target);
    s += fmt::format("#ifndef POLICYC_MODEL_{}_H_\n#define POLICYC_MODEL_{}_H_\n\n", up, up);
    s += kPolicycModelHeader;
    s += "\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
    s += fmt::format("#define {}_NUM_INPUTS {}\n#define {}_NUM_OUTPUTS {}\n", up, p_.inputs.size(), up, p_.outputs.size());
    s += fmt::format("/* Workspace of a run: {}_WORKSPACE_STATIC_BYTES + {}_WORKSPACE_BYTES_PER_BATCH * batch. */\n", up, up);
    s += fmt::format("#define {}_WORKSPACE_STATIC_BYTES {}\n#define {}_WORKSPACE_BYTES_PER_BATCH {}\n", up, workspaceStatic(),
                     up, workspacePerBatch());
    auto sizes = [&](int id, const std::string& n, const std::string& cName) {
      const Buffer& b = p_.buffer(id);
      std::string N = cName;
      for (char& c : N) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      int64_t per = 1;
      std::vector<std::string> dims;
      for (const ir::Dim& d : b.type.shape) {
        dims.push_back(d.isBatch() ? "batch" : std::to_string(d.value()));
        if (d.isStatic()) per *= d.value();
      }
      return fmt::format("/* {} {}[{}] */\n#define {}_{}_SIZE {}  /* elements per batch row */\n", cComment(n),
                         ir::dtypeName(b.type.dtype), fmt::join(dims, ","), up, N, per);
    };
    std::string params;
    size_t pi = 0;
    for (int id : p_.inputs) {
      s += sizes(id, p_.buffer(id).name, paramNames_[pi]);
      params += fmt::format("const {}* {}, ", storageType(p_.buffer(id).type.dtype), paramNames_[pi++]);
    }
    for (const auto& [n, id] : p_.outputs) {
      s += sizes(id, n, paramNames_[pi]);
      params += fmt::format("{}* {}, ", storageType(p_.buffer(id).type.dtype), paramNames_[pi++]);
    }
    s += "\n/* The model's descriptor (the same as policyc_model_descriptor()). */\n";
    s += fmt::format("const policyc_model* {}_descriptor(void);\n", name);
    s += "/* Runs the model on C-order arrays; returns POLICYC_OK or an error code. Uses a per-thread\n"
         " * workspace that is allocated on the first call and when a larger batch needs more. */\n";
    s += fmt::format("int {}_run({}int64_t batch);\n", name, params);
    s += "/* Same, with the caller's workspace (POLICYC_WORKSPACE_ALIGNMENT-aligned, workspace_bytes(batch)). */\n";
    s += fmt::format("int {}_run_with_workspace({}int64_t batch, void* workspace);\n", name, params);
    s += "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
    return s;
  }

  // How the kernel being emitted, and each emitted one, splits between threads.
  struct Split {
    std::string units = "1", costPerUnit = "1.0";
  };
  mutable Split split_;
  bool faultyAnchor_ = false;  // the kernel being emitted is a template whose anchor gets the fault
  std::map<std::pair<size_t, int>, Split> splits_;  // by (kernel, implementation or -1)
  std::map<size_t, std::vector<Impl>> impls_;       // the implementations emitted per tunable kernel
  std::map<size_t, ImplDispatch> dispatch_;         // which one runs for which batch sizes (not tuning)
  std::vector<int64_t> batches_;                    // the tuning batch sizes, sorted
  int64_t externPerBatch_ = 0;                      // workspace bytes per batch row of oneDNN kernels

  const KernelProgram& p_;
  const MemoryPlan& plan_;
  const CppOptions& o_;
  std::map<int, int> inputIndex_, outputIndex_;
  std::vector<std::string> bufferNames_;
  std::vector<std::string> paramNames_;
  std::map<int, size_t> paramOffset_;
  std::map<size_t, size_t> packedOffset_, packedBiasOffset_;
  std::vector<unsigned char> weights_;
};

}  // namespace

std::vector<std::string> implCandidates(const KernelProgram& program, const Kernel& kernel, bool allowExtern,
                                        const std::optional<InjectedFault>& fault) {
  std::vector<std::string> names;
  for (Impl i : candidatesOf(program, kernel, allowExtern, fault)) names.push_back(implName(i));
  return names;
}

std::optional<ExternConv> externConv(const KernelProgram& program, const Kernel& k, const std::string& impl) {
  std::optional<Impl> im = implByName(impl);
  if (k.kind != KernelKind::Conv || !im || !isExtern(*im)) return std::nullopt;
  std::vector<Impl> c = candidatesOf(program, k, true);
  if (std::find(c.begin(), c.end(), *im) == c.end()) return std::nullopt;
  const ir::Node& n = *k.anchor;
  const Buffer& X = program.buffer(k.anchorInputs[0]);
  const Buffer& W = program.buffer(k.anchorInputs[1]);
  std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
  ExternConv e;
  e.shape = {X.type.shape[1].value(), X.type.shape[2].value(), X.type.shape[3].value(), k.domain[1].value(),
             W.type.shape[2].value(), W.type.shape[3].value(), k.domain[2].value(), k.domain[3].value(),
             st[0], st[1], dil[0], dil[1], pads[0], pads[1], pads[2], pads[3], X.strides[0]};
  e.anyLayout = *im == Impl::OnednnPostOps;
  auto channels = [&](int64_t ch) { return e.anyLayout ? (ch + 15) / 16 * 16 : ch; };
  const int64_t floats = channels(e.shape[0]) * e.shape[1] * e.shape[2] + channels(e.shape[3]) * e.shape[6] * e.shape[7];
  e.scratchBytesPerRow = (floats * 4 + 63) / 64 * 64;  // as planImpls
  if (*im == Impl::OnednnPostOps) {
    const PostOpPlan plan = *postOpPlan(program, k);
    for (const PostOp& op : plan.ops) {
      if (!e.postOps.empty()) e.postOps += ";";
      e.postOps += op.alg.empty() ? std::string("sum")
                                  : fmt::format("{}:{}:{}", op.alg.substr(std::string("eltwise_").size()), op.alpha, op.beta);
    }
    e.residual = plan.residual;
    e.store = plan.store;
  }
  return e;
}

std::vector<int64_t> batchRangeBounds(const std::vector<int64_t>& batches) {
  std::vector<int64_t> bounds;
  for (size_t i = 0; i + 1 < batches.size(); ++i) {
    bounds.push_back(static_cast<int64_t>(std::floor(std::sqrt(static_cast<double>(batches[i]) * static_cast<double>(batches[i + 1])))));
  }
  bounds.push_back(-1);
  return bounds;
}

ImplChoice heuristicChoice(const KernelProgram& program, const std::vector<int64_t>& batches, bool allowExtern,
                           const std::optional<InjectedFault>& fault) {
  ImplChoice choice;
  std::vector<int64_t> bounds = batchRangeBounds(batches);
  for (const Kernel& k : program.kernels) {
    if (candidatesOf(program, k, allowExtern, fault).empty()) continue;
    ImplDispatch d;
    for (size_t i = 0; i < batches.size(); ++i) {
      std::string impl = implName(heuristicImpl(program, k, batches[i], allowExtern, fault));
      if (!d.empty() && d.back().impl == impl) {
        d.back().maxBatch = bounds[i];
      } else {
        d.push_back({bounds[i], impl});
      }
    }
    choice[k.name] = d;
  }
  return choice;
}

std::vector<std::string> cppTargets() { return {"native", "x86-64-v3", "x86-64-v4", "generic"}; }

std::string marchFlag(const std::string& target) {
  if (target == "native") return "-march=native";
  if (target == "x86-64-v3") return "-march=x86-64-v3";
  if (target == "x86-64-v4") return "-march=x86-64-v4";
  if (target == "generic") return "-march=x86-64";
  fail("unknown target '{}' (valid targets: {})", target, fmt::join(cppTargets(), ", "));
}

GeneratedCpp emitCpp(const KernelProgram& program, const MemoryPlan& plan, const CppOptions& options) {
  return Emitter(program, plan, options).run();
}

InjectedFault parseInjectedFault(const std::string& spec) {
  size_t colon = spec.rfind(':');
  std::string op = colon == std::string::npos ? "" : spec.substr(0, colon);
  std::string kind = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (op.empty() || (kind != "accuracy" && kind != "compile" && kind != "crash")) {
    fail("POLICYC_INJECT_FAULT='{}': expected <op>:accuracy|compile|crash, e.g. relu:accuracy", spec);
  }
  if (!ir::findOp(op)) fail("POLICYC_INJECT_FAULT='{}': '{}' is not an operator of the op table", spec, op);
  InjectedFault f;
  f.op = op;
  f.kind = kind == "accuracy" ? InjectedFault::Kind::Accuracy
           : kind == "compile" ? InjectedFault::Kind::Compile
                               : InjectedFault::Kind::Crash;
  return f;
}

std::optional<InjectedFault> injectedFaultFromEnv() {
  const char* spec = std::getenv("POLICYC_INJECT_FAULT");
  if (!spec || !*spec) return std::nullopt;
  return parseInjectedFault(spec);
}

GeneratedCpp generateCpp(const ir::Graph& graph, const CppOptions& options) { return generateCpp(graph, options, {}); }

PlannedProgram planGraph(const ir::Graph& graph, const CodegenStages& stages) {
  PlannedProgram p{lowerGraph(graph), {}};
  if (stages.lowered) stages.lowered(p.program);
  if (stages.fuse) fuseKernels(p.program);
  p.plan = planMemory(p.program);
  if (stages.planned) stages.planned(p.program, p.plan);
  return p;
}

GeneratedCpp generateCpp(const ir::Graph& graph, const CppOptions& options, const CodegenStages& stages) {
  try {
    PlannedProgram planned = planGraph(graph, stages);
    return emitCpp(planned.program, planned.plan, options);
  } catch (const UnsupportedError& e) {
    unsupported("unsupported in backend cpp: {}", e.what());
  }
}

}  // namespace policyc::codegen
