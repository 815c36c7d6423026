// Test helper: running the policyc command line (POLICYC_CLI) and checking its one-line errors.
#pragma once

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <catch2/catch.hpp>

#include "support/scratch_dir.h"

namespace policyc::testing {

struct CliResult {
  int exitCode;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// `policyc ARGS` (ARGS as shell words); stdout and stderr captured apart.
inline CliResult runCli(const std::string& args) {
  std::filesystem::path errFile = scratchDir() / "stderr.txt";
  std::string cmd = std::string(POLICYC_CLI) + " " + args + " 2>" + errFile.string();
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, slurp(errFile)};
}

// A bad-input failure: exit code 2 and exactly one "policyc: error: " line on stderr containing
// `text`; with `noStdout`, nothing on stdout either.
inline void requireCleanError(const CliResult& r, const std::string& text, bool noStdout) {
  INFO("stderr: " << r.err);
  CHECK(r.exitCode == 2);
  CHECK(r.err.find(text) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.rfind("policyc: error: ", 0) == 0);
  if (noStdout) CHECK(r.out.empty());
}

}  // namespace policyc::testing
