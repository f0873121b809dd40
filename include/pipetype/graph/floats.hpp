// pipetype/graph/floats.hpp — 16-bit floating-point elements for a stage's tensors on the host:
// IEEE 754 binary16 (`half`) and bfloat16 (`bfloat16`), stored as their bits.
//
// They exist so that gradients can be reduced in their own precision — a stage declares
// `using weight_grad = pipetype::tensor<pipetype::bfloat16, N>;` and pipetype's adds and
// reductions (REDUCE_GRAD, TIE) then sum in bfloat16 — with the same bits on every run: each `+=`
// is the exactly rounded sum (computed in double, where the sum of two such numbers is exact or
// rounds only below the 16-bit format's half unit, then rounded to nearest, ties to even), as
// IEEE arithmetic in the 16-bit format would give. A device executor maps them to NCCL's
// ncclFloat16 and ncclBfloat16 (cuda/runtime.hpp), whose sums round as the hardware's adds do.
//
// Conversions: `half(x)` / `bfloat16(x)` from float or double round to nearest, ties to even;
// values past the largest finite number become infinities, NaN stays NaN; `float(h)` is exact.
// GRAD_NORM and FINITE_CHECK square them in double.
#pragma once

#include <bit>
#include <cstdint>

namespace pipetype {

namespace detail {

// m >> shift (1 ≤ shift ≤ 63), rounded to nearest, ties to even
constexpr std::uint64_t round_shift(std::uint64_t m, unsigned shift) {
  const std::uint64_t q = m >> shift, rem = m & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half_way = std::uint64_t{1} << (shift - 1);
  return rem > half_way || (rem == half_way && (q & 1)) ? q + 1 : q;
}

// The 16 bits of `x` in a format of `exp_bits` exponent and `man_bits` significand bits (binary16:
// 5, 10; bfloat16: 8, 7), rounded to nearest, ties to even, from double (exactly: a double's bits
// below the format's decide the rounding); past the largest finite number, infinity.
template <unsigned exp_bits, unsigned man_bits>
constexpr std::uint16_t short_bits(double x) {
  constexpr unsigned bias = (1u << (exp_bits - 1)) - 1;               // 15, 127
  constexpr std::uint64_t rebias = std::uint64_t{1023 - bias} << 52;  // the exponent 0 of the format
  constexpr std::uint16_t inf = ((1u << exp_bits) - 1) << man_bits;
  const auto b = std::bit_cast<std::uint64_t>(x);
  const auto sign = static_cast<std::uint16_t>((b >> 48) & 0x8000u);
  const std::uint64_t a = b & 0x7fffffffffffffffull;
  if (a > 0x7ff0000000000000ull) return static_cast<std::uint16_t>(sign | inf | (1u << (man_bits - 1)));  // NaN
  if (a >= (std::uint64_t{1023 + bias + 1} << 52)) return static_cast<std::uint16_t>(sign | inf);  // ≥ 2^(bias+1)
  if (a < rebias + (std::uint64_t{1} << 52)) {  // below the smallest normal: subnormal or zero
    // units of the smallest subnormal, 2^(1 − bias − man_bits); at most half of one: zero
    constexpr unsigned unit = 1023 + 1 - bias - man_bits;  // its biased double exponent
    if (a <= (std::uint64_t{unit - 1} << 52)) return sign;
    const auto e = static_cast<unsigned>(a >> 52);
    const std::uint64_t m = (a & 0xfffffffffffffull) | (std::uint64_t{1} << 52);
    return static_cast<std::uint16_t>(sign | round_shift(m, 52 + unit - e));
  }
  // normal: rebiased, the significand rounded from 52 bits (a carry into the exponent is right, up
  // to the infinity)
  return static_cast<std::uint16_t>(sign | round_shift(a - rebias, 52 - man_bits));
}

// The value of 16 bits of that format (exactly: every one is a double).
template <unsigned exp_bits, unsigned man_bits>
constexpr double short_value(std::uint16_t h) {
  constexpr unsigned bias = (1u << (exp_bits - 1)) - 1, top = (1u << exp_bits) - 1;
  const unsigned e = (h >> man_bits) & top, m = h & ((1u << man_bits) - 1);
  double v = 0;
  if (e == 0)  // subnormal: m units of 2^(1 − bias − man_bits)
    v = std::bit_cast<double>(std::uint64_t{1023 + 1 - bias - man_bits} << 52) * static_cast<double>(m);
  else if (e == top)
    v = m == 0 ? __builtin_inf() : __builtin_nan("");
  else
    v = std::bit_cast<double>((static_cast<std::uint64_t>(e + 1023 - bias) << 52) |
                              (static_cast<std::uint64_t>(m) << (52 - man_bits)));
  return (h & 0x8000u) ? -v : v;
}

}  // namespace detail

/// A 16-bit floating-point element of `exp_bits` exponent and `man_bits` significand bits, kept as
/// its bits: half and bfloat16 below.
template <unsigned exp_bits, unsigned man_bits>
struct float16_of {
  static_assert(1 + exp_bits + man_bits == 16, "pipetype::float16_of: a sign, the exponent and the significand");
  std::uint16_t bits = 0;
  float16_of() = default;
  constexpr explicit float16_of(double x) : bits(detail::short_bits<exp_bits, man_bits>(x)) {}
  constexpr explicit float16_of(float x) : float16_of(static_cast<double>(x)) {}
  constexpr operator float() const { return static_cast<float>(value()); }
  constexpr double value() const { return detail::short_value<exp_bits, man_bits>(bits); }
  /// The exactly rounded sum (see the top of this file).
  constexpr float16_of& operator+=(float16_of o) {
    bits = detail::short_bits<exp_bits, man_bits>(value() + o.value());
    return *this;
  }
};

/// IEEE 754 binary16: 1 sign, 5 exponent and 10 significand bits.
using half = float16_of<5, 10>;
/// bfloat16: binary32's sign, 8 exponent bits and its top 7 significand bits.
using bfloat16 = float16_of<8, 7>;

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

}  // namespace pipetype
