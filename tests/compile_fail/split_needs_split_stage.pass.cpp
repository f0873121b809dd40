// The twin: the same stage runs a schedule that keeps backwards whole (1F1B).
#include <pipetype/host.hpp>
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
struct full_only {
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  void forward(const pt::forward_ctx<full_only>&) {}
  void backward(const pt::backward_ctx<full_only>&) {}
};
int main() {
  pt::chain<full_only, full_only> model;
  pt::host::executor ex{pt::plan_v<pt::one_f_one_b<pt::ranks<2>, pt::microbatches<2>>>, model};
  return ex.program().microbatches == 2 ? 0 : 1;
}
