// pipetype/schedules/registry.hpp — the built-in schedules by name, for tools.
//
// The names are the explorer's `--schedule` values. `schedule_error` says why a (name, p, m, v)
// is not valid (nullptr if it is); `make_schedule` builds it (throws std::invalid_argument
// otherwise). Chunks apply to the looped families and must be 1 for the others.
#pragma once

#include <stdexcept>
#include <string_view>

#include "pipetype/schedules/gpipe.hpp"
#include "pipetype/schedules/interleaved_1f1b.hpp"
#include "pipetype/schedules/looped_bfs.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"

namespace pipetype {

struct schedule_info {
  std::string_view name;
  bool chunked;  // takes --chunks (v stages per rank)
  std::string_view summary;
};

inline constexpr schedule_info schedule_infos[] = {
    {"gpipe", false, "all forwards, then all backwards (Huang et al. 2019)"},
    {"1f1b", false, "one forward, one backward in steady state (PipeDream-Flush)"},
    {"interleaved-1f1b", true, "1F1B over v looped chunks per rank (Megatron virtual pipeline)"},
    {"looped-bfs", true, "breadth-first over v looped chunks per rank (Lamy-Poirier 2023)"},
};

constexpr const schedule_info* find_schedule(std::string_view name) noexcept {
  for (const schedule_info& s : schedule_infos)
    if (s.name == name) return &s;
  return nullptr;
}

constexpr const char* schedule_error(std::string_view name, int p, int m, int v) noexcept {
  const schedule_info* s = find_schedule(name);
  if (!s) return "unknown schedule; known: gpipe, 1f1b, interleaved-1f1b, looped-bfs";
  if (p < 1) return "ranks must be at least 1";
  if (m < 1) return "microbatches must be at least 1";
  if (v < 1) return "chunks must be at least 1";
  if (!s->chunked && v != 1) return "this schedule holds one stage per rank; --chunks must be 1";
  if (name == "interleaved-1f1b") return interleaved_1f1b_error(p, m, v);
  return nullptr;
}

constexpr program make_schedule(std::string_view name, int p, int m, int v = 1) {
  if (const char* e = schedule_error(name, p, m, v)) throw std::invalid_argument(e);
  if (name == "gpipe") return make_gpipe(p, m);
  if (name == "1f1b") return make_one_f_one_b(p, m);
  if (name == "interleaved-1f1b") return make_interleaved_1f1b(p, m, v);
  return make_looped_bfs(p, m, v);
}

}  // namespace pipetype
