// examples/cli.hpp — what the example tools share on the command line: one way to fail (the
// tool's name, the sentence, exit code 2), plain numbers only (plain_number.hpp), and --help.
#pragma once

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>

#include "plain_number.hpp"

namespace examples {

struct cli {
  const char* name;
  const char* usage;

  [[noreturn]] void fail(const std::string& msg) const {
    std::cerr << name << ": " << msg << "\n";
    std::exit(2);
  }
  /// --help or -h: the usage, and exit 0.
  void help(const std::string& flag) const {
    if (flag != "--help" && flag != "-h") return;
    std::cout << usage;
    std::exit(0);
  }
  /// A tool that takes no options: --help (the usage, exit 0) or nothing; anything else fails.
  void no_options(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      help(argv[i]);
      fail(std::string("unknown argument '") + argv[i] + "' (--help: what it does)");
    }
  }
  /// `v` as a whole number in [lo, hi], or fail saying what `flag` needs.
  int whole(const std::string& flag, const std::string& v, int lo, int hi) const {
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (!plain_number(v, false) || end != v.c_str() + v.size() || x < lo || x > hi)
      fail(flag + " needs a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
    return static_cast<int>(x);
  }
  /// `v` as a plain decimal in (0, hi], or fail.
  float rate(const std::string& flag, const std::string& v, int hi) const {
    char* end = nullptr;
    const float x = std::strtof(v.c_str(), &end);
    if (!plain_number(v, true) || end != v.c_str() + v.size() || !(x > 0) || x > static_cast<float>(hi))
      fail(flag + " needs a number in (0, " + std::to_string(hi) + "]");
    return x;
  }
  /// " (ranks 0 to P−1)" where `rank` is not one of `ranks` ranks (after --slow's rank error).
  static std::string rank_range(int rank, int ranks) {
    return rank >= 0 && rank < ranks ? "" : " (its ranks are 0 to " + std::to_string(ranks - 1) + ")";
  }
  /// --slow's RANK:FACTOR (rank RANK runs FACTOR times as long), RANK in [0, max_rank], FACTOR in
  /// (0, 1e6]; `again`: the flag was given before (one slowed rank at a time).
  std::pair<int, float> rank_factor(const std::string& flag, const std::string& v, int max_rank, bool again) const {
    if (again) fail(flag + " is given twice: one slowed rank at a time");
    const std::size_t colon = v.find(':');
    if (colon == std::string::npos)
      fail(flag + " takes one RANK:FACTOR (rank RANK runs FACTOR times as long: 1:1.5), got '" + v + "'");
    return {whole(flag, v.substr(0, colon), 0, max_rank), rate(flag, v.substr(colon + 1), 1000000)};
  }
};

}  // namespace examples
