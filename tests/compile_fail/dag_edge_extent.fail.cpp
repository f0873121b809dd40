// expect: pipetype::dag: an edge's producer gives another extent than its consumer takes
// expect: dag_link<2, 1, 2,
// Stage 1 gives 8 floats, and its edge 1 -> 2 (edge 2) goes into a stage that takes 4 (the skip edge 0 -> 2 fits).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
struct wide {  // gives 8 floats
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 8>;
  void forward(const pt::forward_ctx<wide>&) {}
  void backward(const pt::backward_ctx<wide>&) {}
};
pt::dag<pt::nodes<cell, wide, cell>, pt::edges<pt::edge<0, 1>, pt::edge<0, 2>, pt::edge<1, 2>>> model;
int main() { return model.size() > 0 ? 0 : 1; }
