// expect: the stage has weight_gradients\(\) or add_weight_grad\(\) but no .using weight_grad = pipetype::tensor<T, N>;.
// A stage that means to hand its weight gradients to pipetype but misspells `weight_grad` would
// be taken for one that accumulates its own; the chain says what is missing.
#include <pipetype/pipetype.hpp>
#include <span>
namespace pt = pipetype;
struct block {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using weight_grads = pt::tensor<float, 2>;
  float acc[2] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<block>&) {}
  void backward(const pt::backward_ctx<block>&) {}
};
pt::chain<block> model;
int main() { return model.size() == 1 ? 0 : 1; }
