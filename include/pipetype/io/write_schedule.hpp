// pipetype/io/write_schedule.hpp — the schedule notation written (io/notation.hpp reads it).
//
// Writing: `to_text(program)` is pipetype's form (a `lanes N` line when there are several lanes,
// an `edges` line when the graph is given as edges); `to_csv(program)` PyTorch's compute-only CSV
// and `to_csv(program, lowered)` its compute+comms CSV — pipetype's own transfers as PyTorch
// issues them (below). Both refuse a program with several lanes or with edges
// (std::invalid_argument): PyTorch's runtime has one model copy per stage, in a chain.
// read_schedule(to_csv(...)) gives back the same steps.
//
// torch_load_note(file, program, format) says where torch 2.15's `_load_csv` would read a file
// otherwise than pipetype does, or refuse it (docs/07_pytorch.md); `to_text(program, memory)`
// writes a step's memory actions after the compute actions they follow.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetype/compile/lowered.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/step.hpp"
#include "pipetype/io/notation.hpp"
#include "pipetype/mesh/collectives.hpp"
#include "pipetype/mesh/memory_actions.hpp"

namespace pipetype {

inline std::string to_text(const action& a) {
  return std::to_string(a.stage) + kind_char(a.what) + std::to_string(a.microbatch);
}

/// One cell (the first half of a pair prints alone; rows print pairs whole).
inline std::string to_text(const step& s) {
  if (s.op == step_kind::compute) return to_text(s.compute());
  std::string out = std::to_string(s.stage) + step_kind_name(s.op);
  return s.microbatch >= 0 ? out + std::to_string(s.microbatch) : out;
}

/// Rows of cells, comma-separated; a pair as (a;b)OVERLAP_F_B. A rank with no steps is one idle
/// cell pair (`,`), not a blank line: the reader skips blank lines, so that rank would vanish and
/// every later rank move up one (torch's loader reads `,` as a rank of idle cells too).
inline std::string to_csv(step_view f) {
  std::string out;
  for (int r = 0; r < f.ranks; ++r) {
    const auto row = f.rank_steps(r);
    if (row.empty()) out += ',';
    for (std::size_t k = 0; k < row.size(); ++k) {
      if (k) out += ',';
      if (row[k].overlapped && k + 1 < row.size()) {
        out += '(' + to_text(row[k]) + ';' + to_text(row[k + 1]) + ")OVERLAP_F_B";
        ++k;
      } else {
        out += to_text(row[k]);
      }
    }
    out += '\n';
  }
  return out;
}

/// The compute program as a file of compute steps.
inline schedule_file file_of(program_view p) {
  schedule_file f;
  f.rows = p.ranks;
  f.lanes = p.lanes > 1 ? p.lanes : 0;
  f.edges.assign(p.edges.begin(), p.edges.end());
  for (int r = 0; r < p.ranks; ++r) {
    int cell = 0;
    for (const action& a : p.rank_actions(r)) {
      f.steps.push_back(compute_step(a, cell));
      cell += a.overlapped ? 0 : 1;  // a pair is one cell
    }
    f.begin.push_back(static_cast<int>(f.steps.size()));
  }
  return f;
}

/// pipetype's lowered program as PyTorch's compute+comms file (with `coll`, a mesh step's: its
/// UNSHARD, RESHARD and REDUCE_GRAD where they were placed, instead of a REDUCE_GRAD after each
/// stage's last weight gradient). PyTorch issues each SEND/RECV as
/// its own NCCL operation on one process group, so one lock-step tick's transfers (one NCCL group,
/// or one per peer, on a communicator per edge in pipetype) are written in an order both ends of
/// every rank pair agree on and that completes one transfer at a time: by rank pair (lower pair
/// first), within a pair the transfers from the lower rank first, then activations before
/// gradients, by producing stage and microbatch. (Every transfer of a tick carries data computed
/// before the tick, so any order both ends share completes; the ticks keep their order.) A
/// WAIT_SEND_F follows the rank's backward of that stage and microbatch, WAIT_SEND_Bs end the row
/// (PyTorch's own placement), and REDUCE_GRAD, WAIT_REDUCE_GRAD follow a stage's last weight
/// gradient, so PyTorch scales and reduces gradients as for its own schedules. Every file this
/// writes passes verify_transfers (tests/io/notation.test.cpp).
inline schedule_file file_of(program_view p, lowered_view L, const collective_program* coll = nullptr) {
  schedule_file f;
  f.rows = p.ranks;
  f.lanes = p.lanes > 1 ? p.lanes : 0;
  const int M = p.microbatches;
  std::vector<int> grads_left(static_cast<std::size_t>(p.stages), 0);  // B or W still to come
  for (const action& a : p.actions)
    if (a.what == kind::B || a.what == kind::W) ++grads_left[static_cast<std::size_t>(a.stage)];
  for (int r = 0; r < p.ranks; ++r) {
    struct pending {  // a transfer of this tick and its place in the order both ends agree on
      int lo, hi, dir, grad, producer;
      step s;
    };
    std::vector<pending> tick_transfers;
    std::vector<step> send_b;                                              // WAIT_SEND_B at the end, in send order
    std::vector<step> sent_f;                                              // every SEND_F, in send order
    std::vector<char> waits_f(static_cast<std::size_t>(p.stages * M), 0);  // a SEND_F awaiting its wait
    // with `coll`: its collectives of this rank, each written once the compute it follows is
    int done = -1;  // the rank's compute actions written so far, less one
    std::size_t next_coll = 0;
    auto write_collectives = [&] {
      if (!coll) return;
      const std::span<const collective> mine = coll->rank_ops(r);
      for (; next_coll < mine.size() && mine[next_coll].after <= done; ++next_coll) {
        const collective& x = mine[next_coll];
        if (x.what == collective_kind::reduce_tied || x.what == collective_kind::grad_norm ||
            x.what == collective_kind::finite_check || x.what == collective_kind::optimizer_step ||
            x.what == collective_kind::param_sync)
          continue;  // no PyTorch name
        const step_kind k = x.what == collective_kind::unshard   ? step_kind::unshard
                            : x.what == collective_kind::reshard ? step_kind::reshard
                                                                 : step_kind::reduce_grad;
        f.steps.push_back({k, kind::F, x.stage, -1, false});
        if (k == step_kind::reduce_grad) f.steps.push_back({step_kind::wait_reduce_grad, kind::F, x.stage, -1, false});
      }
    };
    write_collectives();  // those before the first compute
    auto flush = [&] {
      std::sort(tick_transfers.begin(), tick_transfers.end(), [](const pending& a, const pending& b) {
        if (a.lo != b.lo || a.hi != b.hi) return a.lo != b.lo ? a.lo < b.lo : a.hi < b.hi;
        if (a.dir != b.dir) return a.dir < b.dir;
        if (a.grad != b.grad) return a.grad < b.grad;
        return a.producer != b.producer ? a.producer < b.producer : a.s.microbatch < b.s.microbatch;
      });
      for (const pending& t : tick_transfers) f.steps.push_back(t.s);
      tick_transfers.clear();
    };
    auto after_compute = [&](const action& a) {  // the steps that follow a compute (after a pair: both halves)
      if (is_input_backward(a.what) && waits_f[static_cast<std::size_t>(a.stage * M + a.microbatch)]) {
        waits_f[static_cast<std::size_t>(a.stage * M + a.microbatch)] = 0;
        f.steps.push_back({step_kind::wait_send_f, kind::F, a.stage, a.microbatch, false});
      }
      if (!coll && (a.what == kind::B || a.what == kind::W) && --grads_left[static_cast<std::size_t>(a.stage)] == 0) {
        f.steps.push_back({step_kind::reduce_grad, kind::F, a.stage, -1, false});
        f.steps.push_back({step_kind::wait_reduce_grad, kind::F, a.stage, -1, false});
      }
    };
    int tick = -1;
    action first_half{};
    bool in_pair = false;
    for (const lowered_op& o : L.rank_ops(r)) {
      if (o.code == op_code::group) {
        if (o.tick != tick) flush();
        tick = o.tick;
        continue;
      }
      if (o.code == op_code::send || o.code == op_code::recv) {
        const bool send = o.code == op_code::send, act = o.what == kind::F;
        step s;
        s.op = act ? (send ? step_kind::send_f : step_kind::recv_f) : (send ? step_kind::send_b : step_kind::recv_b);
        s.stage = send ? o.stage : act ? o.stage + 1 : o.stage - 1;  // PyTorch names a receive by its consumer
        s.microbatch = o.microbatch;
        if (send && act) waits_f[static_cast<std::size_t>(o.stage * M + o.microbatch)] = 1, sent_f.push_back(s);
        if (send && !act) send_b.push_back({step_kind::wait_send_b, kind::F, o.stage, o.microbatch, false});
        const int lo = r < o.peer ? r : o.peer, hi = r < o.peer ? o.peer : r;
        const bool upward = send ? r < o.peer : o.peer < r;  // travels from the lower rank to the higher
        tick_transfers.push_back({lo, hi, upward ? 0 : 1, act ? 0 : 1, o.stage, s});
        continue;
      }
      flush();
      tick = -1;
      const action a{o.what, o.stage, o.microbatch, o.overlapped};
      f.steps.push_back(compute_step(a));
      ++done;
      if (a.overlapped) {
        first_half = a;
        in_pair = true;
        continue;
      }
      if (in_pair) after_compute(first_half);
      in_pair = false;
      after_compute(a);
      write_collectives();
    }
    flush();
    // a SEND_F no backward of this rank follows (a forward-only plan): its wait ends the row
    for (const step& s : sent_f)
      if (waits_f[static_cast<std::size_t>(s.stage * M + s.microbatch)])
        f.steps.push_back({step_kind::wait_send_f, kind::F, s.stage, s.microbatch, false});
    f.steps.insert(f.steps.end(), send_b.begin(), send_b.end());
    int cell = 0;  // the cells as the row prints (a pair is one)
    for (std::size_t k = static_cast<std::size_t>(f.begin.back()); k < f.steps.size(); ++k) {
      f.steps[k].cell = cell;
      cell += f.steps[k].overlapped ? 0 : 1;
    }
    f.begin.push_back(static_cast<int>(f.steps.size()));
  }
  f.count();
  return f;
}

/// What torch 2.15's loader (`_PipelineScheduleRuntime._load_csv`) would do with a file pipetype
/// reads, loaded in `format`: "" when it loads it as pipetype reads it, otherwise one sentence
/// naming the place. (The explorer judges a file with transfers as compute_comms, one without as
/// compute_only.) Torch's rules
/// (schedules.py: `_Action.from_str`, `_prepare_schedule_with_comms`, `_validate_send_waits`,
/// `_validate_schedule`): one action per cell (its parser ignores what follows the first); a pair
/// written (a;b)OVERLAP_F_B; csv rows (a blank line is a rank with no actions; there are no
/// comments); the current notation; compute_only: computes only; compute_comms: no empty cell,
/// one WAIT_SEND after each send, each REDUCE_GRAD followed by its WAIT_REDUCE_GRAD before the
/// next; every action (markers included) on the rank that holds its stage. The compute program's
/// own defects and the transfers' order are verify's and verify_transfers' business.
enum class csv_format : std::uint8_t { compute_only, compute_comms };

inline std::string torch_load_note(const schedule_file& f, program_view p, csv_format format) {
  auto at = [](const char* what, const schedule_file::position& x) {
    return std::string(what) + " (line " + std::to_string(x.line) + ", column " + std::to_string(x.column) + ")";
  };
  auto named = [](int r, const step& s) { return "rank " + std::to_string(r) + "'s " + to_text(s); };
  if (const char* why = detail::too_large(p)) return std::string("not checked: the program has ") + why;
  if (!f.edges.empty()) return "torch's loader reads no `edges` line: its runtime runs a chain of stages";
  if (f.form == notation::legacy)
    return "torch 2.15 reads the older notation otherwise: B as a full backward, 2BW0 as 2B without a microbatch";
  if (f.bare_pair.line >= 0) return at("torch 2.15 refuses a pair without OVERLAP_F_B", f.bare_pair);
  if (f.shared_cell.line >= 0)
    return at("torch reads one action per cell and ignores the rest of this one", f.shared_cell);
  if (f.comment.line >= 0) return at("torch's csv reader has no comments", f.comment);
  if (f.blank_line.line >= 0) return at("to torch's csv reader a blank line is a rank with no actions", f.blank_line);
  const bool comms = format == csv_format::compute_comms;
  if (comms && f.empty_cell.line >= 0)
    return at("torch's compute_comms loader refuses empty (idle) cells", f.empty_cell);
  // waits_after[k]: the row's matching WAIT_SEND cells after send k, counted in one backward pass
  // per row over a (kind, stage, microbatch) table (a scan per send was quadratic in the row)
  const long M = p.microbatches > 0 ? p.microbatches : 1;
  auto key = [&](const step& s) {
    const bool f_kind = s.op == step_kind::send_f || s.op == step_kind::wait_send_f;
    return s.stage >= 0 && s.stage < p.stages && s.microbatch >= 0 && s.microbatch < M
               ? (2 * static_cast<long>(s.stage) + (f_kind ? 0 : 1)) * M + s.microbatch
               : -1L;
  };
  std::vector<int> seen(static_cast<std::size_t>(2 * (p.stages > 0 ? p.stages : 1) * M), 0), waits_after;
  for (int r = 0; r < f.rows && r < p.ranks; ++r) {
    const auto row = f.view().rank_steps(r);
    waits_after.assign(row.size(), 0);
    for (std::size_t k = row.size(); k-- > 0;) {
      const step& s = row[k];
      const long slot = key(s);
      if (is_send_wait(s.op) && slot >= 0) ++seen[static_cast<std::size_t>(slot)];
      if (s.op != step_kind::send_f && s.op != step_kind::send_b) continue;
      if (slot >= 0) {
        waits_after[k] = seen[static_cast<std::size_t>(slot)];
      } else {  // an index outside the schedule: match the cells one by one
        const step_kind wait = s.op == step_kind::send_f ? step_kind::wait_send_f : step_kind::wait_send_b;
        for (std::size_t j = k + 1; j < row.size(); ++j)
          waits_after[k] += row[j].op == wait && row[j].stage == s.stage && row[j].microbatch == s.microbatch ? 1 : 0;
      }
    }
    for (const step& s : row)
      if (key(s) >= 0) seen[static_cast<std::size_t>(key(s))] = 0;
    int pending_reduce = -1;
    for (std::size_t k = 0; k < row.size(); ++k) {
      const step& s = row[k];
      if (is_memory(s.op))
        return "torch 2.15 has no memory actions (OFFLOAD, RELOAD, RECOMPUTE are pipetype's): " + named(r, s);
      if (!comms && s.op != step_kind::compute)
        return "torch's compute_only loader refuses anything but computes: " + named(r, s);
      if (s.stage >= 0 && s.stage < p.stages && p.stage_rank[static_cast<std::size_t>(s.stage)] != r)
        return "torch places stage " + std::to_string(s.stage) + " by every action naming it, and " + named(r, s) +
               " is on another rank than its stage";
      if (s.op == step_kind::send_f || s.op == step_kind::send_b) {
        const step_kind wait = s.op == step_kind::send_f ? step_kind::wait_send_f : step_kind::wait_send_b;
        const int waits = waits_after[k];
        if (waits != 1)
          return "torch 2.15 wants exactly one " + std::string(step_kind_name(wait)) + " after each send, and " +
                 named(r, s) + " has " + std::to_string(waits);
      }
      if (s.op == step_kind::reduce_grad) {
        if (pending_reduce >= 0)
          return "torch 2.15 allows one pending REDUCE_GRAD, and " + named(r, s) + " is a second";
        pending_reduce = s.stage;
      } else if (s.op == step_kind::wait_reduce_grad) {
        if (pending_reduce != s.stage)
          return "torch 2.15 wants each WAIT_REDUCE_GRAD to follow its stage's REDUCE_GRAD, and " + named(r, s) +
                 " has none pending";
        pending_reduce = -1;
      }
    }
    if (comms && pending_reduce >= 0)
      return "torch 2.15 wants a WAIT_REDUCE_GRAD for rank " + std::to_string(r) + "'s REDUCE_GRAD of stage " +
             std::to_string(pending_reduce);
  }
  return "";
}

namespace detail {
inline void refuse_lanes(program_view p) {
  if (p.has_detached())
    throw std::invalid_argument(
        "PyTorch's schedule files cannot express this schedule: its stage graph has detached edges (local "
        "learning: every stage computes a loss of its own), and PyTorch's runtime computes a loss on the last stage "
        "only");
  if (p.has_edges())
    throw std::invalid_argument(
        "PyTorch's schedule files cannot express this schedule: its stage graph is given as edges (not a chain), "
        "and PyTorch's runtime passes each stage's output to the next stage only");
  if (p.lanes > 1)
    throw std::invalid_argument(
        "PyTorch's schedule files cannot express this schedule: its stage graph has " + std::to_string(p.lanes) +
        " parallel lanes (DualPipe's two directions over two copies of the model), and PyTorch's runtime holds one "
        "copy of each stage");
}
}  // namespace detail

namespace detail {
/// The `lanes N` and `edges A>B, ...` lines of p's text form, when it needs them.
inline std::string text_head(program_view p) {
  std::string head = p.lanes > 1 ? "lanes " + std::to_string(p.lanes) + "\n" : std::string();
  if (p.has_edges()) {
    head += "edges";
    for (std::size_t k = 0; k < p.edges.size(); ++k)
      head +=
          (k ? ", " : " ") + std::to_string(p.edges[k].from) + edge_mark(p.edges[k]) + std::to_string(p.edges[k].to);
    head += "\n";
  }
  return head;
}
}  // namespace detail

/// pipetype's text form of a program (PyTorch's rows; `lanes N` and `edges A>B, ...` lines first
/// when needed).
inline std::string to_text(program_view p) { return detail::text_head(p) + to_csv(file_of(p).view()); }

/// PyTorch's compute-only CSV (`_load_csv(path, format="compute_only")`).
inline std::string to_csv(program_view p) {
  detail::refuse_lanes(p);
  return to_csv(file_of(p).view());
}

/// PyTorch's compute+comms CSV (`_load_csv(path, format="compute_comms")`) of a lowered program.
inline std::string to_csv(program_view p, lowered_view L) {
  detail::refuse_lanes(p);
  return to_csv(file_of(p, L).view());
}
/// The same for a mesh step: each rank's row carries its collectives `c` (PyTorch's UNSHARD,
/// RESHARD, REDUCE_GRAD with its WAIT_REDUCE_GRAD) where they were placed; every replica runs
/// the same rows.
inline std::string to_csv(program_view p, lowered_view L, const collective_program& c) {
  detail::refuse_lanes(p);
  if (c.ranks != p.ranks) throw std::invalid_argument("pipetype::to_csv: collectives of another program");
  return to_csv(file_of(p, L, &c).view());
}

/// pipetype's text form of a program with its memory actions `mem`, each after the compute action
/// it follows (an OFFLOAD's `until` is not written: read back, it completes by default).
inline std::string to_text(program_view p, const memory_program& mem) {
  if (mem.ranks != p.ranks) throw std::invalid_argument("pipetype::to_text: memory actions of another program");
  const schedule_file plain = file_of(p);
  schedule_file f = plain;
  f.steps.clear();
  f.begin.assign(1, 0);
  for (int r = 0; r < plain.rows; ++r) {
    const std::span<const memory_action> mine = r < mem.ranks ? mem.rank_ops(r) : std::span<const memory_action>{};
    std::size_t next = 0;
    int k = -1;
    auto issue = [&] {
      for (; next < mine.size() && mine[next].after <= k; ++next) {
        const memory_action& a = mine[next];
        const step_kind sk = a.what == memory_kind::offload  ? step_kind::offload
                             : a.what == memory_kind::reload ? step_kind::reload
                                                             : step_kind::recompute;
        f.steps.push_back({sk, kind::F, a.stage, a.microbatch, false});
      }
    };
    issue();
    for (int i = plain.begin[static_cast<std::size_t>(r)]; i < plain.begin[static_cast<std::size_t>(r) + 1]; ++i) {
      const step& s = plain.steps[static_cast<std::size_t>(i)];
      f.steps.push_back(s);
      if (s.op != step_kind::compute) continue;
      ++k;
      if (!s.overlapped) issue();  // a pair's are written after its second half
    }
    f.begin.push_back(static_cast<int>(f.steps.size()));
  }
  return detail::text_head(p) + to_csv(f.view());
}

}  // namespace pipetype
