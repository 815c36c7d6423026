// The kernel cost model, the profiling data every compiled model exports (and the timers of a
// profiled build), and `policyc bench`'s profile table, Chrome trace, CSV and baselines.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "policyc/driver/model_io.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/passes/pass_manager.h"
#include "policyc/runtime/loader.h"
#include "roofline.h"
#include "support/cli.h"
#include "support/fixtures.h"

using namespace policyc;
namespace fs = std::filesystem;

namespace {

const fs::path& scratchDir() { return testing::scratchDir("policyc-bench-test"); }

std::unique_ptr<ir::Graph> optimized(const std::string& model) {
  auto graph = driver::loadModel(testing::sourcePath("examples/models/" + model + ".onnx"));
  passes::runPipeline(*graph);
  return graph;
}

codegen::KernelProgram fusedProgram(const ir::Graph& graph) {
  codegen::KernelProgram p = codegen::lowerGraph(graph);
  codegen::fuseKernels(p);
  return p;
}

// Multiply-adds per batch row of every linear (K * N) and conv (output elements * Cin/g * kh * kw)
// of the graph: what the cost model's template FLOPs must add up to.
struct GraphWork {
  double linearMacs = 0, convMacs = 0;
};

GraphWork graphWork(const ir::Graph& g) {
  GraphWork w;
  for (const auto& n : g.nodes()) {
    if (n->isOp(ir::Op::Linear) || n->isOp(ir::Op::Conv)) {
      const ir::TensorType& wt = n->input(1)->type();
      double perOutput = 1;
      for (size_t d = 1; d < wt.shape.size(); ++d) perOutput *= static_cast<double>(wt.shape[d].value());
      double outputs = 1;
      for (const ir::Dim& d : n->output(0)->type().shape) outputs *= d.isBatch() ? 1.0 : static_cast<double>(d.value());
      (n->isOp(ir::Op::Linear) ? w.linearMacs : w.convMacs) += outputs * perOutput;
    }
  }
  return w;
}

}  // namespace

TEST_CASE("kernel cost: linear and conv FLOPs are twice the graph's multiply-adds, per batch row", "[cost]") {
  for (const char* model : {"ppo_mlp", "atari_cnn", "impala_cnn"}) {
    INFO(model);
    auto graph = optimized(model);
    GraphWork expected = graphWork(*graph);
    codegen::KernelProgram p = fusedProgram(*graph);
    double linear = 0, conv = 0, epilogue = 0;
    for (const codegen::Kernel& k : p.kernels) {
      codegen::KernelCost c = codegen::kernelCost(p, k);
      CHECK(c.flopsStatic == 0);  // every kernel of these models scales with the batch
      CHECK(c.bytesPerRow > 0);
      int applies = 0;
      for (const codegen::Instr& i : k.body) applies += i.opcode == codegen::Opcode::Apply;
      double domain = 1;
      for (const ir::Dim& d : k.domain) domain *= d.isBatch() ? 1.0 : static_cast<double>(d.value());
      double templ = c.flopsPerRow - applies * domain;
      epilogue += applies * domain;
      if (k.kind == codegen::KernelKind::Linear) linear += templ;
      if (k.kind == codegen::KernelKind::Conv) conv += templ;
      if (k.kind == codegen::KernelKind::Pointwise || k.kind == codegen::KernelKind::Copy) CHECK(templ == 0);
      CHECK(c.flops(3) == Approx(3 * c.flopsPerRow));
    }
    CHECK(linear == Approx(2 * expected.linearMacs));
    CHECK(conv == Approx(2 * expected.convMacs));
    CHECK(epilogue > 0);
  }
}

TEST_CASE("kernel cost: params are counted once, as static bytes, and a params-free kernel has none", "[cost]") {
  auto graph = optimized("ppo_mlp");
  codegen::KernelProgram p = fusedProgram(*graph);
  int64_t weights = 0;
  for (const codegen::Buffer& b : p.buffers) {
    if (b.kind != codegen::BufferKind::Param || b.isView()) continue;
    int64_t n = 1;
    for (const ir::Dim& d : b.type.shape) n *= d.value();
    weights += n * 4;
  }
  CHECK(codegen::paramBytes(p) == weights);
  CHECK(weights > 500'000);  // 0.6 MB of ppo_mlp weights
  double staticBytes = 0;
  for (const codegen::Kernel& k : p.kernels) staticBytes += codegen::kernelCost(p, k).bytesStatic;
  CHECK(staticBytes == Approx(static_cast<double>(weights)));  // each param is read by exactly one kernel
}

TEST_CASE("profiling: every model exports its kernels, a profiled build times each kernel call", "[profile]") {
  const std::string backend = GENERATE("cpp", "llvm");
  INFO("backend " << backend);
  fs::path plain = scratchDir() / (backend + "_plain.so"), profiled = scratchDir() / (backend + "_profiled.so");
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  REQUIRE(testing::runCli("compile '" + model + "' --backend " + backend + " -o '" + plain.string() + "'").exitCode == 0);
  REQUIRE(testing::runCli("compile '" + model + "' --backend " + backend + " --profile -o '" + profiled.string() + "'").exitCode == 0);

  runtime::Model a = runtime::Model::load(plain.string());
  runtime::Model b = runtime::Model::load(profiled.string());
  const policyc_profile* pa = a.profile();
  const policyc_profile* pb = b.profile();
  REQUIRE(pa);
  REQUIRE(pb);
  CHECK(pa->instrumented == 0);
  CHECK(pa->kernel_ns == nullptr);
  CHECK(pa->reset == nullptr);
  CHECK(pb->instrumented == 1);
  REQUIRE(pa->num_kernels == pb->num_kernels);
  REQUIRE(pa->num_kernels >= 3);
  CHECK(pa->weight_bytes == pb->weight_bytes);
  for (int k = 0; k < pa->num_kernels; ++k) {
    CHECK(std::string(pa->kernels[k].name) == pb->kernels[k].name);
    CHECK(std::string(pa->kernels[k].nodes).size() > 0);
    CHECK(pa->kernels[k].flops_per_row > 0);
  }

  const int64_t batch = 2;
  std::vector<float> obs(static_cast<size_t>(17 * batch), 0.5f), logits(static_cast<size_t>(12 * batch)), vf(static_cast<size_t>(batch));
  std::vector<int64_t> inShape{batch, 17};
  std::vector<runtime::TensorView> ins{{POLICYC_F32, inShape, obs.data()}};
  std::vector<int64_t> s0 = b.outputs()[0].shapeAt(batch), s1 = b.outputs()[1].shapeAt(batch);
  logits.resize(static_cast<size_t>(b.outputs()[0].numelAt(batch)));
  vf.resize(static_cast<size_t>(b.outputs()[1].numelAt(batch)));
  std::vector<runtime::TensorView> outs{{POLICYC_F32, s0, logits.data()}, {POLICYC_F32, s1, vf.data()}};

  b.run(ins, outs, batch);  // before the reset: not counted
  pb->reset();
  for (int k = 0; k < pb->num_kernels; ++k) CHECK(pb->kernel_calls[k] == 0);
  CHECK(*pb->trace_count == 0);
  for (int i = 0; i < 3; ++i) b.run(ins, outs, batch);
  for (int k = 0; k < pb->num_kernels; ++k) {
    CHECK(pb->kernel_calls[k] == 3);
    CHECK(pb->kernel_ns[k] > 0);
  }
  REQUIRE(*pb->trace_count == 3 * pb->num_kernels);
  for (int64_t e = 0; e < *pb->trace_count; ++e) {
    const policyc_trace_event& ev = pb->trace[e];
    CHECK(ev.kernel == e % pb->num_kernels);  // execution order, call after call
    CHECK(ev.batch == batch);
    if (e > 0) CHECK(ev.start_ns >= pb->trace[e - 1].start_ns + pb->trace[e - 1].duration_ns);
  }
  // The plain build runs without touching any counter (it has none) and computes the same.
  std::vector<float> logits2(logits.size()), vf2(vf.size());
  std::vector<runtime::TensorView> outs2{{POLICYC_F32, s0, logits2.data()}, {POLICYC_F32, s1, vf2.data()}};
  a.run(ins, outs2, batch);
  CHECK(logits2 == logits);
  CHECK(vf2 == vf);
}

TEST_CASE("policyc bench --profile prints a per-kernel table, a Chrome trace, CSV and a baseline's speedup", "[profile][cli]") {
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  fs::path trace = scratchDir() / "trace.json", csv = scratchDir() / "rows.csv", base = scratchDir() / "base.csv";
  std::ofstream(base) << "batch,threads,samples_per_s\n1,1,1000\n3,1,2000\n";
  testing::CliResult r = testing::runCli("bench '" + model + "' --batch 1,3 --min-time 0 --min-calls 20 --warmup 2 --profile --trace '" +
                                         trace.string() + "' --csv '" + csv.string() + "' --baseline '" + base.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.find("profile: batch 1, 1 thread, 20 calls") != std::string::npos);
  CHECK(r.out.find("profile: batch 3, 1 thread, 20 calls") != std::string::npos);
  CHECK(r.out.find("fused_linear_bias_tanh_1") != std::string::npos);
  CHECK(r.out.find("(outside kernels") != std::string::npos);
  CHECK(r.out.find("baseline base.csv") != std::string::npos);

  nlohmann::json t = nlohmann::json::parse(testing::slurp(trace));
  std::set<std::string> names;
  int complete = 0, processes = 0;
  for (const auto& e : t.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++complete;
      names.insert(e.at("name").get<std::string>());
      CHECK(e.at("dur").get<double>() >= 0);
    } else if (e.at("ph") == "M" && e.at("name") == "process_name") {
      ++processes;
    }
  }
  CHECK(processes == 2);                 // one per row
  CHECK(complete == 2 * 20 * static_cast<int>(names.size()));  // every kernel call of both rows
  CHECK(names.count("fused_linear_bias_tanh_1") == 1);

  std::string rows = testing::slurp(csv);
  CHECK(rows.rfind("model,batch,threads,calls,median_us,p10_us,p90_us,samples_per_s,gflops,baseline_samples_per_s,speedup\n", 0) == 0);
  CHECK(rows.find("\nppo_mlp,1,1,20,") != std::string::npos);
  CHECK(rows.find(",1000.0,") != std::string::npos);  // the baseline's figure for batch 1
  CHECK(rows.find(",2000.0,") != std::string::npos);
}

TEST_CASE("policyc bench --trace at 2 threads: a track per thread, each worker's chunks inside its kernel", "[profile][cli]") {
  const std::string model = testing::sourcePath("examples/models/atari_cnn.onnx");
  for (const char* backend : {"cpp", "llvm"}) {
    DYNAMIC_SECTION("backend " << backend) {
      fs::path trace = scratchDir() / (std::string("threads_") + backend + ".json");
      // Generated convs (no oneDNN) at batch 16: large enough to be split between the threads. 40
      // calls: while another test keeps the other core busy (ctest -j2) the pool runs kernels
      // unsplit until its worker gets a core, which took longer than 5 calls (the worker ran none).
      testing::CliResult r = testing::runCli("bench '" + model + "' --backend " + backend + " --no-extern --batch 16 --threads 2 " +
                                             "--min-time 0 --min-calls 40 --warmup 1 --profile --trace '" + trace.string() + "'");
      INFO(r.out << r.err);
      REQUIRE(r.exitCode == 0);
      nlohmann::json t = nlohmann::json::parse(testing::slurp(trace));
      std::map<int, int> events;
      std::map<int, std::string> trackNames;
      std::vector<std::pair<double, double>> kernels;  // the calling thread's kernel spans
      std::vector<std::pair<double, double>> chunks;   // the worker's chunks
      for (const auto& e : t.at("traceEvents")) {
        if (e.at("ph") == "M" && e.at("name") == "thread_name") trackNames[e.at("tid").get<int>()] = e.at("args").at("name");
        if (e.at("ph") != "X") continue;
        const int tid = e.at("tid").get<int>();
        ++events[tid];
        const double ts = e.at("ts").get<double>(), end = ts + e.at("dur").get<double>();
        (tid == 0 ? kernels : chunks).emplace_back(ts, end);
      }
      REQUIRE(events.size() == 2);
      CHECK(trackNames.at(0) == "run (calling thread)");
      CHECK(trackNames.at(1) == "worker 1");
      CHECK(events.at(1) > 0);
      // Every chunk a worker ran lies within a kernel of the calling thread (1 us of clock slack).
      for (const auto& [start, end] : chunks) {
        bool inside = false;
        for (const auto& [ks, ke] : kernels) inside = inside || (start >= ks - 1 && end <= ke + 1);
        CHECK(inside);
      }
    }
  }
}

TEST_CASE("policyc bench: bad profiling and baseline options are one clear error", "[profile][cli]") {
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  testing::requireCleanError(testing::runCli("bench '" + model + "' --trace x.json"), "--trace needs --profile", true);

  fs::path plain = scratchDir() / "plain_for_bench.so";
  REQUIRE(testing::runCli("compile '" + model + "' -o '" + plain.string() + "'").exitCode == 0);
  testing::requireCleanError(testing::runCli("bench '" + plain.string() + "' --profile"), "compiled without profiling", true);
  testing::requireCleanError(testing::runCli("bench '" + plain.string() + "' --baseline nofuse"),
                             "--baseline nofuse needs the .onnx/.pir model", true);

  // (on the compiled model: compiling through the cache would add its own line to stderr)
  fs::path bad = scratchDir() / "bad_base.csv";
  std::ofstream(bad) << "size,rate\n1,5\n";
  testing::requireCleanError(testing::runCli("bench '" + plain.string() + "' --min-time 0 --min-calls 1 --baseline '" + bad.string() + "'"),
                             "must name the columns 'batch' and 'samples_per_s'", true);
  fs::path garbled = scratchDir() / "garbled_base.csv";
  std::ofstream(garbled) << "batch,samples_per_s\n1,fast\n";
  testing::requireCleanError(testing::runCli("bench '" + plain.string() + "' --min-time 0 --min-calls 1 --baseline '" + garbled.string() + "'"),
                             "line 2: expected numbers", true);
}

// Node names are the model's bytes: the JSON rows and the trace carry a name that is not UTF-8
// with U+FFFD in its place, and both files are written.
TEST_CASE("policyc bench --json and --trace write a node name that is not UTF-8", "[profile][cli]") {
  fs::path model = scratchDir() / "not_utf8.pir";
  std::ofstream(model) << "graph not_utf8(%x: f32[batch,4]) {\n  %\"r\\xff\\xfe\" = relu(%x) : f32[batch,4]\n"
                          "  return (y=%\"r\\xff\\xfe\")\n}\n";
  fs::path json = scratchDir() / "not_utf8.json", trace = scratchDir() / "not_utf8_trace.json";
  testing::CliResult r = testing::runCli("bench '" + model.string() + "' --profile --batch 1 --min-time 0 --min-calls 3 --warmup 1 --json '" +
                                         json.string() + "' --trace '" + trace.string() + "'");
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  nlohmann::json j = nlohmann::json::parse(testing::slurp(json));
  const std::string nodes = j["rows"][0]["kernels"][0]["nodes"].get<std::string>();
  CHECK(nodes.find("\xEF\xBF\xBD") != std::string::npos);  // U+FFFD
  CHECK(nlohmann::json::parse(testing::slurp(trace))["traceEvents"].size() > 0);
}

// --compare-backends: both builds in one process, their calls interleaved; the JSON holds each
// backend's rows with the same kernels (the schedule is shared), the table a line per kernel.
TEST_CASE("policyc bench --compare-backends times both builds side by side, kernel by kernel", "[profile][cli]") {
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  fs::path json = scratchDir() / "compare.json";
  testing::CliResult r = testing::runCli("bench '" + model + "' --compare-backends --profile --batch 1,3 --min-time 0 --min-calls 5 --warmup 1 --json '" +
                                         json.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.find("backends cpp and llvm in one process, calls interleaved") != std::string::npos);
  CHECK(r.out.find("kernels at batch 3, 1 thread") != std::string::npos);
  nlohmann::json j = nlohmann::json::parse(testing::slurp(json));
  for (const std::string b : {"cpp", "llvm"}) {
    INFO(b);
    const auto& rows = j.at("backends").at(b).at("rows");
    REQUIRE(rows.size() == 2);
    CHECK(rows[1].at("batch") == 3);
    CHECK(rows[0].at("calls").get<int64_t>() >= 5);
    std::vector<std::string> names, cppNames;
    for (const auto& k : rows[0].at("kernels")) names.push_back(k.at("name"));
    for (const auto& k : j.at("backends").at("cpp").at("rows")[0].at("kernels")) cppNames.push_back(k.at("name"));
    CHECK(names == cppNames);
    CHECK(names.size() >= 3);
  }
  fs::path plain = scratchDir() / "plain_for_compare.so";
  REQUIRE(testing::runCli("compile '" + model + "' -o '" + plain.string() + "'").exitCode == 0);
  testing::requireCleanError(testing::runCli("bench '" + plain.string() + "' --compare-backends"), "--compare-backends needs the .onnx/.pir model", true);
  testing::requireCleanError(testing::runCli("bench '" + model + "' --compare-backends --backend cpp"), "drop --backend", true);
}

TEST_CASE("roofline: each kernel's bound is the larger of its compute and its traffic at the level holding it", "[profile]") {
  tools::Roofline r;
  r.peakGflops = 50;
  r.peakAvx512Gflops = 100;
  r.l2Bytes = 1 << 20;
  r.l3Bytes = 32 << 20;
  r.bwL2 = 100;
  r.bwL3 = 50;
  r.bwDram = 10;
  CHECK(r.peak() == 100);                                  // AVX-512 where there is one
  CHECK(r.bandwidthFor(256 << 10) == 100);                 // inside half of L2
  CHECK(r.bandwidthFor(4 << 20) == 50);                    // inside a quarter of L3
  CHECK(r.bandwidthFor(64 << 20) == 10);                   // DRAM
  CHECK(r.boundUs(2e6, 1e3) == Approx(20.0));              // 2 MFLOP at 100 GFLOP/s: compute-bound
  CHECK(r.boundUs(1e3, 64e6) == Approx(6400.0));           // 64 MB from DRAM at 10 GB/s: memory-bound
  const std::optional<tools::Roofline> back = tools::parseRooflineJson(tools::rooflineJson(r));
  REQUIRE(back);
  CHECK(back->bwL3 == 50);
  CHECK(back->l2Bytes == r.l2Bytes);
  CHECK_FALSE(tools::parseRooflineJson("{\"peak_gflops\": 1}"));
  CHECK_FALSE(tools::parseRooflineJson("not json"));
}

TEST_CASE("policyc bench --profile sets every kernel against the roofline and marks those far over it", "[profile][cli]") {
  const std::string model = testing::sourcePath("examples/models/ppo_mlp.onnx");
  // A machine far faster than any real one: every kernel is many times over its bound.
  fs::path fast = scratchDir() / "fast_roofline.json";
  std::ofstream(fast) << R"({"peak_gflops": 1e6, "peak_avx512_gflops": 1e6, "l2_bytes": 524288, "l3_bytes": 33554432,
    "bw_l2_gbps": 1e6, "bw_l3_gbps": 1e6, "bw_dram_gbps": 1e6})";
  fs::path json = scratchDir() / "bounds.json";
  testing::CliResult r = testing::runCli("bench '" + model + "' --batch 2 --min-time 0 --min-calls 5 --warmup 1 --profile --roofline '" +
                                         fast.string() + "' --json '" + json.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.find("bound us  x bound") != std::string::npos);
  CHECK(r.out.find("more than 3x over it") != std::string::npos);
  CHECK(std::regex_search(r.out, std::regex("fused_linear_bias_tanh_1 .* [0-9.]+\\*  ")));
  nlohmann::json j = nlohmann::json::parse(testing::slurp(json));
  for (const auto& k : j.at("rows").at(0).at("kernels")) {
    CHECK(k.at("bound_us").get<double>() > 0);
    CHECK(k.at("over_bound").get<double>() > 3);
  }
  testing::requireCleanError(testing::runCli("bench '" + model + "' --profile --roofline '" + json.string() + "'"),
                             "is not a roofline", true);
}
