// The autotuner of --mode max-autotune: one tuning build holding every implementation of every
// GEMM/conv kernel (a C++ .so or an LLVM module in the JIT: the backend's own code), timed per
// kernel through the profiling timers, checked against the generated microkernel, cached per
// kernel signature, backend and CPU.
#include "policyc/driver/autotune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "policyc/codegen/llvm_backend.h"
#include "policyc/driver/model_io.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/driver/compile.h"
#include "policyc/ir/error.h"
#include "policyc/support/progress.h"
#include "policyc/support/files.h"
#include "policyc/ir/text.h"
#include "policyc/runtime/loader.h"

namespace policyc::driver {

namespace fs = std::filesystem;
using codegen::Kernel;
using codegen::KernelProgram;

namespace {

// One measurement: the median time per call of a kernel with one implementation at one batch
// size, or why it has none.
struct Timing {
  double us = -1;      // median µs per call; -1: none
  std::string status;  // "" (ok), "wrong result: ...", "failed: ..."
  bool cached = false;
};

struct TunedKernel {
  size_t index = 0;  // in the program
  std::string name, kind, signature;
  std::vector<std::string> candidates;
  std::map<int64_t, std::string> heuristic;                 // batch -> what --mode default runs
  std::map<int64_t, std::map<std::string, Timing>> times;  // batch -> implementation -> timing
  fs::path cacheFile;
};

// ---- the cache: one file per kernel signature, CPU, target and thread count; a line per
// (batch, implementation): "BATCH IMPL MICROSECONDS STATUS..."

void readCache(TunedKernel& k) {
  std::ifstream f(k.cacheFile);
  std::string line;
  if (!std::getline(f, line) || line != "# " + k.signature) return;  // a hash collision or an old file
  while (std::getline(f, line)) {
    std::istringstream in(line);
    int64_t batch = 0;
    std::string impl;
    double us = -1;
    if (!(in >> batch >> impl >> us)) continue;
    std::string status;
    std::getline(in, status);
    if (!status.empty() && status[0] == ' ') status.erase(0, 1);
    k.times[batch][impl] = {us, status, true};
  }
}

void writeCache(const TunedKernel& k) {
  std::error_code ec;
  fs::create_directories(k.cacheFile.parent_path(), ec);
  fs::path tmp = k.cacheFile;
  tmp += fmt::format(".tmp{}", getpid());
  {
    std::ofstream f(tmp);
    f << "# " << k.signature << "\n";
    for (const auto& [batch, byImpl] : k.times) {
      for (const auto& [impl, t] : byImpl) f << fmt::format("{} {} {:.3f} {}\n", batch, impl, t.us, t.status);
    }
    if (!f) return;  // a cache that cannot be written only costs a re-tune
  }
  fs::rename(tmp, k.cacheFile, ec);
  if (ec) fs::remove(tmp, ec);
}

bool complete(const TunedKernel& k, int64_t batch) {
  auto it = k.times.find(batch);
  if (it == k.times.end()) return false;
  for (const std::string& c : k.candidates) {
    if (!it->second.count(c)) return false;
  }
  return true;
}

std::vector<int64_t> sortedBatches(std::vector<int64_t> b) {
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  if (b.empty() || b.front() < 1) fail("--tune-batch needs positive batch sizes");
  return b;
}

// Outputs agree within the tolerance policyc check uses (1e-4).
std::string mismatch(const std::vector<ir::Tensor>& got, const std::vector<ir::Tensor>& want) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    TensorCheck c = compareTensors(fmt::format("output {}", i), got[i], want[i], 1e-4, 1e-4);
    if (!c.pass) return fmt::format("output {} differs (max abs {:.3g}, max rel {:.3g})", i, c.maxAbs, c.maxRel);
  }
  return "";
}

// Times and checks every candidate that the cache lacks, in one tuning build (made by `build`
// only when something is to be timed).
void measure(const std::function<runtime::Model()>& build, const AutotuneOptions& options, std::vector<TunedKernel>& kernels,
             const std::vector<int64_t>& batches, int& timed) {
  std::map<int64_t, std::vector<size_t>> todo;  // batch -> kernels (indices into `kernels`) to time
  size_t maxCandidates = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    for (int64_t b : batches) {
      if (!complete(kernels[i], b)) {
        todo[b].push_back(i);
        maxCandidates = std::max(maxCandidates, kernels[i].candidates.size());
      }
    }
  }
  if (todo.empty()) return;
  if (options.progress) {
    fmt::print(stderr, "autotune: building every implementation of {} kernels (backend {})\n", kernels.size(),
               codegen::backendName(options.backend));
  }
  runtime::Model model = build();
  auto select = reinterpret_cast<int (*)(int, int)>(model.symbol("policyc_tune_select"));
  auto listed = reinterpret_cast<const char* (*)(int)>(model.symbol("policyc_tune_candidates"));
  const policyc_profile* prof = model.profile();
  if (!select || !listed || !prof || !prof->instrumented) fail("internal: the tuning build has no tuning hooks");
  for (TunedKernel& k : kernels) {
    const char* names = listed(static_cast<int>(k.index));
    if (!names || fmt::format("{}", fmt::join(k.candidates, ",")) != names) {
      fail("internal: kernel '{}' has candidates '{}' in the tuning build, expected '{}'", k.name, names ? names : "",
           fmt::join(k.candidates, ","));
    }
  }
  auto selectAll = [&](const std::vector<size_t>& which, size_t c) {
    for (const TunedKernel& k : kernels) select(static_cast<int>(k.index), 0);
    for (size_t i : which) {
      if (c < kernels[i].candidates.size()) select(static_cast<int>(kernels[i].index), static_cast<int>(c));
    }
  };
  const std::vector<ir::TensorType> types = inputTypes(model);
  support::Progress progress("autotune", static_cast<int>(todo.size() * maxCandidates), options.progress);
  for (const auto& [batch, which] : todo) {
    std::vector<ir::Tensor> inputs = randomTensors(types, batch, 1);
    selectAll(which, 0);
    const std::vector<ir::Tensor> reference = runModel(model, inputs, 1);
    for (size_t c = 0; c < maxCandidates; ++c) {
      std::vector<size_t> with;  // the kernels that have candidate c
      for (size_t i : which) {
        if (c < kernels[i].candidates.size()) with.push_back(i);
      }
      progress.step(fmt::format("batch {}, implementation {} of {}", batch, c + 1, maxCandidates));
      if (with.empty()) continue;
      selectAll(with, c);
      std::vector<ir::Tensor> out;
      std::string failure;
      try {
        out = runModel(model, inputs, 1);  // also the warm-up: oneDNN creates its primitives here
        runModel(model, inputs, 1);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      // A wrong or failing candidate: find which kernels it is wrong in, one at a time.
      std::set<size_t> bad;
      std::map<size_t, std::string> why;
      std::string wrong = failure.empty() ? mismatch(out, reference) : failure;
      if (!wrong.empty() && c > 0) {
        for (size_t i : with) {
          selectAll({i}, c);
          std::string w;
          try {
            w = mismatch(runModel(model, inputs, 1), reference);
          } catch (const std::exception& e) {
            w = std::string("failed: ") + e.what();
          }
          if (!w.empty()) {
            bad.insert(i);
            why[i] = w.rfind("failed", 0) == 0 ? w : "wrong result: " + w;
          }
        }
        selectAll(with, c);
        std::vector<size_t> good;
        for (size_t i : with) {
          if (!bad.count(i)) good.push_back(i);
        }
        selectAll(good, c);
      }
      // Time: per-kernel medians from the profiling trace.
      prof->reset();
      const int64_t nk = prof->num_kernels;
      const int64_t maxCalls = std::max<int64_t>(3, prof->trace_capacity / std::max<int64_t>(nk, 1) - 1);
      auto start = std::chrono::steady_clock::now();
      int64_t calls = 0;
      while (calls < 3 || (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                               options.secondsPerCandidate && calls < maxCalls)) {
        runModel(model, inputs, 1);
        ++calls;
      }
      std::map<int, std::vector<double>> perKernel;
      for (int64_t e = 0; e < std::min<int64_t>(*prof->trace_count, prof->trace_capacity); ++e) {
        perKernel[prof->trace[e].kernel].push_back(static_cast<double>(prof->trace[e].duration_ns) / 1000.0);
      }
      for (size_t i : with) {
        TunedKernel& k = kernels[i];
        Timing t;
        if (bad.count(i)) {
          t.status = why[i];
        } else {
          std::vector<double>& v = perKernel[static_cast<int>(k.index)];
          std::sort(v.begin(), v.end());
          t.us = v.empty() ? -1 : v[v.size() / 2];
        }
        k.times[batch][k.candidates[c]] = t;
      }
    }
    timed += static_cast<int>(which.size());
  }
}

// Part of every cache key: bumped whenever an implementation changes what it runs, so timings of
// an older one are never reused (2: oneDNN's own layouts for convs with post-ops).
constexpr int kImplementationsVersion = 2;

// How much faster than --mode default's choice another implementation must be to replace it:
// one tuning measurement's noise on this kind of shared machine.
constexpr double kMargin = 0.05;

std::string rangeText(const codegen::ImplDispatch& d) {
  std::string s;
  int64_t lo = 1;
  for (const codegen::ImplRange& r : d) {
    if (!s.empty()) s += ", ";
    if (r.maxBatch < 0) {
      s += d.size() == 1 ? fmt::format("{} for every batch", r.impl) : fmt::format("{} for batch >= {}", r.impl, lo);
    } else {
      s += fmt::format("{} for batch {}-{}", r.impl, lo, r.maxBatch);
      lo = r.maxBatch + 1;
    }
  }
  return s;
}

}  // namespace

std::string cpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

std::string kernelSignature(const KernelProgram& program, const Kernel& k) {
  std::string s = fmt::format("{} {} domain {}", codegen::kernelKindName(k.kind), k.anchor ? k.anchor->info().name : "",
                              ir::shapeStr(k.domain));
  if (k.anchor) {
    for (const auto& [name, value] : k.anchor->attrs()) s += fmt::format(" {}={}", name, ir::attrValueStr(value));
  }
  auto buffer = [&](int id) {
    const codegen::Buffer& b = program.buffer(id);
    return fmt::format("{}{}{}[{}]", ir::dtypeName(b.type.dtype), ir::shapeStr(b.type.shape), codegen::bufferKindName(b.kind),
                       fmt::join(b.strides, ","));
  };
  for (int id : k.anchorInputs) s += " " + buffer(id);
  s += " |";
  for (const codegen::Instr& in : k.body) {
    switch (in.opcode) {
      case codegen::Opcode::Load: s += " load " + buffer(in.buffer); break;
      case codegen::Opcode::Store: s += " store " + buffer(in.buffer); break;
      case codegen::Opcode::Const: s += fmt::format(" const {}", in.constant); break;
      case codegen::Opcode::Acc: s += " acc"; break;
      case codegen::Opcode::Apply: s += fmt::format(" {}({})", in.node ? in.node->info().name : "?", fmt::join(in.args, ",")); break;
    }
  }
  return s;
}

AutotuneResult autotune(const ir::Graph& graph, const AutotuneOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> batches = sortedBatches(options.cpp.tuneBatches);
  const std::string cpu = cpuModel();
  // The tunable kernels as the emitter sees them.
  std::vector<TunedKernel> kernels;
  // The tuning build: every candidate, selectable at run time, timed by the profiling timers.
  codegen::CppOptions cpp = options.cpp;
  cpp.tuning = true;
  cpp.profile = true;
  cpp.choice.reset();
  cpp.forceImpl.clear();
  const bool llvm = options.backend == codegen::Backend::Llvm;
  const std::string target = llvm ? fmt::format("{} cpu '{}' features '{}'", cpp.target, options.cpu, options.features) : cpp.target;
  const codegen::PlannedProgram planned = codegen::planGraph(graph, options.fuse);
  const KernelProgram& program = planned.program;
  {
    // --mode default's choice, as the backend's schedule makes it for this target.
    const codegen::TargetTraits traits = llvm ? codegen::resolveLlvmTarget({cpp.target, options.cpu, options.features}).traits()
                                              : codegen::cppTargetTraits(cpp.target);
    const codegen::ImplChoice heuristic = codegen::heuristicChoice(program, batches, cpp.externKernels, cpp.fault, traits, cpp.precision, cpp.keepFp32);
    for (size_t i = 0; i < program.kernels.size(); ++i) {
      const Kernel& k = program.kernels[i];
      std::vector<std::string> c = codegen::implCandidates(program, k, cpp.externKernels, cpp.fault, cpp.precision, cpp.keepFp32, traits);
      if (c.empty()) continue;
      TunedKernel t;
      t.index = i;
      t.name = k.name;
      t.kind = fmt::format("{} {}", codegen::kernelKindName(k.kind), ir::shapeStr(k.domain));
      t.candidates = c;
      for (int64_t b : batches) {
        for (const codegen::ImplRange& r : heuristic.at(k.name)) {
          if (r.maxBatch < 0 || b <= r.maxBatch) {
            t.heuristic[b] = r.impl;
            break;
          }
        }
      }
      t.signature = fmt::format("{} | backend {} | cpu {} | target {} | threads 1 | candidates {} v{}", kernelSignature(program, k),
                                codegen::backendName(options.backend), cpu, target, fmt::join(c, ","), kImplementationsVersion);
      t.cacheFile = cacheDir() / "autotune" / fmt::format("{:016x}.txt", textHash(t.signature));
      kernels.push_back(std::move(t));
    }
  }
  std::optional<files::TempDir> tmp;
  auto build = [&]() -> runtime::Model {
    if (llvm) {
      codegen::LlvmOptions o;
      static_cast<codegen::CodegenOptions&>(o) = cpp;
      o.target = {cpp.target, options.cpu, options.features};
      CompileResult compiled;
      compiled.jit = codegen::jitCompile(codegen::emitLlvm(program, planned.plan, o));
      return loadCompiled(compiled);
    }
    tmp.emplace("policyc-tune");
    codegen::BuildOptions b;
    b.workDir = (tmp->path() / "build").string();
    const fs::path so = tmp->path() / "tune.so";
    codegen::buildSharedObject(codegen::emitCpp(program, planned.plan, cpp), so.string(), b);
    return runtime::Model::load(so.string());
  };
  for (TunedKernel& k : kernels) readCache(k);
  AutotuneResult result;
  result.kernels = static_cast<int>(kernels.size());
  measure(build, options, kernels, batches, result.timed);
  for (const TunedKernel& k : kernels) writeCache(k);

  // The winners, and the report.
  const std::vector<int64_t> bounds = codegen::batchRangeBounds(batches);
  std::string& r = result.report;
  r += fmt::format("# policyc autotune: {} tunable kernels, backend {}, batch sizes {}, 1 thread, CPU {}, target {}\n", kernels.size(),
                   codegen::backendName(options.backend), fmt::join(batches, ","), cpu, target);
  r += "# per kernel and batch size: the median time per call (us) of every implementation; * marks the winner\n"
       "# (--mode default's choice unless another is more than 5% faster);\n"
       "# (cached) means the times come from an earlier tuning of the same kernel on this CPU\n";
  for (const TunedKernel& k : kernels) {
    r += fmt::format("\nkernel {} ({})\n", k.name, k.kind);
    codegen::ImplDispatch d;
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const std::map<std::string, Timing>& byImpl = k.times.at(batches[bi]);
      std::string best;
      double bestUs = 0;
      bool cached = true;
      for (const std::string& c : k.candidates) {
        const Timing& t = byImpl.at(c);
        cached = cached && t.cached;
        if (t.status.empty() && t.us >= 0 && (best.empty() || t.us < bestUs)) best = c, bestUs = t.us;
      }
      if (best.empty()) best = k.candidates.front();  // nothing ran correctly: the generated one
      // The default's choice stays unless another is faster beyond the noise of one measurement.
      bool kept = false;
      auto h = byImpl.find(k.heuristic.at(batches[bi]));
      if (h != byImpl.end() && h->first != best && h->second.status.empty() && h->second.us >= 0 &&
          bestUs > (1.0 - kMargin) * h->second.us) {
        best = h->first;
        kept = true;
      }
      std::string line = fmt::format("  batch {:>4}:", batches[bi]);
      for (const std::string& c : k.candidates) {
        const Timing& t = byImpl.at(c);
        line += t.status.empty() ? fmt::format("  {} {:.1f}{}", c, t.us, c == best ? "*" : "")
                                 : fmt::format("  {} ({})", c, t.status);
      }
      if (kept) line += fmt::format("  (default's choice kept: the fastest is within {:.0f}%)", kMargin * 100);
      r += line + (cached ? "  (cached)\n" : "\n");
      if (!d.empty() && d.back().impl == best) {
        d.back().maxBatch = bounds[bi];
      } else {
        d.push_back({bounds[bi], best});
      }
    }
    r += "  dispatch: " + rangeText(d) + "\n";
    result.choice[k.name] = d;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r += fmt::format("\n# {} (kernel, batch) pairs timed now, the rest cached; {:.1f} s\n", result.timed, result.seconds);
  return result;
}

}  // namespace policyc::driver
