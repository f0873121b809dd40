// expect: the stage has backward_input but no .void backward_weight\(const pipetype::backward_ctx<S>&\).: a split backward needs both \(is it misspelled\?\)
// A stage with a full backward and a split one whose second half is misspelled would silently
// never split; the chain names the missing half.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct block {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<block>&) {}
  void backward(const pt::backward_ctx<block>&) {}
  void backward_input(const pt::backward_ctx<block>&) {}
  void backward_wieght(const pt::backward_ctx<block>&) {}
};
pt::chain<block> model;
int main() { return model.size() == 1 ? 0 : 1; }
