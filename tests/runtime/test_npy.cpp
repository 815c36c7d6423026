// .npy reading and writing, including the malformed files users hand in.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "policyc/runtime/npy.h"

using policyc::runtime::NpyArray;
using policyc::runtime::readNpy;
using policyc::runtime::writeNpy;

namespace {

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("policyc_test_npy_" + name)).string();
}

void writeRaw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string readRaw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("npy: write then read gives the same array for every dtype", "[npy]") {
  for (const char* dtype : {"f32", "f64", "i32", "i64", "u8", "i8", "bool"}) {
    NpyArray a{dtype, {2, 3}, {}};
    a.data.resize(6 * policyc::runtime::npyDTypeSize(dtype));
    for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<std::byte>(dtype[0] == 'b' ? i % 2 : i * 7);
    std::string path = tempPath(std::string(dtype) + ".npy");
    writeNpy(path, a);
    NpyArray b = readNpy(path);
    CHECK(b.dtype == a.dtype);
    CHECK(b.shape == a.shape);
    CHECK(b.data == a.data);
  }
}

TEST_CASE("npy: 1-D, scalar and empty shapes", "[npy]") {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{5}, std::vector<int64_t>{}, std::vector<int64_t>{0, 4}}) {
    NpyArray a{"f32", shape, std::vector<std::byte>(4 * static_cast<size_t>(shape.empty() ? 1 : shape[0] * (shape.size() > 1 ? shape[1] : 1)))};
    std::string path = tempPath("shape.npy");
    writeNpy(path, a);
    CHECK(readNpy(path).shape == shape);
  }
}

TEST_CASE("npy: a header written by numpy is read", "[npy]") {
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  int64_t values[2] = {-3, 1LL << 40};
  bytes.append(reinterpret_cast<const char*>(values), sizeof values);
  std::string path = tempPath("numpy.npy");
  writeRaw(path, bytes);
  NpyArray a = readNpy(path);
  CHECK(a.dtype == "i64");
  CHECK(a.shape == std::vector<int64_t>{2});
  CHECK(std::memcmp(a.data.data(), values, sizeof values) == 0);
}

TEST_CASE("npy: bad files give one clear error", "[npy][bad-input]") {
  NpyArray a{"f32", {4, 4}, std::vector<std::byte>(64)};
  std::string good = tempPath("good.npy");
  writeNpy(good, a);
  std::string bytes = readRaw(good);
  std::string path = tempPath("bad.npy");

  CHECK_THROWS_WITH(readNpy(tempPath("does_not_exist.npy")), Catch::Contains("cannot open"));
  writeRaw(path, bytes.substr(0, bytes.size() - 10));
  CHECK_THROWS_WITH(readNpy(path), Catch::Contains("truncated"));
  writeRaw(path, "not a numpy file at all");
  CHECK_THROWS_WITH(readNpy(path), Catch::Contains("bad magic"));
  writeRaw(path, bytes.substr(0, 20));
  CHECK_THROWS_WITH(readNpy(path), Catch::Contains("truncated"));
  std::string bigEndian = bytes;
  bigEndian.replace(bigEndian.find("<f4"), 3, ">f4");
  writeRaw(path, bigEndian);
  CHECK_THROWS_WITH(readNpy(path), Catch::Contains("unsupported .npy dtype '>f4'"));
  std::string fortran = bytes;
  fortran.replace(fortran.find("False"), 5, "True ");
  writeRaw(path, fortran);
  CHECK_THROWS_WITH(readNpy(path), Catch::Contains("Fortran"));
  std::string f16 = bytes;
  f16.replace(f16.find("<f4"), 3, "<f2");
  writeRaw(path, f16);
  CHECK_THROWS_WITH(readNpy(path), Catch::Contains("unsupported"));
}
