#include <iostream>
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;

// 4 ranks, 8 microbatches, 2 chunks per rank: generated, lowered and verified at compile time
using sched = pt::interleaved_1f1b<pt::ranks<4>, pt::microbatches<8>, pt::chunks<2>>;
constexpr auto plan = pt::make_plan<sched>();
static_assert(plan.peak_activations(0) == 11);  // (v-1)p + 2(p-1) + 1 chunk activations
// and its buffers in bytes, for chunks that pass 1 MiB on and stash 4 MiB per microbatch
constexpr pt::stage_bytes chunk[] = {{.input = 1 << 20, .output = 1 << 20, .stash = 4 << 20}};
static_assert(pt::pools_of(plan, 0, chunk).stashes == 11 * (4 << 20));

// or your own, in PyTorch's notation; a deadlock here would be a compile error naming the place
using mine = pt::from_text<R"(0F0,0F1,0B0,0B1
                              1F0,1B0,1F1,1B1)">;
constexpr auto small = pt::make_plan<mine>();

int main() {
  const auto t = pt::simulate(plan.compute(), pt::costs{.f = 1, .b = 2});
  std::cout << pt::grid(plan.compute(), t)                // see it
            << "bubble " << t.bubble_fraction() << "\n";  // 0.158 (makespan 57)
  for (const pt::lowered_op& op : small.rank_ops(1)) {    /* what the executor issues */
    (void)op;
  }
}
