// ONNX operators that rearrange or accumulate along an axis, as IR ops: DepthToSpace and
// SpaceToDepth (a reshape, a transpose and a reshape), OneHot (a comparison with a constant range),
// CumSum (a running sum of slices, in the order numpy adds them).
#include "onnx_ops.h"
#include "onnx_tensor.h"

namespace policyc::frontend {
namespace {

using ir::Op;

// Sums are accumulated one slice at a time: at most this many along the axis.
constexpr int64_t kMaxCumSumLength = 1024;

struct Spatial {
  int64_t c, h, w;
};

Spatial nchw(NodeContext& ctx, const ir::TensorType& t) {
  if (t.rank() != 4) ctx.fail("{} takes an [N, C, H, W] input, got {}", ctx.opType(), t.str());
  for (size_t d = 1; d < 4; ++d) {
    if (t.shape[d].isBatch()) ctx.fail("{} needs static C, H and W, got {}", ctx.opType(), t.str());
  }
  return {t.shape[1].value(), t.shape[2].value(), t.shape[3].value()};
}

int64_t blocksize(NodeContext& ctx) {
  const std::optional<int64_t> b = ctx.attrInt("blocksize");
  if (!b || *b < 1 || *b > 4096) ctx.fail("attribute blocksize must be given, between 1 and 4096");
  return *b;
}

}  // namespace

// [N, C, H, W] -> [N, C/b², H*b, W*b]: DCR reads the channels as [b, b, C/b²], CRD as [C/b², b, b].
void convertDepthToSpace(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const Spatial s = nchw(ctx, x.type());
  const int64_t b = blocksize(ctx);
  const std::string mode = ctx.attrString("mode").value_or("DCR");
  if (mode != "DCR" && mode != "CRD") ctx.fail("mode '{}' is not supported (DCR or CRD)", mode);
  if (s.c % (b * b) != 0) ctx.fail("{} channels are not a multiple of blocksize² = {}", s.c, b * b);
  const int64_t ch = s.c / (b * b);
  const bool dcr = mode == "DCR";
  const std::vector<int64_t> splitShape = dcr ? std::vector<int64_t>{0, b, b, ch, s.h, s.w} : std::vector<int64_t>{0, ch, b, b, s.h, s.w};
  ImportedValue split = c.op(Op::Reshape, {x}, "split", {{"shape", splitShape}});
  ImportedValue moved = c.op(Op::Transpose, {split}, "moved",
                             {{"perm", dcr ? std::vector<int64_t>{0, 3, 4, 1, 5, 2} : std::vector<int64_t>{0, 1, 4, 2, 5, 3}}});
  c.result(Op::Reshape, {moved}, {{"shape", std::vector<int64_t>{0, ch, s.h * b, s.w * b}}});
}

// [N, C, H, W] -> [N, C*b², H/b, W/b], the inverse of DepthToSpace in DCR order.
void convertSpaceToDepth(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const Spatial s = nchw(ctx, x.type());
  const int64_t b = blocksize(ctx);
  if (s.h % b != 0 || s.w % b != 0) ctx.fail("H={} and W={} must be multiples of blocksize {}", s.h, s.w, b);
  ImportedValue split = c.op(Op::Reshape, {x}, "split", {{"shape", std::vector<int64_t>{0, s.c, s.h / b, b, s.w / b, b}}});
  ImportedValue moved = c.op(Op::Transpose, {split}, "moved", {{"perm", std::vector<int64_t>{0, 3, 5, 1, 2, 4}}});
  c.result(Op::Reshape, {moved}, {{"shape", std::vector<int64_t>{0, s.c * b * b, s.h / b, s.w / b}}});
}

// values[1] where the index (negative ones counted from depth) equals the position along the new
// axis, values[0] elsewhere; float indices are truncated, as ONNX says.
void convertOneHot(NodeContext& ctx) {
  Composer c(ctx);
  ImportedValue indices = ctx.input(0);
  const ir::TensorType it = indices.type();
  const ir::Tensor& depthT = ctx.constantInput(1, "depth");
  if (depthT.numel() != 1) ctx.fail("depth (input '{}') must hold one value, got {}", ctx.input(1).name, depthT.type().str());
  const double depthValue = depthT.getAsDouble(0);
  if (!(depthValue >= 1) || depthValue > static_cast<double>(kMaxImportElements)) {
    ctx.fail("depth {} is not a size policyc supports (1 to 2^26)", depthValue);
  }
  const auto depth = static_cast<int64_t>(depthValue);
  const ImportedValue& values = ctx.input(2);
  if (values.type().shape != ir::Shape{ir::Dim(2)}) ctx.fail("values (input '{}') must be [2], got {}", values.name, values.type().str());
  const auto rank = static_cast<int64_t>(it.rank()) + 1;
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for an output of rank {}", axis, rank);
  if (axis < 0) axis += rank;

  const std::string i64(ir::dtypeName(ir::DType::I64));
  if (it.dtype != ir::DType::I64) indices = c.op(Op::Cast, {indices}, "index", {{"to", i64}});
  ir::Tensor zero(ir::DType::I64, {}), d(ir::DType::I64, {});
  d.setAsDouble(0, static_cast<double>(depth));
  ImportedValue negative = c.op(Op::Less, {indices, c.constant(zero, "zero")}, "negative");
  ImportedValue wrapped = c.op(Op::Add, {indices, c.constant(d, "depth")}, "wrapped");
  ImportedValue index = c.op(Op::Where, {negative, wrapped, indices}, "wrapped_index");
  ImportedValue column = c.op(Op::Unsqueeze, {index}, "column", {{"axes", std::vector<int64_t>{axis}}});
  std::vector<int64_t> rangeShape(static_cast<size_t>(rank), 1);
  rangeShape[static_cast<size_t>(axis)] = depth;
  ir::Tensor range(ir::DType::I64, rangeShape);
  for (int64_t k = 0; k < depth; ++k) range.data<int64_t>()[k] = k;
  ImportedValue hot = c.op(Op::Equal, {column, c.constant(std::move(range), "range")}, "hot");
  auto pick = [&](int64_t k) {
    ir::Tensor at(ir::DType::I64, {});
    at.setAsDouble(0, static_cast<double>(k));
    return c.op(Op::Gather, {values, c.constant(std::move(at), k ? "on_index" : "off_index")}, k ? "on" : "off", {{"axis", int64_t{0}}});
  };
  c.result(Op::Where, {hot, pick(1), pick(0)});
}

// y[i] = x[0] + ... + x[i] along the axis (exclusive: up to x[i-1]; reverse: from the end), the
// slices added in order, so the rounding is numpy's.
void convertCumSum(NodeContext& ctx) {
  Composer c(ctx);
  const ImportedValue& x = ctx.input(0);
  const ir::TensorType t = x.type();
  const ir::Tensor& axisT = ctx.constantInput(1, "axis");
  if (axisT.numel() != 1) ctx.fail("axis (input '{}') must hold one value", ctx.input(1).name);
  const auto rank = static_cast<int64_t>(t.rank());
  int64_t axis = axisT.getAsInt(0);
  if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for {}", axis, t.str());
  if (axis < 0) axis += rank;
  const ir::Dim d = t.shape[static_cast<size_t>(axis)];
  if (d.isBatch()) ctx.fail("CumSum along the batch dim of {} is not supported", t.str());
  const int64_t n = d.value();
  if (n > kMaxCumSumLength) ctx.fail("CumSum over {} elements; policyc sums slice by slice, at most {}", n, kMaxCumSumLength);
  const bool exclusive = ctx.attrInt("exclusive", 0) != 0, reverse = ctx.attrInt("reverse", 0) != 0;
  if (n == 0) {
    c.result(Op::Identity, {x});
    return;
  }
  auto slice = [&](int64_t i) {
    return c.op(Op::Slice, {x}, fmt::format("x{}", i),
                {{"starts", std::vector<int64_t>{i}}, {"ends", std::vector<int64_t>{i + 1}}, {"axes", std::vector<int64_t>{axis}}});
  };
  std::vector<ImportedValue> sums(static_cast<size_t>(n));
  ImportedValue running;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = reverse ? n - 1 - k : k;
    if (exclusive) {
      // The first is zeros shaped like a slice (a where over a false condition: x's slice
      // times 0 would turn an inf into NaN).
      if (k == 0) {
        const std::vector<int64_t> ones(static_cast<size_t>(rank), 1);
        ImportedValue s0 = slice(i);
        sums[static_cast<size_t>(i)] = c.op(Op::Where, {c.constant(ir::Tensor(ir::DType::Bool, ones), "never"), s0,
                                                        c.constant(ir::Tensor(t.dtype, ones), "zeros")},
                                            "zero_row");
        running = s0;
        continue;
      }
      sums[static_cast<size_t>(i)] = running;
      if (k + 1 < n) running = c.op(Op::Add, {running, slice(i)}, fmt::format("sum{}", k));
      continue;
    }
    running = k == 0 ? slice(i) : c.op(Op::Add, {running, slice(i)}, fmt::format("sum{}", k));
    sums[static_cast<size_t>(i)] = running;
  }
  c.result(Op::Concat, sums, {{"axis", axis}});
}

}  // namespace policyc::frontend
