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

#include <cstddef>
#include <type_traits>
#include <utility>

#include "pipetype/core/verdict.hpp"
#include "pipetype/detail/fixed_string.hpp"

namespace pipetype {

// ---- the compile-time form ---------------------------------------------------------------

// One tag type per code of the error table (core/verdict.hpp): what<_MISSING_ACTION_> names the category.
#define PIPETYPE_ERRC_TAG_TYPE(code, tag, name, advice) \
  struct tag {};
PIPETYPE_ERRORS(PIPETYPE_ERRC_TAG_TYPE)
#undef PIPETYPE_ERRC_TAG_TYPE

template <class What>
struct what {};
template <int R>
struct at_rank {};
template <int S>
struct at_stage {};
template <int M>
struct at_microbatch {};
template <char Kind, int... Index>  // the index in the rank's list, where the action is there
struct at_action {};
template <int Index>  // a lowered op's index in its rank's list (it is no compute action)
struct at_op {};
template <int Line, int Column>
struct at_line_column {};
template <detail::fixed_string Reason>
struct because {};
template <detail::fixed_string Advice>
struct to_fix {};
template <class Schedule>
struct in_schedule {};
/// One link of a deadlock's wait-for cycle: the rank, the action it stopped at (kind, index),
/// the action it needs (stage, kind, microbatch: needs<1, 'B', 0> is 1B0) and who runs that.
template <int Stage, char Kind, int Microbatch>
struct needs {};
template <int R>
struct from_rank {};
template <class AtRank, class AtAction, class Needs, class FromRank>
struct rank_waits {};
template <class... Links>
struct wait_for_cycle {};

/// The type a rejected schedule is reported as.
template <class... Facts>
struct error {};

namespace detail {

/// The tag type of code E (void for ok), from the error table.
template <errc E>
struct errc_tag;
template <>
struct errc_tag<errc::ok> {
  using type = void;
};
#define PIPETYPE_ERRC_TAG(code, tag, name, advice) \
  template <>                                      \
  struct errc_tag<errc::code> {                    \
    using type = tag;                              \
  };
PIPETYPE_ERRORS(PIPETYPE_ERRC_TAG)
#undef PIPETYPE_ERRC_TAG

/// Append Fact to error<...> E when Keep.
template <class E, bool Keep, class Fact>
struct add_fact {
  using type = E;
};
template <class... Facts, class Fact>
struct add_fact<error<Facts...>, true, Fact> {
  using type = error<Facts..., Fact>;
};
template <class E, bool Keep, class Fact>
using add_fact_t = typename add_fact<E, Keep, Fact>::type;

constexpr std::size_t length(const char* s) {
  std::size_t n = 0;
  while (s && s[n]) ++n;
  return n;
}

/// A static string known as a pointer (`Holder::text`), as a template argument.
template <class Holder>
constexpr auto string_of() {
  using string = fixed_string<length(Holder::text) + 1>;
  return string(Holder::text, typename string::from_pointer{});
}

template <errc E>
struct advice {
  static constexpr const char* text = how_to_fix(E);
};

template <class Planner>
struct reason {
  static constexpr const char* text = Planner::value.rejection.detail;
};

template <class Planner, std::size_t... I>
constexpr auto cycle_of(std::index_sequence<I...>) {
  constexpr const verdict& V = Planner::value.rejection;
  return wait_for_cycle<rank_waits<at_rank<V.cycle[I].rank>, at_action<V.cycle[I].at_kind, V.cycle[I].index>,
                                   needs<V.cycle[I].needs_stage, V.cycle[I].needs_kind, V.cycle[I].needs_microbatch>,
                                   from_rank<V.cycle[I].from>>...>{};
}

/// The error<...> type of the failing verdict of `Planner::value` (a static_plan), schedule S:
/// the category, then only the places that apply, the reason, a deadlock's cycle, how to fix it
/// and the schedule. (The plan is passed as a type: clang 14 takes no reference to a subobject
/// as a template argument.)
template <class Planner, class S>
struct error_of {
  static constexpr verdict V = Planner::value.rejection;
  using what_t = error<what<typename errc_tag<V.code>::type>>;
  // each place only where it applies: a flag per fact, then the facts appended in order
  static constexpr bool parse = V.code == errc::parse_error;
  static constexpr bool has_rank = V.rank != -1 || V.code == errc::rank_out_of_range;
  static constexpr bool has_stage = V.stage >= 0, has_microbatch = V.microbatch >= 0;
  static constexpr bool has_action = V.kind != '?', has_index = V.index >= 0;
  using ranked_t = add_fact_t<what_t, has_rank, at_rank<V.rank>>;
  using staged_t =
      add_fact_t<add_fact_t<ranked_t, has_stage, at_stage<V.stage>>, has_microbatch, at_microbatch<V.microbatch>>;
  using acted_t = add_fact_t<add_fact_t<staged_t, has_action && has_index, at_action<V.kind, V.index>>,
                             has_action && !has_index, at_action<V.kind>>;
  using placed_t = std::conditional_t<parse, add_fact_t<what_t, true, at_line_column<V.line, V.column>>, acted_t>;
  using op_t = add_fact_t<placed_t, !has_action && has_index && !parse, at_op<V.index>>;
  static constexpr int links = V.cycle_length < max_cycle ? V.cycle_length : max_cycle;
  using reasoned_t = add_fact_t<op_t, (V.detail && *V.detail), because<string_of<reason<Planner>>()>>;
  using cycled_t = add_fact_t<reasoned_t, (links > 0),
                              decltype(cycle_of<Planner>(std::make_index_sequence<static_cast<std::size_t>(links)>{}))>;
  using type = add_fact_t<add_fact_t<cycled_t, true, to_fix<string_of<advice<V.code>>()>>, true, in_schedule<S>>;
};

#if defined(__clang__)
// clang 14 prints class template arguments' characters as numbers: a call it cannot evaluate
// makes it print the two sentences as string literals ("in call to 'rejected_because(&"..."[0], ...)'").
void the_schedule_was_rejected(const char* because, const char* to_fix);
constexpr bool rejected_because(const char* because, const char* to_fix) {
  if (because == nullptr) return false;  // (a path that is a constant expression, as C++ asks)
  the_schedule_was_rejected(because, to_fix);
  return false;
}
#endif

template <class E>
inline constexpr bool always_false_v = false;

/// Instantiated only for a rejected schedule; the failing assertion names E.
template <class E>
struct report {
  static_assert(always_false_v<E>,
                "pipetype: the schedule was rejected; the error<what<...>, at_rank<...>, ...> type in "
                "this instantiation names what went wrong and where");
};

/// Reports `Planner::value.rejection` (a verdict), if it is not ok, as the compile error
/// error_of<Planner, S> names, and says its sentences under clang; the facts of a plan over a
/// plan (mesh_plan, memory_plan) go through here.
template <class Planner, class S>
constexpr void report_rejection() {
  if constexpr (Planner::value.rejection.code != errc::ok) {
    (void)report<typename error_of<Planner, S>::type>{};
#if defined(__clang__)
    constexpr bool shown = rejected_because(Planner::value.rejection.detail, how_to_fix(Planner::value.rejection.code));
    (void)shown;
#endif
  }
}

}  // namespace detail
}  // namespace pipetype
