// pipetype/core/action.hpp — the unit of work of a schedule.
//
// An action is {kind, stage, microbatch}. Kinds follow PyTorch's pipelining notation:
//   F  forward                      B  full backward (input and weight gradients)
//   I  backward for inputs only     W  backward for weights only (after I)
// The text form is `<stage><kind><microbatch>`: `2F0`, `3I1`, `0W5`. Two actions that run
// overlapped on one rank (DualPipe's F&B pair) are written `(0F7;7B3)`; in a program the first
// of the two carries `overlapped = true` and the second follows it directly.
#pragma once

#include <cstdint>

namespace pipetype {

enum class kind : std::uint8_t { F, B, I, W };

inline constexpr int kind_count = 4;

constexpr char kind_char(kind k) noexcept {
  switch (k) {
    case kind::F:
      return 'F';
    case kind::B:
      return 'B';
    case kind::I:
      return 'I';
    case kind::W:
      return 'W';
  }
  return '?';
}

/// True for the actions that produce the gradient with respect to the stage input (B and I):
/// the ones a previous stage waits for.
constexpr bool is_input_backward(kind k) noexcept { return k == kind::B || k == kind::I; }

struct action {
  kind what = kind::F;
  int stage = 0;
  int microbatch = 0;
  /// Runs together with the next action of the same rank (an overlapped F&B pair).
  bool overlapped = false;

  friend constexpr bool operator==(const action&, const action&) = default;
};

constexpr action F(int stage, int mb) noexcept { return {kind::F, stage, mb, false}; }
constexpr action B(int stage, int mb) noexcept { return {kind::B, stage, mb, false}; }
constexpr action I(int stage, int mb) noexcept { return {kind::I, stage, mb, false}; }
constexpr action W(int stage, int mb) noexcept { return {kind::W, stage, mb, false}; }

}  // namespace pipetype
