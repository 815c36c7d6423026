// The debug directory: choosing it, writing files atomically, and the compile-time table.
#include "policyc/driver/debug_dir.h"

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>

#include <stdlib.h>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"
#include "policyc/support/escape.h"
#include "policyc/support/files.h"
#include "policyc/support/process.h"
#include "policyc/driver/autotune.h"

namespace policyc::driver {

namespace fs = std::filesystem;

namespace {

std::string& invocationCommandStorage() {
  static std::string command = "library";
  return command;
}
std::string& invocationLineStorage() {
  static std::string line;
  return line;
}

// The previous compile's files: every regular file under `dir` at least as new as its
// command.txt (which is written before anything else). Directories it leaves empty go too.
void removePreviousCompile(const fs::path& dir) {
  std::error_code ec;
  const fs::path marker = dir / "command.txt";
  if (!fs::is_regular_file(fs::symlink_status(marker, ec))) return;
  const fs::file_time_type since = fs::last_write_time(marker, ec);
  if (ec) return;
  std::vector<fs::path> stale, dirs;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(st)) {
      dirs.push_back(it->path());
    } else if (fs::is_regular_file(st) && fs::last_write_time(it->path(), ec) >= since && !ec) {
      stale.push_back(it->path());
    }
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) {
    if (fs::is_empty(*d, ec) && !ec) fs::remove(*d, ec);
  }
}

std::string nowText() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

void setInvocation(std::string command, std::string commandLine) {
  invocationCommandStorage() = std::move(command);
  invocationLineStorage() = std::move(commandLine);
}
const std::string& invocationCommand() { return invocationCommandStorage(); }

DebugDir::DebugDir(fs::path dir, std::string_view details) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail("cannot create the debug directory '{}': {}", dir_.string(), ec.message());
  removePreviousCompile(dir_);
  // Escaped: a model's path and names may hold any bytes; command.txt stays one line per item.
  std::string text = fmt::format("command: {}\ncommand line: {}\n", invocationCommand(), escape::message(invocationLineStorage()));
  text += std::string(details);
  text += fmt::format("cpu: {}\nwhen: {}\n", escape::message(cpuModel()), nowText());
  write("command.txt", text);
}

std::optional<DebugDir> DebugDir::select(const std::string& flagDir, const std::string& modelPath,
                                         const std::string& modelName, std::string_view backend, std::string_view details) {
  if (!flagDir.empty()) return DebugDir(flagDir, details);
  const char* env = std::getenv("POLICYC_DEBUG");
  if (!env || std::string_view(env).empty() || std::string_view(env) == "0") return std::nullopt;
  std::string hash = fileHash(modelPath).substr(0, 8);
  std::string name = fmt::format("{}-{}-{}", modelName, hash.empty() ? "nohash" : hash, invocationCommand());
  if (!backend.empty()) name += fmt::format("-{}", backend);
  // The graph's name comes from the model file: one safe path component (escape::fileName).
  return DebugDir(fs::path("policyc_debug") / escape::fileName(name), details);
}

void DebugDir::write(std::string_view name, std::string_view text) const {
  asError([&] { files::writeAtomic(dir_ / name, text); });
}

void DebugDir::writeGraph(std::string_view name, const ir::Graph& graph) const {
  ir::writePir(graph, (dir_ / name).string());
}

void DebugDir::writePicture(std::string_view name, const std::string& dotText) const {
  write(fmt::format("{}.dot", name), dotText);
  try {
    write(fmt::format("{}.svg", name), renderSvg(dotText));
  } catch (const Error& e) {
    write(fmt::format("{}.svg.txt", name), fmt::format("no picture: {}\n", e.what()));
  }
}

std::string renderSvg(const std::string& dotText) {
  // A private scratch directory: the DOT text in, the SVG and dot's messages out.
  char pattern[] = "/tmp/policyc-dot-XXXXXX";
  if (!::mkdtemp(pattern)) fail("cannot create a temporary directory for Graphviz: {}", std::strerror(errno));
  const fs::path tmp = pattern;
  auto cleanup = [&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  };
  try {
    asError([&] { files::writeAtomic(tmp / "in.dot", dotText); });
    int rc = 0;
    try {
      rc = process::run({"dot", "-Tsvg", (tmp / "in.dot").string(), "-o", (tmp / "out.svg").string()}, tmp / "dot.log");
    } catch (const std::runtime_error& e) {
      fail("{} (Graphviz draws the pictures: apt install graphviz)", e.what());
    }
    std::ifstream log(tmp / "dot.log");
    std::string messages((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (rc != 0) fail("Graphviz's dot failed (exit {}): {}", rc, messages);
    std::ifstream f(tmp / "out.svg", std::ios::binary);
    std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (svg.empty()) fail("Graphviz's dot wrote no SVG: {}", messages);
    cleanup();
    return svg;
  } catch (...) {
    cleanup();
    throw;
  }
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
