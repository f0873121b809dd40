// examples/gpt/npy.hpp — writes NumPy `.npy` files and a small `config.json`, for the GPT example's dumps.
//
// `.npy` format version 1.0 (numpy.lib.format): the magic "\x93NUMPY", version bytes 1 0, a
// little-endian uint16 header length, then an ASCII Python dict literal
// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` padded with spaces and ended by
// '\n' so that the data starts at a multiple of 64 bytes, then the elements in C order. Two element
// types: float32 (`<f4`) and int64 (`<i8`), always written little-endian (byte-swapped on a
// big-endian host). Any rank: shape {} is a scalar, {n} is written `(n,)`.
// Files are written by examples/write_file.hpp (atomically, every byte checked); every failure throws std::runtime_error or std::invalid_argument.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../write_file.hpp"

namespace npy {

namespace detail {

/// "(2, 3)", "(5,)", "()".
inline std::string shape_tuple(std::span<const std::size_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

inline std::size_t element_count(std::span<const std::size_t> shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

/// The whole file: header, then `count` elements of `elem` bytes each, little-endian.
inline void write_raw(const std::filesystem::path& path, std::string_view descr, std::span<const std::size_t> shape,
                      const void* data, std::size_t count, std::size_t elem) {
  if (element_count(shape) != count)
    throw std::invalid_argument("npy: " + path.string() + ": shape " + shape_tuple(shape) + " does not hold " +
                                std::to_string(count) + " elements");
  std::string dict =
      "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape_tuple(shape) + ", }";
  const std::size_t preamble = 10;  // magic (6) + version (2) + header length (2)
  std::size_t total = preamble + dict.size() + 1;
  const std::size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  if (dict.size() > 65535) throw std::invalid_argument("npy: header too long for version 1.0");
  const auto hlen = static_cast<std::uint16_t>(dict.size());

  std::string bytes;
  bytes.reserve(padded + count * elem);
  bytes.append("\x93NUMPY", 6);
  bytes += static_cast<char>(1);
  bytes += static_cast<char>(0);
  bytes += static_cast<char>(hlen & 0xff);
  bytes += static_cast<char>(hlen >> 8);
  bytes += dict;
  const std::size_t at = bytes.size();
  bytes.resize(at + count * elem);
  if (count > 0) std::memcpy(bytes.data() + at, data, count * elem);
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i < count; ++i) {
      char* e = bytes.data() + at + i * elem;
      for (std::size_t a = 0, b = elem - 1; a < b; ++a, --b) std::swap(e[a], e[b]);
    }
  }
  std::string why;
  if (!examples::write_file(path.string(), bytes, why)) throw std::runtime_error("npy: " + why);
}

}  // namespace detail

/// Writes `data` (C order) as a float32 array of `shape`; the product of `shape` must be data.size().
inline void write(const std::filesystem::path& path, std::span<const float> data, std::span<const std::size_t> shape) {
  static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559);
  detail::write_raw(path, "<f4", shape, data.data(), data.size(), sizeof(float));
}

/// Writes `data` (C order) as an int64 array of `shape`.
inline void write(const std::filesystem::path& path, std::span<const std::int64_t> data,
                  std::span<const std::size_t> shape) {
  detail::write_raw(path, "<i8", shape, data.data(), data.size(), sizeof(std::int64_t));
}

inline void write(const std::filesystem::path& path, const std::vector<float>& data,
                  const std::vector<std::size_t>& shape) {
  write(path, std::span<const float>(data), std::span<const std::size_t>(shape));
}

inline void write(const std::filesystem::path& path, const std::vector<std::int64_t>& data,
                  const std::vector<std::size_t>& shape) {
  write(path, std::span<const std::int64_t>(data), std::span<const std::size_t>(shape));
}

/// A flat JSON object written in insertion order: `{"n_layer": 2, "tied": false, ...}`.
class json_object {
 public:
  json_object& add(std::string_view key, std::int64_t v) { return raw(key, std::to_string(v)); }
  json_object& add(std::string_view key, int v) { return raw(key, std::to_string(v)); }
  json_object& add(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  json_object& add(std::string_view key, const char* v) { return raw(key, quote(v)); }
  json_object& add(std::string_view key, std::string_view v) { return raw(key, quote(v)); }
  /// `v` must already be JSON text.
  json_object& raw(std::string_view key, std::string v) {
    items_.emplace_back(quote(key), std::move(v));
    return *this;
  }

  std::string str() const {
    std::string s = "{";
    for (std::size_t i = 0; i < items_.size(); ++i) {
      s += i == 0 ? "\n  " : ",\n  ";
      s += items_[i].first + ": " + items_[i].second;
    }
    return s + (items_.empty() ? "}\n" : "\n}\n");
  }

  void write(const std::filesystem::path& path) const {
    std::string why;
    if (!examples::write_file(path.string(), str(), why)) throw std::runtime_error("json: " + why);
  }

  static std::string quote(std::string_view s) {
    std::string q = "\"";
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        q += '\\';
        q += c;
      } else if (u < 0x20) {
        static const char* hex = "0123456789abcdef";
        q += "\\u00";
        q += hex[u >> 4];
        q += hex[u & 15];
      } else {
        q += c;
      }
    }
    return q + "\"";
  }

 private:
  std::vector<std::pair<std::string, std::string>> items_;
};

}  // namespace npy
