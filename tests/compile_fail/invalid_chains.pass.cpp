// The twin: two chains of one stage each, microbatch 0 through chain 0 and microbatch 1 through chain 1.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"chains 2\n0F0,0B0\n1F1,1B1">>();
static_assert(plan.chains == 2 && plan.stage_rank[1] == 1);
int main() { return 0; }
