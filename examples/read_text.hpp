// examples/read_text.hpp — a schedule file read with a bound, for the example tools.
//
// `--file /dev/zero` (or a multi-gigabyte file) would otherwise be read until memory runs out.
// Reads at most pipetype::limits::file_bytes (64 MiB, far above any schedule: a 1F1B file of
// p = 64, m = 1024 is 0.6 MB) and refuses anything longer with a sentence.
#pragma once

#include <pipetype/core/sizes.hpp>

#include <cstddef>
#include <fstream>
#include <optional>
#include <string>

namespace examples {

/// The file's bytes, or nullopt with `why` set ("cannot read ...", "... is larger than ...").
inline std::optional<std::string> read_text(const std::string& path, std::string& why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = "cannot read " + path;
    return std::nullopt;
  }
  std::string out;
  const std::size_t limit = pipetype::limits::file_bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > limit) {
      why = path + " is larger than " + std::to_string(limit >> 20) + " MiB (pipetype::limits::file_bytes)";
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace examples
