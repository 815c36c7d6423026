// Building the generated C++ into a shared object with the system compiler.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "policyc/codegen/cpp_backend.h"
#include "policyc/ir/error.h"

namespace policyc::codegen {
namespace {

namespace fs = std::filesystem;

void writeFile(const fs::path& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) fail("cannot write '{}'", path.string());
}

// A path safe inside single quotes of a shell command and inside the assembler's .incbin string.
void checkPath(const std::string& path) {
  if (path.find_first_of("'\"\\\n") != std::string::npos) fail("path '{}' contains a quote, backslash or newline", path);
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

}  // namespace

std::string defaultCompiler() {
  const char* cxx = std::getenv("POLICYC_CXX");
  return cxx && *cxx ? cxx : "c++";
}

BuildResult buildSharedObject(const GeneratedCpp& generated, const std::string& outSo, const BuildOptions& options) {
  std::string march = marchFlag(generated.target);
  BuildResult result;
  bool temporary = options.workDir.empty();
  fs::path dir;
  if (temporary) {
    std::string pattern = (fs::temp_directory_path() / "policyc-build-XXXXXX").string();
    if (!mkdtemp(pattern.data())) fail("cannot create a temporary directory '{}'", pattern);
    dir = pattern;
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

  fs::path out = fs::absolute(outSo);
  fs::path tmpOut = out;
  tmpOut += fmt::format(".tmp{}", getpid());
  for (const fs::path& p : {dir, out, tmpOut}) checkPath(p.string());
  std::string libs;
  for (const std::string& l : generated.libraries) libs += " -l" + l;
  std::string command = fmt::format(
      "{} -std=c++17 -O3 -fPIC -shared -pthread {} -ffp-contract=fast -fno-math-errno -fvisibility=hidden "
      "-DPC_WEIGHTS_FILE='\"{}\"' -o '{}' '{}'{} > '{}' 2>&1",
      options.compiler, march, weights.string(), tmpOut.string(), source.string(), libs, log.string());
  {
    std::ofstream f(log);
    f << command << "\n";
  }
  command = command.substr(0, command.rfind(" > ")) + fmt::format(" >> '{}' 2>&1", log.string());
  auto start = std::chrono::steady_clock::now();
  int status = std::system(command.c_str());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status != 0) {
    std::error_code ec;
    fs::remove(tmpOut, ec);
    std::string error = firstErrorLine(log);
    fail("the C++ compiler failed (exit status {}) building '{}': {}{} -- see the log {} and the generated source {}",
         WIFEXITED(status) ? WEXITSTATUS(status) : status, out.string(), error, kernelAt(generated.source, error),
         log.string(), source.string());
  }
  std::error_code ec;
  fs::rename(tmpOut, out, ec);
  if (ec) {
    fs::remove(tmpOut, ec);
    fail("cannot move the built model to '{}': {}", out.string(), ec.message());
  }
  if (temporary && !options.keepWorkDir) {
    fs::remove_all(dir, ec);
  } else {
    result.workDir = dir.string();
  }
  return result;
}

}  // namespace policyc::codegen
