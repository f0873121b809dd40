// expect: pipetype: the executors run chains so far
// A model with a skip connection handed to the executors' binding, which passes each stage's
// output to the next stage only so far.
#include <pipetype/bind/stage_entry.hpp>
namespace pt = pipetype;
struct cell {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<cell>&) {}
  void backward(const pt::backward_ctx<cell>&) {}
};
pt::dag<pt::nodes<cell, cell, cell>, pt::edges<pt::edge<0, 1>, pt::edge<1, 2>, pt::edge<0, 2>>> model;
int main() { return pt::entries_of(model).size() == 3 ? 0 : 1; }
