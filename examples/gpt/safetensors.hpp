// examples/gpt/safetensors.hpp — float32 tensors by name in Hugging Face's safetensors format, for
// examples/gpt's checkpoints (--save, --resume).
//
// The format (huggingface/safetensors, "Format"): 8 bytes, the header's length N as a
// little-endian u64; N bytes of JSON, an object mapping each tensor's name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets into what follows the header) and "__metadata__" to an
// object of strings; then the tensors' bytes. The header is padded with spaces to a multiple of 8.
// This reads what it writes and what other writers write of F32 tensors; anything else — a header
// past the file, a tensor whose bytes the file does not hold, a dtype or shape it does not expect —
// is refused with one sentence naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace gpt::safetensors {

struct tensor {
  std::vector<std::size_t> shape;
  std::vector<float> data;
};

struct file {
  std::map<std::string, tensor> tensors;
  std::map<std::string, std::string> metadata;
};

namespace detail {

inline std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

/// A cursor over the header's JSON: just what the format uses (objects, arrays, strings,
/// non-negative integers).
struct reader {
  const std::string& s;
  std::size_t at = 0;
  std::string where;  // the file, for messages
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(where + " is no safetensors file this reads: " + why);
  }
  void space() {
    while (at < s.size() && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t')) ++at;
  }
  bool next_is(char c) {
    space();
    return at < s.size() && s[at] == c;
  }
  void expect(char c) {
    if (!next_is(c)) fail(std::string("expected '") + c + "' at byte " + std::to_string(at) + " of its header");
    ++at;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (at < s.size() && s[at] != '"') {
      if (s[at] == '\\' && at + 1 < s.size()) ++at;
      out += s[at++];
    }
    if (at >= s.size()) fail("a string runs past the header");
    ++at;
    return out;
  }
  std::uint64_t integer() {
    space();
    std::uint64_t v = 0;
    const std::size_t from = at;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
      if (v > (UINT64_MAX - 9) / 10) fail("a number too large at byte " + std::to_string(from));
      v = v * 10 + static_cast<std::uint64_t>(s[at++] - '0');
    }
    if (at == from) fail("expected a non-negative integer at byte " + std::to_string(from) + " of its header");
    return v;
  }
  std::vector<std::uint64_t> integers() {
    std::vector<std::uint64_t> out;
    expect('[');
    if (next_is(']')) return ++at, out;
    do {
      out.push_back(integer());
    } while (next_is(',') && ++at);
    expect(']');
    return out;
  }
};

}  // namespace detail

/// Writes `f` to `path` atomically: to `path` + ".partial", renamed over `path` once complete (a
/// run that stops half way leaves the old file, if any, as it was).
inline void write(const std::filesystem::path& path, const file& f) {
  std::string header = "{\"__metadata__\": {";
  bool first = true;
  for (const auto& [k, v] : f.metadata) {
    header += (first ? "" : ", ") + detail::quoted(k) + ": " + detail::quoted(v);
    first = false;
  }
  header += "}";
  std::size_t offset = 0;
  for (const auto& [name, t] : f.tensors) {
    std::size_t elems = 1;
    std::string shape;
    for (const std::size_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d), elems *= d;
    if (elems != t.data.size())
      throw std::logic_error("safetensors: tensor '" + name + "' has " + std::to_string(t.data.size()) +
                             " values for its shape's " + std::to_string(elems));
    const std::size_t bytes = t.data.size() * sizeof(float);
    header += ", " + detail::quoted(name) + ": {\"dtype\": \"F32\", \"shape\": [" + shape + "], \"data_offsets\": [" +
              std::to_string(offset) + ", " + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  const std::filesystem::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + partial.string());
    std::uint64_t n = header.size();
    unsigned char len[8];
    for (int b = 0; b < 8; ++b) len[b] = static_cast<unsigned char>(n >> (8 * b));  // little-endian
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, t] : f.tensors)
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size() * sizeof(float)));
    if (!out.flush()) throw std::runtime_error("cannot write " + partial.string());
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) throw std::runtime_error("cannot rename " + partial.string() + " to " + path.string() + ": " + ec.message());
}

/// Reads `path` (float32 tensors only; a header of at most 100 MB, as the format's readers cap it).
inline file read(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + where);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size < 8)
    throw std::runtime_error(where + " is no safetensors file: shorter than its 8-byte header length");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | len[b];
  if (n > 100'000'000 || n > size - 8)
    throw std::runtime_error(where + " is no safetensors file: its header length (" + std::to_string(n) +
                             " bytes) is past the file's " + std::to_string(size) + " bytes");
  std::string header(static_cast<std::size_t>(n), '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const std::uint64_t data_bytes = size - 8 - n;
  detail::reader r{header, 0, where};
  file f;
  r.expect('{');
  if (!r.next_is('}')) do {
      const std::string name = r.string();
      r.expect(':');
      if (name == "__metadata__") {
        r.expect('{');
        if (!r.next_is('}')) do {
            const std::string k = r.string();
            r.expect(':');
            f.metadata[k] = r.string();
          } while (r.next_is(',') && ++r.at);
        r.expect('}');
        continue;
      }
      std::string dtype;
      std::vector<std::uint64_t> shape, offsets;
      r.expect('{');
      do {
        const std::string k = r.string();
        r.expect(':');
        if (k == "dtype")
          dtype = r.string();
        else if (k == "shape")
          shape = r.integers();
        else if (k == "data_offsets")
          offsets = r.integers();
        else
          r.fail("tensor '" + name + "' has an unknown field '" + k + "'");
      } while (r.next_is(',') && ++r.at);
      r.expect('}');
      if (dtype != "F32")
        throw std::runtime_error(where + ": tensor '" + name + "' is " + (dtype.empty() ? "of no dtype" : dtype) +
                                 ", not F32");
      if (offsets.size() != 2 || offsets[0] > offsets[1])
        throw std::runtime_error(where + ": tensor '" + name + "' has no [begin, end] data_offsets");
      if (offsets[1] > data_bytes)
        throw std::runtime_error(where + " ends before tensor '" + name + "' does (its data needs bytes up to " +
                                 std::to_string(offsets[1]) + ", the file holds " + std::to_string(data_bytes) + ")");
      std::uint64_t elems = 1;
      for (const std::uint64_t d : shape) elems = d == 0 || elems <= UINT64_MAX / d ? elems * d : UINT64_MAX;
      if (elems * sizeof(float) != offsets[1] - offsets[0])
        throw std::runtime_error(where + ": the shape of tensor '" + name + "' does not fit its " +
                                 std::to_string(offsets[1] - offsets[0]) + " bytes");
      if (f.tensors.count(name)) throw std::runtime_error(where + ": tensor '" + name + "' is there twice");
      tensor& t = f.tensors[name];
      for (const std::uint64_t d : shape) t.shape.push_back(static_cast<std::size_t>(d));
      t.data.resize(static_cast<std::size_t>(elems));
      in.seekg(static_cast<std::streamoff>(8 + n + offsets[0]));
      in.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(elems * sizeof(float)));
      if (!in) throw std::runtime_error("cannot read tensor '" + name + "' of " + where);
    } while (r.next_is(',') && ++r.at);
  r.expect('}');
  return f;
}

}  // namespace gpt::safetensors
