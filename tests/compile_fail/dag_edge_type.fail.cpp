// expect: pipetype::dag: an edge's producer gives another element type than its consumer takes
// expect: dag_link<0, 0, 2,
// A tower of ints (stage 0) feeding a head of floats (stage 2).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
struct ints {  // gives 4 ints
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<int, 4>;
  void forward(const pt::forward_ctx<ints>&) {}
  void backward(const pt::backward_ctx<ints>&) {}
};
pt::dag<pt::nodes<ints, cell, cell>, pt::edges<pt::edge<0, 2>, pt::edge<1, 2>>> model;
int main() { return model.size() > 0 ? 0 : 1; }
