// The debug directory: choosing it, writing files atomically, and the compile-time table.
#include "policyc/driver/debug_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>


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

constexpr const char* kManifest = ".policyc-files";

// What the backends' builds write into their work directory, the debug directory when there is
// one (codegen::BuildOptions::workDir).
constexpr const char* kBuildFiles[] = {"output_code.cpp", "weights.bin", "build.log", "module.o", "link.log", "libpolicyc_llvm_support.a"};

// A name the manifest may hold: one plain component (no '/', no "..", nothing to escape).
bool plainName(const std::string& name) { return !name.empty() && escape::fileName(name) == name && name != kManifest; }

std::vector<std::string> readManifest(const fs::path& dir) {
  std::vector<std::string> names;
  std::ifstream f(dir / kManifest);
  for (std::string line; std::getline(f, line);) {
    if (plainName(line)) names.push_back(line);
  }
  return names;
}

// The previous compile's files, as its manifest lists them: regular files only (a symlink is
// not followed, a directory not entered), then the manifest itself.
void removePreviousCompile(const fs::path& dir) {
  std::error_code ec;
  for (const std::string& name : readManifest(dir)) {
    const fs::path p = dir / name;
    if (fs::is_regular_file(fs::symlink_status(p, ec))) fs::remove(p, ec);
  }
  fs::remove(dir / kManifest, ec);
}

// DIR/.policyc-lock held exclusively (flock: released when the descriptor closes, also when the
// process dies); a compile that finds it held says so once, then waits its turn.
std::shared_ptr<const int> lockDirectory(const fs::path& dir) {
  const fs::path path = dir / ".policyc-lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) fail("cannot open '{}' to lock the debug directory: {}", path.string(), std::strerror(errno));
  auto owned = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  });
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return owned;
  fmt::print(stderr, "policyc: waiting for another compile writing into {}\n", dir.string());
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) fail("cannot lock the debug directory '{}': {}", dir.string(), std::strerror(errno));
  }
  return owned;
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
  lock_ = lockDirectory(dir_);
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
  recordDebugFiles(dir_, {std::string(name)});  // before: a file never goes unlisted
  asError([&] { files::writeAtomic(dir_ / name, text); });
}

void DebugDir::writeGraph(std::string_view name, const ir::Graph& graph) const {
  recordDebugFiles(dir_, {std::string(name), std::string(name) + ".bin"});
  ir::writePir(graph, (dir_ / name).string());
}

void DebugDir::recordBuildFiles() const {
  std::error_code ec;
  const fs::file_time_type since = fs::last_write_time(dir_ / "command.txt", ec);
  if (ec) return;
  std::vector<std::string> names;
  for (const char* name : kBuildFiles) {
    const fs::path p = dir_ / name;
    if (fs::is_regular_file(fs::symlink_status(p, ec)) && fs::last_write_time(p, ec) >= since && !ec) names.emplace_back(name);
  }
  recordDebugFiles(dir_, names);
}

void recordDebugFiles(const fs::path& dir, const std::vector<std::string>& names) {
  std::vector<std::string> all = readManifest(dir);
  bool added = false;
  for (const std::string& n : names) {
    if (!plainName(n)) fail("internal: '{}' is not a plain file name of the debug directory", escape::message(n));
    if (std::find(all.begin(), all.end(), n) == all.end()) {
      all.push_back(n);
      added = true;
    }
  }
  if (!added) return;
  asError([&] { files::writeAtomic(dir / kManifest, fmt::format("{}\n", fmt::join(all, "\n"))); });
}

void DebugDir::writePicture(std::string_view name, const std::string& dotText) const {
  write(fmt::format("{}.dot", name), dotText);
  // Graphviz's layout time grows faster than the graph: past a few thousand lines (nodes and
  // edges) a picture would hold up every debug compile for little a person could read in it.
  constexpr size_t kMaxDotLines = 6000;
  if (static_cast<size_t>(std::count(dotText.begin(), dotText.end(), '\n')) > kMaxDotLines) {
    write(fmt::format("{}.svg.txt", name), fmt::format("no picture: the graph has more than {} nodes and edges; {}.dot is there "
                                                       "for `dot -Tsvg`\n", kMaxDotLines, name));
    return;
  }
  try {
    write(fmt::format("{}.svg", name), renderSvg(dotText));
  } catch (const Error& e) {
    write(fmt::format("{}.svg.txt", name), fmt::format("no picture: {}\n", e.what()));
  }
}

std::string renderSvg(const std::string& dotText) {
  // asError: the scratch directory's failure (files::TempDir) is an Error like Graphviz's own.
  return asError([&]() -> std::string {
    files::TempDir tmp("policyc-dot");  // the DOT text in, the SVG and dot's messages out
    files::writeAtomic(tmp.path() / "in.dot", dotText);
    int rc = 0;
    try {
      rc = process::run({"dot", "-Tsvg", (tmp.path() / "in.dot").string(), "-o", (tmp.path() / "out.svg").string()}, tmp.path() / "dot.log");
    } catch (const std::runtime_error& e) {
      fail("{} (Graphviz draws the pictures: apt install graphviz)", e.what());
    }
    std::ifstream log(tmp.path() / "dot.log");
    std::string messages((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (rc != 0) fail("Graphviz's dot failed (exit {}): {}", rc, messages);
    std::ifstream f(tmp.path() / "out.svg", std::ios::binary);
    std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (svg.empty()) fail("Graphviz's dot wrote no SVG: {}", messages);
    return svg;
  });
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
