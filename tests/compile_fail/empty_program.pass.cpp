// The passing twin of empty_program.fail.cpp: one rank, one stage, one microbatch.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_function<[] {
  pt::program_builder b{1, 1, 1};
  b.rank(0).add(pt::F(0, 0)).add(pt::B(0, 0));
  return std::move(b).build();
}>>();
static_assert(plan.compute().actions.size() == 2);
