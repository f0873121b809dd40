// pipetype/schedules/registry.hpp — the built-in schedules by name, for tools.
//
// `builtin_families` is the one list of the built-in families (each a `schedule_family`
// descriptor defined in its own header); everything here is derived from it. The names are the
// explorer's `--schedule` values, in this order. `schedule_error` says why a (name, p, m, v) is
// not valid (nullptr if it is); `make_schedule` builds it (throws std::invalid_argument
// otherwise). `v` is the number of the model's stages per rank: the looped families take any
// v ≥ 1, the one-stage families need 1 and the V-shape families 2; 0 asks for the schedule's
// default (`default_chunks`). DualPipe counts 1: each rank holds one model stage per direction
// (its program has two lanes of p stages). `schedule_params` carries what zb-auto needs.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "pipetype/schedules/dualpipe.hpp"
#include "pipetype/schedules/dualpipe_v.hpp"
#include "pipetype/schedules/family.hpp"
#include "pipetype/schedules/gpipe.hpp"
#include "pipetype/schedules/interleaved_1f1b.hpp"
#include "pipetype/schedules/local_1f1b.hpp"
#include "pipetype/schedules/looped_bfs.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"
#include "pipetype/schedules/v_half.hpp"
#include "pipetype/schedules/v_min.hpp"
#include "pipetype/schedules/zb_auto.hpp"
#include "pipetype/schedules/zb_h1.hpp"
#include "pipetype/schedules/zb_h2.hpp"
#include "pipetype/schedules/zb_v.hpp"

namespace pipetype {

/// A list of schedule families.
template <schedule_family... F>
struct family_list {
  static constexpr std::size_t size = sizeof...(F);
};

/// The built-in families, in the order tools list them.
using builtin_families = family_list<gpipe_family, one_f_one_b_family, interleaved_1f1b_family, looped_bfs_family,
                                     zb_h1_family, zb_h2_family, zb_v_family, v_min_family, v_half_family,
                                     dualpipe_v_family, dualpipe_family, zb_auto_family, local_one_f_one_b_family>;

/// One family as a row of a run-time table.
struct schedule_info {
  std::string_view name;
  int chunks;  // stages per rank: 0 = any (takes --chunks, default 2), otherwise exactly this
  bool split;  // splits backwards into I and W (needs stages with backward_input/backward_weight)
  std::string_view summary;
  const char* (*error)(int p, int m, int v) noexcept;  // the family's own size rules; nullptr when valid
  program (*make)(int p, int m, int v, const schedule_params& params);
  bool graphs = false;  // make() takes schedule_params::edges (a stage graph other than the chain)
  bool local = false;   // local learning: its graph's edges are all detached, each stage a loss of its own
};

namespace detail {

template <class F>
constexpr bool takes_graphs() {
  if constexpr (requires { F::graphs; })
    return F::graphs;
  else
    return false;
}
template <class F>
constexpr bool learns_locally() {
  if constexpr (requires { F::local; })
    return F::local;
  else
    return false;
}

template <schedule_family... F>
constexpr std::array<schedule_info, sizeof...(F)> infos_of(family_list<F...>) {
  return {schedule_info{F::name, F::chunks, F::split, F::summary, &F::error, &F::make, takes_graphs<F>(),
                        learns_locally<F>()}...};
}

template <std::size_t N>
constexpr std::size_t names_length(const std::array<schedule_info, N>& infos) {
  std::size_t n = 0;
  for (const schedule_info& s : infos) n += s.name.size() + 2;
  return n;
}

}  // namespace detail

/// The built-in families as a table (the explorer's list and `--schedule all` walk it).
inline constexpr auto schedule_infos = detail::infos_of(builtin_families{});

namespace detail {

inline constexpr std::string_view unknown_prefix = "unknown schedule; known: ";

/// "unknown schedule; known: gpipe, 1f1b, ..." as a NUL-terminated constant.
inline constexpr auto unknown_schedule_message = [] {
  std::array<char, unknown_prefix.size() + names_length(schedule_infos) + 1> out{};
  std::size_t k = 0;
  for (char c : unknown_prefix) out[k++] = c;
  for (std::size_t i = 0; i < schedule_infos.size(); ++i) {
    if (i) out[k++] = ',', out[k++] = ' ';
    for (char c : schedule_infos[i].name) out[k++] = c;
  }
  out[k] = '\0';
  return out;
}();

}  // namespace detail

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
  if (!s) return detail::unknown_schedule_message.data();
  v = default_chunks(*s, v);
  if (p < 1) return "ranks must be at least 1";
  if (m < 1) return "microbatches must be at least 1";
  if (v < 1) return "chunks must be at least 1";
  if (s->chunks == 1 && v != 1) return "this schedule holds one stage per rank; --chunks must be 1";
  if (s->chunks == 2 && v != 2) return "this schedule uses the V placement (2 stages per rank); --chunks must be 2";
  return s->error(p, m, v);
}

constexpr program make_schedule(std::string_view name, int p, int m, int v = 0, const schedule_params& params = {}) {
  if (const char* e = schedule_error(name, p, m, v)) throw std::invalid_argument(e);
  // times that would make simulated figures infinite: refused here, for every family (zb-auto
  // would otherwise find no finite candidate and blame the memory limit)
  if (const char* e = cost_error(params.cost)) throw std::invalid_argument(e);
  if (const char* e = scale_error(params.rank_speed, params.microbatch_scale, params.stage_scale))
    throw std::invalid_argument(e);
  const schedule_info& s = *find_schedule(name);
  v = default_chunks(s, v);
  if (params.edges.empty()) return s.make(p, m, v, params);
  // the graph must name exactly the model's stages, for every family alike (a stage it leaves out
  // would otherwise run unconnected under some and be refused by others)
  int named = 0;
  for (const stage_edge& e : params.edges) named = std::max({named, e.from + 1, e.to + 1});
  auto wrong_size = [&](const std::string& has) {
    return std::invalid_argument("the stage graph's edges name " + std::to_string(named) +
                                 " stages, but this schedule's program has " + has);
  };
  if (s.graphs) {  // a graph form of its own, one stage per rank
    if (named != p) throw wrong_size(std::to_string(p) + " (1 per rank over " + std::to_string(p) + " ranks)");
    return s.make(p, m, v, params);
  }
  // any other family: its chain program over the graph, stage for stage in topological order
  schedule_params chain_params = params;
  chain_params.edges.clear();
  const program chain = s.make(p, m, v, chain_params);
  const int L = chain.lanes > 1 ? chain.stages / chain.lanes : chain.stages;  // the model's stages
  if (named != L)
    throw wrong_size(chain.lanes > 1 ? std::to_string(L) + " per lane (" + std::to_string(chain.lanes) +
                                           " lanes, each a copy of the model)"
                                     : std::to_string(chain.stages) + " (" + std::to_string(v) + " per rank over " +
                                           std::to_string(p) + " ranks)");
  return over_graph(chain, stage_dag{L, params.edges});
}

}  // namespace pipetype
