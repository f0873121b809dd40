// pipetype/core/mesh.hpp — pp × dp ranks: a pipeline replicated for data parallelism.
//
// A mesh runs `dp` replicas of one pipeline plan of `pp` ranks. Every replica runs the same
// per-rank programs on its own microbatches; pipeline rank r of every replica holds the same
// stages, so the replicas of r form r's data-parallel group (the ranks that reduce r's gradients
// and, sharded, gather its parameters). A global rank g is a (pipeline rank r, replica d) pair,
// numbered one of two ways:
//   dp_inner (the default)  g = r · dp + d   a pipeline rank's replicas are consecutive (the
//                                            order Megatron-LM and torchtitan use: DP inside PP,
//                                            so a DP group's all-reduce stays within a node)
//   pp_inner                g = d · pp + r   a replica's pipeline ranks are consecutive
//
//   constexpr pipetype::mesh m{.pp = 4, .dp = 2};                 // 8 ranks, DP inside
//   static_assert(m.global(1, 1) == 3 && m.replica(3) == 1);
//   using M = pipetype::mesh_t<4, 2, pipetype::mesh_order::pp_inner>;   // the same as a type
//
// check_mesh(m, world) is the one sentence for a mesh that is empty, too large, or not the
// world it is meant to cover.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipetype/core/sizes.hpp"
#include "pipetype/core/verdict.hpp"

namespace pipetype {

/// How a mesh numbers its global ranks (see the top of this file).
enum class mesh_order : std::uint8_t { dp_inner, pp_inner };

struct mesh {
  int pp = 1;  // pipeline ranks per replica
  int dp = 1;  // replicas
  mesh_order order = mesh_order::dp_inner;

  constexpr int size() const noexcept { return pp * dp; }
  /// The global rank of pipeline rank r in replica d.
  constexpr int global(int r, int d) const noexcept { return order == mesh_order::dp_inner ? r * dp + d : d * pp + r; }
  /// The pipeline rank of global rank g.
  constexpr int pipeline_rank(int g) const noexcept { return order == mesh_order::dp_inner ? g / dp : g % pp; }
  /// The replica of global rank g.
  constexpr int replica(int g) const noexcept { return order == mesh_order::dp_inner ? g % dp : g / pp; }

  friend constexpr bool operator==(const mesh&, const mesh&) = default;
};

/// Replica d's shard of a sharded tensor of n elements over dp replicas: [begin, end). Shards are
/// ⌈n / dp⌉ elements (NCCL's reduce-scatter and all-gather move equal counts), the last ones shorter
/// or empty when dp does not divide n.
struct shard_range {
  std::size_t begin = 0, end = 0;
  constexpr std::size_t size() const noexcept { return end - begin; }
  friend constexpr bool operator==(const shard_range&, const shard_range&) = default;
};
constexpr shard_range shard_of(std::size_t n, int dp, int d) noexcept {
  const auto parts = static_cast<std::size_t>(dp < 1 ? 1 : dp);
  const std::size_t chunk = (n + parts - 1) / parts;
  const std::size_t b = chunk * static_cast<std::size_t>(d < 0 ? 0 : d);
  return {b < n ? b : n, b + chunk < n ? b + chunk : n};
}

/// Bucket b of a gradient of n elements split into `buckets` (a bucketed REDUCE_GRAD, dp_options::
/// buckets): [begin, end), counted from the array's end — bucket 0 holds its last elements, as a
/// backward writes the last layers' gradients first (the order PyTorch's DDP fills its buckets
/// in). Sizes differ by one at most; none is empty when buckets ≤ n.
constexpr shard_range bucket_of(std::size_t n, int buckets, int b) noexcept {
  const auto k = static_cast<std::size_t>(buckets < 1 ? 1 : buckets);
  const auto j = static_cast<std::size_t>(b < 0 ? 0 : (b >= buckets ? buckets - 1 : b));
  return {n / k * (k - 1 - j) + n % k * (k - 1 - j) / k, n / k * (k - j) + n % k * (k - j) / k};
}

/// A mesh as a type, for plans that are types.
template <int PP, int DP, mesh_order Order = mesh_order::dp_inner>
struct mesh_t {
  static_assert(PP >= 1 && DP >= 1, "pipetype::mesh_t: a mesh needs at least one pipeline rank and one replica");
  static_assert(static_cast<long long>(PP) * DP <= limits::ranks,
                "pipetype::mesh_t: pp × dp is more ranks than pipetype::limits::ranks");
  static constexpr mesh value{PP, DP, Order};
};

/// Ok, or why `m` cannot run: a non-positive side, more ranks than pipetype::limits::ranks, or
/// (world ≥ 0) pp · dp not equal to the world's ranks.
/// Ok, or errc::too_large when a step over `m` whose replicas issue `per_replica` ops each (the
/// lowered ops, collectives and memory actions of one) would pass pipetype::limits::mesh_ops:
/// checked before any of the step's tables is made.
constexpr verdict check_mesh_ops(const mesh& m, long long per_replica) noexcept {
  if (per_replica > 0 && m.dp > 0 && per_replica > limits::mesh_ops / m.dp)
    return refusal(errc::too_large, "dp × a replica's ops is above 33554432 (pipetype::limits::mesh_ops)");
  return {};
}

constexpr verdict check_mesh(const mesh& m, int world = -1) noexcept {
  if (m.pp < 1 || m.dp < 1)
    return refusal(errc::bad_mesh, "a mesh needs at least one pipeline rank (pp) and one replica (dp)");
  if (static_cast<long long>(m.pp) * m.dp > limits::ranks)
    return refusal(errc::too_large, "pp × dp is more ranks than pipetype::limits::ranks");
  if (world >= 0 && m.pp * m.dp != world)
    return refusal(errc::bad_mesh, world % m.pp != 0
                                       ? "the world's ranks are not a multiple of the pipeline's ranks (pp)"
                                       : "pp × dp is not the world's number of ranks");
  return {};
}

}  // namespace pipetype
