// `policyc bench`: per-call latency of a compiled model, a baseline to compare with, and the
// per-kernel profile (table and Chrome trace) of a model compiled with profiling.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "policyc/codegen/backend.h"

namespace policyc::tools {

struct BenchOptions {
  std::string model;                 // .onnx / .pir (compiled through the cache) or OUT.so
  codegen::Backend backend = codegen::kDefaultBackend;  // cpp | llvm, for .onnx/.pir
  bool fuse = true;                  // false: --no-fuse
  std::vector<int64_t> batches = {1};
  std::vector<int> threads = {1};
  double minSeconds = 1.0;
  int64_t minCalls = 200;
  int64_t warmup = 50;
  std::string json;                  // write the rows as JSON here
  std::string csv;                   // write the rows as CSV here
  // interp | nofuse (the same backend without fusion) | torch (PyTorch eager through the peers'
  // translator, bench/peers/torch_baseline.py) | FILE.csv (batch, [threads,] samples_per_s)
  std::string baseline;
  std::string plot;                  // bench/plot.py's latency (and throughput) plot of the rows here
  // The compile's debug directory (an .onnx/.pir model); with profile, profile.json goes there
  // and its report (index.html) shows it.
  std::string debugDir;
  bool profile = false;              // compile with profiling and print the per-kernel table
  // With profile: the roofline each kernel's bound comes from (policyc_roofline --json); empty:
  // this machine's, measured once and cached (roofline.h).
  std::string roofline;
  std::string trace;                 // with profile: a Chrome trace of every row
  // Both backends' builds in one process, their calls interleaved a few milliseconds at a time so
  // that both see the same machine (another process, a clock change), compared row by row and,
  // with profile, kernel by kernel.
  bool compareBackends = false;
};

// Compiles an .onnx/.pir model into a cached .so: (model, backend, fuse, profile) -> path.
using BenchCompile = std::function<std::string(const std::string&, codegen::Backend, bool, bool)>;

// Runs the benchmark and prints its tables; errors are policyc::Error. Returns the exit code.
int runBench(const BenchOptions& options, const BenchCompile& compile);

}  // namespace policyc::tools
