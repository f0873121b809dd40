// expect: pipetype::dag: a stage is not reached from any source
// expect: dag_rejected<pipetype::detail::dag_rule::unreached, 2>
// Two towers into a head, but only tower 0 is declared a source: nothing feeds stage 2.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
pt::dag<pt::nodes<cell, cell, cell, cell, cell>,
        pt::edges<pt::edge<0, 1>, pt::edge<2, 3>, pt::edge<1, 4>, pt::edge<3, 4>>, pt::sources<0>>
    model;
int main() { return model.size() > 0 ? 0 : 1; }
