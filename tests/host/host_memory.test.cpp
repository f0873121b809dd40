// Memory actions on host threads (host/mesh_binding.hpp, bind/memory_layout.hpp): OFFLOAD and
// RELOAD copy a microbatch's stash and input to a host pool and back on the copy stream (the input
// into the activation slot the step planned for it), RECOMPUTE runs its forward again; the MLP of
// examples/mlp.hpp, whose backward reads its input, trains with gradients bitwise equal to the
// unpipelined run under every schedule, with the offloaded slots filled with NaN bytes until
// their RELOAD, and each rank's stash pool is the plan's peak (memory_of) in slots, its measured
// high-water mark never above it.
#include <pipetype/host.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "memory_modes.hpp"
#include "mlp.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_host_memory {

namespace pt = pipetype;
namespace ph = pipetype::host;
using namespace std::chrono_literals;

struct outcome {
  bool bitwise = false;
  int offloads = 0, recomputes = 0;
  std::vector<ph::stash_pool_use> pools;
  std::vector<pt::rank_memory> planned;
};

outcome run(const std::string& name, pt::memory_policy offload, pt::memory_policy recompute, int p = 4, int m = 8) {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, p, m));
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  const int S = plan.compute().lane_length();
  auto model = mlp::make_model(8, S), ref = mlp::make_model(8, S);
  const pt::memory_sizes z = mlp::stash_sizes(plan.compute(), model);
  pt::memory_options o;
  o.offload = offload;
  o.recompute = recompute;
  o.copy_bandwidth = static_cast<double>(z.saved_of(0));  // a copy takes one forward: k = 2/3
  const pt::memory_placement placed = pt::place_memory(plan.compute(), z, pt::costs{.f = 1, .b = 2}, o);
  REQUIRE_MESSAGE(placed.result.ok(), pt::describe(placed.result));
  outcome out;
  for (const pt::memory_action& a : placed.actions.ops) {
    out.offloads += a.what == pt::memory_kind::offload;
    out.recomputes += a.what == pt::memory_kind::recompute;
  }
  std::vector<pt::uniform_chain<mlp::stage>*> one{&model};
  ph::mesh_executor ex{
      plan, pt::mesh{p, 1}, pt::dp_options{}, one, {.exec = {.deadline = 20s}, .memory = placed.actions}};
  const mlp::batch b = mlp::make_batch(m, 0);
  std::vector<double> losses, ref_losses;
  mlp::attach(model, b, losses, m);
  pt::batch in;
  in.input(b.inputs);
  ex.step(in);
  mlp::reference_step(ref, b, ref_losses, m);
  mlp::max_grad_diff(model, ref, &out.bitwise);
  out.bitwise = out.bitwise && mlp::mean_loss(losses) == mlp::mean_loss(ref_losses);
  out.pools = ex.stash_pools();
  out.planned = pt::memory_of(plan.compute(), placed.actions, z, pt::stash_model);
  return out;
}

TEST_CASE("host memory actions: every schedule trains bitwise with its activations offloaded or recomputed") {
  for_each_memory_mode([](const char* name, pt::memory_policy offload, pt::memory_policy recompute) {
    const outcome r = run(name, offload, recompute);
    CHECK(r.bitwise);
    if (offload == pt::memory_policy::all && std::string(name) != "zb-h2") CHECK(r.offloads > 0);
    if (recompute == pt::memory_policy::all) CHECK(r.recomputes > 0);
    // each rank's pool is its planned peak in slots; what was in use at once never more
    REQUIRE(r.pools.size() == r.planned.size());
    for (std::size_t g = 0; g < r.pools.size(); ++g) {
      CAPTURE(g);
      const ph::stash_pool_use& u = r.pools[g];
      if (u.stride == 0) continue;
      CHECK(static_cast<std::int64_t>(u.slots) * static_cast<std::int64_t>(u.stride) >= r.planned[g].peak_bytes);
      CHECK(static_cast<std::int64_t>(u.slots) ==
            r.planned[g].peak_bytes / static_cast<std::int64_t>(u.stride == 0 ? 1 : u.stride) +
                (r.planned[g].peak_bytes % static_cast<std::int64_t>(u.stride) ? 1 : 0));
      CHECK(u.high_water <= u.slots);
      CHECK(u.high_water > 0);
    }
  });
}

TEST_CASE("host memory actions: 1F1B's rank 0 holds 2 stashes instead of 4 with every activation offloaded") {
  const outcome base = run("1f1b", pt::memory_policy::none, pt::memory_policy::none);
  CHECK(base.bitwise);
  CHECK(base.pools.empty());  // no memory actions: the pipeline's own stash layout
  const outcome r = run("1f1b", pt::memory_policy::all, pt::memory_policy::none);
  CHECK(r.bitwise);
  REQUIRE(r.pools.size() == 4);
  CHECK(r.planned[0].base_peak_activations == doctest::Approx(4));
  CHECK(r.pools[0].slots == 2);
  CHECK(r.pools[0].high_water == 2);  // measured as the step ran: the plan's peak
  CHECK(r.pools[0].host_slots == 4);
  CHECK(r.pools[3].slots == 1);  // the last rank: nothing to offload
}

TEST_CASE("host memory actions: a misplaced action is refused in one sentence") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  auto model = mlp::make_model(4, 2);
  std::vector<pt::uniform_chain<mlp::stage>*> one{&model};
  // a RELOAD before its OFFLOAD
  const pt::memory_program bad = pt::memory_program_of(plan.compute(), {{pt::reload(0, 0, 0)}, {}});
  CHECK_THROWS_WITH_AS(
      (ph::mesh_executor{plan, pt::mesh{2, 1}, pt::dp_options{}, one, {.memory = bad}}),
      "pipetype::host: memory action misplaced at rank 0, stage 0, microbatch 0, action 0RELOAD0 (index 0): a RELOAD "
      "before its OFFLOAD",
      std::invalid_argument);
}

}  // namespace test_host_memory
}  // namespace
