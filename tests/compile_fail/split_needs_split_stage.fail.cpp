// expect: split_schedule_needs_backward_input_and_backward_weight<full_only>
// A compile-time plan whose schedule splits backwards (ZB-H1) cannot run a stage that offers only
// a full backward(): the build stops and names the stage type.
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
  pt::host::executor ex{pt::plan_v<pt::zb_h1<pt::ranks<2>, pt::microbatches<2>>>, model};
  return ex.program().microbatches == 2 ? 0 : 1;
}
