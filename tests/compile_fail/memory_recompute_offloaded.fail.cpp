// expect: _MEMORY_ACTION_MISPLACED_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>
// expect: "a RECOMPUTE of a forward whose input is offloaded \(RELOAD it first\)"
// Rank 0 recomputes 0F0 while its input is on the host.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::from_text<"0F0,0OFFLOAD0,0F1,0F2,0RECOMPUTE0,0B0,0B1,0B2">;
constexpr auto facts = pt::make_memory_plan<S>();
