// The debug directory: every stage of a compilation written where a user can read it.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policyc/ir/graph.h"

namespace policyc::driver {

// Where a compilation's dumps go, when anywhere: `--debug-dir DIR`, or POLICYC_DEBUG=1 for
// ./policyc_debug/<model>-<hash>/ (the hash is of the model's bytes, so two models of one name
// do not overwrite each other and a re-run of the same model reuses its directory).
class DebugDir {
 public:
  explicit DebugDir(std::filesystem::path dir);  // creates it; Error if it cannot

  // The directory for this compilation, or nullopt when debugging is off. `flagDir` wins over
  // the environment; `modelPath` names and hashes the model.
  static std::optional<DebugDir> select(const std::string& flagDir, const std::string& modelPath,
                                        const std::string& modelName);

  const std::filesystem::path& path() const { return dir_; }

  // Writes `name` in the directory (through a temporary file and a rename).
  void write(std::string_view name, std::string_view text) const;
  // Writes a reloadable NAME.pir and, when weights need it, NAME.pir.bin.
  void writeGraph(std::string_view name, const ir::Graph& graph) const;

  // Per-stage wall times for compile_times.txt.
  void recordTime(std::string stage, double milliseconds);
  void writeTimes() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::pair<std::string, double>> times_;
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

// 16 hex digits of FNV-1a over a file's bytes ("" if it cannot be read).
std::string fileHash(const std::string& path);
// FNV-1a over a string (cache keys).
uint64_t textHash(std::string_view text);

}  // namespace policyc::driver
