// Per-operator conversion from ONNX (opsets 11-21) to the IR ops of ops.def: one small function
// per ONNX op, found through one table. Constant inputs become attributes here.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "import_context.h"
#include "onnx_ops.h"
#include "onnx_tensor.h"

namespace policyc::frontend {

using ir::AttrMap;
using ir::Op;

std::vector<ImportedValue> allInputs(NodeContext& ctx) {
  std::vector<ImportedValue> ins;
  for (size_t i = 0; i < ctx.numInputs(); ++i) ins.push_back(ctx.input(i));
  return ins;
}

double scalarInput(NodeContext& ctx, size_t i, std::string_view role) {
  const ir::Tensor& t = ctx.constantInput(i, role);
  if (t.numel() != 1) ctx.fail("{} (input '{}') must hold one value, got {}", role, ctx.input(i).name, t.type().str());
  return t.getAsDouble(0);
}

ImportedValue chainBinary(NodeContext& ctx, Op op, const std::vector<ImportedValue>& ins, const std::string& out) {
  if (ins.size() == 1) return ctx.emit(Op::Identity, ins, {}, out);
  ImportedValue acc = ins[0];
  for (size_t i = 1; i < ins.size(); ++i) {
    std::string name = i + 1 == ins.size() ? out : ctx.freshName(fmt::format("{}_{}", out, i));
    acc = ctx.emit(op, {acc, ins[i]}, {}, name);
  }
  return acc;
}

ReduceSpec reduceSpec(NodeContext& ctx) {
  ReduceSpec r;
  std::optional<std::vector<int64_t>> attrAxes = ctx.attrInts("axes");
  if (attrAxes && ctx.hasInput(1)) ctx.fail("axes is given both as an attribute and as an input");
  if (attrAxes) r.axes = *attrAxes;
  if (ctx.hasInput(1)) r.axes = ctx.constantInts(1, "axes");
  r.keepdims = ctx.attrInt("keepdims", 1);
  r.noop = r.axes.empty() && ctx.attrInt("noop_with_empty_axes", 0) != 0;
  return r;
}

namespace {

// One ONNX op onto one IR op, inputs as they are, no attributes.
template <Op kOp>
void convertDirect(NodeContext& ctx) {
  ctx.setOutput(0, ctx.emit(kOp, allInputs(ctx), {}, ctx.outputName(0)));
}

// Copies float attribute `name` when the model gives it (the IR defaults equal ONNX's otherwise).
void copyFloat(NodeContext& ctx, AttrMap& attrs, std::string_view name) {
  if (auto v = ctx.attrFloat(name)) attrs[std::string(name)] = *v;
}

template <Op kOp>
void convertAlpha(NodeContext& ctx) {
  AttrMap attrs;
  copyFloat(ctx, attrs, "alpha");
  ctx.setOutput(0, ctx.emit(kOp, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

void convertSelu(NodeContext& ctx) {
  AttrMap attrs;
  copyFloat(ctx, attrs, "alpha");
  copyFloat(ctx, attrs, "gamma");
  ctx.setOutput(0, ctx.emit(Op::Selu, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

void convertHardSigmoid(NodeContext& ctx) {
  AttrMap attrs;
  copyFloat(ctx, attrs, "alpha");
  copyFloat(ctx, attrs, "beta");
  ctx.setOutput(0, ctx.emit(Op::HardSigmoid, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

// ---- linear algebra, convolution, pooling

void convertGemm(NodeContext& ctx) {
  AttrMap attrs;
  copyFloat(ctx, attrs, "alpha");
  copyFloat(ctx, attrs, "beta");
  attrs["trans_a"] = ctx.attrInt("transA", 0);
  attrs["trans_b"] = ctx.attrInt("transB", 0);
  std::vector<ImportedValue> ins = {ctx.input(0), ctx.input(1)};
  if (const ImportedValue* c = ctx.optionalInput(2)) ins.push_back(*c);
  if (ins[0].isFolded()) {
    // A's rows fold the batch (nn.MultiheadAttention's output projection over [T*batch, E]): a
    // matmul over its IR dims, then alpha and beta*C as elementwise ops.
    if (std::get<int64_t>(attrs["trans_a"]) != 0) ctx.fail("transA=1 with A of shape {} is not supported", onnxDimsStr(ins[0].dims()));
    const std::string out = ctx.outputName(0);
    ImportedValue b = ins[1];
    if (std::get<int64_t>(attrs["trans_b"]) != 0) b = ctx.emit(Op::Transpose, {b}, {}, ctx.freshName(out + "_bt"));
    ImportedValue y = ctx.emit(Op::MatMul, {ins[0], b}, {}, ctx.freshName(out + "_ab"));
    auto scaled = [&](ImportedValue v, const char* attr) {
      auto it = attrs.find(attr);
      if (it == attrs.end() || std::get<double>(it->second) == 1.0) return v;
      ir::Tensor s(ir::DType::F32, {});
      s.setAsDouble(0, std::get<double>(it->second));
      ImportedValue c = ImportedValue::constant(std::move(s), ctx.freshName(out + "_" + attr), ctx.provenance());
      return ctx.emit(Op::Mul, {v, c}, {}, ctx.freshName(out + "_" + attr + "_scaled"));
    };
    y = scaled(y, "alpha");
    if (ins.size() == 3) y = ctx.emit(Op::Add, {y, scaled(ins[2], "beta")}, {}, ctx.freshName(out + "_c"));
    ctx.setOutput(0, ctx.emit(Op::Identity, {y}, {}, out));
    return;
  }
  ctx.setOutput(0, ctx.emit(Op::Gemm, ins, std::move(attrs), ctx.outputName(0)));
}

// An optional per-spatial-dim list attribute (strides, dilations): all ones when absent.
std::vector<int64_t> spatialAttr(NodeContext& ctx, std::string_view name, size_t spatial) {
  std::optional<std::vector<int64_t>> v = ctx.attrInts(name);
  if (!v) return std::vector<int64_t>(spatial, 1);
  if (v->size() != spatial) ctx.fail("attribute {} has {} values for {} spatial dims", name, v->size(), spatial);
  for (int64_t x : *v) {
    if (x < 1) ctx.fail("attribute {} must be positive, got {}", name, x);
  }
  return *v;
}

// Explicit pads (begins, then ends) from `pads` and `auto_pad`; SAME_* needs static spatial dims.
std::vector<int64_t> resolvePads(NodeContext& ctx, const ir::TensorType& x, const std::vector<int64_t>& kernel,
                                 const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations) {
  const size_t n = kernel.size();
  std::string autoPad = ctx.attrString("auto_pad").value_or("NOTSET");
  std::optional<std::vector<int64_t>> pads = ctx.attrInts("pads");
  if (pads && pads->size() != 2 * n) ctx.fail("attribute pads has {} values, expected {}", pads->size(), 2 * n);
  if (autoPad == "NOTSET") return pads.value_or(std::vector<int64_t>(2 * n, 0));
  if (pads && std::any_of(pads->begin(), pads->end(), [](int64_t p) { return p != 0; })) {
    ctx.fail("attribute pads cannot be combined with auto_pad={}", autoPad);
  }
  if (autoPad == "VALID") return std::vector<int64_t>(2 * n, 0);
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER") {
    ctx.fail("attribute auto_pad={} is not supported (NOTSET, VALID, SAME_UPPER or SAME_LOWER)", autoPad);
  }
  if (x.rank() != n + 2) ctx.fail("input {} has rank {}, expected {} for a {}-D kernel", x.str(), x.rank(), n + 2, n);
  std::vector<int64_t> out(2 * n, 0);
  for (size_t i = 0; i < n; ++i) {
    ir::Dim d = x.shape[2 + i];
    if (d.isBatch()) ctx.fail("auto_pad={} needs static spatial dims, but the input is {}", autoPad, x.str());
    // ONNX: the output has ceil(in / stride) elements; the padding that takes is split evenly,
    // the odd element going at the end (SAME_UPPER) or at the beginning (SAME_LOWER).
    int64_t in = d.value();
    int64_t outSize = (in + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(0, (outSize - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in);
    int64_t begin = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    out[i] = begin;
    out[i + n] = total - begin;
  }
  return out;
}

}  // namespace

AttrMap convAttributes(NodeContext& ctx, const ir::TensorType& x, const ir::TensorType& wt) {
  if (wt.rank() < 3) ctx.fail("weight of type {} has not rank 3 or more", wt.str());
  const size_t spatial = wt.rank() - 2;
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < spatial; ++i) {
    if (wt.shape[2 + i].isBatch()) ctx.fail("weight of type {}: its kernel dims must be static", wt.str());
    kernel.push_back(wt.shape[2 + i].value());
  }
  if (auto given = ctx.attrInts("kernel_shape"); given && *given != kernel) {
    ctx.fail("attribute kernel_shape={} does not match the weight of type {}", ir::attrValueStr(*given), wt.str());
  }
  std::vector<int64_t> strides = spatialAttr(ctx, "strides", spatial);
  std::vector<int64_t> dilations = spatialAttr(ctx, "dilations", spatial);
  AttrMap attrs;
  attrs["kernel_shape"] = kernel;
  attrs["strides"] = strides;
  attrs["dilations"] = dilations;
  attrs["pads"] = resolvePads(ctx, x, kernel, strides, dilations);
  attrs["group"] = ctx.attrInt("group", 1);
  return attrs;
}

namespace {

void convertConv(NodeContext& ctx) {
  const ImportedValue& x = ctx.input(0);
  const ImportedValue& w = ctx.input(1);
  std::vector<ImportedValue> ins = {x, w};
  if (const ImportedValue* b = ctx.optionalInput(2)) ins.push_back(*b);
  ctx.setOutput(0, ctx.emit(Op::Conv, ins, convAttributes(ctx, x.type(), w.type()), ctx.outputName(0)));
}

// ConvTranspose as the convolution it is the gradient of: the input with stride-1 zeros between
// its elements (an unsqueeze, a zero pad and a reshape per strided axis), padded by what is left
// of the kernel's reach, convolved at stride 1 with the weight flipped and its two channel dims
// swapped within each group. The weight must be known at import.
void convertConvTranspose(NodeContext& ctx) {
  const ImportedValue& x = ctx.input(0);
  const ir::TensorType xt = x.type();
  const ir::Tensor& w = ctx.constantInput(1, "the weight W");
  const std::vector<int64_t>& ws = w.shape();
  if (ws.size() < 3 || xt.rank() != ws.size()) ctx.fail("weight {} does not fit input {}", w.type().str(), xt.str());
  const size_t spatial = ws.size() - 2;
  const int64_t group = ctx.attrInt("group", 1);
  const int64_t cinTotal = ws[0], coutPerGroup = ws[1];
  if (group < 1 || cinTotal % group != 0) ctx.fail("group {} does not divide the weight's {} input channels", group, cinTotal);
  if (xt.shape[1] != ir::Dim(cinTotal)) ctx.fail("input {} has not the weight's {} input channels", xt.str(), cinTotal);
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  if (auto given = ctx.attrInts("kernel_shape"); given && *given != kernel) {
    ctx.fail("attribute kernel_shape={} does not match the weight {}", ir::attrValueStr(*given), w.type().str());
  }
  const std::vector<int64_t> strides = spatialAttr(ctx, "strides", spatial);
  const std::vector<int64_t> dilations = spatialAttr(ctx, "dilations", spatial);
  std::vector<int64_t> outPad = ctx.attrInts("output_padding").value_or(std::vector<int64_t>(spatial, 0));
  if (outPad.size() != spatial) ctx.fail("attribute output_padding has {} values for {} spatial dims", outPad.size(), spatial);
  std::vector<int64_t> in(spatial);
  for (size_t i = 0; i < spatial; ++i) {
    if (xt.shape[2 + i].isBatch()) ctx.fail("input {} must have static spatial dims", xt.str());
    in[i] = xt.shape[2 + i].value();
    // Bounded so that the sizes below cannot overflow: the zero-inserted input and the kernel's reach.
    if (strides[i] > kMaxImportElements / std::max<int64_t>(in[i], 1) || dilations[i] > kMaxImportElements / kernel[i]) {
      ctx.fail("strides {} or dilations {} are too large for input {}", ir::attrValueStr(strides), ir::attrValueStr(dilations), xt.str());
    }
    if (outPad[i] < 0 || outPad[i] >= std::max(strides[i], dilations[i])) {
      ctx.fail("output_padding[{}] = {} must be below the stride or the dilation", i, outPad[i]);
    }
  }
  // Padding: given, or worked out from output_shape or auto_pad as ONNX says.
  std::vector<int64_t> pads = ctx.attrInts("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  if (pads.size() != 2 * spatial) ctx.fail("attribute pads has {} values, expected {}", pads.size(), 2 * spatial);
  for (int64_t p : pads) {
    if (p < 0 || p > kMaxImportElements) ctx.fail("attribute pads {} must be between 0 and 2^26", ir::attrValueStr(pads));
  }
  const std::string autoPad = ctx.attrString("auto_pad").value_or("NOTSET");
  std::optional<std::vector<int64_t>> outputShape = ctx.attrInts("output_shape");
  if (outputShape && outputShape->size() == spatial + 2) outputShape->erase(outputShape->begin(), outputShape->begin() + 2);
  if (outputShape && outputShape->size() != spatial) ctx.fail("attribute output_shape has {} values for {} spatial dims", outputShape->size(), spatial);
  for (int64_t d : outputShape.value_or(std::vector<int64_t>{})) {
    if (d < 1 || d > kMaxImportElements) ctx.fail("attribute output_shape {} must be between 1 and 2^26", ir::attrValueStr(*outputShape));
  }
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER") {
    ctx.fail("attribute auto_pad={} is not supported", autoPad);
  }
  if (outputShape || autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t want = outputShape ? (*outputShape)[i] : in[i] * strides[i];
      const int64_t total = strides[i] * (in[i] - 1) + outPad[i] + (kernel[i] - 1) * dilations[i] + 1 - want;
      // A negative total makes the output larger: the convolution pads more at the end.
      const bool upper = autoPad != "SAME_LOWER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[i + spatial] = total - pads[i];
    }
  } else if (autoPad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  }

  const std::string out = ctx.outputName(0);
  ImportedValue z = x;
  std::vector<int64_t> cur = in;  // z's spatial sizes
  for (size_t i = 0; i < spatial; ++i) {
    if (strides[i] == 1) continue;
    const auto axis = static_cast<int64_t>(2 + i);
    // [.., n, ..] -> [.., n, 1, ..] -> [.., n, s, ..] (zeros after each element) -> [.., n*s, ..]
    ImportedValue u = ctx.emit(Op::Unsqueeze, {z}, {{"axes", std::vector<int64_t>{axis + 1}}}, ctx.freshName(out + "_u"));
    std::vector<int64_t> zp(2 * (xt.rank() + 1), 0);
    zp[static_cast<size_t>(axis + 1) + xt.rank() + 1] = strides[i] - 1;
    ImportedValue spread = ctx.emit(Op::Pad, {u}, {{"pads", zp}}, ctx.freshName(out + "_spread"));
    cur[i] = in[i] * strides[i];
    std::vector<int64_t> shape(2, 0);  // batch and channels as they are
    shape.insert(shape.end(), cur.begin(), cur.end());
    z = ctx.emit(Op::Reshape, {spread}, {{"shape", shape}}, ctx.freshName(out + "_dilated"));
  }
  // The convolution's own padding: the kernel's reach less the transposed one's pads; the
  // stride's trailing zeros of the last element count against the end.
  std::vector<int64_t> convPads(2 * spatial), starts, ends, axes;
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t reach = dilations[i] * (kernel[i] - 1);
    const int64_t zlen = in[i] * strides[i];
    int64_t begin = reach - pads[i];
    int64_t end = reach - pads[i + spatial] + outPad[i] - (strides[i] - 1);
    int64_t cropBegin = 0, cropEnd = zlen;
    if (begin < 0) {
      cropBegin = -begin;
      begin = 0;
    }
    if (end < 0) {
      cropEnd = zlen + end;
      end = 0;
    }
    if (cropBegin != 0 || cropEnd != zlen) {
      if (cropEnd <= cropBegin) ctx.fail("pads leave nothing of spatial axis {}", i);
      starts.push_back(cropBegin);
      ends.push_back(cropEnd);
      axes.push_back(static_cast<int64_t>(2 + i));
    }
    convPads[i] = begin;
    convPads[i + spatial] = end;
  }
  if (!axes.empty()) {
    z = ctx.emit(Op::Slice, {z}, {{"starts", starts}, {"ends", ends}, {"axes", axes}}, ctx.freshName(out + "_cropped"));
  }
  // W' [group * cout, cin / group, k...]: channels swapped within each group, kernel flipped.
  const int64_t cinPerGroup = cinTotal / group;
  int64_t taps = 1;
  for (int64_t k : kernel) taps *= k;
  std::vector<int64_t> flippedShape = {group * coutPerGroup, cinPerGroup};
  flippedShape.insert(flippedShape.end(), kernel.begin(), kernel.end());
  ir::Tensor flipped(w.dtype(), flippedShape);
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t ci = 0; ci < cinPerGroup; ++ci) {
      for (int64_t co = 0; co < coutPerGroup; ++co) {
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t src = ((g * cinPerGroup + ci) * coutPerGroup + co) * taps + t;
          const int64_t dst = ((g * coutPerGroup + co) * cinPerGroup + ci) * taps + (taps - 1 - t);
          flipped.setAsDouble(dst, w.getAsDouble(src));
        }
      }
    }
  }
  ImportedValue wf = ImportedValue::constant(std::move(flipped), ctx.freshName(out + "_w"), ctx.provenance());
  AttrMap attrs;
  attrs["kernel_shape"] = kernel;
  attrs["strides"] = std::vector<int64_t>(spatial, 1);
  attrs["dilations"] = dilations;
  attrs["pads"] = convPads;
  attrs["group"] = group;
  std::vector<ImportedValue> ins = {z, wf};
  if (const ImportedValue* b = ctx.optionalInput(2)) ins.push_back(*b);
  ctx.setOutput(0, ctx.emit(Op::Conv, ins, std::move(attrs), out));
}

std::vector<int64_t> requiredKernel(NodeContext& ctx) {
  std::optional<std::vector<int64_t>> kernel = ctx.attrInts("kernel_shape");
  if (!kernel || kernel->empty()) ctx.fail("attribute kernel_shape is required");
  for (int64_t k : *kernel) {
    if (k < 1) ctx.fail("attribute kernel_shape must be positive, got {}", ir::attrValueStr(*kernel));
  }
  return *kernel;
}

void convertMaxPool(NodeContext& ctx) {
  ctx.requireUnusedOutputs(1, "policyc's max_pool does not compute the Indices output");
  ctx.ignoreAttr("storage_order");  // only affects the Indices output
  std::vector<int64_t> kernel = requiredKernel(ctx);
  std::vector<int64_t> strides = spatialAttr(ctx, "strides", kernel.size());
  std::vector<int64_t> dilations = spatialAttr(ctx, "dilations", kernel.size());
  AttrMap attrs;
  attrs["kernel_shape"] = kernel;
  attrs["strides"] = strides;
  attrs["dilations"] = dilations;
  attrs["pads"] = resolvePads(ctx, ctx.inputType(0), kernel, strides, dilations);
  attrs["ceil_mode"] = ctx.attrInt("ceil_mode", 0);
  ctx.setOutput(0, ctx.emit(Op::MaxPool, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

void convertAveragePool(NodeContext& ctx) {
  std::vector<int64_t> kernel = requiredKernel(ctx);
  std::vector<int64_t> strides = spatialAttr(ctx, "strides", kernel.size());
  // dilations (opset 19): policyc's avg_pool has none; all 1 is the same pool.
  std::vector<int64_t> dilations = spatialAttr(ctx, "dilations", kernel.size());
  if (std::any_of(dilations.begin(), dilations.end(), [](int64_t d) { return d != 1; })) {
    ctx.fail("dilations={} are not supported (only 1)", ir::attrValueStr(dilations));
  }
  AttrMap attrs;
  attrs["kernel_shape"] = kernel;
  attrs["strides"] = strides;
  attrs["pads"] = resolvePads(ctx, ctx.inputType(0), kernel, strides, std::vector<int64_t>(kernel.size(), 1));
  attrs["ceil_mode"] = ctx.attrInt("ceil_mode", 0);
  attrs["count_include_pad"] = ctx.attrInt("count_include_pad", 0);
  ctx.setOutput(0, ctx.emit(Op::AvgPool, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

// ---- normalisation

void convertBatchNorm(NodeContext& ctx) {
  if (ctx.attrInt("training_mode", 0) != 0) {
    ctx.fail("training_mode=1 is not supported (policyc compiles inference; export the model in eval mode)");
  }
  ctx.requireUnusedOutputs(1, "running mean and variance outputs exist only in training mode");
  ctx.ignoreAttr("momentum");  // only updates running statistics in training
  AttrMap attrs;
  copyFloat(ctx, attrs, "epsilon");
  ctx.setOutput(0, ctx.emit(Op::BatchNorm, allInputs(ctx), std::move(attrs), ctx.outputName(0)));
}

void convertLayerNorm(NodeContext& ctx) {
  ctx.requireUnusedOutputs(1, "policyc's layer_norm does not compute the Mean and InvStdDev outputs");
  if (int64_t stash = ctx.attrInt("stash_type", 1); stash != 1) {
    ctx.fail("attribute stash_type={} is not supported (only 1, float statistics)", stash);
  }
  AttrMap attrs;
  attrs["axis"] = ctx.attrInt("axis", -1);
  copyFloat(ctx, attrs, "epsilon");
  std::vector<ImportedValue> ins = {ctx.input(0), ctx.input(1)};
  if (const ImportedValue* b = ctx.optionalInput(2)) ins.push_back(*b);
  ctx.setOutput(0, ctx.emit(Op::LayerNorm, ins, std::move(attrs), ctx.outputName(0)));
}

// ---- elementwise

void convertClip(NodeContext& ctx) {
  AttrMap attrs;
  if (ctx.hasInput(1)) attrs["min"] = scalarInput(ctx, 1, "min");
  if (ctx.hasInput(2)) attrs["max"] = scalarInput(ctx, 2, "max");
  ctx.setOutput(0, ctx.emit(Op::Clip, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

// Variadic Min/Max/Sum: a left-to-right chain of binary ops (one input: a copy).
template <Op kOp>
void convertVariadic(NodeContext& ctx) {
  ctx.setOutput(0, chainBinary(ctx, kOp, allInputs(ctx), ctx.outputName(0)));
}

void convertMod(NodeContext& ctx) {
  ctx.setOutput(0, ctx.emit(Op::Mod, allInputs(ctx), {{"fmod", ctx.attrInt("fmod", 0)}}, ctx.outputName(0)));
}

void convertGatherElements(NodeContext& ctx) {
  ctx.setOutput(0, ctx.emit(Op::GatherElements, allInputs(ctx), {{"axis", ctx.attrInt("axis", 0)}}, ctx.outputName(0)));
}

void convertCast(NodeContext& ctx) {
  std::optional<int64_t> to = ctx.attrInt("to");
  if (!to) ctx.fail("attribute to is required");
  std::optional<ir::DType> dtype = dtypeFromOnnx(static_cast<int32_t>(*to));
  if (!dtype) ctx.fail("Cast to {} is not supported", onnxTypeName(static_cast<int32_t>(*to)));
  AttrMap attrs;
  attrs["to"] = std::string(ir::dtypeName(*dtype));
  ctx.setOutput(0, ctx.emit(Op::Cast, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

// ---- reductions

// Softmax and LogSoftmax. Before opset 13 they work on the input coerced to 2-D at `axis`
// (default 1): every dim from `axis` on is one softmax row. That is a reshape to
// [leading dims..., product of the rest], a softmax over the last axis, and a reshape back.
template <Op kOp>
void convertSoftmax(NodeContext& ctx) {
  const bool coerce2d = ctx.opset() < 13;
  int64_t axis = ctx.attrInt("axis", coerce2d ? 1 : -1);
  const ImportedValue& x = ctx.input(0);
  const std::string out = ctx.outputName(0);
  if (!coerce2d) {
    ctx.setOutput(0, ctx.emit(kOp, {x}, {{"axis", axis}}, out));
    return;
  }
  ir::TensorType t = x.type();
  const auto rank = static_cast<int64_t>(t.rank());
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) ctx.fail("axis {} is out of range for {}", axis, t.str());
  if (axis < 0) axis += rank;
  if (axis >= rank - 1) {
    ctx.setOutput(0, ctx.emit(kOp, {x}, {{"axis", int64_t{-1}}}, out));
    return;
  }
  int64_t rowSize = 1;
  std::vector<int64_t> back;
  for (int64_t i = 0; i < rank; ++i) {
    ir::Dim d = t.shape[static_cast<size_t>(i)];
    if (i < axis) {
      back.push_back(0);  // copied from the 2-D tensor, which keeps the leading dims (and batch)
      continue;
    }
    if (d.isBatch()) {
      ctx.fail("axis {} of {} at opset {} takes softmax over the batch dim, which policyc does not support", axis,
               t.str(), ctx.opset());
    }
    rowSize *= d.value();
    back.push_back(d.value());
  }
  std::vector<int64_t> flat(static_cast<size_t>(axis), 0);
  flat.push_back(rowSize);
  ImportedValue rows = ctx.emit(Op::Reshape, {x}, {{"shape", flat}}, ctx.freshName(out + "_2d"));
  ImportedValue sm = ctx.emit(kOp, {rows}, {{"axis", int64_t{-1}}}, ctx.freshName(out + "_rows"));
  ctx.setOutput(0, ctx.emit(Op::Reshape, {sm}, {{"shape", back}}, out));
}

// ReduceMean/Sum/Max: axes as an attribute (before opset 13 for ReduceSum, through 17 for the
// others) or as an input; noop_with_empty_axes=1 with no axes is a copy.
template <Op kOp>
void convertReduce(NodeContext& ctx) {
  ReduceSpec r = reduceSpec(ctx);
  const std::string out = ctx.outputName(0);
  if (r.noop) {
    ctx.setOutput(0, ctx.emit(Op::Identity, {ctx.input(0)}, {}, out));
    return;
  }
  ctx.setOutput(0, ctx.emit(kOp, {ctx.input(0)}, {{"axes", r.axes}, {"keepdims", r.keepdims}}, out));
}

void convertArgMax(NodeContext& ctx) {
  AttrMap attrs;
  attrs["axis"] = ctx.attrInt("axis", 0);
  attrs["keepdims"] = ctx.attrInt("keepdims", 1);
  attrs["select_last_index"] = ctx.attrInt("select_last_index", 0);
  ctx.setOutput(0, ctx.emit(Op::ArgMax, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

// ---- data movement

void convertFlatten(NodeContext& ctx) {
  ctx.setOutput(0, ctx.emit(Op::Flatten, {ctx.input(0)}, {{"axis", ctx.attrInt("axis", 1)}}, ctx.outputName(0)));
}

// Reshape's shape as IR attribute from a vector of dims some of which are the batch size: a
// batch element becomes 0 (copy) where the input has its batch dim at the same axis, or -1 when
// it is the only element left to infer and the static sizes on both sides agree.
std::vector<int64_t> reshapeFromShapeVector(NodeContext& ctx, const ir::TensorType& in, const ImportedValue& sv) {
  const ir::Tensor& values = *sv.tensor;
  const ir::Tensor& mask = *sv.batchMask;
  if (values.shape().size() != 1) ctx.fail("shape input '{}' must be 1-D, got rank {}", sv.name, values.shape().size());
  std::vector<int64_t> shape = tensorInts(values);
  std::vector<size_t> unresolved;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (mask.getAsInt(static_cast<int64_t>(i)) == 0) continue;
    if (i < in.rank() && in.shape[i].isBatch()) {
      shape[i] = 0;
    } else {
      unresolved.push_back(i);
    }
  }
  if (unresolved.empty()) return shape;
  auto cannot = [&](std::string_view why) {
    ctx.fail("cannot reshape {} to a shape with the batch size at position {} ({})", in.str(), unresolved.front(), why);
  };
  if (unresolved.size() > 1) cannot("more than one such position does not line up with the input's batch dim");
  if (std::find(shape.begin(), shape.end(), -1) != shape.end()) cannot("the shape also has a -1");
  // The output keeps the input's batch dims that 0 elements copy; the one unresolved element
  // is batch exactly when one input batch dim is left over and the static sizes match.
  int64_t inStatic = 1, inBatch = 0, outStatic = 1, outBatch = 0;
  for (ir::Dim d : in.shape) {
    if (d.isBatch()) ++inBatch;
    else inStatic *= d.value();
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == unresolved.front()) continue;
    if (shape[i] != 0) {
      outStatic *= shape[i];
    } else if (i >= in.rank()) {
      cannot("a 0 copies a dim the input does not have");
    } else if (in.shape[i].isBatch()) {
      ++outBatch;
    } else {
      outStatic *= in.shape[i].value();
    }
  }
  if (inBatch != outBatch + 1 || inStatic != outStatic)
    cannot("the remaining sizes do not leave exactly the batch size");
  shape[unresolved.front()] = -1;
  return shape;
}

void convertReshape(NodeContext& ctx) {
  const ImportedValue& x = ctx.input(0);
  const ImportedValue& shapeIn = ctx.input(1);
  std::vector<int64_t> shape;
  bool literalZero = false;  // a 0 written in the model (not one standing for the batch size)
  // A multiple of the batch size in the target, or a folded input: reshaped on the IR dims.
  bool folded = x.isFolded();
  if (shapeIn.kind == ImportedValue::Kind::ShapeVector) {
    for (const OnnxDim& d : shapeIn.elementsAsDims()) {
      literalZero = literalZero || (d.coef == 0 && !d.batch);
      folded = folded || (d.batch && d.coef != 1);
    }
  } else {
    shape = ctx.constantInts(1, "shape");
    literalZero = std::find(shape.begin(), shape.end(), 0) != shape.end();
  }
  // allowzero=1 makes a 0 an empty dim instead of a copy of the input dim; the IR only copies.
  if (ctx.attrInt("allowzero", 0) != 0 && literalZero) {
    ctx.fail("allowzero=1 with a 0 in the shape is not supported");
  }
  if (folded) {
    std::vector<OnnxDim> target;
    if (shapeIn.kind == ImportedValue::Kind::ShapeVector) {
      target = shapeIn.elementsAsDims();
    } else {
      for (int64_t d : shape) target.push_back({d, false});
    }
    ctx.setOutput(0, reshapeFolded(ctx, x, std::move(target), ctx.outputName(0)));
    return;
  }
  if (shapeIn.kind == ImportedValue::Kind::ShapeVector) shape = reshapeFromShapeVector(ctx, x.type(), shapeIn);
  ctx.setOutput(0, ctx.emit(Op::Reshape, {x}, {{"shape", shape}}, ctx.outputName(0)));
}

void convertTranspose(NodeContext& ctx) {
  AttrMap attrs;
  if (auto perm = ctx.attrInts("perm")) attrs["perm"] = *perm;
  ctx.setOutput(0, ctx.emit(Op::Transpose, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

void convertConcat(NodeContext& ctx) {
  std::optional<int64_t> axis = ctx.attrInt("axis");
  if (!axis) ctx.fail("attribute axis is required");
  ctx.setOutput(0, ctx.emit(Op::Concat, allInputs(ctx), {{"axis", *axis}}, ctx.outputName(0)));
}

void convertSplit(NodeContext& ctx) {
  AttrMap attrs;
  attrs["axis"] = ctx.attrInt("axis", 0);
  std::optional<std::vector<int64_t>> split = ctx.attrInts("split");
  if (split && ctx.hasInput(1)) ctx.fail("split is given both as an attribute and as an input");
  if (ctx.hasInput(1)) split = ctx.constantInts(1, "split");
  // num_outputs (opset 18): parts of ceil(d / n), the last one smaller when d is not a multiple.
  if (std::optional<int64_t> n = ctx.attrInt("num_outputs")) {
    if (split) ctx.fail("num_outputs and split are both given");
    if (*n < 1 || *n != static_cast<int64_t>(ctx.numOutputs())) {
      ctx.fail("num_outputs={} but the node has {} outputs", *n, ctx.numOutputs());
    }
    const ir::TensorType t = ctx.inputType(0);
    const int64_t rank = static_cast<int64_t>(t.rank()), axis = std::get<int64_t>(attrs["axis"]);
    if (axis < -rank || axis >= rank) ctx.fail("axis {} is out of range for {}", axis, t.str());
    const ir::Dim d = t.shape[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
    if (d.isBatch()) ctx.fail("num_outputs splits the batch dimension of {}, which is not known at compile time", t.str());
    const int64_t chunk = (d.value() + *n - 1) / *n;
    if (chunk * (*n - 1) > d.value()) ctx.fail("{} cannot be split into {} parts of {}", t.str(), *n, chunk);
    split = std::vector<int64_t>(static_cast<size_t>(*n - 1), chunk);
    split->push_back(d.value() - chunk * (*n - 1));
  }
  if (split) attrs["split"] = *split;
  std::vector<std::string> names;
  for (size_t i = 0; i < ctx.numOutputs(); ++i) names.push_back(ctx.outputName(i));
  std::vector<ImportedValue> outs = ctx.emit(Op::Split, {ctx.input(0)}, std::move(attrs), names);
  for (size_t i = 0; i < outs.size(); ++i) ctx.setOutput(i, std::move(outs[i]));
}

void convertSlice(NodeContext& ctx) {
  AttrMap attrs;
  attrs["starts"] = ctx.constantInts(1, "starts");
  attrs["ends"] = ctx.constantInts(2, "ends");
  if (ctx.hasInput(3)) attrs["axes"] = ctx.constantInts(3, "axes");
  if (ctx.hasInput(4)) attrs["steps"] = ctx.constantInts(4, "steps");
  ctx.setOutput(0, ctx.emit(Op::Slice, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

// Squeeze/Unsqueeze: axes an attribute before opset 13, an input from 13 on.
std::optional<std::vector<int64_t>> axesAttrOrInput(NodeContext& ctx) {
  std::optional<std::vector<int64_t>> axes = ctx.attrInts("axes");
  if (axes && ctx.hasInput(1)) ctx.fail("axes is given both as an attribute and as an input");
  if (ctx.hasInput(1)) axes = ctx.constantInts(1, "axes");
  return axes;
}

void convertSqueeze(NodeContext& ctx) {
  AttrMap attrs;
  if (auto axes = axesAttrOrInput(ctx)) attrs["axes"] = *axes;
  ctx.setOutput(0, ctx.emit(Op::Squeeze, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

void convertUnsqueeze(NodeContext& ctx) {
  std::optional<std::vector<int64_t>> axes = axesAttrOrInput(ctx);
  if (!axes) ctx.fail("axes are required ({} at opset {})", ctx.opset() < 13 ? "attribute" : "input 1", ctx.opset());
  ctx.setOutput(0, ctx.emit(Op::Unsqueeze, {ctx.input(0)}, {{"axes", *axes}}, ctx.outputName(0)));
}

void convertGather(NodeContext& ctx) {
  ctx.setOutput(
      0, ctx.emit(Op::Gather, {ctx.input(0), ctx.input(1)}, {{"axis", ctx.attrInt("axis", 0)}}, ctx.outputName(0)));
}

void convertPad(NodeContext& ctx) {
  std::string mode = ctx.attrString("mode").value_or("constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    ctx.fail("mode '{}' is not supported (constant, reflect or edge)", mode);
  }
  AttrMap attrs;
  attrs["mode"] = mode;
  std::vector<int64_t> pads = ctx.constantInts(1, "pads");
  // axes (opset 18): pads holds begins then ends for these axes only; the others are not padded.
  if (ctx.hasInput(3)) {
    const std::vector<int64_t> axes = ctx.constantInts(3, "axes");
    const int64_t rank = static_cast<int64_t>(ctx.inputType(0).rank());
    if (pads.size() != 2 * axes.size()) ctx.fail("pads has {} values for {} axes (begins and ends)", pads.size(), axes.size());
    std::vector<int64_t> all(static_cast<size_t>(2 * rank), 0);
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] < -rank || axes[i] >= rank) ctx.fail("axis {} is out of range for rank {}", axes[i], rank);
      const auto a = static_cast<size_t>(axes[i] < 0 ? axes[i] + rank : axes[i]);
      if (seen[a]) ctx.fail("axis {} is given twice", axes[i]);
      seen[a] = true;
      all[a] = pads[i];
      all[a + static_cast<size_t>(rank)] = pads[i + axes.size()];
    }
    pads = std::move(all);
  }
  attrs["pads"] = pads;
  if (ctx.hasInput(2)) {
    const ir::Tensor& value = ctx.constantInput(2, "constant_value");
    if (value.numel() > 1)
      ctx.fail("constant_value (input '{}') must be a scalar, got {}", ctx.input(2).name, value.type().str());
    if (value.numel() == 1) attrs["value"] = value.getAsDouble(0);
  }
  ctx.setOutput(0, ctx.emit(Op::Pad, {ctx.input(0)}, std::move(attrs), ctx.outputName(0)));
}

void convertDropout(NodeContext& ctx) {
  ctx.requireUnusedOutputs(1, "the mask output of Dropout exists only for training");
  ctx.ignoreAttr("seed");   // randomness only in training mode
  ctx.ignoreAttr("ratio");  // opset 11: the ratio attribute; inference ignores it
  if (ctx.hasInput(2)) {
    const ir::Tensor& training = ctx.constantInput(2, "training_mode");
    if (training.numel() != 1 || training.getAsInt(0) != 0) {
      ctx.fail("training_mode (input '{}') is true; policyc compiles inference only", ctx.input(2).name);
    }
  }
  ctx.setOutput(0, ctx.emit(Op::Dropout, {ctx.input(0)}, {}, ctx.outputName(0)));
}

// ---- shapes and constants

// Shape is a constant for static shapes and a shape vector (resolved by Reshape) with batch.
void convertShape(NodeContext& ctx) {
  const std::vector<OnnxDim> dims = ctx.input(0).dims();  // a folded value's dims are multiples of the batch
  const auto rank = static_cast<int64_t>(dims.size());
  auto clampIndex = [&](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
  int64_t start = clampIndex(ctx.attrInt("start", 0));
  int64_t end = clampIndex(ctx.attrInt("end", rank));
  int64_t n = std::max<int64_t>(0, end - start);
  ir::Tensor values(ir::DType::I64, {n});
  ir::Tensor mask(ir::DType::I64, {n});
  bool anyBatch = false;
  for (int64_t i = 0; i < n; ++i) {
    const OnnxDim& d = dims[static_cast<size_t>(start + i)];
    values.data<int64_t>()[i] = d.coef;
    mask.data<int64_t>()[i] = d.batch ? 1 : 0;
    anyBatch = anyBatch || d.batch;
  }
  ImportedValue r = ImportedValue::constant(std::move(values), ctx.outputName(0), ctx.provenance());
  if (anyBatch) {
    r.kind = ImportedValue::Kind::ShapeVector;
    r.batchMask = std::make_shared<const ir::Tensor>(std::move(mask));
  }
  ctx.setOutput(0, std::move(r));
}

void convertConstant(NodeContext& ctx) {
  for (std::string_view unsupported : {"sparse_value", "value_string", "value_strings"}) {
    if (ctx.hasAttr(unsupported)) ctx.fail("attribute {} is not supported (numeric tensors only)", unsupported);
  }
  int given = 0;
  for (std::string_view name : {"value", "value_float", "value_floats", "value_int", "value_ints"})
    given += ctx.hasAttr(name);
  if (given != 1) ctx.fail("needs exactly one value attribute, got {}", given);
  std::optional<ir::Tensor> t;
  if (auto v = ctx.attrTensor("value")) t = std::move(*v);
  if (auto v = ctx.attrFloat("value_float"))
    t = ir::Tensor::fromVector(ir::DType::F32, {}, std::vector<float>{static_cast<float>(*v)});
  if (auto v = ctx.attrFloats("value_floats")) {
    std::vector<float> f(v->begin(), v->end());
    t = ir::Tensor::fromVector(ir::DType::F32, {static_cast<int64_t>(f.size())}, f);
  }
  if (auto v = ctx.attrInt("value_int")) t = ir::Tensor::fromVector(ir::DType::I64, {}, std::vector<int64_t>{*v});
  if (auto v = ctx.attrInts("value_ints"))
    t = ir::Tensor::fromVector(ir::DType::I64, {static_cast<int64_t>(v->size())}, *v);
  ctx.setOutput(0, ImportedValue::constant(std::move(*t), ctx.outputName(0), ctx.provenance()));
}

// ConstantOfShape: a constant for a constant shape; for a shape with the batch size, a batch
// fill (its stand-in has size-1 batch dims, which elementwise consumers broadcast identically).
void convertConstantOfShape(NodeContext& ctx) {
  ir::Tensor value = ctx.attrTensor("value").value_or(ir::Tensor(ir::DType::F32, {1}));
  if (value.numel() != 1) ctx.fail("attribute value must hold one element, got {}", value.type().str());
  const ImportedValue& shapeIn = ctx.input(0);
  std::vector<int64_t> dims;
  ir::Shape realShape;
  if (shapeIn.kind == ImportedValue::Kind::ShapeVector) {
    dims = tensorInts(*shapeIn.tensor);
    for (size_t i = 0; i < dims.size(); ++i) {
      bool batch = shapeIn.batchMask->getAsInt(static_cast<int64_t>(i)) != 0;
      if (batch && dims[i] != 1) ctx.fail("shape element {} is {}*batch; only the batch size itself is supported here", i, dims[i]);
      realShape.push_back(batch ? ir::Dim::batch() : ir::Dim(dims[i]));
      if (batch) dims[i] = 1;
    }
  } else {
    dims = ctx.constantInts(0, "shape");
    realShape = ir::staticShape(dims);
  }
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0) ctx.fail("shape {} has a negative dim", ir::attrValueStr(dims));
    if (d > 0 && numel > kMaxImportElements / d) ctx.fail("shape {} is too large (a constant of more than 2^26 elements)", ir::attrValueStr(dims));
    numel *= d;
  }
  ir::Tensor out(value.dtype(), dims);
  const size_t elem = ir::dtypeSize(value.dtype());
  for (int64_t i = 0; i < numel; ++i) std::memcpy(out.bytes() + static_cast<size_t>(i) * elem, value.bytes(), elem);
  ImportedValue r = ImportedValue::constant(std::move(out), ctx.outputName(0), ctx.provenance());
  if (!ir::isStaticShape(realShape)) {
    r.kind = ImportedValue::Kind::BatchFill;
    r.fillShape = realShape;
  }
  ctx.setOutput(0, std::move(r));
}

// Expand: ONNX broadcasts both ways (a 1 in `shape` keeps the input's dim); the IR's expand takes
// the resolved output shape, -1 for the batch size (a shape from Shape of a batch-sized value).
void convertExpand(NodeContext& ctx) {
  const ImportedValue& x = ctx.input(0);
  const ImportedValue& shapeIn = ctx.input(1);
  ir::Shape given;
  if (shapeIn.kind == ImportedValue::Kind::ShapeVector) {
    std::vector<int64_t> dims = tensorInts(*shapeIn.tensor);
    for (size_t i = 0; i < dims.size(); ++i) {
      if (shapeIn.batchMask->getAsInt(static_cast<int64_t>(i)) != 0 && dims[i] != 1) {
        ctx.fail("shape element {} is {}*batch; only the batch size itself is supported here", i, dims[i]);
      }
      given.push_back(shapeIn.batchMask->getAsInt(static_cast<int64_t>(i)) != 0 ? ir::Dim::batch() : ir::Dim(dims[i]));
    }
  } else {
    for (int64_t d : ctx.constantInts(1, "shape")) {
      if (d < 0) ctx.fail("shape has a negative dim {}", d);
      given.push_back(ir::Dim(d));
    }
  }
  const ir::Shape& have = x.type().shape;
  const size_t rank = std::max(have.size(), given.size());
  std::vector<int64_t> shape(rank), standIn(rank);
  bool batch = false;
  for (size_t i = 0; i < rank; ++i) {
    const ir::Dim a = i + have.size() >= rank ? have[i + have.size() - rank] : ir::Dim(1);
    const ir::Dim b = i + given.size() >= rank ? given[i + given.size() - rank] : ir::Dim(1);
    if (a != b && a != ir::Dim(1) && b != ir::Dim(1)) {
      ctx.fail("input {} does not broadcast with shape {}", ir::shapeStr(have), ir::shapeStr(given));
    }
    const ir::Dim d = a == ir::Dim(1) ? b : a;
    batch = batch || d.isBatch();
    shape[i] = d.isBatch() ? -1 : d.value();
    standIn[i] = d.isBatch() ? 1 : d.value();
  }
  if (x.isRuntime()) {
    ctx.setOutput(0, ctx.emit(Op::Expand, {x}, {{"shape", shape}}, ctx.outputName(0)));
    return;
  }
  // Known data: folded now; with the batch size in the shape, a batch fill (its stand-in has
  // size-1 batch dims, as ConstantOfShape's).
  ImportedValue data = ImportedValue::constant(*x.tensor, x.name, x.provenance);
  ImportedValue out = ctx.emit(Op::Expand, {data}, {{"shape", standIn}}, ctx.outputName(0));
  if (batch) {
    out.kind = ImportedValue::Kind::BatchFill;
    out.fillShape.clear();
    for (int64_t d : shape) out.fillShape.push_back(d == -1 ? ir::Dim::batch() : ir::Dim(d));
  }
  ctx.setOutput(0, std::move(out));
}

// ---------------------------------------------------------------------------------------------
// The table

struct OpConverter {
  int minInputs;
  int maxInputs;   // -1: variadic
  int maxOutputs;  // -1: variadic
  int sinceOpset;  // first default-domain opset that defines the op (within 11-21)
  void (*convert)(NodeContext&);
};

const std::unordered_map<std::string_view, OpConverter>& converters() {
  static const std::unordered_map<std::string_view, OpConverter> table = {
      // linear algebra, convolution, pooling
      {"Gemm", {2, 3, 1, 11, convertGemm}},
      {"MatMul", {2, 2, 1, 11, convertDirect<Op::MatMul>}},
      {"Einsum", {1, -1, 1, 12, convertEinsum}},
      {"Conv", {2, 3, 1, 11, convertConv}},
      {"ConvTranspose", {2, 3, 1, 11, convertConvTranspose}},
      {"MaxPool", {1, 1, 2, 11, convertMaxPool}},
      {"AveragePool", {1, 1, 1, 11, convertAveragePool}},
      {"GlobalAveragePool", {1, 1, 1, 11, convertDirect<Op::GlobalAvgPool>}},
      {"GlobalMaxPool", {1, 1, 1, 11, convertGlobalMaxPool}},
      // normalisation
      {"BatchNormalization", {5, 5, 5, 11, convertBatchNorm}},
      {"LayerNormalization", {2, 3, 3, 17, convertLayerNorm}},
      // elementwise binary (numpy broadcasting)
      {"Add", {2, 2, 1, 11, convertDirect<Op::Add>}},
      {"Sub", {2, 2, 1, 11, convertDirect<Op::Sub>}},
      {"Mul", {2, 2, 1, 11, convertDirect<Op::Mul>}},
      {"Div", {2, 2, 1, 11, convertDirect<Op::Div>}},
      {"Pow", {2, 2, 1, 11, convertDirect<Op::Pow>}},
      {"Equal", {2, 2, 1, 11, convertDirect<Op::Equal>}},
      {"Less", {2, 2, 1, 11, convertDirect<Op::Less>}},
      {"Greater", {2, 2, 1, 11, convertDirect<Op::Greater>}},
      {"LessOrEqual", {2, 2, 1, 12, convertDirect<Op::LessOrEqual>}},
      {"GreaterOrEqual", {2, 2, 1, 12, convertDirect<Op::GreaterOrEqual>}},
      {"And", {2, 2, 1, 11, convertDirect<Op::And>}},
      {"Or", {2, 2, 1, 11, convertDirect<Op::Or>}},
      {"Xor", {2, 2, 1, 11, convertDirect<Op::Xor>}},
      {"Mod", {2, 2, 1, 11, convertMod}},
      {"PRelu", {2, 2, 1, 11, convertPRelu}},
      {"Where", {3, 3, 1, 11, convertDirect<Op::Where>}},
      {"Min", {1, -1, 1, 11, convertVariadic<Op::Min>}},
      {"Max", {1, -1, 1, 11, convertVariadic<Op::Max>}},
      {"Sum", {1, -1, 1, 11, convertVariadic<Op::Add>}},
      {"Mean", {1, -1, 1, 11, convertMean}},
      // elementwise unary
      {"Neg", {1, 1, 1, 11, convertDirect<Op::Neg>}},
      {"Abs", {1, 1, 1, 11, convertDirect<Op::Abs>}},
      {"Sqrt", {1, 1, 1, 11, convertDirect<Op::Sqrt>}},
      {"Exp", {1, 1, 1, 11, convertDirect<Op::Exp>}},
      {"Log", {1, 1, 1, 11, convertDirect<Op::Log>}},
      {"Erf", {1, 1, 1, 11, convertDirect<Op::Erf>}},
      {"Relu", {1, 1, 1, 11, convertDirect<Op::Relu>}},
      {"Sigmoid", {1, 1, 1, 11, convertDirect<Op::Sigmoid>}},
      {"Tanh", {1, 1, 1, 11, convertDirect<Op::Tanh>}},
      {"Softplus", {1, 1, 1, 11, convertDirect<Op::Softplus>}},
      {"Not", {1, 1, 1, 11, convertDirect<Op::Not>}},
      {"Reciprocal", {1, 1, 1, 11, convertReciprocal}},
      {"Sin", {1, 1, 1, 11, convertDirect<Op::Sin>}},
      {"Cos", {1, 1, 1, 11, convertDirect<Op::Cos>}},
      {"Tan", {1, 1, 1, 11, convertDirect<Op::Tan>}},
      {"Asin", {1, 1, 1, 11, convertDirect<Op::Asin>}},
      {"Acos", {1, 1, 1, 11, convertDirect<Op::Acos>}},
      {"Atan", {1, 1, 1, 11, convertDirect<Op::Atan>}},
      {"Sinh", {1, 1, 1, 11, convertDirect<Op::Sinh>}},
      {"Cosh", {1, 1, 1, 11, convertDirect<Op::Cosh>}},
      {"Asinh", {1, 1, 1, 11, convertDirect<Op::Asinh>}},
      {"Acosh", {1, 1, 1, 11, convertDirect<Op::Acosh>}},
      {"Atanh", {1, 1, 1, 11, convertDirect<Op::Atanh>}},
      {"Floor", {1, 1, 1, 11, convertDirect<Op::Floor>}},
      {"Ceil", {1, 1, 1, 11, convertDirect<Op::Ceil>}},
      {"Round", {1, 1, 1, 11, convertDirect<Op::Round>}},
      {"Sign", {1, 1, 1, 11, convertSign}},
      {"IsNaN", {1, 1, 1, 11, convertIsNaN}},
      {"IsInf", {1, 1, 1, 11, convertIsInf}},
      {"ThresholdedRelu", {1, 1, 1, 11, convertThresholdedRelu}},
      {"Softsign", {1, 1, 1, 11, convertSoftsign}},
      {"Shrink", {1, 1, 1, 11, convertShrink}},
      {"Celu", {1, 1, 1, 12, convertCelu}},
      {"Mish", {1, 1, 1, 18, convertMish}},
      {"Gelu", {1, 1, 1, 20, convertGelu}},
      // recurrent layers, unrolled over a static sequence (onnx_composite.cpp)
      {"LSTM", {3, 8, 3, 11, convertLstm}},
      {"GRU", {3, 6, 2, 11, convertGru}},
      {"RNN", {3, 6, 2, 11, convertRnn}},
      // quantization as f32 arithmetic (onnx_composite.cpp)
      {"DequantizeLinear", {2, 3, 1, 11, convertDequantizeLinear}},
      {"QuantizeLinear", {2, 3, 1, 11, convertQuantizeLinear}},
      {"HardSwish", {1, 1, 1, 14, convertDirect<Op::HardSwish>}},
      {"LeakyRelu", {1, 1, 1, 11, convertAlpha<Op::LeakyRelu>}},
      {"Elu", {1, 1, 1, 11, convertAlpha<Op::Elu>}},
      {"Selu", {1, 1, 1, 11, convertSelu}},
      {"HardSigmoid", {1, 1, 1, 11, convertHardSigmoid}},
      {"Clip", {1, 3, 1, 11, convertClip}},
      {"Cast", {1, 1, 1, 11, convertCast}},
      {"CastLike", {2, 2, 1, 15, convertCastLike}},
      // reductions
      {"Softmax", {1, 1, 1, 11, convertSoftmax<Op::Softmax>}},
      {"LogSoftmax", {1, 1, 1, 11, convertSoftmax<Op::LogSoftmax>}},
      {"ReduceMean", {1, 2, 1, 11, convertReduce<Op::ReduceMean>}},
      {"ReduceSum", {1, 2, 1, 11, convertReduce<Op::ReduceSum>}},
      {"ReduceMax", {1, 2, 1, 11, convertReduce<Op::ReduceMax>}},
      {"ReduceProd", {1, 2, 1, 11, convertReduce<Op::ReduceProd>}},
      {"ArgMax", {1, 1, 1, 11, convertArgMax}},
      {"ArgMin", {1, 1, 1, 11, convertArgMin}},
      {"ReduceMin", {1, 2, 1, 11, convertReduceMin}},
      {"ReduceL1", {1, 2, 1, 11, convertReduceL1}},
      {"ReduceL2", {1, 2, 1, 11, convertReduceL2}},
      {"ReduceSumSquare", {1, 2, 1, 11, convertReduceSumSquare}},
      {"ReduceLogSum", {1, 2, 1, 11, convertReduceLogSum}},
      {"ReduceLogSumExp", {1, 2, 1, 11, convertReduceLogSumExp}},
      {"Hardmax", {1, 1, 1, 11, convertHardmax}},
      // data movement
      {"Flatten", {1, 1, 1, 11, convertFlatten}},
      {"Reshape", {2, 2, 1, 11, convertReshape}},
      {"Transpose", {1, 1, 1, 11, convertTranspose}},
      {"Concat", {1, -1, 1, 11, convertConcat}},
      {"Split", {1, 2, -1, 11, convertSplit}},
      {"Slice", {3, 5, 1, 11, convertSlice}},
      {"Squeeze", {1, 2, 1, 11, convertSqueeze}},
      {"Unsqueeze", {1, 2, 1, 11, convertUnsqueeze}},
      {"Gather", {2, 2, 1, 11, convertGather}},
      {"GatherElements", {2, 2, 1, 11, convertGatherElements}},
      {"Pad", {2, 4, 1, 11, convertPad}},
      {"Resize", {1, 4, 1, 11, convertResize}},
      {"DepthToSpace", {1, 1, 1, 11, convertDepthToSpace}},
      {"SpaceToDepth", {1, 1, 1, 11, convertSpaceToDepth}},
      {"OneHot", {3, 3, 1, 11, convertOneHot}},
      {"CumSum", {2, 2, 1, 11, convertCumSum}},
      {"DynamicQuantizeLinear", {1, 1, 3, 11, convertDynamicQuantizeLinear}},
      {"MatMulInteger", {2, 4, 1, 11, convertMatMulInteger}},
      {"ConvInteger", {2, 4, 1, 11, convertConvInteger}},
      {"QLinearMatMul", {8, 8, 1, 11, convertQLinearMatMul}},
      {"QLinearConv", {8, 9, 1, 11, convertQLinearConv}},
      {"InstanceNormalization", {3, 3, 1, 11, convertInstanceNormalization}},
      {"MeanVarianceNormalization", {1, 1, 1, 11, convertMeanVarianceNormalization}},
      {"LRN", {1, 1, 1, 11, convertLrn}},
      {"TopK", {2, 2, 2, 11, convertTopK}},
      {"GatherND", {2, 2, 1, 11, convertGatherND}},
      {"ScatterElements", {3, 3, 1, 11, convertScatterElements}},
      {"Scatter", {3, 3, 1, 9, convertScatterElements}},  // removed at opset 11; read as written
      {"ScatterND", {3, 3, 1, 11, convertScatterND}},
      {"Upsample", {1, 2, 1, 7, convertUpsample}},  // removed at opset 10; read as the model's opset wrote it
      {"Identity", {1, 1, 1, 11, convertDirect<Op::Identity>}},
      {"Dropout", {1, 3, 2, 11, convertDropout}},
      // shapes and constants
      {"Shape", {1, 1, 1, 11, convertShape}},
      {"Constant", {0, 0, 1, 11, convertConstant}},
      {"ConstantOfShape", {1, 1, 1, 11, convertConstantOfShape}},
      {"Expand", {2, 2, 1, 11, convertExpand}},
      {"Size", {1, 1, 1, 11, convertSize}},
      {"Range", {3, 3, 1, 11, convertRange}},
      {"Tile", {2, 2, 1, 11, convertTile}},
      {"EyeLike", {1, 1, 1, 11, convertEyeLike}},
      {"Trilu", {1, 2, 1, 14, convertTrilu}},
  };
  return table;
}

}  // namespace

bool hasConverter(std::string_view opType) { return converters().count(opType) != 0; }

void convertNode(NodeContext& ctx) {
  auto it = converters().find(ctx.opType());
  if (it == converters().end() || ctx.opset() < it->second.sinceOpset) {
    ctx.fail("unsupported operator '{}' (opset {})", ctx.opType(), ctx.opset());
  }
  const OpConverter& conv = it->second;
  const auto numIn = static_cast<int>(ctx.numInputs());
  if (numIn < conv.minInputs || (conv.maxInputs >= 0 && numIn > conv.maxInputs)) {
    if (conv.maxInputs < 0) ctx.fail("{} takes at least {} inputs, got {}", ctx.opType(), conv.minInputs, numIn);
    if (conv.minInputs == conv.maxInputs) ctx.fail("{} takes {} inputs, got {}", ctx.opType(), conv.minInputs, numIn);
    ctx.fail("{} takes {} to {} inputs, got {}", ctx.opType(), conv.minInputs, conv.maxInputs, numIn);
  }
  const auto numOut = static_cast<int>(ctx.numOutputs());
  if (numOut < 1 || (conv.maxOutputs >= 0 && numOut > conv.maxOutputs)) {
    ctx.fail("{} has {} outputs, expected 1{}", ctx.opType(), numOut,
             conv.maxOutputs == 1  ? ""
             : conv.maxOutputs < 0 ? " or more"
                                   : fmt::format(" to {}", conv.maxOutputs));
  }
  conv.convert(ctx);
  ctx.checkAllAttributesUnderstood();
}

}  // namespace policyc::frontend
