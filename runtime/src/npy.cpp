// .npy I/O: the version 1.0-3.0 header dict, and the raw little-endian C-order data after it.
#include "policyc/runtime/npy.h"

#include "policyc/support/escape.h"
#include "policyc/support/files.h"
#include "policyc/support/sizes.h"

#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <stdexcept>

namespace policyc::runtime {
namespace {

struct DescrRow {
  const char* descr;
  const char* dtype;
  size_t size;
};
constexpr DescrRow kDescrs[] = {
    {"<f4", "f32", 4}, {"<f8", "f64", 8}, {"<i4", "i32", 4}, {"<i8", "i64", 8},
    {"|u1", "u8", 1},  {"|i1", "i8", 1},  {"|b1", "bool", 1},
};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error("'" + escape::message(path) + "': " + what);
}

// Finds `'key':` in the header dict and returns the text after it.
std::string valueAfter(const std::string& header, const std::string& key, const std::string& path) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) bad(path, "not a valid .npy file (header lacks '" + key + "')");
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) bad(path, "not a valid .npy file (malformed header)");
  size_t start = header.find_first_not_of(' ', colon + 1);
  return start == std::string::npos ? std::string() : header.substr(start);
}

constexpr size_t kMaxNpyHeader = 65536;

std::string shapeTuple(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

[[noreturn]] void sizeMismatch(const std::string& path, size_t available, size_t expected) {
  bad(path, "data is " + std::to_string(available) + " bytes but the header's shape needs " + std::to_string(expected) +
                (available < expected ? " (truncated file)" : ""));
}

}  // namespace

size_t npyDTypeSize(const std::string& dtype) {
  for (const DescrRow& r : kDescrs) {
    if (dtype == r.dtype) return r.size;
  }
  return 0;
}

NpyHeader parseNpyHeader(std::string_view bytes, const std::string& path) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) bad(path, "not a .npy file (bad magic)");
  auto major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen = 0;
  size_t headerStart = 0;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad(path, "truncated .npy header");
    for (int i = 3; i >= 0; --i) headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[8 + i]);
    headerStart = 12;
  } else {
    // Past the magic, the format's version: numpy writes 1.0, 2.0 and 3.0; any other byte here
    // means the file is damaged (or only starts like one), not that a newer numpy wrote it.
    bad(path, "a damaged .npy file: its format version byte is " + std::to_string(major) + " (numpy writes 1, 2 or 3)");
  }
  if (headerLen > kMaxNpyHeader) bad(path, "the .npy header is " + std::to_string(headerLen) + " bytes (more than " + std::to_string(kMaxNpyHeader) + ")");
  if (headerStart + headerLen > bytes.size()) bad(path, "truncated .npy header");
  std::string header(bytes.substr(headerStart, headerLen));

  NpyHeader out;
  out.dataOffset = headerStart + headerLen;
  std::string descrText = valueAfter(header, "descr", path);
  size_t descrEnd = descrText.size() > 1 ? descrText.find('\'', 1) : std::string::npos;
  if (descrText.empty() || descrText[0] != '\'' || descrEnd == std::string::npos) bad(path, "not a valid .npy file (malformed descr)");
  std::string descr = descrText.substr(1, descrEnd - 1);
  if (descr == "=f4") descr = "<f4";  // native order on a little-endian machine
  if (descr == "<u1") descr = "|u1";
  size_t elemSize = 0;
  for (const DescrRow& r : kDescrs) {
    if (descr == r.descr) {
      out.dtype = r.dtype;
      elemSize = r.size;
    }
  }
  if (!elemSize) {
    bad(path, "unsupported .npy dtype '" + escape::message(descr) +
                  "' (expected float32, float64, int32, int64, uint8, int8 or bool, little endian)");
  }
  if (valueAfter(header, "fortran_order", path).rfind("False", 0) != 0) {
    bad(path, "Fortran-order arrays are not supported (save a C-contiguous array)");
  }
  std::string shapeText = valueAfter(header, "shape", path);
  if (shapeText.empty() || shapeText[0] != '(') bad(path, "not a valid .npy file (malformed shape)");
  size_t close = shapeText.find(')');
  if (close == std::string::npos) bad(path, "not a valid .npy file (malformed shape)");
  std::string dims = shapeText.substr(1, close - 1);
  auto malformed = [&] { bad(path, "not a valid .npy file (malformed shape '(" + escape::message(dims) + ")')"); };
  // A tuple of decimal integers: "", "3,", "2, 17" (one trailing comma allowed, as Python's).
  std::vector<std::string> items;
  for (size_t pos = 0;;) {
    size_t next = dims.find(',', pos);
    items.push_back(dims.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& raw = items[i];
    size_t first = raw.find_first_not_of(' ');
    if (first == std::string::npos) {
      bool trailing = i + 1 == items.size() && i > 0;  // "(3,)"
      bool scalar = items.size() == 1;                 // "()"
      if (trailing || scalar) continue;
      malformed();
    }
    std::string item = raw.substr(first, raw.find_last_not_of(' ') - first + 1);
    int64_t dim = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), dim);
    if (item.empty() || item[0] == '-' || item[0] == '+' || ec != std::errc() || end != item.data() + item.size()) malformed();
    out.shape.push_back(dim);
    if (static_cast<int64_t>(out.shape.size()) > sizes::kMaxRank) {
      bad(path, "the .npy shape has more than " + std::to_string(sizes::kMaxRank) + " dimensions");
    }
  }
  std::optional<int64_t> numel = sizes::numel(out.shape);
  if (!numel) bad(path, "the .npy shape " + shapeTuple(out.shape) + " has more than 2^31-1 elements");
  std::optional<size_t> dataBytes = sizes::bytes(*numel, elemSize);
  if (!dataBytes) bad(path, "the .npy shape " + shapeTuple(out.shape) + " is too large");
  out.dataBytes = *dataBytes;
  return out;
}

NpyArray parseNpy(std::string_view bytes, const std::string& path) {
  NpyHeader header = parseNpyHeader(bytes, path);
  size_t available = bytes.size() - header.dataOffset;
  if (available != header.dataBytes) sizeMismatch(path, available, header.dataBytes);
  NpyArray array{header.dtype, header.shape, std::vector<std::byte>(header.dataBytes)};
  if (header.dataBytes) std::memcpy(array.data.data(), bytes.data() + header.dataOffset, header.dataBytes);
  return array;
}

NpyArray readNpy(const std::string& path) {
  // Only a regular file: a FIFO or a device would block or never end.
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) bad(path, "cannot open (no such file or not readable)");
  if (!std::filesystem::is_regular_file(status)) bad(path, "not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) bad(path, "cannot open (no such file or not readable)");
  f.seekg(0, std::ios::end);
  const auto fileSize = static_cast<size_t>(std::max<std::streamoff>(0, f.tellg()));
  f.seekg(0);
  // The header first; the data is allocated only once its size matches the bytes in the file.
  std::string head(std::min<size_t>(fileSize, 12 + kMaxNpyHeader), '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (!f) bad(path, "cannot read");
  NpyHeader header = parseNpyHeader(head, path);
  size_t available = fileSize - std::min(fileSize, header.dataOffset);
  if (available != header.dataBytes) sizeMismatch(path, available, header.dataBytes);
  NpyArray array{header.dtype, header.shape, std::vector<std::byte>(header.dataBytes)};
  f.seekg(static_cast<std::streamoff>(header.dataOffset));
  f.read(reinterpret_cast<char*>(array.data.data()), static_cast<std::streamsize>(header.dataBytes));
  if (!f) bad(path, "cannot read");
  return array;
}

void writeNpy(const std::string& path, const NpyArray& array) {
  const DescrRow* row = nullptr;
  for (const DescrRow& r : kDescrs) {
    if (array.dtype == r.dtype) row = &r;
  }
  if (!row) throw std::runtime_error("cannot write '" + path + "': unsupported dtype '" + array.dtype + "'");
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    shape += std::to_string(array.shape[i]);
    if (array.shape.size() == 1 || i + 1 < array.shape.size()) shape += ",";  // (3,) is a 1-tuple
  }
  shape += ")";
  std::string header = std::string("{'descr': '") + row->descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + length + header + '\n' is a multiple of 64 bytes.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  files::writeAtomic(path, bytes);
}

}  // namespace policyc::runtime
