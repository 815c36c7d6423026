// The loop shapes of the schedule (schedule.h): the row forms of direct convs, pools and pads,
// a max pool's window step as lane shuffles, a sum's run of partial sums, collapsed pointwise
// loops, pools without bounds checks, and the vectorisation facts both printers read.
#include <algorithm>
#include <cmath>
#include <set>

#include "packing.h"
#include "schedule.h"

namespace policyc::codegen {

using ir::DType;
using ir::Op;

namespace {

// Per window column k1 of a row of W input columns read by OW outputs: the outputs [lo, hi) for
// which column i * stride + k1 * dil - pad lies inside the input.
void rowTaps(int64_t W, int64_t OW, int64_t KW, int64_t stride, int64_t dil, int64_t pad, std::vector<int64_t>& lo,
             std::vector<int64_t>& hi) {
  for (int64_t k1 = 0; k1 < KW; ++k1) {
    const int64_t off = k1 * dil - pad;  // i * stride + off in [0, W)
    const int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    const int64_t h = W - 1 - off < 0 ? 0 : std::min(OW, (W - 1 - off) / stride + 1);
    lo.push_back(std::min(l, OW));
    hi.push_back(std::max(h, std::min(l, OW)));
  }
}

}  // namespace

RowPoolGeometry rowPoolGeometry(const KernelProgram& p, const Kernel& k) {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  RowPoolGeometry g;
  g.kernel = n.attrInts("kernel_shape");
  g.strides = spatialList(n, "strides", 2, 1);
  g.dilations = spatialList(n, "dilations", 2, 1);
  g.pads = spatialList(n, "pads", 4, 0);
  g.C = k.domain[1].value();
  g.OH = k.domain[2].value();
  g.OW = k.domain[3].value();
  g.H = X.type.shape[2].value();
  g.W = X.type.shape[3].value();
  g.padL = g.pads[1];
  g.span = std::max(g.padL + g.W, (g.OW - 1) * g.strides[1] + (g.kernel[1] - 1) * g.dilations[1] + 1);
  g.chunks = g.W <= 256 ? (g.W + 7) / 8 : 0;
  g.colSize = std::max(g.span, g.padL + g.chunks * 8);
  if (n.isOp(Op::MaxPool) && g.chunks) {
    // Column stride 2: the outputs in the lane order 0 1 4 5 2 3 6 7 (RowPoolGeometry::evenOrder).
    g.evenOrder = g.strides[1] == 2 && g.dilations[1] == 1;
    constexpr std::array<int, 8> kNatural = {0, 1, 2, 3, 4, 5, 6, 7};
    const std::array<int, 8>& order = g.evenOrder ? kEvenOrder : kNatural;
    for (int64_t o = 0; o < (g.OW + 7) / 8 && (o == 0 || !g.window.empty()); ++o) {
      g.window.emplace_back();
      for (int64_t kw = 0; kw < g.kernel[1]; ++kw) {
        std::array<int, 8> sources;
        for (int64_t l = 0; l < 8; ++l) {
          const int64_t i3 = 8 * o + order[static_cast<size_t>(l)], c = i3 * g.strides[1] + kw * g.dilations[1] - g.padL;  // the input column
          sources[static_cast<size_t>(l)] = i3 < g.OW && c >= 0 && c < 8 * g.chunks ? static_cast<int>(c) : LaneShuffle::kFill;
        }
        g.window.back().push_back(shuffledLanes(sources));
        if (g.window.back().back().steps.size() > 3) {  // a wide stride or dilation: columns from memory
          g.window.clear();
          break;
        }
      }
    }
  }
  if (n.isOp(Op::AvgPool)) {
    g.rowsEnd = g.H + g.pads[2];
    g.colsEnd = g.W + g.pads[3];
    g.includePad = n.attrInt("count_include_pad") != 0;
    rowTaps(g.W, g.OW, g.kernel[1], g.strides[1], 1, g.padL, g.taps.lo, g.taps.hi);
    g.taps.finiteWeights = true;  // its taps' weight is 1
    if (g.OW <= 256) g.taps.chunks = (g.OW + 15) / 16;
  }
  return g;
}

// ---- vectorisation

namespace {

// The elements a load or store moves per step of domain axis `axis`.
int64_t axisStride(const KernelProgram& p, const Instr& in, size_t axis) {
  const Buffer& b = p.buffer(in.buffer);
  int64_t stride = 0;
  for (size_t d = 0; d < in.index.size(); ++d) {
    if (in.index[d].axis == static_cast<int>(axis)) stride += in.index[d].scale * b.strides[d];
  }
  return stride;
}

}  // namespace

bool mathHeavy(const Kernel& k) { return mathHeavy(k.body); }

bool mathHeavy(const std::vector<Instr>& instrs) {
  for (const Instr& in : instrs) {
    if (in.opcode != Opcode::Apply) continue;
    switch (in.op) {
      case Op::Exp: case Op::Log: case Op::Erf: case Op::Sigmoid: case Op::Tanh: case Op::Softplus: case Op::Elu:
      case Op::Selu: case Op::Silu: case Op::Gelu: return true;
      default: break;
    }
  }
  return false;
}

bool callsLibm(const Kernel& k) {
  for (const Instr& in : k.body) {
    if (in.opcode != Opcode::Apply) continue;
    switch (in.op) {
      case Op::Sin: case Op::Cos: case Op::Tan: case Op::Asin: case Op::Acos: case Op::Atan: case Op::Sinh:
      case Op::Cosh: case Op::Asinh: case Op::Acosh: case Op::Atanh: case Op::Pow: return true;
      default: break;
    }
  }
  return false;
}

bool stridedAlong(const KernelProgram& p, const Kernel& k, size_t axis) {
  for (const Instr& in : k.body) {
    if (in.opcode != Opcode::Load && in.opcode != Opcode::Store) continue;
    const int64_t stride = axisStride(p, in, axis);
    // A load of every 2nd to 4th element (an NHWC image's channel) vectorises as whole vectors
    // and shuffles (LLVM's interleaved groups, GCC's grouped loads), not a gather.
    if (in.opcode == Opcode::Load && stride >= 2 && stride <= 4) continue;
    if (stride != 0 && stride != 1) return true;
  }
  return false;
}


bool vectorBody(const KernelProgram& p, const Kernel& k) {
  if (k.domain.empty()) return false;
  const size_t last = k.domain.size() - 1;
  for (const Instr& in : k.body) {
    if (in.dtype != DType::F32) return false;
    if (in.opcode == Opcode::Apply && (in.op == Op::Pow || in.op == Op::Cast || in.op == Op::Where || in.op == Op::Not ||
                                       in.op == Op::Equal || in.op == Op::Less || in.op == Op::Greater)) {
      return false;
    }
    if (in.opcode == Opcode::Load || in.opcode == Opcode::Store) {
      const Buffer& b = p.buffer(in.buffer);
      if (b.type.dtype != DType::F32) return false;
      int uses = 0;
      for (size_t d = 0; d < in.index.size(); ++d) {
        const IndexExpr& e = in.index[d];
        if (e.axis != static_cast<int>(last)) continue;
        ++uses;
        if (e.scale * b.strides[d] != 1) return false;
      }
      if (uses > 1 || (in.opcode == Opcode::Store && uses == 0)) return false;
    }
  }
  return true;
}

bool planeDense(const KernelProgram& p, const Kernel& k) {
  if (k.domain.size() != 4 || !k.domain[3].isStatic()) return false;
  const int64_t W = k.domain[3].value();
  for (const Instr& in : k.body) {
    if (in.opcode != Opcode::Load && in.opcode != Opcode::Store) continue;
    const Buffer& b = p.buffer(in.buffer);
    int64_t row = 0, col = 0;  // elements per step of the domain's axes 2 and 3
    for (size_t d = 0; d < in.index.size(); ++d) {
      const IndexExpr& e = in.index[d];
      if (e.axis == 2) row += e.scale * b.strides[d];
      if (e.axis == 3) col += e.scale * b.strides[d];
    }
    if (col == 0 ? row != 0 : (col != 1 || row != W)) return false;
  }
  return true;
}

// Whether the temporaries kernel `k` touches occupy disjoint workspace memory.
bool disjointTemps(const KernelProgram& p, const MemoryPlan& plan, const Kernel& k) {
  std::set<int> roots;
  for (const std::vector<int>& ids : {k.reads(), k.writes()}) {
    for (int id : ids) {
      if (p.buffer(p.buffer(id).root).kind == BufferKind::Temp) roots.insert(p.buffer(id).root);
    }
  }
  std::vector<const MemorySlot*> slots;
  for (int r : roots) {
    const MemorySlot* s = plan.slotOf(r);
    if (!s) return false;
    for (const MemorySlot* o : slots) {
      if (o->perBatch == s->perBatch && o->offset < s->offset + s->bytes && s->offset < o->offset + o->bytes) return false;
    }
    slots.push_back(s);
  }
  return true;
}

// The first of the trailing domain axes every access walks as one contiguous run, or not at all.
size_t collapseFrom(const KernelProgram& p, const Kernel& k, const ThreadSplit& split) {
  const size_t r = k.domain.size();
  if (r < 2 || split.axis == static_cast<int>(r) - 1 || !k.domain[r - 1].isStatic()) return r;
  size_t from = r - 1;  // the run [from, r)
  while (from >= 1 && static_cast<int>(from - 1) != split.axis && k.domain[from - 1].isStatic()) {
    const size_t a = from - 1;
    bool ok = true;
    for (const Instr& in : k.body) {
      if (in.opcode != Opcode::Load && in.opcode != Opcode::Store) continue;
      ok = ok && axisStride(p, in, a) == axisStride(p, in, from) * k.domain[from].value();
    }
    if (!ok) break;
    from = a;
  }
  return from == r - 1 ? r : from;
}

int vectorAxis(const Kernel& k, size_t collapseFrom) {
  const size_t r = k.domain.size();
  if (r < 2 || collapseFrom != r || !mathHeavy(k) || !k.domain[r - 1].isStatic() || k.domain[r - 1].value() % 8 == 0) return -1;
  for (size_t a = r - 1; a-- > 0;) {
    if (k.domain[a].isBatch() || k.domain[a].value() >= 16) return static_cast<int>(a);
  }
  return -1;
}

std::vector<size_t> loopOrder(const Kernel& k, const KernelSchedule& ks, bool vectorInner) {
  const int inner = vectorInner ? ks.vectorAxis : -1;
  std::vector<size_t> order;
  for (size_t d = 0; d < k.domain.size(); ++d) {
    if (static_cast<int>(d) != inner) order.push_back(d);
  }
  if (inner >= 0) order.push_back(static_cast<size_t>(inner));
  return order;
}

std::optional<TransposeTiles> transposeTiles(const KernelProgram& p, const Kernel& k, const ThreadSplit& split, bool wideVectors) {
  const size_t r = k.domain.size();
  if (r < 2 || k.body.size() != 2 || k.body[0].opcode != Opcode::Load || k.body[1].opcode != Opcode::Store) return std::nullopt;
  const Instr &load = k.body[0], &store = k.body[1];
  const DType t = p.buffer(load.buffer).type.dtype;
  if (p.buffer(store.buffer).type.dtype != t || t == DType::Bool || ir::dtypeSize(t) != 4) return std::nullopt;
  const size_t last = r - 1;
  if (split.axis == static_cast<int>(last) || !k.domain[last].isStatic()) return std::nullopt;
  if (axisStride(p, store, last) != 1 || axisStride(p, load, last) == 0) return std::nullopt;
  for (size_t a = 0; a < last; ++a) {
    if (static_cast<int>(a) == split.axis || !k.domain[a].isStatic() || axisStride(p, load, a) != 1) continue;
    const int64_t least = std::min(k.domain[a].value(), k.domain[last].value());
    const int64_t tile = least >= 8 ? 8 : least >= 4 ? 4 : 0;
    const int64_t across = wideVectors && tile == 8 && k.domain[a].value() >= 16 ? 16 : tile;
    if (tile > 0 && axisStride(p, store, a) != 0) return TransposeTiles{a, tile, across};
  }
  return std::nullopt;
}

// Whether every window of a pooling kernel lies inside its input.
bool windowInside(const KernelProgram& p, const Kernel& k) {
  const ir::Node& n = *k.anchor;
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  const size_t nsp = X.type.rank() - 2;
  const std::vector<int64_t>& kernel = n.attrInts("kernel_shape");
  const std::vector<int64_t> strides = spatialList(n, "strides", nsp, 1), dil = spatialList(n, "dilations", nsp, 1),
                             pads = spatialList(n, "pads", nsp * 2, 0);
  for (size_t d = 0; d < nsp; ++d) {
    if (pads[d] != 0 || !X.type.shape[2 + d].isStatic() || !k.domain[2 + d].isStatic()) return false;
    if ((k.domain[2 + d].value() - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 > X.type.shape[2 + d].value()) return false;
  }
  return true;
}

std::optional<KernelSchedule::SumRun> sumRun(const KernelProgram& p, const Kernel& k) {
  const ir::Node* n = k.anchor;
  if (formOf(p, k) != Form::AxisReduction || !(n->isOp(Op::ReduceSum) || n->isOp(Op::ReduceMean) || n->isOp(Op::GlobalAvgPool))) {
    return std::nullopt;
  }
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  const size_t r = X.type.rank();
  if (X.type.dtype != DType::F32) return std::nullopt;
  const std::vector<bool> reduced = reducedAxes(*n, r).reduced;
  size_t inner = r;
  for (size_t d = 0; d < r; ++d) {
    if (reduced[d]) inner = d;
  }
  if (inner == r || !X.type.shape[inner].isStatic()) return std::nullopt;
  KernelSchedule::SumRun run{inner, inner, X.type.shape[inner].value()};
  // Without a prologue, reduced axes contiguous in memory join the run (a global average pool's rows).
  if (k.prologue.empty() && X.strides[inner] == 1) {
    while (run.first > 0 && reduced[run.first - 1] && X.type.shape[run.first - 1].isStatic() &&
           X.strides[run.first - 1] == X.strides[run.first] * X.type.shape[run.first].value()) {
      --run.first;
      run.count *= X.type.shape[run.first].value();
    }
  }
  if (run.count < 16) return std::nullopt;
  run.staged = mathHeavy(k.prologue);
  return run;
}

std::vector<ir::Dim> loopExtents(const Kernel& k, const KernelSchedule& ks) {
  std::vector<ir::Dim> e = k.domain;
  for (size_t d = ks.collapseFrom; d + 1 < e.size(); ++d) {
    e.back() = ir::Dim(e.back().value() * e[d].value());
    e[d] = ir::Dim(1);
  }
  return e;
}

ShuffledLanes shuffledLanes(const std::array<int, 8>& sources) {
  std::vector<int> regs;  // the registers in lane order of first use, then the fill
  bool fill = false;
  for (int s : sources) {
    if (s == LaneShuffle::kFill) fill = true;
    else if (std::find(regs.begin(), regs.end(), s / 8) == regs.end()) regs.push_back(s / 8);
  }
  bool identity = regs.size() == 1 && !fill;
  for (int l = 0; identity && l < 8; ++l) identity = sources[static_cast<size_t>(l)] == regs[0] * 8 + l;
  if (identity) return ShuffledLanes{regs[0], {}};
  if (fill || regs.size() == 1) regs.push_back(LaneShuffle::kFill);
  auto from = [&](int s) { return s == LaneShuffle::kFill ? LaneShuffle::kFill : s / 8; };
  ShuffledLanes r;
  LaneShuffle first{regs[0], regs[1], {}};
  for (size_t l = 0; l < 8; ++l) {
    const int s = sources[l];
    first.mask[l] = from(s) == regs[1] ? 8 + (s == LaneShuffle::kFill ? 0 : s % 8) : (from(s) == regs[0] ? s % 8 : 0);
  }
  r.steps.push_back(first);
  for (size_t i = 2; i < regs.size(); ++i) {
    LaneShuffle step{LaneShuffle::kPrev, regs[i], {}};
    for (size_t l = 0; l < 8; ++l) {
      const int s = sources[l];
      step.mask[l] = from(s) == regs[i] ? 8 + (s == LaneShuffle::kFill ? 0 : s % 8) : static_cast<int>(l);
    }
    r.steps.push_back(step);
  }
  return r;
}

std::vector<RowTaps::Lanes> RowTaps::lanesOf(size_t k1) const {
  std::vector<Lanes> r;
  for (int64_t j = 0; j < chunks; ++j) {
    const int64_t first = std::max(lo[k1], 16 * j) - 16 * j, last = std::min(hi[k1], 16 * j + 16) - 16 * j;
    if (first < last) r.push_back({j, first, last});
  }
  return r;
}

std::optional<PadRows> padRows(const KernelProgram& p, const Kernel& k, const ThreadSplit& split) {
  if (formOf(p, k) != Form::Copy || !k.anchor->isOp(Op::Pad) || k.anchor->attrString("mode") != "constant") return std::nullopt;
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  const size_t r = X.type.rank();
  if (r < 2 || k.domain.size() != r || split.axis == static_cast<int>(r) - 1 || !X.type.shape[r - 1].isStatic()) return std::nullopt;
  const std::vector<int64_t>& pads = k.anchor->attrInts("pads");
  if (pads[r - 1] < 0 || pads[2 * r - 1] < 0) return std::nullopt;
  return PadRows{pads[r - 1], X.type.shape[r - 1].value()};
}

namespace {

// A 2-D conv's taps by rows (RowTaps), whatever its form and split.
RowTaps rowTapsOf(const KernelProgram& p, const Kernel& k) {
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  const ir::Node& n = *k.anchor;
  const int64_t stride = spatialList(n, "strides", 2, 1)[1], dil = spatialList(n, "dilations", 2, 1)[1];
  const int64_t pad = spatialList(n, "pads", 4, 0)[1], W = X.type.shape[3].value(), OW = k.domain[3].value();
  const int64_t KW = p.buffer(k.anchorInputs[1]).type.shape[3].value();
  RowTaps t;
  rowTaps(W, OW, KW, stride, dil, pad, t.lo, t.hi);
  t.dilation = dil;
  t.pad = pad;
  const Buffer& weight = p.buffer(k.anchorInputs[1]);
  const bool f32 = X.type.dtype == DType::F32 && weight.type.dtype == DType::F32;
  if (stride == 1 && f32 && OW <= 256) t.chunks = (OW + 15) / 16;
  const Buffer& root = p.buffer(weight.root);
  // An updatable weight stays finite: set_weights refuses values that are not (pc::checkWeights).
  if (f32 && root.kind == BufferKind::Param && root.type.dtype == DType::F32) {
    const ir::Tensor& data = root.value->producer()->paramData();
    const float* w = data.data<float>();
    t.finiteWeights = std::all_of(w, w + data.numel(), [](float v) { return std::isfinite(v); });
  }
  return t;
}

}  // namespace

std::optional<RowTaps> convRowTaps(const KernelProgram& p, const Kernel& k, const ThreadSplit& split) {
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  if (formOf(p, k) != Form::DirectConv || X.type.rank() != 4 || split.axis == 3) return std::nullopt;
  return rowTapsOf(p, k);
}

std::optional<ConvRowTiles> convRowTiles(const KernelProgram& p, const Kernel& k, bool wideVectors) {
  if (k.kind != KernelKind::Conv || !packable(p, k)) return std::nullopt;
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  if (X.strides[3] != 1 || !k.domain[0].isBatch()) return std::nullopt;
  ConvRowTiles t;
  t.taps = rowTapsOf(p, k);
  // Lanes past the row are loaded as zeros and multiplied by every channel's weight: only
  // finite weights leave the sums as they are.
  if (t.taps.chunks == 0 || !t.taps.finiteWeights) return std::nullopt;
  if (wideVectors) {
    t.passChunks = std::min<int64_t>(t.taps.chunks, 2);
    t.channels = kConvRowsWideAccumulators / t.passChunks;
  } else {
    t.channels = kConvRowsChannels;
  }
  t.blocks = (k.domain[1].value() + t.channels - 1) / t.channels;
  t.C = X.type.shape[1].value();
  t.H = X.type.shape[2].value();
  t.KH = p.buffer(k.anchorInputs[1]).type.shape[2].value();
  t.M = k.domain[1].value();
  t.OH = k.domain[2].value();
  t.OW = k.domain[3].value();
  t.strideH = spatialList(*k.anchor, "strides", 2, 1)[0];
  t.dilationH = spatialList(*k.anchor, "dilations", 2, 1)[0];
  t.padTop = spatialList(*k.anchor, "pads", 4, 0)[0];
  t.bias = k.anchorInputs.size() > 2;
  t.rows = t.OW <= 8 ? 2 : 1;
  t.rowUnits = (t.OH + t.rows - 1) / t.rows;
  return t;
}

std::vector<WinogradTiles::Run> WinogradTiles::inputRuns(int64_t ty) const {
  std::vector<Run> runs;
  for (int64_t x0 = 0; x0 < TW;) {
    const int64_t t = ty * TW + x0, lane = t % 16, left = std::min(TW - x0, 16 - lane);
    const int64_t count = wideRuns && lane == 0 && left == 16 ? 16 : std::min<int64_t>(left, 8);
    runs.push_back({x0, count, t / 16, lane});
    x0 += count;
  }
  return runs;
}

std::vector<WinogradTiles::Run> WinogradTiles::outputRuns() const {
  std::vector<Run> runs;
  for (int64_t x0 = 0; x0 < TW;) {
    const int64_t count = wideRuns && TW - x0 >= 16 ? 16 : std::min<int64_t>(TW - x0, 8);
    runs.push_back({x0, count, 0, 0});
    x0 += count;
  }
  return runs;
}

std::optional<WinogradTiles> winogradTiles(const KernelProgram& p, const Kernel& k, bool wideVectors) {
  if (k.kind != KernelKind::Conv || !packable(p, k)) return std::nullopt;
  const ir::Node& n = *k.anchor;
  const Buffer& X = p.buffer(k.anchorInputs[0]);
  const Buffer& weight = p.buffer(k.anchorInputs[1]);
  const ir::Shape& ws = weight.type.shape;
  if (ws[2].value() != 3 || ws[3].value() != 3) return std::nullopt;
  for (int64_t v : spatialList(n, "strides", 2, 1)) {
    if (v != 1) return std::nullopt;
  }
  for (int64_t v : spatialList(n, "dilations", 2, 1)) {
    if (v != 1) return std::nullopt;
  }
  const ir::Node& param = *weight.value->producer();
  if (param.isUpdatable()) return std::nullopt;  // U is no permutation of the weights set_weights moves
  const ir::Tensor& data = param.paramData();
  const float* w = data.data<float>();
  if (!std::all_of(w, w + data.numel(), [](float v) { return std::isfinite(v); })) return std::nullopt;
  WinogradTiles t;
  t.C = X.type.shape[1].value();
  t.H = X.type.shape[2].value();
  t.W = X.type.shape[3].value();
  t.M = k.domain[1].value();
  t.OH = k.domain[2].value();
  t.OW = k.domain[3].value();
  // An odd output's last tile row and column compute outputs past it (from zeroed band values), dropped.
  t.TW = (t.OW + 1) / 2;
  t.TH = (t.OH + 1) / 2;
  if (t.TW < 2 || t.TW > kMaxWinogradTiles) return std::nullopt;
  const std::vector<int64_t> pads = spatialList(n, "pads", 4, 0);
  t.padTop = pads[0];
  t.padLeft = pads[1];
  // 8 channels by one or two vectors of tiles with AVX-512 (16 rows by one vector, 16 accumulators,
  // ran 1.1x slower: the rows' 16 pointers outnumber the general registers), 6 by a vector's two
  // halves with AVX2's 16 registers.
  t.rows = wideVectors ? 8 : 6;
  t.wideRuns = wideVectors;
  t.bias = k.anchorInputs.size() > 2;
  // The band whose GEMMs multiply the fewest vector lanes over the image (its tiles fill its
  // vectors best), among equals the one nearest 32 tiles (as many as two vectors: fewer bands to
  // copy, and its transformed input stays in L1 up to 32 channels), within the stack buffers.
  std::optional<WinogradTiles> best;
  int64_t bestLanes = 0;
  for (int64_t rows = 1; rows <= std::min(t.TH, kMaxWinogradTiles / t.TW); ++rows) {
    WinogradTiles c = t;
    c.bandRows = rows;
    c.bands = (t.TH + rows - 1) / rows;
    c.panels = (c.tiles() + 15) / 16;
    if (c.bandFloats() + c.inputFloats() > kMaxWinogradFloats) continue;
    const int64_t lanes = c.bands * c.panels * 16;
    auto far = [](const WinogradTiles& x) { return x.tiles() <= 32 ? 32 - x.tiles() : 2 * (x.tiles() - 32); };
    if (!best || lanes < bestLanes || (lanes == bestLanes && far(c) < far(*best))) {
      best = c;
      bestLanes = lanes;
    }
  }
  return best;
}

}  // namespace policyc::codegen
