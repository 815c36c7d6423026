// `policyc bench`: times a compiled model per call, compares it with a baseline, and prints the
// per-kernel profile (and a Chrome trace) of a model compiled with profiling.
#include "bench.h"
#include "roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>


#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "policyc/driver/model_io.h"
#include "policyc/ir/error.h"
#include "policyc/ir/interpreter.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/driver/report.h"
#include "policyc/runtime/loader.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"
#include "policyc/support/process.h"

namespace policyc::tools {
namespace {

// The Python the plots and the PyTorch baseline run in: Debian's, where python3-matplotlib,
// python3-torch and python3-onnx are installed (scripts/lib.sh).
constexpr const char* kPython = "/usr/bin/python3";

// One of the project's scripts ("bench/plot.py"): beside an installed policyc
// (PREFIX/share/policyc/...), else in the source tree this policyc was built from.
std::string scriptPath(const std::string& relative) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / "share" / "policyc" / relative;
    if (std::filesystem::is_regular_file(installed, ec)) return installed.string();
  }
  return std::string(POLICYC_SOURCE_DIR) + "/" + relative;
}

// Runs one of the project's Python scripts (no shell); its output goes to a log, and a failure is
// one error with the script's last line (its own "error: ..." message).
void runScript(const std::vector<std::string>& argv, const std::string& what) {
  files::TempDir tmp("policyc-bench");
  const std::filesystem::path log = tmp.path() / "log";
  int rc = 0;
  try {
    rc = process::run(argv, log);
  } catch (const std::runtime_error& e) {
    fail("{}: {}", what, e.what());
  }
  if (rc == 0) return;
  std::ifstream f(log);
  std::string line, last;
  while (std::getline(f, line)) {
    if (!line.empty()) last = line;
  }
  fail("{} failed (exit {}): {}", what, rc, last.empty() ? "no message" : last);
}

struct Timing {
  int64_t batch = 0;
  int threads = 0;
  int64_t calls = 0;
  double p10 = 0, median = 0, p90 = 0, mean = 0;  // microseconds per call
  double totalUs = 0;                              // all timed calls together
  double samplesPerSecond() const { return static_cast<double>(batch) * 1e6 / median; }
};

Timing summarize(int64_t batch, int threads, std::vector<double> us);  // of calls timed one by one (us)

// Warm-up calls, then calls timed one by one (steady_clock) until both `minCalls` and
// `minSeconds` are reached.
template <typename Call>
Timing timeCalls(int64_t batch, int threads, int64_t warmup, int64_t minCalls, double minSeconds, Call&& call) {
  for (int64_t i = 0; i < warmup; ++i) call();
  using Clock = std::chrono::steady_clock;
  std::vector<double> us;
  us.reserve(static_cast<size_t>(minCalls) * 4);
  auto start = Clock::now();
  while (static_cast<int64_t>(us.size()) < minCalls || std::chrono::duration<double>(Clock::now() - start).count() < minSeconds) {
    auto t0 = Clock::now();
    call();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return summarize(batch, threads, std::move(us));
}

Timing summarize(int64_t batch, int threads, std::vector<double> us) {
  Timing t{batch, threads, static_cast<int64_t>(us.size())};
  for (double v : us) t.totalUs += v;
  t.mean = t.totalUs / static_cast<double>(us.size());
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1) + 0.5)]; };
  t.p10 = at(0.10);
  t.median = at(0.50);
  t.p90 = at(0.90);
  return t;
}

// Inputs, outputs and a workspace for one batch size of a loaded model, allocated once. Each
// array starts at an offset of its own within a 4 KiB page (the k-th at k * 1088 bytes, modulo
// 4096), the same layout for every build of a model. From the heap, an input and an output of
// 64 KiB lay 16 bytes apart modulo 4 KiB, so that a load 4 values past a store waited for it
// (4K aliasing); which of two builds met that depended on the order of the allocations, and one
// kernel measured 1.9 or 3.3 us from one process to the next.
struct Buffers {
  std::vector<std::unique_ptr<void, decltype(&std::free)>> arenas;
  std::vector<const void*> in;
  std::vector<void*> out;
  void* workspace = nullptr;

  Buffers(const runtime::Model& model, int64_t batch) {
    const std::vector<ir::Tensor> inputs = driver::randomTensors(driver::inputTypes(model), batch, 1);
    for (const ir::Tensor& t : inputs) in.push_back(std::memcpy(place(t.nbytes()), t.bytes(), t.nbytes()));
    for (const runtime::TensorSpec& spec : model.outputs()) {
      const ir::Tensor zeros(static_cast<ir::DType>(spec.dtype), spec.shapeAt(batch));
      out.push_back(std::memcpy(place(zeros.nbytes()), zeros.bytes(), zeros.nbytes()));
    }
    const size_t bytes = model.workspaceBytes(batch);
    if (bytes) workspace = place(bytes);
  }

 private:
  void* place(size_t bytes) {
    constexpr size_t kPage = 4096, kStep = 1088;  // 17 cache lines: every offset 64-byte aligned
    const size_t offset = arenas.size() * kStep % kPage;
    const size_t total = (offset + std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
    arenas.emplace_back(std::aligned_alloc(kPage, total), &std::free);
    if (!arenas.back()) fail("cannot allocate {} bytes for a benchmark buffer", total);
    return static_cast<std::byte*>(arenas.back().get()) + offset;
  }
};

// One call of the model's own run() (no shape checks) on buffers allocated beforehand.
std::function<void()> modelCall(const runtime::Model& model, Buffers& b, int64_t batch, int threads) {
  return [&model, &b, batch, threads] {
    const int code = model.runUnchecked(b.in.data(), b.out.data(), batch, b.workspace, threads);
    if (code != POLICYC_OK) fail("'{}' returned error {} at batch {}, {} threads", model.path(), code, batch, threads);
  };
}

Timing timeModel(const runtime::Model& model, int64_t batch, int threads, const BenchOptions& o,
                 const std::function<void()>& afterWarmup = {}) {
  Buffers b(model, batch);
  const std::function<void()> call = modelCall(model, b, batch, threads);
  for (int64_t i = 0; i < o.warmup; ++i) call();
  if (afterWarmup) afterWarmup();
  return timeCalls(batch, threads, 0, o.minCalls, o.minSeconds, call);
}

// ---- the baseline a run is compared with

class Baseline {
 public:
  virtual ~Baseline() = default;
  virtual std::string name() const = 0;
  // The throughput table's column for it.
  virtual std::string column() const { return "baseline"; }
  // Samples per second at this point; nullopt when the baseline has no figure for it.
  virtual std::optional<double> samplesPerSecond(int64_t batch, int threads) = 0;
};

// Another compiled form of the model (without fusion), timed like the model itself.
class CompiledBaseline : public Baseline {
 public:
  CompiledBaseline(std::string name, runtime::Model model, const BenchOptions& o)
      : name_(std::move(name)), model_(std::move(model)), o_(o) {}
  std::string name() const override { return name_; }
  std::optional<double> samplesPerSecond(int64_t batch, int threads) override {
    return timeModel(model_, batch, threads, o_).samplesPerSecond();
  }

 private:
  std::string name_;
  runtime::Model model_;
  const BenchOptions& o_;
};

// The reference interpreter on the imported graph (single-threaded; at most 10 timed calls).
class InterpreterBaseline : public Baseline {
 public:
  InterpreterBaseline(std::unique_ptr<ir::Graph> graph, const BenchOptions& o) : graph_(std::move(graph)), o_(o) {}
  std::string name() const override { return "interp"; }
  std::optional<double> samplesPerSecond(int64_t batch, int threads) override {
    std::vector<ir::Tensor> inputs = driver::randomInputs(*graph_, batch, 1);
    auto call = [&] { (void)ir::interpret(*graph_, inputs); };
    return timeCalls(batch, threads, 1, std::min<int64_t>(o_.minCalls, 10), o_.minSeconds, call).samplesPerSecond();
  }

 private:
  std::unique_ptr<ir::Graph> graph_;
  const BenchOptions& o_;
};

// Figures measured elsewhere (e.g. bench/peers), read from a CSV file with a header naming at
// least `batch` and `samples_per_s`; with a `threads` column rows match the thread count too.
class CsvBaseline : public Baseline {
 public:
  explicit CsvBaseline(const std::string& path) : path_(path) {
    std::ifstream f(path);
    if (!f) fail("cannot read the baseline '{}'", path);
    std::string line;
    std::vector<std::string> header;
    int lineNo = 0;
    auto split = [](const std::string& s) {
      std::vector<std::string> cells;
      std::stringstream ss(s);
      std::string cell;
      while (std::getline(ss, cell, ',')) cells.push_back(cell);
      return cells;
    };
    auto column = [&](const std::string& n) -> int {
      auto it = std::find(header.begin(), header.end(), n);
      return it == header.end() ? -1 : static_cast<int>(it - header.begin());
    };
    int batchCol = -1, threadsCol = -1, valueCol = -1;
    while (std::getline(f, line)) {
      ++lineNo;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      if (header.empty()) {
        header = split(line);
        batchCol = column("batch");
        threadsCol = column("threads");
        valueCol = column("samples_per_s");
        if (batchCol < 0 || valueCol < 0) {
          fail("baseline '{}': the header must name the columns 'batch' and 'samples_per_s', got '{}'", path, line);
        }
        continue;
      }
      std::vector<std::string> cells = split(line);
      try {
        int64_t batch = std::stoll(cells.at(static_cast<size_t>(batchCol)));
        int threads = threadsCol < 0 ? 0 : std::stoi(cells.at(static_cast<size_t>(threadsCol)));
        rows_[{batch, threads}] = std::stod(cells.at(static_cast<size_t>(valueCol)));
      } catch (const std::exception&) {
        fail("baseline '{}' line {}: expected numbers in 'batch'{} and 'samples_per_s', got '{}'", path, lineNo,
             threadsCol < 0 ? "" : ", 'threads'", line);
      }
    }
    if (rows_.empty()) fail("baseline '{}' has no rows", path);
    anyThreads_ = threadsCol < 0;
  }
  std::string name() const override { return std::filesystem::path(path_).filename().string(); }
  std::optional<double> samplesPerSecond(int64_t batch, int threads) override {
    auto it = rows_.find({batch, anyThreads_ ? 0 : threads});
    if (it == rows_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::string path_;
  std::map<std::pair<int64_t, int>, double> rows_;
  bool anyThreads_ = false;
};

// PyTorch eager on the same model (--baseline torch): bench/peers/torch_baseline.py rebuilds the
// ONNX graph as torch modules (the peers' translator), times it at the same batch sizes and thread
// counts and writes the CSV this reads.
class TorchBaseline : public CsvBaseline {
 public:
  explicit TorchBaseline(const std::string& csv) : CsvBaseline(csv) {}
  std::string name() const override { return "torch (PyTorch eager, bench/peers/torch_baseline.py)"; }
  std::string column() const override { return "eager"; }
};

std::string torchBaselineCsv(const BenchOptions& o, const std::filesystem::path& csv) {
  if (std::filesystem::path(o.model).extension() != ".onnx") fail("--baseline torch needs an .onnx model, got '{}'", o.model);
  std::vector<std::string> argv = {kPython, scriptPath("bench/peers/torch_baseline.py"), o.model,
                                    "--batch", fmt::format("{}", fmt::join(o.batches, ",")),
                                    "--threads", fmt::format("{}", fmt::join(o.threads, ",")),
                                    "--min-time", fmt::format("{}", o.minSeconds),
                                    "--min-calls", fmt::format("{}", o.minCalls),
                                    "--warmup", fmt::format("{}", o.warmup),
                                    "--csv", csv.string()};
  fmt::print("timing PyTorch eager: {}\n", process::commandLine(argv));
  std::fflush(stdout);
  runScript(argv, "PyTorch eager baseline");
  return csv.string();
}

// ---- the profile of one row

struct KernelRow {
  int kernel = 0;
  uint64_t ns = 0, calls = 0;
  double usPerCall() const { return calls ? static_cast<double>(ns) / 1e3 / static_cast<double>(calls) : 0.0; }
};

struct RowProfile {
  Timing timing;
  std::vector<KernelRow> kernels;             // execution order
  std::vector<policyc_trace_event> trace;     // the first kTraceEvents kernel calls of the row
};

constexpr int64_t kTraceEvents = 20000;  // per row: enough to see many calls, a trace of a few MB

RowProfile readProfile(const policyc_profile& p, const Timing& t) {
  RowProfile r{t, {}, {}};
  for (int k = 0; k < p.num_kernels; ++k) r.kernels.push_back({k, p.kernel_ns[k], p.kernel_calls[k]});
  int64_t n = std::min({*p.trace_count, p.trace_capacity, kTraceEvents});
  r.trace.assign(p.trace, p.trace + n);
  return r;
}

// A kernel's least time per call at batch b on this machine (roofline.h), in microseconds.
double kernelBoundUs(const Roofline& roof, const policyc_kernel_info& info, int64_t batch) {
  const double b = static_cast<double>(batch);
  return roof.boundUs(info.flops_static + info.flops_per_row * b, info.bytes_static + info.bytes_per_row * b);
}

// Kernels more than this many times over their bound are marked: far from what the machine can do.
constexpr double kOverBound = 3.0;

// `roof` null: no bounds (a CPU the roofline cannot measure); the columns say "-".
void printProfile(const policyc_profile& p, const RowProfile& r, const Roofline* roof) {
  std::vector<KernelRow> rows = r.kernels;
  std::sort(rows.begin(), rows.end(), [](const KernelRow& a, const KernelRow& b) { return a.ns > b.ns; });
  double kernelUs = 0;
  for (const KernelRow& k : rows) kernelUs += static_cast<double>(k.ns) / 1e3;
  const double wallUs = r.timing.totalUs;
  fmt::print("\nprofile: batch {}, {} thread{}, {} calls; kernels take {:.1f}% of the run time\n", r.timing.batch,
             r.timing.threads, r.timing.threads == 1 ? "" : "s", r.timing.calls, 100.0 * kernelUs / wallUs);
  fmt::print("{:<40} {:>8} {:>12} {:>6} {:>10} {:>8} {:>8} {:>9} {:>8}  {}\n", "kernel", "calls", "total us", "%", "us/call",
             "GFLOP/s", "GB/s", "bound us", "x bound", "nodes");
  for (const KernelRow& k : rows) {
    const policyc_kernel_info& info = p.kernels[k.kernel];
    const double us = static_cast<double>(k.ns) / 1e3;
    const double b = static_cast<double>(r.timing.batch);
    const double flops = (info.flops_static + info.flops_per_row * b) * static_cast<double>(k.calls);
    const double bytes = (info.bytes_static + info.bytes_per_row * b) * static_cast<double>(k.calls);
    std::string nodes = info.nodes;
    if (nodes.size() > 40) nodes = nodes.substr(0, 37) + "...";
    const double bound = roof ? kernelBoundUs(*roof, info, r.timing.batch) : 0.0;
    const double over = bound > 0 ? k.usPerCall() / bound : 0.0;
    fmt::print("{:<40} {:>8} {:>12.1f} {:>6.1f} {:>10.2f} {:>8.1f} {:>8.1f} {:>9} {:>7}{}  {}\n", info.name, k.calls, us,
               100.0 * us / wallUs, k.usPerCall(), k.ns ? flops / static_cast<double>(k.ns) : 0.0,
               k.ns ? bytes / static_cast<double>(k.ns) : 0.0, roof ? fmt::format("{:.3f}", bound) : "-",
               roof ? fmt::format("{:.1f}", over) : "-", over > kOverBound ? "*" : " ", nodes);
  }
  fmt::print("{:<40} {:>8} {:>12.1f} {:>6.1f} {:>10.2f}\n", "(outside kernels: entry, timers, loop)", r.timing.calls,
             wallUs - kernelUs, 100.0 * (wallUs - kernelUs) / wallUs, (wallUs - kernelUs) / static_cast<double>(r.timing.calls));
  if (roof) {
    fmt::print("(bound: the larger of FLOPs / {:.0f} GFLOP/s and bytes / the bandwidth of the level holding them "
               "(L2 {:.0f}, L3 {:.0f}, DRAM {:.0f} GB/s); * more than {:.0f}x over it)\n",
               roof->peak(), roof->bwL2, roof->bwL3, roof->bwDram, kOverBound);
  }
}

// Chrome's trace event format (chrome://tracing, Perfetto): one process per row, one complete
// ("X") event per kernel call, timestamps in microseconds from the row's first call.
void writeTrace(const std::string& path, const policyc_profile& p, const std::string& model, const std::vector<RowProfile>& rows) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowProfile& r = rows[i];
    const int pid = static_cast<int>(i) + 1;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                      {"args", {{"name", fmt::format("{} batch {}, {} threads", model, r.timing.batch, r.timing.threads)}}}});
    if (r.trace.empty()) continue;
    // One track per thread: the calling thread's kernels, and each worker's chunks of them.
    std::set<int32_t> threads;
    for (const policyc_trace_event& e : r.trace) threads.insert(e.thread);
    for (int32_t t : threads) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t},
                        {"args", {{"name", t == 0 ? std::string("run (calling thread)") : fmt::format("worker {}", t)}}}});
    }
    uint64_t base = r.trace.front().start_ns;
    for (const policyc_trace_event& e : r.trace) base = std::min(base, e.start_ns);
    for (const policyc_trace_event& e : r.trace) {
      const policyc_kernel_info& info = p.kernels[e.kernel];
      events.push_back({{"name", info.name}, {"cat", info.kind}, {"ph", "X"}, {"pid", pid}, {"tid", e.thread},
                        {"ts", static_cast<double>(e.start_ns - base) / 1e3}, {"dur", static_cast<double>(e.duration_ns) / 1e3},
                        {"args", {{"nodes", info.nodes}, {"batch", e.batch}}}});
    }
  }
  nlohmann::json j = {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  std::ofstream f(path);
  // Node names are the model's bytes: invalid UTF-8 is replaced (U+FFFD), never a failed write.
  f << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!f) fail("cannot write the trace '{}'", path);
}

double flopsPerCall(const policyc_profile* p, int64_t batch) {
  double f = 0;
  for (int k = 0; p && k < p->num_kernels; ++k) f += p->kernels[k].flops_static + p->kernels[k].flops_per_row * static_cast<double>(batch);
  return f;
}

// FLOPs (or bytes) per nanosecond of a kernel over a row: GFLOP/s (GB/s).
double kernelRate(double perCall, double perRow, int64_t batch, const KernelRow& k) {
  if (!k.ns) return 0;
  return (perCall + perRow * static_cast<double>(batch)) * static_cast<double>(k.calls) / static_cast<double>(k.ns);
}

// A row of the JSON output: its timing, and with a profile its kernels.
nlohmann::json rowJson(const Timing& r, const policyc_profile* prof, const RowProfile* profile, const Roofline* roof = nullptr) {
  nlohmann::json row = {{"batch", r.batch},      {"threads", r.threads}, {"calls", r.calls},
                        {"median_us", r.median}, {"p10_us", r.p10},      {"p90_us", r.p90},
                        {"mean_us", r.mean},     {"samples_per_s", r.samplesPerSecond()}};
  if (prof) row["flops"] = flopsPerCall(prof, r.batch);
  for (size_t k = 0; profile && k < profile->kernels.size(); ++k) {
    const KernelRow& kr = profile->kernels[k];
    const policyc_kernel_info& info = prof->kernels[kr.kernel];
    row["kernels"].push_back({{"name", info.name},
                              {"kind", info.kind},
                              {"nodes", info.nodes},
                              {"calls", kr.calls},
                              {"us_per_call", kr.usPerCall()},
                              {"gflops", kernelRate(info.flops_static, info.flops_per_row, r.batch, kr)},
                              {"gbps", kernelRate(info.bytes_static, info.bytes_per_row, r.batch, kr)}});
    if (roof) {
      const double bound = kernelBoundUs(*roof, info, r.batch);
      row["kernels"].back()["bound_us"] = bound;
      row["kernels"].back()["over_bound"] = bound > 0 ? kr.usPerCall() / bound : 0.0;
    }
  }
  return row;
}

// What a run writes besides its tables: --json, the plot (bench/plot.py from the same JSON), and
// with --debug-dir the profile into that directory, whose report is then written again.
void writeOutputs(const BenchOptions& o, const nlohmann::json& j, const files::TempDir& scratch) {
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";  // as the trace's
  auto write = [&](const std::filesystem::path& path) {
    std::ofstream f(path);
    f << text;
    if (!f) fail("cannot write '{}'", path.string());
  };
  if (!o.json.empty()) write(o.json);
  if (!o.plot.empty()) {
    const std::filesystem::path rows = scratch.path() / "rows.json";
    write(rows);
    runScript({kPython, scriptPath("bench/plot.py"), "bench", "--json", rows.string(), "--out", o.plot}, "the plot");
    fmt::print("\nwrote the plot {}\n", o.plot);
  }
  if (!o.debugDir.empty() && o.profile) {
    driver::recordDebugFiles(o.debugDir, {"profile.json"});
    write(std::filesystem::path(o.debugDir) / "profile.json");
    fmt::print("\nwrote the profile and the report {}\n", driver::writeReport(o.debugDir).string());
  }
}

// --compare-backends: the model built by both backends, loaded side by side; per row both are
// warmed up, then timed in alternating slices of about kSliceUs (the first of each pair
// alternating too) until each has its calls and time, so that a change of the machine's speed
// during the run hits both alike. Kernel times come from each build's own profile.
int compareBackends(const BenchOptions& o, const BenchCompile& compile) {
  constexpr double kSliceUs = 2000;
  if (driver::isSharedObject(o.model)) fail("--compare-backends needs the .onnx/.pir model, not a compiled '{}'", o.model);
  if (!o.baseline.empty() || !o.trace.empty()) fail("--compare-backends takes neither --baseline nor --trace");
  const codegen::Backend backends[2] = {codegen::Backend::Cpp, codegen::Backend::Llvm};
  std::vector<runtime::Model> models;
  std::vector<std::string> sos;
  for (codegen::Backend b : backends) {
    sos.push_back(compile(o.model, b, o.fuse, o.profile));
    models.push_back(runtime::Model::load(sos.back()));
  }
  fmt::print("{}, target {}, backends cpp and llvm in one process, calls interleaved{}; microseconds per call, {} warm-up "
             "calls each, then >= {} calls and >= {} s per row each\n",
             models[0].name(), models[0].target(), o.profile ? ", profiled" : "", o.warmup, o.minCalls, o.minSeconds);
  fmt::print("{:>6} {:>7} {:>12} {:>12} {:>9}\n", "batch", "threads", "cpp median", "llvm median", "llvm/cpp");
  nlohmann::json j;
  j["model"] = models[0].name();
  j["target"] = models[0].target();
  j["profiled"] = o.profile;
  std::vector<std::pair<Timing, std::vector<RowProfile>>> table;
  for (int64_t batch : o.batches) {
    for (int threads : o.threads) {
      std::vector<std::unique_ptr<Buffers>> bufs;
      std::vector<std::function<void()>> calls;
      std::vector<double> perCall;
      for (const runtime::Model& m : models) {
        bufs.push_back(std::make_unique<Buffers>(m, batch));
        calls.push_back(modelCall(m, *bufs.back(), batch, threads));
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < o.warmup; ++i) calls.back()();
        perCall.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                          static_cast<double>(std::max<int64_t>(o.warmup, 1)));
      }
      for (const runtime::Model& m : models) {
        if (o.profile) m.profile()->reset();
      }
      std::vector<std::vector<double>> us(models.size());
      const auto start = std::chrono::steady_clock::now();
      auto done = [&] {
        for (const std::vector<double>& u : us) {
          if (static_cast<int64_t>(u.size()) < o.minCalls) return false;
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= o.minSeconds;
      };
      for (size_t round = 0; !done(); ++round) {
        for (size_t n = 0; n < models.size(); ++n) {
          const size_t m = (n + round) % models.size();
          const int64_t slice = std::max<int64_t>(1, static_cast<int64_t>(kSliceUs / std::max(perCall[m], 1e-3)));
          for (int64_t i = 0; i < slice; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            calls[m]();
            us[m].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
          }
        }
      }
      std::vector<Timing> t;
      for (size_t m = 0; m < models.size(); ++m) t.push_back(summarize(batch, threads, std::move(us[m])));
      fmt::print("{:>6} {:>7} {:>12.2f} {:>12.2f} {:>9.2f}\n", batch, threads, t[0].median, t[1].median, t[1].median / t[0].median);
      std::fflush(stdout);
      for (size_t m = 0; m < models.size(); ++m) {
        std::optional<RowProfile> p;
        if (o.profile) p = readProfile(*models[m].profile(), t[m]);
        j["backends"][codegen::backendName(backends[m])]["so"] = sos[m];
        j["backends"][codegen::backendName(backends[m])]["rows"].push_back(rowJson(t[m], models[m].profile(), p ? &*p : nullptr));
        if (p) table.push_back({t[m], {*p}});
      }
    }
  }
  // Kernel by kernel: both builds have the same kernels (the schedule is shared).
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    const policyc_profile& pc = *models[0].profile();
    const Timing& r = table[i].first;
    fmt::print("\nkernels at batch {}, {} thread{} (microseconds per call; > 1.25x apart marked)\n", r.batch, r.threads,
               r.threads == 1 ? "" : "s");
    fmt::print("{:<44} {:>10} {:>10} {:>9}\n", "kernel", "cpp", "llvm", "llvm/cpp");
    const std::vector<KernelRow>& kc = table[i].second[0].kernels;
    const std::vector<KernelRow>& kl = table[i + 1].second[0].kernels;
    for (size_t k = 0; k < kc.size() && k < kl.size(); ++k) {
      const double c = kc[k].usPerCall(), l = kl[k].usPerCall();
      const bool apart = std::max(c, l) > 1.25 * std::min(c, l);
      fmt::print("{:<44} {:>10.2f} {:>10.2f} {:>9.2f}{}\n", pc.kernels[kc[k].kernel].name, c, l, c > 0 ? l / c : 0.0, apart ? "  *" : "");
    }
  }
  files::TempDir scratch("policyc-bench");
  writeOutputs(o, j, scratch);
  return 0;
}

}  // namespace

int runBench(const BenchOptions& o, const BenchCompile& compile) {
  if (o.minCalls < 1 || o.warmup < 0 || o.minSeconds < 0) fail("--min-calls must be >= 1, --warmup and --min-time >= 0");
  for (int64_t b : o.batches) {
    if (b < 1) fail("--batch must be >= 1, got {}", b);
  }
  for (int t : o.threads) {
    if (t < 1) fail("--threads must be >= 1, got {}", t);
  }
  if (!o.trace.empty() && !o.profile) fail("--trace needs --profile");
  if (!o.plot.empty()) {
    const std::string ext = std::filesystem::path(o.plot).extension().string();
    if (ext != ".svg" && ext != ".png" && ext != ".pdf") fail("--plot writes F.svg, F.png or F.pdf, got '{}'", o.plot);
  }
  const bool compiled = driver::isSharedObject(o.model);
  if (o.compareBackends) return compareBackends(o, compile);
  std::string so = compiled ? o.model : compile(o.model, o.backend, o.fuse, o.profile);
  runtime::Model model = runtime::Model::load(so);
  const policyc_profile* prof = model.profile();
  if (o.profile && (!prof || !prof->instrumented)) {
    fail("'{}' was compiled without profiling: pass the .onnx/.pir model, or build it with `policyc compile --profile`", so);
  }
  std::optional<Roofline> roof;
  if (o.profile) {
    try {
      roof = machineRoofline(o.roofline);
    } catch (const Error& e) {
      if (!o.roofline.empty()) throw;  // the file asked for is wrong: say so
      fmt::print(stderr, "policyc: no kernel bounds: {}\n", e.what());
    }
  }

  files::TempDir scratch("policyc-bench");
  std::unique_ptr<Baseline> baseline;
  if (o.baseline == "nofuse" || o.baseline == "interp") {
    if (compiled) fail("--baseline {} needs the .onnx/.pir model, not the compiled '{}'", o.baseline, o.model);
    if (o.baseline == "nofuse") {
      baseline = std::make_unique<CompiledBaseline>("nofuse", runtime::Model::load(compile(o.model, o.backend, false, false)), o);
    } else {
      baseline = std::make_unique<InterpreterBaseline>(driver::loadModel(o.model), o);
    }
  } else if (o.baseline == "torch") {
    baseline = std::make_unique<TorchBaseline>(torchBaselineCsv(o, scratch.path() / "torch.csv"));
  } else if (!o.baseline.empty()) {
    baseline = std::make_unique<CsvBaseline>(o.baseline);
  }

  const std::string backend =
      compiled ? std::string() : fmt::format("backend {}{}, ", codegen::backendName(o.backend), o.fuse ? "" : " without fusion");
  fmt::print("{} ({}), {}target {}{}{}; microseconds per call, {} warm-up calls, then >= {} calls and >= {} s per row\n",
             model.name(), so, backend, model.target(),
             model.precision() == "fp32" ? "" : fmt::format(", precision {}", model.precision()),
             o.profile ? ", profiled (timers around every kernel)" : "", o.warmup, o.minCalls, o.minSeconds);
  fmt::print("{:>6} {:>7} {:>10} {:>10} {:>10} {:>9} {:>12} {:>8}\n", "batch", "threads", "median", "p10", "p90", "calls",
             "samples/s", "GFLOP/s");
  std::vector<Timing> rows;
  std::vector<RowProfile> profiles;
  for (int64_t b : o.batches) {
    for (int t : o.threads) {
      Timing r = timeModel(model, b, t, o, [&] {
        if (o.profile) prof->reset();
      });
      fmt::print("{:>6} {:>7} {:>10.2f} {:>10.2f} {:>10.2f} {:>9} {:>12.0f} {:>8.1f}\n", r.batch, r.threads, r.median,
                 r.p10, r.p90, r.calls, r.samplesPerSecond(), flopsPerCall(prof, b) / (r.median * 1e3));
      std::fflush(stdout);
      rows.push_back(r);
      if (o.profile) profiles.push_back(readProfile(*prof, r));
    }
  }
  for (const RowProfile& r : profiles) printProfile(*prof, r, roof ? &*roof : nullptr);
  if (!o.trace.empty()) {
    writeTrace(o.trace, *prof, model.name(), profiles);
    fmt::print("\nwrote the trace {} (chrome://tracing or https://ui.perfetto.dev)\n", o.trace);
  }

  // The seed benchmark's layout: throughput against the baseline, per thread count.
  std::vector<std::optional<double>> base(rows.size());
  if (baseline) {
    for (int t : o.threads) {
      fmt::print("\n{} thread{}: throughput in samples/s, baseline {}\n", t, t == 1 ? "" : "s", baseline->name());
      fmt::print("{:>10} {:>14} {:>14} {:>9}\n", "batch size", baseline->column(), "compiled", "speedup");
      for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].threads != t) continue;
        base[i] = baseline->samplesPerSecond(rows[i].batch, t);
        const double c = rows[i].samplesPerSecond();
        if (base[i]) {
          fmt::print("{:>10} {:>14.0f} {:>14.0f} {:>8.2f}x\n", rows[i].batch, *base[i], c, c / *base[i]);
        } else {
          fmt::print("{:>10} {:>14} {:>14.0f} {:>9}\n", rows[i].batch, "-", c, "-");
        }
        std::fflush(stdout);
      }
    }
  }

  nlohmann::json j;
  j["model"] = model.name();
  j["so"] = so;
  j["target"] = model.target();
  j["profiled"] = o.profile;
  if (baseline) j["baseline"] = baseline->name();
  if (prof) j["weight_bytes"] = prof->weight_bytes;
  for (size_t i = 0; i < rows.size(); ++i) {
    // profiles[i] is row i's: both are filled row by row
    nlohmann::json row = rowJson(rows[i], prof, o.profile ? &profiles[i] : nullptr, roof ? &*roof : nullptr);
    if (base[i]) row["baseline_samples_per_s"] = *base[i];
    j["rows"].push_back(row);
  }
  if (!o.csv.empty()) {
    std::ofstream f(o.csv);
    f << "model,batch,threads,calls,median_us,p10_us,p90_us,samples_per_s,gflops,baseline_samples_per_s,speedup\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Timing& r = rows[i];
      f << fmt::format("{},{},{},{},{:.3f},{:.3f},{:.3f},{:.1f},{:.3f},{},{}\n", model.name(), r.batch, r.threads, r.calls,
                       r.median, r.p10, r.p90, r.samplesPerSecond(), flopsPerCall(prof, r.batch) / (r.median * 1e3),
                       base[i] ? fmt::format("{:.1f}", *base[i]) : "",
                       base[i] ? fmt::format("{:.3f}", r.samplesPerSecond() / *base[i]) : "");
    }
    if (!f) fail("cannot write '{}'", o.csv);
  }
  writeOutputs(o, j, scratch);
  return 0;
}

}  // namespace policyc::tools
