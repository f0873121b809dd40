// The passing twin of mixed_backward.fail.cpp: only the split.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0I0,0W0">>();
static_assert(plan.compute().actions.size() == 3);
