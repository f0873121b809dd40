// expect: _NCCL_DEADLOCK_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<0>, pipetype::at_op<2>, pipetype::
// expect: "each NCCL send or receive blocks its rank\\?'s one communication stream until its partner is reached \(FIFO per peer\), and this one\\?'s partner never is"
// expect: "post both ends of every transfer in matching groups, and every communicator\\?'s collectives, in the same order on every rank"
// expect: in_schedule<pipetype::from_text<?
// A rejected compute+comms schedule (PyTorch's format): rank 0's stream blocks in 0RECV_B0
// (its action 2) before it sends 0F0, which rank 1 needs before it can send that gradient back.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan =
    pt::make_plan<pt::from_text<"0F0,0F1,0RECV_B0,0SEND_F0,0SEND_F1,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1\n"
                                "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1">>();
