// examples/write_file.hpp — a whole file written atomically, for the example tools.
//
// The bytes go to PATH.tmp.PID first and are renamed to PATH once all of them are written and
// flushed, so a reader (a browser reloading an SVG, Perfetto opening a trace) never sees half a
// file, and a failed write leaves PATH as it was. A bad path is a sentence: "cannot write
// out/x.svg: No such file or directory".
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace examples {

/// Writes `bytes` to `path`; false with `why` set when it cannot.
inline bool write_file(const std::string& path, std::string_view bytes, std::string& why) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](int err) {
    why = "cannot write " + path + ": " + std::strerror(err);
    std::remove(tmp.c_str());
    return false;
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return fail(errno);
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !written) return fail(written ? errno : err);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno);
  return true;
}

}  // namespace examples
