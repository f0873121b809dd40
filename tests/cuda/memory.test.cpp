// Memory actions on the device executor, through the record driver (docs/13): an OFFLOAD is a
// device-to-host copy of the stash and of the input into pinned memory on the rank's copy stream, after an event the compute
// stream recorded behind the forward; a RELOAD the copy back, which the backward (or RECOMPUTE)
// that reads it waits for; a RECOMPUTE the forward again on the compute stream. Over the loopback
// transport every schedule trains the MLP of examples/mlp.hpp bitwise like the unpipelined run,
// with each offloaded slot overwritten by NaN bytes after its copy (so a read before its RELOAD,
// or a RELOAD into the wrong slot, shows in the gradients). The host pool is allocated once, at
// binding; a driver that cannot keep host memory is refused in one sentence. CPU only.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../host/memory_modes.hpp"
#include "mlp.hpp"

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_cuda_memory {

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using call = pc::record_driver::call;
using ck = pc::record_driver::call_kind;
using namespace std::chrono_literals;

namespace {

// A record driver whose OFFLOAD leaves NaN bytes behind in the device slot it copied from.
struct poisoning_driver : pc::record_driver {
  using pc::record_driver::record_driver;
  void copy_to_host(void* dst, const void* src, std::size_t n, stream s) {
    pc::record_driver::copy_to_host(dst, src, n, s);
    std::memset(const_cast<void*>(src), 0xFF, n);
  }
};
static_assert(pc::moves_to_host<poisoning_driver>);

// A record driver with no host memory of its own.
struct device_only_driver : pc::record_driver {
  void* allocate_host(std::size_t) = delete;
};
static_assert(!pc::moves_to_host<device_only_driver> && pc::device_driver<device_only_driver>);

pt::memory_placement place(const pt::runtime_plan& plan, pt::uniform_chain<mlp::stage>& model,
                           pt::memory_policy offload, pt::memory_policy recompute) {
  const pt::memory_sizes z = mlp::stash_sizes(plan.compute(), model);
  pt::memory_options o;
  o.offload = offload;
  o.recompute = recompute;
  o.copy_bandwidth = static_cast<double>(z.saved_of(0));  // a copy takes one forward: k = 2/3
  pt::memory_placement placed = pt::place_memory(plan.compute(), z, pt::costs{.f = 1, .b = 2}, o);
  REQUIRE_MESSAGE(placed.result.ok(), pt::describe(placed.result));
  return placed;
}

struct outcome {
  bool bitwise = false;
  int offloads = 0, recomputes = 0, host_allocations = 0, step_allocations = 0;
};

// One step of `name` over loopback poisoning drivers, with the memory actions the policies place.
outcome loopback_step(const std::string& name, pt::memory_policy offload, pt::memory_policy recompute, int p = 4,
                      int m = 8) {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, p, m));
  REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
  const int S = plan.compute().lane_length();
  std::vector<pt::uniform_chain<mlp::stage>> models;
  models.push_back(mlp::make_model(8, S));
  auto ref = mlp::make_model(8, S);
  const pt::memory_placement placed = place(plan, models.front(), offload, recompute);
  outcome out;
  for (const pt::memory_action& a : placed.actions.ops) {
    out.offloads += a.what == pt::memory_kind::offload;
    out.recomputes += a.what == pt::memory_kind::recompute;
  }
  std::atomic<std::uint64_t> sequence{0};
  std::vector<std::unique_ptr<poisoning_driver>> own;
  std::vector<poisoning_driver*> drivers;
  for (int r = 0; r < p; ++r)
    drivers.push_back(own.emplace_back(std::make_unique<poisoning_driver>(r * 100000, &sequence)).get());
  const mlp::batch b = mlp::make_batch(m, 0);
  std::vector<double> losses, ref_losses;
  mlp::attach(models.front(), b, losses, m);
  pc::loopback_pipeline<poisoning_driver> pipe{plan, models, drivers, {.deadline = 20s, .memory = placed.actions}};
  for (poisoning_driver* d : drivers) {
    out.host_allocations += static_cast<int>(
        std::count_if(d->calls().begin(), d->calls().end(), [](const call& c) { return c.what == ck::allocate_host; }));
    d->clear();
  }
  pipe.step(b.inputs.data());
  for (poisoning_driver* d : drivers)
    out.step_allocations += static_cast<int>(std::count_if(d->calls().begin(), d->calls().end(), [](const call& c) {
      return c.what == ck::allocate || c.what == ck::allocate_host || c.what == ck::make_event ||
             c.what == ck::make_stream;
    }));
  mlp::reference_step(ref, b, ref_losses, m);
  mlp::max_grad_diff(models.front(), ref, &out.bitwise);
  out.bitwise = out.bitwise && mlp::mean_loss(losses) == mlp::mean_loss(ref_losses);
  return out;
}

// Happens-before over one rank's calls under CUDA's stream semantics: vector clocks per stream
// (a record snapshots its stream's clock, a wait merges the event's in, a compute or a copy ticks
// its stream). stamp[k]: call k's stream and clock after it; hb(a, b): call a is done when b runs.
struct order {
  using clock = std::map<int, int>;
  std::vector<std::pair<int, clock>> stamp;
  explicit order(const std::vector<call>& calls) {
    std::map<int, clock> at, ev;
    for (const call& c : calls) {
      clock& me = at[c.stream];
      if (c.what == ck::record) ev[c.event] = me;
      if (c.what == ck::wait)
        for (const auto& [k, v] : ev[c.event]) me[k] = std::max(me[k], v);
      if (c.what == ck::compute || c.what == ck::copy_to_host || c.what == ck::copy_to_device) ++me[c.stream];
      stamp.emplace_back(c.stream, me);
    }
  }
  bool hb(std::size_t a, std::size_t b) const {
    const auto& [s, ca] = stamp[a];
    const auto it = stamp[b].second.find(s);
    return it != stamp[b].second.end() && it->second >= ca.at(s);
  }
};

}  // namespace

TEST_CASE("cuda memory: every schedule trains the MLP bitwise over loopback with its stashes offloaded or recomputed") {
  for_each_memory_mode([](const char* name, pt::memory_policy offload, pt::memory_policy recompute) {
    const outcome r = loopback_step(name, offload, recompute);
    CHECK(r.bitwise);
    if (offload == pt::memory_policy::all && std::string(name) != "zb-h2") CHECK(r.offloads > 0);
    if (recompute == pt::memory_policy::all) CHECK(r.recomputes > 0);
    // pinned memory once per rank that offloads, at binding; nothing made during the step
    CHECK(r.host_allocations <= 4);
    if (r.offloads == 0) CHECK(r.host_allocations == 0);
    if (recompute == pt::memory_policy::none && r.offloads > 0) CHECK(r.host_allocations > 0);
    CHECK(r.step_allocations == 0);
  });
}

TEST_CASE("cuda memory: an OFFLOAD copies to pinned memory after its forward, a RELOAD back before its backward") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  REQUIRE(plan.ok());
  auto model = mlp::make_model(8, 4);
  const pt::memory_placement placed = place(plan, model, pt::memory_policy::all, pt::memory_policy::none);
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {4, 1},
                                             pt::place_collectives(plan.compute(), {}), {}, placed.actions);
  const std::size_t stash = model.stage(0).stash_extent() * sizeof(float);
  const int r = 0;
  pc::record_driver d;
  pc::executor ex{plan, mp, model, d, {.rank = r}};
  // binding: one pinned block, of the host slots the rank needs (1F1B rank 0 offloads all 8: 4 at once)
  std::vector<call> pinned;
  for (const call& c : d.calls())
    if (c.what == ck::allocate_host) pinned.push_back(c);
  REQUIRE(pinned.size() == 1);
  CHECK(pinned.front().bytes == 4 * pt::detail::round_up64(stash));
  REQUIRE(ex.streams().size() == 4);  // compute, comm, dp, copy
  const int copy_stream = ex.streams().back();
  d.clear();
  const mlp::batch b = mlp::make_batch(8, 0);
  std::vector<double> losses;
  mlp::attach(model, b, losses, 8);
  ex.step(b.inputs.data());
  const std::vector<call>& calls = d.calls();
  const order hb(calls);
  // per microbatch: its forward, first backward, offload and reload calls
  std::map<int, std::size_t> fwd, bwd, off, rel;
  std::vector<int> offloaded, reloaded;  // microbatches in the mesh program's order
  for (const pt::mesh_op& o : mp.rank_ops(r)) {
    if (o.code == pt::mesh_op_code::offload) offloaded.push_back(o.microbatch);
    if (o.code == pt::mesh_op_code::reload) reloaded.push_back(o.microbatch);
  }
  REQUIRE(offloaded.size() == 8);
  REQUIRE(reloaded.size() == 8);
  std::size_t nth_off = 0, nth_rel = 0;
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const call& c = calls[k];
    if (c.what == ck::compute && c.kind == 'F') fwd.emplace(c.microbatch, k);
    if (c.what == ck::compute && c.kind != 'F') bwd.emplace(c.microbatch, k);
    if (c.what == ck::copy_to_host) off.emplace(offloaded.at(nth_off++), k);
    if (c.what == ck::copy_to_device) rel.emplace(reloaded.at(nth_rel++), k);
  }
  CHECK(nth_off == 8);
  CHECK(nth_rel == 8);
  for (int j = 0; j < 8; ++j) {
    CAPTURE(j);
    const call& o = calls[off.at(j)];
    const call& l = calls[rel.at(j)];
    CHECK(o.stream == copy_stream);
    CHECK(l.stream == copy_stream);
    CHECK(o.bytes == stash);
    CHECK(l.bytes == stash);
    CHECK(l.src == o.ptr);  // back from the host slot it went to
    const auto* host = static_cast<const std::byte*>(pinned.front().ptr);
    CHECK(static_cast<const std::byte*>(o.ptr) >= host);
    CHECK(static_cast<const std::byte*>(o.ptr) < host + pinned.front().bytes);
    CHECK(hb.hb(fwd.at(j), off.at(j)));  // the copy reads what the forward wrote
    CHECK(hb.hb(rel.at(j), bwd.at(j)));  // the backward reads what the copy brought back
    CHECK_FALSE(hb.hb(bwd.at(j), off.at(j)));
  }
  // the step's end: the copy stream waits for the compute stream's last op, and it for the copies
  std::size_t last_copy_wait = calls.size();
  for (std::size_t k = 0; k < calls.size(); ++k)
    if (calls[k].what == ck::wait && calls[k].stream == copy_stream) last_copy_wait = k;
  REQUIRE(last_copy_wait < calls.size());
  CHECK(hb.hb(bwd.at(7), last_copy_wait));
}

TEST_CASE("cuda memory: a RECOMPUTE runs its forward again on the compute stream, before the backward") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  REQUIRE(plan.ok());
  auto model = mlp::make_model(4, 2);
  const pt::memory_placement placed = place(plan, model, pt::memory_policy::none, pt::memory_policy::all);
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {2, 1},
                                             pt::place_collectives(plan.compute(), {}), {}, placed.actions);
  pc::record_driver d;
  pc::executor ex{plan, mp, model, d, {.rank = 0}};
  CHECK(std::none_of(d.calls().begin(), d.calls().end(), [](const call& c) { return c.what == ck::allocate_host; }));
  d.clear();
  const mlp::batch b = mlp::make_batch(4, 0);
  std::vector<double> losses;
  mlp::attach(model, b, losses, 4);
  ex.step(b.inputs.data());
  // rank 0's computes: each microbatch's F, then (recomputed) its F again right before its B
  std::string seen;
  for (const call& c : d.calls())
    if (c.what == ck::compute) {
      CHECK(c.stream == ex.compute_stream());
      seen += c.kind + std::to_string(c.microbatch) + " ";
    }
  CHECK(seen == "F0 F1 F0 B0 F2 F1 B1 F3 F2 B2 F3 B3 ");
  CHECK(std::none_of(d.calls().begin(), d.calls().end(),
                     [](const call& c) { return c.what == ck::copy_to_host || c.what == ck::copy_to_device; }));
}

TEST_CASE("cuda memory: a driver that keeps no host memory is refused an OFFLOAD in one sentence") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule("1f1b", 4, 8));
  REQUIRE(plan.ok());
  auto model = mlp::make_model(8, 4);
  const pt::memory_placement off = place(plan, model, pt::memory_policy::all, pt::memory_policy::none);
  REQUIRE(off.actions.rank_ops(0).size() > 0);
  const pt::mesh_program mp = pt::build_mesh(plan.compute(), plan.lowered(), {4, 1},
                                             pt::place_collectives(plan.compute(), {}), {}, off.actions);
  device_only_driver d;
  CHECK_THROWS_WITH_AS((pc::executor{plan, mp, model, d, {.rank = 0}}),
                       "pipetype::cuda: rank 0: the step offloads stashes to host memory and the driver cannot keep "
                       "them there (moves_to_host: allocate_host, free_host, copy_to_host, copy_to_device)",
                       std::invalid_argument);
  // recomputing needs none
  const pt::memory_placement rec = place(plan, model, pt::memory_policy::none, pt::memory_policy::all);
  const pt::mesh_program mr = pt::build_mesh(plan.compute(), plan.lowered(), {4, 1},
                                             pt::place_collectives(plan.compute(), {}), {}, rec.actions);
  CHECK_NOTHROW((pc::executor{plan, mr, model, d, {.rank = 0}}));
  // a misplaced action: the loopback pipeline's proof names it
  const pt::runtime_plan two = pt::build_plan(pt::make_schedule("1f1b", 2, 4));
  auto small = mlp::make_model(4, 2);
  std::vector<pc::record_driver> own(2);
  std::vector<pc::record_driver*> drivers{&own[0], &own[1]};
  const pt::memory_program bad = pt::memory_program_of(two.compute(), {{pt::reload(0, 0, 0)}, {}});
  CHECK_THROWS_WITH_AS((pc::loopback_pipeline<pc::record_driver>{two, small, drivers, {.memory = bad}}),
                       "pipetype::cuda loopback: memory action misplaced at rank 0, stage 0, microbatch 0, action "
                       "0RELOAD0 (index 0): a RELOAD before its OFFLOAD",
                       std::invalid_argument);
}

}  // namespace test_cuda_memory
}  // namespace
