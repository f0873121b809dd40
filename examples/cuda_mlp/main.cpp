// examples/cuda_mlp — the MLP of examples/mlp.hpp trained through the CUDA executor, checked
// against an unpipelined run of the same model on one GPU.
//
//   cuda_mlp                                   every schedule, 4 ranks on GPU 0 (loopback)
//   cuda_mlp --schedule zb-h1 --ranks 2 --graph
//   cuda_mlp --groups peer                     one NCCL group per peer and tick (docs/05 §5.7; default
//                                              auto: per peer for DualPipe(V), per tick otherwise)
//   torchrun-style:  RANK=r WORLD_SIZE=N LOCAL_RANK=r NCCL_COMM_ID=127.0.0.1:29500 cuda_mlp --transport nccl
//   mpirun -np N cuda_mlp --transport nccl                 (built with MPI: the id goes by MPI_Bcast)
//   mpirun -np N cuda_mlp --transport nccl --id-file /tmp/pipetype.id   (without MPI: through a file)
//
// Loopback: every rank of the pipeline in this process, on one GPU (NCCL refuses two ranks on one
// GPU), each on its own thread; `--graph` also captures the whole pipeline's step as one CUDA
// graph and replays it. NCCL: one process per rank and GPU, the ranks found from the launcher's
// variables (pipetype/cuda/launch.hpp), communicators split per lowered edge, non-blocking with a
// deadline; the ranks' gradients are summed by an all-reduce so every rank checks every stage.
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
};

struct result {
  std::string schedule;
  double loss = 0, rel_err = 0, norm = 0, host_us = 0, device_ms = 0, graph_host_us = -1, graph_device_ms = -1,
         serial_ms = 0;
  bool bitwise = false, ok = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "cuda_mlp: %s\nusage: cuda_mlp [--transport loopback|nccl] [--schedule NAME|all] [--ranks P] "
               "[--microbatches M] [--layers L] [--steps N] [--graph] [--groups auto|tick|peer] [--id-file PATH]\n",
               why.c_str());
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
    } else if (a == "--id-file")
      o.id_file = value();
    else
      usage("unknown argument " + a);
  }
  if (o.transport != "loopback" && o.transport != "nccl") usage("--transport is loopback or nccl");
  return o;
}

// The inputs and targets of mlp::make_batch, on the device.
struct device_batch {
  cuda_mlp::device_array<float> inputs, targets;
  cuda_mlp::device_array<double> losses;
  device_batch(int m, std::uint64_t step) {
    const mlp::batch b = mlp::make_batch(m, step);
    inputs = cuda_mlp::device_array<float>(b.inputs.size());
    inputs.upload(b.inputs);
    targets = cuda_mlp::device_array<float>(b.targets.size());
    targets.upload(b.targets);
    losses = cuda_mlp::device_array<double>(static_cast<std::size_t>(m));
  }
  double mean_loss() const {
    const std::vector<double> l = losses.download();
    double s = 0;
    for (double x : l) s += x;
    return s / double(l.size());
  }
};

void attach(pt::uniform_chain<cuda_mlp::stage>& model, device_batch& b) {
  for (cuda_mlp::stage& s : model.stages()) s.set_targets(b.targets.data(), s.last() ? b.losses.data() : nullptr);
}

// All stages' gradients of `models`, summed (host).
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

double norm_of(pt::uniform_chain<cuda_mlp::stage>& model, cudaStream_t s) {
  cuda_mlp::device_array<double> sq(static_cast<std::size_t>(model.size()));
  for (int k = 0; k < model.size(); ++k) model.stage(k).gradient_sum_squares(sq.data() + k, s);
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

// The unpipelined reference's gradients, its gradient norm (CUB, on the device) and its device
// time per step (every kernel one after the other on one stream: the sum of the stage kernels,
// plus launch gaps).
std::vector<std::vector<float>> reference(const options& o, int S, device_batch& b, double& serial_ms, double& norm) {
  std::vector<pt::uniform_chain<cuda_mlp::stage>> ref;
  ref.push_back(cuda_mlp::make_model(o.layers, S));
  attach(ref.front(), b);
  stream_holder s;
  const auto t0 = clock_type::now();
  cuda_mlp::reference_step(ref.front(), b.inputs.data(), o.microbatches, s.s);
  serial_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  norm = norm_of(ref.front(), s.s);
  return gradients(ref);
}

// The norm of host gradients, to check the device's (CUB) against.
double host_norm(const std::vector<std::vector<float>>& g) {
  double t = 0;
  for (const auto& v : g)
    for (float x : v) t += double(x) * double(x);
  return std::sqrt(t);
}

// Checks a pipelined run's gradients against the reference: relative error ≤ 1e-5, and the
// device-reduced norm agrees with the host's.
void judge(result& r, const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref) {
  r.rel_err = rel_error(got, ref, r.bitwise);
  const double hn = host_norm(got);
  r.ok = r.rel_err <= 1e-5 && std::fabs(hn - r.norm) <= 1e-5 * std::max(1.0, hn);
}

result run_loopback(const options& o, const std::string& name) {
  result r;
  r.schedule = name;
  const pt::runtime_plan plan = pt::build_plan(pt::make_schedule(name, o.ranks, o.microbatches), {.groups = o.groups});
  if (!plan.ok()) throw std::invalid_argument(name + ": " + pt::describe(plan.result));
  const pt::program_view pv = plan.compute();
  const int S = pv.lane_length();
  device_batch b(o.microbatches, 0);
  // a model per rank when a model stage runs on two ranks (DualPipe), else one shared
  std::vector<pt::uniform_chain<cuda_mlp::stage>> models;
  for (int k = 0; k < (pv.lanes > 1 ? o.ranks : 1); ++k) {
    models.push_back(cuda_mlp::make_model(o.layers, S));
    attach(models.back(), b);
  }
  std::vector<std::unique_ptr<pc::runtime_driver>> drivers;
  std::vector<pc::runtime_driver*> ptrs;
  for (int k = 0; k < o.ranks; ++k) {
    drivers.push_back(std::make_unique<pc::runtime_driver>(k, 0));
    ptrs.push_back(drivers.back().get());
  }
  pc::loopback_pipeline<pc::runtime_driver> pipe{plan, models, ptrs};  // one model per rank, or one shared
  auto sync = [&] {
    for (auto& d : drivers) d->synchronize();
  };
  // one checked step
  pipe.step(b.inputs.data());
  sync();
  r.loss = b.mean_loss();
  const auto ref = reference(o, S, b, r.serial_ms, r.norm);
  judge(r, gradients(models), ref);
  time_steps(
      o.steps, [&] { pipe.step(b.inputs.data()); }, sync, r.host_us, r.device_ms);
  if (o.graph) {  // the whole pipeline as one graph: capture, check one replay, time replays
    for (auto& m : models)
      for (cuda_mlp::stage& s : m.stages()) s.zero_gradients();
    pipe.capture(b.inputs.data());
    pipe.replay();
    cuda_mlp::check(cudaStreamSynchronize(pipe.origin_stream()), "cudaStreamSynchronize");
    result g = r;
    judge(g, gradients(models), ref);
    r.ok = r.ok && g.ok;
    time_steps(
        o.steps, [&] { pipe.replay(); },
        [&] { cuda_mlp::check(cudaStreamSynchronize(pipe.origin_stream()), "cudaStreamSynchronize"); }, r.graph_host_us,
        r.graph_device_ms);
  }
  return r;
}

// One schedule over NCCL: `d` is this process's driver, connected once (the world communicator)
// and split again for each plan.
result run_nccl(const options& o, const std::string& name, const pc::launch_info& who, pc::runtime_driver& d,
                const ncclUniqueId& id) {
  result r;
  r.schedule = name;
  const pt::runtime_plan plan =
      pt::build_plan(pt::make_schedule(name, who.world, o.microbatches), {.groups = o.groups});
  if (!plan.ok()) throw std::invalid_argument(name + ": " + pt::describe(plan.result));
  const int S = plan.compute().lane_length();
  const std::vector<ncclComm_t> comms = d.connect(id, who.world, plan.lowered());
  device_batch b(o.microbatches, 0);
  std::vector<pt::uniform_chain<cuda_mlp::stage>> model;
  model.push_back(cuda_mlp::make_model(o.layers, S));
  attach(model.front(), b);
  auto ex = std::make_unique<pc::executor<pc::runtime_driver>>(
      plan, model.front(), d, pc::executor_options<pc::runtime_driver>{.rank = who.rank, .comms = comms});
  ex->step(b.inputs.data());
  d.synchronize();
  r.loss = b.mean_loss();  // this rank's share: non-zero only where the last stage runs
  // every rank's gradients (zeros for the stages it does not run) summed over the world
  stream_holder s;
  pc::check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (cuda_mlp::stage& st : model.front().stages()) {
    const std::span<float> g = st.weight_gradients();
    pc::check_nccl(ncclAllReduce(g.data(), g.data(), g.size(), ncclFloat, ncclSum, d.world(), s.s), "ncclAllReduce");
  }
  const ncclResult_t end = ncclGroupEnd();
  if (end != ncclInProgress) pc::check_nccl(end, "ncclGroupEnd");
  d.settle(d.world(), "ncclAllReduce");
  cuda_mlp::check(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
  const auto ref = reference(o, S, b, r.serial_ms, r.norm);
  judge(r, gradients(model), ref);
  time_steps(
      o.steps, [&] { ex->step(b.inputs.data()); }, [&] { d.synchronize(); }, r.host_us, r.device_ms);
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
      std::printf("cuda_mlp: %d ranks on GPU 0 (loopback), %d microbatches, %d layers, %s\n", o.ranks, o.microbatches,
                  o.layers, pc::nccl_version().c_str());
      for (const std::string& n : names) {
        if (const char* why = pt::schedule_error(n, o.ranks, o.microbatches, 0)) {
          std::printf("%-12s skipped: %s\n", n.c_str(), why);
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
