// The passing twin of backward_before_forward.fail.cpp: forward first.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,0B1,0B0\n1F0,1F1,1B1,1B0">>();
static_assert(plan.compute().actions.size() == 8);
