// expect: pipetype: a tensor of an edge is varying on one side only
// expect: edge_tensor<false, 0, 0, 1, 0,
// Stage 0 gives a sequence whose length varies per microbatch; stage 1 takes it as fixed.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct a {
  using input = pt::tensor<float, 8>;
  using output = pt::varying<pt::tensor<float, 8>>;
  void forward(const pt::forward_ctx<a>&) {}
  void backward(const pt::backward_ctx<a>&) {}
};
struct b {
  using input = pt::tensor<float, 8>;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<b>&) {}
  void backward(const pt::backward_ctx<b>&) {}
};
pt::chain<a, b> model;
int main() { return model.size() == 2 ? 0 : 1; }
