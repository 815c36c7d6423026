// Test helper: the fixture models listed in tests/data/manifest.json and their reference data.
#pragma once

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace policyc::testing {

inline std::string sourcePath(const std::string& relative) { return std::string(POLICYC_SOURCE_DIR) + "/" + relative; }

struct FixtureCase {
  int64_t batch;
  std::map<std::string, std::string> inputs;   // name -> .npy path
  std::map<std::string, std::string> outputs;  // name -> .npy path
};

struct Fixture {
  std::string name;
  std::string onnx;  // absolute path
  std::vector<FixtureCase> cases;
};

inline std::vector<Fixture> loadFixtures() {
  std::ifstream f(sourcePath("tests/data/manifest.json"));
  nlohmann::json manifest = nlohmann::json::parse(f);
  std::vector<Fixture> fixtures;
  for (const auto& m : manifest["models"]) {
    Fixture fx{m["name"], sourcePath(m["onnx"]), {}};
    for (const auto& [batch, ref] : m["reference"].items()) {
      FixtureCase c{std::stoll(batch), {}, {}};
      for (const auto& [name, path] : ref["inputs"].items()) c.inputs[name] = sourcePath(path);
      for (const auto& [name, path] : ref["outputs"].items()) c.outputs[name] = sourcePath(path);
      fx.cases.push_back(std::move(c));
    }
    fixtures.push_back(std::move(fx));
  }
  return fixtures;
}

}  // namespace policyc::testing
