// The passing twin of transfer_mismatch.fail.cpp: rank 1 receives the activations in the order
// rank 0 sends them.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                                  "1RECV_F0,1RECV_F1,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1">>();
static_assert(plan.ranks == 2 && plan.microbatches == 2);
