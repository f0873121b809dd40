// pipetype/compile/packed_ops.hpp — lowered ops kept in about a fifth of their size, and one view
// that reads them packed or plain.
//
// A lowered_op is 56 bytes, and a plan has about four ops per action (a compute, a group and a
// transfer at each end), most of whose thirteen integer fields are -1 or close to the same field
// of the op before. A built plan (compile/plan.hpp's runtime_plan) therefore keeps its ops packed:
//
//   byte 0      code (3 bits) | stream (2) | kind (2) | overlapped (1)
//   bytes 1, 2  which of the thirteen fields are set (not -1), one bit each (op_field order)
//   then        each set field, as the zigzag LEB128 varint of its difference from that field's
//               last set value before the op's block (blocks of 256 ops)
//
// A block's bases and its bytes' position are stored with it and each op's offset in its block
// is two bytes, so op i is read without reading the ops before it. The bytes sit in chunks of at
// most 256 KiB (a block never straddles two), so growing copies at most one chunk. A plan of
// fewer than 65536 ops keeps them plain instead (packed_ops::plain_below).
// GPipe over 30 ranks and 65536 microbatches packs to 11 bytes an op (bench/scale.sh).
//
// op_span is what every reader of a lowered program takes: a sized range of lowered_op values
// over either form, with indexing, iterators and subspans; a plain array or vector of lowered_op
// converts to it. Its elements are values (decoded on each read): bind `const lowered_op&` or
// `auto` to them, never keep a pointer into the range.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "pipetype/compile/op.hpp"

namespace pipetype {

namespace detail {

/// The integer fields of a lowered_op, in the order of their bits in a packed op's mask.
inline constexpr int op_field_count = 13;
inline constexpr int lowered_op::*op_fields[op_field_count] = {&lowered_op::stage,
                                                               &lowered_op::microbatch,
                                                               &lowered_op::peer,
                                                               &lowered_op::comm,
                                                               &lowered_op::slot,
                                                               &lowered_op::grad_slot,
                                                               &lowered_op::out_slot,
                                                               &lowered_op::wait_event,
                                                               &lowered_op::record_event,
                                                               &lowered_op::tick,
                                                               &lowered_op::link,
                                                               &lowered_op::stash_slot,
                                                               &lowered_op::weight_grad_slot};

}  // namespace detail

/// Lowered ops, packed (see the header comment). Appended one at a time; read by index. Told
/// beforehand (reserve) that there will be fewer than `plain_below` ops, it keeps them plain
/// instead: under 3.5 MB, and read without decoding.
class packed_ops {
 public:
  static constexpr std::size_t plain_below = std::size_t{1} << 16;
  static constexpr std::size_t block_ops = 256;
  static constexpr std::size_t chunk_bytes = std::size_t{1} << 18;
  /// The most bytes one op takes: its three, and a ten-byte varint per field.
  static constexpr std::size_t max_op_bytes = 3 + 10 * detail::op_field_count;

  constexpr std::size_t size() const noexcept { return plain_ ? small_.size() : at_.size() / 2; }
  constexpr bool empty() const noexcept { return size() == 0; }
  /// The ops are kept plain (see the class comment); plain() is then their array.
  constexpr bool is_plain() const noexcept { return plain_; }
  constexpr const lowered_op* plain() const noexcept { return plain_ ? small_.data() : nullptr; }

  /// Room for `n` ops: plain ones when there are fewer than plain_below and none yet, else the
  /// packed ops' offsets (their bytes grow chunk by chunk).
  constexpr void reserve(std::size_t n) {
    if (empty() && n < plain_below) {
      plain_ = true;
      small_.reserve(n);
    } else if (!plain_) {
      at_.reserve(2 * n);
    }
  }

  /// Appends ops[0, n).
  constexpr void append(const lowered_op* ops, std::size_t n) {
    if (plain_)
      small_.insert(small_.end(), ops, ops + n);
    else
      for (std::size_t i = 0; i < n; ++i) push_back(ops[i]);
  }

  constexpr void push_back(const lowered_op& o) {
    if (plain_) {
      small_.push_back(o);
      return;
    }
    if (size() % block_ops == 0) start_block();
    std::vector<std::uint8_t>& chunk = chunks_.back();
    const std::size_t at = chunk.size() - static_cast<std::size_t>(block_at_.back());
    at_.push_back(static_cast<std::uint8_t>(at & 0xffu));
    at_.push_back(static_cast<std::uint8_t>(at >> 8));
    const int* base = base_.data() + (base_.size() - detail::op_field_count);
    std::uint8_t bytes[max_op_bytes];  // the op, written here and appended at once
    std::size_t n = 3;
    unsigned mask = 0;
    for (int f = 0; f < detail::op_field_count; ++f) {
      const int v = o.*detail::op_fields[f];
      if (v == -1) continue;
      mask |= 1u << f;
      const long long d = static_cast<long long>(v) - base[f];
      auto z = static_cast<std::uint64_t>(d < 0 ? ((-(d + 1)) << 1) | 1 : d << 1);  // zigzag
      for (; z >= 128; z >>= 7) bytes[n++] = static_cast<std::uint8_t>((z & 127u) | 128u);
      bytes[n++] = static_cast<std::uint8_t>(z);
      last_[static_cast<std::size_t>(f)] = v;
    }
    bytes[0] =
        static_cast<std::uint8_t>((static_cast<unsigned>(o.code) & 7u) | (static_cast<unsigned>(o.stream) & 3u) << 3 |
                                  (static_cast<unsigned>(o.what) & 3u) << 5 | (o.overlapped ? 128u : 0u));
    bytes[1] = static_cast<std::uint8_t>(mask & 0xffu);
    bytes[2] = static_cast<std::uint8_t>(mask >> 8);
    chunk.insert(chunk.end(), bytes, bytes + n);
  }

  /// Op i's code and peer, read without decoding the rest (a group's transfers are scanned so).
  constexpr op_code code(std::size_t i) const { return plain_ ? small_[i].code : static_cast<op_code>(*at(i) & 7u); }
  constexpr int peer(std::size_t i) const {
    if (plain_) return small_[i].peer;
    const std::uint8_t* p = at(i);
    const unsigned mask = p[1] | static_cast<unsigned>(p[2]) << 8;
    if (!(mask & 4u)) return -1;  // (peer is field 2, after stage and microbatch)
    p += 3;
    for (int f = 0; f < 2; ++f)
      if (mask >> f & 1u) difference(p);
    return static_cast<int>(base_[i / block_ops * detail::op_field_count + 2] + difference(p));
  }

  // (kept out of line: a reader of plain ops through op_span then inlines the one branch it takes)
  [[gnu::noinline]] constexpr lowered_op operator[](std::size_t i) const {
    if (plain_) return small_[i];
    const std::size_t b = i / block_ops;
    const std::uint8_t* p = at(i);
    const int* base = base_.data() + b * detail::op_field_count;
    lowered_op o;
    o.code = static_cast<op_code>(p[0] & 7u);
    o.stream = static_cast<stream_id>((p[0] >> 3) & 3u);
    o.what = static_cast<kind>((p[0] >> 5) & 3u);
    o.overlapped = (p[0] & 128u) != 0;
    unsigned mask = p[1] | static_cast<unsigned>(p[2]) << 8;
    p += 3;
    for (; mask != 0; mask &= mask - 1) {  // the set fields, lowest bit first
      const int f = std::countr_zero(mask);
      o.*detail::op_fields[f] = static_cast<int>(base[f] + difference(p));
    }
    return o;
  }

  /// Bytes held: the chunks' used bytes, the per-op offsets and the per-block tables.
  constexpr std::size_t bytes() const noexcept {
    if (plain_) return small_.size() * sizeof(lowered_op);
    std::size_t n = 0;
    for (const auto& c : chunks_) n += c.size();
    return n + at_.size() + (base_.size() + block_at_.size() + block_chunk_.size()) * sizeof(int);
  }

  friend constexpr bool operator==(const packed_ops& a, const packed_ops& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!(a[i] == b[i])) return false;
    return true;
  }

 private:
  /// The field difference at `p` (a zigzag LEB128 varint), moving `p` past it.
  static constexpr long long difference(const std::uint8_t*& p) {
    std::uint64_t z = *p++;
    if (z >= 128) {  // (most differences take one byte)
      z &= 127u;
      for (int shift = 7;; shift += 7) {
        const std::uint8_t byte = *p++;
        z |= static_cast<std::uint64_t>(byte & 127u) << shift;
        if (byte < 128) break;
      }
    }
    return (z & 1u) ? -static_cast<long long>(z >> 1) - 1 : static_cast<long long>(z >> 1);
  }

  constexpr const std::uint8_t* at(std::size_t i) const {  // op i's first byte
    const std::size_t b = i / block_ops;
    return chunks_[static_cast<std::size_t>(block_chunk_[b])].data() + static_cast<std::size_t>(block_at_[b]) +
           (at_[2 * i] | std::size_t{at_[2 * i + 1]} << 8);
  }

  constexpr void start_block() {
    if (chunks_.empty() || chunks_.back().size() + block_ops * max_op_bytes > chunk_bytes)
      chunks_.emplace_back();  // (it grows as a vector does, to at most chunk_bytes)
    block_chunk_.push_back(static_cast<int>(chunks_.size() - 1));
    block_at_.push_back(static_cast<int>(chunks_.back().size()));
    base_.insert(base_.end(), last_, last_ + detail::op_field_count);
  }

  std::vector<std::vector<std::uint8_t>> chunks_;
  std::vector<int> block_chunk_, block_at_;  // [blocks] the block's chunk, and its first byte there
  std::vector<int> base_;                    // [blocks × op_field_count]
  std::vector<std::uint8_t> at_;             // [2 × ops] the op's offset from its block's first byte
  int last_[detail::op_field_count]{};       // each field's last set value
  bool plain_ = false;
  std::vector<lowered_op> small_;  // the ops, when kept plain
};

/// A sized range of lowered_op values over a plain array or packed_ops (see the header comment).
class op_span {
 public:
  class iterator {
   public:
    using value_type = lowered_op;
    using reference = lowered_op;
    using difference_type = std::ptrdiff_t;
    using iterator_category = std::random_access_iterator_tag;
    using iterator_concept = std::random_access_iterator_tag;

    constexpr iterator() = default;
    [[gnu::always_inline]] constexpr lowered_op operator*() const { return plain_ ? plain_[i_] : (*packed_)[i_]; }
    constexpr lowered_op operator[](difference_type n) const { return *(*this + n); }
    constexpr iterator& operator++() { return ++i_, *this; }
    constexpr iterator operator++(int) { return iterator(plain_, packed_, i_++); }
    constexpr iterator& operator--() { return --i_, *this; }
    constexpr iterator operator--(int) { return iterator(plain_, packed_, i_--); }
    constexpr iterator& operator+=(difference_type n) {
      return i_ = static_cast<std::size_t>(static_cast<difference_type>(i_) + n), *this;
    }
    constexpr iterator& operator-=(difference_type n) { return *this += -n; }
    friend constexpr iterator operator+(iterator a, difference_type n) { return a += n; }
    friend constexpr iterator operator+(difference_type n, iterator a) { return a += n; }
    friend constexpr iterator operator-(iterator a, difference_type n) { return a -= n; }
    friend constexpr difference_type operator-(const iterator& a, const iterator& b) {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    friend constexpr bool operator==(const iterator& a, const iterator& b) { return a.i_ == b.i_; }
    friend constexpr auto operator<=>(const iterator& a, const iterator& b) { return a.i_ <=> b.i_; }

   private:
    friend class op_span;
    constexpr iterator(const lowered_op* plain, const packed_ops* packed, std::size_t i)
        : plain_(plain), packed_(packed), i_(i) {}
    const lowered_op* plain_ = nullptr;
    const packed_ops* packed_ = nullptr;
    std::size_t i_ = 0;
  };

  constexpr op_span() = default;
  constexpr op_span(std::span<const lowered_op> ops) : plain_(ops.data()), size_(ops.size()) {}
  constexpr op_span(const std::vector<lowered_op>& ops) : plain_(ops.data()), size_(ops.size()) {}
  constexpr op_span(const packed_ops& ops)
      : plain_(ops.plain()), packed_(ops.is_plain() ? nullptr : &ops), size_(ops.size()) {}

  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  /// (any integer index: the checks index their tables with int)
  template <class Index>
  requires std::is_integral_v<Index>
  [[gnu::always_inline]] constexpr lowered_op operator[](Index index) const {
    const auto i = static_cast<std::size_t>(index);
    return plain_ ? plain_[i] : (*packed_)[first_ + i];
  }
  constexpr lowered_op front() const { return (*this)[0]; }
  constexpr lowered_op back() const { return (*this)[size_ - 1]; }
  constexpr iterator begin() const {
    return plain_ ? iterator(plain_, nullptr, 0) : iterator(nullptr, packed_, first_);
  }
  constexpr iterator end() const { return begin() + static_cast<std::ptrdiff_t>(size_); }
  constexpr op_span subspan(std::size_t offset, std::size_t count = std::dynamic_extent) const {
    op_span s = *this;
    s.size_ = count == std::dynamic_extent ? size_ - offset : count;
    if (plain_)
      s.plain_ = plain_ + offset;
    else
      s.first_ = first_ + offset;
    return s;
  }
  /// Op i's code and peer alone (for packed ops, without decoding the rest).
  constexpr op_code code(std::size_t i) const { return plain_ ? plain_[i].code : packed_->code(first_ + i); }
  constexpr int peer(std::size_t i) const { return plain_ ? plain_[i].peer : packed_->peer(first_ + i); }
  /// The plain array underneath, or nullptr when the ops are packed.
  constexpr const lowered_op* plain() const noexcept { return plain_; }

 private:
  const lowered_op* plain_ = nullptr;  // set: a plain array; else the packed ops from first_
  const packed_ops* packed_ = nullptr;
  std::size_t first_ = 0, size_ = 0;
};

}  // namespace pipetype
