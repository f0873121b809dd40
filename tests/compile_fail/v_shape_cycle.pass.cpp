// The twin: the same V on one communicator per rank pair, with rank 0 running 0F1 before 3F1.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,3F0,3B0,3F1,3B1,0B0,0B1\n"
                                                  "1F0,2F0,1F1,2F1,2B0,1B0,2B1,1B1">,
                                    pt::plan_options{.comms = pt::comm_policy::per_rank_pair}>();
static_assert(plan.stage_rank[0] == 0 && plan.stage_rank[3] == 0 && plan.stage_rank[1] == 1);
static_assert(plan.comms().size() == 1);  // both edges share the one communicator
int main() { return 0; }
