// The twin of half_split_backward.fail.cpp: both halves spelled right.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct block {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<block>&) {}
  void backward(const pt::backward_ctx<block>&) {}
  void backward_input(const pt::backward_ctx<block>&) {}
  void backward_weight(const pt::backward_ctx<block>&) {}
};
pt::chain<block> model;
int main() { return model.size() == 1 ? 0 : 1; }
