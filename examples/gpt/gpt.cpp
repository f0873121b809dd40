// examples/gpt/gpt.cpp — a GPT-2-style decoder trained through pipetype on host threads.
//
//   gpt --schedule NAME --ranks P --microbatches M --layers L --heads H --width C --seq T
//       --steps N [--rows R] [--chunks V] [--lr X] [--seq-lens a,b,...] [--eval] [--json] [--dump DIR]
//       [--dp D] [--fsdp] [--buckets N] [--tie-embeddings] [--clip X] [--zero 1] [--save DIR] [--resume DIR]
//       [--offload none|auto|all] [--recompute none|auto|all]
//
// The model is examples/gpt/layers.hpp's (token and position embeddings, L pre-LayerNorm blocks of
// causal multi-head attention and a GELU MLP, ln_f, an LM head, cross-entropy), cut into the
// plan's stages of whole blocks (stage.hpp). It trains on the repository's own docs as a
// character-level corpus (the last tenth held back), with Adam. --eval then reports the loss on
// held-back text under the schedule's forward-only plan (forward_only_of: no backward, no
// gradient, no stash kept), checked against the unpipelined forward of the same microbatches. The first step's
// gradients are compared with an unpipelined run of the same microbatches (layers.hpp's reference_step): bitwise equal
// under every schedule.
// --seq-lens gives the microbatches' sequence lengths (cycled over the microbatches; each at most
// T): each microbatch then computes and moves only its tokens. --dump writes the initial weights,
// the first batch, its loss and the pipelined run's gradients as .npy files, for
// tests/pytorch/check_gpt_dump.py to check against PyTorch's autograd. --json prints one line:
// grads_match_reference, max_abs_grad_diff, loss_first, loss_last, the step times (and with --eval
// eval_loss, eval_matches_reference).
// --dp D trains D data-parallel replicas of the pipeline (a pp × dp mesh on host threads,
// docs/12_data_parallel.md): each step draws D·M microbatches, replica d takes [d·M, (d+1)·M), and
// the gradient reduction runs where the plan placed it. --fsdp shards it (reduce-scatter, the
// parameters gathered before use and released after); --tie-embeddings ties lm_head.weight to
// wte.weight, whose gradients one tie-group all-reduce sums. The first step's gradients are then
// compared with reference_step_dp (each replica's microbatches in order, replicas in order), and
// --json adds dp, fsdp, tied, replicas_agree and tied_copies_equal. --buckets N splits each
// stage's reduction into N all-reduces; the stages write their weight gradients from the last
// layer back and release each bucket as soon as its layers are written (ctx.gradients_written_from),
// so the first buckets are reduced while the backward still runs (docs/12 §12.5); --json adds buckets.
// --clip X adds GRAD_NORM to the step and scales Adam's gradients to a global norm of at most X.
// --zero 1 (ZeRO-1, with --dp) puts the optimizer in the step: each replica keeps Adam's moments for
// its shard of every stage only, the reduction is a reduce-scatter, each stage's OPT_STEP runs
// Adam on the replica's shard inside the step (stage.hpp optimizer_step) and PARAM_SYNC gathers the
// shards; --json adds zero and replica_params_agree (and, as every --dp run, adam_mib: replica 0's
// moments).
// --save DIR writes a checkpoint after training (DIR/model.safetensors: the parameters under GPT-2's
// Hugging Face names; DIR/optimizer.safetensors: Adam's moments and the step), each file written
// whole and then renamed; --resume DIR starts from one, in any layout (docs/12 §12.6).
// --offload and --recompute add memory actions (docs/13_memory.md): each microbatch's stash (what
// a stage keeps for its backward beside its input) and its input copied to a host pool after its
// forward and back before its backward on a copy stream per rank, or the stash dropped and rebuilt
// by running the forward again before the backward; placed by the pass (all, or auto: what the gap
// rule allows), proved, and run by the mesh executor. The gradients stay bitwise the unpipelined
// run's; --json adds memory: the actions, and per rank the stash pool's slots (the plan's peak),
// the most in use at once as the step ran (never above the plan's peak: high_water_within_plan),
// the slots the same plan needs without actions, and the activation slots with the actions
// (offloaded inputs leave theirs) and without.
#include <pipetype/host.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cli.hpp"
#include "../figures.hpp"
#include "../write_file.hpp"
#include "layers.hpp"
#include "run.hpp"
#include "safetensors.hpp"
#include "stage.hpp"

namespace {

namespace pt = pipetype;
namespace ph = pipetype::host;

constexpr const char* usage =
    "usage: gpt [--schedule NAME] [--ranks P] [--microbatches M] [--chunks V] [--layers L] [--heads H]\n"
    "           [--width C] [--seq T] [--rows R] [--steps N] [--lr X] [--seq-lens a,b,...] [--eval]\n"
    "           [--json] [--dump DIR] [--corpus DIR] [--dp D] [--fsdp] [--buckets N] [--tie-embeddings]\n"
    "           [--clip X] [--zero 1] [--save DIR] [--resume DIR] [--offload none|auto|all]\n"
    "           [--recompute none|auto|all]\n"
    "--eval: after training, the loss on held-back text under the forward-only plan\n" GPT_RUN_FLAGS_HELP
    "--tie-embeddings: the LM head's weight is the token embedding's (needs two stages or more)\n"
    "--clip X: scale the step's gradients to a global norm of at most X (GRAD_NORM over every rank)\n"
    "--zero 1: ZeRO-1 (needs --dp): Adam inside the step on each replica's shard, its state 1/D a replica\n"
    "--save DIR: after training, the parameters and Adam's state as safetensors (GPT-2's names)\n"
    "--resume DIR: start from such a checkpoint (its step included), in any --ranks/--dp/--fsdp layout\n"
    "--offload, --recompute: memory actions on each microbatch's stash and input (docs/13): copied to the\n"
    "            host and back, or the stash rebuilt by running its forward again before the backward\n";

constexpr examples::cli cli{"gpt", usage};
using args = gpt::run_args;
args parse(int argc, char** argv) {
  return gpt::parse_run(argc, argv, cli, 1.0, [](args& a, const std::string& f, const std::string& v) {
    if (f != "--save" && f != "--resume") return false;
    if (v.empty()) cli.fail(f + " needs a directory");
    (f == "--save" ? a.save : a.resume) = v;
    return true;
  });
}

// ---- checkpoints (--save DIR, --resume DIR) ----------------------------------------------------
// DIR/model.safetensors: the parameters under GPT-2's Hugging Face names (lm_head.weight left out
// when tied, as --dump does); DIR/optimizer.safetensors: Adam's moments (exp_avg.NAME,
// exp_avg_sq.NAME) and the step. Both carry the model's sizes in their metadata. The data a step
// draws and the initial weights are functions of the step and a fixed seed, so the step is the
// whole of the run's position; the layout (ranks, dp, FSDP) is not in the files.
struct checkpoint {
  gpt::model_params<float> params, m, v;
  int step = 0;
};

std::map<std::string, std::string> model_metadata(const gpt::gpt_config& c, bool tie) {
  return {{"format", "pt"},
          {"n_layer", std::to_string(c.layers)},
          {"n_head", std::to_string(c.heads)},
          {"n_embd", std::to_string(c.width)},
          {"vocab_size", std::to_string(c.vocab)},
          {"n_positions", std::to_string(c.seq)},
          {"tie_word_embeddings", tie ? "true" : "false"}};
}

void save_checkpoint(const std::filesystem::path& dir, const gpt::gpt_config& c, bool tie, const checkpoint& k) {
  std::filesystem::create_directories(dir);
  gpt::safetensors::file model, opt;
  model.metadata = opt.metadata = model_metadata(c, tie);
  opt.metadata["step"] = std::to_string(k.step);
  for (const gpt::model_tensor& mt : gpt::model_tensors(c)) {
    const gpt::tensor_info& t = mt.tensor;
    if (tie && t.name == "lm_head.weight") continue;
    auto take = [&](const gpt::model_params<float>& from) {
      const std::vector<float>& x = gpt::part_vector(from, mt.part);
      return gpt::safetensors::tensor{t.shape,
                                      std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                                         x.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size))};
    };
    model.tensors[t.name] = take(k.params);
    opt.tensors["exp_avg." + t.name] = take(k.m);
    opt.tensors["exp_avg_sq." + t.name] = take(k.v);
  }
  gpt::safetensors::write(dir / "optimizer.safetensors", opt);
  gpt::safetensors::write(dir / "model.safetensors", model);
}

checkpoint load_checkpoint(const std::filesystem::path& dir, const gpt::gpt_config& c, bool tie) {
  checkpoint k{gpt::zero_params<float>(c), gpt::zero_params<float>(c), gpt::zero_params<float>(c), 0};
  const gpt::safetensors::file model = gpt::safetensors::read(dir / "model.safetensors");
  const gpt::safetensors::file opt = gpt::safetensors::read(dir / "optimizer.safetensors");
  const std::map<std::string, std::string> want = model_metadata(c, tie);
  for (const auto* f : {&model, &opt})
    for (const auto& [key, value] : want)
      if (const auto it = f->metadata.find(key); it == f->metadata.end() || it->second != value)
        throw std::runtime_error((dir / (f == &model ? "model.safetensors" : "optimizer.safetensors")).string() +
                                 ": a checkpoint of another model (" + key + " " +
                                 (it == f->metadata.end() ? std::string("missing") : it->second) + ", this run's " +
                                 value + ")");
  std::size_t used_model = 0, used_opt = 0;
  for (const gpt::model_tensor& mt : gpt::model_tensors(c)) {
    const gpt::tensor_info& t = mt.tensor;
    if (tie && t.name == "lm_head.weight") continue;
    auto put = [&](const gpt::safetensors::file& f, const std::string& name, gpt::model_params<float>& into,
                   const char* file_name, std::size_t& used) {
      const auto it = f.tensors.find(name);
      if (it == f.tensors.end()) throw std::runtime_error((dir / file_name).string() + " has no tensor '" + name + "'");
      if (it->second.shape != t.shape) {
        auto text = [](const std::vector<std::size_t>& s) {
          std::string o;
          for (const std::size_t d : s) o += (o.empty() ? "" : ", ") + std::to_string(d);
          return "[" + o + "]";
        };
        throw std::runtime_error((dir / file_name).string() + ": tensor '" + name + "' has shape " +
                                 text(it->second.shape) + ", the model's is " + text(t.shape));
      }
      std::copy(it->second.data.begin(), it->second.data.end(),
                gpt::part_vector(into, mt.part).begin() + static_cast<std::ptrdiff_t>(t.offset));
      ++used;
    };
    put(model, t.name, k.params, "model.safetensors", used_model);
    put(opt, "exp_avg." + t.name, k.m, "optimizer.safetensors", used_opt);
    put(opt, "exp_avg_sq." + t.name, k.v, "optimizer.safetensors", used_opt);
  }
  auto extra = [&](const gpt::safetensors::file& f, std::size_t used, const char* file_name) {
    if (f.tensors.size() == used) return;
    for (const auto& [name, t] : f.tensors) {
      bool known = false;
      for (const gpt::model_tensor& mt : gpt::model_tensors(c))
        known = known || name == mt.tensor.name || name == "exp_avg." + mt.tensor.name ||
                name == "exp_avg_sq." + mt.tensor.name;
      if (!known || (tie && name.find("lm_head.weight") != std::string::npos))
        throw std::runtime_error((dir / file_name).string() + ": tensor '" + name + "' is not this model's");
    }
  };
  extra(model, used_model, "model.safetensors");
  extra(opt, used_opt, "optimizer.safetensors");
  const auto step = opt.metadata.find("step");
  if (step == opt.metadata.end() || step->second.empty() || step->second.size() > 9 ||
      step->second.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error((dir / "optimizer.safetensors").string() + " says no step (metadata \"step\")");
  k.step = std::stoi(step->second);
  if (tie)  // the LM head's copy of the tied parameter, and its moments, are the embedding's
    for (gpt::model_params<float>* x : {&k.params, &k.m, &k.v})
      std::copy(gpt::tied_in_embedding(x->embedding, c).begin(), gpt::tied_in_embedding(x->embedding, c).end(),
                gpt::tied_in_head(x->head, c).begin());
  return k;
}

/// The norm GRAD_NORM gives (mesh_executor::grad_norm), from the unpipelined reference's gradients
/// `g` in the collective's order: global ranks in order, each its pipeline rank's stages in order,
/// Σ x² (in double, element order) over what the rank answers for — its shard under FSDP, else
/// replica 0's whole gradient — the tied lm_head's span counted on the first stage only.
double reference_norm(const gpt::gpt_config& c, const gpt::model_params<float>& g, pt::program_view p,
                      const pt::mesh& m, bool fsdp, bool tie, pt::uniform_chain<gpt::stage>& model) {
  const int S = p.stages;
  gpt::stage& last = model.stage(S - 1);
  const auto tied_at = static_cast<std::size_t>(last.tied_gradients(0).data() - last.weight_gradients().data());
  const std::size_t tied_end = tied_at + last.tied_gradients(0).size();
  double total = 0;
  for (int rank = 0; rank < m.size(); ++rank)
    for (int s = 0; s < S; ++s) {
      if (p.stage_rank[static_cast<std::size_t>(s)] != m.pipeline_rank(rank)) continue;
      const std::vector<float> x = gpt::stage::flat_parameters(c, s, S, g);
      const int d = m.replica(rank);
      const pt::shard_range own =
          fsdp && m.dp > 1 ? pt::shard_of(x.size(), m.dp, d) : pt::shard_range{0, d == 0 ? x.size() : 0};
      auto part = [&](std::size_t b, std::size_t e) {
        double sum = 0;
        for (std::size_t i = b; i < e; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        if (b < e) total += sum;
      };
      if (tie && s == S - 1 && S > 1) {
        part(own.begin, std::min(own.end, tied_at));
        part(std::max(own.begin, tied_end), own.end);
      } else {
        part(own.begin, own.end);
      }
    }
  return std::sqrt(total);
}

}  // namespace

int main(int argc, char** argv) try {
  examples::tool_exits("gpt");
  args a = parse(argc, argv);
  const pt::runtime_plan plan = gpt::make_run_plan(a, cli);
  const int S = plan.compute().lane_length(), m = plan.compute().microbatches;
  const gpt::run_start start = gpt::start_run(a, S, cli);
  const gpt::char_corpus &corpus = start.corpus, &held = start.held;
  const gpt::gpt_config& c = a.model;
  // --resume: the parameters, Adam's moments and the step of a checkpoint, in any layout
  std::optional<checkpoint> resumed;
  if (!a.resume.empty()) try {
      resumed = load_checkpoint(a.resume, c, a.tie);
    } catch (const std::exception& e) {
      cli.fail(std::string("--resume: ") + e.what());
    }
  const gpt::model_params<float>& initial = resumed ? resumed->params : start.initial;
  const int first_step = resumed ? resumed->step : 0;  // steps already taken
  // one model per replica, each with its own parameters, gradients and optimizer state; under
  // FSDP the stages lend their parameters to pipetype, which holds each replica's shard and the
  // gathered slots the plan sized: the stages read one shared initial copy while the executor is
  // bound, then keep none, and Adam's moments for their shard only
  const bool lend = a.fsdp && a.dp > 1;
  std::vector<std::shared_ptr<std::vector<float>>> shared_initial;
  if (lend)
    for (int s = 0; s < S; ++s)
      shared_initial.push_back(std::make_shared<std::vector<float>>(gpt::stage::flat_parameters(c, s, S, initial)));
  std::deque<pt::uniform_chain<gpt::stage>> models;
  std::vector<pt::uniform_chain<gpt::stage>*> replicas;
  for (int r = 0; r < a.dp; ++r) {
    std::vector<gpt::stage> stages;
    for (int s = 0; s < S; ++s)
      if (lend)
        stages.emplace_back(c, s, S, gpt::stage::lending{a.dp, r, shared_initial[static_cast<std::size_t>(s)]});
      else
        stages.emplace_back(c, s, S, initial);
    replicas.push_back(&models.emplace_back(std::move(stages)));
  }
  pt::uniform_chain<gpt::stage>& model = models.front();
  if (a.zero > 0)  // ZeRO-1: each replica's moments for its shard, Adam in the step's OPT_STEPs
    for (int r = 0; r < a.dp; ++r)
      for (gpt::stage& st : models[static_cast<std::size_t>(r)].stages()) {
        st.own_shard(a.dp, r);
        st.set_optimizer(a.lr, a.clip, first_step);
      }
  if (resumed)  // Adam's moments: each stage its own part (its shard when it lends its parameters)
    for (pt::uniform_chain<gpt::stage>& md : models)
      for (int s = 0; s < S; ++s)
        md.stage(s).set_adam(gpt::stage::flat_parameters(c, s, S, resumed->m),
                             gpt::stage::flat_parameters(c, s, S, resumed->v));
  const bool memory = gpt::wants_memory(a);
  const bool meshed = a.dp > 1 || a.fsdp || a.tie || memory || a.clip > 0 || a.zero > 0;
  // --offload, --recompute: the actions on what each stage saves for its backward, its stash and
  // its input (none on the first stage, which reads the batch); an OFFLOAD moves both, a
  // recomputed forward keeps its input
  pt::memory_sizes saved_bytes;
  saved_bytes.kept.clear();
  for (int s = 0; s < plan.compute().stages; ++s) {
    const gpt::stage& st = model.stage(s % S);
    const auto input = static_cast<std::int64_t>(st.input_extent(0) * sizeof(float));
    saved_bytes.saved.push_back(static_cast<std::int64_t>(st.stash_extent() * sizeof(float)) + input);
    saved_bytes.kept.push_back(input);
  }
  const pt::memory_program actions = gpt::place_run_memory(a, plan, saved_bytes, cli);
  std::optional<ph::executor<pt::uniform_chain<gpt::stage>>> ex;
  std::optional<ph::mesh_executor<pt::uniform_chain<gpt::stage>>> mex;
  const ph::executor_options run_options{.deadline = std::chrono::seconds(120)};
  try {
    if (meshed) {
      pt::dp_options o{.dp = a.dp, .shard = a.fsdp, .buckets = a.buckets, .grad_norm = a.clip > 0, .zero = a.zero};
      if (a.tie) o.ties = {{0, S - 1}};
      mex.emplace(plan, pt::mesh{plan.compute().ranks, a.dp}, o, replicas,
                  ph::mesh_options{.exec = run_options, .memory = actions});
    } else {
      ex.emplace(plan, model, run_options);
    }
  } catch (const std::invalid_argument& e) {
    cli.fail(e.what());
  }
  if (lend) {  // pipetype holds the shards now
    for (pt::uniform_chain<gpt::stage>& md : models)
      for (gpt::stage& s : md.stages()) s.drop_initial();
    shared_initial.clear();
  }

  if (!a.json)
    std::printf(
        "gpt: %d layers, %d heads, width %d, vocab %d, seq %d; %s on %d ranks, %d stages, %d microbatches of %d "
        "rows%s\n",
        c.layers, c.heads, c.width, c.vocab, c.seq, a.schedule.c_str(), plan.compute().ranks, S, m, c.rows,
        meshed ? (" × " + std::to_string(a.dp) + " replicas" + (a.fsdp ? " (FSDP)" : "") +
                  (a.tie ? ", tied embeddings" : "") + (memory ? ", memory actions" : ""))
                     .c_str()
               : "");

  gpt::step_data d;
  double loss_first = 0, loss_last = 0, max_diff = 0;
  bool grads_match = false, replicas_agree = true, tied_equal = true;
  double norm_first = 0;     // --clip: the first step's GRAD_NORM
  bool norm_matches = true;  // ... bitwise the reference gradients' norm summed in GRAD_NORM's order
  int clipped = 0;           // steps whose gradients were scaled down
  std::vector<double> step_ms;
  double reference_ms = 0;
  for (int step = 1; step <= a.steps; ++step) {
    gpt::draw(d, corpus, a, first_step + step);
    const auto t0 = std::chrono::steady_clock::now();
    const pt::step_losses& l = meshed ? mex->step(d.batch) : ex->step(d.batch);
    step_ms.push_back(gpt::since_ms(t0));
    const double loss = l.objective();
    if (step == 1) {
      loss_first = loss;
      // the same microbatches one after the other, unpipelined, from the same parameters
      gpt::model_params<float> ref_grads;
      const auto r0 = std::chrono::steady_clock::now();
      gpt::reference_step_dp<float>(c, initial, d.mbs, a.dp, a.tie, ref_grads);
      reference_ms = gpt::since_ms(r0);
      if (!a.fsdp && a.zero == 0) replicas_agree = gpt::replicas_agree(models);  // each holds the whole sum
      gpt::gather_shards(models, a, true);
      gpt::model_params<float> grads = gpt::zero_params<float>(c);
      for (const gpt::stage& s : model.stages()) s.gather(grads, true);
      grads_match = true;
      for (int part = 0; part <= c.layers + 1; ++part) {
        const std::vector<float>& x = gpt::part_vector(grads, part);
        const std::vector<float>& y = gpt::part_vector(ref_grads, part);
        grads_match = grads_match && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
        for (std::size_t i = 0; i < x.size(); ++i)
          max_diff = examples::worst(max_diff, static_cast<double>(std::fabs(x[i] - y[i])));
      }
      if (a.clip > 0) {
        norm_first = mex->grad_norm();
        norm_matches = norm_first == reference_norm(c, ref_grads, plan.compute(), pt::mesh{plan.compute().ranks, a.dp},
                                                    a.fsdp || a.zero > 0, a.tie, model);
      }
      if (!a.dump.empty()) try {
          gpt::write_dump(a.dump, c, initial, d.mbs, grads, loss, a.tie);
        } catch (const std::exception& e) {
          cli.fail(std::string("--dump ") + a.dump + ": " + e.what());  // (nothing says "dump written")
        }
    }
    loss_last = loss;
    // --clip: PyTorch's clip_grad_norm_ rule, every rank with the one norm GRAD_NORM gave them all
    float scale = 1;
    if (a.clip > 0) {
      const double norm = mex->grad_norm();
      if (a.clip / (norm + 1e-6) < 1) scale = static_cast<float>(a.clip / (norm + 1e-6)), ++clipped;
    }
    for (int r = 0; r < a.dp; ++r)
      for (int s = 0; s < S; ++s) {
        gpt::stage& st = models[static_cast<std::size_t>(r)].stage(s);
        if (a.zero > 0)  // (Adam ran in the step's OPT_STEP, with the same scale)
          st.zero_grads();
        else if (lend)
          st.adam(mex->parameter_shard<float>(r, s), a.lr, first_step + step, scale);
        else
          st.adam(a.lr, first_step + step, scale);
      }
    if (!a.json && (step == 1 || step % 10 == 0 || step == a.steps))
      std::printf("step %4d  loss %.4f  %8.2f ms\n", step, loss, step_ms.back());
  }
  const double ms = gpt::median(step_ms);
  // the stash pools of a step with memory actions: planned, measured, and the same plan without them
  std::optional<gpt::memory_report> mem;
  if (memory) mem.emplace(*mex, plan, actions, a.dp);
  const bool water_within = !mem || mem->within;
  // the whole model on replica 0, for --eval and the tied copies: under FSDP from the shards
  if (lend) {
    for (int s = 0; s < S; ++s) {
      std::vector<float> whole(model.stage(s).weight_grad_extent());
      for (int r = 0; r < a.dp; ++r) {
        const std::span<const float> part = mex->parameter_shard<float>(r, s);
        std::copy(part.begin(), part.end(),
                  whole.begin() + static_cast<std::ptrdiff_t>(mex->shard_range_of(r, s).begin));
      }
      model.stage(s).restore(std::move(whole));
    }
  } else {
    gpt::gather_shards(models, a, false);
  }
  // ZeRO-1: after PARAM_SYNC every replica holds the whole updated parameters
  const bool params_agree = a.zero == 0 || gpt::replicas_agree(models, false);
  const std::optional<gpt::param_report> lent =
      lend ? std::optional<gpt::param_report>(std::in_place, *mex, plan, model) : std::nullopt;
  if (a.tie) {
    const std::span<float> x = model.stages().front().tied_parameters(), y = model.stages().back().tied_parameters();
    tied_equal = std::memcmp(x.data(), y.data(), x.size_bytes()) == 0;
  }
  // --save: the whole model (replica 0's, gathered above), every replica's part of Adam's moments
  if (!a.save.empty()) try {
      checkpoint k{gpt::zero_params<float>(c), gpt::zero_params<float>(c), gpt::zero_params<float>(c),
                   first_step + a.steps};
      for (int s = 0; s < S; ++s) {
        model.stage(s).gather(k.params, false);
        std::vector<float> m_whole(model.stage(s).weight_grad_extent()), v_whole(m_whole.size());
        for (const pt::uniform_chain<gpt::stage>& md : models) {
          const gpt::stage& st = md.stage(s);
          const auto at = static_cast<std::ptrdiff_t>(st.adam_range().begin);
          std::copy(st.adam_m().begin(), st.adam_m().end(), m_whole.begin() + at);
          std::copy(st.adam_v().begin(), st.adam_v().end(), v_whole.begin() + at);
        }
        model.stage(s).gather_flat(m_whole, k.m);
        model.stage(s).gather_flat(v_whole, k.v);
      }
      save_checkpoint(a.save, c, a.tie, k);
    } catch (const std::exception& e) {
      cli.fail(std::string("--save: ") + e.what());
    }

  // --eval: held-back text through the schedule's forward-only plan, against the unpipelined forward
  double eval_loss = 0;
  bool eval_matches = true;
  if (a.eval) {
    const pt::runtime_plan eval_plan =
        pt::build_plan(pt::forward_only_of(pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks)));
    if (!eval_plan.ok()) cli.fail("the forward-only plan was rejected: " + pt::explain(eval_plan.result));
    ph::executor ev{eval_plan, model, {.deadline = std::chrono::seconds(120)}};
    args one = a;  // one replica's microbatches
    one.dp = 1;
    gpt::draw(d, held, one, 0);
    const pt::step_losses& l = ev.step(d.batch);
    eval_loss = l.objective();
    gpt::model_params<float> now = gpt::zero_params<float>(c);
    for (const gpt::stage& s : model.stages()) s.gather(now, false);
    const std::vector<double> sums = gpt::reference_forward<float>(c, now, d.mbs);
    for (std::size_t j = 0; j < sums.size(); ++j)
      eval_matches = eval_matches && static_cast<float>(sums[j]) == l.at(0, static_cast<int>(j));
  }

  if (a.json) {
    gpt::print_json_head(a, plan.compute().ranks, S, m, loss_first, loss_last, grads_match, max_diff, ms, reference_ms);
    if (meshed)
      std::printf(", \"dp\": %d, \"fsdp\": %s, \"tied\": %s, \"replicas_agree\": %s, \"tied_copies_equal\": %s", a.dp,
                  a.fsdp ? "true" : "false", a.tie ? "true" : "false",
                  // compared only where each replica holds the whole gradient (not one replica, not
                  // FSDP's shards): null says "not checked", never a true nobody tested
                  a.fsdp || a.zero > 0 || a.dp < 2 ? "null" : (replicas_agree ? "true" : "false"),
                  tied_equal ? "true" : "false");
    if (meshed) {
      double adam_floats = 0;  // replica 0's moments: two floats an element of what its optimizer updates
      for (const gpt::stage& st : model.stages()) adam_floats += 2.0 * static_cast<double>(st.adam_m().size());
      std::printf(", \"buckets\": %d, \"adam_mib\": %.3f", a.buckets, adam_floats * 4 / (1 << 20));
    }
    if (a.zero > 0)
      std::printf(", \"zero\": %d, \"replica_params_agree\": %s", a.zero, params_agree ? "true" : "false");
    if (a.clip > 0)
      std::printf(
          ", \"clip\": %g, \"grad_norm_first\": %.9g, \"grad_norm_matches_reference\": %s, \"clipped_steps\": %d",
          static_cast<double>(a.clip), norm_first, norm_matches ? "true" : "false", clipped);
    if (a.eval)
      std::printf(", \"eval_loss\": %.9g, \"eval_matches_reference\": %s", eval_loss, eval_matches ? "true" : "false");
    if (mem) mem->print_json();
    if (lent) lent->print_json();
    std::printf(", \"peak_rss_mib\": %.1f}\n", examples::peak_rss_mib());
  } else {
    if (a.eval)
      std::printf("held-back text under the forward-only plan: loss %.4f (%s the unpipelined forward's)\n", eval_loss,
                  eval_matches ? "bitwise" : "DIFFERENT from");
    std::printf("first step's gradients %s the unpipelined run's (max |diff| %.3g)\n",
                grads_match ? "are bitwise" : "DIFFER from", max_diff);
    if (meshed && !a.fsdp && a.zero == 0 && a.dp > 1)
      std::printf("every replica's gradients %s\n", replicas_agree ? "are bitwise the same" : "DIFFER");
    if (a.tie)
      std::printf("the tied copies (wte, lm_head) %s after training\n", tied_equal ? "are bitwise equal" : "DIFFER");
    if (a.zero > 0)
      std::printf("ZeRO-1: every replica's parameters %s after training\n",
                  params_agree ? "are bitwise the same" : "DIFFER");
    if (mem) mem->print_text();
    if (lent) lent->print_text();
    std::printf("peak resident memory of the process: %.1f MiB\n", examples::peak_rss_mib());
    std::printf("median step %.2f ms pipelined, %.2f ms unpipelined (the first step's microbatches, one thread)\n", ms,
                reference_ms);
    if (!a.dump.empty()) std::printf("dump written to %s\n", a.dump.c_str());
  }
  return grads_match && eval_matches && replicas_agree && tied_equal && water_within && (!lent || lent->within) &&
                 norm_matches && params_agree
             ? 0
             : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt: %s\n", e.what());
  return 1;
}
