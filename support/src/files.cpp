// Atomic, confined file writes and temporary directories (files.h).
#include "policyc/support/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "policyc/support/escape.h"

namespace policyc::files {
namespace fs = std::filesystem;
namespace {

std::atomic<unsigned> gTempCounter{0};

[[noreturn]] void failWrite(const fs::path& path, int error) {
  throw std::runtime_error("cannot write '" + escape::message(path.string()) + "': " + std::strerror(error));
}

}  // namespace

void writeAtomic(const fs::path& path, std::string_view bytes) {
  if (path.filename().empty() || path.filename() == "." || path.filename() == "..") {
    throw std::runtime_error("cannot write '" + escape::message(path.string()) + "': not a file name");
  }
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(getpid()) + "-" + std::to_string(gTempCounter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) failWrite(path, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int error = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      failWrite(path, error);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    failWrite(path, error);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    failWrite(path, error);
  }
}

fs::path confined(const fs::path& dir, std::string_view name, std::string_view suffix) {
  return dir / (escape::fileName(name) + std::string(suffix));
}

bool isRegularFile(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

TempDir::TempDir(std::string_view prefix) {
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / (std::string(prefix) + "-XXXXXX")).string();
  if (!mkdtemp(pattern.data())) {
    throw std::runtime_error("cannot create a temporary directory '" + escape::message(pattern) + "': " + std::strerror(errno));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace policyc::files
