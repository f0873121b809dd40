// The twin of too_large.fail.cpp: the same shape of file within the limits compiles (it fails
// other checks at run time only when asked; here a complete two-stage program).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using small = pt::from_text<"0F0,0B0\n1F0,1B0">;
constexpr auto plan = pt::make_plan<small>();
static_assert(plan.stages == 2);
int main() {}
