// The twin: both sides say the sequence varies.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct a {
  using input = pt::tensor<float, 8>;
  using output = pt::varying<pt::tensor<float, 8>>;
  void forward(const pt::forward_ctx<a>&) {}
  void backward(const pt::backward_ctx<a>&) {}
};
struct b {
  using input = pt::varying<pt::tensor<float, 8>>;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<b>&) {}
  void backward(const pt::backward_ctx<b>&) {}
};
pt::chain<a, b> model;
int main() { return model.size() == 2 ? 0 : 1; }
