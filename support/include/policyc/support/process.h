// Running a tool (the system C++ compiler, the linker) without a shell: arguments are passed as
// they are, so no path or name can be read as shell syntax.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace policyc::process {

// Runs argv[0] (looked up on PATH) with argv, stdin from /dev/null and stdout and stderr appended
// to `log`; waits for it. Returns its exit status, or 128 + the signal that ended it. Throws
// std::runtime_error when it cannot be started.
int run(const std::vector<std::string>& argv, const std::filesystem::path& log);

// The command as one line for logs and messages (arguments with spaces or quotes in quotes).
std::string commandLine(const std::vector<std::string>& argv);

}  // namespace policyc::process
