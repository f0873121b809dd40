// The twin of misspelled_weight_grad.fail.cpp: spelled right, pipetype adds the gradients.
#include <pipetype/pipetype.hpp>
#include <span>
namespace pt = pipetype;
struct block {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using weight_grad = pt::tensor<float, 2>;
  float acc[2] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<block>&) {}
  void backward(const pt::backward_ctx<block>&) {}
};
pt::chain<block> model;
int main() { return model.size() == 1 ? 0 : 1; }
