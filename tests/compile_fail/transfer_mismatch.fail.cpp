// expect: _TRANSFER_MISMATCH_>, pipetype::at_rank<1>, pipetype::at_stage<1>, pipetype::at_microbatch<1>, pipetype::at_op<0>, pipetype::
// expect: "NCCL pairs sends and receives per peer in issue order, and this receive meets a send of another datum"
// expect: "issue the sends and receives of each channel in the same order at both ends"
// expect: in_schedule<pipetype::from_text<?
// A rejected compute+comms schedule: rank 1 posts the receive of 0F1 first, but rank 0 sends 0F0
// first, and NCCL pairs a channel's sends and receives in issue order, so the first receive
// would be handed the other microbatch's activation.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                                  "1RECV_F1,1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1">>();
