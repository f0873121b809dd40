// The passing twin of interleaved_microbatches.fail.cpp: 6 microbatches on 3 ranks.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::interleaved_1f1b<pt::ranks<3>, pt::microbatches<6>, pt::chunks<2>>>();
static_assert(plan.stages == 6);
