// The twin: stage 1 is declared a loss too (it computes its own), and its output still feeds stage 2.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
pt::dag<pt::nodes<cell, cell, cell>, pt::edges<pt::edge<0, 1>, pt::detached_edge<1, 2>>, pt::sources<>,
        pt::losses<1, 2>>
    model;
static_assert(pt::is_chain(decltype(model)::topology()) == false);
int main() { return model.size() > 0 ? 0 : 1; }
