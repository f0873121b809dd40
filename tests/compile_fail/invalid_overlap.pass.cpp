// The passing twin of invalid_overlap.fail.cpp: a forward overlapped with a backward.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,(0F1;0B0),0B1">>();
static_assert(plan.compute().actions[1].overlapped);
