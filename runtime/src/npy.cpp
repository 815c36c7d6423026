// .npy I/O: the version 1.0-3.0 header dict, and the raw little-endian C-order data after it.
#include "policyc/runtime/npy.h"

#include <cstring>
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
  throw std::runtime_error("'" + path + "': " + what);
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

}  // namespace

size_t npyDTypeSize(const std::string& dtype) {
  for (const DescrRow& r : kDescrs) {
    if (dtype == r.dtype) return r.size;
  }
  return 0;
}

NpyArray readNpy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad(path, "cannot open (no such file or not readable)");
  f.seekg(0, std::ios::end);
  std::string bytes(static_cast<size_t>(std::max<std::streamoff>(0, f.tellg())), '\0');
  f.seekg(0);
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) bad(path, "cannot read");
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
    bad(path, "unsupported .npy version " + std::to_string(major));
  }
  if (headerStart + headerLen > bytes.size()) bad(path, "truncated .npy header");
  std::string header = bytes.substr(headerStart, headerLen);

  NpyArray array;
  std::string descrText = valueAfter(header, "descr", path);
  std::string descr = descrText.size() > 2 ? descrText.substr(1, descrText.find('\'', 1) - 1) : "";
  if (descr == "=f4") descr = "<f4";  // native order on a little-endian machine
  if (descr == "<u1") descr = "|u1";
  size_t elemSize = 0;
  for (const DescrRow& r : kDescrs) {
    if (descr == r.descr) {
      array.dtype = r.dtype;
      elemSize = r.size;
    }
  }
  if (!elemSize) {
    bad(path, "unsupported .npy dtype '" + descr + "' (expected float32, float64, int32, int64, uint8, int8 or bool, little endian)");
  }
  if (valueAfter(header, "fortran_order", path).rfind("False", 0) != 0) {
    bad(path, "Fortran-order arrays are not supported (save a C-contiguous array)");
  }
  std::string shapeText = valueAfter(header, "shape", path);
  if (shapeText.empty() || shapeText[0] != '(') bad(path, "not a valid .npy file (malformed shape)");
  size_t close = shapeText.find(')');
  if (close == std::string::npos) bad(path, "not a valid .npy file (malformed shape)");
  std::string dims = shapeText.substr(1, close - 1);
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t next = dims.find(',', pos);
    std::string item = dims.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    size_t first = item.find_first_not_of(' ');
    if (first != std::string::npos) {
      try {
        size_t used = 0;
        long long d = std::stoll(item.substr(first), &used);
        if (d < 0) throw std::invalid_argument("negative");
        array.shape.push_back(d);
      } catch (const std::logic_error&) {
        bad(path, "not a valid .npy file (malformed shape '" + dims + "')");
      }
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  size_t numel = 1;
  for (int64_t d : array.shape) numel *= static_cast<size_t>(d);
  size_t expected = numel * elemSize;
  size_t available = bytes.size() - headerStart - headerLen;
  if (available != expected) {
    bad(path, "data is " + std::to_string(available) + " bytes but the header's shape needs " + std::to_string(expected) +
                  (available < expected ? " (truncated file)" : ""));
  }
  array.data.resize(expected);
  if (expected) std::memcpy(array.data.data(), bytes.data() + headerStart + headerLen, expected);
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
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot write '" + path + "'");
    f.write("\x93NUMPY\x01\x00", 8);
    char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    f.write(len, 2);
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    f.write(reinterpret_cast<const char*>(array.data.data()), static_cast<std::streamsize>(array.data.size()));
    if (!f) throw std::runtime_error("cannot write '" + path + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("cannot write '" + path + "': " + ec.message());
}

}  // namespace policyc::runtime
