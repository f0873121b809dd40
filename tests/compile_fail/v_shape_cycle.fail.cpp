// expect: _CROSS_RANK_DEADLOCK_>, pipetype::at_rank<0>, pipetype::at_stage<3>, pipetype::at_microbatch<1>, pipetype::at_action<'F', 1>, pipetype::
// expect: "ranks wait on each other in a cycle"
// expect: pipetype::rank_waits<pipetype::at_rank<0>, pipetype::at_action<'F', 1>, pipetype::needs<2, 'F', 1>, pipetype::from_rank<1> ?>, pipetype::rank_waits<pipetype::at_rank<1>, pipetype::at_action<'F', 2>, pipetype::needs<0, 'F', 1>, pipetype::from_rank<0> ?>
// expect: "reorder one rank of the cycle so that it runs the awaited action before the one it waits at"
// expect: in_schedule<pipetype::from_text<?
// A V-shape schedule (rank 0 holds stages 0 and 3, rank 1 stages 1 and 2) whose two edges between
// the same pair of ranks form a cycle: rank 0 waits for 2F1 (edge 2 -> 3, up the V) before it
// runs 0F1, which rank 1 needs (edge 0 -> 1, down the V) before it can produce 2F1. Sharing one
// NCCL communicator for both edges, a runtime would hang here; pipetype rejects it at compile time
// (pipetype's own lowering orders every group the same way on both ends, so V plans stay safe
// even on one communicator per rank pair: tests/schedules/zb_v and dualpipe_v check both policies).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,3F1,0F1,3F0,3B0,3B1,0B0,0B1\n"
                                                  "1F0,2F0,1F1,2F1,2B0,1B0,2B1,1B1">,
                                    pt::plan_options{.comms = pt::comm_policy::per_rank_pair}>();
