// What issuing one rank's step through the device executor costs on the host, next to a
// hand-written sequence of the same driver calls.
//
//   ./build/release/bench/bench_cuda_issue
//
// The driver counts its calls and does nothing else (a CUDA driver's calls enqueue work
// asynchronously; their own cost is the same in both rows, so it is left out). BM_executor_step:
// rank_executor::step, the bound issue list walked in lowered order. BM_hand_written: the same
// calls, read from a flat array recorded from one step (the least any issuing code could do
// short of compiling the schedule into straight-line code), the stage calls through the same
// function pointers. The target: executor ≤ 1.05 × hand-written (`ratio` in the note
// comes from one run of both).
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/record.hpp>
#include <pipetype/pipetype.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace pt = pipetype;
namespace pc = pipetype::cuda;

namespace {

struct quiet {
  using input = pt::tensor<float, 16>;
  using output = pt::tensor<float, 16>;
  void forward(const pt::forward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.input.data()); }
  void backward(const pt::backward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.grad_output.data()); }
  void backward_input(const pt::backward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.grad_output.data()); }
  void backward_weight(const pt::backward_ctx<quiet>& c) { benchmark::DoNotOptimize(c.input.data()); }
};

// Counts calls; every argument goes through DoNotOptimize so nothing is folded away.
struct counting_driver {
  using stream = int;
  using event = int;
  using comm = int;
  std::uint64_t calls = 0;
  std::vector<std::vector<std::byte>> blocks;
  void* allocate(std::size_t n) {
    blocks.emplace_back(n ? n : 1);
    return blocks.back().data();
  }
  stream make_stream() { return streams++; }
  event make_event() { return events++; }
  void* native(stream s) const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(s) + 1); }
  void record(event e, stream s) { note(e, s); }
  void wait(stream s, event e) { note(e, s); }
  void group_start() { ++calls; }
  void group_end() { ++calls; }
  void send(const void* p, std::size_t n, int peer, comm c, stream s) { note(p, n, peer, c, s); }
  void recv(void* p, std::size_t n, int peer, comm c, stream s) { note(p, n, peer, c, s); }
  template <class... A>
  void note(const A&... a) {
    (benchmark::DoNotOptimize(a), ...);
    ++calls;
  }
  int streams = 0, events = 0;
};

constexpr int bench_rank = 1;

pt::runtime_plan plan_of(int which) {
  return pt::build_plan(which == 0 ? pt::make_one_f_one_b(4, 8) : pt::make_dualpipe_v(4, 8));
}

void BM_executor_step(benchmark::State& state) {
  const pt::runtime_plan plan = plan_of(static_cast<int>(state.range(0)));
  pt::uniform_chain<quiet> model(std::vector<quiet>(static_cast<std::size_t>(plan.compute.view().chain_length())));
  counting_driver d;
  std::vector<int> comms(plan.lowered.comms.size(), 0);
  pc::rank_executor ex{pt::host::views_of(plan), bench_rank, pc::entries_of(model), d, comms};
  std::vector<float> batch(16 * 8);
  for (auto _ : state) ex.step(batch.data());
  state.counters["ops"] = ex.ops();
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(ex.ops()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// The same calls replayed from a flat array recorded from one step.
void BM_hand_written(benchmark::State& state) {
  const pt::runtime_plan plan = plan_of(static_cast<int>(state.range(0)));
  pt::uniform_chain<quiet> model(std::vector<quiet>(static_cast<std::size_t>(plan.compute.view().chain_length())));
  pc::record_driver rec;
  std::vector<int> comms(plan.lowered.comms.size(), 0);
  pc::rank_executor ex{pt::host::views_of(plan), bench_rank, pc::entries_of(model), rec, comms};
  std::vector<float> batch(16 * 8);
  rec.clear();
  ex.step(batch.data());
  // compact: one 32-byte record per call; the stage calls' contexts in a side table
  const auto entries = pc::entries_of(model);
  struct flat {
    pc::record_driver::call_kind what;
    int a, b, c;  // stream, event or comm, peer / stage-call index
    std::size_t n;
    const void* p;
  };
  std::vector<flat> calls;
  std::vector<pt::host::bound_op> stage_calls;
  const int L = plan.compute.view().chain_length();
  for (const auto& c : rec.calls()) {
    flat f{
        c.what,
        c.stream,
        c.what == pc::record_driver::call_kind::send || c.what == pc::record_driver::call_kind::recv ? c.comm : c.event,
        c.peer,
        c.bytes,
        c.ptr};
    if (c.what == pc::record_driver::call_kind::compute) {
      const auto& e = entries[static_cast<std::size_t>(c.stage % L)];
      pt::host::bound_op op;
      op.fn = e.fn[c.kind == 'F' ? 0 : c.kind == 'B' ? 1 : c.kind == 'I' ? 2 : 3];
      op.obj = e.obj;
      op.microbatch = c.microbatch;
      op.n_in = op.n_out = 16;
      op.in = reinterpret_cast<std::byte*>(batch.data());
      f.c = static_cast<int>(stage_calls.size());
      stage_calls.push_back(op);
    }
    calls.push_back(f);
  }
  counting_driver d;
  const auto* b = reinterpret_cast<const std::byte*>(batch.data());
  using ck = pc::record_driver::call_kind;
  for (auto _ : state)
    for (const flat& f : calls) switch (f.what) {
        case ck::wait:
          d.wait(f.a, f.b);
          break;
        case ck::record:
          d.record(f.b, f.a);
          break;
        case ck::group_start:
          d.group_start();
          break;
        case ck::group_end:
          d.group_end();
          break;
        case ck::send:
          d.send(f.p, f.n, f.c, f.b, f.a);
          break;
        case ck::recv:
          d.recv(const_cast<void*>(f.p), f.n, f.c, f.b, f.a);
          break;
        case ck::compute: {
          const pt::host::bound_op& op = stage_calls[static_cast<std::size_t>(f.c)];
          op.fn(op.obj, op, b);
          break;
        }
        default:
          break;
      }
  state.counters["ops"] = ex.ops();
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(ex.ops()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

// 0: 1F1B p = 4, m = 8; 1: DualPipeV p = 4, m = 8 (rank 1)
BENCHMARK(BM_executor_step)->Arg(0)->Arg(1);
BENCHMARK(BM_hand_written)->Arg(0)->Arg(1);

BENCHMARK_MAIN();
