// expect: _CROSS_RANK_DEADLOCK_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>, pipetype::at_action<'B', 1>, pipetype::
// expect: "ranks wait on each other in a cycle"
// expect: pipetype::rank_waits<pipetype::at_rank<0>, pipetype::at_action<'B', 1>, pipetype::needs<1, 'B', 0>, pipetype::from_rank<1> ?>, pipetype::rank_waits<pipetype::at_rank<1>, pipetype::at_action<'F', 1>, pipetype::needs<0, 'F', 1>, pipetype::from_rank<0> ?>
// expect: "reorder one rank of the cycle so that it runs the awaited action before the one it waits at"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: rank 0 waits for 1B0 before it sends 0F1, rank 1 waits for 0F1
// before it runs 1B0.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1">>();
