// pipetype/mesh/collectives.hpp — the data-parallel and tied-weight actions of a step.
//
// A plan over a mesh (core/mesh.hpp) adds to each rank's compute actions the collectives that
// data parallelism and tied weights need, with PyTorch's names where it has them:
//
//   REDUCE_GRAD(s)   the stage's gradient reduction over its DP group: an all-reduce, or with a
//                    sharded optimizer (FSDP / ZeRO) a reduce-scatter. Right after the stage's
//                    last backward that touches its weights (B or W, not I): the rule of
//                    PyTorch's _add_reduce_grad and of Megatron-LM's last-microbatch grad sync.
//   UNSHARD(s)       sharded only: the all-gather of the stage's parameters over its DP group,
//   RESHARD(s)       and their release (no communication). Placed as PyTorch's
//                    _add_unshard_reshard does: at each compute action the rank looks ahead to
//                    its next `window` distinct stages (3: one forward, one backward, one
//                    prefetching), releases the unsharded stages outside them and gathers the
//                    missing ones in order; the step ends with every stage released.
//   TIE(t)           tie group t (stages holding one tied parameter, e.g. the embedding and the
//                    LM head): the all-reduce of the tied gradient among the ranks of a replica
//                    that hold its stages (`reduce_tied`). A rank issues its ties in increasing
//                    t — one global order, so no two ranks wait on each other across tie
//                    groups (DeepSpeed PR#7208 hung when tie keys were reduced in rank-dependent
//                    order) — after the last backward of every tied stage it holds, and before
//                    those stages' REDUCE_GRAD: the tied gradient is then equal on both ends
//                    before any replica reduces or shards it, so a reduce-scatter sees the same
//                    numbers at both ends (Megatron-LM#844: the DP reduce-scatter ran before the
//                    embedding all-reduce and the embedding gradients came out wrong). Sharded, the
//                    ties also come after the rank's last UNSHARD: they wait for other ranks, and a
//                    gather queued behind them on the in-order data-parallel stream would hold up
//                    a backward those ranks wait for (a cycle verify_mesh refuses).
//   GRAD_NORM        with dp_options::grad_norm: an all-reduce over every rank of the mesh (pipeline
//                    and data-parallel) of the squared norms of its stages' reduced gradients, for
//                    global gradient-norm clipping. Each rank's last collective, after its last
//                    action: every rank issues it once, after all its reductions (a rank that
//                    issued it before a reduction would hold that reduction's peers behind the
//                    world's all-reduce while it waits for them: verify_mesh names the cycle).
//                    Only the optimizer's actions may follow it.
//   FINITE_CHECK     with dp_options::finite_check: whether every reduced gradient of the step is
//                    finite, all-reduced over every rank of the mesh as GRAD_NORM is (dynamic loss
//                    scaling skips a step that overflowed, and every rank must agree to skip it).
//                    Placed as GRAD_NORM is, right before it: one order of the two on every rank.
//   OPT_STEP(s)      with dp_options::optimizer (or zero): the stage's optimizer hook
//                    (graph/stage.hpp, optimizer_step) on the part of its parameters this replica
//                    updates — its shard with ZeRO-1 or FSDP, all of them otherwise — from their
//                    reduced gradients. No communication. After the stage's last compute on the
//                    rank (it writes what they read), its REDUCE_GRAD and its tie groups'
//                    reductions; with GRAD_NORM after that too (clipping needs the global norm),
//                    else as early as that allows, so that it overlaps the rank's other stages.
//   PARAM_SYNC(s)    with dp_options::zero = 1 (ZeRO-1): the all-gather of the stage's updated
//                    parameters over its DP group, right after its OPT_STEP: each replica updated
//                    its shard, and every replica leaves the step with the whole.
//
// Collectives live beside the compute program, not in it: per rank, in issue order, each after
// one of the rank's compute actions (`after`, its index in the rank's list; −1: before the
// first). Generators and the single-replica analyses never see them. place_collectives() is the
// pass that writes them; a user may write them instead (add(), or the text notation), and
// check_collectives() says whether they are placed so that the step is correct: every compute
// action on an unsharded stage, each stage's REDUCE_GRAD once and after its last weight
// backward, ties after their stages' backwards and before their REDUCE_GRAD, at most `window`
// stages unsharded at once, both stages of an overlapped pair (DualPipeV's F&B) unsharded before
// its first half (the halves run together; what is placed between them runs after both), nothing
// sharded at the end, GRAD_NORM once after every reduction with only the optimizer's actions
// after it, each stage's OPT_STEP once after its reductions (and GRAD_NORM) with no compute of
// the stage after it, PARAM_SYNC once after its OPT_STEP. Whether they can hang is the mesh
// proof's question (mesh/verify.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "pipetype/compile/verify.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/core/verdict.hpp"

namespace pipetype {

enum class collective_kind : std::uint8_t {
  reduce_grad,
  unshard,
  reshard,
  reduce_tied,
  grad_norm,
  finite_check,    // FINITE_CHECK: whether every gradient is finite, over the whole mesh
  optimizer_step,  // OPT_STEP: local, the stage's optimizer on its replica's part
  param_sync,      // PARAM_SYNC: ZeRO-1's all-gather of the updated parameters
};

/// PyTorch's name of a collective action (REDUCE_GRAD, UNSHARD, RESHARD), TIE for a tie group's.
constexpr const char* collective_name(collective_kind k) noexcept {
  switch (k) {
    case collective_kind::reduce_grad:
      return "REDUCE_GRAD";
    case collective_kind::unshard:
      return "UNSHARD";
    case collective_kind::reshard:
      return "RESHARD";
    case collective_kind::reduce_tied:
      return "TIE";
    case collective_kind::grad_norm:
      return "GRAD_NORM";
    case collective_kind::finite_check:
      return "FINITE_CHECK";
    case collective_kind::optimizer_step:
      return "OPT_STEP";
    case collective_kind::param_sync:
      return "PARAM_SYNC";
  }
  return "?";
}

struct collective {
  collective_kind what = collective_kind::reduce_grad;
  int stage = -1;  // the plan stage (reduce_tied, grad_norm, finite_check: -1; a tie group names its stages)
  int tie = -1;    // reduce_tied: the tie group's index
  int after = -1;  // issued after the rank's compute action at this index; -1: before the first

  friend constexpr bool operator==(const collective&, const collective&) = default;
};

/// How a mesh reduces gradients and holds parameters.
struct dp_options {
  int dp = 1;          // replicas (the mesh's dp)
  bool shard = false;  // FSDP / ZeRO-3: reduce-scatter, and parameters gathered (UNSHARD) only while used
  int window = 3;      // sharded: stages a rank keeps unsharded at once (PyTorch's max_active_stages)
  int buckets = 1;     // REDUCE_GRAD split into this many all-reduces of equal parts (bucket_of), each
                       // ready as the stage's last weight backward writes it (mesh/lower.hpp); when the
                       // step scatters (FSDP, ZeRO-1), reduce-scatters: each replica keeps the sums of
                       // its shard's part of the bucket (shard_of of the whole stage, as unbucketed)
  std::vector<std::vector<int>> ties{};  // tie groups: each the plan stages that hold one tied parameter
  bool grad_norm = false;  // GRAD_NORM: the gradients' squared norm summed over the whole mesh, for clipping
  bool finite_check = false;  // FINITE_CHECK: whether every gradient is finite, over the whole mesh (loss scaling)
  bool optimizer = false;     // OPT_STEP: each stage's optimizer hook runs in the step, on its replica's part
  int zero = 0;            // 1: ZeRO-1 — REDUCE_GRAD a reduce-scatter, OPT_STEP on the replica's shard of
                           // the optimizer state, PARAM_SYNC the all-gather after it (optimizer implied)
};

/// Whether the step runs the optimizer (OPT_STEP): dp_options::optimizer, or ZeRO-1.
constexpr bool steps_optimizer(const dp_options& o) noexcept { return o.optimizer || o.zero > 0; }
/// Whether REDUCE_GRAD leaves each replica only its shard of the sum (a reduce-scatter): FSDP or
/// ZeRO-1 over two replicas or more.
constexpr bool scatters_gradients(const dp_options& o) noexcept { return (o.shard || o.zero > 0) && o.dp > 1; }

/// Each rank's collectives in issue order (CSR over the pipeline's ranks, as program is).
struct collective_program {
  int ranks = 0;
  std::vector<int> begin;  // [ranks + 1]
  std::vector<collective> ops;

  constexpr std::span<const collective> rank_ops(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return std::span<const collective>(ops).subspan(b, e - b);
  }
};

namespace detail {

/// Per plan stage (of `stages`), the index in a rank's list of its last action — with
/// `weights_only`, its last that touches the stage's weights (B or W) — or −1 for a stage with none
/// there (not on the rank; forward-only).
constexpr std::vector<int> last_actions(std::span<const action> acts, int stages, bool weights_only) {
  std::vector<int> last(static_cast<std::size_t>(stages > 0 ? stages : 0), -1);
  for (int i = 0; i < static_cast<int>(acts.size()); ++i) {
    const action& a = acts[static_cast<std::size_t>(i)];
    if ((!weights_only || a.what == kind::B || a.what == kind::W) && a.stage >= 0 && a.stage < stages)
      last[static_cast<std::size_t>(a.stage)] = i;
  }
  return last;
}

/// The distinct stages of a rank's actions, in order of first appearance.
constexpr std::vector<int> stages_in_order(std::span<const action> acts) {
  std::vector<int> out;
  for (const action& a : acts)
    if (std::find(out.begin(), out.end(), a.stage) == out.end()) out.push_back(a.stage);
  return out;
}

/// errc::collective_misplaced at `rank` (−1: none), naming `stage` and the action `op` (index:
/// the collective's in the rank's collectives, or a tie group's; −1: none).
constexpr verdict misplaced(int rank, int stage, const char* op, int index, const char* why) {
  return refusal(errc::collective_misplaced, why).on_rank(rank).on_stage(stage).on_index(index).on_op(op);
}

/// GRAD_NORM's and FINITE_CHECK's refusals: each reads every gradient of its rank.
struct end_reads {
  const char *unasked, *before_backward, *before_reduction, *before_tie;
};
inline constexpr end_reads grad_norm_reads{
    "a GRAD_NORM without dp_options::grad_norm",
    "a GRAD_NORM before a weight backward of its rank: the norm misses that gradient",
    "a GRAD_NORM before a REDUCE_GRAD of its rank: the norm would read an unreduced gradient",
    "a GRAD_NORM before its rank's tie group reduction: the norm would read an unsummed tied gradient"};
inline constexpr end_reads finite_check_reads{
    "a FINITE_CHECK without dp_options::finite_check",
    "a FINITE_CHECK before a weight backward of its rank: it misses that gradient",
    "a FINITE_CHECK before a REDUCE_GRAD of its rank: it would read an unreduced gradient",
    "a FINITE_CHECK before its rank's tie group reduction: it would read an unsummed tied gradient"};

constexpr verdict collective_error(int rank, const collective& c, int index, const char* why) {
  return misplaced(rank, c.stage, collective_name(c.what), index, why);
}

/// Before each action k of a rank's list, the next `window` distinct stages it runs from k on, in
/// the order they come (PyTorch's _add_unshard_reshard looks ahead so): one cursor per stage the
/// rank holds over that stage's positions, so each k costs the rank's stages, not a scan ahead.
constexpr std::vector<std::vector<int>> lookahead_windows(std::span<const action> acts, int window) {
  const std::vector<int> held = stages_in_order(acts);
  std::vector<std::vector<int>> at(held.size());  // each held stage's positions
  for (int i = 0; i < static_cast<int>(acts.size()); ++i)
    at[static_cast<std::size_t>(std::find(held.begin(), held.end(), acts[static_cast<std::size_t>(i)].stage) -
                                held.begin())]
        .push_back(i);
  std::vector<std::size_t> cursor(held.size(), 0);
  std::vector<std::vector<int>> out(acts.size());
  std::vector<std::pair<int, int>> next;  // (next position, stage)
  for (int k = 0; k < static_cast<int>(acts.size()); ++k) {
    next.clear();
    for (std::size_t h = 0; h < held.size(); ++h) {
      while (cursor[h] < at[h].size() && at[h][cursor[h]] < k) ++cursor[h];
      if (cursor[h] < at[h].size()) next.push_back({at[h][cursor[h]], held[h]});
    }
    std::sort(next.begin(), next.end());
    const std::size_t w = std::min(next.size(), static_cast<std::size_t>(std::max(1, window)));
    for (std::size_t q = 0; q < w; ++q) out[static_cast<std::size_t>(k)].push_back(next[q].second);
  }
  return out;
}

}  // namespace detail

/// Ok, or why options `o` cannot shape a step's reductions and optimizer: buckets fewer than one
/// or more than pipetype::limits::buckets; a ZeRO stage other than 0 or 1, or ZeRO-1 with FSDP.
constexpr verdict check_dp_options(const dp_options& o) {
  if (o.buckets < 1)
    return detail::misplaced(-1, -1, "REDUCE_GRAD", -1, "a gradient reduction in fewer than one bucket");
  if (o.buckets > limits::buckets)
    return detail::misplaced(-1, -1, "REDUCE_GRAD", -1, "more than 1024 buckets a stage (pipetype::limits::buckets)");
  if (o.zero != 0 && o.zero != 1)
    return detail::misplaced(-1, -1, "OPT_STEP", -1,
                             "a ZeRO stage other than 0 or 1 (ZeRO-2 and -3 shard more: FSDP is dp_options::shard)");
  if (o.zero > 0 && o.shard)
    return detail::misplaced(-1, -1, "OPT_STEP", -1,
                             "ZeRO-1 with FSDP: sharded parameters shard the optimizer's state already (one of them)");
  return {};
}

/// The collectives of a mesh step for program `p` (the passes described at the top of this
/// file): UNSHARD/RESHARD when sharded, each tie group's reduction, each stage's REDUCE_GRAD,
/// GRAD_NORM, OPT_STEP and PARAM_SYNC when asked for. With dp = 1, no tie groups and neither
/// GRAD_NORM nor the optimizer, none. A stage with no B or W (a forward-only plan) has no
/// REDUCE_GRAD; a tie group needs backwards too.
constexpr collective_program place_collectives(program_view p, const dp_options& o) {
  collective_program out;
  out.ranks = p.ranks;
  out.begin.assign(static_cast<std::size_t>(p.ranks) + 1, 0);
  for (int r = 0; r < p.ranks; ++r) {
    const std::span<const action> acts = p.rank_actions(r);
    const int n = static_cast<int>(acts.size());
    std::vector<collective> mine;
    // UNSHARD / RESHARD: before action k, the window of the next `window` distinct stages from k
    if (o.shard && o.dp > 1) {
      std::vector<int> active;  // unsharded now, in the order gathered
      const std::vector<std::vector<int>> windows = detail::lookahead_windows(acts, o.window);
      for (int k = 0; k < n; ++k) {
        const std::vector<int>& want = windows[static_cast<std::size_t>(k)];
        for (auto it = active.begin(); it != active.end();)
          if (std::find(want.begin(), want.end(), *it) == want.end()) {
            mine.push_back({collective_kind::reshard, *it, -1, k - 1});
            it = active.erase(it);
          } else {
            ++it;
          }
        for (const int s : want)
          if (std::find(active.begin(), active.end(), s) == active.end()) {
            mine.push_back({collective_kind::unshard, s, -1, k - 1});
            active.push_back(s);
          }
      }
      for (const int s : active) mine.push_back({collective_kind::reshard, s, -1, n - 1});
    }
    // ties and REDUCE_GRAD: after each stage's last weight backward; a tied stage's reduction
    // waits for the ties of this rank, which all go after the last backward of any tied stage here
    const std::vector<int> last_wb = detail::last_actions(acts, p.stages, true);
    auto last_of = [&](int s) { return s >= 0 && s < p.stages ? last_wb[static_cast<std::size_t>(s)] : -1; };
    std::vector<int> tied_here;  // the tie groups with a stage on this rank, increasing
    int ties_after = -1;
    for (int t = 0; t < static_cast<int>(o.ties.size()); ++t)
      for (const int s : o.ties[static_cast<std::size_t>(t)]) {
        const int last = last_of(s);
        if (last < 0) continue;
        if (tied_here.empty() || tied_here.back() != t) tied_here.push_back(t);
        ties_after = std::max(ties_after, last);
      }
    // sharded: a tie group's reduction waits for the other ranks of the group, and the dp stream
    // runs in order, so a gather queued behind it would wait for them too, while their own TIE may
    // wait for a backward that needs that gather: the ties go after the rank's last UNSHARD
    if (!tied_here.empty())
      for (const collective& x : mine)
        if (x.what == collective_kind::unshard) ties_after = std::max(ties_after, x.after + 1);
    auto tied = [&](int s) {
      for (const int t : tied_here)
        for (const int x : o.ties[static_cast<std::size_t>(t)])
          if (x == s) return true;
      return false;
    };
    std::vector<collective> reductions;
    for (const int s : detail::stages_in_order(acts)) {
      const int last = last_of(s);
      if (last < 0 || o.dp <= 1) continue;
      reductions.push_back({collective_kind::reduce_grad, s, -1, tied(s) ? ties_after : last});
    }
    for (const int t : tied_here) reductions.push_back({collective_kind::reduce_tied, -1, t, ties_after});
    // OPT_STEP (and PARAM_SYNC) per stage with a gradient: after its last compute here, its
    // reduction and its ties; with GRAD_NORM, after that, which is last of the rest
    std::vector<collective> updates;
    if (steps_optimizer(o)) {
      const std::vector<int> last_any = detail::last_actions(acts, p.stages, false);
      for (const int s : detail::stages_in_order(acts)) {
        const int last = last_of(s);
        if (last < 0) continue;
        const int at = o.grad_norm || o.finite_check
                           ? n - 1
                           : std::max(last_any[static_cast<std::size_t>(s)], tied(s) ? ties_after : last);
        updates.push_back({collective_kind::optimizer_step, s, -1, at});
        if (o.zero > 0 && o.dp > 1) updates.push_back({collective_kind::param_sync, s, -1, at});
      }
      if (!o.grad_norm && !o.finite_check)
        reductions.insert(reductions.end(), updates.begin(), updates.end()), updates.clear();
    }
    // in position order; at one position the ties first, then the reductions in stage order (a
    // stable sort, by their places in the list: std::stable_sort is no constexpr)
    std::vector<std::pair<collective, int>> order;
    for (std::size_t k = 0; k < reductions.size(); ++k) order.push_back({reductions[k], static_cast<int>(k)});
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      if (a.first.after != b.first.after) return a.first.after < b.first.after;
      const bool ta = a.first.what == collective_kind::reduce_tied, tb = b.first.what == collective_kind::reduce_tied;
      if (ta != tb) return ta;
      return a.second < b.second;
    });
    for (std::size_t k = 0; k < order.size(); ++k) reductions[k] = order[k].first;
    // merge: the gathers before action k come after the reductions placed after action k − 1
    std::vector<collective> merged;
    std::size_t i = 0, j = 0;
    while (i < mine.size() || j < reductions.size()) {
      const bool take_reduction = j < reductions.size() && (i == mine.size() || reductions[j].after <= mine[i].after);
      merged.push_back(take_reduction ? reductions[j++] : mine[i++]);
    }
    if (o.finite_check) merged.push_back({collective_kind::finite_check, -1, -1, n - 1});  // after everything else
    if (o.grad_norm) merged.push_back({collective_kind::grad_norm, -1, -1, n - 1});
    merged.insert(merged.end(), updates.begin(), updates.end());  // with either: the optimizer after them
    out.ops.insert(out.ops.end(), merged.begin(), merged.end());
    out.begin[static_cast<std::size_t>(r) + 1] = static_cast<int>(out.ops.size());
  }
  return out;
}

/// Ok, or the first collective placed so that the step would be wrong (rules at the top of this
/// file): errc::collective_misplaced naming the rank, the collective and its index in the rank's
/// collectives.
constexpr verdict check_collectives(program_view p, const collective_program& c, const dp_options& o) {
  if (c.ranks != p.ranks || static_cast<int>(c.begin.size()) != p.ranks + 1)
    return detail::misplaced(-1, -1, "", -1, "the collectives are not given per rank of the program");
  if (verdict v = check_dp_options(o); !v.ok()) return v;
  for (int t = 0; t < static_cast<int>(o.ties.size()); ++t)
    for (const int s : o.ties[static_cast<std::size_t>(t)])
      if (s < 0 || s >= p.stages)
        return detail::misplaced(-1, s, "TIE", t, "a tie group names a stage the program does not have");
  for (int r = 0; r < p.ranks; ++r) {
    const std::span<const action> acts = p.rank_actions(r);
    const std::span<const collective> ops = c.rank_ops(r);
    const int n = static_cast<int>(acts.size());
    const std::vector<int> stages = detail::stages_in_order(acts);
    auto holds = [&](int s) { return std::find(stages.begin(), stages.end(), s) != stages.end(); };
    const std::vector<int> last_wb = detail::last_actions(acts, p.stages, true);
    auto last_of = [&](int s) { return s >= 0 && s < p.stages ? last_wb[static_cast<std::size_t>(s)] : -1; };
    std::vector<int> active, reduced, tied_done, stepped, synced;
    auto in = [](const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); };
    // the first stage with weight backwards not reduced yet (dp > 1), the first tie group with a
    // stage here not reduced yet; −1: none
    auto unreduced = [&] {
      for (const int s : stages)
        if (o.dp > 1 && last_of(s) >= 0 && !in(reduced, s)) return s;
      return -1;
    };
    auto untied = [&] {
      for (int t = 0; t < static_cast<int>(o.ties.size()); ++t) {
        bool held = false;
        for (const int s : o.ties[static_cast<std::size_t>(t)]) held = held || last_of(s) >= 0;
        if (held && !in(tied_done, t)) return t;
      }
      return -1;
    };
    // whether a tie group holding stage s has not been reduced yet
    auto tie_pending = [&](int s) {
      for (int t = 0; t < static_cast<int>(o.ties.size()); ++t)
        if (in(o.ties[static_cast<std::size_t>(t)], s) && !in(tied_done, t)) return true;
      return false;
    };
    bool normed = false, checked = false;  // the rank's GRAD_NORM, FINITE_CHECK issued
    int prev_after = -1;
    std::size_t next = 0;
    // walk the compute actions, issuing the collectives placed before each
    for (int k = -1; k < n; ++k) {
      if (k >= 0) {
        const action& a = acts[static_cast<std::size_t>(k)];
        auto at_action = [&](const char* why) { return detail::at(errc::collective_misplaced, r, a, k, why); };
        if (o.shard && o.dp > 1 && std::find(active.begin(), active.end(), a.stage) == active.end())
          return at_action("a compute action on a sharded stage (no UNSHARD of it before, or a RESHARD since)");
        // an overlapped pair's halves run together (the collectives placed between them run after
        // both): its second half's stage must be unsharded before the first half
        if (o.shard && o.dp > 1 && a.overlapped && k + 1 < n &&
            std::find(active.begin(), active.end(), acts[static_cast<std::size_t>(k) + 1].stage) == active.end())
          return at_action(
              "an overlapped pair whose second half's stage is not unsharded before its first half: the halves run "
              "together, so FSDP over such pairs needs both stages gathered first (a window of at least 2)");
        if (in(reduced, a.stage) && (a.what == kind::B || a.what == kind::W))
          return at_action("a weight backward after its stage's REDUCE_GRAD: the reduction misses its gradient");
        if (in(stepped, a.stage))
          return at_action("a compute action after its stage's OPT_STEP: it would read parameters the step updated");
      }
      for (; next < ops.size() && ops[next].after == k; ++next) {
        const collective& x = ops[next];
        const int at = static_cast<int>(next);
        if (x.after < prev_after || x.after < -1 || x.after >= n)
          return detail::collective_error(r, x, at,
                                          "collectives out of order (their `after` must not decrease) or after an "
                                          "action the rank does not have");
        prev_after = x.after;
        const bool optimizer_action =
            x.what == collective_kind::optimizer_step || x.what == collective_kind::param_sync;
        if (normed && !optimizer_action)
          return detail::collective_error(
              r, x, at,
              "a collective after the rank's GRAD_NORM (only the optimizer's OPT_STEP and PARAM_SYNC follow it)");
        if (checked && !optimizer_action && x.what != collective_kind::grad_norm)
          return detail::collective_error(r, x, at,
                                          "a collective after the rank's FINITE_CHECK (only GRAD_NORM and the "
                                          "optimizer's OPT_STEP and PARAM_SYNC follow it)");
        if (x.what != collective_kind::reduce_tied && x.what != collective_kind::grad_norm &&
            x.what != collective_kind::finite_check && !holds(x.stage))
          return detail::collective_error(r, x, at, "a collective of a stage the rank does not run");
        switch (x.what) {
          case collective_kind::unshard:
            if (!o.shard)
              return detail::collective_error(r, x, at, "an UNSHARD without sharded parameters (dp_options::shard)");
            if (std::find(active.begin(), active.end(), x.stage) != active.end())
              return detail::collective_error(r, x, at, "an UNSHARD of a stage that is unsharded already");
            active.push_back(x.stage);
            if (static_cast<int>(active.size()) > std::max(1, o.window))
              return detail::collective_error(r, x, at, "more stages unsharded at once than the window allows");
            break;
          case collective_kind::reshard: {
            const auto it = std::find(active.begin(), active.end(), x.stage);
            if (it == active.end())
              return detail::collective_error(r, x, at, "a RESHARD of a stage that is not unsharded");
            active.erase(it);
            break;
          }
          case collective_kind::reduce_grad: {
            if (in(reduced, x.stage)) return detail::collective_error(r, x, at, "a second REDUCE_GRAD of the stage");
            if (last_of(x.stage) < 0)  // (what --forward-only --dp is refused for, from a file too)
              return detail::collective_error(r, x, at,
                                              "a REDUCE_GRAD of a stage with no weight backward: it has no gradient "
                                              "to reduce");
            if (x.after < last_of(x.stage))
              return detail::collective_error(r, x, at,
                                              "a REDUCE_GRAD before the stage's last weight backward (B or W)");
            if (tie_pending(x.stage))
              return detail::collective_error(r, x, at, "a tied stage's REDUCE_GRAD before its tie group's reduction");
            reduced.push_back(x.stage);
            break;
          }
          case collective_kind::reduce_tied: {
            if (x.tie < 0 || x.tie >= static_cast<int>(o.ties.size()))
              return detail::collective_error(r, x, at, "a tie group that does not exist");
            if (!tied_done.empty() && tied_done.back() >= x.tie)
              return detail::collective_error(r, x, at, "tie groups out of their one global order (increasing index)");
            bool mine = false;
            for (const int s : o.ties[static_cast<std::size_t>(x.tie)]) {
              if (!holds(s)) continue;
              mine = true;
              if (x.after < last_of(s))
                return detail::collective_error(r, x, at,
                                                "a tie group's reduction before the last backward of its stage");
            }
            if (!mine)
              return detail::collective_error(r, x, at,
                                              "a tie group's reduction on a rank that holds none of its stages");
            tied_done.push_back(x.tie);
            break;
          }
          case collective_kind::grad_norm:
          case collective_kind::finite_check: {
            const bool norm = x.what == collective_kind::grad_norm;
            const detail::end_reads& why = norm ? detail::grad_norm_reads : detail::finite_check_reads;
            if (norm ? !o.grad_norm : !o.finite_check) return detail::collective_error(r, x, at, why.unasked);
            if (!norm && checked) return detail::collective_error(r, x, at, "a second FINITE_CHECK");
            // what it reads: every gradient of the rank, written, reduced and tied
            for (const int s : stages)
              if (last_of(s) > x.after) return detail::collective_error(r, x, at, why.before_backward);
            if (unreduced() >= 0) return detail::collective_error(r, x, at, why.before_reduction);
            if (untied() >= 0) return detail::collective_error(r, x, at, why.before_tie);
            (norm ? normed : checked) = true;
            break;
          }
          case collective_kind::optimizer_step: {
            if (!steps_optimizer(o))
              return detail::collective_error(r, x, at, "an OPT_STEP without dp_options::optimizer (or zero)");
            if (in(stepped, x.stage)) return detail::collective_error(r, x, at, "a second OPT_STEP of the stage");
            if (last_of(x.stage) < 0)
              return detail::collective_error(r, x, at,
                                              "an OPT_STEP of a stage with no weight backward: it has no gradient to "
                                              "step with");
            if (o.dp > 1 && !in(reduced, x.stage))
              return detail::collective_error(r, x, at,
                                              "an OPT_STEP before its stage's REDUCE_GRAD: it would step with an "
                                              "unreduced gradient");
            if (tie_pending(x.stage))
              return detail::collective_error(r, x, at,
                                              "an OPT_STEP before its stage's tie group reduction: it would step "
                                              "with an unsummed tied gradient");
            if (o.grad_norm && !normed)
              return detail::collective_error(r, x, at,
                                              "an OPT_STEP before the rank's GRAD_NORM: clipping needs the global "
                                              "norm first");
            if (o.finite_check && !checked)
              return detail::collective_error(r, x, at,
                                              "an OPT_STEP before the rank's FINITE_CHECK: it must know whether to "
                                              "skip the update");
            stepped.push_back(x.stage);
            break;
          }
          case collective_kind::param_sync:
            if (o.zero == 0 || o.dp <= 1)
              return detail::collective_error(r, x, at, "a PARAM_SYNC without ZeRO-1 over replicas (dp_options::zero)");
            if (in(synced, x.stage)) return detail::collective_error(r, x, at, "a second PARAM_SYNC of the stage");
            if (!in(stepped, x.stage))
              return detail::collective_error(r, x, at,
                                              "a PARAM_SYNC before its stage's OPT_STEP: it would gather parameters "
                                              "not updated yet");
            synced.push_back(x.stage);
            break;
        }
      }
    }
    if (next < ops.size())
      return detail::collective_error(r, ops[next], static_cast<int>(next),
                                      "collectives out of order (their `after` must not decrease) or after an "
                                      "action the rank does not have");
    if (!active.empty())
      return detail::misplaced(r, active.front(), "UNSHARD", -1,
                               "a stage still unsharded at the end of the step (no RESHARD)");
    if (o.grad_norm && !normed)
      return detail::misplaced(r, -1, "GRAD_NORM", -1,
                               "a rank without GRAD_NORM: every other rank's would wait for it forever");
    if (o.finite_check && !checked)
      return detail::misplaced(r, -1, "FINITE_CHECK", -1,
                               "a rank without FINITE_CHECK: every other rank's would wait for it forever");
    if (const int s = unreduced(); s >= 0)
      return detail::misplaced(r, s, "REDUCE_GRAD", -1,
                               "a stage with weight backwards and no REDUCE_GRAD: its replicas' gradients would "
                               "differ");
    if (const int t = untied(); t >= 0)
      return detail::misplaced(r, -1, "TIE", t, "a rank holding a tied stage without its tie group's reduction");
    for (const int s : stages) {
      if (last_of(s) < 0) continue;
      if (steps_optimizer(o) && !in(stepped, s))
        return detail::misplaced(r, s, "OPT_STEP", -1,
                                 "a stage with weight backwards and no OPT_STEP: its parameters would not be updated");
      if (o.zero > 0 && o.dp > 1 && !in(synced, s))
        return detail::misplaced(r, s, "PARAM_SYNC", -1,
                                 "a ZeRO-1 stage without PARAM_SYNC: each replica would keep only its own shard "
                                 "updated");
    }
  }
  return {};
}

}  // namespace pipetype
