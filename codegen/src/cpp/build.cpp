// Building the generated C++ into a shared object with the system compiler.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "policyc/codegen/cpp_backend.h"
#include "policyc/ir/error.h"
#include "policyc/support/files.h"
#include "policyc/support/process.h"

namespace policyc::codegen {
namespace {

namespace fs = std::filesystem;

void writeFile(const fs::path& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) fail("cannot write '{}'", path.string());
}

// A path safe inside the assembler's .incbin "..." string.
void checkPath(const std::string& path) {
  for (char c : path) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      fail("path '{}' contains a double quote, a backslash or a control character", path);
    }
  }
}

std::string firstErrorLine(const fs::path& log) {
  std::ifstream f(log);
  std::string line, first;
  while (std::getline(f, line)) {
    if (first.empty() && !line.empty()) first = line;
    if (line.find("error") != std::string::npos) return line;
  }
  return first.empty() ? "(the log is empty)" : first;
}

// For an error at "output_code.cpp:LINE:...", the kernel whose function holds that line and the
// graph nodes its header comment names: " (in kernel K: %a (conv), %b (relu))"; "" otherwise.
std::string kernelAt(const std::string& source, const std::string& errorLine) {
  size_t at = errorLine.find("output_code.cpp:");
  if (at == std::string::npos) return "";
  long line = std::strtol(errorLine.c_str() + at + 16, nullptr, 10);
  if (line <= 0) return "";
  std::vector<std::string> lines;
  size_t start = 0;
  for (long i = 0; i < line && start <= source.size(); ++i) {
    size_t end = source.find('\n', start);
    lines.push_back(source.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  for (size_t i = lines.size(); i-- > 0;) {
    if (lines[i].rfind("// kernel ", 0) != 0) continue;
    std::string name = lines[i].substr(10, lines[i].find(' ', 10) - 10);
    std::vector<std::string> nodes;
    for (size_t j = i + 1; j < lines.size() && lines[j].rfind("//   %", 0) == 0; ++j) {
      std::string n = lines[j].substr(5);
      size_t from = n.find(" from \"");
      nodes.push_back(from == std::string::npos ? n : n.substr(0, from));
    }
    return fmt::format(" (in kernel {}: {})", name, fmt::join(nodes, ", "));
  }
  return "";
}

// Whether `compiler` is GCC: its --version output names the Free Software Foundation (clang's
// does not). Asked once per compiler and process (the output goes to `scratch`, then is read).
bool isGcc(const std::string& compiler, const fs::path& scratch) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(compiler); it != known.end()) return it->second;
  bool gcc = false;
  try {
    if (process::run({compiler, "--version"}, scratch) == 0) {
      std::ifstream f(scratch);
      std::stringstream text;
      text << f.rdbuf();
      gcc = text.str().find("Free Software Foundation") != std::string::npos;
    }
  } catch (const std::runtime_error&) {
    // Not startable: the build itself then fails with the message that says so.
  }
  std::error_code ec;
  fs::remove(scratch, ec);
  known[compiler] = gcc;
  return gcc;
}

}  // namespace

std::string defaultCompiler() {
  const char* cxx = std::getenv("POLICYC_CXX");
  return cxx && *cxx ? cxx : "c++";
}

BuildResult buildSharedObject(const GeneratedCpp& generated, const std::string& outSo, const BuildOptions& options) {
  BuildResult result;
  // A fresh temporary directory is removed on every path out (success, compiler failure,
  // exception); a work directory the caller named (the debug directory) is kept.
  std::optional<files::TempDir> temp;
  fs::path dir;
  if (options.workDir.empty()) {
    temp.emplace("policyc-build");
    dir = temp->path();
  } else {
    dir = options.workDir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("cannot create directory '{}': {}", dir.string(), ec.message());
  }
  dir = fs::absolute(dir);
  fs::path source = dir / "output_code.cpp";
  fs::path weights = dir / "weights.bin";
  fs::path log = dir / "build.log";
  writeFile(source, generated.source.data(), generated.source.size());
  writeFile(weights, generated.weights.data(), generated.weights.size());
  checkPath(weights.string());  // it goes into the source's .incbin "..." string

  fs::path out = fs::absolute(outSo);
  fs::path tmpOut = out;
  tmpOut += fmt::format(".tmp{}", getpid());
  // No shell: every path is one argument as it is.
  std::vector<std::string> argv = {options.compiler, "-std=c++17", "-O3", "-fPIC", "-shared", "-pthread"};
  // GCC's priority register allocator: with the default (Chaitin-Briggs) one, a conv_rows block's
  // twelve AVX2 accumulators, its input vectors and a weight fitted the sixteen registers or
  // spilled one accumulator depending on the code around the kernel (1.1-1.4x from one build to
  // the next); priority kept them in registers (IMPALA's convs 1.1x faster, within 0.85-1.07x of
  // the LLVM backend's; the other kernels unchanged within noise). And no loops turned into calls
  // of memset or memcpy: the rows a kernel fills or copies are short and of known length, and a
  // pad's two zero rows of 23 floats through memset (rep stos) made it 1.25x the LLVM backend's
  // time, 1.0x without (a parity run with it: the other kernels within noise).
  if (isGcc(options.compiler, dir / "compiler_version.txt")) {
    argv.insert(argv.end(), {"-fira-algorithm=priority", "-fno-tree-loop-distribute-patterns"});
  }
  for (const std::string& f : marchFlags(generated.target)) argv.push_back(f);
  argv.insert(argv.end(), {"-ffp-contract=fast", "-fno-math-errno", "-fno-trapping-math", "-fvisibility=hidden",
                           fmt::format("-DPC_WEIGHTS_FILE=\"{}\"", weights.string()), "-o", tmpOut.string(), source.string()});
  for (const std::string& l : generated.libraries) argv.push_back("-l" + l);
  {
    std::ofstream f(log);
    f << process::commandLine(argv) << "\n";
  }
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  try {
    status = process::run(argv, log);
  } catch (const std::runtime_error& e) {
    fail("cannot build '{}': {} (set POLICYC_CXX to a C++ compiler)", out.string(), e.what());
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status != 0) {
    std::error_code ec;
    fs::remove(tmpOut, ec);
    std::string error = firstErrorLine(log);
    fail("the C++ compiler failed (exit status {}) building '{}': {}{} -- {}", status, out.string(), error,
         kernelAt(generated.source, error),
         temp ? std::string("rerun with --debug-dir DIR to keep the generated source and the build log")
              : fmt::format("see the log {} and the generated source {}", log.string(), source.string()));
  }
  std::error_code ec;
  fs::rename(tmpOut, out, ec);
  if (ec) {
    fs::remove(tmpOut, ec);
    fail("cannot move the built model to '{}': {}", out.string(), ec.message());
  }
  if (temp && options.keepWorkDir) temp->keep();
  if (!temp || options.keepWorkDir) result.workDir = dir.string();
  return result;
}

}  // namespace policyc::codegen
