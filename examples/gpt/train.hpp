// examples/gpt/train.hpp — examples/gpt's training run (gpt.cpp's header says what it does),
// for each type of weight gradient: gpt.cpp instantiates it for float, gpt_grads16.cpp for
// pipetype::half and pipetype::bfloat16 (--grad-dtype fp16, bf16), so the three mesh executors
// compile side by side.
//
// Mixed precision (--grad-dtype fp16|bf16): the stages compute in float and hand pipetype their
// weight gradients rounded to 16 bits (stage.hpp); the microbatches' sums, the tie and the
// replicas' reductions are in that type, and Adam updates float parameters from them.
// --loss-scale dynamic seeds each step's loss with a scale S (a power of two, 2^16 at first as
// PyTorch's GradScaler, or --initial-loss-scale), so that small gradients stay above fp16's underflow; FINITE_CHECK
// tells every rank whether any gradient of the step overflowed: then every rank skips the update and S halves (never
// below 1); after --loss-scale-window clean steps (default 1000, Megatron-LM's) it doubles. Adam divides the gradients
// by S (exact: a power of two), and --clip bounds the norm of the unscaled gradients.
#pragma once

#include <pipetype/host.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../cli.hpp"
#include "../figures.hpp"
#include "../write_file.hpp"
#include "layers.hpp"
#include "run.hpp"
#include "safetensors.hpp"
#include "stage.hpp"

namespace gpt {

namespace ph = pipetype::host;

// ---- checkpoints (--save DIR, --resume DIR) ----------------------------------------------------
// DIR/model.safetensors: the parameters under GPT-2's Hugging Face names (lm_head.weight left out
// when tied, as --dump does); DIR/optimizer.safetensors: Adam's moments (exp_avg.NAME,
// exp_avg_sq.NAME), the step, Adam's own step count (below the step when mixed precision skipped
// some) and, with --loss-scale dynamic, the loss scale's state. Both carry the model's sizes in
// their metadata. The data a step draws and the initial weights are functions of the step and a
// fixed seed, so the step is the whole of the run's position; the layout (ranks, dp, FSDP) is not
// in the files.
struct checkpoint {
  model_params<float> params, m, v;
  int step = 0;
  int adam_step = 0;    // the updates Adam made (step − the skipped steps)
  int scale_log2 = -1;  // the loss scale 2^scale_log2; −1: none saved
  int scale_clean = 0;  // its clean steps since it last changed
};

inline std::map<std::string, std::string> model_metadata(const gpt_config& c, bool tie) {
  return {{"format", "pt"},
          {"n_layer", std::to_string(c.layers)},
          {"n_head", std::to_string(c.heads)},
          {"n_embd", std::to_string(c.width)},
          {"vocab_size", std::to_string(c.vocab)},
          {"n_positions", std::to_string(c.seq)},
          {"tie_word_embeddings", tie ? "true" : "false"}};
}

inline void save_checkpoint(const std::filesystem::path& dir, const gpt_config& c, bool tie, const checkpoint& k) {
  std::filesystem::create_directories(dir);
  safetensors::file model, opt;
  model.metadata = opt.metadata = model_metadata(c, tie);
  opt.metadata["step"] = std::to_string(k.step);
  opt.metadata["adam_step"] = std::to_string(k.adam_step);
  if (k.scale_log2 >= 0) {
    opt.metadata["loss_scale_log2"] = std::to_string(k.scale_log2);
    opt.metadata["loss_scale_clean"] = std::to_string(k.scale_clean);
  }
  for (const model_tensor& mt : model_tensors(c)) {
    const tensor_info& t = mt.tensor;
    if (tie && t.name == "lm_head.weight") continue;
    auto take = [&](const model_params<float>& from) {
      const std::vector<float>& x = part_vector(from, mt.part);
      return safetensors::tensor{t.shape,
                                 std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                                    x.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size))};
    };
    model.tensors[t.name] = take(k.params);
    opt.tensors["exp_avg." + t.name] = take(k.m);
    opt.tensors["exp_avg_sq." + t.name] = take(k.v);
  }
  safetensors::write(dir / "optimizer.safetensors", opt);
  safetensors::write(dir / "model.safetensors", model);
}

inline checkpoint load_checkpoint(const std::filesystem::path& dir, const gpt_config& c, bool tie) {
  checkpoint k{zero_params<float>(c), zero_params<float>(c), zero_params<float>(c), 0};
  const safetensors::file model = safetensors::read(dir / "model.safetensors");
  const safetensors::file opt = safetensors::read(dir / "optimizer.safetensors");
  const std::map<std::string, std::string> want = model_metadata(c, tie);
  for (const auto* f : {&model, &opt})
    for (const auto& [key, value] : want)
      if (const auto it = f->metadata.find(key); it == f->metadata.end() || it->second != value)
        throw std::runtime_error((dir / (f == &model ? "model.safetensors" : "optimizer.safetensors")).string() +
                                 ": a checkpoint of another model (" + key + " " +
                                 (it == f->metadata.end() ? std::string("missing") : it->second) + ", this run's " +
                                 value + ")");
  std::size_t used_model = 0, used_opt = 0;
  for (const model_tensor& mt : model_tensors(c)) {
    const tensor_info& t = mt.tensor;
    if (tie && t.name == "lm_head.weight") continue;
    auto put = [&](const safetensors::file& f, const std::string& name, model_params<float>& into,
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
                part_vector(into, mt.part).begin() + static_cast<std::ptrdiff_t>(t.offset));
      ++used;
    };
    put(model, t.name, k.params, "model.safetensors", used_model);
    put(opt, "exp_avg." + t.name, k.m, "optimizer.safetensors", used_opt);
    put(opt, "exp_avg_sq." + t.name, k.v, "optimizer.safetensors", used_opt);
  }
  auto extra = [&](const safetensors::file& f, std::size_t used, const char* file_name) {
    if (f.tensors.size() == used) return;
    for (const auto& [name, t] : f.tensors) {
      bool known = false;
      for (const model_tensor& mt : model_tensors(c))
        known = known || name == mt.tensor.name || name == "exp_avg." + mt.tensor.name ||
                name == "exp_avg_sq." + mt.tensor.name;
      if (!known || (tie && name.find("lm_head.weight") != std::string::npos))
        throw std::runtime_error((dir / file_name).string() + ": tensor '" + name + "' is not this model's");
    }
  };
  extra(model, used_model, "model.safetensors");
  extra(opt, used_opt, "optimizer.safetensors");
  // a whole number of the optimizer file's metadata: `fallback` when it says none (−2: required)
  auto whole = [&](const char* key, int fallback) {
    const auto it = opt.metadata.find(key);
    if (it == opt.metadata.end() && fallback != -2) return fallback;
    if (it == opt.metadata.end() || it->second.empty() || it->second.size() > 9 ||
        it->second.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error((dir / "optimizer.safetensors").string() + " says no " + key + " (metadata \"" + key +
                               "\")");
    return std::stoi(it->second);
  };
  k.step = whole("step", -2);
  k.adam_step = whole("adam_step", k.step);
  k.scale_log2 = whole("loss_scale_log2", -1);
  k.scale_clean = whole("loss_scale_clean", 0);
  if (k.adam_step > k.step || k.scale_log2 > 126)
    throw std::runtime_error((dir / "optimizer.safetensors").string() + " says adam_step " +
                             std::to_string(k.adam_step) + " past step " + std::to_string(k.step) +
                             " or a loss scale past float's range");
  if (tie)  // the LM head's copy of the tied parameter, and its moments, are the embedding's
    for (model_params<float>* x : {&k.params, &k.m, &k.v})
      std::copy(tied_in_embedding(x->embedding, c).begin(), tied_in_embedding(x->embedding, c).end(),
                tied_in_head(x->head, c).begin());
  return k;
}

/// The norm GRAD_NORM gives (mesh_executor::grad_norm), from the unpipelined reference's gradients
/// `g` in the collective's order: global ranks in order, each its pipeline rank's stages in order,
/// Σ x² (in double, element order) over what the rank answers for — its shard under FSDP, else
/// replica 0's whole gradient — the tied lm_head's span counted on the first stage only.
template <class G>
double reference_norm(const gpt_config& c, const model_params<float>& g, pt::program_view p, const pt::mesh& m,
                      bool fsdp, bool tie, pt::uniform_chain<basic_stage<G>>& model) {
  const int S = p.stages;
  basic_stage<G>& last = model.stage(S - 1);
  const auto tied_at = static_cast<std::size_t>(last.tied_gradients(0).data() - last.weight_gradients().data());
  const std::size_t tied_end = tied_at + last.tied_gradients(0).size();
  double total = 0;
  for (int rank = 0; rank < m.size(); ++rank)
    for (int s = 0; s < S; ++s) {
      if (p.stage_rank[static_cast<std::size_t>(s)] != m.pipeline_rank(rank)) continue;
      const std::vector<float> x = basic_stage<G>::flat_parameters(c, s, S, g);
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

/// Mixed precision's dynamic loss scale (train.hpp's header): 2^log2, halved on an overflow (not
/// below 1), doubled after `window` clean steps.
struct loss_scaler {
  int log2 = 16, clean = 0, window = 1000;
  double scale() const { return std::ldexp(1.0, log2); }
  /// After a step: whether its gradients were all finite.
  void update(bool finite) {
    if (!finite) {
      log2 = std::max(log2 - 1, 0), clean = 0;
    } else if (++clean >= window) {
      log2 = std::min(log2 + 1, 126), clean = 0;
    }
  }
};

/// --eval (gpt.cpp): the loss on held-back text of the whole model `now` under the schedule's
/// forward-only plan; `matches`: bitwise the unpipelined forward's.
double evaluate_held(const run_args& a, const char_corpus& held, const model_params<float>& now, int stages,
                     bool& matches, const examples::cli& cli);

/// Local learning: the last stage's part of the step's objective (the model's own loss), and
/// every stage's, each f · Σ_j its losses summed in double in microbatch order.
inline double sink_objective(const pt::step_losses& l, int sink) {
  double sum = 0;
  for (int j = 0; j < l.microbatches; ++j) sum += static_cast<double>(l.at(sink, j));
  return l.scale * sum;
}
inline double last_sink_objective(const pt::step_losses& l) { return sink_objective(l, l.sinks - 1); }
inline std::vector<double> local_objectives(const pt::step_losses& l) {
  std::vector<double> out;
  for (int s = 0; s < l.sinks; ++s) out.push_back(sink_objective(l, s));
  return out;
}

/// The run (gpt.cpp's header); its exit code.
template <class G>
int train(run_args& a, const examples::cli& cli) {
  using stage_t = basic_stage<G>;
  using model_t = pt::uniform_chain<stage_t>;
  constexpr bool plain_float = std::is_same_v<G, float>;  // (the one type that may run without a mesh)
  const pt::runtime_plan plan = make_run_plan(a, cli);
  const int S = plan.compute().lane_length(), m = plan.compute().microbatches;
  const run_start start = start_run(a, S, cli);
  const char_corpus &corpus = start.corpus, &held = start.held;
  const gpt_config& c = a.model;
  // --resume: the parameters, Adam's moments and the step of a checkpoint, in any layout
  std::optional<checkpoint> resumed;
  if (!a.resume.empty()) try {
      resumed = load_checkpoint(a.resume, c, a.tie);
    } catch (const std::exception& e) {
      cli.fail(std::string("--resume: ") + e.what());
    }
  const model_params<float>& initial = resumed ? resumed->params : start.initial;
  const int first_step = resumed ? resumed->step : 0;  // steps already taken
  int adam_step = resumed ? resumed->adam_step : 0;    // updates already made
  loss_scaler scaler;
  if (a.scale_window > 0) scaler.window = a.scale_window;
  if (a.scale_init > 0) scaler.log2 = std::countr_zero(static_cast<unsigned>(a.scale_init));
  if (resumed && resumed->scale_log2 >= 0) scaler.log2 = resumed->scale_log2, scaler.clean = resumed->scale_clean;
  // one model per replica, each with its own parameters, gradients and optimizer state; under
  // FSDP the stages lend their parameters to pipetype, which holds each replica's shard and the
  // gathered slots the plan sized: the stages read one shared initial copy while the executor is
  // bound, then keep none, and Adam's moments for their shard only
  const bool lend = a.fsdp && a.dp > 1;
  std::vector<std::shared_ptr<std::vector<float>>> shared_initial;
  if (lend)
    for (int s = 0; s < S; ++s)
      shared_initial.push_back(std::make_shared<std::vector<float>>(stage_t::flat_parameters(c, s, S, initial)));
  std::deque<model_t> models;
  std::vector<model_t*> replicas;
  for (int r = 0; r < a.dp; ++r) {
    std::vector<stage_t> stages;
    for (int s = 0; s < S; ++s)
      if (lend)
        stages.emplace_back(c, s, S,
                            typename stage_t::lending{a.dp, r, shared_initial[static_cast<std::size_t>(s)], a.local});
      else
        stages.emplace_back(c, s, S, initial);
    replicas.push_back(a.local ? &models.emplace_back(std::move(stages), pt::local_learning)
                               : &models.emplace_back(std::move(stages)));
  }
  model_t& model = models.front();
  // --slow: every stage the plan puts on that rank takes FACTOR times as long (a throttled device)
  if (!a.slow.empty()) {
    if (plan.compute().lanes > 1)
      cli.fail("--slow with " + a.schedule + ": its model stages run on two ranks each (two lanes)");
    for (int s = 0; s < plan.compute().stages; ++s)
      if (plan.compute().stage_rank[static_cast<std::size_t>(s)] == a.slow[0].rank)
        for (model_t& md : models) md.stage(s % S).set_slow(a.slow[0].factor);
  }
  if (a.zero > 0)  // ZeRO-1: each replica's moments for its shard, Adam in the step's OPT_STEPs
    for (int r = 0; r < a.dp; ++r)
      for (stage_t& st : models[static_cast<std::size_t>(r)].stages()) {
        st.own_shard(a.dp, r);
        st.set_optimizer(a.lr, a.clip, adam_step);
      }
  if (resumed)  // Adam's moments: each stage its own part (its shard when it lends its parameters)
    for (model_t& md : models)
      for (int s = 0; s < S; ++s)
        md.stage(s).set_adam(stage_t::flat_parameters(c, s, S, resumed->m),
                             stage_t::flat_parameters(c, s, S, resumed->v));
  const bool memory = wants_memory(a);
  const bool meshed = a.dp > 1 || a.fsdp || a.tie || memory || a.clip > 0 || a.zero > 0 || !plain_float;
  // --offload, --recompute: the actions on what each stage saves for its backward, its stash and
  // its input (none on the first stage, which reads the batch); an OFFLOAD moves both, a
  // recomputed forward keeps its input
  pt::memory_sizes saved_bytes;
  saved_bytes.kept.clear();
  for (int s = 0; s < plan.compute().stages; ++s) {
    const stage_t& st = model.stage(s % S);
    const auto input = static_cast<std::int64_t>(st.input_extent(0) * sizeof(float));
    saved_bytes.saved.push_back(static_cast<std::int64_t>(st.stash_extent() * sizeof(float)) + input);
    saved_bytes.kept.push_back(input);
  }
  const pt::memory_program actions = place_run_memory(a, plan, saved_bytes, cli);
  struct none {};
  std::optional<std::conditional_t<plain_float, ph::executor<model_t>, none>> ex;
  std::optional<ph::mesh_executor<model_t>> mex;
  const ph::executor_options run_options{.deadline = std::chrono::seconds(120)};
  try {
    if (meshed) {
      pt::dp_options o{.dp = a.dp,
                       .shard = a.fsdp,
                       .buckets = a.buckets,
                       .grad_norm = a.clip > 0,
                       .finite_check = a.dynamic_scale,
                       .zero = a.zero};
      if (a.tie) o.ties = {{0, S - 1}};
      mex.emplace(plan, pt::mesh{plan.compute().ranks, a.dp}, o, replicas,
                  ph::mesh_options{.exec = run_options, .memory = actions});
    } else if constexpr (plain_float) {
      ex.emplace(plan, model, run_options);
    }
  } catch (const std::invalid_argument& e) {
    cli.fail(e.what());
  }
  if (lend) {  // pipetype holds the shards now
    for (model_t& md : models)
      for (stage_t& s : md.stages()) s.drop_initial();
    shared_initial.clear();
  }
  auto run_step = [&](const pt::batch& b) -> const pt::step_losses& {
    if constexpr (plain_float)
      if (!meshed) return ex->step(b);
    return mex->step(b);
  };

  if (!a.json)
    std::printf(
        "gpt: %d layers, %d heads, width %d, vocab %d, seq %d; %s on %d ranks, %d stages%s, %d microbatches of %d "
        "rows%s%s\n",
        c.layers, c.heads, c.width, c.vocab, c.seq, a.schedule.c_str(), plan.compute().ranks, S,
        a.local ? " (local learning: a head and a loss each)" : "", m, c.rows,
        meshed ? (" × " + std::to_string(a.dp) + " replicas" + (a.fsdp ? " (FSDP)" : "") +
                  (a.tie ? ", tied embeddings" : "") + (memory ? ", memory actions" : ""))
                     .c_str()
               : "",
        plain_float ? ""
                    : ("; " + a.grad_dtype + " gradients" + (a.dynamic_scale ? ", dynamic loss scale" : "")).c_str());

  step_data d;
  double loss_first = 0, loss_last = 0, max_diff = 0;
  std::vector<double> local_first, local_last;  // --local-losses: each stage's loss, first and last step
  bool grads_match = false, replicas_agree = true, tied_equal = true;
  double norm_first = 0;     // --clip: the first step's GRAD_NORM
  bool norm_matches = true;  // ... bitwise the reference gradients' norm summed in GRAD_NORM's order
  int clipped = 0;           // steps whose gradients were scaled down
  bool finite_first = true, finite_matches = true;  // --loss-scale: FINITE_CHECK's first answer, and the reference's
  int skipped = 0;                                  // steps whose update was skipped (an overflow)
  std::vector<double> step_ms;
  double reference_ms = 0;
  for (int step = 1; step <= a.steps; ++step) {
    draw(d, corpus, a, first_step + step, a.local ? S : 1);
    const double loss_scale = a.dynamic_scale ? scaler.scale() : 1;
    if (a.dynamic_scale) {  // the loss seeded with S: the batch's objective is S × the mean
      d.batch.scale(pt::loss_scaling::per(static_cast<double>(d.tokens) / loss_scale));
      for (model_t& md : models)
        for (stage_t& st : md.stages()) st.set_loss_scale(loss_scale);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const pt::step_losses& l = run_step(d.batch);
    step_ms.push_back(since_ms(t0));
    // (exact: S is a power of two). Local learning: the model's own loss, its last stage's
    const double loss = (a.local ? last_sink_objective(l) : l.objective()) / loss_scale;
    if (a.local) {
      local_last = local_objectives(l);
      if (step == 1) local_first = local_last;
    }
    const bool finite = !a.dynamic_scale || mex->gradients_finite();
    if (step == 1) {
      loss_first = loss;
      // the same microbatches one after the other, unpipelined, from the same parameters, summed in G
      model_params<float> ref_grads;
      const auto r0 = std::chrono::steady_clock::now();
      if constexpr (plain_float) {
        reference_step_dp<float>(c, initial, d.mbs, a.dp, a.tie, ref_grads, loss_scale);
      } else {
        model_params<G> in_g;
        reference_step_dp<float, G>(c, initial, d.mbs, a.dp, a.tie, in_g, loss_scale);
        ref_grads = convert<float>(in_g);
      }
      reference_ms = since_ms(r0);
      if (!a.fsdp && a.zero == 0) replicas_agree = gpt::replicas_agree(models);  // each holds the whole sum
      gather_shards(models, a, true);
      model_params<float> grads = zero_params<float>(c, initial.local_heads.size());
      for (const stage_t& s : model.stages()) s.gather(grads, true);
      grads_match = true;
      bool all_finite = true;
      for (int part = 0; part < part_count(grads); ++part) {
        const std::vector<float>& x = part_vector(grads, part);
        const std::vector<float>& y = part_vector(ref_grads, part);
        grads_match = grads_match && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
          max_diff = examples::worst(max_diff, static_cast<double>(std::fabs(x[i] - y[i])));
          all_finite = all_finite && std::isfinite(y[i]);
        }
      }
      if (a.dynamic_scale) finite_first = finite, finite_matches = finite == all_finite;
      if (a.clip > 0) {
        norm_first = mex->grad_norm();
        const double want = reference_norm<G>(c, ref_grads, plan.compute(), pt::mesh{plan.compute().ranks, a.dp},
                                              a.fsdp || a.zero > 0, a.tie, model);
        norm_matches = norm_first == want || (std::isnan(norm_first) && std::isnan(want));  // (an overflow: NaN both)
      }
      if (!a.dump.empty()) try {
          write_dump(a.dump, c, initial, d.mbs, grads, loss, a.tie);
        } catch (const std::exception& e) {
          cli.fail(std::string("--dump ") + a.dump + ": " + e.what());  // (nothing says "dump written")
        }
    }
    loss_last = loss;
    // --clip: PyTorch's clip_grad_norm_ rule on the unscaled gradients, every rank with the one
    // norm GRAD_NORM gave them all; --loss-scale: an overflow anywhere skips every rank's update
    const double norm = a.clip > 0 ? mex->grad_norm() : -1;
    if (finite && clips(a.clip, norm, loss_scale)) ++clipped;
    if (finite) ++adam_step;
    skipped += !finite;
    const float factor = gradient_factor(a.clip, norm, loss_scale);
    for (int r = 0; r < a.dp; ++r)
      for (int s = 0; s < S; ++s) {
        stage_t& st = models[static_cast<std::size_t>(r)].stage(s);
        if (a.zero > 0 || !finite)  // (ZeRO-1: Adam ran in the step's OPT_STEP, with the same factor)
          st.zero_grads();
        else if (lend)
          st.adam(mex->template parameter_shard<float>(r, s), a.lr, adam_step, factor);
        else
          st.adam(a.lr, adam_step, factor);
      }
    if (a.dynamic_scale) scaler.update(finite);
    if (!a.json && (step == 1 || step % 10 == 0 || step == a.steps))
      std::printf("step %4d  loss %.4f  %8.2f ms%s\n", step, loss, step_ms.back(),
                  finite ? "" : "  (an overflow: update skipped, loss scale halved)");
  }
  const double ms = median(step_ms);
  // the stash pools of a step with memory actions: planned, measured, and the same plan without them
  std::optional<memory_report> mem;
  if (memory) mem.emplace(*mex, plan, actions, a.dp);
  const bool water_within = !mem || mem->within;
  // the whole model on replica 0, for --eval and the tied copies: under FSDP from the shards
  if (lend) {
    for (int s = 0; s < S; ++s) {
      std::vector<float> whole(model.stage(s).weight_grad_extent());
      for (int r = 0; r < a.dp; ++r) {
        const std::span<const float> part = mex->template parameter_shard<float>(r, s);
        std::copy(part.begin(), part.end(),
                  whole.begin() + static_cast<std::ptrdiff_t>(mex->shard_range_of(r, s).begin));
      }
      model.stage(s).restore(std::move(whole));
    }
  } else {
    gather_shards(models, a, false);
  }
  // ZeRO-1: after PARAM_SYNC every replica holds the whole updated parameters
  const bool params_agree = a.zero == 0 || gpt::replicas_agree(models, false);
  const std::optional<param_report> lent =
      lend ? std::optional<param_report>(std::in_place, *mex, plan, model) : std::nullopt;
  if (a.tie) {
    const std::span<float> x = model.stages().front().tied_parameters(), y = model.stages().back().tied_parameters();
    tied_equal = std::memcmp(x.data(), y.data(), x.size_bytes()) == 0;
  }
  // --save: the whole model (replica 0's, gathered above), every replica's part of Adam's moments
  if (!a.save.empty()) try {
      checkpoint k{zero_params<float>(c),
                   zero_params<float>(c),
                   zero_params<float>(c),
                   first_step + a.steps,
                   adam_step,
                   a.dynamic_scale ? scaler.log2 : -1,
                   scaler.clean};
      for (int s = 0; s < S; ++s) {
        model.stage(s).gather(k.params, false);
        std::vector<float> m_whole(model.stage(s).weight_grad_extent()), v_whole(m_whole.size());
        for (const model_t& md : models) {
          const stage_t& st = md.stage(s);
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
    model_params<float> now = zero_params<float>(c, initial.local_heads.size());
    for (const stage_t& s : model.stages()) s.gather(now, false);
    now.local_heads.clear();  // local learning: the held-back text through the model's own head
    eval_loss = evaluate_held(a, held, now, S, eval_matches, cli);
  }

  if (a.json) {
    print_json_head(a, plan.compute().ranks, S, m, loss_first, loss_last, grads_match, max_diff, ms, reference_ms);
    if (meshed)
      std::printf(", \"dp\": %d, \"fsdp\": %s, \"tied\": %s, \"replicas_agree\": %s, \"tied_copies_equal\": %s", a.dp,
                  a.fsdp ? "true" : "false", a.tie ? "true" : "false",
                  // compared only where each replica holds the whole gradient (not one replica, not
                  // FSDP's shards): null says "not checked", never a true nobody tested
                  a.fsdp || a.zero > 0 || a.dp < 2 ? "null" : (replicas_agree ? "true" : "false"),
                  tied_equal ? "true" : "false");
    if (meshed) {
      double adam_floats = 0;  // replica 0's moments: two floats an element of what its optimizer updates
      for (const stage_t& st : model.stages()) adam_floats += 2.0 * static_cast<double>(st.adam_m().size());
      std::printf(", \"buckets\": %d, \"adam_mib\": %.3f", a.buckets, adam_floats * 4 / (1 << 20));
    }
    if (a.zero > 0)
      std::printf(", \"zero\": %d, \"replica_params_agree\": %s", a.zero, params_agree ? "true" : "false");
    if (!plain_float || a.dynamic_scale) std::printf(", \"grad_dtype\": \"%s\"", a.grad_dtype.c_str());
    if (a.dynamic_scale)
      std::printf(
          ", \"loss_scale\": %.9g, \"skipped_steps\": %d, \"finite_first\": %s, \"finite_matches_reference\": %s",
          scaler.scale(), skipped, finite_first ? "true" : "false", finite_matches ? "true" : "false");
    if (a.clip > 0)
      std::printf(", \"clip\": %g, \"grad_norm_first\": %s, \"grad_norm_matches_reference\": %s, \"clipped_steps\": %d",
                  static_cast<double>(a.clip), examples::json_number(norm_first).c_str(),
                  norm_matches ? "true" : "false", clipped);
    if (a.eval)
      std::printf(", \"eval_loss\": %.9g, \"eval_matches_reference\": %s", eval_loss, eval_matches ? "true" : "false");
    if (!a.slow.empty())
      std::printf(", \"stragglers\": {\"slow_rank\": %d, \"factor\": %g, \"fixed_step_ms\": %.4f}", a.slow[0].rank,
                  a.slow[0].factor, ms);
    if (a.local)
      std::printf(", \"local_losses\": true, \"local_losses_first\": %s, \"local_losses_last\": %s",
                  examples::json_numbers(local_first).c_str(), examples::json_numbers(local_last).c_str());
    if (mem) mem->print_json();
    if (lent) lent->print_json();
    std::printf(", \"peak_rss_mib\": %.1f}\n", examples::peak_rss_mib());
  } else {
    if (a.eval)
      std::printf("held-back text under the forward-only plan: loss %.4f (%s the unpipelined forward's)\n", eval_loss,
                  eval_matches ? "bitwise" : "DIFFERENT from");
    if (a.local) {
      std::printf("local losses, stage by stage (the loss above is the last stage's, the model's):");
      for (std::size_t s = 0; s < local_last.size(); ++s) std::printf(" %.4f -> %.4f", local_first[s], local_last[s]);
      std::printf("\n");
    }
    std::printf("first step's gradients %s the unpipelined run's%s (max |diff| %.3g)\n",
                grads_match ? "are bitwise" : "DIFFER from", a.local ? " of the same local objectives" : "", max_diff);
    if (meshed && !a.fsdp && a.zero == 0 && a.dp > 1)
      std::printf("every replica's gradients %s\n", replicas_agree ? "are bitwise the same" : "DIFFER");
    if (a.tie)
      std::printf("the tied copies (wte, lm_head) %s after training\n", tied_equal ? "are bitwise equal" : "DIFFER");
    if (a.dynamic_scale)
      std::printf("%s gradients: %d of %d steps skipped (an overflow); the loss scale is now %.9g\n",
                  a.grad_dtype.c_str(), skipped, a.steps, scaler.scale());
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
                 norm_matches && params_agree && finite_matches
             ? 0
             : 1;
}

}  // namespace gpt
