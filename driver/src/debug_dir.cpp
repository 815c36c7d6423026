// The debug directory: choosing it, writing files atomically, and the compile-time table.
#include "policyc/driver/debug_dir.h"

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"

namespace policyc::driver {

namespace fs = std::filesystem;

DebugDir::DebugDir(fs::path dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("cannot create the debug directory '{}': {}", dir_.string(), ec.message());
}

std::optional<DebugDir> DebugDir::select(const std::string& flagDir, const std::string& modelPath,
                                         const std::string& modelName) {
  if (!flagDir.empty()) return DebugDir(flagDir);
  const char* env = std::getenv("POLICYC_DEBUG");
  if (!env || std::string_view(env).empty() || std::string_view(env) == "0") return std::nullopt;
  std::string hash = fileHash(modelPath).substr(0, 8);
  // The graph's name comes from the model file: one safe path component (escape::fileName).
  return DebugDir(fs::path("policyc_debug") / escape::fileName(fmt::format("{}-{}", modelName, hash.empty() ? "nohash" : hash)));
}

void DebugDir::write(std::string_view name, std::string_view text) const {
  asError([&] { files::writeAtomic(dir_ / name, text); });
}

void DebugDir::writeGraph(std::string_view name, const ir::Graph& graph) const {
  ir::writePir(graph, (dir_ / name).string());
}

void DebugDir::recordTime(std::string stage, double milliseconds) {
  for (auto& [s, ms] : times_) {
    if (s == stage) {
      ms += milliseconds;
      return;
    }
  }
  times_.emplace_back(std::move(stage), milliseconds);
}

void DebugDir::writeTimes() const {
  double total = 0;
  for (const auto& [stage, ms] : times_) total += ms;
  std::string text = fmt::format("{:<24} {:>10}\n", "stage", "ms");
  for (const auto& [stage, ms] : times_) text += fmt::format("{:<24} {:>10.2f}\n", stage, ms);
  text += fmt::format("{:<24} {:>10.2f}\n", "total", total);
  write("compile_times.txt", text);
}

StageTimer::~StageTimer() {
  if (!dir_) return;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  dir_->recordTime(stage_, ms);
}

namespace {
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
uint64_t fnv1a(uint64_t h, std::string_view bytes) {
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}
}  // namespace

std::string fileHash(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  uint64_t h = kFnvOffset;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) h = fnv1a(h, std::string_view(buf, static_cast<size_t>(f.gcount())));
  return fmt::format("{:016x}", h);
}

uint64_t textHash(std::string_view text) { return fnv1a(kFnvOffset, text); }

}  // namespace policyc::driver
