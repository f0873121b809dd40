// pipetype/mesh/memory_actions.hpp — offload, reload and recompute as actions of a step.
//
// Activation memory, not compute, limits pipeline depth: 1F1B's first rank holds p microbatches'
// activations, interleaved schedules more. Three actions trade that memory for copies or compute:
//
//   OFFLOAD(s, j)    copy the activation F(s, j) saved for its backward (its input and stash) to a
//                    host pool, on the rank's copy stream, once F has run; its device bytes are
//                    free once the copy has completed, which the plan fixes at a compute action
//                    (`until`: that action waits for the copy; by default the second action after
//                    the OFFLOAD's, so one action overlaps the copy)
//   RELOAD(s, j)     copy it back into device memory taken when it is issued; the first backward
//                    of (s, j) waits for it (the host bytes are free from then on)
//   RECOMPUTE(s, j)  run F(s, j) again on the compute stream from the input it kept, before its
//                    first backward: the forward of a recomputed microbatch keeps only its input
//                    (memory_sizes::kept) and this one rebuilds the rest. It needs no other rank,
//                    so it may run in a bubble
//
// Text: `0OFFLOAD3`, `0RELOAD3`, `0RECOMPUTE3` (stage, name, microbatch, as PyTorch writes
// `0UNSHARD`) in a rank's list, after the compute action they follow (io/notation.hpp).
//
// Like the collectives (mesh/collectives.hpp), memory actions live beside the compute program:
// per rank in issue order, each after one of the rank's compute actions (`after`, −1: before the
// first). place_memory (mesh/place_memory.hpp) is the pass that writes them; a user may write
// them instead, and check_memory_actions says whether the step then reads only what is there.
// memory_of counts, per rank, the bytes of saved activations resident on the device at once (the
// pool a static plan allocates), the same without the actions, and the host pool's peak — in
// program order, so they are constants of the plan, not of a timing: an OFFLOAD's bytes count
// until its `until`, a RELOAD's from its issue, a RECOMPUTE's from its issue, and a backward
// releases what its kind releases in the memory model (core/memory.hpp: I half, W the rest).
//
// Source of the rules and figures: PipeOffload (Wan, Qi et al., ICML 2025, arXiv 2503.01328):
// offload is nearly free in a pipeline because a microbatch's F→B gap on early ranks is long;
// their pass inserts offload/reload actions into per-rank lists and counts peak memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "pipetype/core/memory.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/core/verdict.hpp"
#include "pipetype/detail/stable_sort.hpp"

namespace pipetype {

enum class memory_kind : std::uint8_t { offload, reload, recompute };

/// The action's name in the text notation: OFFLOAD, RELOAD, RECOMPUTE.
constexpr const char* memory_action_name(memory_kind k) noexcept {
  switch (k) {
    case memory_kind::offload:
      return "OFFLOAD";
    case memory_kind::reload:
      return "RELOAD";
    case memory_kind::recompute:
      return "RECOMPUTE";
  }
  return "?";
}

struct memory_action {
  memory_kind what = memory_kind::offload;
  int stage = -1;
  int microbatch = -1;
  int after = -1;  // issued after the rank's compute action at this index; −1: before the first
  int until = -1;  // OFFLOAD: the compute action before which its copy has completed (the rank's action
                   // count: the step's end); its device bytes are free from there. −1: default_until

  friend constexpr bool operator==(const memory_action&, const memory_action&) = default;
};

constexpr memory_action offload(int stage, int mb, int after, int until = -1) noexcept {
  return {memory_kind::offload, stage, mb, after, until};
}
constexpr memory_action reload(int stage, int mb, int after) noexcept {
  return {memory_kind::reload, stage, mb, after, -1};
}
constexpr memory_action recompute(int stage, int mb, int after) noexcept {
  return {memory_kind::recompute, stage, mb, after, -1};
}

/// Where an OFFLOAD issued after action `after` of a rank with `n` actions completes by default:
/// before the second action after it (one action overlaps the copy), or at the step's end.
constexpr int default_until(int after, int n) noexcept { return after + 2 < n ? after + 2 : n; }

/// Each rank's memory actions in issue order (CSR over the pipeline's ranks, as program is).
struct memory_program {
  int ranks = 0;
  std::vector<int> begin;  // [ranks + 1]
  std::vector<memory_action> ops;

  constexpr std::span<const memory_action> rank_ops(int r) const {
    const auto b = static_cast<std::size_t>(begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(begin[static_cast<std::size_t>(r) + 1]);
    return std::span<const memory_action>(ops).subspan(b, e - b);
  }
  constexpr bool empty() const noexcept { return ops.empty(); }
  friend constexpr bool operator==(const memory_program&, const memory_program&) = default;
};

namespace detail {
constexpr bool issued_before(const memory_action& a, const memory_action& b) noexcept { return a.after < b.after; }
}  // namespace detail

/// A memory program for `p` from each rank's actions (per_rank[r], in any order): each rank's in
/// issue order (by `after`, stable), an OFFLOAD's default `until` filled in.
constexpr memory_program memory_program_of(program_view p, std::vector<std::vector<memory_action>> per_rank) {
  memory_program out;
  out.ranks = p.ranks;
  out.begin.assign(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0) + 1, 0);
  per_rank.resize(out.begin.size() - 1);
  for (int r = 0; r < p.ranks; ++r) {
    std::vector<memory_action>& q = per_rank[static_cast<std::size_t>(r)];
    detail::stable_sort(q, detail::issued_before);
    const int n = static_cast<int>(p.rank_actions(r).size());
    for (memory_action& a : q) {
      if (a.what == memory_kind::offload && a.until < 0) a.until = default_until(a.after, n);
      out.ops.push_back(a);
    }
    out.begin[static_cast<std::size_t>(r) + 1] = static_cast<int>(out.ops.size());
  }
  return out;
}
/// No memory actions.
constexpr memory_program no_memory_actions(program_view p) { return memory_program_of(p, {}); }

/// The bytes a microbatch's forward keeps for its backward, per plan stage.
struct memory_sizes {
  std::vector<std::int64_t> saved{};  // per plan stage, or one value for every stage: input and stash
  std::vector<std::int64_t> kept{};   // the same for a forward that will be recomputed (its input); empty: 0

  static constexpr std::int64_t of(const std::vector<std::int64_t>& v, int s) noexcept {
    if (v.empty() || s < 0) return 0;
    return v.size() == 1 ? v.front() : static_cast<std::size_t>(s) < v.size() ? v[static_cast<std::size_t>(s)] : 0;
  }
  constexpr std::int64_t saved_of(int s) const noexcept { return of(saved, s); }
  constexpr std::int64_t kept_of(int s) const noexcept { return std::min(of(kept, s), saved_of(s)); }
};

/// One rank's memory in a step, in program order (the top of this file).
struct rank_memory {
  std::int64_t peak_bytes = 0;       // saved activations on the device at once, with the actions
  std::int64_t base_peak_bytes = 0;  // the same program without them
  std::int64_t host_peak_bytes = 0;  // the host pool
  double peak_activations = 0;       // the device peak in microbatch activations (each pair's bytes over its saved)
  double base_peak_activations = 0;
  int offloaded = 0;   // OFFLOADs
  int recomputed = 0;  // RECOMPUTEs

  friend constexpr bool operator==(const rank_memory&, const rank_memory&) = default;
};

namespace detail {

constexpr verdict memory_error(int rank, const memory_action& a, int index, const char* why) {
  return refusal(errc::memory_action_misplaced, why)
      .on_rank(rank)
      .on_stage(a.stage)
      .on_microbatch(a.microbatch)
      .on_op(memory_action_name(a.what))
      .on_index(index);
}

/// One (stage, microbatch)'s saved activation on its rank, as a rank's list and its memory
/// actions run in program order.
struct pair_state {
  int units = 0;                // memory-model units still held (F adds, backwards release)
  bool forward = false;         // its F has run
  bool full = true;             // the stash is there (false: a recomputed pair between its F and RECOMPUTE)
  bool will_recompute = false;  // a RECOMPUTE of it is on the rank
  bool recomputed = false;
  bool on_host = false;     // OFFLOADed and not RELOADed
  bool reloading = false;   // RELOADed, its host bytes held until the first read
  std::int64_t device = 0;  // bytes it holds on the device
  std::int64_t host = 0;    // bytes it holds in the host pool
};

/// Walks rank r's actions and memory actions in program order (the top of this file), checking
/// each; calls `tally(device_bytes, host_bytes, device_activations)` after every change. Returns
/// the first misplaced action (or a malformed one), else ok.
template <class Tally>
constexpr verdict walk_memory(program_view p, int r, std::span<const memory_action> mem, const memory_sizes& z,
                              const memory_model& model, Tally&& tally) {
  const std::span<const action> acts = p.rank_actions(r);
  const int n = static_cast<int>(acts.size()), S = p.stages, m = p.microbatches;
  // state per (stage, microbatch) of this rank's stages only: a table over every stage made each
  // rank's walk cost the whole program's cells (every memory action is checked to be the rank's
  // before its state is read)
  std::vector<int> local(static_cast<std::size_t>(S > 0 ? S : 0), -1);
  int L = 0;
  for (const action& a : acts)
    if (a.stage >= 0 && a.stage < S && local[static_cast<std::size_t>(a.stage)] < 0)
      local[static_cast<std::size_t>(a.stage)] = L++;
  const auto at = [&](int s, int j) {
    return static_cast<std::size_t>(local[static_cast<std::size_t>(s)]) * static_cast<std::size_t>(m) +
           static_cast<std::size_t>(j);
  };
  std::vector<pair_state> st(static_cast<std::size_t>(L) * static_cast<std::size_t>(m > 0 ? m : 0));
  const bool forward_only = is_forward_only(p);
  std::int64_t device = 0, host = 0;
  double acts_resident = 0;
  const auto bytes_of = [&](int s, const pair_state& x) -> std::int64_t {
    if (x.units <= 0) return 0;
    if (!x.full) return z.kept_of(s);
    return z.saved_of(s) * x.units / (model.unit > 0 ? model.unit : 1);
  };
  // with edges a stage holds an activation per input it reads, as the verifier counts its peak
  // (verify.hpp: inputs_held), so the walk's activations without actions are the plan's peaks
  std::vector<int> held(static_cast<std::size_t>(L), 1);
  if (p.has_edges()) {
    std::vector<int> in(static_cast<std::size_t>(L), 0);
    for (const stage_edge& e : p.edges)
      if (e.to >= 0 && e.to < S && local[static_cast<std::size_t>(e.to)] >= 0)
        ++in[static_cast<std::size_t>(local[static_cast<std::size_t>(e.to)])];
    for (int l = 0; l < L; ++l) held[static_cast<std::size_t>(l)] = std::max(1, in[static_cast<std::size_t>(l)]);
  }
  const auto fraction = [&](int s, std::int64_t b) {
    const std::int64_t full = z.saved_of(s);
    return full > 0 ? static_cast<double>(b) / static_cast<double>(full) *
                          held[static_cast<std::size_t>(local[static_cast<std::size_t>(s)])]
                    : 0.0;
  };
  const auto set_device = [&](int s, pair_state& x, std::int64_t b) {
    device += b - x.device;
    acts_resident += fraction(s, b) - fraction(s, x.device);
    x.device = b;
  };
  // malformed ops, the issue order, and who will be recomputed
  for (int k = 0; k < static_cast<int>(mem.size()); ++k) {
    const memory_action& a = mem[static_cast<std::size_t>(k)];
    if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= m ||
        p.stage_rank[static_cast<std::size_t>(a.stage)] != r || local[static_cast<std::size_t>(a.stage)] < 0)
      return memory_error(r, a, k, "it names a stage or microbatch this rank does not run");
    if (a.after < -1 || a.after >= n || (k > 0 && a.after < mem[static_cast<std::size_t>(k) - 1].after))
      return memory_error(r, a, k, "the rank's memory actions are not in the order of its actions");
    if (a.after >= 0 && acts[static_cast<std::size_t>(a.after)].overlapped)
      return memory_error(r, a, k, "it comes between the two halves of an overlapped pair");
    if (a.what == memory_kind::offload &&
        (a.until <= a.after || a.until > n ||
         (a.until > 0 && a.until < n && acts[static_cast<std::size_t>(a.until) - 1].overlapped)))
      return memory_error(r, a, k,
                          "an OFFLOAD must complete after its issue, before an action of the rank that is "
                          "not the second half of an overlapped pair, or at the step's end");
    if (a.what == memory_kind::recompute) {
      pair_state& x = st[at(a.stage, a.microbatch)];
      if (x.will_recompute) return memory_error(r, a, k, "a second RECOMPUTE of one forward");
      x.will_recompute = true;
    }
  }
  // OFFLOADs whose bytes are not free yet, and how many of their bytes no RELOAD has borrowed: a
  // RELOAD runs on the copy stream after every OFFLOAD issued before it, so it may write where
  // they copied from before their `until` (the compute stream may not)
  struct pending_offload {
    int op = -1;
    std::int64_t left = 0;
  };
  std::vector<pending_offload> pending;
  std::size_t next = 0;
  auto issue = [&](int after) -> verdict {  // the memory actions issued after action `after`
    for (; next < mem.size() && mem[next].after == after; ++next) {
      const memory_action& a = mem[next];
      const int k = static_cast<int>(next);
      pair_state& x = st[at(a.stage, a.microbatch)];
      switch (a.what) {
        case memory_kind::offload:
          if (!x.forward) return memory_error(r, a, k, "an OFFLOAD before its forward");
          if (x.on_host) return memory_error(r, a, k, "an OFFLOAD of an activation already offloaded");
          if (x.units <= 0) return memory_error(r, a, k, "an OFFLOAD after its last backward: nothing is left to move");
          x.on_host = true;
          x.host = x.device;
          host += x.host;
          pending.push_back({k, x.device});
          break;
        case memory_kind::reload:
          if (!x.on_host) return memory_error(r, a, k, "a RELOAD before its OFFLOAD");
          for (const pending_offload& q : pending)
            if (mem[static_cast<std::size_t>(q.op)].stage == a.stage &&
                mem[static_cast<std::size_t>(q.op)].microbatch == a.microbatch)
              return memory_error(r, a, k, "a RELOAD issued before its OFFLOAD completes (its `until`)");
          x.on_host = false;
          x.reloading = true;
          set_device(a.stage, x, x.host);
          for (std::int64_t need = x.host; need > 0 && !pending.empty();) {  // borrowed bytes are counted already
            auto q = std::find_if(pending.begin(), pending.end(), [](const pending_offload& y) { return y.left > 0; });
            if (q == pending.end()) break;
            const std::int64_t take = std::min(need, q->left);
            q->left -= take, need -= take, device -= take;
            acts_resident -= fraction(mem[static_cast<std::size_t>(q->op)].stage, take);
          }
          break;
        case memory_kind::recompute:
          if (!x.forward) return memory_error(r, a, k, "a RECOMPUTE before its forward");
          if (x.units <= 0 || x.full) return memory_error(r, a, k, "a RECOMPUTE after its backward");
          if (x.on_host)
            return memory_error(r, a, k, "a RECOMPUTE of a forward whose input is offloaded (RELOAD it first)");
          if (x.reloading) host -= x.host, x.host = 0, x.reloading = false;
          x.full = true;
          x.recomputed = true;
          set_device(a.stage, x, bytes_of(a.stage, x));
          break;
      }
      tally(device, host, acts_resident);
    }
    return {};
  };
  if (verdict v = issue(-1); !v.ok()) return v;
  for (int i = 0; i < n; ++i) {
    // the OFFLOADs that complete before action i: their device bytes are free
    for (std::size_t q = 0; q < pending.size();) {
      const memory_action& a = mem[static_cast<std::size_t>(pending[q].op)];
      if (a.until != i) {
        ++q;
        continue;
      }
      device -= pending[q].left;  // (what reloads borrowed is theirs now)
      acts_resident -= fraction(a.stage, pending[q].left);
      st[at(a.stage, a.microbatch)].device = 0;
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(q));
    }
    tally(device, host, acts_resident);
    const action& x = acts[static_cast<std::size_t>(i)];
    if (x.stage >= 0 && x.stage < S && x.microbatch >= 0 && x.microbatch < m) {
      pair_state& y = st[at(x.stage, x.microbatch)];
      if (x.what == kind::F) {
        y.forward = true;
        y.units = model.f;
        y.full = !y.will_recompute;
        set_device(x.stage, y, bytes_of(x.stage, y));
      } else {
        const memory_action probe{memory_kind::reload, x.stage, x.microbatch, i, -1};
        if (y.on_host) {
          verdict v = memory_error(r, probe, i, "a backward reads an activation that is offloaded and not reloaded");
          v.op = "";
          v.kind = kind_char(x.what);
          return v;
        }
        if (!y.full) {
          verdict v = memory_error(r, probe, i, "a backward of a recomputed forward runs before its RECOMPUTE");
          v.op = "";
          v.kind = kind_char(x.what);
          return v;
        }
        if (y.reloading) host -= y.host, y.host = 0, y.reloading = false;
        y.units = std::max(0, y.units + model.delta(x.what));
        set_device(x.stage, y, bytes_of(x.stage, y));
      }
      tally(device, host, acts_resident);
      if (x.what == kind::F && forward_only) {  // nothing reads it again
        y.units = 0;
        set_device(x.stage, y, 0);
      }
    }
    if (x.overlapped) continue;  // its memory actions come after the pair's second half
    if (verdict v = issue(i); !v.ok()) return v;
  }
  if (next < mem.size())
    return memory_error(r, mem[next], static_cast<int>(next),
                        "the rank's memory actions are not in the order of its actions");
  return {};
}

}  // namespace detail

/// Ok when every memory action of `mp` is placed so that the step reads only what is there (the
/// top of this file), or the first that is not, as errc::memory_action_misplaced naming the rank,
/// the action and why: an OFFLOAD before its forward or after its last backward, a RELOAD before
/// its OFFLOAD (or before it completes), a backward of an offloaded activation with no RELOAD, a
/// RECOMPUTE of a forward whose input is offloaded, after its backward, or missing before it.
constexpr verdict check_memory_actions(program_view p, const memory_program& mp) {
  if (mp.ranks != p.ranks || mp.begin.size() != static_cast<std::size_t>(p.ranks) + 1) {
    return refusal(errc::memory_action_misplaced, "the memory actions are for a program with another number of ranks");
  }
  const memory_sizes none{};
  for (int r = 0; r < p.ranks; ++r)
    if (verdict v = detail::walk_memory(p, r, mp.rank_ops(r), none, {}, [](std::int64_t, std::int64_t, double) {});
        !v.ok())
      return v;
  return {};
}

/// Ok, or errc::too_large naming the first stage whose saved or kept bytes in `z` are negative or
/// above pipetype::limits::saved_bytes (past it a rank's sums could wrap around 2^63).
constexpr verdict check_memory_sizes(const memory_sizes& z) {
  for (const std::vector<std::int64_t>* v : {&z.saved, &z.kept})
    for (std::size_t s = 0; s < v->size(); ++s)
      if ((*v)[s] < 0 || (*v)[s] > limits::saved_bytes) {
        return refusal(errc::too_large,
                       v == &z.saved ? "a microbatch's saved bytes must be in [0, 2^40] (pipetype::limits::saved_bytes)"
                                     : "a microbatch's kept bytes must be in [0, 2^40] (pipetype::limits::saved_bytes)")
            .on_stage(v->size() == 1 ? -1 : static_cast<int>(s));
      }
  return {};
}

/// Ok, or errc::memory_limit_exceeded naming the first rank where `limit` (bytes of saved
/// activations; 0: none) is below one microbatch's saved activation of a stage it holds: no action
/// can bring a rank under that, since a backward needs its whole activation.
constexpr verdict check_memory_limit(program_view p, const memory_sizes& z, std::int64_t limit) {
  if (limit <= 0) return {};
  for (int s = 0; s < p.stages; ++s) {
    const int r = p.stage_rank[static_cast<std::size_t>(s)];
    if (r < 0 || z.saved_of(s) <= limit) continue;
    return refusal(errc::memory_limit_exceeded, "the limit is below one microbatch's saved activation of this stage")
        .on_rank(r)
        .on_stage(s);
  }
  return {};
}

/// Per rank, the device and host peaks of `p` with the memory actions `mp` and without them, for
/// the saved bytes `z` (the top of this file). `mp` should pass check_memory_actions: counting
/// stops at the first misplaced action.
constexpr std::vector<rank_memory> memory_of(program_view p, const memory_program& mp, const memory_sizes& z,
                                             const memory_model& model = {}) {
  std::vector<rank_memory> out(static_cast<std::size_t>(p.ranks > 0 ? p.ranks : 0));
  const bool same_ranks = mp.ranks == p.ranks && mp.begin.size() == out.size() + 1;
  for (int r = 0; r < p.ranks; ++r) {
    rank_memory& x = out[static_cast<std::size_t>(r)];
    const std::span<const memory_action> mine = same_ranks ? mp.rank_ops(r) : std::span<const memory_action>{};
    (void)detail::walk_memory(p, r, mine, z, model, [&](std::int64_t d, std::int64_t h, double a) {
      x.peak_bytes = std::max(x.peak_bytes, d);
      x.host_peak_bytes = std::max(x.host_peak_bytes, h);
      x.peak_activations = std::max(x.peak_activations, a);
    });
    (void)detail::walk_memory(p, r, {}, z, model, [&](std::int64_t d, std::int64_t, double a) {
      x.base_peak_bytes = std::max(x.base_peak_bytes, d);
      x.base_peak_activations = std::max(x.base_peak_activations, a);
    });
    for (const memory_action& a : mine) {
      x.offloaded += a.what == memory_kind::offload;
      x.recomputed += a.what == memory_kind::recompute;
    }
  }
  return out;
}

}  // namespace pipetype
