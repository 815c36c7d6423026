// The schedule (schedule.h): implementations, weights layout, workspace and C names of a
// post-fusion kernel program, decided once for both emitters; and the C header they share.
#include "schedule.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "cpp_embedded.h"
#include "packing.h"
#include "policyc/codegen/backend.h"
#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"

namespace policyc::codegen {

using ir::DType;
using ir::Op;

namespace {

constexpr const char* kImplNames[] = {"gemm4x32", "gemm4x16", "onednn", "onednn_postops", "conv_rows", "gemm6x16", "gemm8x32", "dot_rows", "winograd_f23"};
constexpr size_t kWeightAlign = 64;

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
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

// KernelSchedule::directRows: where a kernel's epilogue only stores its f32 result, densely along
// the output's last axis and at the domain's own index (plus constant offsets: a concat fused as
// the store), with the output's leading axes flattened into rows a uniform stride apart: that
// stride; 0 otherwise.
int64_t directRowStride(const KernelProgram& p, const Kernel& k) {
  const std::vector<Instr>& b = k.body;
  const size_t R = k.domain.size();
  if (R < 2 || b.size() != 2 || b[0].opcode != Opcode::Acc || b[0].dtype != DType::F32 || b[1].opcode != Opcode::Store ||
      b[1].args != std::vector<int>{0}) {
    return 0;
  }
  const Buffer& out = p.buffer(b[1].buffer);
  if (out.type.dtype != DType::F32 || b[1].index.size() != R || out.strides.size() != R || out.strides[R - 1] != 1) return 0;
  for (size_t d = 0; d < R; ++d) {
    const IndexExpr& e = b[1].index[d];
    if (e.axis != static_cast<int>(d) || e.scale != 1 || (d > 0 && !k.domain[d].isStatic())) return 0;
  }
  for (size_t d = 0; d + 2 < R; ++d) {
    if (out.strides[d] != out.strides[d + 1] * k.domain[d + 1].value()) return 0;
  }
  return out.strides[R - 2];
}

// A Form::Pool kernel both printers may take 8 output columns at a time (KernelSchedule::
// vectorEpilogue, less the epilogue's part): an f32 2-D average pool, every window inside the
// input, column stride 2 over unit-stride input rows, at least 8 output columns, its thread
// split on another axis.
bool evenColumnPool(const KernelProgram& p, const Kernel& k, const ThreadSplit& split) {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  if (!n.isOp(Op::AvgPool) || X.type.rank() != 4 || X.type.dtype != DType::F32 || X.strides[3] != 1 || !windowInside(p, k)) return false;
  return spatialList(n, "strides", 2, 1)[1] == 2 && k.domain[3].isStatic() && k.domain[3].value() >= 8 && split.axis != 3;
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

// Whether a source node of `k` gets an injected accuracy fault (POLICYC_INJECT_FAULT).
bool hasAccuracyFault(const Kernel& k, const std::optional<InjectedFault>& fault) {
  if (!fault || fault->kind != InjectedFault::Kind::Accuracy) return false;
  for (const ir::Node* n : k.sources) {
    if (n->isOp() && n->info().name == fault->op) return true;
  }
  return false;
}

}  // namespace

const char* implName(Impl i) { return kImplNames[static_cast<int>(i)]; }
bool isExtern(Impl i) { return i == Impl::Onednn || i == Impl::OnednnPostOps; }
bool usesPanels(Impl i) { return i == Impl::Gemm4x32 || i == Impl::Gemm4x16 || i == Impl::Gemm6x16 || i == Impl::Gemm8x32; }
bool readsRawWeight(Impl i) { return !usesPanels(i) && i != Impl::WinogradF23; }
int64_t panelsPerTile(Impl i) { return i == Impl::Gemm4x32 || i == Impl::Gemm8x32 ? 2 : 1; }
int64_t rowsPerTile(Impl i) { return i == Impl::Gemm6x16 ? 6 : i == Impl::Gemm8x32 ? 8 : 4; }
int64_t convTailTile(int64_t P, int64_t R) { return R == 8 && P % R >= 6 ? 8 : R > 4 && P % R >= 4 ? 4 : 0; }
int64_t convTailCovered(int64_t P, int64_t R) { return std::min(convTailTile(P, R), P % R); }
std::optional<Impl> implByName(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kImplNames)); ++i) {
    if (name == kImplNames[i]) return static_cast<Impl>(i);
  }
  return std::nullopt;
}
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

std::string implNames() { return fmt::format("{}", fmt::join(kImplNames, ", ")); }

std::vector<int64_t> spatialList(const ir::Node& n, const char* name, size_t count, int64_t fallback) {
  return ir::windowAttr(n.attrs(), name, count, fallback);
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

// A layer the bf16/int8 weights rule leaves in f32 for its size (kMinReducedWeights).
static bool tooSmallToNarrow(const KernelProgram& p, const Kernel& k) { return packedN(p, k) * packedK(p, k) < kMinReducedWeights; }

// The names --keep-fp32 knows a layer by: its kernel's, its anchor node's and the model file's
// names of that node (ir::Node::provenance, what the file calls it: "/fc/Gemm").
static std::vector<std::string> layerNames(const Kernel& k) {
  std::vector<std::string> names = {k.name, k.anchor->name()};
  names.insert(names.end(), k.anchor->provenance().begin(), k.anchor->provenance().end());
  return names;
}

Precision layerPrecision(const KernelProgram& p, const Kernel& k, Precision precision, const std::vector<std::string>& keepFp32,
                         bool bf16Convs) {
  if (precision == Precision::Fp32 || !packable(p, k)) return precision;
  for (const std::string& n : layerNames(k)) {
    if (std::find(keepFp32.begin(), keepFp32.end(), n) != keepFp32.end()) return Precision::Fp32;
  }
  if (precision == Precision::Bf16 && k.kind == KernelKind::Conv && packedK(p, k) < kMinBf16ConvWindow) return Precision::Fp32;
  // Without AMX a conv's products in bf16 cost more than they save: oneDNN 2.6's avx512_core_bf16
  // convs ran atari_cnn's convs at 60-68 GFLOP/s where the generated f32 tiles on bf16 weights
  // reach 114-129 (the model at batch 1 and 64 1.9-2.1x slower than fp32, impala_cnn alike), and
  // the generated vdpbf16ps tiles (gemm4x32's quads) trail oneDNN's. Such a conv computes as under
  // bf16-weights: bf16 weights, f32 products.
  if (precision == Precision::Bf16 && k.kind == KernelKind::Conv && !bf16Convs) return Precision::Bf16Weights;
  return precision;
}

bool bf16Convs(const TargetTraits& target, bool allowExtern) { return target.bf16Tiles && allowExtern && onednnBuiltIn(); }

std::vector<Impl> candidatesOf(const KernelProgram& p, const Kernel& k, bool allowExtern,
                               const std::optional<InjectedFault>& fault, Precision precision) {
  if (!packable(p, k)) return {};
  std::vector<Impl> v = {Impl::Gemm4x32, Impl::Gemm4x16};
  // conv_rows reads the f32 weight: with fp32, or bf16/int8 weights where the layer is too small
  // to be narrowed (kMinReducedWeights; IMPALA's convs, whose 16-channel ones went to oneDNN's
  // slower convs with --precision bf16-weights: impala_cnn at batch 64 1.25x slower than fp32).
  // Not with products in bf16, which narrows every layer oneDNN may run (decideWeightStorage).
  const bool f32Weight = precision == Precision::Fp32 || (precision != Precision::Bf16 && tooSmallToNarrow(p, k));
  if (f32Weight && convRowTiles(p, k, false)) v.push_back(Impl::ConvRows);  // whether it runs does not depend on the target's blocks
  if (f32Weight && winogradTiles(p, k, false)) v.push_back(Impl::WinogradF23);  // its own f32 weights, transformed
  if (allowExtern && onednnBuiltIn() && onednnEligible(p, k)) {
    v.push_back(Impl::Onednn);
    // An injected fault lives in the generated epilogue: keep the epilogue generated.
    if (postOpPlan(p, k) && !hasAccuracyFault(k, fault)) v.push_back(Impl::OnednnPostOps);
  }
  // Convs' six- and eight-position tiles, on f32, bf16 and int8 panels (not bf16 pairs for vdpbf16ps);
  // linear layers' tiles of eight rows at every precision (bf16 pairs for vdpbf16ps run as quads
  // below KernelSchedule::widenRows rows, and as eight-row tiles on their widened values above).
  if (k.kind == KernelKind::Conv && precision != Precision::Bf16) {
    v.push_back(Impl::Gemm6x16);
    v.push_back(Impl::Gemm8x32);
  }
  if (k.kind == KernelKind::Linear) v.push_back(Impl::Gemm8x32);
  // Linear layers' sextets by one panel (without AVX-512: twelve accumulators of 8 lanes), on f32
  // panels only (no widened or paired narrow panels).
  if (k.kind == KernelKind::Linear && f32Weight) v.push_back(Impl::Gemm6x16);
  // dot_rows reads the f32 weight as it is, [N, K]: a layer too small to be narrowed at any
  // precision (heads keep f32 anyway) or kept f32.
  if (k.kind == KernelKind::Linear && packedN(p, k) <= kDotRowsMaxN && (precision == Precision::Fp32 || tooSmallToNarrow(p, k))) {
    v.push_back(Impl::DotRows);
  }
  return v;
}

namespace {

// The heuristic of --mode default for a kernel at batch sizes around `batch` (measured on the
// reference policies, the zoo and single convs, docs/performance.md): every conv the generated
// code can run stays generated — Winograd F(2x2, 3x3) for 3 x 3 stride-1 convs of enough
// channels, conv_rows where its output rows fill its chunks, else the implicit GEMM's tiles
// (gemm8x32 with AVX-512, gemm6x16 without) — so that no fp32, bf16-weights
// or int8-weights model needs libdnnl; oneDNN's convolution only for products in bf16 (its AMX
// and avx512_core_bf16 kernels), with the epilogue as post-ops (and oneDNN's own layouts) when
// those are cheap ones — relu, x*a+b, a residual sum — and as generated code otherwise (oneDNN
// 2.6's tanh post-op, for one, is several times slower than its logistic); the generated
// two-panel microkernel for linear layers, where oneDNN's fixed per-call cost is larger than the
// whole layer at small batches. On a target without AVX-512 the one-panel microkernel: the
// two-panel one's accumulators fill its 16 registers (on an AVX2 host wide_mlp's 1024x1024 layer
// at batch 64 took 4281 us with gemm4x32, 2043 with gemm4x16).
Impl heuristicImpl(const KernelProgram& p, const Kernel& k, int64_t batch, bool allowExtern,
                   const std::optional<InjectedFault>& fault, const TargetTraits& target, Precision precision) {
  (void)batch;
  const bool narrowVectors = target.narrowVectors;
  std::vector<Impl> c = candidatesOf(p, k, allowExtern, fault, precision);
  auto has = [&](Impl i) { return std::find(c.begin(), c.end(), i) != c.end(); };
  // 3 x 3 stride-1 convs with f32 weights, at least 4 input and 16 output channels: Winograd's
  // F(2x2, 3x3), 16 multiplies where the direct conv takes 36 (WinogradTiles). Single convs at
  // batch 1 and 64, both backends, with and without AVX-512 (docs/performance.md): 1.1-2.1x
  // faster than the implicit GEMM's tiles and conv_rows from 4 -> 32 and 8 -> 16 channels on (IMPALA's
  // convs 1.2-1.5x); a 3 -> 16 first conv 1.17x slower (the transforms outweigh 3 channels' products).
  // Not where its GEMMs' vector lanes (every band's vectors of 16 tiles, 4 positions each) come to
  // over 1/8 more than the output's positions: NatureCNN's 64-channel 7 x 7 conv (8 x 8
  // computed) ran as fast as gemm8x32 at batch 1, 1.04x slower at 64.
  if (has(Impl::WinogradF23)) {
    const WinogradTiles t = *winogradTiles(p, k, !narrowVectors);
    if (t.C >= 4 && t.M >= 16 && 8 * (4 * 16 * t.bands * t.panels) <= 9 * t.OH * t.OW) return Impl::WinogradF23;
  }
  // With AVX-512, convs of 32 output channels or more run fastest as the generated implicit GEMM's
  // tiles of eight positions by two panels: on an Intel host with two 512-bit FMA pipes they beat
  // oneDNN 2.6 and conv_rows on every such conv of the CNN fixtures and zoo, at batch 1 and 64
  // (1.2-3x; the 3-input-channel first convs most), and gemm4x32's tiles by 1.05-1.3x
  // (docs/performance.md), with f32, bf16 or int8 weights. Products in bf16 (no gemm8x32) stay
  // below: oneDNN's bf16 convs ran atari_cnn at batch 64 2.2x faster than gemm4x32's vdpbf16ps tiles.
  if (k.kind == KernelKind::Conv && !narrowVectors && packedN(p, k) >= 32 && has(Impl::Gemm8x32)) return Impl::Gemm8x32;
  // Heads of at most twelve outputs: dot products along k at every batch size (a 256 -> 1 value
  // head at batch 64 5.5 -> 0.5 us, at batch 1 0.16 -> 0.05; docs/performance.md). Without
  // AVX-512 only a single output: the tile's accumulators, each two 8-lane halves, would spill.
  if (has(Impl::DotRows) && (!narrowVectors || packedN(p, k) == 1)) return Impl::DotRows;
  // Linear layers of two panels or more with AVX-512: tiles of eight rows by two panels (sixteen
  // accumulators; gemm4x32's eight keep the two 512-bit FMA pipes waiting on the FMA latency): a
  // 1024 x 1024 layer at 64 rows 121 -> 161 GFLOP/s on its own (docs/performance.md). At every
  // batch size: below 8 rows a unit runs gemm4x32's quad and single rows as before, one variant.
  // Not over short rows (K < 64), where the tile's sixteen accumulators to set up and store
  // outweigh its gain (sac_actor's 24-input first layer at batch 64: 4.8 -> 5.4 us in C++).
  if (k.kind == KernelKind::Linear && !narrowVectors && packedN(p, k) >= 32 && packedK(p, k) >= 64 && has(Impl::Gemm8x32)) {
    return Impl::Gemm8x32;
  }
  if (has(Impl::ConvRows)) {
    // Output rows that fill at least 7/8 of their chunks' lanes (rows of at most 8 columns two to
    // a chunk): conv_rows beat oneDNN and the implicit GEMM at batch 1 and 64 on every IMPALA conv
    // of 16 channels (no layout copies; with AVX-512 its 16-accumulator passes 27.8 us against
    // gemm8x32's 8 x 16 tiles' 31). On rows of 12 columns (3/4 of the lanes) the implicit GEMM
    // was ahead: 4.1 against 5.0 us with AVX-512, 5.6 against 7.5 without (a 16-channel 3x3
    // conv at batch 1).
    const ConvRowTiles t = *convRowTiles(p, k, !narrowVectors);
    if (8 * t.OH * t.OW >= 7 * 16 * t.rowUnits * t.taps.chunks) return Impl::ConvRows;
  }
  // The other convs (strided or poorly filled rows, fewer than 32 channels, or any size without
  // AVX-512): the implicit GEMM's tiles, with AVX-512 eight positions by one or two panels
  // (gemm8x32; a 16-channel strided conv's 8 x 16 tiles 2.0 us against oneDNN's 6.9 at batch 1,
  // 129 against 309 us at batch 64), without it six positions by one panel (gemm6x16, twelve
  // accumulators, 1.15x gemm4x16's rate on NatureCNN's first conv; on an AVX2 host it beat oneDNN
  // 2.6 on every conv of NatureCNN, the multi-input CNN and a GAP CNN at batch 1 and 64, 1.1-2.4x;
  // docs/performance.md notes the strided convs where oneDNN stays a few percent ahead).
  if (k.kind == KernelKind::Conv && has(Impl::Gemm8x32)) return narrowVectors ? Impl::Gemm6x16 : Impl::Gemm8x32;
  // Without AVX-512, linear layers of a panel or more over rows of 64 or more in sextets: gemm4x16's
  // eight accumulators leave the FMA pipes waiting on their latency (on an AMD host wide_mlp's
  // 1024 x 1024 layer at batch 64 ran at 98 GFLOP/s, 114 with AVX-512's octets; docs/performance.md).
  if (k.kind == KernelKind::Linear && narrowVectors && packedN(p, k) >= 16 && packedK(p, k) >= 64 && has(Impl::Gemm6x16)) {
    return Impl::Gemm6x16;
  }
  const Impl generated = narrowVectors ? Impl::Gemm4x16 : Impl::Gemm4x32;
  if (k.kind != KernelKind::Conv || !has(Impl::Onednn)) return generated;
  // Products in bf16 (bf16 pairs: no gemm6x16 or gemm8x32): oneDNN's convolution; without AVX-512
  // (where bf16 computes as bf16-weights) the one-panel tiles from 32 channels, ahead of oneDNN
  // on NatureCNN's convs with narrowed weights.
  if (narrowVectors && packedN(p, k) >= 32) return generated;
  if (has(Impl::OnednnPostOps)) {
    bool cheap = true;
    const std::optional<PostOpPlan> plan = postOpPlan(p, k);
    for (const PostOp& op : plan->ops) cheap = cheap && (op.alg.empty() || op.alg == "eltwise_relu" || op.alg == "eltwise_linear");
    if (cheap) return Impl::OnednnPostOps;
  }
  return Impl::Onednn;
}

// The pieces set_weights reads (pc::setWeights in the prelude documents the layout): the raw
// store (every updatable weight as the model file has it), each region's codes as int32, then
// the table of int64 the backends pass to pc::setWeights (Schedule::weightTable).
template <typename Append>
void layoutWeightUpdates(Schedule& s, const std::vector<ir::Graph::UpdatableWeight>& weights,
                         const std::vector<std::pair<int64_t, std::vector<int64_t>>>& regions, Append& append) {
  const ir::Graph::UpdatableWeight& last = weights.back();
  const int64_t rawElements = last.offset + last.value.numel();
  if (rawElements >= std::numeric_limits<int32_t>::max()) {
    fail("the updatable weights hold {} elements; set_weights addresses at most 2^31-2", rawElements);
  }
  std::vector<float> raw(static_cast<size_t>(rawElements));
  for (const ir::Graph::UpdatableWeight& w : weights) {
    if (w.value.numel()) std::memcpy(raw.data() + w.offset, w.value.bytes(), w.value.nbytes());
  }
  const int64_t rawOffset = append(raw.data(), raw.size() * sizeof(float));
  std::vector<int64_t> table{static_cast<int64_t>(weights.size()), rawElements, rawOffset, static_cast<int64_t>(regions.size())};
  for (const ir::Graph::UpdatableWeight& w : weights) table.push_back(w.offset);
  for (const auto& [offset, codes] : regions) {
    std::vector<int32_t> narrow(codes.begin(), codes.end());
    const int64_t codesOffset = append(narrow.data(), narrow.size() * sizeof(int32_t));
    table.insert(table.end(), {offset, static_cast<int64_t>(codes.size()), codesOffset});
  }
  s.weightTable = append(table.data(), table.size() * sizeof(int64_t));
}

}  // namespace

std::vector<std::string> implCandidates(const KernelProgram& program, const Kernel& kernel, bool allowExtern,
                                        const std::optional<InjectedFault>& fault, Precision precision,
                                        const std::vector<std::string>& keepFp32, const TargetTraits& target) {
  std::vector<std::string> names;
  const Precision layer = layerPrecision(program, kernel, precision, keepFp32, bf16Convs(target, allowExtern));
  for (Impl i : candidatesOf(program, kernel, allowExtern, fault, layer)) {
    names.push_back(implName(i));
  }
  return names;
}

std::optional<ExternKernel> externKernel(const KernelProgram& program, const Kernel& k, const std::string& impl) {
  std::optional<Impl> im = implByName(impl);
  if (!im || !isExtern(*im)) return std::nullopt;
  std::vector<Impl> c = candidatesOf(program, k, true);
  if (std::find(c.begin(), c.end(), *im) == c.end()) return std::nullopt;
  const Buffer& X = program.buffer(k.anchorInputs[0]);
  ExternKernel e;
  int64_t floats = 0;
  if (k.kind == KernelKind::Linear) {
    e.linear = true;
    e.shape = {packedK(program, k), packedN(program, k), X.strides[0]};
    if (*im == Impl::Onednn) floats = e.shape[1];  // the result rows the epilogue reads
  } else {
    const ir::Node& n = *k.anchor;
    const Buffer& W = program.buffer(k.anchorInputs[1]);
    std::vector<int64_t> st = spatialList(n, "strides", 2, 1), dil = spatialList(n, "dilations", 2, 1), pads = spatialList(n, "pads", 4, 0);
    e.shape = {X.type.shape[1].value(), X.type.shape[2].value(), X.type.shape[3].value(), k.domain[1].value(),
               W.type.shape[2].value(), W.type.shape[3].value(), k.domain[2].value(), k.domain[3].value(),
               st[0], st[1], dil[0], dil[1], pads[0], pads[1], pads[2], pads[3], X.strides[0]};
    e.anyLayout = *im == Impl::OnednnPostOps;
    // As pc::dnnl_ext::Conv::srcPerRow + dstPerRow: with oneDNN's own layouts, channels rounded
    // up to 16 (nChw16c); in NHWC the source copy's room also takes the result in NCHW.
    auto channels = [&](int64_t ch) { return e.anyLayout ? (ch + 15) / 16 * 16 : ch; };
    const int64_t src = channels(e.shape[0]) * e.shape[1] * e.shape[2], dst = channels(e.shape[3]) * e.shape[6] * e.shape[7];
    floats = (e.anyLayout ? src : std::max(src, dst)) + dst;
  }
  e.scratchBytesPerRow = (floats * 4 + 63) / 64 * 64;
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

bool narrowVectorTarget(const std::string& cppTarget) {
  if (cppTarget == "native") return !__builtin_cpu_supports("avx512f");
  return cppTarget != "x86-64-v4" && cppTarget != "x86-64-v4-bf16" && cppTarget != "x86-64-v4-amx";
}

bool bf16DotTarget(const std::string& cppTarget) {
  if (cppTarget == "native") return __builtin_cpu_supports("avx512bf16");
  return cppTarget == "x86-64-v4-bf16" || cppTarget == "x86-64-v4-amx";
}

TargetTraits cppTargetTraits(const std::string& cppTarget) {
  TargetTraits t;
  t.narrowVectors = narrowVectorTarget(cppTarget);
  t.bf16Dot = bf16DotTarget(cppTarget);
  t.bf16Tiles = cppTarget == "native" ? __builtin_cpu_supports("amx-bf16") : cppTarget == "x86-64-v4-amx";
  // Every AMD CPU with AVX512_BF16 (Zen 4, Zen 5) issues vdpbf16ps as often as the FMA; the named
  // targets are no CPU in particular (the LLVM backend also reads --cpu: resolveLlvmTarget).
  t.fastBf16Dot = cppTarget == "native" && t.bf16Dot && __builtin_cpu_is("amd");
  return t;
}

ImplChoice heuristicChoice(const KernelProgram& program, const std::vector<int64_t>& batches, bool allowExtern,
                           const std::optional<InjectedFault>& fault, const TargetTraits& target, Precision precision,
                           const std::vector<std::string>& keepFp32) {
  ImplChoice choice;
  std::vector<int64_t> bounds = batchRangeBounds(batches);
  for (const Kernel& k : program.kernels) {
    const Precision layer = layerPrecision(program, k, precision, keepFp32, bf16Convs(target, allowExtern));
    if (candidatesOf(program, k, allowExtern, fault, layer).empty()) continue;
    ImplDispatch d;
    for (size_t i = 0; i < batches.size(); ++i) {
      std::string impl = implName(heuristicImpl(program, k, batches[i], allowExtern, fault, target, layer));
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

// KernelSchedule::matmulColumns.
static int64_t matmulColumns(const KernelProgram& p, const Kernel& k) {
  if (!k.anchor || !k.anchor->isOp(Op::MatMul) || k.domain.empty()) return 0;
  const Buffer& A = p.buffer(k.anchorInputs[0]);
  const Buffer& B = p.buffer(k.anchorInputs[1]);
  DType acc = k.anchor->output()->type().dtype;
  for (const Instr& i : k.body) {
    if (i.opcode == Opcode::Acc) acc = i.dtype;
  }
  const ir::Dim& n = k.domain.back();
  const bool lanes = acc == DType::F32 && A.type.dtype == DType::F32 && B.type.dtype == DType::F32 && B.type.rank() >= 2 && n.isStatic() &&
                     n.value() % 4 == 0 && n.value() <= 64 && B.type.shape.back() == n && B.strides.back() == 1;
  return lanes ? n.value() : 0;
}

PlannedProgram planGraph(const ir::Graph& graph, bool fuse) {
  PlannedProgram p{lowerGraph(graph), {}};
  if (fuse) fuseKernels(p.program);
  p.plan = planMemory(p.program);
  return p;
}

// ---- the schedule

ScheduleOptions scheduleOptions(const CodegenOptions& o) {
  ScheduleOptions s;
  s.name = o.name;
  s.externKernels = o.externKernels;
  s.fault = o.fault;
  s.choice = o.choice;
  s.tuneBatches = o.tuneBatches;
  s.forceImpl = o.forceImpl;
  s.tuning = o.tuning;
  s.precision = o.precision;
  s.keepFp32 = o.keepFp32;
  s.streamedWeights = o.streamedWeights;
  s.rowBlockBytes = o.rowBlockBytes;
  return s;
}

bool rowsIndependent(const KernelProgram& p) {
  for (const Buffer& b : p.buffers) {
    if (b.kind == BufferKind::Param) continue;
    const bool batchFirst = !b.type.shape.empty() && b.type.shape[0].isBatch();
    if (!batchFirst && b.kind != BufferKind::Temp) return false;
    for (size_t d = 1; d < b.type.shape.size(); ++d) {
      if (b.type.shape[d].isBatch()) return false;
    }
  }
  // Axes a node works along; an empty list of axes means all of them.
  auto touchesRows = [](const std::vector<int64_t>& axes, size_t rank) {
    return axes.empty() || std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return normalizeAxis(a, rank) == 0; });
  };
  // Every node a kernel runs, and those views stand for (a reshape, a slice).
  std::vector<const ir::Node*> nodes;
  for (const Kernel& k : p.kernels) nodes.insert(nodes.end(), k.sources.begin(), k.sources.end());
  for (const Buffer& b : p.buffers) {
    if (b.value && b.value->producer()) nodes.push_back(b.value->producer());
  }
  for (const ir::Node* n : nodes) {
    if (!n->isOp()) continue;
    const size_t rank = n->inputs().empty() ? 0 : n->inputs()[0]->type().shape.size();
    switch (n->op()) {
      case Op::Softmax: case Op::LogSoftmax: case Op::ArgMax: case Op::LayerNorm: case Op::Gather:
      case Op::GatherElements: case Op::Split: case Op::Concat: case Op::Flatten:
        if (normalizeAxis(n->attrInt("axis"), rank) == 0) return false;
        break;
      case Op::ReduceMean: case Op::ReduceSum: case Op::ReduceMax: case Op::ReduceProd: case Op::Squeeze:
      case Op::Unsqueeze: case Op::Slice:
        if (touchesRows(n->attrInts("axes"), rank)) return false;
        break;
      case Op::Transpose: {
        const std::vector<int64_t>& perm = n->attrInts("perm");
        if (perm.empty() || perm[0] != 0) return false;
        break;
      }
      case Op::Pad: {
        const std::vector<int64_t>& pads = n->attrInts("pads");
        if (pads.empty() || pads[0] != 0 || pads[pads.size() / 2] != 0) return false;
        break;
      }
      default: break;
    }
  }
  return true;
}

// ---- reduced precision

const char* precisionName(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16Weights: return "bf16-weights";
    case Precision::Bf16: return "bf16";
    case Precision::Int8Weights: return "int8-weights";
  }
  return "?";
}

Precision parsePrecision(const std::string& name) {
  for (Precision p : {Precision::Fp32, Precision::Bf16Weights, Precision::Bf16, Precision::Int8Weights}) {
    if (name == precisionName(p)) return p;
  }
  fail("unknown precision '{}' (valid: fp32, bf16-weights, bf16, int8-weights)", name);
}

const char* weightStorageName(WeightStorage w) {
  switch (w) {
    case WeightStorage::F32: return "f32";
    case WeightStorage::Bf16: return "bf16";
    case WeightStorage::Int8: return "int8";
    case WeightStorage::Bf16Dot: return "bf16-dot";
  }
  return "?";
}

namespace {

// Packed layers from whose result no other packed layer reads, directly or through other
// kernels: the heads, whose error goes straight to the action (the rule in codegen.h).
std::vector<bool> headLayers(const KernelProgram& p) {
  std::vector<bool> feedsLayer(p.kernels.size(), false), head(p.kernels.size(), false);
  for (size_t i = p.kernels.size(); i-- > 0;) {
    bool feeds = false;
    for (int id : p.kernels[i].writes()) {
      for (size_t r : p.readersOf(p.buffer(id).root)) feeds = feeds || (r > i && (packable(p, p.kernels[r]) || feedsLayer[r]));
    }
    feedsLayer[i] = feeds;
    head[i] = packable(p, p.kernels[i]) && !feeds;
  }
  return head;
}

// The name a layer is shown by: what the model file calls its node ("/fc/Gemm"), else the graph
// node's name.
std::string layerName(const Kernel& k) { return k.anchor->provenance().empty() ? k.anchor->name() : k.anchor->provenance().front(); }

// The storage of each kernel's packed weight under options `o` (F32 for kernels without one).
void decideWeightStorage(const KernelProgram& p, const ScheduleOptions& o, std::vector<KernelSchedule>& ks) {
  const std::set<std::string> keep(o.keepFp32.begin(), o.keepFp32.end());
  std::set<std::string> named;  // the --keep-fp32 names that name a layer
  for (const Kernel& k : p.kernels) {
    if (!packable(p, k)) continue;
    for (const std::string& n : layerNames(k)) {
      if (keep.count(n)) named.insert(n);
    }
  }
  if (named.size() < keep.size()) {
    std::vector<std::string> missing, layers;
    for (const std::string& n : keep) {
      if (!named.count(n)) missing.push_back(fmt::format("'{}'", n));
    }
    for (const Kernel& k : p.kernels) {
      if (packable(p, k)) layers.push_back(fmt::format("'{}'", layerName(k)));
    }
    fail("--keep-fp32: {} {} no linear or conv layer with packed weights (those: {})", fmt::join(missing, ", "),
         missing.size() == 1 ? "names" : "name", layers.empty() ? "none" : fmt::format("{}", fmt::join(layers, ", ")));
  }
  if (o.precision == Precision::Fp32) return;
  const std::vector<bool> head = headLayers(p);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    const Precision layer = packable(p, k) ? layerPrecision(p, k, o.precision, o.keepFp32, bf16Convs(o.target, o.externKernels)) : o.precision;
    if (!packable(p, k) || head[i] || layer == Precision::Fp32) continue;
    const ir::Node& w = *p.buffer(k.anchorInputs[1]).value->producer();
    const bool dotFits = bf16PairRows(packedK(p, k)) <= kMaxBf16DotPairs;
    if (ks[i].rawWeight) {
      // oneDNN runs it (on every batch, or some): narrowed only to multiply in bf16, oneDNN's
      // bf16 convolutions (AMX where the CPU has it), whatever the layer's size: the gain is
      // arithmetic, not memory. A generated implementation beside it reads bf16 pairs.
      const bool generated = std::any_of(ks[i].impls.begin(), ks[i].impls.end(), usesPanels);
      if (layer == Precision::Bf16 && o.target.bf16Dot && k.kind == KernelKind::Conv && !w.isUpdatable() && (!generated || dotFits)) {
        ks[i].weightStorage = WeightStorage::Bf16Dot;
      }
      continue;
    }
    if (w.isUpdatable() || tooSmallToNarrow(p, k)) continue;
    if (o.precision == Precision::Int8Weights && packedN(p, k) * packedK(p, k) < o.streamedWeights) {
      ks[i].weightStorage = WeightStorage::Bf16;  // in L2 anyway: bf16's error, one widening instruction
    } else if (o.precision == Precision::Int8Weights) {
      const float* d = w.paramData().data<float>();
      if (!std::all_of(d, d + w.paramData().numel(), [](float v) { return std::isfinite(v); })) continue;  // no scale for inf
      ks[i].weightStorage = WeightStorage::Int8;
    } else if (layer == Precision::Bf16 && o.target.bf16Dot && dotFits) {
      ks[i].weightStorage = WeightStorage::Bf16Dot;
    } else {
      ks[i].weightStorage = WeightStorage::Bf16;
    }
  }
}

}  // namespace

// ---- forms and thread splits

Form formOf(const KernelProgram& p, const Kernel& k) {
  switch (k.kind) {
    case KernelKind::Pointwise: return Form::Pointwise;
    case KernelKind::Linear: return packable(p, k) ? Form::PackedGemm : Form::Gemm;
    case KernelKind::Conv: return packable(p, k) ? Form::PackedConv : Form::DirectConv;
    case KernelKind::Pool: {
      // Row maxima need the rows unit stride; col[] holds a padded row on the stack.
      const Buffer& X = p.buffer(k.anchorInputs[0]);
      const bool rows = X.type.rank() == 4 && X.type.dtype == DType::F32 && X.strides[3] == 1 && X.type.shape[3].value() <= 4096;
      if (rows && k.anchor->isOp(Op::MaxPool)) return Form::MaxPoolRows;
      // An average pool (it has no dilations) with unit column stride; strided, the taps' loops
      // gather and were slower than a window per output.
      if (rows && k.anchor->isOp(Op::AvgPool) && spatialList(*k.anchor, "strides", 2, 1)[1] == 1) return Form::AvgPoolRows;
      return Form::Pool;
    }
    case KernelKind::Reduction: {
      const ir::Node& n = *k.anchor;
      return n.isOp(Op::Softmax) || n.isOp(Op::LogSoftmax) || n.isOp(Op::LayerNorm) ? Form::RowReduction : Form::AxisReduction;
    }
    case KernelKind::Copy: return Form::Copy;
  }
  fail("internal: kernel '{}' has no form", k.name);
}

int64_t ThreadSplit::units(int64_t batch) const {
  const int64_t rows = rowsPerBatch * batch + rowsFixed;
  return (rows + tile - 1) / tile * mult;
}

double ThreadSplit::cost(int64_t batch) const {
  const int64_t rows = rowsPerBatch * batch + rowsFixed;
  const double c = static_cast<double>(costPerBatch * batch + costFixed);
  return tileCost ? c * static_cast<double>(std::min(rows, tile)) : c;
}

namespace {

// Loops over `dims` split at the first `eligible` axis that is not 1 (every axis when `eligible`
// is empty), each point costing `pointCost`; whole when there is none.
ThreadSplit domainSplit(const std::vector<ir::Dim>& dims, int64_t pointCost, const std::vector<bool>& eligible = {}) {
  ThreadSplit sp;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (!eligible.empty() && !eligible[d]) continue;
    if (dims[d].isBatch() || dims[d].value() != 1) {
      sp.axis = static_cast<int>(d);
      break;
    }
  }
  if (sp.axis < 0) return sp;
  const ir::Dim split = dims[static_cast<size_t>(sp.axis)];
  sp.rowsPerBatch = split.isBatch() ? 1 : 0;
  sp.rowsFixed = split.isBatch() ? 0 : split.value();
  // The points of the other axes are each unit's cost.
  int64_t fixed = std::max<int64_t>(pointCost, 1);
  bool hasBatch = false;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (static_cast<int>(d) == sp.axis) continue;
    if (dims[d].isBatch()) hasBatch = true;
    else fixed *= dims[d].value();
  }
  sp.costPerBatch = hasBatch ? fixed : 0;
  sp.costFixed = hasBatch ? 0 : fixed;
  return sp;
}

// A split whose units are `perRow` per row of `k`'s leading dim (the batch, or a static count of
// images in a model without one), each costing `cost`.
ThreadSplit perRowSplit(const Kernel& k, int64_t perRow, int64_t cost) {
  const ir::Dim rows = k.domain.at(0);
  ThreadSplit sp;
  sp.rowsPerBatch = rows.isBatch() ? perRow : 0;
  sp.rowsFixed = rows.isBatch() ? 0 : rows.value() * perRow;
  sp.costFixed = cost;
  return sp;
}

// The rows of a linear kernel (all leading dims flattened: per batch row, or a static count),
// the split's rows before tile and cost are set.
ThreadSplit rowGroupSplit(const Kernel& k) {
  ThreadSplit sp;
  sp.rowsPerBatch = 0;
  sp.rowsFixed = 1;
  for (size_t d = 0; d + 1 < k.domain.size(); ++d) {
    if (k.domain[d].isBatch()) {
      sp.rowsPerBatch = sp.rowsFixed;
      sp.rowsFixed = 0;
    } else {
      sp.rowsPerBatch *= k.domain[d].value();
      sp.rowsFixed *= k.domain[d].value();
    }
  }
  return sp;
}

}  // namespace

ThreadSplit threadSplit(const KernelProgram& p, const Kernel& k, std::optional<Impl> impl, bool wideVectors) {
  const int64_t bodyCost = static_cast<int64_t>(k.body.size());
  if (impl && isExtern(*impl)) {
    // oneDNN runs the layer with its own threads; the epilogue over its result is ours.
    if (*impl == Impl::OnednnPostOps && postOpPlan(p, k)) return {};
    if (k.kind == KernelKind::Linear) return perRowSplit(k, 1, packedN(p, k) * bodyCost);
    const int64_t M = k.domain[1].value(), P = k.domain[2].value() * k.domain[3].value();
    return perRowSplit(k, M, P * bodyCost);  // (image, channel) pairs, each over the positions
  }
  if (impl == Impl::DotRows) {
    // A tile of rows (all leading dims flattened) by every output.
    ThreadSplit sp = rowGroupSplit(k);
    sp.tile = dotRowsTile(packedN(p, k));
    sp.costFixed = packedN(p, k) * packedK(p, k);
    sp.tileCost = true;  // a unit of fewer rows does less
    return sp;
  }
  if (impl == Impl::ConvRows) {
    // An output row of one image by a block of channels (ConvRowTiles).
    const ConvRowTiles t = *convRowTiles(p, k, wideVectors);
    return perRowSplit(k, t.blocks * t.rowUnits, t.channels * t.rows * k.domain[3].value() * packedK(p, k));
  }
  if (impl == Impl::WinogradF23) {
    // A band of tile rows of one image by every output channel: 16 multiplies a tile and channel pair.
    const WinogradTiles t = *winogradTiles(p, k, wideVectors);
    return perRowSplit(k, t.bands, 16 * t.tiles() * t.M * t.C);
  }
  switch (formOf(p, k)) {
    case Form::Pointwise: return domainSplit(k.domain, bodyCost / 4);
    case Form::Gemm: {
      const ir::Node& n = *k.anchor;
      const ir::Shape& a = p.buffer(k.anchorInputs[0]).type.shape;
      const ir::Dim K = n.isOp(Op::Gemm) ? a[n.attrInt("trans_a") != 0 ? 0 : 1] : a.back();
      return domainSplit(k.domain, K.isBatch() ? 64 : K.value());
    }
    case Form::PackedGemm: {
      // A quad of rows (all leading dims flattened; an octet for gemm8x32) times a group of panels
      // (a pair for gemm4x32 and gemm8x32, one for gemm4x16), group-major so that the panels stay in
      // cache while every row passes.
      const int64_t per = panelsPerTile(impl.value_or(Impl::Gemm4x32));
      const int64_t panels = (packedN(p, k) + kPanel - 1) / kPanel;
      ThreadSplit sp = rowGroupSplit(k);
      sp.tile = rowsPerTile(impl.value_or(Impl::Gemm4x32));
      sp.mult = (panels + per - 1) / per;
      sp.costFixed = per * kPanel * packedK(p, k);
      sp.tileCost = true;  // a unit of fewer rows than a tile's does less
      return sp;
    }
    case Form::PackedConv: {
      // A tile of output positions (4, 6 for gemm6x16, 8 for gemm8x32) of one image by every panel.
      const int64_t R = rowsPerTile(impl.value_or(Impl::Gemm4x32));
      const int64_t panels = (packedN(p, k) + kPanel - 1) / kPanel, P = k.domain[2].value() * k.domain[3].value();
      return perRowSplit(k, (P + R - 1) / R, R * kPanel * packedK(p, k) * panels);
    }
    case Form::DirectConv: return domainSplit(k.domain, packedK(p, k));
    case Form::Pool: {
      int64_t window = 1;
      for (int64_t kd : k.anchor->attrInts("kernel_shape")) window *= kd;
      return domainSplit(k.domain, window);
    }
    case Form::MaxPoolRows:
    case Form::AvgPoolRows: {
      // An (image, channel, output row) per unit: its window rows' maxima, then the columns'.
      const RowPoolGeometry g = rowPoolGeometry(p, k);
      return perRowSplit(k, g.C * g.OH, g.OW * g.kernel[1] + g.W * g.kernel[0]);
    }
    case Form::RowReduction: {
      // Split over the kept axes only: a row is never divided.
      const ir::Node& n = *k.anchor;
      const size_t r = k.domain.size();
      const size_t axis = static_cast<size_t>(n.attrInt("axis") < 0 ? n.attrInt("axis") + static_cast<int64_t>(r) : n.attrInt("axis"));
      const size_t end = n.isOp(Op::LayerNorm) ? r : axis + 1;
      std::vector<bool> eligible(r, true);
      for (size_t d = axis; d < end && d < r; ++d) eligible[d] = false;
      return domainSplit(k.domain, 4, eligible);
    }
    case Form::AxisReduction: {
      // The loops walk the operand; split over its kept axes.
      const ir::Shape& x = p.buffer(k.anchorInputs[0]).type.shape;
      const ReducedAxes axes = reducedAxes(*k.anchor, x.size());
      std::vector<bool> eligible(x.size());
      for (size_t d = 0; d < x.size(); ++d) eligible[d] = !axes.reduced[d];
      return domainSplit(x, 1, eligible);
    }
    case Form::Copy: return domainSplit(k.domain, 1);
  }
  fail("internal: kernel '{}' has no thread split", k.name);
}

const ThreadSplit& KernelSchedule::splitOf(std::optional<Impl> impl) const {
  if (!impl) return split;
  for (size_t i = 0; i < impls.size(); ++i) {
    if (impls[i] == *impl) return implSplits[i];
  }
  fail("internal: no thread split for implementation {}", implName(*impl));
}

namespace {

// KernelSchedule::paddedImage: a padded conv's input image with its padding, where it fits.
std::optional<KernelSchedule::PaddedImage> paddedImage(const KernelProgram& p, const Kernel& k) {
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  if (X.type.rank() != 4 || X.type.dtype != DType::F32) return std::nullopt;
  const std::vector<int64_t> pads = spatialList(*k.anchor, "pads", 4, 0);
  if (std::all_of(pads.begin(), pads.end(), [](int64_t v) { return v == 0; })) return std::nullopt;
  KernelSchedule::PaddedImage im;
  im.C = X.type.shape[1].value();
  im.H = X.type.shape[2].value() + pads[0] + pads[2];
  im.W = X.type.shape[3].value() + pads[1] + pads[3];
  im.top = pads[0];
  im.left = pads[1];
  if (im.floats() > KernelSchedule::kMaxPaddedFloats) return std::nullopt;
  return im;
}

// KernelSchedule::tapGroup: KW where a window row's taps are consecutive floats of the image the
// whole tiles read (the padded copy, or the input itself), else 1.
int64_t tapGroup(const KernelProgram& p, const Kernel& k, bool padded) {
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  const int64_t columnStride = padded ? 1 : X.strides[3];
  const int64_t KW = p.buffer(k.anchorInputs[1]).type.shape[3].value();
  return spatialList(*k.anchor, "dilations", 2, 1)[1] * columnStride == 1 ? KW : 1;
}

}  // namespace

Schedule scheduleProgram(const KernelProgram& p, const MemoryPlan& plan, const ScheduleOptions& o) {
  Schedule s;
  s.cName = escape::cIdentifier(o.name.empty() ? p.name : o.name, 64);
  s.maskRegisters = !o.target.narrowVectors;
  if (reservedCName(s.cName)) s.cName = "m_" + s.cName;  // pc_run, policyc_model_descriptor, int_run ... stay distinct

  // The typed wrappers' parameters (inputs, then outputs): unique even in upper case (the
  // header's NAME_X_SIZE macros), and never a reserved name.
  {
    std::set<std::string> used;
    std::vector<std::string> names;
    for (int id : p.inputs) names.push_back(p.buffer(id).name);
    for (const auto& [n, id] : p.outputs) names.push_back(n);
    for (const std::string& n : names) {
      std::string base = escape::cIdentifier(n);
      if (reservedCName(base)) base = "v_" + base;  // a reserved prefix stays reserved with any suffix
      std::string name = base;
      for (int i = 1; used.count(upper(name)); ++i) name = fmt::format("{}_{}", base, i);
      used.insert(upper(name));
      s.paramNames.push_back(name);
    }
  }

  // The implementation of every tunable kernel per batch range.
  std::vector<int64_t> batches = o.tuneBatches;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  if (batches.empty() || batches.front() < 1) fail("the tuning batch sizes must be positive (got {})", fmt::join(o.tuneBatches, ","));
  s.tuneBatches = batches;
  std::optional<Impl> forced;
  if (!o.forceImpl.empty()) {
    forced = implByName(o.forceImpl);
    if (!forced) fail("unknown implementation '{}' (valid: {})", o.forceImpl, implNames());
    if (isExtern(*forced) && !onednnBuiltIn()) fail("--force-impl {}: this policyc was built without oneDNN (libdnnl-dev)", o.forceImpl);
  }
  s.kernels.resize(p.kernels.size());
  const bool wide = !o.target.narrowVectors;  // AVX-512: conv_rows' blocks, transposes' 16 x 8 tiles
  const ImplChoice heuristic = heuristicChoice(p, batches, o.externKernels, o.fault, o.target, o.precision, o.keepFp32);
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const Kernel& k = p.kernels[ki];
    KernelSchedule& ks = s.kernels[ki];
    ks.form = formOf(p, k);
    ks.split = threadSplit(p, k, std::nullopt, wide);
    const std::optional<ConvRowTiles> rowTiles = convRowTiles(p, k, wide);
    // A mathHeavy body pays vectorised even where its loads and stores gather and scatter, unless
    // its innermost loop, unit stride, fills a vector of 8 by itself: LLVM had vectorised a tanh
    // over [batch, 8] (rows 16 floats apart) across the rows, 2.2x the C++ build's time on an AMD
    // host, where GCC took each row as one vector.
    const ir::Dim inner = k.domain.empty() ? ir::Dim(1) : k.domain.back();
    const bool innerVector = inner.isStatic() && inner.value() >= 8 && !stridedAlong(p, k, k.domain.size() - 1);
    const bool heavy = mathHeavy(k) && !innerVector;
    for (size_t d = 0; d < k.domain.size(); ++d) ks.stridedAxes.push_back(!heavy && stridedAlong(p, k, d));
    ks.anchorFault = k.kind != KernelKind::Pointwise && o.fault && o.fault->kind == InjectedFault::Kind::Accuracy && k.anchor &&
                     k.anchor->isOp() && k.anchor->info().name == o.fault->op;
    const std::optional<RowTaps> rows = ks.form == Form::DirectConv ? convRowTaps(p, k, ks.split) : std::nullopt;
    ks.matmulColumns = ks.form == Form::Gemm ? matmulColumns(p, k) : 0;
    if (ks.matmulColumns) {
      const size_t m = k.domain.size() - 2;
      ks.matmulRowQuads = p.buffer(k.anchorInputs[0]).type.rank() >= 2 && k.domain.size() >= 2 && ks.split.axis < static_cast<int>(m) &&
                          k.domain[m].isStatic() && k.domain[m].value() % 4 == 0 && ks.matmulColumns <= (wide ? 32 : 16);
    }
    bool wholeChunks = false;
    switch (ks.form) {
      case Form::PackedGemm: wholeChunks = packedN(p, k) % kPanel == 0; break;
      case Form::DirectConv: wholeChunks = rows && rows->chunks > 0; break;  // a partial last chunk by vectors of 8
      case Form::PackedConv: wholeChunks = rowTiles && k.domain[3].value() % 16 == 0; break;  // conv_rows' chunks
      case Form::MaxPoolRows: wholeChunks = !rowPoolGeometry(p, k).window.empty() && k.domain[3].value() % 8 == 0; break;
      case Form::Copy: wholeChunks = padRows(p, k, ks.split) && p.buffer(k.anchorInputs[0]).type.dtype == DType::F32; break;
      case Form::Pool: wholeChunks = evenColumnPool(p, k, ks.split); break;
      case Form::Gemm: wholeChunks = ks.matmulRowQuads && ks.matmulColumns % 8 == 0; break;  // a row's 8 or 16 columns
      default: break;
    }
    ks.vectorEpilogue = wholeChunks && !ks.anchorFault && vectorBody(p, k);
    ks.vectorTail = ks.form == Form::PackedGemm && k.kind == KernelKind::Linear && !wholeChunks && !ks.anchorFault && vectorBody(p, k);
    if (ks.form == Form::PackedGemm && ks.vectorEpilogue) ks.directRows = directRowStride(p, k);
    ks.disjointTemps = disjointTemps(p, plan, k);
    ks.sumRun = sumRun(p, k);
    if (k.anchor && (k.anchor->isOp(Op::Softmax) || k.anchor->isOp(Op::LogSoftmax))) {
      const ir::Dim& row = k.domain[static_cast<size_t>(normalizeAxis(k.anchor->attrInt("axis"), k.domain.size()))];
      if (row.isStatic() && row.value() <= 4096) ks.keptExps = row.value();
      ks.f32Exps = ks.keptExps > 0 && p.buffer(k.anchorInputs[0]).type.dtype == DType::F32;
      const size_t r = k.domain.size(), axis = static_cast<size_t>(normalizeAxis(k.anchor->attrInt("axis"), r));
      if (ks.f32Exps && ks.keptExps <= KernelSchedule::kShortRow && r >= 2 && axis + 1 == r && ks.split.axis == 0) {
        ks.rowsAcross = 1;
        for (size_t d = 1; d < axis && ks.rowsAcross; ++d) ks.rowsAcross = k.domain[d].isStatic() ? ks.rowsAcross * k.domain[d].value() : 0;
      }
    }
    if (k.anchor && k.anchor->isOp(Op::LayerNorm) && p.buffer(k.anchorInputs[0]).type.dtype == DType::F32) {
      const size_t axis = static_cast<size_t>(normalizeAxis(k.anchor->attrInt("axis"), k.domain.size()));
      const ir::Dim& row = k.domain.back();
      if (axis + 1 == k.domain.size() && row.isStatic() && row.value() >= 16) ks.normRow = row.value();
      ks.normStaged = ks.normRow && ks.normRow <= KernelSchedule::kMaxStagedRow && mathHeavy(k);
    }
    ks.collapseFrom = ks.form == Form::Pointwise ? collapseFrom(p, k, ks.split) : k.domain.size();
    ks.vectorAxis = ks.form == Form::Pointwise ? vectorAxis(k, ks.collapseFrom) : -1;
    ks.unrollCalls = ks.form == Form::Pointwise && callsLibm(k) ? KernelSchedule::kUnrollCalls : 0;
    if (ks.form == Form::Pointwise) ks.transpose = transposeTiles(p, k, ks.split, wide);
    ks.windowInside = ks.form == Form::Pool && windowInside(p, k);
    std::vector<Impl> c = candidatesOf(p, k, o.externKernels, o.fault, layerPrecision(p, k, o.precision, o.keepFp32, bf16Convs(o.target, o.externKernels)));
    if (c.empty()) continue;
    if (o.tuning) {
      ks.impls = c;
    } else {
      ImplDispatch d = heuristic.at(k.name);
      if (o.choice && o.choice->count(k.name)) d = o.choice->at(k.name);
      if (forced && std::find(c.begin(), c.end(), *forced) != c.end()) d = {{-1, implName(*forced)}};
      if (d.empty() || d.back().maxBatch != -1) fail("internal: the implementation choice of kernel '{}' has no range for every batch", k.name);
      for (const ImplRange& r : d) {
        std::optional<Impl> im = implByName(r.impl);
        if (!im || std::find(c.begin(), c.end(), *im) == c.end()) {
          std::vector<std::string> names;
          for (Impl i : c) names.push_back(implName(i));
          fail("kernel '{}' has no implementation '{}' (candidates: {}){}", k.name, r.impl, fmt::join(names, ", "),
               im && isExtern(*im) && !onednnBuiltIn() ? "; this policyc was built without oneDNN (libdnnl-dev)" : "");
        }
        if (std::find(ks.impls.begin(), ks.impls.end(), *im) == ks.impls.end()) ks.impls.push_back(*im);
      }
      ks.dispatch = d;
    }
    for (Impl im : ks.impls) ks.implSplits.push_back(threadSplit(p, k, im, wide));
    if (std::find(ks.impls.begin(), ks.impls.end(), Impl::ConvRows) != ks.impls.end()) ks.convRows = rowTiles;
    if (std::find(ks.impls.begin(), ks.impls.end(), Impl::WinogradF23) != ks.impls.end()) {
      ks.winograd = winogradTiles(p, k, wide);
      // Products in bf16 where the conv would multiply in bf16 if convs could (the rules of
      // layerPrecision: not a few-channel window, not --keep-fp32) and vdpbf16ps runs at the FMA's
      // rate: elsewhere the f32 GEMMs are as fast (Sapphire Rapids) and exact.
      ks.winograd->bf16 = o.precision == Precision::Bf16 && o.target.fastBf16Dot && wide &&
                          layerPrecision(p, k, o.precision, o.keepFp32, true) == Precision::Bf16;
    }
    if (ks.form == Form::PackedConv) {
      ks.paddedImage = paddedImage(p, k);
      ks.tapGroup = tapGroup(p, k, ks.paddedImage.has_value());
      ks.tileEpilogue = !ks.anchorFault && vectorBody(p, k) && planeDense(p, k);
    }
    ks.rawWeight = std::any_of(ks.impls.begin(), ks.impls.end(), readsRawWeight);
    s.usesExtern = s.usesExtern || std::any_of(ks.impls.begin(), ks.impls.end(), isExtern);
    for (Impl im : ks.impls) {
      if (isExtern(im)) s.externPerBatch = std::max(s.externPerBatch, externKernel(p, k, implName(im))->scratchBytesPerRow);
    }
  }

  decideWeightStorage(p, o, s.kernels);

  // The weights blob. Weights and biases of packed kernels are read only through their packed
  // copies, except the weight of a oneDNN kernel (reordered into oneDNN's layout when the model
  // loads); every other param the kernels read is there as it is.
  auto append = [&](const void* data, size_t bytes) {
    s.weights.resize((s.weights.size() + kWeightAlign - 1) / kWeightAlign * kWeightAlign);
    const auto* c = static_cast<const unsigned char*>(data);
    s.weights.insert(s.weights.end(), c, c + bytes);
    return static_cast<int64_t>(s.weights.size() - bytes);
  };
  std::set<int> raw;
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const Kernel& k = p.kernels[ki];
    const bool packed = packable(p, k);
    for (int id : k.reads()) {
      const int root = p.buffer(id).root;
      if (p.buffer(root).kind != BufferKind::Param) continue;
      const bool weight = packed && id == k.anchorInputs[1];
      const bool bias = packed && k.anchorInputs.size() > 2 && id == k.anchorInputs[2];
      if ((weight && !s.kernels[ki].rawWeight) || bias) continue;
      raw.insert(root);
    }
  }
  // Every piece that came from updatable params: where it is and its elements' sources.
  std::vector<std::pair<int64_t, std::vector<int64_t>>> regions;
  for (int root : raw) {
    const ir::Node& param = *p.buffer(root).value->producer();
    const ir::Tensor& t = param.paramData();
    s.paramOffset[root] = append(t.bytes(), t.nbytes());
    if (param.isUpdatable()) {
      const int64_t* codes = param.paramSource().data<int64_t>();
      regions.push_back({s.paramOffset[root], std::vector<int64_t>(codes, codes + t.numel())});
    }
  }
  // Weights [N,K] packed into panels of kPanel columns: panel j holds W[j*16 + c, k] at [k][c],
  // so the microkernel streams one panel contiguously (zero padding past N). A kernel that only
  // oneDNN runs reads the raw weight: it gets no panels (only the padded bias its epilogue reads).
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const Kernel& k = p.kernels[ki];
    if (!packable(p, k)) continue;
    KernelSchedule& ks = s.kernels[ki];
    const bool generated = std::any_of(ks.impls.begin(), ks.impls.end(), usesPanels);
    const std::vector<float> packed = generated ? packWeightPanels(p, k) : std::vector<float>{};
    ks.panelStride = packedK(p, k) * kPanel;
    int64_t weightBytes = 0;  // of the packed panels (none where only oneDNN runs it)
    if (generated && (ks.weightStorage == WeightStorage::Bf16 || ks.weightStorage == WeightStorage::Bf16Dot)) {
      // Both bf16 storages are pairs along k: widened by a shift or a mask (Bf16), or multiplied
      // as pairs by vdpbf16ps (Bf16Dot).
      const std::vector<uint16_t> pairs = toBf16Pairs(packed, (packedN(p, k) + kPanel - 1) / kPanel, packedK(p, k), inputChannelGroup(p, k));
      ks.packedWeight = append(pairs.data(), pairs.size() * sizeof(uint16_t));
      weightBytes = static_cast<int64_t>(pairs.size() * sizeof(uint16_t));
      ks.panelStride = bf16PairRows(packedK(p, k)) * kPanel;
    } else if (generated && ks.weightStorage == WeightStorage::Int8) {
      std::vector<float> scales;
      const std::vector<int8_t> narrow = toInt8(packed, (packedN(p, k) + kPanel - 1) / kPanel, packedK(p, k), inputChannelGroup(p, k), scales);
      ks.packedWeight = append(narrow.data(), narrow.size());
      weightBytes = static_cast<int64_t>(narrow.size());
      ks.packedScale = append(scales.data(), scales.size() * sizeof(float));
    } else if (generated) {
      ks.packedWeight = append(packed.data(), packed.size() * sizeof(float));
      weightBytes = static_cast<int64_t>(packed.size() * sizeof(float));
    }
    ks.alternateUnits = ks.form == Form::PackedGemm && weightBytes >= KernelSchedule::kAlternateUnitsBytes;
    s.countsCalls = s.countsCalls || ks.alternateUnits;
    // A unit is a pair of panels unless every generated implementation is gemm4x16 (one panel).
    const bool single = !ks.impls.empty() && std::all_of(ks.impls.begin(), ks.impls.end(), [](Impl i) { return i == Impl::Gemm4x16 || isExtern(i); });
    const bool fits = (single ? 1 : 2) * packedK(p, k) * kPanel <= KernelSchedule::kMaxWidenedFloats;
    // Bf16 panels that stay in L2 as f32 (never int8 ones: int8 is for streamed layers,
    // decideWeightStorage) widened once into the model's region (KernelSchedule::loadWidened).
    const bool small = packedN(p, k) * packedK(p, k) < o.streamedWeights;
    auto widenOnce = [&] {
      const int64_t count = (packedN(p, k) + kPanel - 1) / kPanel;
      ks.loadWidened = s.loadWidenedFloats;
      s.loadWidened.push_back({ki, ks.packedWeight, ks.loadWidened, packedK(p, k), ks.panelStride, count});
      s.loadWidenedFloats += count * packedK(p, k) * kPanel;
    };
    const bool dotAtEveryBatch = ks.weightStorage == WeightStorage::Bf16Dot && o.target.fastBf16Dot;
    if (generated && ks.form == Form::PackedGemm && ks.weightStorage != WeightStorage::F32 &&
        (fits || ks.weightStorage == WeightStorage::Bf16Dot) && !dotAtEveryBatch) {
      ks.widenRows = KernelSchedule::kWidenRows;
      ks.widenBuffer = fits;
      if (fits && small && ks.weightStorage != WeightStorage::Int8) widenOnce();
    }
    if (generated && ks.form == Form::PackedConv && ks.weightStorage == WeightStorage::Bf16 && small) {
      widenOnce();
      ks.widenedTiles = true;
      ks.panelStride = packedK(p, k) * kPanel;
    }
    if (ks.winograd) {
      std::vector<float> u = winogradWeights(p, k);
      if (ks.winograd->bf16) {
        for (float& v : u) v = std::bit_cast<float>(static_cast<uint32_t>(bf16Bits(v)) << 16);
      }
      ks.winogradWeight = append(u.data(), u.size() * sizeof(float));
    }
    std::vector<float> bias = packBiasPanels(p, k);
    s.kernels[ki].packedBias = append(bias.data(), bias.size() * sizeof(float));
    if (std::vector<int64_t> w = generated ? packedWeightSource(p, k) : std::vector<int64_t>{}; !w.empty()) {
      regions.push_back({s.kernels[ki].packedWeight, std::move(w)});
    }
    if (std::vector<int64_t> b = packedBiasSource(p, k); !b.empty()) regions.push_back({s.kernels[ki].packedBias, std::move(b)});
  }
  if (!p.weights.empty()) layoutWeightUpdates(s, p.weights, regions, append);
  s.weights.resize((s.weights.size() + kWeightAlign - 1) / kWeightAlign * kWeightAlign);

  s.workspaceStatic = s.usesExtern ? (plan.staticBytes + 63) / 64 * 64 : plan.staticBytes;
  s.workspacePerBatch = s.usesExtern ? (plan.perBatchBytes + 63) / 64 * 64 + s.externPerBatch : plan.perBatchBytes;
  s.maxBatch = maxBatch(s.workspaceStatic, s.workspacePerBatch);

  // Row blocks: as many rows as fit the budget with their activations, inputs and outputs, and
  // at least as many as make a block's rows outweigh the weights every block reads again (a
  // 6.4 MB linear layer after NatureCNN's convs: blocks of 4 made atari_cnn at batch 64 1.35x
  // slower); a multiple of 4 (Schedule::rowBlock). oneDNN's primitives stay whole-batch ones.
  if (o.rowBlockBytes > 0 && !o.tuning && !s.usesExtern && rowsIndependent(p)) {
    auto rowBytes = [&](int id) {
      const Buffer& b = p.buffer(id);
      return ir::rowNumel(b.type.shape) * static_cast<int64_t>(ir::dtypeSize(b.type.dtype));
    };
    int64_t perRow = plan.perBatchBytes;
    for (int id : p.inputs) perRow += s.inputRowBytes.emplace_back(rowBytes(id));
    for (const auto& out : p.outputs) perRow += s.outputRowBytes.emplace_back(rowBytes(out.second));
    perRow = std::max<int64_t>(perRow, 1);
    const int64_t weighed = (static_cast<int64_t>(s.weights.size()) + perRow - 1) / perRow;
    s.rowBlock = std::max<int64_t>({4, o.rowBlockBytes / perRow / 4 * 4, (weighed + 3) / 4 * 4});
  }
  return s;
}

std::vector<std::pair<std::string, WeightStorage>> weightStorages(const KernelProgram& p, const MemoryPlan& plan,
                                                                  const CodegenOptions& options, const TargetTraits& target) {
  ScheduleOptions so = scheduleOptions(options);
  so.target = target;
  const Schedule s = scheduleProgram(p, plan, so);
  std::vector<std::pair<std::string, WeightStorage>> out;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    // A Winograd conv's products in bf16 count as bf16-dot: its f32 weights are transformed and rounded.
    const bool bf16Winograd = s.kernels[i].winograd && s.kernels[i].winograd->bf16;
    if (packable(p, p.kernels[i])) out.emplace_back(layerName(p.kernels[i]), bf16Winograd ? WeightStorage::Bf16Dot : s.kernels[i].weightStorage);
  }
  return out;
}

std::string cHeader(const KernelProgram& p_, const Schedule& schedule, const std::string& target) {
  const std::string& name = schedule.cName;
  std::string up;
  for (char c : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string s = fmt::format("/* {}.h: the C interface of the policyc-compiled model '{}' (target {}). */\n", name,
                              escape::cComment(p_.name), target);
  s += fmt::format("#ifndef POLICYC_MODEL_{}_H_\n#define POLICYC_MODEL_{}_H_\n\n", up, up);
  s += kPolicycModelHeader;
  s += "\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
  s += fmt::format("#define {}_NUM_INPUTS {}\n#define {}_NUM_OUTPUTS {}\n", up, p_.inputs.size(), up, p_.outputs.size());
  s += fmt::format("/* Workspace of a run: {}_WORKSPACE_STATIC_BYTES + {}_WORKSPACE_BYTES_PER_BATCH * batch. */\n", up, up);
  s += fmt::format("#define {}_WORKSPACE_STATIC_BYTES {}\n#define {}_WORKSPACE_BYTES_PER_BATCH {}\n", up, schedule.workspaceStatic,
                   up, schedule.workspacePerBatch);
  auto sizes = [&](int id, const std::string& n, const std::string& cName) {
    const Buffer& b = p_.buffer(id);
    std::string N = cName;
    for (char& c : N) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::vector<std::string> dims;
    for (const ir::Dim& d : b.type.shape) dims.push_back(d.isBatch() ? "batch" : std::to_string(d.value()));
    const int64_t per = ir::rowNumel(b.type.shape);
    return fmt::format("/* {} {}[{}] */\n#define {}_{}_SIZE {}  /* elements per batch row */\n", escape::cComment(n),
                       ir::dtypeName(b.type.dtype), fmt::join(dims, ","), up, N, per);
  };
  std::string params;
  size_t pi = 0;
  for (int id : p_.inputs) {
    s += sizes(id, p_.buffer(id).name, schedule.paramNames[pi]);
    params += fmt::format("const {}* {}, ", storageType(p_.buffer(id).type.dtype), schedule.paramNames[pi++]);
  }
  for (const auto& [n, id] : p_.outputs) {
    s += sizes(id, n, schedule.paramNames[pi]);
    params += fmt::format("{}* {}, ", storageType(p_.buffer(id).type.dtype), schedule.paramNames[pi++]);
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

}  // namespace policyc::codegen
