// expect: _INDEX_OUT_OF_RANGE_>, pipetype::at_rank<0>, pipetype::at_stage<0>, pipetype::at_microbatch<2>, pipetype::at_action<'F', 2>, pipetype::
// expect: "microbatch out of range"
// expect: "name only stages and microbatches below the program\\?'s counts, and each microbatch on its own lane"
// expect: in_schedule<pipetype::from_function<?
// A rejected schedule: the builder declares 2 microbatches, rank 0 runs microbatch 2.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr pt::program bad() {
  pt::program_builder b{1, 1, 2};
  b.rank(0).add(pt::F(0, 0)).add(pt::F(0, 1)).add(pt::F(0, 2)).add(pt::B(0, 0)).add(pt::B(0, 1));
  return std::move(b).build();
}
constexpr auto plan = pt::make_plan<pt::from_function<bad>>();
