// expect: this stage writes its stash but declares none: add .using stash = pipetype::tensor<T, N...>;. \(is it misspelled\?\)
// A stage whose `stash` is misspelled (`stach`) would get an empty stash span and write past
// it; writing to the stash it did not declare is a compile error that says so.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct block {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using stach = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<block>& c) {
    for (std::size_t i = 0; i < 4; ++i) c.stash[i] = c.input[i];
  }
  void backward(const pt::backward_ctx<block>&) {}
};
pt::chain<block> model;
int main() { return model.size() == 1 ? 0 : 1; }
