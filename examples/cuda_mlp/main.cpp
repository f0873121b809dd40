// examples/cuda_mlp — the MLP of examples/mlp.hpp trained through the CUDA executor, checked
// against an unpipelined run of the same model on one GPU.
//
//   cuda_mlp                                   every schedule, 4 ranks on GPU 0 (loopback)
//   cuda_mlp --schedule zb-h1 --ranks 2 --graph
//   cuda_mlp --groups peer                     one NCCL group per peer and tick (docs/05 §5.7; default
//                                              auto: per peer for DualPipe(V), per tick otherwise)
//   cuda_mlp --memory offload --graph          every stash offloaded to pinned host memory after its
//                                              forward and reloaded before its backward (docs/13;
//                                              recompute: every forward run again; both)
//   torchrun-style:  RANK=r WORLD_SIZE=N LOCAL_RANK=r NCCL_COMM_ID=127.0.0.1:29500 cuda_mlp --transport nccl
//   mpirun -np N cuda_mlp --transport nccl                 (built with MPI: the id goes by MPI_Bcast)
//   mpirun -np N cuda_mlp --transport nccl --id-file /tmp/pipetype.id   (without MPI: through a file)
//
// Loopback: every rank of the pipeline in this process, on one GPU (NCCL refuses two ranks on one
// GPU), each on its own thread; `--graph` also captures the whole pipeline's step as one CUDA
// graph and replays it. NCCL: one process per rank and GPU, the ranks found from the launcher's
// variables (pipetype/cuda/launch.hpp), communicators split per lowered edge, non-blocking with a
// deadline; each process builds only the stages the plan puts on its rank (pipetype::stages_on,
// a model_part) and checks their gradients against its own unpipelined run of the whole model.
// Each step's data is a pipetype::batch: the inputs and the last stage's targets, in device memory;
// the last stage writes each microbatch's loss where the executor says (losses()), and the loss
// is the mean over microbatches (the batch's default scaling, so gradients are the mean's).
//
// For each schedule it prints the loss, the largest gradient difference relative to the largest
// gradient (must be ≤ 1e-5; 0 means bitwise equal), the gradient norm (CUB), and host µs and
// device ms per step; exit code 1 when a check fails, 2 for bad arguments.
#include <pipetype/cuda/executor.hpp>
#include <pipetype/cuda/launch.hpp>
#include <pipetype/cuda/loopback.hpp>
#include <pipetype/cuda/runtime.hpp>
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "../plain_number.hpp"
#include "../write_file.hpp"
#include "model.hpp"

#ifdef CUDA_MLP_WITH_MPI  // built with MPI: under mpirun, the id travels by MPI_Bcast
#include <pipetype/cuda/mpi.hpp>
#endif

namespace pt = pipetype;
namespace pc = pipetype::cuda;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  std::string transport = "loopback", schedule = "all", id_file;
  int ranks = 4, microbatches = 8, layers = 8, steps = 3;
  bool graph = false;
  pt::group_policy groups = pt::group_policy::automatic;
  std::string memory = "none";  // none, offload, recompute or both (loopback only)
};

struct result {
  std::string schedule;
  double loss = 0, rel_err = 0, norm = 0, host_us = 0, device_ms = 0, graph_host_us = -1, graph_device_ms = -1,
         serial_ms = 0;
  bool bitwise = false, ok = false;
};

constexpr const char* usage_text =
    "usage: cuda_mlp [--transport loopback|nccl] [--schedule NAME|all] [--ranks P] [--microbatches M] [--layers L]\n"
    "                [--steps N] [--graph] [--groups auto|tick|peer] [--id-file PATH]\n"
    "                [--memory none|offload|recompute|both]\n"
    "--transport: every rank on this process's device (loopback, the default) or one process per rank\n"
    "             over NCCL (nccl: launched by mpirun, torchrun or srun; --id-file shares NCCL's id)\n"
    "--schedule: a built-in schedule, or all of them one after another (the default)\n"
    "--ranks P, --microbatches M: the plan's sizes (defaults 4, 8); --layers L: the MLP's dense layers\n"
    "             (default 8); --steps N: steps per schedule (default 3)\n"
    "--graph: also each step captured as one CUDA graph and replayed\n"
    "--groups: one NCCL group per tick, per peer and tick, or (auto, the default) per peer for\n"
    "             schedules with overlapped F&B pairs\n"
    "--memory: the stashes offloaded, recomputed or both over the loopback transport (docs/13)\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "cuda_mlp: %s\n%s", why.c_str(), usage_text);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    auto number = [&](int lo) {
      const std::string v = value();
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (!examples::plain_number(v, false) || *end || x < lo || x > 4096)
        usage(a + " " + v + ": expected an integer ≥ " + std::to_string(lo));
      return static_cast<int>(x);
    };
    if (a == "--help" || a == "-h") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    }
    if (a == "--transport")
      o.transport = value();
    else if (a == "--schedule")
      o.schedule = value();
    else if (a == "--ranks")
      o.ranks = number(1);
    else if (a == "--microbatches")
      o.microbatches = number(1);
    else if (a == "--layers")
      o.layers = number(1);
    else if (a == "--steps")
      o.steps = number(1);
    else if (a == "--graph")
      o.graph = true;
    else if (a == "--groups") {
      const std::string g = value();
      if (g != "auto" && g != "tick" && g != "peer") usage("--groups is auto, tick or peer");
      o.groups = g == "peer"   ? pt::group_policy::per_peer
                 : g == "tick" ? pt::group_policy::per_tick
                               : pt::group_policy::automatic;
    } else if (a == "--memory") {
      o.memory = value();
      if (o.memory != "none" && o.memory != "offload" && o.memory != "recompute" && o.memory != "both")
        usage("--memory is none, offload, recompute or both");
    } else if (a == "--id-file")
      o.id_file = value();
    else
      usage("unknown argument " + a);
  }
  if (o.transport != "loopback" && o.transport != "nccl") usage("--transport is loopback or nccl");
  if (o.memory != "none" && o.transport != "loopback") usage("--memory runs over the loopback transport");
  return o;
}

// The inputs and targets of mlp::make_batch, on the device.
struct device_batch {
  cuda_mlp::device_array<float> inputs, targets;
  int microbatches = 0;
  device_batch(int m, std::uint64_t step) : microbatches(m) {
    const mlp::batch b = mlp::make_batch(m, step);
    inputs = cuda_mlp::device_array<float>(b.inputs.size());
    inputs.upload(b.inputs);
    targets = cuda_mlp::device_array<float>(b.targets.size());
    targets.upload(b.targets);
  }
  /// The step's batch for a rank that holds the source (`input`) and/or the sink (`target`).
  pt::batch batch(bool input = true, bool target = true) const {
    pt::batch b;
    if (input) b.input(std::span<const float>(inputs.data(), inputs.size()));
    if (target) b.target(std::span<const float>(targets.data(), targets.size()));
    return b;
  }
};

std::vector<float> download(const float* device, std::size_t n) {
  std::vector<float> h(n);
  cuda_mlp::check(cudaMemcpy(h.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  return h;
}

// Σ_j of the losses `ex` wrote in the last step (its one sink's cells), into `sum`; returns how many.
template <class Executor>
int add_losses(const Executor& ex, int microbatches, double& sum) {
  if (ex.losses() == nullptr) return 0;
  const std::vector<float> l = download(ex.losses(), static_cast<std::size_t>(microbatches));
  int n = 0;
  for (int j = 0; j < microbatches; ++j)
    if (ex.writes_loss(0, j)) {
      sum += l[static_cast<std::size_t>(j)];
      ++n;
    }
  return n;
}

// The gradients of `stages`, one vector each (host).
std::vector<std::vector<float>> gradients(const std::vector<cuda_mlp::stage*>& stages) {
  std::vector<std::vector<float>> out;
  for (const cuda_mlp::stage* s : stages) out.push_back(s->gradients());
  return out;
}

// Every stage's gradients of `models` (one model per rank, or one shared), summed (host).
std::vector<std::vector<float>> gradients(std::vector<pt::uniform_chain<cuda_mlp::stage>>& models) {
  std::vector<std::vector<float>> out;
  for (int k = 0; k < models.front().size(); ++k) {
    std::vector<float> g = models.front().stage(k).gradients();
    for (std::size_t c = 1; c < models.size(); ++c) {
      const std::vector<float> h = models[c].stage(k).gradients();
      for (std::size_t i = 0; i < g.size(); ++i) g[i] += h[i];
    }
    out.push_back(std::move(g));
  }
  return out;
}

// Largest |a − b| over the largest |b|; `bitwise` when equal bit for bit.
double rel_error(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, bool& bitwise) {
  double diff = 0, scale = 0;
  bitwise = true;
  for (std::size_t k = 0; k < a.size(); ++k)
    for (std::size_t i = 0; i < a[k].size(); ++i) {
      diff = std::max(diff, std::fabs(double(a[k][i]) - double(b[k][i])));
      scale = std::max(scale, std::fabs(double(b[k][i])));
      bitwise = bitwise && std::memcmp(&a[k][i], &b[k][i], sizeof(float)) == 0;
    }
  return scale > 0 ? diff / scale : diff;
}

// The gradient norm of `stages`, reduced on the device (CUB).
double norm_of(const std::vector<cuda_mlp::stage*>& stages, cudaStream_t s) {
  cuda_mlp::device_array<double> sq(stages.size());
  for (std::size_t k = 0; k < stages.size(); ++k) stages[k]->gradient_sum_squares(sq.data() + k, s);
  cuda_mlp::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  double t = 0;
  for (double x : sq.download()) t += x;
  return std::sqrt(t);
}

// Host µs to issue a step (mean of `steps`) and device ms per step (issue to completion).
template <class Issue, class Sync>
void time_steps(int steps, Issue issue, Sync sync, double& host_us, double& device_ms) {
  double host = 0;
  const auto t0 = clock_type::now();
  for (int k = 0; k < steps; ++k) {
    const auto h0 = clock_type::now();
    issue();
    host += std::chrono::duration<double, std::micro>(clock_type::now() - h0).count();
  }
  sync();
  device_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count() / steps;
  host_us = host / steps;
}

struct stream_holder {
  cudaStream_t s = nullptr;
  stream_holder() { cuda_mlp::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~stream_holder() { (void)cudaStreamDestroy(s); }
};

// The unpipelined reference's gradients of the model stages `which` (all when empty), their norm
// (CUB, on the device), its mean loss and its device time per step (every kernel one after the
// other on one stream: the sum of the stage kernels, plus launch gaps).
std::vector<std::vector<float>> reference(const options& o, int S, const device_batch& b, const std::vector<int>& which,
                                          double& serial_ms, double& norm, double& loss) {
  pt::uniform_chain<cuda_mlp::stage> ref = cuda_mlp::make_model(o.layers, S);
  cuda_mlp::device_array<float> losses(static_cast<std::size_t>(o.microbatches));
  stream_holder s;
  const auto t0 = clock_type::now();
  cuda_mlp::reference_step(ref, b.inputs.data(), b.targets.data(), losses.data(), o.microbatches, s.s);
  serial_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  std::vector<cuda_mlp::stage*> stages;
  for (int k = 0; k < S; ++k)
    if (which.empty() || std::find(which.begin(), which.end(), k) != which.end()) stages.push_back(&ref.stage(k));
  norm = norm_of(stages, s.s);
  loss = 0;
  for (float l : losses.download()) loss += l;
  loss /= o.microbatches;
  return gradients(stages);
}

// The norm of host gradients, to check the device's (CUB) against.
double host_norm(const std::vector<std::vector<float>>& g) {
  double t = 0;
  for (const auto& v : g)
    for (float x : v) t += double(x) * double(x);
  return std::sqrt(t);
}

// Checks a pipelined run's gradients against the reference: relative error ≤ 1e-5, the
// device-reduced norm agrees with the host's, and the loss the sinks wrote is the reference's
// (`loss_ref`; NaN: this rank writes no loss).
void judge(result& r, const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref,
           double loss_ref) {
  r.rel_err = rel_error(got, ref, r.bitwise);
  const double hn = host_norm(got);
  r.ok = r.rel_err <= 1e-5 && std::fabs(hn - r.norm) <= 1e-5 * std::max(1.0, hn) &&
         (std::isnan(loss_ref) || std::fabs(r.loss - loss_ref) <= 1e-6 * std::max(1.0, std::fabs(loss_ref)));
}

result run_loopback(const options& o, const std::string& name) {
  result r;
  r.schedule = name;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, o.ranks, o.microbatches), {.groups = o.groups});
  if (!plan.ok()) throw std::invalid_argument(name + ": " + pt::describe(plan.result));
  const pt::program_view pv = plan.compute();
  const int S = pv.lane_length();
  const device_batch b(o.microbatches, 0);
  const pt::batch batch = b.batch();
  // a model per rank when a model stage runs on two ranks (DualPipe), else one shared
  std::vector<pt::uniform_chain<cuda_mlp::stage>> models;
  for (int k = 0; k < (pv.lanes > 1 ? o.ranks : 1); ++k) models.push_back(cuda_mlp::make_model(o.layers, S));
  std::vector<std::unique_ptr<pc::runtime_driver>> drivers;
  std::vector<pc::runtime_driver*> ptrs;
  for (int k = 0; k < o.ranks; ++k) {
    drivers.push_back(std::make_unique<pc::runtime_driver>(k, 0));
    ptrs.push_back(drivers.back().get());
  }
  // --memory: every stash offloaded and reloaded, or recomputed (placed by place_memory, proved by the pipeline)
  pc::loopback_options lo;
  if (o.memory != "none") {
    pt::memory_sizes z;
    for (int s = 0; s < pv.stages; ++s)
      z.saved.push_back(static_cast<std::int64_t>(models.front().stage(s % S).stash_extent() * sizeof(float)));
    z.kept = {0};  // a recomputed forward's input stays in its activation slot
    pt::memory_options mo;
    mo.offload = o.memory == "recompute" ? pt::memory_policy::none : pt::memory_policy::all;
    mo.recompute = o.memory == "offload" ? pt::memory_policy::none : pt::memory_policy::all;
    mo.copy_bandwidth = static_cast<double>(std::max<std::int64_t>(z.saved_of(0), 1));
    const pt::memory_placement placed = pt::place_memory(pv, z, pt::costs{.f = 1, .b = 2}, mo);
    if (!placed.result.ok()) throw std::invalid_argument(name + ": " + pt::describe(placed.result));
    lo.memory = placed.actions;
  }
  pc::loopback_pipeline<pc::runtime_driver> pipe{plan, models, ptrs, lo};  // one model per rank, or one shared
  auto sync = [&] {
    for (auto& d : drivers) d->synchronize();
  };
  // the step's mean loss, from what the ranks' sinks wrote (each microbatch's on one rank)
  auto loss = [&] {
    double sum = 0;
    int n = 0;
    for (int k = 0; k < o.ranks; ++k) n += add_losses(pipe.rank(k), o.microbatches, sum);
    if (n != o.microbatches)
      throw std::logic_error(name + ": " + std::to_string(n) + " losses written for " + std::to_string(o.microbatches) +
                             " microbatches");
    return sum / o.microbatches;
  };
  // one checked step
  pipe.step(batch);
  sync();
  r.loss = loss();
  double loss_ref = 0;
  const auto ref = reference(o, S, b, {}, r.serial_ms, r.norm, loss_ref);
  judge(r, gradients(models), ref, loss_ref);
  time_steps(
      o.steps, [&] { pipe.step(batch); }, sync, r.host_us, r.device_ms);
  if (o.graph) {  // the whole pipeline as one graph: capture, check one replay, time replays
    for (auto& m : models)
      for (cuda_mlp::stage& s : m.stages()) s.zero_gradients();
    pipe.capture(batch);
    pipe.replay();
    cuda_mlp::check(cudaStreamSynchronize(pipe.origin_stream()), "cudaStreamSynchronize");
    result g = r;
    g.loss = loss();
    judge(g, gradients(models), ref, loss_ref);
    r.ok = r.ok && g.ok;
    time_steps(
        o.steps, [&] { pipe.replay(); },
        [&] { cuda_mlp::check(cudaStreamSynchronize(pipe.origin_stream()), "cudaStreamSynchronize"); }, r.graph_host_us,
        r.graph_device_ms);
  }
  return r;
}

// One schedule over NCCL: `d` is this process's driver, connected once (the world communicator)
// and split again for each plan. The process builds only its rank's stages (a model_part), gives
// its step only the arrays of the source and sink it holds, and checks those stages.
result run_nccl(const options& o, const std::string& name, const pc::launch_info& who, pc::runtime_driver& d,
                const ncclUniqueId& id) {
  result r;
  r.schedule = name;
  const pt::runtime_plan plan =
      pt::build_plan(pt::make_schedule(name, who.world, o.microbatches), {.groups = o.groups});
  if (!plan.ok()) throw std::invalid_argument(name + ": " + pt::describe(plan.result));
  const pt::program_view pv = plan.compute();
  const int S = pv.lane_length();
  const std::vector<ncclComm_t> comms = d.connect(id, who.world, plan.lowered());
  const device_batch b(o.microbatches, 0);
  // this rank's stages only (DualPipe puts two on each rank, one per direction)
  const std::vector<int> mine = pt::stages_on(pv, who.rank);
  std::vector<cuda_mlp::stage> held;
  held.reserve(mine.size());
  pt::model_part part{S};
  for (const int k : mine) part.hold(k, held.emplace_back(cuda_mlp::make_stage(o.layers, S, k)));
  const bool source = part.holds(0), sink = part.holds(S - 1);
  const pt::batch batch = b.batch(source, sink);
  auto ex = std::make_unique<pc::executor<pc::runtime_driver>>(
      plan, part, d, pc::executor_options<pc::runtime_driver>{.rank = who.rank, .comms = comms});
  ex->step(batch);
  d.synchronize();
  double sum = 0;
  const int written = add_losses(*ex, o.microbatches, sum);
  r.loss = sum / o.microbatches;  // this rank's share: non-zero only where the last stage runs
  // Under DualPipe a model stage runs on two ranks, each adding its half of the microbatches: sum
  // every model stage's gradients over the world (zeros from the ranks that do not hold it).
  std::vector<cuda_mlp::device_array<float>> sums;
  for (int k = 0; k < S; ++k) sums.emplace_back(cuda_mlp::weight_grad_extent(o.layers, S, k));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const std::span<float> g = held[i].weight_gradients();
    cuda_mlp::check(
        cudaMemcpy(sums[static_cast<std::size_t>(mine[i])].data(), g.data(), g.size_bytes(), cudaMemcpyDeviceToDevice),
        "cudaMemcpy");
  }
  stream_holder s;
  pc::check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (cuda_mlp::device_array<float>& g : sums)
    pc::check_nccl(ncclAllReduce(g.data(), g.data(), g.size(), ncclFloat, ncclSum, d.world(), s.s), "ncclAllReduce");
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclInProgress) pc::check_nccl(end, "ncclGroupEnd");
  d.settle(d.world(), "ncclAllReduce");
  cuda_mlp::check(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
  std::vector<std::vector<float>> got;
  for (const int k : mine) got.push_back(sums[static_cast<std::size_t>(k)].download());
  double loss_ref = 0;
  const auto ref = reference(o, S, b, mine, r.serial_ms, r.norm, loss_ref);
  // the whole loss where this rank writes every microbatch's (one rank, or DualPipeV's rank 0)
  judge(r, got, ref, written == o.microbatches ? loss_ref : std::nan(""));
  time_steps(
      o.steps, [&] { ex->step(batch); }, [&] { d.synchronize(); }, r.host_us, r.device_ms);
  ex.reset();
  d.release(comms);  // this plan's communicators; the world stays for the next schedule
  return r;
}

void print(const result& r, const std::string& who) {
  std::printf("%-12s %s loss %.6f  rel err %.2e%s  |g| %.5f  host %.1f us/step  device %.3f ms/step",
              r.schedule.c_str(), who.c_str(), r.loss, r.rel_err, r.bitwise ? " (bitwise)" : "", r.norm, r.host_us,
              r.device_ms);
  if (r.graph_host_us >= 0) std::printf("  graph: host %.1f us, device %.3f ms", r.graph_host_us, r.graph_device_ms);
  std::printf("  serial kernels %.3f ms  %s\n", r.serial_ms, r.ok ? "ok" : "MISMATCH");
}

}  // namespace

int main(int argc, char** argv) {
  examples::tool_exits("cuda_mlp");
  const options o = parse(argc, argv);
  std::vector<std::string> names;
  if (o.schedule == "all") {
    for (const pt::schedule_info& i : pt::schedule_infos) names.emplace_back(i.name);
  } else {
    if (!pt::find_schedule(o.schedule)) usage("unknown schedule " + o.schedule);
    names.push_back(o.schedule);
  }
  try {
    if (pc::device_count() == 0) {
      std::fprintf(stderr, "cuda_mlp: no CUDA device visible (%s); nothing to run\n", pc::nccl_version().c_str());
      return 77;
    }
    bool ok = true;
    if (o.transport == "loopback") {
      std::printf("cuda_mlp: %d ranks on GPU 0 (loopback), %d microbatches, %d layers, memory actions: %s, %s\n",
                  o.ranks, o.microbatches, o.layers, o.memory.c_str(), pc::nccl_version().c_str());
      for (const std::string& n : names) {
        if (const char* why = pt::schedule_error(n, o.ranks, o.microbatches, 0)) {
          std::printf("%-12s skipped: %s\n", n.c_str(), why);
          continue;
        }
        if (o.memory != "none" && pt::make_schedule(n, o.ranks, o.microbatches).lanes > 1) {  // not over a mesh yet
          std::printf("%-12s skipped: memory actions run on plans of one lane (DualPipe's has two)\n", n.c_str());
          continue;
        }
        const result r = run_loopback(o, n);
        print(r, "");
        ok = ok && r.ok;
      }
    } else {
      pc::launch_info who = pc::launch_from_env();
#ifdef CUDA_MLP_WITH_MPI
      // launched by mpirun with no other way to share the id: MPI does it
      const bool use_mpi = o.id_file.empty() && !std::getenv("NCCL_COMM_ID") && who.launcher != "RANK/WORLD_SIZE";
      struct mpi_session {
        bool on = false;
        ~mpi_session() {  // on an error the other ranks may wait in a collective: abort them
          if (on && std::uncaught_exceptions() > 0) MPI_Abort(MPI_COMM_WORLD, 1);
          if (on) MPI_Finalize();
        }
      } mpi;
      if (use_mpi) {
        cuda_mlp::check(cudaSetDevice(who.local_rank), "cudaSetDevice");  // before MPI touches CUDA
        MPI_Init(&argc, &argv);
        mpi.on = true;
        who = pc::launch_from_mpi();
      }
#else
      const bool use_mpi = false;
#endif
      const std::string tag = "[rank " + std::to_string(who.rank) + "/" + std::to_string(who.world) + "]";
      pc::runtime_driver d{who.rank, who.local_rank};
      ncclUniqueId id{};  // once: every schedule shares the world
#ifdef CUDA_MLP_WITH_MPI
      if (use_mpi) id = pc::unique_id_mpi();
#endif
      if (!use_mpi) id = pc::unique_id(who, o.id_file);
      for (const std::string& n : names) {
        if (pt::schedule_error(n, who.world, o.microbatches, 0)) continue;
        const result r = run_nccl(o, n, who, d, id);
        print(r, tag);
        ok = ok && r.ok;
      }
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_mlp: %s\n", e.what());
    return 1;
  }
}
