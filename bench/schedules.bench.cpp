// Every built-in schedule on the MLP of examples/mlp.hpp, on the host executor: the template to
// copy for benchmarking schedules on your own stages (docs/09_pictures.md, "Benchmark your
// stages"). pipetype/bench.hpp registers one benchmark per schedule and size; the counters put
// the measured step next to the simulation under the costs that step measured.
//
//   cmake --preset release && cmake --build --preset release --target bench_schedules
//   ./build/release/bench/bench_schedules --benchmark_filter='mlp/(1f1b|zb-h1)/'
//
// To benchmark your model, replace mlp_workload: make_model cuts your model into `stages`
// stages, batch returns one step's input (and may attach targets to the model).
#include <pipetype/bench.hpp>

#include <span>
#include <vector>

#include "mlp.hpp"

namespace pt = pipetype;

namespace {

struct mlp_workload {
  using model_type = pt::uniform_chain<mlp::stage>;
  mlp::batch data;
  std::vector<double> losses;

  model_type make_model(int stages) { return mlp::make_model(8, stages); }
  std::span<const float> batch(model_type& model, int microbatches) {
    data = mlp::make_batch(microbatches, 0);
    mlp::attach(model, data, losses, microbatches);  // the last stage's targets and losses
    return data.inputs;
  }
  void after_step(model_type& model) {  // the gradients summed over the step, cleared
    for (mlp::stage& s : model.stages()) s.zero_grads();
  }
};

}  // namespace

int main(int argc, char** argv) {
  // sizes: p = 4 with 8 and 16 microbatches, and 16 within 4 activations per rank (GPipe needs
  // 16 and is refused; zb-auto searches within it)
  pt::bench::kit_options o;
  o.sizes = {{4, 8}, {4, 16}, {4, 16, 0, 4}};
  pt::bench::register_schedules<mlp_workload>("mlp", o);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
