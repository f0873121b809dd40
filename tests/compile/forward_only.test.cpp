// Forward-only plans (core/program.hpp's forward_only_of, core/schedule.hpp's forward_only): any
// schedule's forwards verify, lower with no gradient transfer or slot and one activation per rank
// at its peak, and prove deadlock-free; a training program missing a backward is still refused.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_forward_only {

namespace pt = pipetype;

// at compile time: a type, verified and lowered by make_plan
constexpr auto eval = pt::make_plan<pt::forward_only<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>>();
static_assert(eval.peak_activations(0) == 1 && eval.peak_activations(3) == 1);
static_assert(eval.compute().size() == 4 * 8);
static_assert(pt::is_forward_only(eval.compute()));

TEST_CASE("forward-only: every built-in schedule's forwards make a plan without gradients") {
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "dualpipe-v",
                           "dualpipe", "zb-auto"}) {
    const std::string schedule = name;
    CAPTURE(schedule);
    const pt::program training = pt::make_schedule(name, 4, 8);
    const pt::program eval_program = pt::forward_only_of(training);
    CHECK(pt::is_forward_only(eval_program.view()));
    CHECK(!pt::is_forward_only(training.view()));
    CHECK(eval_program.actions.size() == static_cast<std::size_t>(training.stages / training.lanes * 8));
    const pt::runtime_plan plan = pt::build_plan(eval_program);
    REQUIRE_MESSAGE(plan.ok(), pt::describe(plan.result));
    const pt::runtime_plan trained = pt::build_plan(training);
    for (int r = 0; r < plan.compute().ranks; ++r) {
      const pt::rank_resources& res = plan.lowered().resources[static_cast<std::size_t>(r)];
      CHECK(res.gradient_slots == 0);
      CHECK(res.activation_slots <= trained.lowered().resources[static_cast<std::size_t>(r)].activation_slots);
      // one activation at the peak: a rank's stages hold theirs only through their F
      CHECK(plan.peak_activations(r) == 1.0);
      for (const pt::lowered_op& op : plan.lowered().rank_ops(r)) {
        CHECK(op.what == pt::kind::F);  // computes and transfers alike: no backward, no gradient
        CHECK(!op.overlapped);
      }
    }
    // PyTorch's compute+comms file of it: every SEND_F waited for, its order NCCL-safe, torch loads it
    if (plan.compute().lanes == 1) {
      const pt::schedule_file file = pt::file_of(plan.compute(), plan.lowered());
      CHECK(pt::verify_transfers(plan.compute(), file.view()).ok());
      const pt::schedule_file read = pt::read_schedule(pt::to_csv(plan.compute(), plan.lowered()));
      REQUIRE(read.error.ok());
      CHECK(pt::torch_load_note(read, pt::to_program(read).view(), pt::csv_format::compute_comms) == "");
    }
    // the simulated step has only forwards, and its bound is the forward chain's
    const pt::timeline t = pt::simulate(plan.compute(), pt::costs{.f = 1, .b = 2});
    CHECK(t.makespan() <= pt::simulate(trained.compute(), pt::costs{.f = 1, .b = 2}).makespan());
    CHECK(pt::makespan_lower_bound(plan.compute(), pt::costs{.f = 1, .b = 2}).value() <= t.makespan());
  }
}

TEST_CASE("forward-only: a training program that misses one backward is still refused") {
  pt::program p = pt::make_schedule("1f1b", 2, 4);
  for (std::size_t k = 0; k < p.actions.size(); ++k)
    if (p.actions[k].what == pt::kind::B) {  // drop the first backward of rank 0
      p.actions.erase(p.actions.begin() + static_cast<std::ptrdiff_t>(k));
      for (std::size_t r = 1; r < p.begin.size(); ++r) --p.begin[r];
      break;
    }
  const pt::runtime_plan plan = pt::build_plan(p);
  REQUIRE(!plan.ok());
  CHECK(plan.result.code == pt::errc::missing_action);
  CHECK(pt::describe(plan.result).find("no backward") != std::string::npos);
}

}  // namespace test_forward_only
}  // namespace
