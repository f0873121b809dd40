// mesh/memory_plan.hpp: a step with memory actions as a type, its peaks constants.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_memory_plan {

namespace pt = pipetype;

using S = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;

// 1F1B holds p = 4 microbatches on rank 0; offloading them all (host link: a copy takes half a
// forward) leaves 2, and the last rank, whose backward follows its forward, keeps its 1
using offloaded = pt::memory_plan<S, pt::saved_bytes<1000>, pt::offloads<pt::memory_policy::all>, pt::host_link<2000>>;
static_assert(offloaded::facts.rejection.ok());
static_assert(offloaded::facts.base_peak_bytes == 4000);
static_assert(offloaded::peak_bytes(0) == 2000);
static_assert(offloaded::peak_bytes(3) == 1000);
static_assert(offloaded::host_peak_bytes(0) <= 4000 && offloaded::facts.offloads > 0);

// recompute everything: rank 0 keeps 3 inputs and one whole activation
using recomputed =
    pt::memory_plan<S, pt::saved_bytes<1000>, pt::kept_bytes<50>, pt::recomputes<pt::memory_policy::all>>;
static_assert(recomputed::peak_bytes(0) == 3 * 50 + 1000);
static_assert(recomputed::facts.recomputes == 4 * 8);

// a limit: the automatic pass offloads until every rank is under it
using limited = pt::memory_plan<S, pt::saved_bytes<1000>, pt::memory_limit<2500>,
                                pt::offloads<pt::memory_policy::automatic>, pt::host_link<4000>>;
static_assert(limited::facts.peak_bytes <= 2500);

// a schedule that says its own memory actions
// (saved: 1 byte a microbatch by default, so the peaks count microbatches): 4 forwards, then their
// backwards; two offloaded while the next forwards run hold 3 at once instead of 4
using written = pt::from_text<"0F0,0OFFLOAD0,0F1,0OFFLOAD1,0F2,0F3,0RELOAD0,0B0,0RELOAD1,0B1,0B2,0B3">;
static_assert(pt::make_memory_plan<written>().offloads == 2);
static_assert(pt::memory_plan<written>::facts.base_peak_bytes == 4);
static_assert(pt::memory_plan<written>::peak_bytes(0) == 3);

TEST_CASE("memory plan: the type's actions are the ones its facts count") {
  const pt::memory_program m = offloaded::actions();
  int offloads = 0;
  for (const pt::memory_action& a : m.ops) offloads += a.what == pt::memory_kind::offload;
  CHECK(offloads == offloaded::facts.offloads);
  CHECK(pt::check_memory_actions(offloaded::plan().compute(), m).ok());
  CHECK(offloaded::memory()[0].base_peak_activations == doctest::Approx(4));
}

}  // namespace test_memory_plan
}  // namespace
