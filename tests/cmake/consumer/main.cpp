// A consumer's first program: a compile-time plan, checked and simulated.
#include <pipetype/pipetype.hpp>

#include <iostream>

namespace pt = pipetype;

constexpr auto plan = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
static_assert(plan.peak_activations(0) == 4);

int main() {
  const auto t = pt::simulate(plan.compute(), pt::costs{.f = 1, .b = 2});
  std::cout << pt::grid(plan.compute(), t);
  return t.makespan() == 33 ? 0 : 1;
}
