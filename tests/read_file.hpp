// tests/read_file.hpp — a test data file's bytes (the test fails when it cannot be read).
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

inline std::string read_test_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE_MESSAGE(f != nullptr, "cannot read " << path);
  std::string s;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  std::fclose(f);
  return s;
}
