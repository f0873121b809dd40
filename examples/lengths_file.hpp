// examples/lengths_file.hpp — a step's sequence lengths from a file, for the tools' --lengths.
//
// One length per line (a whole number of tokens, 1 … the token cap); blank lines and `#` comments
// are skipped. Read through read_text (a regular file, at most 64 MiB). A bad line is named in one
// sentence: its number and what is wrong with it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "read_text.hpp"

namespace examples {

/// At most this many sequences in one step (a bound on the file, far above any real step's).
inline constexpr std::size_t most_sequences = 65536;

/// The lengths of `path`, each in [1, cap], or nullopt with `why` set.
inline std::optional<std::vector<int>> read_lengths(const std::string& path, long long cap, std::string& why) {
  const std::optional<std::string> text = read_text(path, why);
  if (!text) return std::nullopt;
  std::vector<int> out;
  std::size_t at = 0;
  for (int line = 1; at <= text->size(); ++line) {
    std::size_t end = text->find('\n', at);
    if (end == std::string::npos) end = text->size();
    std::string s = text->substr(at, end - at);
    at = end + 1;
    if (const std::size_t hash = s.find('#'); hash != std::string::npos) s.erase(hash);
    const std::size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    s = s.substr(b, e - b + 1);
    const auto fail = [&](const std::string& what) {
      why = path + ": line " + std::to_string(line) + ": " + what;
      return std::nullopt;
    };
    const bool negative = s[0] == '-';
    if (s.find_first_not_of("0123456789", negative ? 1 : 0) != std::string::npos || s.size() == (negative ? 1u : 0u))
      return fail("'" + s + "' is not a whole number of tokens (one length per line)");
    if (negative || s.find_first_not_of('0') == std::string::npos)
      return fail(s + " is no length: a sequence holds at least 1 token");
    if (s.size() > 12 || std::stoll(s) > cap)
      return fail(s + " tokens is above the token cap " + std::to_string(cap) + " (a sequence must fit a microbatch)");
    if (out.size() == most_sequences)
      return fail("more than " + std::to_string(most_sequences) + " sequences in one step");
    out.push_back(static_cast<int>(std::stoll(s)));
  }
  if (out.empty()) {
    why = path + ": no lengths (one whole number of tokens per line)";
    return std::nullopt;
  }
  return out;
}

}  // namespace examples
