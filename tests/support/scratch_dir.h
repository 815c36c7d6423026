// Test helper: one temporary directory per test process (mkdtemp under $TMPDIR), removed with its
// contents when the process exits.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace policyc::testing {

// The process's scratch directory; `prefix` names it on the first call (later calls return it).
inline const std::filesystem::path& scratchDir(const std::string& prefix = "policyc-test") {
  struct Dir {
    std::filesystem::path path;
    explicit Dir(const std::string& p) {
      std::string pattern = (std::filesystem::temp_directory_path() / (p + "-XXXXXX")).string();
      if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory " + pattern);
      path = pattern;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir(prefix);
  return dir.path;
}

}  // namespace policyc::testing
