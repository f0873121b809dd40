// pipetype/mesh/verify_memory.hpp — the proof that a step's copies and recomputes are ordered.
//
// verify_memory() takes a compute program, its memory actions (mesh/memory_actions.hpp) and
// the mesh step lowered from them (mesh/lower.hpp, a lone pipeline is a mesh with one
// replica) and proves, for every timing of the ops, that on each rank
//   - an OFFLOAD starts after the forward that wrote what it copies,
//   - a RELOAD starts after its OFFLOAD has completed,
//   - every backward and RECOMPUTE that reads a reloaded activation starts after the RELOAD has
//     completed, and a recomputed forward's backwards after its RECOMPUTE,
//   - the compute action at an OFFLOAD's `until` — from which the plan counts its device bytes as
//     free, so later work may write there — starts after the copy has completed,
//   - and, on the slots the step gives its stashes (mesh/memory_slots.hpp), no op writes a
//     device or host slot before every op of its previous holder that reads or copies it, and
//     every reader finds its own microbatch's stash there,
//   - and, on the activation slots the step planned (mesh/activation_slots.hpp), the same: no
//     slot written before every op of its previous holder, every reader finding what the lowered
//     data flow (or its RELOAD) put there. The sends and recvs of an NCCL group share its clock.
// "After" is happens-before on the rank: program order on one stream, and an event's record before
// a wait on it (the latest record issued before the wait, as CUDA resolves it). It is computed with
// a vector clock over the rank's four streams; nothing is assumed about how long an op takes.
// Whether the step can complete at all is verify_mesh's question; these two together are the proof
// of a step with memory actions.
#pragma once

#include <array>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/stream_clocks.hpp"
#include "pipetype/mesh/verify.hpp"

namespace pipetype {

namespace detail {

constexpr verdict memory_order_error(int rank, int stage, int mb, const char* op, char k, int index, const char* why) {
  return refusal(errc::event_misuse, why)
      .on_rank(rank)
      .on_stage(stage)
      .on_microbatch(mb)
      .on_op(op)
      .on_kind(k)
      .on_index(index);
}

/// The slots of global rank g of `mp` (mesh/memory_slots.hpp), given happens-before `before`
/// on its ops: each slot is written (a forward, a RELOAD or a RECOMPUTE into a device slot, an
/// OFFLOAD into a host slot) only after every op of its previous holder that reads or copies it
/// (the halves of an overlapped pair may run at once), and each reader finds its own microbatch
/// there.
template <class Before>
constexpr verdict verify_memory_slots(program_view p, const mesh_program& mp, int g, const Before& before) {
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  const auto gi = static_cast<std::size_t>(g);
  const int device = gi < mp.stash_slots.size() ? mp.stash_slots[gi] : 0;
  const int hosted = gi < mp.host_slots.size() ? mp.host_slots[gi] : 0;
  const bool forward_only = is_forward_only(p);
  struct holder {
    int cell = -1;
    std::vector<int> ops;  // the holder's ops on the slot, its writer first
  };
  std::vector<holder> dev(static_cast<std::size_t>(device)), host(static_cast<std::size_t>(hosted));
  int first_half = -1, pair_first = -1;  // pair_first: when op i is a pair's second half, the first
  auto fail = [&](std::size_t i, const char* why) {
    const mesh_op& o = ops[i];
    return memory_order_error(g, o.stage, o.microbatch, o.code == mesh_op_code::compute ? "" : mesh_action_name(o),
                              o.code == mesh_op_code::compute ? kind_char(o.what) : '?', static_cast<int>(i), why);
  };
  // op i writes slot k of `pool` for cell c: every op of the holder before it in happens-before
  auto write = [&](std::vector<holder>& pool, int k, int c, std::size_t i) {
    holder& h = pool[static_cast<std::size_t>(k)];
    for (const int a : h.ops)
      if (a == pair_first || !before(a, static_cast<int>(i))) return false;
    h.cell = c, h.ops.assign(1, static_cast<int>(i));
    return true;
  };
  auto read = [](std::vector<holder>& pool, int k, int c, std::size_t i) {
    holder& h = pool[static_cast<std::size_t>(k)];
    if (h.cell != c) return false;
    h.ops.push_back(static_cast<int>(i));
    return true;
  };
  constexpr const char* overwritten = "a stash slot may be written while an op of its previous holder still uses it";
  constexpr const char* elsewhere = "an op reads a stash slot that holds another microbatch's stash";
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const mesh_op& o = ops[i];
    if (o.stash_slot >= device || o.host_slot >= hosted) return fail(i, "a slot past the rank's pool");
    const int c = o.stage * p.microbatches + o.microbatch;
    pair_first = -1;
    if (o.code == mesh_op_code::compute) {
      pair_first = first_half, first_half = o.overlapped ? static_cast<int>(i) : -1;
      if (o.what == kind::F) {
        if (o.scratch) continue;
        if (o.stash_slot < 0) return fail(i, "a forward saves its stash in no slot");
        if (!write(dev, o.stash_slot, c, i)) return fail(i, overwritten);
      } else if (!forward_only) {
        if (o.stash_slot < 0) return fail(i, "a backward reads its stash from no slot");
        if (!read(dev, o.stash_slot, c, i)) return fail(i, elsewhere);
      }
    } else if (o.code == mesh_op_code::offload) {
      if (o.kept_only) {  // a recomputed forward's: its stash is rebuilt, only its input may move
        if (o.host_slot >= 0 && !write(host, o.host_slot, c, i))
          return fail(i, "a host slot may be written while a RELOAD still reads it");
        continue;
      }
      if (o.stash_slot < 0) return fail(i, "an OFFLOAD copies from no stash slot");
      if (o.host_slot < 0) return fail(i, "an OFFLOAD copies into no host slot");
      if (!read(dev, o.stash_slot, c, i)) return fail(i, elsewhere);
      // the device copy is gone once the OFFLOAD has run (an executor may poison it): a reader
      // must find its stash where a RELOAD put it; later writers still wait for the copy
      dev[static_cast<std::size_t>(o.stash_slot)].cell = -1;
      if (!write(host, o.host_slot, c, i)) return fail(i, "a host slot may be written while a RELOAD still reads it");
    } else if (o.code == mesh_op_code::reload) {
      if (o.kept_only) {  // a recomputed forward's: only its input, if its OFFLOAD moved one
        if (o.host_slot >= 0 && !read(host, o.host_slot, c, i))
          return fail(i, "a RELOAD reads another microbatch's host slot");
        continue;
      }
      if (o.stash_slot < 0) return fail(i, "a RELOAD copies into no stash slot");
      if (o.host_slot < 0 || !read(host, o.host_slot, c, i))
        return fail(i, "a RELOAD reads another microbatch's host slot");
      if (!write(dev, o.stash_slot, c, i)) return fail(i, overwritten);
    } else if (o.code == mesh_op_code::recompute) {
      if (o.stash_slot < 0) return fail(i, "a RECOMPUTE writes its stash into no slot");
      if (!write(dev, o.stash_slot, c, i)) return fail(i, overwritten);
    }
  }
  return {};
}

/// The activation slots of global rank g of `mp` (mesh/activation_slots.hpp), given its clocks:
/// each slot is written only after every op of its previous holder (on the writer's stream
/// strictly before it: a send and a recv of one NCCL group run at once, as may the halves of an
/// overlapped pair), and each reader finds there what the lowered program's data flow gives it:
/// the latest value written to its lowered slot, or the one its RELOAD brought back. A slot an
/// OFFLOAD copied out of holds nothing until something writes it again.
constexpr verdict verify_activation_slots(program_view p, const mesh_program& mp, int g,
                                          const std::vector<stream_clock>& clock) {
  const std::span<const mesh_op> ops = mp.rank_ops(g);
  const auto gi = static_cast<std::size_t>(g);
  const int pool = gi < mp.activation_slots.size() ? mp.activation_slots[gi] : 0;
  const auto M = static_cast<std::size_t>(p.microbatches);
  struct holder {  // the slot's value, and its ops' latest clock on each stream and latest compute op
    int value = -1;
    stream_clock last{};
    int last_compute = -1;
  };
  struct taken {
    int lowered, value;
  };
  std::vector<holder> slot(static_cast<std::size_t>(pool));
  std::vector<int> value_of;  // per lowered slot: its value now (−1: none)
  std::vector<std::vector<taken>> away(static_cast<std::size_t>(p.stages) * M);  // per cell: its OFFLOAD's
  int values = 0, first_half = -1;
  auto fail = [&](std::size_t i, const char* why) {
    const mesh_op& o = ops[i];
    return memory_order_error(g, o.stage, o.microbatch, o.code == mesh_op_code::compute ? "" : mesh_action_name(o),
                              o.code == mesh_op_code::compute ? kind_char(o.what) : '?', static_cast<int>(i), why);
  };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const mesh_op& o = ops[i];
    const auto own = static_cast<std::size_t>(o.stream >= 0 && o.stream < mesh_stream_count ? o.stream : 0);
    int pair_first = -1;
    if (o.code == mesh_op_code::compute) pair_first = first_half, first_half = o.overlapped ? static_cast<int>(i) : -1;
    const bool cell_ok = o.stage >= 0 && o.stage < p.stages && o.microbatch >= 0 && o.microbatch < p.microbatches;
    const std::size_t c = cell_ok ? static_cast<std::size_t>(o.stage) * M + static_cast<std::size_t>(o.microbatch) : 0;
    if (o.act >= 0 &&
        (static_cast<std::size_t>(o.act) >= mp.act_map.size() ||
         static_cast<std::size_t>(o.act) + 1 + 3 * static_cast<std::size_t>(mp.act_count(o)) > mp.act_map.size()))
      return fail(i, "an op's activation references are past the step's map");
    for (int k = 0; k < mp.act_count(o); ++k) {
      const mesh_program::act_ref x = mp.act_at(o, k);
      if (x.slot < 0 || x.slot >= pool || x.lowered < 0) return fail(i, "an activation slot past the rank's pool");
      if (static_cast<std::size_t>(x.lowered) >= value_of.size())
        value_of.resize(static_cast<std::size_t>(x.lowered) + 1, -1);
      holder& h = slot[static_cast<std::size_t>(x.slot)];
      int& now = value_of[static_cast<std::size_t>(x.lowered)];
      auto use = [&] {  // op i uses the slot: the holder's latest op on its stream
        h.last[own] = std::max(h.last[own], clock[i][own]);
        if (o.code == mesh_op_code::compute) h.last_compute = static_cast<int>(i);
      };
      if (!x.writes) {
        if (now < 0 || h.value != now) return fail(i, "an op reads an activation slot that holds another activation");
        use();
        if (o.code == mesh_op_code::offload && cell_ok)  // on the host until its RELOAD
          away[c].push_back({x.lowered, now}), now = -1, h.value = -1;
        continue;
      }
      // every op of the previous holder happens before (on this stream strictly: not in this
      // op's NCCL group), and is not the first half of the pair this op is the second half of
      for (std::size_t st = 0; st < h.last.size(); ++st)
        if (st == own ? h.last[st] >= clock[i][st] : h.last[st] > clock[i][st])
          return fail(i, "an activation slot may be written while an op of its previous holder still uses it");
      if (pair_first >= 0 && h.last_compute == pair_first)
        return fail(i, "an activation slot may be written while an op of its previous holder still uses it");
      int v = values++;
      if (o.code == mesh_op_code::reload) {
        v = -1;
        if (cell_ok)
          for (std::size_t q = 0; q < away[c].size(); ++q)
            if (away[c][q].lowered == x.lowered) {
              v = away[c][q].value;
              away[c].erase(away[c].begin() + static_cast<std::ptrdiff_t>(q));
              break;
            }
        if (v < 0) return fail(i, "a RELOAD brings back an activation its OFFLOAD did not take");
      }
      h = holder{};
      h.value = now = v;
      use();
    }
  }
  return {};
}

}  // namespace detail

/// Ok when the step `mp` lowered from `p` with memory actions `mem` orders its copies and
/// recomputes as the top of this file says, for every timing; errc::event_misuse naming the global
/// rank, the op and what may overtake what otherwise (and when `mp` does not hold `mem`'s actions).
constexpr verdict verify_memory(program_view p, const memory_program& mem, const mesh_program& mp) {
  if (mem.ranks != p.ranks || mp.shape.pp != p.ranks)
    return detail::memory_order_error(-1, -1, -1, "", '?', -1,
                                      "the memory actions or the mesh step are of another program");
  const auto M = static_cast<std::size_t>(p.microbatches);
  const auto cell = [&](int s, int j) { return static_cast<std::size_t>(s) * M + static_cast<std::size_t>(j); };
  for (int g = 0; g < mp.shape.size(); ++g) {
    const int r = mp.shape.pipeline_rank(g);
    const std::span<const mesh_op> ops = mp.rank_ops(g);
    const std::span<const action> acts = p.rank_actions(r);
    const std::span<const memory_action> mine = mem.rank_ops(r);
    const std::vector<detail::stream_clock> clock = detail::rank_clocks(mp, g);
    // the mesh op of each action (its compute op) and of each memory action (in issue order)
    std::vector<int> op_of_action, op_of_memory;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const mesh_op_code c = ops[static_cast<std::size_t>(i)].code;
      if (c == mesh_op_code::compute) op_of_action.push_back(i);
      if (is_copy(c) || c == mesh_op_code::recompute) op_of_memory.push_back(i);
    }
    if (op_of_action.size() != acts.size() || op_of_memory.size() != mine.size())
      return detail::memory_order_error(g, -1, -1, "", '?', -1,
                                        "the mesh step does not hold the rank's actions and memory actions");
    const auto before = [&](int a, int b) { return detail::happens_before(ops, clock, a, b); };
    // walk the rank's actions and memory actions in program order, as check_memory_actions does
    std::vector<int> forward(static_cast<std::size_t>(p.stages) * M, -1), copy(forward.size(), -1);
    std::vector<int> recomputed(forward.size(), -1);
    std::vector<char> recomputes(forward.size(), 0);
    for (const memory_action& a : mine)
      if (a.what == memory_kind::recompute) recomputes[cell(a.stage, a.microbatch)] = 1;
    std::vector<std::vector<int>> until(acts.size() + 1);  // per action: the OFFLOAD ops that complete before it
    std::size_t next = 0;
    auto fail = [&](int at, const char* why) {
      const mesh_op& o = ops[static_cast<std::size_t>(at)];
      return detail::memory_order_error(g, o.stage, o.microbatch,
                                        o.code == mesh_op_code::compute ? "" : detail::mesh_action_name(o),
                                        o.code == mesh_op_code::compute ? kind_char(o.what) : '?', at, why);
    };
    auto issue = [&](int after) -> verdict {
      for (; next < mine.size() && mine[next].after == after; ++next) {
        const memory_action& a = mine[next];
        const int at = op_of_memory[next];
        const std::size_t q = cell(a.stage, a.microbatch);
        if (a.what == memory_kind::offload) {
          if (forward[q] < 0 || !before(forward[q], at))
            return fail(at, "an OFFLOAD may start before the forward that writes what it copies");
          copy[q] = at;
          if (a.until >= 0 && a.until <= static_cast<int>(acts.size()))
            until[static_cast<std::size_t>(a.until)].push_back(at);
        } else if (a.what == memory_kind::reload) {
          if (copy[q] < 0 || !before(copy[q], at)) return fail(at, "a RELOAD may start before its OFFLOAD completes");
          copy[q] = at;
        } else {
          if (copy[q] >= 0 && !before(copy[q], at))
            return fail(at, "a RECOMPUTE may start before the RELOAD of its input");
          recomputed[q] = at;
        }
      }
      return {};
    };
    if (verdict v = issue(-1); !v.ok()) return v;
    for (int i = 0; i < static_cast<int>(acts.size()); ++i) {
      const int at = op_of_action[static_cast<std::size_t>(i)];
      for (const int o : until[static_cast<std::size_t>(i)])
        if (!before(o, at))
          return fail(at, "an action may write where an OFFLOAD still reads: it starts before the copy completes");
      const action& x = acts[static_cast<std::size_t>(i)];
      if (x.stage >= 0 && x.stage < p.stages && x.microbatch >= 0 && x.microbatch < p.microbatches) {
        const std::size_t q = cell(x.stage, x.microbatch);
        if (x.what == kind::F) {
          forward[q] = at, copy[q] = -1;
        } else {
          if (copy[q] >= 0 && !before(copy[q], at))
            return fail(at, "a backward may read its activation before the RELOAD completes");
          if (recomputes[q] && (recomputed[q] < 0 || !before(recomputed[q], at)))
            return fail(at, "a backward may run before the RECOMPUTE of its forward");
        }
      }
      if (x.overlapped) continue;
      if (verdict v = issue(i); !v.ok()) return v;
    }
    if (mem.empty()) continue;  // no memory actions: the stashes are the lowering's (compile/saved_slots.hpp)
    if (mp.stash_slots.size() != static_cast<std::size_t>(mp.shape.size()) ||
        mp.host_slots.size() != mp.stash_slots.size())
      return detail::memory_order_error(g, -1, -1, "", '?', -1, "the mesh step has no slots for its memory actions");
    if (verdict v = detail::verify_memory_slots(p, mp, g, before); !v.ok()) return v;
    if (mp.activation_slots.size() != mp.stash_slots.size())
      return detail::memory_order_error(g, -1, -1, "", '?', -1, "the mesh step has no activation slots");
    if (verdict v = detail::verify_activation_slots(p, mp, g, clock); !v.ok()) return v;
  }
  return {};
}

}  // namespace pipetype
