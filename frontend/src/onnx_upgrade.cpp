// Models of opsets 1-10 brought to opset 11 by ONNX's own version converter (libonnx), after
// ONNX's checker has accepted them, both in policyc's helper process (frontend/helper: a crash in
// either refuses the model and nothing else).
#include <dlfcn.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
constexpr const char* kHelperName = "policyc-onnx-upgrade";

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

// The helper executable that runs ONNX's checker and converter: $POLICYC_ONNX_UPGRADE_HELPER,
// else one beside the binary or library this code is linked into (the installed Python package)
// or in its ../libexec/policyc (the installed command line, cmake/install.cmake), else the one
// this build made.
std::string helperPath() {
  if (const char* env = std::getenv("POLICYC_ONNX_UPGRADE_HELPER"); env != nullptr && *env != '\0') return env;
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&helperPath), &info) != 0 && info.dli_fname != nullptr) {
    const std::filesystem::path dir = std::filesystem::path(info.dli_fname).parent_path();
    for (const std::filesystem::path& candidate : {dir / kHelperName, dir / ".." / "libexec" / "policyc" / kHelperName}) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
    }
  }
  return POLICYC_ONNX_UPGRADE_HELPER;
}

// ONNX's checker and converter, run in a process of their own (frontend/helper): both are
// third-party code over hostile bytes (fuzzing found the converter dereferencing null on a model
// the checker accepted), so a crash there must end that process, never the compiler or the Python
// process that imports. The helper is exec'd (posix_spawn), not a fork of this process: a fork
// of a process with other threads inherits whatever lock one of them held (libgcc's unwinder
// lock, a sanitizer's allocator) and may wait on it forever. The model goes out and the reply
// comes back over one socket (a helper that dies early gives EPIPE, not SIGPIPE).
std::string runIsolated(const std::string& model, int64_t to, const std::string& what) {
  const std::string helper = helperPath();
  if (access(helper.c_str(), X_OK) != 0) {
    fail("{}: ONNX's version converter runs in policyc's helper '{}', which cannot be run ({}); build it (target {}) "
         "or name it in POLICYC_ONNX_UPGRADE_HELPER",
         what, helper, std::strerror(errno), kHelperName);
  }
  int fds[2];
  // Close-on-exec: a process another thread starts meanwhile must not hold the socket open.
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    fail("{}: cannot create a socket for ONNX's version converter: {}", what, std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);  // dup2 clears close-on-exec on 0 and 1
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  const std::string opset = std::to_string(to);
  std::vector<char*> argv = {const_cast<char*>(helper.c_str()), const_cast<char*>(opset.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    fail("{}: cannot start policyc's helper '{}' for ONNX's version converter: {}", what, helper, std::strerror(spawned));
  }
  std::string reply;
  char buf[1 << 16];
  size_t sent = 0;
  bool writing = true, timedOut = false;
  const auto deadline = std::chrono::steady_clock::now() + kConverterTimeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timedOut = true;
      kill(pid, SIGKILL);
      break;
    }
    if (writing && (p.revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t n = send(fds[0], model.data() + sent, model.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
      if ((n < 0 && errno != EINTR && errno != EAGAIN) || sent == model.size()) {
        writing = false;  // all sent, or the helper is gone: its exit status says which
        shutdown(fds[0], SHUT_WR);
      }
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t n = recv(fds[0], buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
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
  std::string bytes;
  if (!numbered.SerializeToString(&bytes)) fail("{}: the model does not serialise for ONNX's version converter", what);
  const std::string reply = runIsolated(bytes, to, what);
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
