// expect: pipetype::stage: the stage has no .void backward\(const pipetype::backward_ctx<S>&\).
// A "stage" with no backward is not a pipetype::stage: a chain of it does not compile, and the
// error names the member that is missing.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct a {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<a>&) {}
};
pt::chain<a> model;
int main() { return model.size() == 1 ? 0 : 1; }
