// The one exception type of the compiler: a message that names what failed and where.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace policyc {

// Thrown for bad user input (model files, shapes, options) and for compiler failures.
// The message is complete and meant to be printed as is, on one line where possible.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace policyc
