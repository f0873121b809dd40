// Gradients of a 16-bit type (graph/floats.hpp) over a host mesh: a stage whose weight_grad is
// pipetype::bfloat16 (or half) has its microbatches' gradients added, its replicas' reduced and
// GRAD_NORM squared in that type, in the fixed orders the executors promise — bit for bit the
// same sums written out by hand: each replica's own accumulation, then the replicas in order.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include "mesh_stages.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <span>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_grad_types {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

using mesh_stages::width;
constexpr std::size_t n = 2 * width;

template <class G>
using lin = mesh_stages::lin<false, true, G>;
template <class G>
using model = pt::chain<lin<G>, lin<G>, lin<G>, mesh_stages::mse>;

template <class G>
const G* acc_of(model<G>& m, int s) {
  return s == 0 ? m.template stage<0>().acc : s == 1 ? m.template stage<1>().acc : m.template stage<2>().acc;
}

TEST_CASE("host grad types: a reduction rounds after each add, not once at the end") {
  // 1 + 2^-8 + 2^-8 in bfloat16: each add is a tie that goes to even (1); summed exactly first, 1 + 2^-7
  pt::bfloat16 a[3] = {pt::bfloat16(1.0f), pt::bfloat16(0x1p-8f), pt::bfloat16(0x1p-8f)};
  std::byte* parts[3] = {reinterpret_cast<std::byte*>(&a[0]), reinterpret_cast<std::byte*>(&a[1]),
                         reinterpret_cast<std::byte*>(&a[2])};
  pt::detail::reduce_parts<pt::bfloat16>(parts, 3, 0, 1, 0, 3);
  for (const pt::bfloat16& x : a) CHECK(x.bits == pt::bfloat16(1.0f).bits);
  CHECK(pt::bfloat16(1.0f + 0x1p-7f).bits != pt::bfloat16(1.0f).bits);
}

TEST_CASE_TEMPLATE("host grad types: 16-bit gradients are added and reduced in their own type, in order", G,
                   pt::bfloat16, pt::half) {
  const int m = 4, D = 3;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, m));
  for (const bool zero : {false, true}) {
    CAPTURE(zero);
    mesh_stages::replicas_with_batch<model<G>> r(D, m);
    const pt::dp_options o{.dp = D, .grad_norm = true, .zero = zero ? 1 : 0};
    ph::mesh_executor ex{plan, pt::mesh{4, D}, o, r.ptrs, {.exec = {.deadline = 20s}}};
    ex.step(r.b);
    // each replica alone, on its own microbatches: its accumulation in G, in microbatch order
    std::deque<model<G>> alone(static_cast<std::size_t>(D));
    for (int d = 0; d < D; ++d) {
      const std::size_t at = static_cast<std::size_t>(d * m) * width, len = static_cast<std::size_t>(m) * width;
      pt::batch b;
      b.input(std::span<const float>(r.x).subspan(at, len)).target(std::span<const float>(r.t).subspan(at, len));
      b.scale(pt::loss_scaling::per(D * m));  // the mesh's objective: the mean over all D · m microbatches
      ph::executor one{plan, alone[static_cast<std::size_t>(d)], {.deadline = 20s}};
      one.step(b);
    }
    double norm_sq = 0;  // GRAD_NORM's order: global ranks r·D + d, each its part (replica 0's whole, or its shard)
    for (int s = 0; s < 3; ++s) {
      G want[n];
      for (std::size_t i = 0; i < n; ++i) {  // the replicas in order, each add rounded to G
        want[i] = acc_of(alone[0], s)[i];
        for (int d = 1; d < D; ++d) want[i] += acc_of(alone[static_cast<std::size_t>(d)], s)[i];
      }
      for (int d = 0; d < D; ++d) {
        const pt::shard_range own = zero ? pt::shard_of(n, D, d) : pt::shard_range{0, n};
        const G* got = acc_of(r.models[static_cast<std::size_t>(d)], s);
        CHECK(std::memcmp(got + own.begin, want + own.begin, own.size() * sizeof(G)) == 0);
        for (std::size_t i = own.begin; i < (zero || d == 0 ? own.end : own.begin); ++i)
          norm_sq += static_cast<double>(static_cast<float>(got[i])) * static_cast<double>(static_cast<float>(got[i]));
      }
    }
    CHECK(ex.grad_norm() == doctest::Approx(std::sqrt(norm_sq)).epsilon(1e-12));
    if (zero)  // ZeRO-1's PARAM_SYNC: every replica the same parameters after the step
      for (int s = 0; s < 3; ++s)
        CHECK(std::memcmp(r.models[1].template stage<0>().p, r.models[0].template stage<0>().p, sizeof(float) * n) ==
              0);
  }
}

}  // namespace test_host_grad_types
}  // namespace
