// A temporary directory of the debugging tools (mkdtemp under $TMPDIR), removed with its contents
// when it goes out of scope.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "policyc/ir/error.h"

namespace policyc::debug {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!mkdtemp(pattern.data())) fail("cannot create a temporary directory '{}'", pattern);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace policyc::debug
