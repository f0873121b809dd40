// The twin: the same skip connection over an element type with +=, which pipetype can sum.
#include <pipetype/bind/stage_entry.hpp>
namespace pt = pipetype;
struct cell {
  float v;
  cell& operator+=(const cell& o) {
    v += o.v;
    return *this;
  }
};
struct spread {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<cell, 4>;
  void forward(const pt::forward_ctx<spread>&) {}
  void backward(const pt::backward_ctx<spread>&) {}
};
struct take {
  using input = pt::tensor<cell, 4>;
  using output = pt::tensor<cell, 4>;
  void forward(const pt::forward_ctx<take>&) {}
  void backward(const pt::backward_ctx<take>&) {}
};
pt::dag<pt::nodes<spread, take, take>, pt::edges<pt::edge<0, 1>, pt::edge<1, 2>, pt::edge<0, 2>>> model;
int main() { return pt::entries_of(model).size() == 3 ? 0 : 1; }
