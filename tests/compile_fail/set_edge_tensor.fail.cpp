// expect: pipetype::dag: an edge's producer gives another element type than its consumer takes
// expect: edge_tensor<true, 1, 1, 2, 1,
// Edge 1 (1 -> 2) carries a set whose second tensor is int32 on the producer's side, int64 on the consumer's.
#include <cstdint>
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
using pair32 = pt::tensors<pt::tensor<float, 4>, pt::no_grad<pt::tensor<std::int32_t, 4>>>;
using pair64 = pt::tensors<pt::tensor<float, 4>, pt::no_grad<pt::tensor<std::int64_t, 4>>>;
struct src {
  using input = pt::tensor<float, 4>;
  using output = pair64;
  void forward(const pt::forward_ctx<src>&) {}
  void backward(const pt::backward_ctx<src>&) {}
};
struct src32 {
  using input = pt::tensor<float, 4>;
  using output = pair32;
  void forward(const pt::forward_ctx<src32>&) {}
  void backward(const pt::backward_ctx<src32>&) {}
};
struct head {
  using input = pair64;
  using output = pt::tensor<float, 1>;
  void forward(const pt::forward_ctx<head>&) {}
  void backward(const pt::backward_ctx<head>&) {}
};
pt::dag<pt::nodes<src, src32, head>, pt::edges<pt::edge<0, 2>, pt::edge<1, 2>>> model;
int main() { return model.size() > 0 ? 0 : 1; }
