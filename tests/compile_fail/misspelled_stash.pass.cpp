// The twin of misspelled_stash.fail.cpp: spelled right, the stash is there.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct block {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using stash = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<block>& c) {
    for (std::size_t i = 0; i < 4; ++i) c.stash[i] = c.input[i];
  }
  void backward(const pt::backward_ctx<block>&) {}
};
pt::chain<block> model;
int main() { return model.size() == 1 ? 0 : 1; }
