// expect: _INVALID_LANES_>, pipetype::
// expect: "lanes must be positive and divide both the stages and the microbatches"
// expect: "use a lane count of at least 1 that divides both the stages and the microbatches"
// expect: in_schedule<pipetype::from_text<?
// Four lanes cannot split a two-stage graph: a compile error naming the category (not a crash in
// the constant evaluation).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"lanes 4\n0F0,0B0\n1F0,1B0">>();
