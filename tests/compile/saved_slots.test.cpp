// compile/saved_slots.hpp: the lowering gives every compute op its stash and weight-gradient slot,
// and each rank's counts are constants of the plan. Checked: 1F1B's counts as static_asserts (rank
// r holds p − r stashes, and in-order backwards need one weight-gradient slot per stage); an
// out-of-order pair and DualPipe's later lane holding theirs; and, for every registered schedule,
// against an independent walk of each rank's ops: a forward never takes a slot a live (stage,
// microbatch) holds, every backward reads its forward's slot, the count is the most live at once,
// and a weight-gradient slot is never written again before its sum is made.
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_saved_slots {

namespace pt = pipetype;

constexpr auto one_f_one_b = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(one_f_one_b.resources[0].stash_slots == 4 && one_f_one_b.resources[3].stash_slots == 1);
static_assert(one_f_one_b.resources[0].weight_grad_slots == 1 && one_f_one_b.resources[3].weight_grad_slots == 1);
constexpr auto gpipe = pt::make_plan<pt::gpipe<pt::ranks<2>, pt::microbatches<6>>>();
static_assert(gpipe.resources[0].stash_slots == 6 && gpipe.resources[1].stash_slots == 6);

/// What one rank's ops must satisfy; "" or the first thing that does not hold.
std::string check_rank(const pt::program_view& p, pt::op_span ops, const pt::rank_resources& res) {
  const auto m = static_cast<std::size_t>(p.microbatches), cells = static_cast<std::size_t>(p.stages) * m;
  auto cell = [m](const pt::lowered_op& o) {
    return static_cast<std::size_t>(o.stage) * m + static_cast<std::size_t>(o.microbatch);
  };
  std::vector<int> last(cells, -1), slot_of(cells, -1);
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].code == pt::op_code::compute && ops[i].what != pt::kind::F) last[cell(ops[i])] = static_cast<int>(i);
  std::vector<int> owner(static_cast<std::size_t>(res.stash_slots), -1);  // per stash slot: the cell holding it
  int live = 0, most = 0;
  std::vector<std::size_t> release;  // cells freed after the next compute op (an overlapped pair's first half)
  // weight gradients: per slot, the (stage, microbatch) written there and not yet summed
  std::vector<int> wg_owner(static_cast<std::size_t>(res.weight_grad_slots), -1);
  std::vector<int> next(static_cast<std::size_t>(p.stages), 0);
  std::vector<char> written(cells, 0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const pt::lowered_op& o = ops[i];
    if (o.code != pt::op_code::compute) {
      if (o.stash_slot != -1 || o.weight_grad_slot != -1) return "a transfer has a saved slot";
      continue;
    }
    const std::size_t c = cell(o);
    const std::string at = pt::to_text(pt::action{o.what, o.stage, o.microbatch, false});
    if (o.stash_slot < 0 || o.stash_slot >= res.stash_slots) return at + ": stash slot out of range";
    if (o.what == pt::kind::F) {
      int& holder = owner[static_cast<std::size_t>(o.stash_slot)];
      if (holder >= 0) return at + " takes a stash slot a live microbatch holds";
      holder = static_cast<int>(c), slot_of[c] = o.stash_slot;
      most = std::max(most, ++live);
    } else if (slot_of[c] != o.stash_slot) {
      return at + " reads another stash slot than its forward wrote";
    }
    std::vector<std::size_t> now;
    now.swap(release);
    for (const std::size_t q : now) owner[static_cast<std::size_t>(slot_of[q])] = -1, --live;
    if (last[c] == static_cast<int>(i) || (o.what == pt::kind::F && last[c] < 0)) {
      if (o.overlapped && o.what != pt::kind::F)
        release.push_back(c);
      else
        owner[static_cast<std::size_t>(slot_of[c])] = -1, --live;
    }
    const bool writes_wg = o.what == pt::kind::B || o.what == pt::kind::W;
    if (writes_wg != (o.weight_grad_slot >= 0)) return at + ": a weight-gradient slot on the wrong op";
    if (!writes_wg) continue;
    if (o.weight_grad_slot >= res.weight_grad_slots) return at + ": weight-gradient slot out of range";
    int& w = wg_owner[static_cast<std::size_t>(o.weight_grad_slot)];
    if (w >= 0) return at + " overwrites a weight gradient not yet added";
    w = static_cast<int>(c), written[c] = 1;
    if (o.stage >= p.lane_length()) continue;  // held to the step's end
    const auto s = static_cast<std::size_t>(o.stage);
    while (next[s] < p.microbatches && written[s * m + static_cast<std::size_t>(next[s])]) {
      for (int& x : wg_owner)
        if (x == static_cast<int>(s * m + static_cast<std::size_t>(next[s]))) x = -1;
      ++next[s];
    }
  }
  if (most > res.stash_slots) return "more live stashes than slots";
  // lowest free first takes no more slots than are live at once (one more where a pair holds one)
  bool pairs = false;
  for (const pt::lowered_op& o : ops) pairs = pairs || o.overlapped;
  if (res.stash_slots > most + (pairs ? 1 : 0)) return "more stash slots than live stashes";
  return "";
}

TEST_CASE("saved slots: every registered schedule's stash and weight-gradient slots hold on every rank") {
  int plans = 0;
  for (const pt::schedule_info& s : pt::schedule_infos) {
    for (const auto& pm : {std::pair{2, 4}, std::pair{4, 8}, std::pair{3, 9}}) {
      const int p = pm.first, m = pm.second;  // not a structured binding: doctest's macros capture it
      if (pt::schedule_error(s.name, p, m, 0) != nullptr) continue;
      const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(s.name, p, m));
      REQUIRE_MESSAGE(plan.ok(), std::string(s.name), ": ", pt::describe(plan.result));
      for (int r = 0; r < plan.lowered().ranks; ++r) {
        const std::string why = check_rank(plan.compute(), plan.lowered().rank_ops(r),
                                           plan.lowered().resources[static_cast<std::size_t>(r)]);
        CHECK_MESSAGE(why.empty(), std::string(s.name), " p=", p, " m=", m, " rank ", r, ": ", why);
      }
      ++plans;
    }
  }
  CHECK(plans >= 20);
}

TEST_CASE("saved slots: out-of-order backwards hold their weight gradients until the earlier one is made") {
  const pt::runtime_plan plan = pt::build_plan(pt::parse_schedule("0F0,0F1,0B1,0B0"));
  REQUIRE(plan.ok());
  CHECK(plan.lowered().resources[0].stash_slots == 2);
  CHECK(plan.lowered().resources[0].weight_grad_slots == 2);
  const pt::runtime_plan in_order = pt::build_plan(pt::parse_schedule("0F0,0F1,0B0,0B1"));
  REQUIRE(in_order.ok());
  CHECK(in_order.lowered().resources[0].weight_grad_slots == 1);
  CHECK(check_rank(plan.compute(), plan.lowered().rank_ops(0), plan.lowered().resources[0]).empty());
}

TEST_CASE("saved slots: DualPipe's later lane holds its weight gradients to the step's end") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_dualpipe(2, 4));
  REQUIRE(plan.ok());
  // each rank: one stage of each lane; lane 1's two microbatches stay held, lane 0's add in order
  for (int r = 0; r < 2; ++r) CHECK(plan.lowered().resources[static_cast<std::size_t>(r)].weight_grad_slots >= 3);
}

TEST_CASE("saved slots: the check catches a slot taken twice") {
  const pt::runtime_plan plan = pt::build_plan(pt::make_one_f_one_b(4, 8));
  REQUIRE(plan.ok());
  std::vector<pt::lowered_op> ops(plan.lowered().rank_ops(0).begin(), plan.lowered().rank_ops(0).end());
  for (pt::lowered_op& o : ops)
    if (o.code == pt::op_code::compute) o.stash_slot = 0;  // every stash in the first slot
  CHECK(check_rank(plan.compute(), ops, plan.lowered().resources[0]).find("takes a stash slot") != std::string::npos);
}

}  // namespace test_saved_slots
}  // namespace
