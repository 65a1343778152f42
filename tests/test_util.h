// Small helpers shared by the tests.
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace test_util {

inline std::string shared_path(const std::string& rel) { return std::string(PICOLM_SHARED_DIR) + "/" + rel; }
// Test data kept in the repository (tests/models, tests/golden: the tiny models of architectures added
// after ../shared was made, e.g. gemma4) is taken from there; everything else from ../shared.
inline std::string test_data_path(const std::string& rel) {
  const std::string repo = std::string(PICOLM_SOURCE_DIR) + "/tests/" + rel;
  return std::filesystem::exists(repo) ? repo : shared_path(rel);
}
inline std::string model_path(const std::string& name) { return test_data_path("models/" + name); }

// The whole file; fails the test if it cannot be read (missing inputs must not pass silently).
inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO("reading " << path);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace test_util
