// pipetype/schedules/registry.hpp — the built-in schedules by name, for tools.
//
// The names are the explorer's `--schedule` values. `schedule_error` says why a (name, p, m, v)
// is not valid (nullptr if it is); `make_schedule` builds it (throws std::invalid_argument
// otherwise). `v` is the number of the model's stages per rank: the looped families take any
// v ≥ 1, the one-stage families need 1 and the V-shape families 2; 0 asks for the schedule's
// default (`default_chunks`). DualPipe counts 1: each rank holds one model stage per direction
// (its program has two chains of p stages). `schedule_params` carries what zb-auto needs (costs, memory limit).
#pragma once

#include <stdexcept>
#include <string_view>

#include "pipetype/schedules/dualpipe.hpp"
#include "pipetype/schedules/dualpipe_v.hpp"
#include "pipetype/schedules/gpipe.hpp"
#include "pipetype/schedules/interleaved_1f1b.hpp"
#include "pipetype/schedules/looped_bfs.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"
#include "pipetype/schedules/zb_auto.hpp"
#include "pipetype/schedules/zb_h1.hpp"
#include "pipetype/schedules/zb_h2.hpp"
#include "pipetype/schedules/zb_v.hpp"

namespace pipetype {

struct schedule_info {
  std::string_view name;
  int chunks;  // stages per rank: 0 = any (takes --chunks, default 2), otherwise exactly this
  bool split;  // splits backwards into I and W (needs stages with backward_input/backward_weight)
  std::string_view summary;
};

inline constexpr schedule_info schedule_infos[] = {
    {"gpipe", 1, false, "all forwards, then all backwards (Huang et al. 2019)"},
    {"1f1b", 1, false, "one forward, one backward in steady state (PipeDream-Flush)"},
    {"interleaved-1f1b", 0, false, "1F1B over v looped chunks per rank (Megatron virtual pipeline)"},
    {"looped-bfs", 0, false, "breadth-first over v looped chunks per rank (Lamy-Poirier 2023)"},
    {"zb-h1", 1, true, "zero bubble within 1F1B memory: W's delayed to fill the tail (Qi et al. 2024)"},
    {"zb-h2", 1, true, "zero bubble with 2p-1 activations: extra warm-up forwards (Qi et al. 2024)"},
    {"zb-v", 2, true, "zero bubble on the V placement within 1F1B memory (Qi et al. 2024)"},
    {"dualpipe-v", 2, true, "DualPipe cut in half: V placement, overlapped F&B pairs (DeepSeek-V3)"},
    {"dualpipe", 1, true, "two directions over two parameter copies, overlapped F&B pairs (DeepSeek-V3)"},
    {"zb-auto", 1, true, "automatic zero-bubble search for the given costs and --mem-limit"},
};

/// What the parametrised schedules need: costs and a memory limit (zb-auto).
struct schedule_params {
  costs cost{};
  double mem_limit = 0;  // microbatch activations per rank; 0 = none
};

constexpr const schedule_info* find_schedule(std::string_view name) noexcept {
  for (const schedule_info& s : schedule_infos)
    if (s.name == name) return &s;
  return nullptr;
}

/// The stages per rank a schedule uses when asked for `v` (0: its default).
constexpr int default_chunks(const schedule_info& s, int v = 0) noexcept {
  return v != 0 ? v : s.chunks > 0 ? s.chunks : 2;
}

constexpr const char* schedule_error(std::string_view name, int p, int m, int v) noexcept {
  const schedule_info* s = find_schedule(name);
  if (!s)
    return "unknown schedule; known: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb-v, dualpipe-v, "
           "dualpipe, zb-auto";
  v = default_chunks(*s, v);
  if (p < 1) return "ranks must be at least 1";
  if (m < 1) return "microbatches must be at least 1";
  if (v < 1) return "chunks must be at least 1";
  if (s->chunks == 1 && v != 1) return "this schedule holds one stage per rank; --chunks must be 1";
  if (s->chunks == 2 && v != 2) return "this schedule uses the V placement (2 stages per rank); --chunks must be 2";
  if (name == "interleaved-1f1b") return interleaved_1f1b_error(p, m, v);
  if (name == "dualpipe-v") return dualpipe_v_error(p, m);
  if (name == "dualpipe") return dualpipe_error(p, m);
  return nullptr;
}

constexpr program make_schedule(std::string_view name, int p, int m, int v = 0, const schedule_params& params = {}) {
  if (const char* e = schedule_error(name, p, m, v)) throw std::invalid_argument(e);
  v = default_chunks(*find_schedule(name), v);
  if (name == "gpipe") return make_gpipe(p, m);
  if (name == "1f1b") return make_one_f_one_b(p, m);
  if (name == "interleaved-1f1b") return make_interleaved_1f1b(p, m, v);
  if (name == "looped-bfs") return make_looped_bfs(p, m, v);
  if (name == "zb-h1") return make_zb_h1(p, m);
  if (name == "zb-h2") return make_zb_h2(p, m);
  if (name == "zb-v") return make_zb_v(p, m);
  if (name == "dualpipe-v") return make_dualpipe_v(p, m);
  if (name == "dualpipe") return make_dualpipe(p, m);
  zb_problem pr;
  pr.ranks = p;
  pr.microbatches = m;
  pr.costs = cost_model{params.cost};
  pr.mem_limit = params.mem_limit;
  return make_zb_auto(pr);
}

}  // namespace pipetype
