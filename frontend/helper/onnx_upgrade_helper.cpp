// policyc-onnx-upgrade: ONNX's checker and version converter in a process of their own. The
// importer starts it (frontend/src/onnx_upgrade.cpp) with the target opset as its one argument and
// the model's bytes on stdin; it answers on stdout with one status byte ('M': the converted model
// follows, 'E': a one-line message follows). A crash here ends this process, never the importer.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/version_converter/convert.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <string>

namespace {

std::string firstLine(const char* what) {
  std::string s(what);
  return s.substr(0, s.find('\n'));
}

// The reply for `model` converted to opset `to`.
std::string convert(const onnx::ModelProto& model, int to) {
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return "EONNX's checker rejects the model: " + firstLine(e.what());
  }
  try {
    onnx::ModelProto converted = onnx::version_conversion::ConvertVersion(model, to);
    std::string reply;
    if (!converted.SerializeToString(&reply)) return "Ethe converted model does not serialise";
    return "M" + reply;
  } catch (const std::exception& e) {
    return "EONNX's version converter cannot bring the model to opset " + std::to_string(to) + ": " + firstLine(e.what());
  }
}

bool readAll(int fd, std::string& out) {
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

bool writeAll(int fd, const std::string& data) {
  for (size_t at = 0; at < data.size();) {
    const ssize_t n = write(fd, data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int to = 0;
  if (argc != 2 || std::from_chars(argv[1], argv[1] + std::strlen(argv[1]), to).ec != std::errc() || to < 1) {
    const std::string usage = "usage: policyc-onnx-upgrade OPSET < model.onnx > reply (started by policyc's importer)\n";
    (void)writeAll(2, usage);
    return 2;
  }
  std::string bytes;
  if (!readAll(0, bytes)) _exit(3);
  onnx::ModelProto model;
  const std::string reply = model.ParseFromString(bytes) ? convert(model, to) : "Ethe model given to the converter does not parse";
  // _exit: the reply is written (no buffered output), and what libonnx keeps allocated for the
  // process's lifetime is not a leak a sanitizer build's exit-time check should report.
  _exit(writeAll(1, reply) ? 0 : 3);
}
