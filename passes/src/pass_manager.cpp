// The pass registry, pass statistics, and the driver that runs, verifies, times and logs passes.
#include "policyc/passes/pass_manager.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/ir/verifier.h"

namespace policyc::passes {
namespace {

const std::vector<PassInfo>& registry() {
  static const std::vector<PassInfo> passes = {
#define POLICYC_PASS(name, fn, fusion, description) PassInfo{name, &fn, fusion, description},
#include "policyc/passes/passes.def"
#undef POLICYC_PASS
  };
  return passes;
}

std::string knownPasses() {
  std::vector<std::string_view> names;
  for (const PassInfo& p : registry()) names.push_back(p.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

const PassInfo& requirePass(std::string_view name, std::string_view option) {
  const PassInfo* info = findPass(name);
  if (!info) fail("{}: unknown pass '{}' (known passes: {})", option, name, knownPasses());
  return *info;
}

}  // namespace

void PassStats::add(std::string_view what, int64_t n) {
  for (auto& [name, count] : counters_) {
    if (name == what) {
      count += n;
      return;
    }
  }
  counters_.emplace_back(std::string(what), n);
}

int64_t PassStats::get(std::string_view what) const {
  for (const auto& [name, count] : counters_) {
    if (name == what) return count;
  }
  return 0;
}

bool PassStats::changed() const {
  return std::any_of(counters_.begin(), counters_.end(), [](const auto& c) { return c.second != 0; });
}

std::string PassStats::str() const {
  std::vector<std::string> parts;
  for (const auto& [name, count] : counters_) {
    if (count) parts.push_back(fmt::format("{} {}", count, name));
  }
  return parts.empty() ? "no change" : fmt::format("{}", fmt::join(parts, ", "));
}

std::span<const PassInfo> allPasses() { return registry(); }

const PassInfo* findPass(std::string_view name) {
  for (const PassInfo& p : registry()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

PipelineResult runPipeline(ir::Graph& graph, const PipelineOptions& options) {
  std::vector<std::string> names = options.passes ? *options.passes : defaultPipeline();
  for (const std::string& n : names) requirePass(n, "--passes");
  for (const std::string& n : options.disabled) requirePass(n, "--disable-pass");
  bool printAll = false;
  for (const std::string& n : options.printAfter) {
    if (n == "all") {
      printAll = true;
    } else {
      requirePass(n, "--print-after");
    }
  }

  PipelineResult result;
  for (const std::string& name : names) {
    const PassInfo& info = requirePass(name, "--passes");
    if (std::find(options.disabled.begin(), options.disabled.end(), name) != options.disabled.end()) continue;
    if (options.noFusion && info.fusion) continue;
    auto start = std::chrono::steady_clock::now();
    PassStats stats;
    try {
      stats = info.run(graph);
    } catch (const Error& e) {
      fail("pass '{}': {}", name, e.what());
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (options.verifyEach) {
      try {
        ir::verify(graph);
      } catch (const Error& e) {
        fail("internal: the graph is malformed after pass '{}': {}", name, e.what());
      }
    }
    PassLogEntry entry{name, stats, ms, ""};
    if (stats.changed()) entry.graphAfter = ir::printGraph(graph).text;
    bool print = printAll || std::find(options.printAfter.begin(), options.printAfter.end(), name) !=
                                 options.printAfter.end();
    if (print) {
      result.printed += fmt::format("// ----- after {} ({})\n", name, stats.str());
      result.printed += stats.changed() ? entry.graphAfter : ir::printGraph(graph).text;
    }
    if (options.afterPass) options.afterPass(name, stats, graph);
    result.log.push_back(std::move(entry));
  }
  return result;
}

std::string formatPassLog(const PipelineResult& result) {
  std::string out;
  for (const PassLogEntry& e : result.log) {
    out += fmt::format("pass {}: {} ({:.2f} ms)\n", e.pass, e.stats.str(), e.milliseconds);
    if (!e.graphAfter.empty()) {
      out += e.graphAfter;
      out += "\n";
    }
  }
  return out;
}

}  // namespace policyc::passes
