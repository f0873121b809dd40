// pipetype/compile/diagnostics.hpp — a rejected schedule as a type.
//
// A check returns a `verdict` (core/verdict.hpp), described at run time as one sentence. At
// compile time `make_plan` turns a failing verdict into the type
//
//   pipetype::error<what<_MISSING_ACTION_>, at_rank<1>, at_stage<1>, at_microbatch<3>,
//                   at_action<'B', -1>>
//
// and fails a static_assert inside `report<that type>`, so the compiler prints the sentence.
// (The shouting names follow stdexec's diagnostics: they stand out in a wall of template text.)
#pragma once

#include <type_traits>

#include "pipetype/core/verdict.hpp"

namespace pipetype {

// ---- the compile-time form ---------------------------------------------------------------

// clang-format off
struct _EMPTY_PROGRAM_ {};           struct _RANK_OUT_OF_RANGE_ {};
struct _INDEX_OUT_OF_RANGE_ {};      struct _STAGE_ON_TWO_RANKS_ {};
struct _MISSING_ACTION_ {};          struct _DUPLICATE_ACTION_ {};
struct _MIXED_BACKWARD_ {};          struct _BACKWARD_BEFORE_FORWARD_ {};
struct _ACTION_BEFORE_ITS_INPUT_ {}; struct _INVALID_OVERLAP_ {};
struct _CROSS_RANK_DEADLOCK_ {};     struct _MEMORY_LIMIT_EXCEEDED_ {};
struct _PARSE_ERROR_ {};             struct _TRANSFER_MISMATCH_ {};
struct _NCCL_DEADLOCK_ {};           struct _EVENT_MISUSE_ {};
struct _INVALID_LANES_ {};          struct _BAD_EXTENT_ {};
struct _TOO_LARGE_ {};
// clang-format on

template <class What>
struct what {};
template <int R>
struct at_rank {};
template <int S>
struct at_stage {};
template <int M>
struct at_microbatch {};
template <char Kind, int Index>
struct at_action {};
template <int Line, int Column>
struct at_line_column {};

/// The type a rejected schedule is reported as.
template <class... Facts>
struct error {};

namespace detail {

template <errc E>
struct errc_tag;
template <>
struct errc_tag<errc::ok> {
  using type = void;
};
template <>
struct errc_tag<errc::empty_program> {
  using type = _EMPTY_PROGRAM_;
};
template <>
struct errc_tag<errc::rank_out_of_range> {
  using type = _RANK_OUT_OF_RANGE_;
};
template <>
struct errc_tag<errc::index_out_of_range> {
  using type = _INDEX_OUT_OF_RANGE_;
};
template <>
struct errc_tag<errc::stage_on_two_ranks> {
  using type = _STAGE_ON_TWO_RANKS_;
};
template <>
struct errc_tag<errc::missing_action> {
  using type = _MISSING_ACTION_;
};
template <>
struct errc_tag<errc::duplicate_action> {
  using type = _DUPLICATE_ACTION_;
};
template <>
struct errc_tag<errc::mixed_backward> {
  using type = _MIXED_BACKWARD_;
};
template <>
struct errc_tag<errc::backward_before_forward> {
  using type = _BACKWARD_BEFORE_FORWARD_;
};
template <>
struct errc_tag<errc::action_before_its_input> {
  using type = _ACTION_BEFORE_ITS_INPUT_;
};
template <>
struct errc_tag<errc::invalid_overlap> {
  using type = _INVALID_OVERLAP_;
};
template <>
struct errc_tag<errc::cross_rank_deadlock> {
  using type = _CROSS_RANK_DEADLOCK_;
};
template <>
struct errc_tag<errc::memory_limit_exceeded> {
  using type = _MEMORY_LIMIT_EXCEEDED_;
};
template <>
struct errc_tag<errc::parse_error> {
  using type = _PARSE_ERROR_;
};
template <>
struct errc_tag<errc::transfer_mismatch> {
  using type = _TRANSFER_MISMATCH_;
};
template <>
struct errc_tag<errc::nccl_deadlock> {
  using type = _NCCL_DEADLOCK_;
};
template <>
struct errc_tag<errc::event_misuse> {
  using type = _EVENT_MISUSE_;
};
template <>
struct errc_tag<errc::invalid_lanes> {
  using type = _INVALID_LANES_;
};
template <>
struct errc_tag<errc::bad_extent> {
  using type = _BAD_EXTENT_;
};
template <>
struct errc_tag<errc::too_large> {
  using type = _TOO_LARGE_;
};

template <errc Code, int Rank, int Stage, int Mb, char Kind, int Index, int Line, int Column>
using error_for_t = std::conditional_t<Code == errc::parse_error,
                                       error<what<typename errc_tag<Code>::type>, at_line_column<Line, Column>>,
                                       error<what<typename errc_tag<Code>::type>, at_rank<Rank>, at_stage<Stage>,
                                             at_microbatch<Mb>, at_action<Kind, Index>>>;

template <class E>
inline constexpr bool always_false_v = false;

/// Instantiated only for a rejected schedule; the failing assertion names E.
template <class E>
struct report {
  static_assert(always_false_v<E>,
                "pipetype: the schedule was rejected; the error<what<...>, at_rank<...>, ...> type in "
                "this instantiation names what went wrong and where");
};

}  // namespace detail
}  // namespace pipetype
