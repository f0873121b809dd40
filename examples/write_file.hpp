// examples/write_file.hpp — where the example tools write: a whole file, their standard output.
//
// A path names one of three things, and each is written the way that keeps it what it was:
//   a regular file, or nothing yet   the bytes go to PATH.tmp.PID in the same folder and are
//                                    renamed onto PATH once all of them are written, flushed and
//                                    closed: a reader (a browser reloading an SVG) never sees half
//                                    a file, and a failed write leaves PATH as it was
//   a character device or a FIFO     written through, in place (`--svg /dev/null`, a pipe to a
//                                    viewer): replacing it would turn /dev/null into a file; a
//                                    FIFO nobody reads is refused at once instead of hanging
//   anything else                    refused with a sentence: a directory, a block device, a
//                                    socket, a symbolic link to any of these or to nothing
// A symbolic link is followed: the file it names is written as above, and the link stays.
// Every failure is one sentence, "cannot write out/x.svg: No space left on device", and every
// tool exits 2 when its standard output could not be written (tool_exits).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>

namespace examples {

/// How a path is written (see the file's comment).
struct output_target {
  enum kind { atomic, through, refused } how = refused;
  std::string path;  // the file written: the path, or the file its link names
  std::string why;   // refused: the sentence
};

inline output_target target_of(const std::string& path) {
  struct stat own {};
  if (path.empty()) return {output_target::refused, path, "an empty file name"};
  if (::lstat(path.c_str(), &own) != 0) {
    if (errno == ENOENT) return {output_target::atomic, path, ""};  // (a missing folder fails at the write)
    return {output_target::refused, path, "cannot write " + path + ": " + std::strerror(errno)};
  }
  std::string file = path;
  struct stat st = own;
  if (S_ISLNK(own.st_mode)) {
    char real[PATH_MAX];
    if (::stat(path.c_str(), &st) != 0 || ::realpath(path.c_str(), real) == nullptr)
      return {output_target::refused, path,
              "cannot write " + path + ": a symbolic link to " + (errno == ENOENT ? "nothing" : std::strerror(errno))};
    file = real;
  }
  if (S_ISREG(st.st_mode)) return {output_target::atomic, file, ""};
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return {output_target::through, file, ""};
  const char* what = S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ? "a block device" : "not a file";
  return {output_target::refused, path, "cannot write " + path + ": it is " + std::string(what)};
}

namespace detail {

// Writes all of `bytes` to the open descriptor fd; errno set when it cannot.
inline bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ::ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Opens a character device or a FIFO for writing without waiting for a reader.
inline int open_through(const std::string& file) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

inline std::string cannot(const std::string& path, int err) {
  return "cannot write " + path + ": " + (err == ENXIO ? "a FIFO that nobody reads" : std::strerror(err));
}

}  // namespace detail

/// Writes `bytes` to `path`; false with `why` set when it cannot.
inline bool write_file(const std::string& path, std::string_view bytes, std::string& why) {
  const output_target t = target_of(path);
  if (t.how == output_target::refused) {
    why = t.why;
    return false;
  }
  if (t.how == output_target::through) {
    const int fd = detail::open_through(t.path);
    if (fd < 0) return why = detail::cannot(path, errno), false;
    const bool ok = detail::write_all(fd, bytes);
    const int err = errno;
    if (::close(fd) != 0 || !ok) return why = detail::cannot(path, ok ? errno : err), false;
    return true;
  }
  const std::string tmp = t.path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return why = detail::cannot(path, errno), false;
  const bool ok = detail::write_all(fd, bytes);
  int err = errno;
  const bool closed = ::close(fd) == 0;
  if (!closed && ok) err = errno;
  if (!ok || !closed || ::rename(tmp.c_str(), t.path.c_str()) != 0) {
    if (ok && closed) err = errno;
    std::remove(tmp.c_str());
    why = detail::cannot(path, err);
    return false;
  }
  return true;
}

/// Standard output sent to a file (a tool's --output FILE), written the way write_file writes: a
/// regular file through PATH.tmp.PID, renamed by finish(); a device or FIFO in place. Until
/// finish() succeeds, exiting removes the partial file.
class stdout_to_file {
 public:
  /// False with `why` set when `path` cannot be written.
  bool open(const std::string& path, std::string& why) {
    const output_target t = target_of(path);
    if (t.how == output_target::refused) return why = t.why, false;
    path_ = path;
    if (t.how == output_target::atomic) {
      final_ = t.path;
      tmp_ = t.path + ".tmp." + std::to_string(::getpid());
    }
    const int fd = t.how == output_target::atomic
                       ? ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                       : detail::open_through(t.path);
    if (fd < 0) return why = detail::cannot(path, errno), tmp_.clear(), false;
    std::fflush(stdout);
    const bool moved = ::dup2(fd, STDOUT_FILENO) >= 0;
    const int err = errno;
    ::close(fd);
    if (!moved) return why = detail::cannot(path, err), remove_tmp(), false;
    pending() = tmp_;
    std::atexit([] {
      if (!pending().empty()) std::remove(pending().c_str());
    });
    return true;
  }
  /// Flushes what was written and puts the file in place; false with `why` set when it cannot.
  bool finish(std::string& why) {
    if (path_.empty()) return true;
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) return why = detail::cannot(path_, errno), false;
    if (!tmp_.empty() && ::rename(tmp_.c_str(), final_.c_str()) != 0) return why = detail::cannot(path_, errno), false;
    pending().clear();
    return true;
  }

 private:
  static std::string& pending() {  // the partial file an exit removes
    static std::string p;
    return p;
  }
  void remove_tmp() {
    if (!tmp_.empty()) std::remove(tmp_.c_str());
    tmp_.clear();
  }
  std::string path_, final_, tmp_;
};

/// A tool's two last words, set up first thing in main: at exit, standard output is flushed and,
/// when any of it could not be written (a full disk, a closed pipe, /dev/full), the tool says so
/// and exits 2 whatever main returned; and an allocation that fails anywhere (sizes the limits
/// let through but this machine cannot hold) is one sentence and exit 2, not std::bad_alloc.
inline void tool_exits(const char* tool) {
  static const char* name = tool;
  std::set_new_handler([] {
    std::fprintf(stderr, "%s: out of memory: the sizes asked for need more than this machine has (docs/03 §3.8)\n",
                 name);
    std::_Exit(2);
  });
  std::atexit([] {
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return;
    const int err = errno;
    std::fprintf(stderr, "%s: cannot write standard output: %s\n", name, std::strerror(err ? err : EIO));
    std::_Exit(2);
  });
}

}  // namespace examples
