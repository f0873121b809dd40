// pipetype/compile/verify_transfers.hpp — does a file's own order of transfers complete under NCCL?
//
// A compute+comms schedule file (PyTorch's `compute_comms` format; core/step.hpp) says, per rank,
// exactly which send and receive is issued when. pipetype's own lowering is not used for it: the
// file's order is what PyTorch's runtime would issue, and this check says whether that order
// completes on NCCL, or names the rank and action where it stops.
//
// The model of PyTorch's `_PipelineScheduleRuntime` on NCCL (facts from torch 2.15's
// schedules.py and NCCL's point-to-point semantics; shared facts in docs/07_pytorch.md):
//   • the host walks the rank's list without blocking: every step is issued in file order;
//   • computes (and WAIT_SEND_F/B) run in order on the compute stream; a compute waits for the
//     receive that brings its input (PyTorch waits on it right before the compute), a WAIT_SEND
//     for its send;
//   • each SEND/RECV is its own NCCL operation, in file order on its communicator's stream: one
//     stream per rank when the pipeline group shares one communicator (`p2p_streams::shared`,
//     torch's default eager "nccl" backend), one per peer ("nccl-lazy"), or one per peer and
//     direction (`pipeline_per_edge_p2p`); when issued it waits for everything issued before it
//     on the compute stream (ProcessGroupNCCL's stream sync), then blocks its stream until its
//     partner is reached: the k-th send from a to b meets the k-th receive at b from a (FIFO per
//     peer, whatever the communicators);
//   • markers (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD) carry no pipeline data: ignored.
//
// Checks, in this order (each a `verdict` naming rank, stage, microbatch and the file's action):
//   1. every transfer and wait names a stage of its rank and a microbatch in range, along an
//      edge whose two stages are on different ranks; none appears twice;
//   2. every datum crossing ranks has its SEND on the producer and its RECV on the consumer; a
//      send follows the compute that produces it, a receive precedes the compute that reads it,
//      a wait follows its send;
//   3. per directed rank pair, the k-th send and the k-th receive carry the same datum
//      (otherwise NCCL would hand one microbatch's tensor to another: transfer_mismatch);
//   4. the model above runs to completion (otherwise nccl_deadlock at the first stuck op, on the
//      lowest rank). An order that completes on one stream per rank completes on more streams
//      too, so `shared` is the strictest of the three.
// The compute program `p` must have passed `verify` (its stages placed, its actions complete).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/step.hpp"

namespace pipetype {

namespace detail {

constexpr verdict at_step(errc e, int rank, const step& s, int index, const char* why) {
  verdict v = refusal(e, why).on_rank(rank).on_stage(s.stage).on_microbatch(s.microbatch).on_index(index);
  if (s.op == step_kind::compute) return v.on_kind(kind_char(s.what));
  return v.on_op(step_kind_name(s.op));
}

/// The rank a transfer step talks to, or -1 when its edge does not cross ranks.
constexpr int transfer_peer(program_view p, const step& s, int rank) {
  const int S = p.stages;
  auto other = [&](int t) {
    return t >= 0 && t < S && p.stage_rank[static_cast<std::size_t>(t)] != rank
               ? p.stage_rank[static_cast<std::size_t>(t)]
               : -1;
  };
  switch (s.op) {
    case step_kind::send_f:
    case step_kind::recv_b:
      return p.lane_tail(s.stage) ? -1 : other(s.stage + 1);
    case step_kind::recv_f:
    case step_kind::send_b:
      return p.lane_head(s.stage) ? -1 : other(s.stage - 1);
    default:
      return -1;
  }
}

}  // namespace detail

/// Which NCCL communicators (so, streams) PyTorch's runtime puts the pipeline's transfers on.
enum class p2p_streams : std::uint8_t {
  shared,         // one communicator for the pipeline group (backend "nccl", eager: torch's default)
  per_peer,       // one per rank pair (backend "nccl-lazy"): a stream per peer
  per_direction,  // one per directed rank pair (torch.distributed.config.pipeline_per_edge_p2p)
};

constexpr const char* p2p_streams_name(p2p_streams s) noexcept {
  return s == p2p_streams::per_peer ? "per-peer" : s == p2p_streams::per_direction ? "per-direction" : "shared";
}

constexpr verdict verify_transfers(program_view p, step_view f, p2p_streams streams = p2p_streams::shared) {
  using detail::at_step;
  const int S = p.stages, M = p.microbatches, R = f.ranks < p.ranks ? f.ranks : p.ranks;
  const int N = static_cast<int>(f.steps.size());
  const int keys = S * M;
  auto key = [M](int s, int j) { return s * M + j; };
  // where each datum's step is: [0] SEND_F, [1] RECV_F, [2] SEND_B, [3] RECV_B, [4] WAIT_SEND_F,
  // [5] WAIT_SEND_B (key of the step's own stage), [6] F, [7] B or I (global step indices)
  std::vector<int> at(static_cast<std::size_t>(8 * keys), -1);
  auto slot = [&](int which, int s, int j) -> int& { return at[static_cast<std::size_t>(which * keys + key(s, j))]; };
  std::vector<int> rank_of(static_cast<std::size_t>(N), -1);
  std::vector<int> peer_of(static_cast<std::size_t>(N), -1);

  // 1. each step in range, on its rank, along a crossing edge, once
  for (int r = 0; r < R; ++r) {
    for (int i = f.begin[static_cast<std::size_t>(r)]; i < f.begin[static_cast<std::size_t>(r) + 1]; ++i) {
      const step& s = f.steps[static_cast<std::size_t>(i)];
      const int local = s.cell >= 0 ? s.cell : i - f.begin[static_cast<std::size_t>(r)];
      rank_of[static_cast<std::size_t>(i)] = r;
      if (is_marker(s.op)) continue;
      if (s.stage < 0 || s.stage >= S || s.microbatch < 0 || s.microbatch >= M)
        return at_step(errc::index_out_of_range, r, s, local, "the stage or microbatch is outside the schedule");
      if (s.op == step_kind::compute) {
        int& c = slot(s.what == kind::F ? 6 : 7, s.stage, s.microbatch);
        if (s.what != kind::W) c = i;
        continue;
      }
      if (p.stage_rank[static_cast<std::size_t>(s.stage)] != r)
        return at_step(errc::stage_on_two_ranks, r, s, local, "the transfer names a stage that another rank holds");
      if (!p.runs_through(s.stage, s.microbatch))
        return at_step(errc::index_out_of_range, r, s, local, "the microbatch does not run through this stage");
      int which = 0;
      switch (s.op) {
        case step_kind::send_f:
          which = 0;
          break;
        case step_kind::recv_f:
          which = 1;
          break;
        case step_kind::send_b:
          which = 2;
          break;
        case step_kind::recv_b:
          which = 3;
          break;
        case step_kind::wait_send_f:
          which = 4;
          break;
        default:
          which = 5;
          break;
      }
      if (is_transfer(s.op)) {
        const int q = detail::transfer_peer(p, s, r);
        if (q < 0)
          return at_step(errc::index_out_of_range, r, s, local,
                         "a transfer along an edge that does not cross ranks (no neighbouring stage on another rank)");
        peer_of[static_cast<std::size_t>(i)] = q;
      }
      int& c = slot(which, s.stage, s.microbatch);
      if (c >= 0) return at_step(errc::duplicate_action, r, s, local, "the file issues this transfer or wait twice");
      c = i;
    }
  }

  // 2. completeness and order on each rank
  // a verdict's index: the step's cell in its row (idle cells counted), or its place among the steps
  auto local_of = [&](int i) {
    const int c = f.steps[static_cast<std::size_t>(i)].cell;
    return c >= 0 ? c : i - f.begin[static_cast<std::size_t>(rank_of[static_cast<std::size_t>(i)])];
  };
  auto named = [&](errc e, int r, step_kind k, int s, int j, const char* why) {
    step x;
    x.op = k;
    x.stage = s;
    x.microbatch = j;
    return at_step(e, r, x, -1, why);
  };
  const bool forwards_only = is_forward_only(p);  // evaluation, inference: no gradient travels
  for (int s = 0; s < S; ++s) {
    const int rs = p.stage_rank[static_cast<std::size_t>(s)];
    for (int j = 0; j < M; ++j) {
      if (!p.runs_through(s, j)) continue;
      const bool fwd = !p.lane_tail(s) && p.stage_rank[static_cast<std::size_t>(s + 1)] != rs;
      const bool bwd = !forwards_only && !p.lane_head(s) && p.stage_rank[static_cast<std::size_t>(s - 1)] != rs;
      if (fwd) {
        const int rn = p.stage_rank[static_cast<std::size_t>(s + 1)];
        const int snd = slot(0, s, j), rcv = slot(1, s + 1, j);
        if (snd < 0) return named(errc::missing_action, rs, step_kind::send_f, s, j, "the activation is never sent");
        if (rcv < 0)
          return named(errc::missing_action, rn, step_kind::recv_f, s + 1, j, "the activation is never received");
        if (snd < slot(6, s, j))
          return at_step(errc::action_before_its_input, rs, f.steps[static_cast<std::size_t>(snd)], local_of(snd),
                         "the send comes before the forward that produces it");
        const int use = slot(6, s + 1, j);
        if (use >= 0 && use < rcv)
          return at_step(errc::action_before_its_input, rn, f.steps[static_cast<std::size_t>(use)], local_of(use),
                         "the forward comes before the RECV_F that brings its input");
      }
      if (bwd) {
        const int rp = p.stage_rank[static_cast<std::size_t>(s - 1)];
        const int snd = slot(2, s, j), rcv = slot(3, s - 1, j);
        if (snd < 0) return named(errc::missing_action, rs, step_kind::send_b, s, j, "the gradient is never sent");
        if (rcv < 0)
          return named(errc::missing_action, rp, step_kind::recv_b, s - 1, j, "the gradient is never received");
        if (snd < slot(7, s, j))
          return at_step(errc::action_before_its_input, rs, f.steps[static_cast<std::size_t>(snd)], local_of(snd),
                         "the send comes before the backward that produces it");
        const int use = slot(7, s - 1, j);
        if (use >= 0 && use < rcv)
          return at_step(errc::action_before_its_input, rp, f.steps[static_cast<std::size_t>(use)], local_of(use),
                         "the backward comes before the RECV_B that brings its input");
      }
      for (int w = 0; w < 2; ++w) {
        const int wait = slot(4 + w, s, j);
        if (wait < 0) continue;
        const int snd = slot(2 * w, s, j);
        if (snd < 0 || wait < snd)
          return at_step(errc::action_before_its_input, rs, f.steps[static_cast<std::size_t>(wait)], local_of(wait),
                         "the wait comes before its send (or the send is never issued)");
      }
    }
  }

  // 3. per directed rank pair, the k-th send and the k-th receive carry the same datum
  struct chan {
    long channel;
    int index;
    constexpr bool operator<(const chan& o) const {
      return channel != o.channel ? channel < o.channel : index < o.index;
    }
  };
  std::vector<chan> sends, recvs;
  for (int i = 0; i < N; ++i) {
    const int r = rank_of[static_cast<std::size_t>(i)], q = peer_of[static_cast<std::size_t>(i)];
    if (r < 0 || q < 0) continue;
    const step_kind k = f.steps[static_cast<std::size_t>(i)].op;
    if (k == step_kind::send_f || k == step_kind::send_b)
      sends.push_back({static_cast<long>(r) * p.ranks + q, i});
    else
      recvs.push_back({static_cast<long>(q) * p.ranks + r, i});
  }
  std::sort(sends.begin(), sends.end());
  std::sort(recvs.begin(), recvs.end());
  // every send has its receive (step 2), so both lists pair up one to one
  std::vector<int> partner(static_cast<std::size_t>(N), -1);
  for (std::size_t k = 0; k < sends.size() && k < recvs.size(); ++k) {
    const step& a = f.steps[static_cast<std::size_t>(sends[k].index)];
    const step& b = f.steps[static_cast<std::size_t>(recvs[k].index)];
    const bool same = sends[k].channel == recvs[k].channel && a.microbatch == b.microbatch &&
                      ((a.op == step_kind::send_f && b.op == step_kind::recv_f && b.stage == a.stage + 1) ||
                       (a.op == step_kind::send_b && b.op == step_kind::recv_b && b.stage == a.stage - 1));
    if (!same)
      return at_step(errc::transfer_mismatch, rank_of[static_cast<std::size_t>(recvs[k].index)], b,
                     local_of(recvs[k].index),
                     "NCCL pairs sends and receives per peer in issue order, and this receive meets a send of "
                     "another datum");
    partner[static_cast<std::size_t>(sends[k].index)] = recvs[k].index;
    partner[static_cast<std::size_t>(recvs[k].index)] = sends[k].index;
  }

  // 4. run the model. Per rank the compute stream's items (computes, send waits); per NCCL stream
  // (one per rank, per peer or per peer and direction, as `streams` says) its transfers in file
  // order, each remembering how many compute-stream items its rank issued before it.
  std::vector<int> cbegin(static_cast<std::size_t>(R + 1), 0), citem;
  std::vector<int> nafter(static_cast<std::size_t>(N), 0);  // per transfer step
  struct lane {                                             // a transfer on its NCCL stream
    long key;                                               // (rank, stream of the rank) ...
    int index;                                              // ... then file order
    constexpr bool operator<(const lane& o) const { return key != o.key ? key < o.key : index < o.index; }
  };
  std::vector<lane> lanes;
  const long P = p.ranks;
  for (int r = 0; r < R; ++r) {
    for (int i = f.begin[static_cast<std::size_t>(r)]; i < f.begin[static_cast<std::size_t>(r) + 1]; ++i) {
      const step_kind k = f.steps[static_cast<std::size_t>(i)].op;
      if (k == step_kind::compute || is_send_wait(k)) {
        citem.push_back(i);
      } else if (is_transfer(k)) {
        nafter[static_cast<std::size_t>(i)] = static_cast<int>(citem.size()) - cbegin[static_cast<std::size_t>(r)];
        const long q = peer_of[static_cast<std::size_t>(i)];
        const bool send = k == step_kind::send_f || k == step_kind::send_b;
        const long stream = streams == p2p_streams::shared     ? 0
                            : streams == p2p_streams::per_peer ? q
                                                               : 2 * q + (send ? 0 : 1);
        lanes.push_back({r * 2 * P + stream, i});
      }
    }
    cbegin[static_cast<std::size_t>(r) + 1] = static_cast<int>(citem.size());
  }
  std::sort(lanes.begin(), lanes.end());
  std::vector<int> sbegin, srank, stream_of(static_cast<std::size_t>(N), -1);
  for (std::size_t k = 0; k < lanes.size(); ++k) {
    if (k == 0 || lanes[k].key != lanes[k - 1].key) {
      sbegin.push_back(static_cast<int>(k));
      srank.push_back(static_cast<int>(lanes[k].key / (2 * P)));
    }
    stream_of[static_cast<std::size_t>(lanes[k].index)] = static_cast<int>(sbegin.size()) - 1;
  }
  const int S_ = static_cast<int>(sbegin.size());
  sbegin.push_back(static_cast<int>(lanes.size()));
  std::vector<char> done(static_cast<std::size_t>(N), 0);
  std::vector<int> cdone(static_cast<std::size_t>(R), 0), shead(static_cast<std::size_t>(S_), 0);
  // what a compute-stream item waits for (a global step index), or -1
  auto needs = [&](int i) {
    const step& s = f.steps[static_cast<std::size_t>(i)];
    switch (s.op) {
      case step_kind::compute:
        if (s.what == kind::F) return slot(1, s.stage, s.microbatch);
        if (s.what == kind::W) return -1;
        return slot(3, s.stage, s.microbatch);
      case step_kind::wait_send_f:
        return slot(0, s.stage, s.microbatch);
      default:
        return slot(2, s.stage, s.microbatch);
    }
  };
  auto head = [&](int t) {  // the transfer at the head of NCCL stream t, or -1 when it is drained
    const int h = sbegin[static_cast<std::size_t>(t)] + shead[static_cast<std::size_t>(t)];
    return h < sbegin[static_cast<std::size_t>(t) + 1] ? lanes[static_cast<std::size_t>(h)].index : -1;
  };
  auto ready = [&](int t) {  // stream t's head may meet its partner: its rank issued what precedes it
    const int i = head(t);
    return i >= 0 &&
           cdone[static_cast<std::size_t>(srank[static_cast<std::size_t>(t)])] >= nafter[static_cast<std::size_t>(i)];
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      int& c = cdone[static_cast<std::size_t>(r)];
      while (cbegin[static_cast<std::size_t>(r)] + c < cbegin[static_cast<std::size_t>(r) + 1]) {
        const int i = citem[static_cast<std::size_t>(cbegin[static_cast<std::size_t>(r)] + c)];
        const int need = needs(i);
        if (need >= 0 && !done[static_cast<std::size_t>(need)]) break;
        done[static_cast<std::size_t>(i)] = 1;
        ++c;
        progress = true;
      }
    }
    for (int t = 0; t < S_; ++t) {
      while (ready(t)) {
        const int i = head(t), j = partner[static_cast<std::size_t>(i)];
        const int u = stream_of[static_cast<std::size_t>(j)];
        if (!ready(u) || head(u) != j) break;
        done[static_cast<std::size_t>(i)] = done[static_cast<std::size_t>(j)] = 1;
        ++shead[static_cast<std::size_t>(t)];
        ++shead[static_cast<std::size_t>(u)];
        progress = true;
      }
    }
  }
  for (int t = 0; t < S_; ++t) {
    const int i = head(t);
    if (i >= 0)
      return at_step(
          errc::nccl_deadlock, srank[static_cast<std::size_t>(t)], f.steps[static_cast<std::size_t>(i)], local_of(i),
          streams == p2p_streams::shared
              ? "each NCCL send or receive blocks its rank's one communication stream until its partner is "
                "reached (FIFO per peer), and this one's partner never is"
              : "each NCCL send or receive blocks its stream to that peer until its partner is reached (FIFO "
                "per peer), and this one's partner never is");
  }
  for (int r = 0; r < R; ++r) {
    const int h = cbegin[static_cast<std::size_t>(r)] + cdone[static_cast<std::size_t>(r)];
    if (h < cbegin[static_cast<std::size_t>(r) + 1]) {
      const int i = citem[static_cast<std::size_t>(h)];
      return at_step(errc::nccl_deadlock, r, f.steps[static_cast<std::size_t>(i)], local_of(i),
                     "it waits for a transfer that never completes");
    }
  }
  return {};
}

}  // namespace pipetype
