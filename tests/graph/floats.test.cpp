// graph/floats.hpp: binary16 and bfloat16 elements — every value round-trips, conversions round to
// nearest with ties to even (checked at every midpoint and next to it), overflow is infinity, NaN
// stays NaN, and += is the exactly rounded sum.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_floats {

namespace pt = pipetype;
namespace pd = pipetype::detail;

// the format's bits of the value `value(h)` and of points between h and h + 1, for every finite h
template <class Bits, class Value>
int rounding_errors(Bits bits, Value value, unsigned largest) {
  int bad = 0;
  for (unsigned h = 0; h <= largest; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    bad += bits(value(x)) != x;                                         // round trip
    bad += bits(-value(x)) != static_cast<std::uint16_t>(x | 0x8000u);  // and its negative
    if (h == largest) break;
    const double a = value(x), b = value(static_cast<std::uint16_t>(h + 1)), mid = a + (b - a) / 2;
    const unsigned even = (h & 1u) ? h + 1 : h;
    bad += bits(mid) != even;                          // a tie: to the even neighbour
    bad += bits(std::nextafter(mid, 0.0)) != h;        // below it: down
    bad += bits(std::nextafter(mid, 1e300)) != h + 1;  // above it: up
  }
  return bad;
}

TEST_CASE("floats: binary16 and bfloat16 round to nearest, ties to even, at every value and midpoint") {
  CHECK(rounding_errors(pd::short_bits<5, 10>, pd::short_value<5, 10>, 0x7bffu) == 0);
  CHECK(rounding_errors(pd::short_bits<8, 7>, pd::short_value<8, 7>, 0x7f7fu) == 0);
  // bfloat16 of a float is the usual bit rounding of its top half, subnormals included
  int bad = 0;
  std::uint32_t x = 12345;
  for (int k = 0; k < 200000; ++k) {
    x = x * 1664525u + 1013904223u;
    float f = 0;
    std::memcpy(&f, &x, sizeof f);
    if (std::isnan(f)) continue;
    bad += pt::bfloat16(f).bits != static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  CHECK(bad == 0);
}

TEST_CASE("floats: the edges — the largest finite, overflow to infinity, subnormals, NaN") {
  CHECK(pt::half(65504.0f).bits == 0x7bff);
  CHECK(pt::half(65519.0f).bits == 0x7bff);  // below the midpoint to 65536
  CHECK(pt::half(65520.0f).bits == 0x7c00);  // the midpoint ties to "even": infinity
  CHECK(pt::half(-1e9f).bits == 0xfc00);
  CHECK(pt::half(0x1p-24f).bits == 0x0001);  // the smallest subnormal
  CHECK(pt::half(0x1p-25f).bits == 0x0000);  // half of it ties to zero
  CHECK(pt::half(0x1.8p-25f).bits == 0x0001);
  CHECK(std::isnan(static_cast<float>(pt::half(std::nanf("")))));
  CHECK(std::isinf(static_cast<float>(pt::half(INFINITY))));
  CHECK(pt::bfloat16(3.0f).bits == 0x4040);
  CHECK(pt::bfloat16(0x1.fep127f).bits == 0x7f7f);  // the largest finite
  CHECK(pt::bfloat16(0x1.ffp127f).bits == 0x7f80);  // past its midpoint: infinity
  CHECK(pt::bfloat16(0x1p-133f).bits == 0x0001);
  CHECK(std::isnan(static_cast<float>(pt::bfloat16(std::nanf("")))));
  static_assert(pt::half(1.5f).bits == 0x3e00 && pt::bfloat16(1.5f).bits == 0x3fc0);  // constexpr
}

TEST_CASE("floats: += is the exactly rounded sum") {
  pt::half a(1.0f);
  a += pt::half(0x1p-11f);  // exactly between 1 and 1 + 2^-10: to even, 1
  CHECK(a.bits == 0x3c00);
  a += pt::half(0x1.8p-11f);  // above the midpoint: up
  CHECK(a.bits == 0x3c01);
  pt::half big(65504.0f);
  big += pt::half(16.0f);  // 65520 ties away from the largest finite: infinity, as IEEE's add
  CHECK(big.bits == 0x7c00);
  pt::bfloat16 b(256.0f);
  b += pt::bfloat16(1.0f);  // 257 is between 256 and 258: ties to even, 256
  CHECK(b.bits == pt::bfloat16(256.0f).bits);
  b += pt::bfloat16(1.5f);  // 257.5: up to 258
  CHECK(b.bits == pt::bfloat16(258.0f).bits);
  // 1 + 2^-8 in bfloat16: half its unit at 1
  pt::bfloat16 c(1.0f);
  c += pt::bfloat16(0x1p-8f);  // a tie: to even, 1
  CHECK(c.bits == pt::bfloat16(1.0f).bits);
}

// the float paths (a float rounded to 16 bits, 16 bits as a float, +=) against the double ones
// they stand in for, bit for bit: every 16-bit value, every midpoint and the floats next to it,
// and pseudo-random floats and pairs
template <unsigned E, unsigned M>
int float_path_errors(unsigned largest) {
  auto same = [](std::uint16_t x, std::uint16_t y) {
    const bool nx = ((x >> M) & ((1u << E) - 1)) == (1u << E) - 1 && (x & ((1u << M) - 1)) != 0;
    const bool ny = ((y >> M) & ((1u << E) - 1)) == (1u << E) - 1 && (y & ((1u << M) - 1)) != 0;
    return nx || ny ? nx == ny : x == y;
  };
  auto via_double = [](float f) { return pd::short_bits<E, M>(static_cast<double>(f)); };
  int bad = 0;
  for (unsigned h = 0; h <= 0xffffu; ++h) {  // 16 bits as a float: exact
    const auto x = static_cast<std::uint16_t>(h);
    const float f = pd::short_float<E, M>(x);
    const double d = pd::short_value<E, M>(x);
    bad += std::isnan(d) ? !std::isnan(f)
                         : std::bit_cast<std::uint32_t>(f) != std::bit_cast<std::uint32_t>(static_cast<float>(d));
  }
  for (unsigned h = 0; h < largest; ++h) {  // every midpoint (a float) and its neighbours
    const float a = pd::short_float<E, M>(static_cast<std::uint16_t>(h));
    const float b = pd::short_float<E, M>(static_cast<std::uint16_t>(h + 1));
    const float mid = a + (b - a) / 2;
    for (const float f : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), -mid, -a})
      bad += !same(pd::short_bits_f<E, M>(f), via_double(f));
  }
  std::uint32_t r = 2024;
  auto next = [&] { return r = r * 1664525u + 1013904223u; };
  for (int k = 0; k < 300000; ++k) {  // any float, NaN and infinities included
    const float f = std::bit_cast<float>(next());
    bad += !same(pd::short_bits_f<E, M>(f), via_double(f));
  }
  for (int k = 0; k < 300000; ++k) {  // +=: pairs of any bits, and pairs of near magnitudes
    const auto x = static_cast<std::uint16_t>(next() >> 16);
    auto y = static_cast<std::uint16_t>(next() >> 16);
    if (k & 1) y = static_cast<std::uint16_t>((x & 0x7fffu) + (y & 0x3fu) - 0x20u) ^ (y & 0x8000u);
    pt::float16_of<E, M> s, o;
    s.bits = x, o.bits = y;
    s += o;
    bad += !same(s.bits, pd::short_bits<E, M>(pd::short_value<E, M>(x) + pd::short_value<E, M>(y)));
  }
  return bad;
}

TEST_CASE("floats: the float paths give the double paths' bits") {
  CHECK(float_path_errors<5, 10>(0x7bffu) == 0);
  CHECK(float_path_errors<8, 7>(0x7f7fu) == 0);
}

}  // namespace test_floats
}  // namespace
