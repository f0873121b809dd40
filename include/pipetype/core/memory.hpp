// pipetype/core/memory.hpp — how actions change a rank's live activations.
//
// Units: `unit` per microbatch activation of one stage (two by default, as in the zero-bubble
// paper's accounting, so that I and W can each release half of one). F adds `f`, B adds `b`,
// I adds `i`, W adds `w`; the running sum over a rank's list is its activation count and its
// maximum the rank's peak. verify (compile/), simulate (analysis/) and zb_auto (schedules/) all
// count in this model, so it sits below them. Over a stage graph (program.hpp's edges), a stage
// with k inputs holds k activations per microbatch (each input it read, until its backward lets
// them go): its F, B, I and W count k times.
#pragma once

#include "pipetype/core/action.hpp"

namespace pipetype {

struct memory_model {
  int f = 2;
  int b = -2;
  int i = -1;
  int w = -1;
  int unit = 2;  // units per microbatch activation of one stage

  constexpr int delta(kind k) const noexcept {
    switch (k) {
      case kind::F:
        return f;
      case kind::B:
        return b;
      case kind::I:
        return i;
      case kind::W:
        return w;
    }
    return 0;
  }
};

/// A stage's stash as the executors keep it: whole from F to the last backward of its microbatch
/// (an I's working values stay in it for the W), so an I releases nothing. What a step's stash
/// pools count in (mesh/memory_slots.hpp).
inline constexpr memory_model stash_model{1, -1, 0, -1, 1};

namespace detail {
/// "Not yet" / "never" in tick and unit arithmetic (large, but far from overflow when added to).
inline constexpr int never = 1 << 30;
}  // namespace detail

}  // namespace pipetype
