// examples/torch_gpt/torch_gpt.cpp — examples/gpt's GPT-2 decoder written with LibTorch, its
// stages pipetype::torch::module_stage (docs/14_libtorch.md), trained on host threads.
//
//   torch_gpt --schedule NAME --ranks P --microbatches M --layers L --heads H --width C --seq T
//             --steps N [--rows R] [--chunks V] [--lr X] [--seq-lens a,b,...] [--json] [--dump DIR]
//             [--dp D] [--fsdp] [--corpus DIR] [--recompute all [--offload none|auto|all]]
//             [--intra-threads K]
//
// The model is the one of examples/gpt/layers.hpp, written with torch ops instead of loops:
// token and position embeddings, L pre-LayerNorm blocks (causal multi-head attention, a tanh-GELU
// MLP; weights in Hugging Face's Conv1D layout, y = x·W + b), ln_f, an LM head and the sum of the
// tokens' cross-entropy, scaled by the batch to the mean over every token. Each pipeline stage is
// one torch::nn::Module holding whole blocks (the first also the embeddings, the last also the
// head), its parameters registered in layers.hpp's part order, so that its flat parameters have
// examples/gpt's layout: both start from the same initial weights (gpt::init_model) and read the
// same corpus. The first step's gradients are compared with an unpipelined LibTorch run of the
// same microbatches (the same modules, one microbatch after another, gradients added in
// microbatch order; with --dp each replica's in order, then the replicas' in order): bitwise
// under every schedule. --dump writes what examples/gpt's --dump writes (tests/pytorch/
// check_gpt_dump.py checks it against PyTorch's autograd). --json prints one line with gpt's
// fields: grads_match_reference, max_abs_grad_diff, loss_first, loss_last, step_ms, ...
//
// --eval then reports the loss on held-back text under the schedule's forward-only plan (the
// stages run without a graph and keep nothing), checked bitwise against the unpipelined forward.
// --tie-embeddings ties lm_head.weight to wte.weight (a tie group of the mesh: both copies' gradients
// summed, so the copies stay equal).
//
// --recompute all [--offload none|auto|all] adds memory actions (docs/13, docs/14 §14.5): each
// microbatch's forward runs without a graph and keeps only its input (which --offload copies to the
// host and back), and a RECOMPUTE builds the graph again before its backward; the plan weighs them
// with each stage's graph bytes, measured. --offload alone is refused: no copy moves a graph.
// --json adds gpt's `memory` field and, per stage, the graphs held at once against the plan.
#include <pipetype/host.hpp>
#include <pipetype/torch/stage.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../cli.hpp"
#include "../gpt/layers.hpp"
#include "../gpt/run.hpp"
#include "../write_file.hpp"

namespace {

namespace pt = pipetype;
namespace ph = pipetype::host;

// What travels between stages, as in examples/gpt: hidden states [rows, t, C] with a gradient
// back, token ids [rows, t] without (the first stage's input; the others' have none).
using hidden_t = pt::varying<pt::tensor<float, pt::dynamic>>;
using ids_t = pt::no_grad<pt::varying<pt::tensor<std::int32_t, pt::dynamic>>>;
using edge = pt::tensors<hidden_t, ids_t>;
using target_t = pt::varying<pt::tensor<std::int32_t, pt::dynamic>>;
using stage_t = pt::torch::module_stage<edge, edge, target_t>;

/// Stage `index` of `stages` of the decoder: blocks [index·L/S, (index+1)·L/S), the embeddings
/// before them on the first, ln_f and the LM head after them on the last. Parameters registered
/// tensor by tensor in layers.hpp's part order and shapes, with its initial values.
struct decoder_partImpl : torch::nn::Module {
  decoder_partImpl(const gpt::gpt_config& config, int index, int stages, const gpt::model_params<float>& init)
      : c(config), first(index == 0), last(index == stages - 1) {
    block0 = index * c.layers / stages;
    blocks = (index + 1) * c.layers / stages - block0;
    auto take = [&](const std::vector<gpt::tensor_info>& tensors, const std::vector<float>& values) {
      for (const gpt::tensor_info& t : tensors) {
        std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
        at::Tensor v = torch::from_blob(const_cast<float*>(values.data()) + t.offset, shape).clone();
        std::string name = t.name;
        std::replace(name.begin(), name.end(), '.', '_');  // (a module's parameter names have no dots)
        p.push_back(register_parameter(name, v));
      }
    };
    if (first) take(gpt::embedding_tensors(c), init.embedding);
    for (int k = 0; k < blocks; ++k)
      take(gpt::block_tensors(c, block0 + k), init.blocks[static_cast<std::size_t>(block0 + k)]);
    if (last) take(gpt::head_tensors(c), init.head);
  }

  /// The hidden states after this stage's blocks: from the ids on the first stage, else from h.
  at::Tensor forward(const at::Tensor& h, const at::Tensor& ids) {
    std::size_t at = 0;
    at::Tensor x;
    if (first) {
      const std::int64_t t = ids.size(1);
      x = at::embedding(p[0], ids.to(at::kLong)) + p[1].narrow(0, 0, t).unsqueeze(0);
      at = 2;
    } else {
      x = h;
    }
    for (int k = 0; k < blocks; ++k, at += 12) x = block(x, at);
    return x;
  }

  /// The sum of the tokens' cross-entropy of ln_f(h)·lm_head.weightᵀ against the targets.
  at::Tensor loss(const at::Tensor& h, const at::Tensor& targets) {
    const std::size_t at = (first ? 2 : 0) + 12 * static_cast<std::size_t>(blocks);
    const std::int64_t C = c.width;
    const at::Tensor x = at::layer_norm(h, {C}, p[at], p[at + 1], 1e-5);
    const at::Tensor logits = at::matmul(x, p[at + 2].t());
    return at::cross_entropy_loss(logits.reshape({-1, c.vocab}), targets.reshape({-1}).to(at::kLong), {},
                                  at::Reduction::Sum);
  }

  /// x·W + b over the last dimension (W [in, out]: Conv1D's layout), one fused addmm.
  static at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    std::vector<std::int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = w.size(1);
    return at::addmm(b, x.reshape({-1, x.size(-1)}), w).view(shape);
  }

  at::Tensor block(const at::Tensor& x, std::size_t at) {
    const std::int64_t C = c.width, H = c.heads, hd = C / H, rows = x.size(0), t = x.size(1);
    const at::Tensor xn = at::layer_norm(x, {C}, p[at], p[at + 1], 1e-5);
    const auto qkv = affine(xn, p[at + 2], p[at + 3]).split(C, -1);
    const auto heads = [&](const at::Tensor& z) { return z.reshape({rows, t, H, hd}).transpose(1, 2); };
    const at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    const at::Tensor causal = torch::ones({t, t}, torch::kBool).triu(1);
    const at::Tensor y = at::matmul(scores.masked_fill(causal, -INFINITY).softmax(-1), v)
                             .transpose(1, 2)
                             .reshape({rows, t, C});
    const at::Tensor a = x + affine(y, p[at + 4], p[at + 5]);
    const at::Tensor xn2 = at::layer_norm(a, {C}, p[at + 6], p[at + 7], 1e-5);
    const at::Tensor u = at::gelu(affine(xn2, p[at + 8], p[at + 9]), "tanh");
    return a + affine(u, p[at + 10], p[at + 11]);
  }

  gpt::gpt_config c;
  bool first, last;
  int block0 = 0, blocks = 0;
  std::vector<at::Tensor> p;
};
TORCH_MODULE(decoder_part);

/// The stage of part `part`: how it sees its edges (examples/gpt's extents) and its loss.
stage_t make_stage(decoder_part part, bool tied) {
  const gpt::gpt_config& c = part->c;
  const std::int64_t R = c.rows, T = c.seq, C = c.width;
  const pt::torch::tensor_spec none{{0}, 0};  // a tensor this stage's edge does not carry
  pt::torch::stage_spec s;
  s.name = "decoder part " + std::to_string(part->block0);
  s.inputs = {part->first ? none : pt::torch::tensor_spec{{R, T, C}, 1},
              part->first ? pt::torch::tensor_spec{{R, T}, 1} : none};
  s.outputs = {{{R, T, C}, 1}, none};
  s.targets = {{{R, T}, 1}};
  if (tied && part->first) s.ties.emplace_back(0, "wte_weight");  // tie group 0: wte.weight = lm_head.weight
  if (tied && part->last) s.ties.emplace_back(0, "lm_head_weight");
  if (part->last)  // (the plan's sink: the only stage that computes a loss)
    s.loss = [part](const std::vector<at::Tensor>& out, const std::vector<at::Tensor>& targets) mutable {
      return part->loss(out[0], targets[0]);
    };
  return stage_t(part.ptr(),
                 [part](const std::vector<at::Tensor>& x) mutable {
                   return std::vector<at::Tensor>{part->forward(x[0], x[1]), at::empty({0}, at::kInt)};
                 },
                 s);
}

constexpr const char* usage =
    "usage: torch_gpt [--schedule NAME] [--ranks P] [--microbatches M] [--chunks V] [--layers L] [--heads H]\n"
    "                 [--width C] [--seq T] [--rows R] [--steps N] [--lr X] [--seq-lens a,b,...] [--json]\n"
    "                 [--eval] [--dump DIR] [--corpus DIR] [--dp D] [--fsdp] [--buckets N] [--tie-embeddings]\n"
    "                 [--recompute none|all [--offload none|auto|all]] [--intra-threads K]\n"
    "examples/gpt's model and flags with LibTorch's modules as the stages (docs/14_libtorch.md)\n" GPT_RUN_FLAGS_HELP
    "--eval: after training, the loss on held-back text under the forward-only plan\n"
    "--tie-embeddings: the LM head's weight is the token embedding's (needs two stages or more)\n"
    "--recompute all: each microbatch's forward keeps only its input, and its graph is built again before\n"
    "            its backward; --offload then copies those inputs to the host and back (docs/14)\n"
    "--intra-threads K: LibTorch's intra-op threads (default 1: the ranks are the threads)\n";

constexpr examples::cli cli{"torch_gpt", usage};

using args = gpt::run_args;
args parse(int argc, char** argv) {
  // the attention's scores and probabilities both kept by autograd: two H·T² a layer and row
  args a = gpt::parse_run(argc, argv, cli, 2.0, [](args& x, const std::string& f, const std::string& v) {
    if (f != "--intra-threads") return false;
    x.intra = cli.whole(f, v, 1, 256);
    return true;
  });
  if (a.offload != pt::memory_policy::none && a.recompute != pt::memory_policy::all)
    cli.fail("--offload needs --recompute all: no copy can move an autograd graph, so a microbatch a module stage "
             "offloads keeps only its input, which the copy moves, and is recomputed (docs/14 §14.5)");
  return a;
}

/// The unpipelined LibTorch step over the same microbatches: the parts one after another per
/// microbatch, each stage's gradients added in microbatch order (with dp replicas: each replica's
/// in order, then the replicas' sums in order). Returns each stage's flat gradients.
/// With `tied`, wte.weight's gradient (the first parameter) and lm_head.weight's (the last) are
/// summed on each replica before the replicas' sums, as the plan's tie all-reduce does.
std::vector<std::vector<float>> reference_step(std::vector<decoder_part>& parts, const std::vector<gpt::microbatch>& mbs,
                                               int dp, bool tied, std::size_t tokens, const gpt::gpt_config& c) {
  std::vector<at::Tensor> params;
  std::vector<std::size_t> first_of;  // each part's first parameter
  for (auto& part : parts) {
    first_of.push_back(params.size());
    for (const auto& q : part->p) params.push_back(q);
  }
  first_of.push_back(params.size());
  const at::Tensor seed = torch::full({}, static_cast<float>(1.0 / static_cast<double>(tokens)));
  std::vector<at::Tensor> total;
  const int m = static_cast<int>(mbs.size()) / dp;
  for (int r = 0; r < dp; ++r) {
    std::vector<at::Tensor> acc;
    for (const auto& q : params) acc.push_back(torch::zeros_like(q));
    for (int j = r * m; j < (r + 1) * m; ++j) {
      const gpt::microbatch& mb = mbs[static_cast<std::size_t>(j)];
      const auto t = static_cast<std::int64_t>(mb.t);
      const at::Tensor ids = torch::from_blob(const_cast<std::int32_t*>(mb.ids.data()), {c.rows, t}, torch::kInt);
      const at::Tensor targets =
          torch::from_blob(const_cast<std::int32_t*>(mb.targets.data()), {c.rows, t}, torch::kInt);
      at::Tensor h;
      for (auto& part : parts) h = part->forward(h, ids);
      const at::Tensor loss = parts.back()->loss(h, targets);
      const auto g = torch::autograd::grad({loss}, params, {seed}, false, false, true);
      for (std::size_t i = 0; i < g.size(); ++i)
        if (g[i].defined()) acc[i].add_(g[i]);
    }
    if (tied) {
      const at::Tensor sum = acc.front() + acc.back();
      acc.front() = sum;
      acc.back() = sum.clone();
    }
    if (r == 0)
      total = acc;
    else
      for (std::size_t i = 0; i < total.size(); ++i) total[i].add_(acc[i]);
  }
  std::vector<std::vector<float>> out(parts.size());
  for (std::size_t s = 0; s < parts.size(); ++s)
    for (std::size_t i = first_of[s]; i < first_of[s + 1]; ++i) {
      const at::Tensor g = total[i].contiguous();
      out[s].insert(out[s].end(), g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
  return out;
}

/// Every stage's flat array (parameters or gradients) into layers.hpp's parts.
void gather(const std::vector<stage_t*>& stages, const std::vector<decoder_part>& parts, gpt::model_params<float>& into,
            bool gradients) {
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const at::Tensor& flat = gradients ? stages[s]->flat_gradients() : stages[s]->flat_parameters();
    const float* v = flat.data_ptr<float>();
    const decoder_part& part = parts[s];
    auto put = [&](std::vector<float>& dst) {
      std::copy(v, v + dst.size(), dst.begin());
      v += dst.size();
    };
    if (part->first) put(into.embedding);
    for (int k = 0; k < part->blocks; ++k) put(into.blocks[static_cast<std::size_t>(part->block0 + k)]);
    if (part->last) put(into.head);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  examples::tool_exits("torch_gpt");
  args a = parse(argc, argv);
  if (a.clip > 0) cli.fail("--clip is examples/gpt's: torch_gpt's optimizer does not clip yet");
  if (a.zero > 0) cli.fail("--zero is examples/gpt's: torch_gpt's optimizer runs after the step, on every replica");
  if (a.grad_dtype != "fp32" || a.dynamic_scale)
    cli.fail("--grad-dtype and --loss-scale are examples/gpt's: torch_gpt's gradients are LibTorch's float tensors");
  if (a.local) cli.fail("--local-losses is examples/gpt's: torch_gpt's modules have one head, on the last stage");
  if (!a.lengths.empty()) cli.fail("--lengths is examples/gpt's: torch_gpt's attention has no document mask");
  if (!a.slow.empty() || a.plan_set)
    cli.fail("--slow and --plan-set are examples/gpt's: torch_gpt's modules do not sleep for a slow rank");
  at::set_num_threads(a.intra);
  const pt::runtime_plan plan = gpt::make_run_plan(a, cli);
  const int S = plan.compute().lane_length(), m = plan.compute().microbatches;
  const gpt::run_start start = gpt::start_run(a, S, cli);
  const gpt::char_corpus &corpus = start.corpus, &held = start.held;
  const gpt::model_params<float>& initial = start.initial;
  const gpt::gpt_config& c = a.model;

  // one model per replica: its parts (modules) and their stages
  std::deque<std::vector<decoder_part>> parts;
  std::deque<pt::uniform_chain<stage_t>> models;
  std::vector<pt::uniform_chain<stage_t>*> replicas;
  std::vector<std::vector<std::unique_ptr<torch::optim::Adam>>> optimizers;
  for (int r = 0; r < a.dp; ++r) {
    std::vector<decoder_part>& ps = parts.emplace_back();
    std::vector<stage_t> stages;
    for (int s = 0; s < S; ++s) {
      ps.emplace_back(c, s, S, initial);
      stages.push_back(make_stage(ps.back(), a.tie));
    }
    replicas.push_back(&models.emplace_back(std::move(stages)));
    auto& opt = optimizers.emplace_back();
    for (auto& part : ps)
      opt.push_back(std::make_unique<torch::optim::Adam>(part->parameters(), torch::optim::AdamOptions(a.lr)));
  }
  // the bytes one microbatch's graph holds per stage, measured before any rank thread runs
  std::vector<std::size_t> graph_bytes;
  for (int s = 0; s < S; ++s) graph_bytes.push_back(models.front().stage(s).measure_graph_bytes());
  // --offload, --recompute: what a stage saves is its graph and its input; recomputed, its input
  // (the plan's sizes per plan stage: a stage of a later lane is its model stage's)
  const bool memory = gpt::wants_memory(a);
  pt::memory_sizes sizes;
  sizes.kept.clear();
  for (int s = 0; s < plan.compute().stages; ++s) {
    const stage_t& st = models.front().stage(s % S);
    const auto input = static_cast<std::int64_t>(st.input_extent(0) * sizeof(float) +
                                                 st.input_extent(1) * sizeof(std::int32_t));
    sizes.saved.push_back(static_cast<std::int64_t>(graph_bytes[static_cast<std::size_t>(s % S)]) + input);
    sizes.kept.push_back(input);
  }
  const pt::memory_program actions = gpt::place_run_memory(a, plan, sizes, cli);
  std::optional<ph::executor<pt::uniform_chain<stage_t>>> ex;
  std::optional<ph::mesh_executor<pt::uniform_chain<stage_t>>> mex;
  const bool meshed = a.dp > 1 || a.fsdp || a.tie || memory;
  const ph::executor_options run_options{.deadline = std::chrono::seconds(120)};
  try {
    if (meshed)
    {
      pt::dp_options o{.dp = a.dp, .shard = a.fsdp, .buckets = a.buckets};
      if (a.tie) o.ties = {{0, S - 1}};
      mex.emplace(plan, pt::mesh{plan.compute().ranks, a.dp}, o, replicas,
                  ph::mesh_options{.exec = run_options, .memory = actions});
    }
    else
      ex.emplace(plan, models.front(), run_options);
  } catch (const std::invalid_argument& e) {
    cli.fail(e.what());
  }
  if (!a.json)
    std::printf("torch_gpt: %d layers, %d heads, width %d, vocab %d, seq %d; %s on %d ranks, %d stages, %d "
                "microbatches of %d rows%s (LibTorch %d.%d, %d intra-op thread%s)\n",
                c.layers, c.heads, c.width, c.vocab, c.seq, a.schedule.c_str(), plan.compute().ranks, S, m, c.rows,
                meshed ? (" x " + std::to_string(a.dp) + " replicas" + (a.fsdp ? " (FSDP)" : "") +
                          (memory ? ", memory actions" : ""))
                             .c_str()
                       : "",
                TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, a.intra, a.intra == 1 ? "" : "s");

  std::vector<stage_t*> first_replica;
  for (int s = 0; s < S; ++s) first_replica.push_back(&models.front().stage(s));
  gpt::step_data d;
  double loss_first = 0, loss_last = 0, max_diff = 0, reference_ms = 0;
  bool grads_match = false, replicas_agree = true;
  std::vector<double> step_ms;
  for (int step = 1; step <= a.steps; ++step) {
    for (auto& md : models)
      for (stage_t& s : md.stages()) s.zero_grad();
    gpt::draw(d, corpus, a, step);
    std::vector<std::vector<float>> ref;
    if (step == 1) {  // before the step: the reference reads the same parameters
      const auto r0 = std::chrono::steady_clock::now();
      ref = reference_step(parts.front(), d.mbs, a.dp, a.tie, d.tokens, c);
      reference_ms = gpt::since_ms(r0);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const pt::step_losses& l = meshed ? mex->step(d.batch) : ex->step(d.batch);
    step_ms.push_back(gpt::since_ms(t0));
    const double loss = l.objective();
    if (step == 1) {
      loss_first = loss;
      if (!a.fsdp) replicas_agree = gpt::replicas_agree(models);  // each holds the whole reduced gradient
      gpt::gather_shards(models, a, true);
      grads_match = true;
      for (int s = 0; s < S; ++s) {
        const std::span<float> x = models.front().stage(s).weight_gradients();
        const std::vector<float>& y = ref[static_cast<std::size_t>(s)];
        grads_match = grads_match && x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size_bytes()) == 0;
        for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i)
          max_diff = examples::worst(max_diff, static_cast<double>(std::fabs(x[i] - y[i])));
      }
      if (!a.dump.empty()) try {
          gpt::model_params<float> grads = gpt::zero_params<float>(c);
          gather(first_replica, parts.front(), grads, true);
          gpt::write_dump(a.dump, c, initial, d.mbs, grads, loss, a.tie);
        } catch (const std::exception& e) {
          cli.fail(std::string("--dump ") + a.dump + ": " + e.what());
        }
    }
    loss_last = loss;
    // (with FSDP each replica's optimizer steps every element; what it does not own is NaN after
    // the release and is gathered from its owner before the next use)
    for (auto& opts : optimizers)
      for (auto& o : opts) o->step();
    if (!a.json && (step == 1 || step % 10 == 0 || step == a.steps))
      std::printf("step %4d  loss %.4f  %8.2f ms\n", step, loss, step_ms.back());
  }
  const double ms = gpt::median(step_ms);
  gpt::gather_shards(models, a, false);  // the whole model on replica 0 (released after the last step)

  // what autograd holds against what the plan counts: a graph lives from a microbatch's F (or its
  // RECOMPUTE) to its last backward, as the plan's stash does, so per stage the most graphs held at
  // once is at most its rank's planned stash peak, and equal to it where a rank holds one stage
  // (docs/14 §14.5); in bytes, the plan's peak with each graph's measured bytes and its input
  const std::vector<pt::rank_memory> planned =
      pt::memory_of(plan.compute(), actions, pt::memory_sizes{{1}, {0}}, pt::stash_model);
  const std::vector<pt::rank_memory> planned_bytes = pt::memory_of(plan.compute(), actions, sizes, pt::stash_model);
  std::optional<gpt::memory_report> mem;
  if (memory) mem.emplace(*mex, plan, actions, a.dp);
  const std::vector<int> owner = pt::detail::stage_owners(plan.compute());
  std::string held_list = "[", planned_list = "[", bytes_list = "[", peak_list = "[";
  for (std::size_t r = 0; r < planned_bytes.size(); ++r)
    peak_list += (r ? ", " : "") + std::to_string(planned_bytes[r].peak_bytes);
  peak_list += "]";
  bool graphs_within = true;
  for (int s = 0; s < S; ++s) {
    const auto held_most = static_cast<std::int64_t>(models.front().stage(s).graphs_high_water());
    const std::int64_t peak = planned[static_cast<std::size_t>(owner[static_cast<std::size_t>(s)])].peak_bytes;
    graphs_within = graphs_within && (S == plan.compute().ranks ? held_most == peak : held_most <= peak);
    held_list += (s ? ", " : "") + std::to_string(held_most);
    planned_list += (s ? ", " : "") + std::to_string(peak);
    bytes_list += (s ? ", " : "") + std::to_string(graph_bytes[static_cast<std::size_t>(s)]);
  }
  bytes_list += "]";
  held_list += "]";
  planned_list += "]";

  bool tied_equal = true;
  if (a.tie) {  // the two copies of the tied parameter after training
    const std::span<float> x = models.front().stage(0).tied_parameters(0),
                           y = models.front().stage(S - 1).tied_parameters(0);
    tied_equal = std::memcmp(x.data(), y.data(), x.size_bytes()) == 0;
  }

  // --eval: held-back text through the schedule's forward-only plan, against the unpipelined forward
  double eval_loss = 0;
  bool eval_matches = true;
  if (a.eval) {
    const pt::runtime_plan eval_plan =
        pt::build_plan(pt::forward_only_of(pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks)));
    if (!eval_plan.ok()) cli.fail("the forward-only plan was rejected: " + pt::explain(eval_plan.result));
    ph::executor ev{eval_plan, models.front(), run_options};
    args one = a;  // one replica's microbatches
    one.dp = 1;
    gpt::draw(d, held, one, 0);
    const pt::step_losses& l = ev.step(d.batch);
    eval_loss = l.objective();
    at::NoGradGuard no_grad;
    for (std::size_t j = 0; j < d.mbs.size(); ++j) {
      const gpt::microbatch& mb = d.mbs[j];
      const auto t = static_cast<std::int64_t>(mb.t);
      const at::Tensor ids = torch::from_blob(const_cast<std::int32_t*>(mb.ids.data()), {c.rows, t}, torch::kInt);
      const at::Tensor targets =
          torch::from_blob(const_cast<std::int32_t*>(mb.targets.data()), {c.rows, t}, torch::kInt);
      at::Tensor h;
      for (auto& part : parts.front()) h = part->forward(h, ids);
      eval_matches = eval_matches && parts.front().back()->loss(h, targets).item<float>() == l.at(0, static_cast<int>(j));
    }
  }
  if (a.json) {
    gpt::print_json_head(a, plan.compute().ranks, S, m, loss_first, loss_last, grads_match, max_diff, ms, reference_ms);
    if (meshed)
      std::printf(", \"dp\": %d, \"fsdp\": %s, \"tied\": %s, \"replicas_agree\": %s, \"tied_copies_equal\": %s", a.dp,
                  a.fsdp ? "true" : "false", a.tie ? "true" : "false",
                  a.fsdp || a.dp < 2 ? "null" : replicas_agree ? "true" : "false", tied_equal ? "true" : "false");
    if (a.eval)
      std::printf(", \"eval_loss\": %.9g, \"eval_matches_reference\": %s", eval_loss, eval_matches ? "true" : "false");
    if (mem) mem->print_json();
    std::printf(", \"graphs\": {\"high_water\": %s, \"planned\": %s, \"within_plan\": %s, \"bytes\": %s, "
                "\"planned_peak_bytes\": %s}",
                held_list.c_str(), planned_list.c_str(), graphs_within ? "true" : "false", bytes_list.c_str(),
                peak_list.c_str());
    std::printf("}\n");
  } else {
    if (a.eval)
      std::printf("held-back text under the forward-only plan: loss %.4f (%s the unpipelined forward's)\n", eval_loss,
                  eval_matches ? "bitwise" : "DIFFERENT from");
    std::printf("first step's gradients %s the unpipelined LibTorch run's (max |diff| %.3g)\n",
                grads_match ? "are bitwise" : "DIFFER from", max_diff);
    if (meshed && !a.fsdp && a.dp > 1)
      std::printf("every replica's gradients %s\n", replicas_agree ? "are bitwise the same" : "DIFFER");
    std::printf("median step %.2f ms pipelined, %.2f ms unpipelined (the first step's microbatches, one thread)\n", ms,
                reference_ms);
    if (a.tie)
      std::printf("the tied copies (wte, lm_head) %s after training\n", tied_equal ? "are bitwise equal" : "DIFFER");
    if (mem) mem->print_text();
    std::printf("autograd graphs held at once per stage %s, the plan's stash peak of each stage's rank %s%s; a "
                "full-length microbatch's graph holds %s bytes per stage; the plan's peak per rank, graphs and "
                "inputs, %s bytes\n",
                held_list.c_str(), planned_list.c_str(), graphs_within ? "" : " (NOT within the plan)", bytes_list.c_str(),
                peak_list.c_str());
    if (!a.dump.empty()) std::printf("dump written to %s\n", a.dump.c_str());
  }
  return grads_match && replicas_agree && eval_matches && tied_equal && graphs_within && (!mem || mem->within) ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "torch_gpt: %s\n", e.what());
  return 1;
}
