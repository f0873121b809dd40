// examples/gpt/gpt.cpp — a GPT-2-style decoder trained through pipetype on host threads.
//
//   gpt --schedule NAME --ranks P --microbatches M --layers L --heads H --width C --seq T
//       --steps N [--rows R] [--chunks V] [--lr X] [--seq-lens a,b,...] [--eval] [--json] [--dump DIR]
//       [--dp D] [--fsdp] [--buckets N] [--tie-embeddings] [--clip X] [--zero 1] [--save DIR] [--resume DIR]
//       [--grad-dtype fp32|fp16|bf16] [--loss-scale dynamic] [--loss-scale-window K] [--initial-loss-scale X]
//       [--offload none|auto|all] [--recompute none|auto|all] [--local-losses]
//       [--slow RANK:FACTOR [--plan-set]] [--lengths FILE --token-cap N [--attention-at T]]
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
// --grad-dtype fp16|bf16 hands pipetype the weight gradients in 16 bits: the microbatches' sums,
// the tie and the reductions are in that type, in their fixed orders, and the first step's
// gradients are compared with reference_step_dp summing in the same type, bit for bit.
// --loss-scale dynamic seeds the loss with a power of two (--initial-loss-scale) that FINITE_CHECK's
// answer halves (every rank skips an update that overflowed) and --loss-scale-window clean steps
// double (train.hpp);
// --json adds grad_dtype, loss_scale, skipped_steps, finite_first and finite_matches_reference.
// The run is train.hpp's train<G>, instantiated here for float and in gpt_grads16.cpp for the two
// 16-bit types.
// --save DIR writes a checkpoint after training (DIR/model.safetensors: the parameters under GPT-2's
// Hugging Face names; DIR/optimizer.safetensors: Adam's moments, the step and the loss scale), each file written
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
// --local-losses trains with local learning (docs/11 §11.4): every stage but the last gets a head of
// its own (ln_f and an LM head, initialised as the model's), every stage is a loss, and no gradient
// crosses a stage boundary: the plan runs over the chain with every edge detached (0~1~…), under
// local-1f1b (F then B as each input arrives) or any other schedule. The first step's gradients are
// compared with reference_step's local form (each stage's blocks, its head, its loss, the gradient
// stopped at its input), bit for bit; loss_first and loss_last are the last stage's loss (the
// model's), and --json adds local_losses_first and local_losses_last (each stage's).
// --slow RANK:FACTOR makes every stage the plan puts on rank RANK take FACTOR times as long (it
// sleeps the rest of each call: a throttled device); --json adds stragglers (the median step,
// fixed_step_ms). With --plan-set (one stage per rank, one replica, float gradients) it holds a
// plan for each rank slowed by FACTOR, blocks moved off it (schedules/plan_set.hpp), each with its
// own model and executor: the first half of the steps run the nominal plan, then the detector
// reads each rank's speed from the traces (each rank's median over the last 3 steps) and the rule
// picks the plan for the next step, the parameters and Adam's moments moved to its layout between
// two steps (docs/05 §5.9, examples/plan_set_run.hpp). The losses are a fixed plan's, bit for bit;
// --json adds stragglers.fixed_step_ms, switched_step_ms, switched_at, chosen, switch_ms and the
// modelled makespans.
// --lengths FILE --token-cap N (one replica, --rows 1, N ≤ T) trains on documents of the file's
// lengths, drawn from the corpus anew each step, packed into microbatches of one row of at most N
// tokens (schedules/balance.hpp, a document of t tokens costing t + t²/T': --attention-at T', or
// without it T' fitted to the arrival half's measured microbatches, fit_length_cost): the
// documents of a row attend only within themselves and their positions restart (blocks.hpp's
// starts). The first half of the steps run the arrival order's packing, the second
// the balanced one, each under its plan; each half's first step is checked against the
// unpipelined run of its packing, bit for bit; --json adds balance: the modelled makespans and
// ratio, and the measured median steps and their ratio (docs/05 §5.8).
#include <pipetype/host.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../cli.hpp"
#include "../lengths_file.hpp"
#include "train.hpp"

namespace {

namespace pt = pipetype;
namespace ph = pipetype::host;

constexpr const char* usage =
    "usage: gpt [--schedule NAME] [--ranks P] [--microbatches M] [--chunks V] [--layers L] [--heads H]\n"
    "           [--width C] [--seq T] [--rows R] [--steps N] [--lr X] [--seq-lens a,b,...] [--eval]\n"
    "           [--json] [--dump DIR] [--corpus DIR] [--dp D] [--fsdp] [--buckets N] [--tie-embeddings]\n"
    "           [--clip X] [--zero 1] [--save DIR] [--resume DIR] [--grad-dtype fp32|fp16|bf16]\n"
    "           [--loss-scale dynamic] [--loss-scale-window K] [--initial-loss-scale X]\n"
    "           [--offload none|auto|all] [--recompute none|auto|all] [--local-losses]\n"
    "           [--slow RANK:FACTOR [--plan-set]] [--lengths FILE --token-cap N [--attention-at T]]\n"
    "--eval: after training, the loss on held-back text under the forward-only plan\n" GPT_RUN_FLAGS_HELP
    "--tie-embeddings: the LM head's weight is the token embedding's (needs two stages or more)\n"
    "--clip X: scale the step's gradients to a global norm of at most X (GRAD_NORM over every rank)\n"
    "--zero 1: ZeRO-1 (needs --dp): Adam inside the step on each replica's shard, its state 1/D a replica\n"
    "--save DIR: after training, the parameters and Adam's state as safetensors (GPT-2's names)\n"
    "--resume DIR: start from such a checkpoint (its step included), in any --ranks/--dp/--fsdp layout\n"
    "--grad-dtype T: the weight gradients' type, summed and reduced in it (default fp32)\n"
    "--loss-scale dynamic: seed the loss with a power of two (--initial-loss-scale X, default 65536),\n"
    "            halved when a gradient of the step overflows (every rank skips that update), doubled\n"
    "            after K clean steps (--loss-scale-window K, default 1000); needs --grad-dtype fp16 or bf16\n"
    "--offload, --recompute: memory actions on each microbatch's stash and input (docs/13): copied to the\n"
    "            host and back, or the stash rebuilt by running its forward again before the backward\n"
    "--local-losses: local learning: every stage a head (ln_f, LM head) and a loss of its own, no gradient\n"
    "            between stages (every edge detached); any schedule, local-1f1b its own\n"
    "--lengths FILE --token-cap N [--attention-at T]: a step's documents (one length per line) packed into\n"
    "            rows of at most N tokens (--rows 1), arrival order for half the steps, then balanced\n"
    "--slow R:F: the stages on rank R take F times as long (they sleep the rest), a throttled device\n"
    "--plan-set: with --slow, a plan for each rank slowed F times (blocks moved off it); the first half of the\n"
    "            steps run the nominal plan, then the plan the measured speeds choose, switched between steps\n";

constexpr examples::cli cli{"gpt", usage};
using args = gpt::run_args;
args parse(int argc, char** argv) {
  args a = gpt::parse_run(argc, argv, cli, 1.0, [](args& x, const std::string& f, const std::string& v) {
    if (f != "--save" && f != "--resume") return false;
    if (v.empty()) cli.fail(f + " needs a directory");
    (f == "--save" ? x.save : x.resume) = v;
    return true;
  });
  if (a.plan_set) {  // the plain executor, one stage per rank, float gradients, for now
    if (a.dp > 1 || a.fsdp || a.zero > 0 || a.tie || a.clip > 0 || a.grad_dtype != "fp32" || a.local ||
        a.offload != pt::memory_policy::none || a.recompute != pt::memory_policy::none || !a.save.empty() ||
        !a.resume.empty() || !a.dump.empty())
      cli.fail(
          "--plan-set runs one replica with float gradients for now: drop --dp, --fsdp, --zero, "
          "--tie-embeddings, --clip, --grad-dtype, --local-losses, --offload, --recompute, --save, --resume and "
          "--dump");
  }
  if (!a.lengths.empty() &&
      (a.dp > 1 || a.fsdp || a.zero > 0 || a.tie || a.clip > 0 || a.grad_dtype != "fp32" || a.local || a.plan_set ||
       !a.slow.empty() || a.offload != pt::memory_policy::none || a.recompute != pt::memory_policy::none ||
       !a.save.empty() || !a.resume.empty() || !a.dump.empty() || a.eval || !a.seq_lens.empty()))
    cli.fail(
        "--lengths runs one replica with float gradients for now: drop --dp, --fsdp, --zero, --tie-embeddings, "
        "--clip, --grad-dtype, --local-losses, --plan-set, --slow, --offload, --recompute, --save, --resume, "
        "--dump, --eval and --seq-lens");
  if (a.local) {  // the local heads have no GPT-2 names, and each stage trains its own
    if (a.tie)
      cli.fail("--local-losses with --tie-embeddings: each stage's head is its own, none tied to the embedding");
    if (!a.save.empty() || !a.resume.empty())
      cli.fail(
          "--local-losses with --save or --resume: a checkpoint holds GPT-2's tensors, not the stages' local heads");
    if (!a.dump.empty())
      cli.fail("--local-losses with --dump: PyTorch's check (check_gpt_dump.py) trains the model's one loss");
  }
  return a;
}

}  // namespace

namespace gpt {

// (gpt_grads16.cpp instantiates them)
extern template int train<pt::half>(run_args&, const examples::cli&);
extern template int train<pt::bfloat16>(run_args&, const examples::cli&);

/// Whether `model`'s summed gradients are bit for bit those of the unpipelined step from `params`
/// over `mbs` (one replica); the largest |difference| goes into `max_diff`.
bool matches_reference(const pt::uniform_chain<stage>& model, const gpt_config& c, const model_params<float>& params,
                       const std::vector<microbatch>& mbs, double& max_diff) {
  model_params<float> ref, got = zero_params<float>(c);
  reference_step_dp<float>(c, params, mbs, 1, false, ref, 1);
  for (int s = 0; s < model.size(); ++s) model.stage(s).gather(got, true);
  bool same = true;
  for (int part = 0; part < part_count(got); ++part) {
    const std::vector<float>&x = part_vector(got, part), &y = part_vector(ref, part);
    same = same && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      max_diff = examples::worst(max_diff, static_cast<double>(std::fabs(x[i] - y[i])));
  }
  return same;
}

/// --lengths FILE --token-cap N (gpt.cpp's header): a step's documents packed into microbatches
/// of one row, in arrival order for the first half of the steps and balanced for the second
/// (schedules/balance.hpp), each packing under its own plan and executor over one model; the
/// first step of each half checked against the unpipelined run of the same packing, bit for bit.
int train_lengths(run_args& a, const examples::cli& cli) {
  const gpt_config& c0 = a.model;
  if (c0.rows != 1) cli.fail("--lengths packs documents into one row a microbatch: give --rows 1");
  if (a.token_cap > c0.seq) cli.fail("--token-cap is at most --seq (a microbatch's row holds --seq tokens)");
  std::string why;
  const std::optional<std::vector<int>> read = examples::read_lengths(a.lengths, a.token_cap, why);
  if (!read) cli.fail("--lengths " + why);
  const std::vector<int>& lengths = *read;
  const pt::schedule_info* info = pt::find_schedule(a.schedule);
  if (!info) cli.fail(pt::schedule_error(a.schedule, a.ranks, 1, 1));
  if (info->local) cli.fail("--lengths with " + a.schedule + ": a model of local losses is not packed yet");
  const int v = pt::default_chunks(*info, a.chunks);
  pt::schedule_params params;
  params.cost = pt::costs{.f = 1, .b = 2};
  // without --attention-at the cost model is calibrated: the first half's trace fits a·t + b·t²
  const bool calibrate = !(a.attention_at > 0);
  double tau = calibrate ? a.token_cap : a.attention_at;
  std::optional<pt::balance_result> packed;
  const auto pack = [&] {
    try {
      packed = pt::balance(lengths, a.token_cap, pt::length_cost{tau}, a.schedule, a.ranks, v, params);
    } catch (const std::invalid_argument& e) {
      cli.fail(std::string("--lengths: ") + e.what());
    }
  };
  pack();
  const pt::runtime_plan arrival_plan = pt::build_plan(packed->arrival.prog);
  if (!arrival_plan.ok()) cli.fail("--lengths: the arrival order's plan was rejected");
  const int S = arrival_plan.compute().lane_length();
  a.microbatches = packed->arrival.pack.size();
  const run_start start = start_run(a, S, cli);
  const gpt_config& c = a.model;
  std::vector<stage> parts;
  for (int s = 0; s < S; ++s) parts.emplace_back(c, s, S, start.initial);
  pt::uniform_chain<stage> model(std::move(parts));
  ph::executor<pt::uniform_chain<stage>> arrival_ex{
      arrival_plan, model, {.deadline = std::chrono::seconds(120), .trace = calibrate}};
  std::optional<pt::runtime_plan> balanced_plan;  // made at the half, with the calibrated costs
  std::optional<ph::executor<pt::uniform_chain<stage>>> balanced_ex;
  std::vector<std::vector<int>> fit_lengths;  // calibration samples: each measured microbatch's lengths
  std::vector<double> fit_times;              // and its compute time over every stage
  pt::length_fit fit;
  step_data d;
  for (stage& st : model.stages()) st.set_documents(&d.mbs);
  double loss_first = 0, loss_last = 0, max_diff = 0;
  bool grads_match = true;
  std::vector<double> arrival_ms, balanced_ms;
  const int half = std::max(1, a.steps / 2);
  for (int step = 1; step <= a.steps; ++step) {
    const bool balanced = step > half;
    if (balanced && !balanced_ex) {  // the half: calibrate, pack, plan
      if (calibrate && !fit_times.empty()) {
        fit = pt::fit_length_cost(fit_lengths, fit_times);
        tau = fit.cost.quadratic_at;
        const int arrival_m = packed->arrival.pack.size();
        pack();
        if (packed->arrival.pack.size() != arrival_m) cli.fail("--lengths: the arrival packing changed (a bug)");
      }
      balanced_plan.emplace(pt::build_plan(packed->balanced.prog));
      if (!balanced_plan->ok()) cli.fail("--lengths: the balanced packing's plan was rejected");
      balanced_ex.emplace(*balanced_plan, model, ph::executor_options{.deadline = std::chrono::seconds(120)});
    }
    const pt::packing& pk = balanced ? packed->balanced.pack : packed->arrival.pack;
    draw_packed(d, start.corpus, a, step, lengths, pk);
    model_params<float> before;  // the first step of each half: checked against the reference
    const bool check = step == 1 || step == half + 1;
    if (check) {
      before = zero_params<float>(c);
      for (const stage& st : model.stages()) st.gather(before, false);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const pt::step_losses& l = balanced ? balanced_ex->step(d.batch) : arrival_ex.step(d.batch);
    (balanced ? balanced_ms : arrival_ms).push_back(since_ms(t0));
    if (!balanced && calibrate && step > 1) {  // (the first step warms up)
      std::vector<double> per(static_cast<std::size_t>(pk.size()), 0.0);
      for (const pt::op_time& t : arrival_ex.trace())
        if (t.code == pt::op_code::compute && t.microbatch >= 0 && t.microbatch < pk.size())
          per[static_cast<std::size_t>(t.microbatch)] += t.end - t.start;
      for (int j = 0; j < pk.size(); ++j) {
        std::vector<int> ls;
        for (const int i : pk.microbatches[static_cast<std::size_t>(j)])
          ls.push_back(lengths[static_cast<std::size_t>(i)]);
        fit_lengths.push_back(std::move(ls));
        fit_times.push_back(per[static_cast<std::size_t>(j)]);
      }
    }
    loss_last = l.objective();
    if (step == 1) loss_first = loss_last;
    if (check) grads_match = matches_reference(model, c, before, d.mbs, max_diff) && grads_match;
    for (stage& st : model.stages()) st.adam(a.lr, step);
  }
  const double am = arrival_ms.empty() ? 0 : median(arrival_ms), bm = balanced_ms.empty() ? 0 : median(balanced_ms);
  const double modelled = packed->balanced.makespan / packed->arrival.makespan, measured = am > 0 ? bm / am : 0;
  if (a.json) {
    print_json_head(a, arrival_plan.compute().ranks, S, packed->arrival.pack.size(), loss_first, loss_last, grads_match,
                    max_diff, am, 0);
    std::printf(
        ", \"balance\": {\"sequences\": %zu, \"token_cap\": %d, \"attention_at\": %g, \"calibrated\": %s, "
        "\"fit_samples\": %zu, \"arrival_microbatches\": %d, \"balanced_microbatches\": %d, "
        "\"arrival_makespan\": %.9g, \"balanced_makespan\": %.9g, \"ratio\": %.9g, \"arrival_step_ms\": %.4f, "
        "\"balanced_step_ms\": %.4f, \"measured_ratio\": %.9g}, \"peak_rss_mib\": %.1f}\n",
        lengths.size(), a.token_cap, tau, fit.samples > 0 ? "true" : "false", fit.samples, packed->arrival.pack.size(),
        packed->balanced.pack.size(), packed->arrival.makespan, packed->balanced.makespan, modelled, am, bm, measured,
        examples::peak_rss_mib());
  } else {
    std::printf(
        "gpt: %zu documents packed under %d tokens a microbatch (t + t²/%g each%s); %s on %d ranks\n", lengths.size(),
        a.token_cap, tau,
        fit.samples > 0 ? (", fitted to " + std::to_string(fit.samples) + " measured microbatches").c_str() : "",
        a.schedule.c_str(), arrival_plan.compute().ranks);
    std::printf("loss %.4f -> %.4f; each half's first step's gradients %s the unpipelined run's\n", loss_first,
                loss_last, grads_match ? "are bitwise" : "DIFFER from");
    std::printf(
        "arrival order: %d microbatches, median step %.2f ms; balanced: %d microbatches, median step %.2f ms; "
        "balanced / arrival: measured %.3f, modelled %.3f\n",
        packed->arrival.pack.size(), am, packed->balanced.pack.size(), bm, measured, modelled);
  }
  return grads_match ? 0 : 1;
}

/// --plan-set (gpt.cpp's header): the nominal plan and one per rank slowed by --slow's factor
/// (schedules/plan_set.hpp), each with its own model (its layout's blocks) and executor, bound
/// once. The first half of the steps run the nominal plan (a fixed plan); from then on the
/// detector reads each rank's speed from the step's trace (host/stragglers.hpp) and the set's rule
/// chooses the plan for the next step; at a switch the parameters and Adam's moments move to the
/// new layout between two steps. A step's gradients are the same bits under any layout, so the
/// losses are a fixed plan's.
int train_plan_set(run_args& a, const examples::cli& cli) {
  const pt::runtime_plan nominal = make_run_plan(a, cli);
  const pt::program_view pv = nominal.compute();
  if (pv.lanes > 1 || pv.stages != pv.ranks)
    cli.fail("--plan-set moves blocks between one stage per rank: " + a.schedule + " holds " +
             std::to_string(pv.stages / pv.ranks) + " stages a rank");
  const int S = pv.stages, m = pv.microbatches;
  const run_start start = start_run(a, S, cli);
  const gpt_config& c = a.model;
  // the model's layout: the embedding on the first stage, the head on the last, the blocks even
  pt::layer_layout layout;
  for (int s = 0; s < S; ++s)
    layout.stages.push_back({s == 0 ? 1 : 0, stage::blocks_of(c, s, S).count, 0, s == S - 1 ? 1 : 0});
  std::vector<pt::slowdown> scenarios;
  for (int r = 0; r < S; ++r) scenarios.push_back({r, a.slow[0].factor});
  pt::plan_set set;
  try {
    set = pt::make_plan_set(a.schedule, a.ranks, m, layout, pt::costs{.f = 1, .b = 2}, scenarios, {}, 1);
  } catch (const std::invalid_argument& e) {
    cli.fail(std::string("--plan-set: ") + e.what());
  }
  std::vector<pt::runtime_plan> plans;
  std::deque<pt::uniform_chain<stage>> models;
  std::vector<std::unique_ptr<ph::executor<pt::uniform_chain<stage>>>> exs;
  for (const pt::scenario_plan& sp : set.plans) {
    std::vector<int> split;
    for (const pt::stage_layers& x : sp.layout.stages) split.push_back(x.decoder);
    plans.push_back(pt::build_plan(sp.prog));
    if (!plans.back().ok()) cli.fail("--plan-set: a plan was rejected: " + pt::explain(plans.back().result));
    std::vector<stage> stages;
    for (int s = 0; s < S; ++s) stages.emplace_back(c, s, S, start.initial, split);
    stages[static_cast<std::size_t>(a.slow[0].rank)].set_slow(a.slow[0].factor);
    models.emplace_back(std::move(stages));
    exs.push_back(std::make_unique<ph::executor<pt::uniform_chain<stage>>>(
        plans.back(), models.back(), ph::executor_options{.deadline = std::chrono::seconds(120), .trace = true}));
  }
  examples::plan_set_run run{set, plans, a.slow[0], a.steps};
  step_data d;
  double loss_first = 0, loss_last = 0, max_diff = 0;
  bool grads_match = false;
  for (int step = 1; step <= a.steps; ++step) {
    draw(d, start.corpus, a, step);
    const std::size_t k = run.current();
    const auto t0 = std::chrono::steady_clock::now();
    const pt::step_losses& l = exs[k]->step(d.batch);
    const double ms = since_ms(t0);
    loss_last = l.objective();
    if (step == 1) {  // the reference: the same microbatches unpipelined, from the same parameters
      loss_first = loss_last;
      grads_match = matches_reference(models[k], c, start.initial, d.mbs, max_diff);
    }
    for (stage& st : models[k].stages()) st.adam(a.lr, step);
    run.after(step, ms, exs[k]->trace(), [&](std::size_t from, std::size_t to) {
      // the parameters and Adam's moments into the next layout, between two steps
      model_params<float> p = zero_params<float>(c), mm = zero_params<float>(c), vv = zero_params<float>(c);
      for (const stage& st : models[from].stages()) {
        st.gather(p, false);
        st.gather_flat(std::vector<float>(st.adam_m().begin(), st.adam_m().end()), mm);
        st.gather_flat(std::vector<float>(st.adam_v().begin(), st.adam_v().end()), vv);
      }
      for (stage& st : models[to].stages()) st.load(p, mm, vv);
    });
  }
  if (a.json) {
    print_json_head(a, S, S, m, loss_first, loss_last, grads_match, max_diff,
                    run.switched() ? run.switched_step_ms() : run.fixed_step_ms(), 0);
    run.print_json();
    std::printf(", \"peak_rss_mib\": %.1f}\n", examples::peak_rss_mib());
  } else {
    std::printf("gpt: %s on %d ranks; loss %.4f -> %.4f; ", a.schedule.c_str(), S, loss_first, loss_last);
    run.print_text();
    std::printf("first step's gradients %s the unpipelined run's\n", grads_match ? "are bitwise" : "DIFFER from");
  }
  return grads_match ? 0 : 1;
}

double evaluate_held(const run_args& a, const char_corpus& held, const model_params<float>& now, int stages,
                     bool& matches, const examples::cli& cli) {
  pt::program forwards = pt::forward_only_of(pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks));
  // local-1f1b's own graph is the local chain: forwards only, it is the chain, through the model's head
  if (forwards.view().has_detached()) forwards.edges.clear();
  const pt::runtime_plan eval_plan = pt::build_plan(std::move(forwards));
  if (!eval_plan.ok()) cli.fail("the forward-only plan was rejected: " + pt::explain(eval_plan.result));
  std::vector<stage> parts;  // (float gradients: a forward-only plan makes none)
  for (int s = 0; s < stages; ++s) parts.emplace_back(a.model, s, stages, now);
  pt::uniform_chain<stage> model(std::move(parts));
  ph::executor ev{eval_plan, model, {.deadline = std::chrono::seconds(120)}};
  run_args one = a;  // one replica's microbatches
  one.dp = 1;
  step_data d;
  draw(d, held, one, 0);
  const pt::step_losses& l = ev.step(d.batch);
  const std::vector<double> sums = reference_forward<float>(a.model, now, d.mbs);
  matches = true;
  for (std::size_t j = 0; j < sums.size(); ++j)
    matches = matches && static_cast<float>(sums[j]) == l.at(0, static_cast<int>(j));
  return l.objective();
}

}  // namespace gpt

int main(int argc, char** argv) try {
  examples::tool_exits("gpt");
  args a = parse(argc, argv);
  if (a.plan_set) return gpt::train_plan_set(a, cli);
  if (!a.lengths.empty()) return gpt::train_lengths(a, cli);
  return a.grad_dtype == "fp16"   ? gpt::train<pt::half>(a, cli)
         : a.grad_dtype == "bf16" ? gpt::train<pt::bfloat16>(a, cli)
                                  : gpt::train<float>(a, cli);
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt: %s\n", e.what());
  return 1;
}
