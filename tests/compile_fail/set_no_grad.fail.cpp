// expect: pipetype: a tensor of an edge is no_grad on one side only
// expect: edge_tensor<false, 0, 0, 1, 1,
// Stage 0 gives hidden states and ids, the ids marked no_grad; stage 1 takes them with a gradient.
#include <cstdint>
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct a {
  using input = pt::tensor<float, 4>;
  using output = pt::tensors<pt::tensor<float, 4>, pt::no_grad<pt::tensor<std::int32_t, 4>>>;
  void forward(const pt::forward_ctx<a>&) {}
  void backward(const pt::backward_ctx<a>&) {}
};
struct b {
  using input = pt::tensors<pt::tensor<float, 4>, pt::tensor<std::int32_t, 4>>;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<b>&) {}
  void backward(const pt::backward_ctx<b>&) {}
};
pt::chain<a, b> model;
int main() { return model.size() == 2 ? 0 : 1; }
