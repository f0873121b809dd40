// The twin of swapped_sizes.fail.cpp: the tags in their order compile.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using ordered = pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>;
constexpr auto plan = pt::make_plan<ordered>();
static_assert(plan.ranks == 4 && plan.microbatches == 8);
int main() {}
