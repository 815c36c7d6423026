// The one exception type of the compiler: a message that names what failed and where.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "policyc/support/escape.h"

namespace policyc {

// Thrown for bad user input (model files, shapes, options) and for compiler failures.
// The message is complete and meant to be printed as is: one line of printable ASCII, whatever
// model-provided names it quotes (escape::message encodes control characters, NUL and bytes
// >= 0x80 as \xNN, so a name can neither cut it short nor split it nor drive a terminal).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(escape::message(message)) {}
};

// A valid model that uses something a backend does not implement (an operator, a layout); the
// backend's driver names itself in the message ("unsupported in backend cpp: ...").
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void unsupported(fmt::format_string<Args...> format, Args&&... args) {
  throw UnsupportedError(fmt::format(format, std::forward<Args>(args)...));
}

// Runs f() and returns what it returns; a std::runtime_error it throws (support/ and runtime/,
// which cannot know policyc::Error: file writes, .npy I/O) becomes an Error with the same message.
template <typename F>
decltype(auto) asError(F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw Error(e.what());
  }
}

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace policyc
