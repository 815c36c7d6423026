// ONNX conformance: runs Debian's libonnx-testdata node and PyTorch tests through the interpreter
// and, with --backend cpp, through the whole compiler into a shared object.
//
// A test is selected when every operator of its model is one policyc imports and every tensor it
// feeds or expects has a dtype policyc handles; the others are skipped, with the reason. A selected
// test passes when import succeeds and every output matches within ONNX's backend-test tolerance
// (rtol 1e-3, atol 1e-7; NaN where NaN is expected). With --backend cpp, a test the interpreter
// passes is also optimised, compiled (-O3, native) and run with 1 and 2 threads: it passes when
// every output matches the interpreter within 1e-4 (relative and absolute; integers exactly) and
// the two runs are bitwise equal; an "unsupported in backend cpp" error makes it unsupported.
//
//   policyc_conformance [--data DIR] [--backend interp|cpp|llvm] [--jobs N] [--min-passed N]
//                       [--report FILE] [--verbose] [--filter TEXT]
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/llvm_backend.h"
#include "policyc/debug/check.h"
#include "policyc/frontend/onnx_import.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/policyc_model.h"
#include "support/scratch_dir.h"

namespace fs = std::filesystem;
using namespace policyc;

namespace {

// Unsupported: the interpreter passes, but the backend declares an operator or form unsupported.
enum class Outcome { Passed, Failed, Skipped, Unsupported };

struct Result {
  std::string name;  // "node/test_add"
  Outcome outcome;
  std::string reason;
};

bool readModel(const fs::path& path, onnx::ModelProto& model) {
  std::ifstream f(path, std::ios::binary);
  return f && model.ParseFromIstream(&f);
}

std::string skipReason(const onnx::ModelProto& model) {
  std::set<std::string> unsupported;
  for (const auto& node : model.graph().node()) {
    if (!frontend::isSupportedOnnxOp(node.domain(), node.op_type())) unsupported.insert(node.op_type());
  }
  if (!unsupported.empty()) return fmt::format("unsupported operator {}", fmt::join(unsupported, ", "));
  auto checkType = [](const onnx::ValueInfoProto& v) -> std::string {
    if (!v.type().has_tensor_type()) return fmt::format("'{}' is not a tensor", v.name());
    int32_t t = v.type().tensor_type().elem_type();
    if (!frontend::isSupportedOnnxType(t)) return fmt::format("'{}' has unsupported element type {}", v.name(), t);
    return "";
  };
  for (const auto& v : model.graph().input()) {
    if (std::string r = checkType(v); !r.empty()) return r;
  }
  for (const auto& v : model.graph().output()) {
    if (std::string r = checkType(v); !r.empty()) return r;
  }
  return "";
}

// Why a skipped test is skipped, by category (the summary counts them; docs/conformance.md
// lists the tests): an operator policyc does not import or a form of one it declares unsupported,
// an opset it does not read, a dtype, training only, or strings, sequences and control flow.
constexpr const char* kSkipCategories[] = {"operator", "opset", "dtype", "training-only", "strings/sequences/control flow", "other"};

std::string skipCategory(const std::string& reason) {
  static const std::set<std::string> training = {"Adagrad", "Adam", "Momentum", "Gradient", "NegativeLogLikelihoodLoss",
                                                 "SoftmaxCrossEntropyLoss"};
  static const std::set<std::string> flow = {"If", "Loop", "Scan", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
                                             "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
                                             "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
                                             "OptionalHasElement", "StringNormalizer", "TfIdfVectorizer", "RegexFullMatch",
                                             "StringConcat", "StringSplit"};
  const std::string ops = "unsupported operator ";
  if (reason.rfind(ops, 0) == 0) {
    std::set<std::string> names;
    std::stringstream list(reason.substr(ops.size()));
    for (std::string name; std::getline(list, name, ',');) names.insert(name.substr(name.find_first_not_of(' ')));
    auto any = [&](const std::set<std::string>& of) {
      return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return of.count(n) > 0; });
    };
    return any(training) ? "training-only" : any(flow) ? "strings/sequences/control flow" : "operator";
  }
  if (reason.find("is not a tensor") != std::string::npos) return "strings/sequences/control flow";
  if (reason.find("unsupported element type 8") != std::string::npos) return "strings/sequences/control flow";  // STRING
  if (reason.find("unsupported element type") != std::string::npos || reason.rfind("test data:", 0) == 0) return "dtype";
  if (reason.rfind("import:", 0) == 0) {
    // Every node's error names its opset ("node 'y' (Dropout, opset 13): ..."): the model's own opset is meant.
    if (reason.find("training") != std::string::npos || reason.find("inference") != std::string::npos) return "training-only";
    static const std::regex modelOpset(R"(opset \d+ is not supported)");
    if (std::regex_search(reason, modelOpset)) return "opset";
    return "operator";  // a form of a supported operator declared unsupported
  }
  return "other";
}

// Empty when `got` matches `want`; otherwise what differs.
std::string compare(const ir::Tensor& got, const ir::Tensor& want) {
  if (got.dtype() != want.dtype()) {
    return fmt::format("dtype {} != expected {}", ir::dtypeName(got.dtype()), ir::dtypeName(want.dtype()));
  }
  if (got.shape() != want.shape()) {
    return fmt::format("shape [{}] != expected [{}]", fmt::join(got.shape(), ","), fmt::join(want.shape(), ","));
  }
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getAsDouble(i), w = want.getAsDouble(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;  // also equal infinities
    if (!(std::abs(g - w) <= 1e-7 + 1e-3 * std::abs(w))) {
      return fmt::format("element {}: {} != expected {}", i, g, w);
    }
  }
  return "";
}

// Import errors that mean "policyc declares this unsupported" (an opset it cannot read, a training
// form, an attribute value it does not handle) make a test skipped, not failed.
bool declaredUnsupported(const std::string& message) {
  for (const char* marker : {"is not supported", "unsupported operator", "does not support", "compiles inference",
                             "only the first (batch) dim may be dynamic", "is used, but"}) {
    if (message.find(marker) != std::string::npos) return true;
  }
  return false;
}

// The graph input named in "... (input 'NAME') must be a constant ..." errors.
std::string inputNeededAsConstant(const std::string& message) {
  size_t at = message.find("must be a constant");
  size_t open = message.rfind("(input '", at);
  if (at == std::string::npos || open == std::string::npos) return "";
  size_t begin = open + 8;
  size_t close = message.find('\'', begin);
  return close == std::string::npos ? "" : message.substr(begin, close - begin);
}

std::string readFileBytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Imports the model; operands that policyc needs at compile time (a Reshape's shape, Slice's
// starts, Clip's bounds...) but that the test feeds as graph inputs are bound to the data set's
// values, as compiling such a model for those inputs would. `bound` returns their names.
std::unique_ptr<ir::Graph> importBinding(onnx::ModelProto model, const fs::path& set, const std::string& name,
                                         std::set<std::string>& bound) {
  std::map<std::string, int> originalIndex;  // input_K.pb numbers follow the unmodified input list
  for (int i = 0; i < model.graph().input_size(); ++i) originalIndex[model.graph().input(i).name()] = i;
  for (int attempt = 0;; ++attempt) {
    std::string bytes = model.SerializeAsString();
    try {
      return frontend::importOnnxBytes(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
                                       name + "/model.onnx");
    } catch (const Error& e) {
      std::string input = inputNeededAsConstant(e.what());
      auto* inputs = model.mutable_graph()->mutable_input();
      auto it = std::find_if(inputs->begin(), inputs->end(), [&](const auto& v) { return v.name() == input; });
      if (input.empty() || it == inputs->end() || attempt > 8) throw;
      onnx::TensorProto tensor;
      if (!tensor.ParseFromString(readFileBytes(set / fmt::format("input_{}.pb", originalIndex.at(input))))) throw;
      tensor.set_name(input);
      *model.mutable_graph()->add_initializer() = tensor;
      inputs->erase(it);
      bound.insert(input);
    }
  }
}

// Where compiled test models are built: one directory per run, removed at exit.
const fs::path& scratchDir() { return testing::scratchDir("policyc-conformance"); }

// Compiles the (imported, not yet optimised) graph with the default pipeline and the C++ backend
// (or the LLVM backend's JIT) and runs it with 1 and 2 threads on `inputs`; empty when it matches `expected` (the
// interpreter's outputs), else what went wrong. UnsupportedError passes through.
std::string checkCompiled(ir::Graph& graph, const std::vector<ir::Tensor>& inputs, const std::vector<ir::Tensor>& expected,
                          const std::string& id, bool llvm) {
  passes::runPipeline(graph);
  const policyc_model* m = nullptr;
  std::unique_ptr<codegen::JitModel> jit;
  void* handle = nullptr;
  fs::path dir = scratchDir() / id;
  struct Close {
    void*& h;
    fs::path dir;
    ~Close() {
      if (h) dlclose(h);
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } close{handle, dir};
  if (llvm) {
    // In-process: the LLVM module JIT-compiled, no files.
    codegen::LlvmOptions options;
    options.name = "model";
    options.minChunkCost = 0;
    jit = codegen::jitCompile(codegen::generateLlvm(graph, options));
    m = jit->descriptor();
  } else {
    codegen::CppOptions options;
    options.name = "model";
    options.minChunkCost = 0;  // split every kernel as far as it goes: 2 threads exercise every split
    codegen::GeneratedCpp generated = codegen::generateCpp(graph, options);
    codegen::BuildOptions build;
    build.workDir = dir.string();
    fs::path so = dir / "model.so";
    codegen::buildSharedObject(generated, so.string(), build);
    handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return fmt::format("dlopen: {}", dlerror());
    auto fn = reinterpret_cast<policyc_model_descriptor_fn>(dlsym(handle, "policyc_model_descriptor"));
    if (!fn) return "no policyc_model_descriptor";
    m = fn();
  }
  // The batch is the size of the first input dimension the importer made symbolic (none: 1).
  int64_t batch = 1;
  for (size_t i = 0; i < graph.inputs().size() && i < inputs.size(); ++i) {
    const ir::Shape& shape = graph.inputs()[i]->type().shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d].isBatch()) batch = inputs[i].shape()[d];
    }
  }
  if (static_cast<size_t>(m->num_outputs) != expected.size()) {
    return fmt::format("the compiled model has {} outputs, the graph {}", m->num_outputs, expected.size());
  }
  std::vector<const void*> in;
  for (const ir::Tensor& t : inputs) in.push_back(t.bytes());
  size_t bytes = (m->workspace_bytes(batch) + 63) / 64 * 64;
  std::unique_ptr<void, decltype(&std::free)> ws(bytes ? std::aligned_alloc(64, bytes) : nullptr, &std::free);
  std::vector<ir::Tensor> first;
  for (int threads : {1, 2}) {
    std::vector<ir::Tensor> got;
    std::vector<void*> out;
    for (const ir::Tensor& e : expected) got.emplace_back(e.dtype(), e.shape());
    for (ir::Tensor& g : got) out.push_back(g.bytes());
    int code = m->run(in.data(), out.data(), batch, ws.get(), threads);
    if (code != POLICYC_OK) return fmt::format("run with {} threads returned {}", threads, code);
    for (size_t o = 0; o < expected.size(); ++o) {
      // Within 1e-4 (relative and absolute; NaN where NaN; integers and bools exactly).
      driver::TensorCheck c = driver::compareTensors("", got[o], expected[o], 1e-4, 1e-4);
      if (!c.pass) return fmt::format("compiled, {} threads: output {}: {}", threads, o, c.note);
      if (threads > 1 && got[o].nbytes() > 0 && std::memcmp(got[o].bytes(), first[o].bytes(), got[o].nbytes()) != 0) {
        return fmt::format("output {} differs bitwise between 1 and {} threads", o, threads);
      }
    }
    if (threads == 1) first = std::move(got);
  }
  return "";
}

Result runTest(const fs::path& dir, const std::string& name, const std::string& backend) {
  const bool cpp = backend != "interp";
  fs::path modelPath = dir / "model.onnx";
  onnx::ModelProto model;
  if (!readModel(modelPath, model)) return {name, Outcome::Skipped, "model.onnx does not parse"};
  if (std::string reason = skipReason(model); !reason.empty()) return {name, Outcome::Skipped, reason};

  std::vector<fs::path> sets;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(entry.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {name, Outcome::Skipped, "no test data sets"};
  for (const fs::path& set : sets) {
    std::set<std::string> bound;
    std::unique_ptr<ir::Graph> graph;
    try {
      graph = importBinding(model, set, name, bound);
    } catch (const Error& e) {
      return {name, declaredUnsupported(e.what()) ? Outcome::Skipped : Outcome::Failed, fmt::format("import: {}", e.what())};
    }
    std::vector<ir::Tensor> inputs, expected;
    try {
      for (int i = 0; i < model.graph().input_size(); ++i) {
        fs::path file = set / fmt::format("input_{}.pb", i);
        if (!bound.count(model.graph().input(i).name()) && fs::exists(file)) {
          inputs.push_back(frontend::readOnnxTensorFile(file.string()));
        }
      }
      for (size_t i = 0; fs::exists(set / fmt::format("output_{}.pb", i)); ++i) {
        expected.push_back(frontend::readOnnxTensorFile((set / fmt::format("output_{}.pb", i)).string()));
      }
    } catch (const Error& e) {
      return {name, Outcome::Skipped, fmt::format("test data: {}", e.what())};
    }
    std::vector<ir::Tensor> outputs;
    try {
      if (inputs.size() != graph->inputs().size()) {
        return {name, Outcome::Failed,
                fmt::format("{} inputs in the data set, {} in the imported graph", inputs.size(), graph->inputs().size())};
      }
      outputs = ir::interpret(*graph, inputs);
    } catch (const Error& e) {
      return {name, Outcome::Failed, fmt::format("run: {}", e.what())};
    }
    if (outputs.size() != expected.size()) {
      return {name, Outcome::Failed, fmt::format("{} outputs, expected {}", outputs.size(), expected.size())};
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (std::string diff = compare(outputs[i], expected[i]); !diff.empty()) {
        return {name, Outcome::Failed, fmt::format("{}: output {}: {}", set.filename().string(), i, diff)};
      }
    }
    if (!cpp) continue;
    std::string id = name + "-" + set.filename().string();
    std::replace(id.begin(), id.end(), '/', '_');
    try {
      if (std::string diff = checkCompiled(*graph, inputs, outputs, id, backend == "llvm"); !diff.empty()) {
        return {name, Outcome::Failed, fmt::format("{}: backend {}: {}", set.filename().string(), backend, diff)};
      }
    } catch (const UnsupportedError& e) {
      return {name, Outcome::Unsupported, e.what()};
    } catch (const Error& e) {
      return {name, Outcome::Failed, fmt::format("{}: backend {}: {}", set.filename().string(), backend, e.what())};
    }
  }
  return {name, Outcome::Passed, ""};
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string report;
  std::string filter;
  long minPassed = -1;
  bool verbose = false;
  std::string backend = "interp";
  long jobs = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "policyc_conformance: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--data") data = value();
    else if (a == "--report") report = value();
    else if (a == "--filter") filter = value();
    else if (a == "--min-passed") minPassed = std::stol(value());
    else if (a == "--verbose") verbose = true;
    else if (a == "--backend") backend = value();
    else if (a == "--jobs") jobs = std::stol(value());
    else {
      std::cerr << "usage: policyc_conformance [--data DIR] [--backend interp|cpp|llvm] [--jobs N] [--min-passed N] "
                   "[--report FILE] [--verbose] [--filter TEXT]\n";
      return 2;
    }
  }
  if (backend != "interp" && backend != "cpp" && backend != "llvm") {
    std::cerr << "policyc_conformance: --backend is interp, cpp or llvm, got '" << backend << "'\n";
    return 2;
  }
  if (jobs < 1) {
    std::cerr << "policyc_conformance: --jobs must be >= 1\n";
    return 2;
  }
  if (!fs::is_directory(data)) {
    std::cerr << "policyc_conformance: no test data at " << data << " (install Debian's libonnx-testdata)\n";
    return 2;
  }
  std::vector<std::pair<fs::path, std::string>> tests;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator"}) {
    fs::path root = fs::path(data) / suite;
    if (!fs::is_directory(root)) continue;
    std::vector<fs::path> dirs;
    for (const auto& entry : fs::directory_iterator(root)) {
      if (entry.is_directory()) dirs.push_back(entry.path());
    }
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      std::string name = std::string(suite) + "/" + dir.filename().string();
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      tests.emplace_back(dir, name);
    }
  }
  // Tests run on `jobs` threads (compiling dominates with --backend cpp); results keep their order.
  const bool cpp = backend != "interp";
  std::vector<Result> results(tests.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t n; (n = next.fetch_add(1)) < tests.size();) results[n] = runTest(tests[n].first, tests[n].second, backend);
  };
  std::vector<std::thread> pool;
  for (long j = 1; j < jobs; ++j) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (const Result& r : results) {
    if (r.outcome == Outcome::Failed || (verbose && r.outcome != Outcome::Passed)) {
      const char* what = r.outcome == Outcome::Failed ? "FAIL " : r.outcome == Outcome::Unsupported ? "unsupported " : "skip ";
      std::cout << what << r.name << ": " << r.reason << "\n";
    }
  }
  auto count = [&](Outcome o) {
    return static_cast<long>(std::count_if(results.begin(), results.end(), [&](const Result& r) { return r.outcome == o; }));
  };
  long passed = count(Outcome::Passed), failed = count(Outcome::Failed), unsupportedCount = count(Outcome::Unsupported);
  long skipped = count(Outcome::Skipped);
  if (!report.empty()) {
    std::ofstream out(report);
    for (const Result& r : results) {
      const char* what = r.outcome == Outcome::Passed ? "pass"
                         : r.outcome == Outcome::Failed ? "FAIL"
                         : r.outcome == Outcome::Unsupported ? "unsupported" : "skip";
      out << what << "\t" << r.name << "\t" << r.reason << "\t" << (r.outcome == Outcome::Skipped ? skipCategory(r.reason) : "") << "\n";
    }
  }
  double rate = passed + failed ? 100.0 * static_cast<double>(passed) / static_cast<double>(passed + failed) : 0.0;
  std::cout << fmt::format("backend {}: selected {} of {} tests; pass rate {:.1f}%\n", backend, passed + failed,
                           results.size(), rate);
  std::map<std::string, long> byCategory;
  for (const Result& r : results) {
    if (r.outcome == Outcome::Skipped) ++byCategory[skipCategory(r.reason)];
  }
  std::vector<std::string> categories;
  for (const char* c : kSkipCategories) categories.push_back(fmt::format("{} {}", c, byCategory[c]));
  std::cout << fmt::format("skipped by category: {}\n", fmt::join(categories, ", "));
  if (cpp) {
    std::cout << fmt::format("{} passed, {} failed, {} unsupported in backend {}, {} skipped\n", passed, failed,
                             unsupportedCount, backend, skipped);
  } else {
    std::cout << fmt::format("{} passed, {} failed, {} skipped\n", passed, failed, skipped);
  }
  if (minPassed >= 0 && passed < minPassed) {
    std::cout << fmt::format("conformance dropped: {} passed, fewer than the recorded {}\n", passed, minPassed);
    return 1;
  }
  return 0;
}
