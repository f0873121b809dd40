// pipetype/core/sizes.hpp — static sizes that read like values.
//
//   pipetype::ranks<4>          pipeline ranks (processes / GPUs), p
//   pipetype::microbatches<8>   microbatches per training step, m
//   pipetype::chunks<2>         model chunks (virtual stages) per rank, v
//   pipetype::stages<8>         pipeline stages in the stage graph, S
//
// Each is an empty type carrying `value`, in the spirit of CuTe's Int<4>{}. Schedules take
// them as template arguments: `pipetype::one_f_one_b<ranks<4>, microbatches<8>>`, constrained
// by the concepts below so that a swapped or foreign argument does not compile.
#pragma once

namespace pipetype {

template <int N>
struct ranks {
  static_assert(N >= 1, "pipetype::ranks: a pipeline needs at least one rank");
  static constexpr int value = N;
};

template <int N>
struct microbatches {
  static_assert(N >= 1, "pipetype::microbatches: a step needs at least one microbatch");
  static constexpr int value = N;
};

template <int N>
struct chunks {
  static_assert(N >= 1, "pipetype::chunks: a rank holds at least one chunk");
  static constexpr int value = N;
};

template <int N>
struct stages {
  static_assert(N >= 1, "pipetype::stages: a model has at least one stage");
  static constexpr int value = N;
};

template <class T>
inline constexpr int value_v = T::value;

/// The largest program pipetype takes: verify, lower and simulate keep tables of stages ×
/// microbatches entries, so a file of a dozen bytes that names stage 10^6 and microbatch 10^6
/// would otherwise ask for terabytes. Past a limit, verify answers errc::too_large (a compile
/// error _TOO_LARGE_ for make_plan) before it allocates anything.
namespace limits {
inline constexpr int ranks = 1 << 14;                // 16384
inline constexpr int stages = 1 << 16;               // 65536
inline constexpr int microbatches = 1 << 20;         // 1048576
inline constexpr long long cells = 1LL << 22;        // stages × microbatches: 4194304
inline constexpr int actions = 1 << 23;              // 8388608
inline constexpr long long file_bytes = 64LL << 20;  // a schedule file the tools read: 64 MiB
/// The bytes one microbatch of one stage saves for its backward (memory_sizes): 1 TiB. A rank
/// holds at most `cells` of them at once, so a memory walk's sums stay below 2^62 and cannot wrap.
inline constexpr long long saved_bytes = 1LL << 40;
/// The ops of a step over a mesh: every replica's lowered ops, collectives and memory actions
/// (dp × each replica's), 33554432. The pipeline's own limits do not bound it: --dp multiplies.
inline constexpr long long mesh_ops = 1LL << 25;
/// The buckets one stage's gradient reduction splits into (dp_options::buckets): 1024. Each is an
/// op and an event of every rank that holds the stage.
inline constexpr int buckets = 1 << 10;
/// Edges of a stage graph given as edges (every lane's). Each crossing edge is a transfer each way
/// per microbatch in the lowered program, so edges × microbatches is held under `cells` too.
inline constexpr int edges = 1 << 20;  // 1048576

/// Which limit ranks p, stages s, microbatches m, actions n and edges e pass, or nullptr: the one
/// test the builder, verify and make_plan's table sizing all make (in 64 bits, before any table
/// exists).
constexpr const char* exceeded(long long p, long long s, long long m, long long n, long long e = 0) {
  if (p > limits::ranks) return "more than 16384 ranks (pipetype::limits::ranks)";
  if (s > limits::stages) return "more than 65536 stages (pipetype::limits::stages)";
  if (m > limits::microbatches) return "more than 1048576 microbatches (pipetype::limits::microbatches)";
  if (s * m > limits::cells) return "stages x microbatches above 4194304 (pipetype::limits::cells)";
  if (n > limits::actions) return "more than 8388608 actions (pipetype::limits::actions)";
  if (e > limits::edges) return "more than 1048576 edges (pipetype::limits::edges)";
  if (e * m > limits::cells) return "edges x microbatches above 4194304 (pipetype::limits::cells)";
  return nullptr;
}
}  // namespace limits

namespace detail {
template <class T, template <int> class Tag>
inline constexpr bool is_size_tag_v = false;
template <int N, template <int> class Tag>
inline constexpr bool is_size_tag_v<Tag<N>, Tag> = true;
}  // namespace detail

/// The size tags as concepts: the schedules constrain their parameters with them, so
/// `one_f_one_b<microbatches<8>, ranks<4>>` (swapped) does not compile; the error names the
/// concept the argument does not satisfy.
template <class T>
concept rank_count = detail::is_size_tag_v<T, ranks>;
template <class T>
concept microbatch_count = detail::is_size_tag_v<T, microbatches>;
template <class T>
concept chunk_count = detail::is_size_tag_v<T, chunks>;
template <class T>
concept stage_count = detail::is_size_tag_v<T, stages>;

}  // namespace pipetype
