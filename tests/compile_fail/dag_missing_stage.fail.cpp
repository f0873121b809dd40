// expect: pipetype::dag: an edge names a stage that does not exist
// expect: dag_rejected<pipetype::detail::dag_rule::edge_to_missing_stage, 4>
// An edge to stage 4 of a four-stage graph (stages 0 to 3).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
pt::dag<pt::nodes<cell, cell, cell, cell>, pt::edges<pt::edge<0, 1>, pt::edge<1, 2>, pt::edge<2, 3>, pt::edge<1, 4>>>
    model;
int main() { return model.size() > 0 ? 0 : 1; }
