// expect: _MEMORY_ACTION_MISPLACED_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>
// expect: "a RELOAD before its OFFLOAD"
// Memory actions written by hand: rank 0 reloads 0F0's activation before offloading it.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using S = pt::from_text<"0F0,0F1,0RELOAD0,0OFFLOAD0,0B0,0B1">;
constexpr auto facts = pt::make_memory_plan<S>();
