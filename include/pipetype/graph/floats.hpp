// pipetype/graph/floats.hpp — 16-bit floating-point elements for a stage's tensors on the host:
// IEEE 754 binary16 (`half`) and bfloat16 (`bfloat16`), stored as their bits.
//
// They exist so that gradients can be reduced in their own precision — a stage declares
// `using weight_grad = pipetype::tensor<pipetype::bfloat16, N>;` and pipetype's adds and
// reductions (REDUCE_GRAD, TIE) then sum in bfloat16 — with the same bits on every run: each `+=`
// is the exactly rounded sum (computed in float and rounded again, which Figueroa's bound shows
// exact, see operator+=), as IEEE arithmetic in the 16-bit format would give. A device executor maps them to NCCL's
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

// short_bits from a float: the same bits as from the float's double, in 32-bit integers and
// with selects the compiler can vectorise (the hot paths: a float gradient rounded as it is handed
// over, the float sum of +=). bfloat16 rounds the top half of the float's bits; binary16 rebiases
// a normal result and rounds its significand with the integer add, and lets the float add round a
// subnormal one, as in F. Giesen's float_to_half_fast3_rtne. Other formats take the double path.
template <unsigned exp_bits, unsigned man_bits>
constexpr std::uint16_t short_bits_f(float x) {
  const auto b = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  const std::uint32_t a = b & 0x7fffffffu;
  const bool nan = a > 0x7f800000u;
  if constexpr (exp_bits == 8 && man_bits == 7) {
    const auto r = static_cast<std::uint16_t>((a + 0x7fffu + ((a >> 16) & 1u)) >> 16);  // (a carry reaches ∞)
    return static_cast<std::uint16_t>(sign | (nan ? 0x7fc0u : r));
  } else if constexpr (exp_bits == 5 && man_bits == 10) {
    constexpr std::uint32_t half_unit = 126u << 23;  // 0.5f: adding it leaves a subnormal's units in the low bits
    std::uint16_t r = 0;
    if (a >= (127u + 16u) << 23)  // 2^16 and above, infinity, NaN
      r = nan ? 0x7e00u : 0x7c00u;
    else if (a < 113u << 23)  // below 2^−14: a subnormal or zero, rounded by the float add
      r = static_cast<std::uint16_t>(
          std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + std::bit_cast<float>(half_unit)) - half_unit);
    else  // rebiased, the 13 bits below rounded to nearest, ties to even (a carry reaches ∞)
      r = static_cast<std::uint16_t>((a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13);
    return static_cast<std::uint16_t>(sign | r);
  } else {
    return short_bits<exp_bits, man_bits>(static_cast<double>(x));
  }
}

// short_value as a float (exact), in 32-bit integers for the two formats (a NaN stays a NaN)
template <unsigned exp_bits, unsigned man_bits>
constexpr float short_float(std::uint16_t h) {
  if constexpr (exp_bits == 8 && man_bits == 7) {
    return std::bit_cast<float>(std::uint32_t{h} << 16);
  } else if constexpr (exp_bits == 5 && man_bits == 10) {
    std::uint32_t o = std::uint32_t{h & 0x7fffu} << 13;  // exponent and significand in place
    const std::uint32_t e = o & (0x1fu << 23);
    o += 112u << 23;  // rebiased
    if (e == 0x1fu << 23) {
      o += 112u << 23;    // infinity, NaN: the top exponent
    } else if (e == 0) {  // subnormal: m units of 2^−24, renormalised by a float subtraction
      o += 1u << 23;
      o = std::bit_cast<std::uint32_t>(std::bit_cast<float>(o) - std::bit_cast<float>(113u << 23));
    }
    return std::bit_cast<float>(o | (std::uint32_t{h & 0x8000u} << 16));
  } else {
    return static_cast<float>(short_value<exp_bits, man_bits>(h));
  }
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
  constexpr explicit float16_of(float x) : bits(detail::short_bits_f<exp_bits, man_bits>(x)) {}
  constexpr operator float() const { return detail::short_float<exp_bits, man_bits>(bits); }
  constexpr double value() const { return detail::short_value<exp_bits, man_bits>(bits); }
  /// The exactly rounded sum (see the top of this file): the sum in float, then rounded to 16
  /// bits. Rounding twice gives the exactly rounded sum when the first format has at least 2p + 1
  /// significand bits for the second's p (Figueroa, "When is double rounding innocuous?", SIGNUM
  /// Newsletter 30(3), 1995): float's 24 against binary16's 11 and bfloat16's 8. A sum in the
  /// 16-bit format's subnormal range is exact in float, and one past its largest finite number
  /// rounds to infinity from float as it would directly.
  constexpr float16_of& operator+=(float16_of o) {
    bits = detail::short_bits_f<exp_bits, man_bits>(static_cast<float>(*this) + static_cast<float>(o));
    return *this;
  }
};

/// IEEE 754 binary16: 1 sign, 5 exponent and 10 significand bits.
using half = float16_of<5, 10>;
/// bfloat16: binary32's sign, 8 exponent bits and its top 7 significand bits.
using bfloat16 = float16_of<8, 7>;

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

}  // namespace pipetype
