// Reading and writing NumPy .npy files (C order, little endian) for model inputs and outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace policyc::runtime {

// dtype is one of "f32", "f64", "i32", "i64", "u8", "i8", "bool" (the .npy descr '<f4', ... '|b1').
struct NpyArray {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

// Throws std::runtime_error with a one-line message naming the file for: a missing or unreadable
// file, one that is not a regular file (a FIFO, a device), a bad magic or header, an unsupported
// dtype, big-endian or Fortran-order data, a malformed shape or one over the limits of
// policyc/support/sizes.h, and a data size that does not match the shape (a truncated file).
// Nothing is allocated for the data before its size is checked against the file's.
NpyArray readNpy(const std::string& path);

// The same for the bytes of a .npy file in memory; `path` names it in messages.
NpyArray parseNpy(std::string_view bytes, const std::string& path);

// A parsed header: where the data starts and how many bytes the shape needs.
struct NpyHeader {
  std::string dtype;
  std::vector<int64_t> shape;
  size_t dataOffset = 0;
  size_t dataBytes = 0;
};
NpyHeader parseNpyHeader(std::string_view bytes, const std::string& path);

// Writes through a temporary file and a rename, so a failure leaves no partial file.
void writeNpy(const std::string& path, const NpyArray& array);

size_t npyDTypeSize(const std::string& dtype);  // 0 for an unknown dtype

}  // namespace policyc::runtime
