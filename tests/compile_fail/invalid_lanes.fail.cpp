// expect: _INVALID_LANES_>
// Four lanes cannot split a two-stage graph: a compile error naming the category (not a crash in
// the constant evaluation).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"lanes 4\n0F0,0B0\n1F0,1B0">>();
