// graph/tensors.hpp: a tensor or a set of them per edge, packed into 64-byte-aligned blocks, with
// 64-bit sizes; the views a stage's context holds.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <type_traits>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_tensors {

namespace pt = pipetype;

using hidden = pt::tensor<float, 3, 5>;
using ids = pt::no_grad<pt::tensor<std::int32_t, 7>>;
using set3 = pt::tensors<hidden, ids, pt::tensor<double, 2>>;

static_assert(pt::detail::is_tensor_set_v<hidden>);
static_assert(pt::detail::is_tensor_set_v<set3>);
static_assert(!pt::detail::is_tensor_set_v<int>);
static_assert(!pt::detail::is_tensor_set_v<pt::tensors<>>);
static_assert(!pt::detail::is_tensor_set_v<pt::tensors<int>>);
static_assert(
    !pt::detail::is_tensor_set_v<pt::tensors<hidden, hidden, hidden, hidden, hidden, hidden, hidden, hidden, hidden>>);
// a single tensor's views stay plain spans; a set's are span_sets of one span per tensor
static_assert(std::is_same_v<pt::detail::view_t<hidden, true>, std::span<const float>>);
static_assert(std::is_same_v<pt::detail::view_t<set3, false>,
                             pt::span_set<std::span<float>, std::span<std::int32_t>, std::span<double>>>);
static_assert(std::tuple_size_v<pt::detail::view_t<set3, true>> == 3);

TEST_CASE("tensors: a set packs its tensors at 64-byte offsets, its gradient block only those with one") {
  constexpr pt::edge_shape s = pt::detail::shape_of<set3>([](std::size_t k) {
    return k == 0 ? 15u : k == 1 ? 7u : 2u;
  });
  static_assert(s.count == 3);
  static_assert(s.t[0].offset == 0 && s.t[0].bytes() == 60);
  static_assert(s.t[1].offset == 64 && s.t[1].bytes() == 28 && !s.t[1].grad);
  static_assert(s.t[2].offset == 128 && s.t[2].bytes() == 16);
  static_assert(s.bytes == 144);
  static_assert(s.t[0].grad_offset == 0 && s.t[2].grad_offset == 64);
  static_assert(s.grad_bytes == 80);
  CHECK(s.bytes == 144);
}

TEST_CASE("tensors: an extent of 2^33 elements and more is carried exactly (no allocation)") {
  using big = pt::tensors<pt::tensor<float, pt::dynamic>, pt::no_grad<pt::tensor<std::int64_t, pt::dynamic>>>;
  const std::size_t n = std::size_t{1} << 33;
  const pt::edge_shape s = pt::detail::shape_of<big>([&](std::size_t k) { return k == 0 ? n : n + 3; });
  CHECK(s.t[0].bytes() == n * 4);         // 32 GiB
  CHECK(s.t[1].offset == n * 4);          // a multiple of 64 already
  CHECK(s.bytes == n * 4 + (n + 3) * 8);  // 96 GiB + 24 bytes
  CHECK(s.grad_bytes == n * 4);           // the ids carry no gradient
  // a varying tensor of 2^34 elements at most, in a microbatch of length 3 of 4: 3 · 2^32, packed again
  using long_seq = pt::tensors<pt::varying<pt::tensor<float, pt::dynamic>>, pt::tensor<float, 16>>;
  const pt::edge_shape v = pt::detail::shape_of<long_seq>([&](std::size_t k) { return k == 0 ? 2 * n : 16u; });
  const pt::edge_shape a = pt::detail::shape_at(v, 3, 4);
  CHECK(a.t[0].elems == 3 * (n / 2));
  CHECK(a.t[1].offset == 3 * (n / 2) * 4);  // the fixed tensor follows the actual elements
  CHECK(a.bytes == 3 * (n / 2) * 4 + 64);
  CHECK(v.bytes == 2 * n * 4 + 64);  // the slot: the most
}

TEST_CASE("tensors: views over a block and over a gradient block") {
  const pt::edge_shape s = pt::detail::shape_of<set3>([](std::size_t k) { return k == 0 ? 15u : k == 1 ? 7u : 2u; });
  alignas(64) std::byte block[144] = {};
  const auto [h, i, d] = pt::detail::view_at<pt::detail::view_t<set3, false>>(block, s, false);
  CHECK(h.size() == 15);
  CHECK(i.size() == 7);
  CHECK(d.size() == 2);
  CHECK(reinterpret_cast<std::byte*>(d.data()) == block + 128);
  const auto g = pt::detail::view_at<pt::detail::view_t<set3, false>>(block, s, true);
  CHECK(g.get<1>().empty());  // no_grad: no gradient to write
  CHECK(reinterpret_cast<std::byte*>(g.get<2>().data()) == block + 64);
  const auto none =
      pt::detail::view_at<pt::detail::view_t<set3, true>>(static_cast<const std::byte*>(nullptr), s, false);
  CHECK(none.get<0>().empty());
  CHECK(none.get<2>().empty());
}

}  // namespace test_tensors
}  // namespace
