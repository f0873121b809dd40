// The twin: a split backward (I and W) makes it a stage.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct a {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<a>&) {}
  void backward_input(const pt::backward_ctx<a>&) {}
  void backward_weight(const pt::backward_ctx<a>&) {}
};
pt::chain<a> model;
int main() { return model.size() == 1 ? 0 : 1; }
