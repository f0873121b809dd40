// expect: (template constraint failure for .*requires \(\.\.\. && stage<S>\) class pipetype::chain|constraints not satisfied for class template .chain.*does not satisfy .stage.)
// A "stage" with no backward is not a pipetype::stage, so a chain of it does not compile.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct a {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<a>&) {}
};
pt::chain<a> model;
int main() { return model.size() == 1 ? 0 : 1; }
