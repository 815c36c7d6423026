// Models of opsets 1-10 brought to opset 11 by ONNX's own version converter (libonnx), after
// ONNX's checker has accepted them, both in a child process (a crash in either refuses the model
// and nothing else). Kept apart from the importer so that only this file sees libonnx's headers.
#include <onnx/checker.h>
#include <onnx/version_converter/convert.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "onnx_tensor.h"
#include "onnx_upgrade.h"
#include "policyc/ir/error.h"

namespace policyc::frontend {
namespace {

// ONNX's adapters need every dim of the values they rewrite as a number (legacy broadcasting
// asserts it). Dynamic dims stand in as this value during the conversion and are restored
// after; a constant the converter computed from one would carry it, which is checked.
constexpr int64_t kDynamicStandIn = 999983;  // a prime no layer of a policy has
constexpr std::chrono::seconds kConverterTimeout{300};

// A dynamic dim of a graph input or output: its value's name, its index and what it was.
struct DynamicDim {
  std::string value;
  int index;
  onnx::TensorShapeProto::Dimension original;
};

void standIn(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values, std::vector<DynamicDim>& dims) {
  for (onnx::ValueInfoProto& v : values) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
    onnx::TensorShapeProto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int i = 0; i < shape->dim_size(); ++i) {
      onnx::TensorShapeProto::Dimension* d = shape->mutable_dim(i);
      if (d->has_dim_value() && d->dim_value() >= 0) continue;
      dims.push_back({v.name(), i, *d});
      d->set_dim_value(kDynamicStandIn);
    }
  }
}

void restore(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values, const std::vector<DynamicDim>& dims) {
  std::unordered_map<std::string_view, std::vector<const DynamicDim*>> byValue;  // linear in the model
  for (const DynamicDim& d : dims) byValue[d.value].push_back(&d);
  for (onnx::ValueInfoProto& v : values) {
    auto it = byValue.find(v.name());
    if (it == byValue.end() || !v.type().has_tensor_type()) continue;
    onnx::TensorShapeProto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (const DynamicDim* d : it->second) {
      if (d->index < shape->dim_size()) *shape->mutable_dim(d->index) = d->original;
    }
  }
}

// Whether an int64 constant of the converted model holds the stand-in (read by the importer's
// own decoder; what it cannot decode, the import rejects later anyway).
bool holdsStandIn(const onnx::TensorProto& t) {
  if (t.data_type() != onnx::TensorProto::INT64) return false;
  try {
    const ir::Tensor v = decodeTensor(t, "a converted constant");
    const int64_t* data = v.data<int64_t>();
    return std::find(data, data + v.numel(), kDynamicStandIn) != data + v.numel();
  } catch (const Error&) {
    return false;
  }
}

// ONNX's checker and converter, run in a child process: both are third-party code over hostile
// bytes (fuzzing found the converter dereferencing null on a model the checker accepted), so a
// crash there must end the child, never the compiler or the Python process that imports. The
// child writes one status byte ('M': a model follows, 'E': a message follows) and the payload.
std::string convertInChild(const onnx::ModelProto& model, int64_t to) {
  auto firstLine = [](const char* what) {
    std::string s(what);
    return s.substr(0, s.find('\n'));
  };
  std::string reply;
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return "E" + fmt::format("ONNX's checker rejects the model: {}", firstLine(e.what()));
  }
  try {
    onnx::ModelProto converted = onnx::version_conversion::ConvertVersion(model, static_cast<int>(to));
    if (!converted.SerializeToString(&reply)) return "Ethe converted model does not serialise";
    return "M" + reply;
  } catch (const std::exception& e) {
    return "E" + fmt::format("ONNX's version converter cannot bring the model to opset {}: {}", to, firstLine(e.what()));
  }
}

// What the child sent, or an Error naming how it ended.
std::string runIsolated(const onnx::ModelProto& model, int64_t to, const std::string& what) {
  int fds[2];
  // Close-on-exec: a process another thread starts meanwhile must not hold the write end open.
  if (pipe2(fds, O_CLOEXEC) != 0) fail("{}: cannot create a pipe for ONNX's version converter: {}", what, std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    fail("{}: cannot start a process for ONNX's version converter: {}", what, std::strerror(errno));
  }
  if (pid == 0) {
    // A crash ends the child by its signal, not through handlers the parent installed (a
    // sanitizer's or a fuzzer's reports, Python's faulthandler): the parent reports it.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
    close(fds[0]);
    const std::string reply = convertInChild(model, to);
    for (size_t at = 0; at < reply.size();) {
      const ssize_t n = write(fds[1], reply.data() + at, reply.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(3);
      at += static_cast<size_t>(n);
    }
    _exit(0);  // no atexit handlers, no destructors: the parent owns everything else
  }
  close(fds[1]);
  std::string reply;
  char buf[1 << 16];
  // A child that never answers (a lock another thread held at fork, say) is killed at the deadline.
  const auto deadline = std::chrono::steady_clock::now() + kConverterTimeout;
  bool timedOut = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      timedOut = true;
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) {
    fail("{}: ONNX's version converter did not finish within {} s; the model is refused", what, kConverterTimeout.count());
  }
  if (WIFSIGNALED(status)) {
    fail("{}: ONNX's version converter crashed on this model (signal {}, {}); the model is refused", what, WTERMSIG(status),
         strsignal(WTERMSIG(status)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || reply.empty()) {
    fail("{}: ONNX's version converter failed on this model (exit status {}); the model is refused", what,
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return reply;
}

}  // namespace

onnx::ModelProto upgradeOpset(const onnx::ModelProto& model, int64_t from, int64_t to, const std::string& source) {
  onnx::ModelProto numbered = model;
  std::vector<DynamicDim> dynamic;
  standIn(*numbered.mutable_graph()->mutable_input(), dynamic);
  standIn(*numbered.mutable_graph()->mutable_output(), dynamic);
  numbered.mutable_graph()->clear_value_info();  // the importer infers every shape itself
  const std::string what = fmt::format("{}: opset {} is not supported as it is", source, from);
  const std::string reply = runIsolated(numbered, to, what);
  if (reply[0] == 'E') fail("{}: policyc converts opsets below {} with ONNX's version converter, but {}", what, to, reply.substr(1));
  onnx::ModelProto converted;
  if (reply[0] != 'M' || !converted.ParseFromArray(reply.data() + 1, static_cast<int>(reply.size() - 1))) {
    fail("{}: ONNX's version converter returned an unreadable model", what);
  }
  // The importer reads the result as a model of opset `to`: it must say so (no second round).
  bool converted_to = false;
  for (const onnx::OperatorSetIdProto& imp : converted.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") converted_to = imp.version() == to;
  }
  if (!converted_to) fail("{}: opset {} is not supported: ONNX's version converter did not produce opset {}", source, from, to);
  onnx::GraphProto* g = converted.mutable_graph();
  restore(*g->mutable_input(), dynamic);
  restore(*g->mutable_output(), dynamic);
  g->clear_value_info();
  bool baked = false;  // only a model with dynamic dims has stand-ins to look for
  for (const onnx::TensorProto& t : g->initializer()) baked = baked || (!dynamic.empty() && holdsStandIn(t));
  for (const onnx::NodeProto& n : g->node()) {
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (baked || dynamic.empty()) break;
      baked = (a.has_t() && holdsStandIn(a.t())) ||
              std::find(a.ints().begin(), a.ints().end(), kDynamicStandIn) != a.ints().end();
    }
  }
  if (baked) {
    fail("{}: opset {} is not supported with a dynamic batch: ONNX's version converter wrote a dynamic dim into a "
         "constant; export the model at opset {} or later, or with a static batch",
         source, from, to);
  }
  return converted;
}

}  // namespace policyc::frontend
