// The passing twin of transfer_deadlock.fail.cpp: rank 0 sends both activations before it
// receives, and rank 1 receives both before it sends, so every send meets its receive. PyTorch's
// compute+comms notation, markers and send waits included (a file torch 2.15 loads as it stands).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<
    pt::from_text<"0UNSHARD,0F0,0F1,0SEND_F0,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1\n"
                  "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1WAIT_SEND_B0,"
                  "1WAIT_SEND_B1">>();
static_assert(plan.ranks == 2 && plan.microbatches == 2);
