// expect: pipetype::dag: every edge out of a stage is a detached_edge, so no gradient comes back to it
// expect: dag_rejected<pipetype::detail::dag_rule::ungraded, 1>
// Local learning with the losses declared: stage 1 sends its output on over a detached edge only,
// so nothing trains it unless it is a loss itself, and losses<...> names stage 2 alone.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
pt::dag<pt::nodes<cell, cell, cell>, pt::edges<pt::edge<0, 1>, pt::detached_edge<1, 2>>, pt::sources<>,
        pt::losses<2>>
    model;
int main() { return model.size() > 0 ? 0 : 1; }
