// Every conv shape of the example models, the policy zoo and the ONNX conformance tests (Debian's
// libonnx-testdata) through every generated implementation it has, in both backends: the same
// bits at 1, 2 and 3 threads and from both backends, within the interpreter's tolerance.
//
// The shapes are read from the models at test time (after the optimization pipeline, as the
// compiler sees them), so a fixture or conformance test added later is covered without an edit.
// They are compiled as one graph, each conv on its own input with its bias and a relu; the
// implementations are assigned through ImplChoice by batch range, three to a build (batch 1, 2
// and 3 each run another), so that two builds a backend reach up to six implementations a conv.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/driver/model_io.h"
#include "policyc/ir/text.h"
#include "policyc/passes/pass_manager.h"
#include "support/backends.h"
#include "support/fixtures.h"
#include "support/scratch_dir.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

const char* kConformanceData = "/usr/share/libonnx-testdata/data";
// The generated implementations of a conv (oneDNN's are extern kernels, not generated code).
const char* const kGenerated[] = {"gemm4x32", "gemm4x16", "gemm6x16", "gemm8x32", "conv_rows", "winograd_f23"};

// A conv as the compiler meets it: its input and output types with the batch dim symbolic, its
// weight's type, whether it has a bias, its attributes in .pir form; `from` names one model it
// came from.
struct ConvShape {
  std::string input, output, attrs;
  ir::TensorType weight;
  bool bias = false;
  std::string from;
  std::string key() const { return fmt::format("{} {} {} {} {}", input, output, weight.str(), attrs, bias); }
};

// "f32[2,3,7,5]" -> "f32[batch,3,7,5]"
std::string batchFirst(const ir::TensorType& t) {
  std::string s = t.str();
  const size_t open = s.find('['), comma = s.find(',');
  return s.substr(0, open + 1) + "batch" + s.substr(comma);
}

// The models whose convs are collected: every example model and zoo policy, and the conformance
// tests with "conv" in their name (ConvTranspose, ConvInteger and QLinearConv have no Conv node
// after import, or do not import: they add nothing).
std::vector<std::string> sourceModels() {
  std::vector<std::string> paths;
  for (const char* dir : {"examples/models", "examples/zoo"}) {
    for (const fs::directory_entry& e : fs::directory_iterator(testing::sourcePath(dir))) {
      if (e.path().extension() == ".onnx") paths.push_back(e.path().string());
    }
  }
  for (const char* suite : {"node", "pytorch-converted"}) {
    for (const fs::directory_entry& e : fs::directory_iterator(fs::path(kConformanceData) / suite)) {
      std::string name = e.path().filename().string();
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (name.find("conv") != std::string::npos && fs::exists(e.path() / "model.onnx")) paths.push_back((e.path() / "model.onnx").string());
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string modelLabel(const std::string& path) {
  const fs::path p(path);
  return p.filename() == "model.onnx" ? p.parent_path().filename().string() : p.stem().string();
}

// The distinct conv shapes of `paths` (by key), in the order first met.
std::vector<ConvShape> collectShapes(const std::vector<std::string>& paths, std::vector<std::string>& skipped) {
  std::vector<ConvShape> shapes;
  std::set<std::string> seen;
  for (const std::string& path : paths) {
    std::unique_ptr<ir::Graph> graph;
    try {
      graph = driver::loadModel(path);
      passes::runPipeline(*graph);
    } catch (const std::exception& e) {
      skipped.push_back(modelLabel(path) + ": " + e.what());
      continue;
    }
    for (const std::unique_ptr<ir::Node>& n : graph->nodes()) {
      if (!n->isOp(ir::Op::Conv)) continue;
      const ir::TensorType& x = n->input(0)->type();
      const ir::TensorType& w = n->input(1)->type();
      if (x.dtype != ir::DType::F32 || !ir::isStaticShape(w.shape) ||
          !std::all_of(x.shape.begin() + 1, x.shape.end(), [](const ir::Dim& d) { return d.isStatic(); })) {
        skipped.push_back(fmt::format("{}: conv '{}' on {}", modelLabel(path), n->name(), x.str()));
        continue;
      }
      ConvShape s{batchFirst(x), batchFirst(n->output()->type()), "", w, n->numInputs() > 2, modelLabel(path)};
      std::vector<std::string> attrs;
      for (const auto& [name, value] : n->attrs()) attrs.push_back(fmt::format("{}={}", name, ir::attrValueStr(value)));
      s.attrs = fmt::format("{{{}}}", fmt::join(attrs, ", "));
      if (seen.insert(s.key()).second) shapes.push_back(std::move(s));
    }
  }
  return shapes;
}

// n weights of a few magnitudes and both signs, none zero (a pattern that repeats every 13).
std::string values(int64_t n, int64_t salt) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", 0.0625 * static_cast<double>(((i + salt) * 7) % 13) - 0.40625);
  return s;
}

// One graph holding every shape: input %xI, conv %cI with its weight (and bias), output relu %rI.
std::unique_ptr<ir::Graph> convGraph(const std::vector<ConvShape>& shapes) {
  std::string inputs, body, outputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ConvShape& s = shapes[i];
    const ir::TensorType& w = s.weight;
    inputs += fmt::format("{}%x{}: {}", i ? ", " : "", i, s.input);
    body += fmt::format("  %w{} = param {} [{}]\n", i, w.str(), values(ir::staticNumel(ir::evalShape(w.shape, 1)), static_cast<int64_t>(i)));
    std::string operands = fmt::format("%x{}, %w{}", i, i);
    if (s.bias) {
      const int64_t m = w.shape[0].value();
      body += fmt::format("  %b{} = param f32[{}] [{}]\n", i, m, values(m, static_cast<int64_t>(i) + 5));
      operands += fmt::format(", %b{}", i);
    }
    body += fmt::format("  %c{} = conv({}) {} : {}\n  %r{} = relu(%c{}) : {}\n", i, operands, s.attrs, s.output, i, i, s.output);
    outputs += fmt::format("{}r{}=%r{}", i ? ", " : "", i, i);
  }
  auto graph = ir::parseGraph(fmt::format("graph convs({}) {{\n{}  return ({})\n}}", inputs, body, outputs));
  passes::runPipeline(*graph);
  return graph;
}

}  // namespace

TEST_CASE("conv parity: every conv shape of the fixtures, the zoo and ONNX's conformance tests through every generated implementation", "[codegen][llvm][cpp]") {
  REQUIRE(fs::exists(kConformanceData));  // Debian's libonnx-testdata (scripts/lib.sh installs it)
  std::vector<std::string> skipped;
  const std::vector<ConvShape> shapes = collectShapes(sourceModels(), skipped);
  for (const std::string& s : skipped) WARN("not collected: " << s);
  // Every conv of the CNN fixtures and zoo policies (impala_cnn's, atari_cnn's, gap_cnn's,
  // rma_conv1d's 1-D ones...) and the conformance tests' 1-D, 2-D (grouped, depthwise, dilated,
  // strided, padded) and 3-D convs.
  std::set<std::string> from;
  for (const ConvShape& s : shapes) from.insert(s.from);
  for (const char* model : {"atari_cnn", "impala_cnn", "uint8_convbn", "gap_cnn", "rma_conv1d", "sb3_multi_input", "test_Conv2d_dilated",
                            "test_Conv2d_depthwise_strided", "test_Conv1d_pad2size1", "test_Conv3d_dilated_strided",
                            "test_conv_with_strides_and_asymmetric_padding"}) {
    INFO(model);
    CHECK(from.count(model) == 1);
  }
  REQUIRE(shapes.size() >= 40);
  auto graph = convGraph(shapes);

  // Each conv kernel's generated candidates (oneDNN's are no generated code), three to a build by
  // batch range: build b runs candidate 3b at batch 1, 3b + 1 at batch 2, 3b + 2 from batch 3,
  // the last candidate where a conv has fewer.
  const codegen::PlannedProgram planned = codegen::planGraph(*graph);
  // Both kinds of target: AVX-512 tiles ("native" on an AVX-512 host) and AVX2's (x86-64-v3 runs
  // everywhere).
  for (const std::string target : {"native", "x86-64-v3"}) {
    INFO(target);
    std::map<std::string, std::vector<std::string>> candidates;
    std::set<std::string> impls;
    for (const codegen::Kernel& k : planned.program.kernels) {
      if (k.kind != codegen::KernelKind::Conv) continue;
      std::vector<std::string> c = codegen::implCandidates(planned.program, k, false, std::nullopt, codegen::Precision::Fp32, {},
                                                           codegen::cppTargetTraits(target));
      if (c.empty()) continue;
      impls.insert(c.begin(), c.end());
      candidates[k.name] = std::move(c);
    }
    // The 2-D convs with constant weights have the implicit GEMM tiles; conv_rows and
    // winograd_f23 (the 3 x 3 stride-1 convs) have their shapes among them.
    for (const char* impl : kGenerated) {
      INFO(impl);
      CHECK(impls.count(impl) == 1);
    }
    size_t most = 0;
    for (const auto& [name, c] : candidates) most = std::max(most, c.size());
    std::map<std::string, std::set<std::string>> reached;  // implementation -> kernels run with it
    for (size_t build = 0; build * 3 < most; ++build) {
      INFO("build " << build);
      codegen::ImplChoice choice;
      for (const auto& [name, c] : candidates) {
        auto pick = [&](size_t i) { return c[std::min(i, c.size() - 1)]; };
        choice[name] = {{1, pick(build * 3)}, {2, pick(build * 3 + 1)}, {-1, pick(build * 3 + 2)}};
        for (size_t i = build * 3; i < build * 3 + 3 && i < c.size(); ++i) reached[c[i]].insert(name);
      }
      codegen::CppOptions cpp;
      cpp.minChunkCost = 0;
      cpp.choice = choice;
      cpp.tuneBatches = {1, 2, 3};
      cpp.target = target;
      const codegen::GeneratedCpp generated = codegen::generateCpp(*graph, cpp);
      CHECK(generated.dispatch == choice);
      const fs::path so = testing::scratchDir("policyc-conv-parity") / fmt::format("convs_{}_{}.so", target, build);
      codegen::buildSharedObject(generated, so.string(), {});
      runtime::Model cppModel = runtime::Model::load(so.string());
      codegen::LlvmOptions llvm;
      llvm.minChunkCost = 0;
      llvm.choice = choice;
      llvm.tuneBatches = {1, 2, 3};
      llvm.target.target = target;
      runtime::Model llvmModel = testing::jitModel(*graph, llvm);
      testing::checkBitwiseBackends(*graph, cppModel, llvmModel, {1, 2, 3}, 41 + build, 1e-4);
    }
    // Every conv ran every implementation it has.
    for (const char* impl : kGenerated) {
      INFO(impl);
      std::set<std::string> all;
      for (const auto& [name, c] : candidates) {
        if (std::find(c.begin(), c.end(), impl) != c.end()) all.insert(name);
      }
      CHECK(reached[impl] == all);
    }
  }
}
