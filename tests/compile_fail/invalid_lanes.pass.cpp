// The twin: two lanes of one stage each, microbatch 0 through lane 0 and microbatch 1 through lane 1.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"lanes 2\n0F0,0B0\n1F1,1B1">>();
static_assert(plan.lanes == 2 && plan.stage_rank[1] == 1);
int main() { return 0; }
