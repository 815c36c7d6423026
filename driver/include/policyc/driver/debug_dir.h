// The debug directory: every stage of a compilation written where a user can read it.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policyc/ir/graph.h"

namespace policyc::driver {

// What started this process's compiles, for every debug directory's command.txt and the name
// POLICYC_DEBUG=1 gives it: the command ("compile", "check", "python", ...) and the whole
// command line. Set once by the program's entry point; "library" and "" until then.
void setInvocation(std::string command, std::string commandLine);
const std::string& invocationCommand();

// Where a compilation's dumps go, when anywhere: `--debug-dir DIR`, or POLICYC_DEBUG=1 for
// ./policyc_debug/<model>-<hash>-<command>-<backend>/ (the hash is of the model's bytes, so two
// models of one name do not overwrite each other, and runs of different commands or backends do
// not mix; a re-run of the same one reuses its directory).
//
// Every compile starts the directory afresh: each file policyc writes there is listed in the
// directory's .policyc-files (recordDebugFiles), and the next compile into it removes exactly
// those before writing its own. Nothing else is ever touched: a --debug-dir that also holds a
// user's files (even $HOME) keeps them. Compiles into one directory take turns: a DebugDir holds
// an exclusive lock on DIR/.policyc-lock (flock) for its lifetime, so parallel workers with
// POLICYC_DEBUG=1 never remove each other's files half-way.
class DebugDir {
 public:
  // Creates the directory (Error if it cannot), removes the previous compile's files and writes
  // command.txt: the invocation, `details` (options, versions), the CPU and the time.
  explicit DebugDir(std::filesystem::path dir, std::string_view details = "");

  // The directory for this compilation, or nullopt when debugging is off. `flagDir` wins over
  // the environment; `modelPath` names and hashes the model; `backend` names the directory.
  static std::optional<DebugDir> select(const std::string& flagDir, const std::string& modelPath,
                                        const std::string& modelName, std::string_view backend = "",
                                        std::string_view details = "");

  const std::filesystem::path& path() const { return dir_; }

  // Writes `name` in the directory (through a temporary file and a rename).
  void write(std::string_view name, std::string_view text) const;
  // Writes a reloadable NAME.pir and, when weights need it, NAME.pir.bin.
  void writeGraph(std::string_view name, const ir::Graph& graph) const;
  // Writes NAME.dot and, when Graphviz's `dot` is installed, NAME.svg beside it (a picture is a
  // help, not a stage: without Graphviz the .dot stays and the compile goes on).
  void writePicture(std::string_view name, const std::string& dotText) const;

  // Per-stage wall times for compile_times.txt.
  void recordTime(std::string stage, double milliseconds);
  void writeTimes() const;

  // Lists the files a backend's build wrote into the directory (output_code.cpp, module.o, ...:
  // those of kBuildFiles that are newer than command.txt) for the next compile to remove.
  void recordBuildFiles() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::pair<std::string, double>> times_;
  std::shared_ptr<const int> lock_;  // the locked file's descriptor, closed (unlocked) with the last copy
};

// Times a stage and records it when a debug directory is active.
class StageTimer {
 public:
  StageTimer(DebugDir* dir, std::string stage) : dir_(dir), stage_(std::move(stage)) {}
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  DebugDir* dir_;
  std::string stage_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Adds `names` (plain file names in `dir`) to the files the next compile into `dir` removes
// (its .policyc-files): for what is written there by other means than DebugDir::write, such as
// the report's pages and `policyc bench`'s profile.json.
void recordDebugFiles(const std::filesystem::path& dir, const std::vector<std::string>& names);

// Renders DOT text as SVG with Graphviz's `dot` (no shell; the text through a file). Error, with
// dot's message, when it is missing or fails.
std::string renderSvg(const std::string& dotText);

// 16 hex digits of FNV-1a over a file's bytes ("" if it cannot be read).
std::string fileHash(const std::string& path);
// FNV-1a over a string (cache keys).
uint64_t textHash(std::string_view text);

}  // namespace policyc::driver
