// Files the compiler and its tools write: whole or not at all (a temp file renamed into place),
// confined to the directory the user named (model-provided names pass through escape::fileName),
// and temporary directories that are removed on every path out.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace policyc::files {

// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so readers
// see the old file or the whole new one, never a part. Throws std::runtime_error naming the path.
void writeAtomic(const std::filesystem::path& path, std::string_view bytes);

// dir / escape::fileName(name) + suffix: a file for a model-provided name that cannot leave `dir`.
std::filesystem::path confined(const std::filesystem::path& dir, std::string_view name, std::string_view suffix = "");

// Whether `path` is a regular file (not a FIFO, a device or a directory), without opening it.
bool isRegularFile(const std::filesystem::path& path);

// A directory under $TMPDIR (mkdtemp, mode 0700) removed with its contents when this goes out of
// scope, unless keep() was called. Throws std::runtime_error when it cannot be created.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void keep() { keep_ = true; }

 private:
  std::filesystem::path path_;
  bool keep_ = false;
};

}  // namespace policyc::files
