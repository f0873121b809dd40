// expect: _BAD_EXTENT_>, pipetype::
// expect: "the schedule\\?'s extent\(\) is smaller than the program it generates"
// expect: "make the schedule\\?'s extent\(\) count every rank, stage and action generate\(\) returns, and say if it splits"
// expect: in_schedule<short_extent<?
// A schedule type whose extent() says fewer actions than generate() returns: make_plan sized its
// tables from the extent, so the plan is refused with a category of its own.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct short_extent {
  static constexpr pt::program generate() { return pt::make_one_f_one_b(2, 2); }
  static constexpr pt::program_extent extent() { return {2, 2, 2, 6, 1}; }  // 8 actions in fact
};
constexpr auto plan = pt::make_plan<short_extent>();
