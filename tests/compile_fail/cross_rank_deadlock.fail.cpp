// expect: _CROSS_RANK_DEADLOCK_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>, pipetype::at_action<'B', 1>
// A rejected schedule: rank 0 waits for 1B0 before it sends 0F1, rank 1 waits for 0F1
// before it runs 1B0.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1">>();
