// expect: pipetype::dag: an edge's producer gives another extent than its consumer takes
// expect: edge_tensor<true, 1, 1, 2, 0,
// The head takes 3 floats over its first incoming edge and 2 over its second; the second tower gives 3.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct tower {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 3>;
  void forward(const pt::forward_ctx<tower>&) {}
  void backward(const pt::backward_ctx<tower>&) {}
};
struct head {
  using inputs = pt::per_edge<pt::tensor<float, 3>, pt::tensor<float, 2>>;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<head>&) {}
  void backward(const pt::backward_ctx<head>&) {}
};
pt::dag<pt::nodes<tower, tower, head>, pt::edges<pt::edge<0, 2>, pt::edge<1, 2>>> model;
int main() { return model.size() > 0 ? 0 : 1; }
