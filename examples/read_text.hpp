// examples/read_text.hpp — a schedule file read with a bound, for the example tools.
//
// `--file /dev/zero` (or a multi-gigabyte file) would otherwise be read until memory runs out.
// Reads at most pipetype::limits::file_bytes (64 MiB, far above any schedule: a 1F1B file of
// p = 64, m = 1024 is 0.6 MB) and refuses anything longer with a sentence. Only a regular file
// (or a link to one) is read: a FIFO would hang the tool until someone wrote to it, a directory
// would read as empty ("no actions"), a device has no end.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <pipetype/core/sizes.hpp>

#include <cstddef>
#include <fstream>
#include <optional>
#include <string>

namespace examples {

/// The file's bytes, or nullopt with `why` set ("cannot read ...", "... is larger than ...").
inline std::optional<std::string> read_text(const std::string& path, std::string& why) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    why = "cannot read " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "cannot read " + path + ": " +
          (S_ISDIR(st.st_mode)    ? "it is a directory"
           : S_ISFIFO(st.st_mode) ? "it is a FIFO (only a regular file is read)"
                                  : "it is not a regular file");
    return std::nullopt;
  }
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
