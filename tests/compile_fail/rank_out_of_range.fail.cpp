// expect: _RANK_OUT_OF_RANGE_>, pipetype::at_rank<2>, pipetype::
// expect: "an action was added to a rank outside .0, ranks\)"
// expect: "select a rank with rank\(r\) for 0 <= r < ranks before adding actions"
// A rejected schedule: a two-rank program with actions added to rank 2.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr pt::program bad() {
  pt::program_builder b{2, 2, 1};
  b.rank(0).add(pt::F(0, 0)).add(pt::B(0, 0));
  b.rank(2).add(pt::F(1, 0)).add(pt::B(1, 0));
  return std::move(b).build();
}
constexpr auto plan = pt::make_plan<pt::from_function<bad>>();
