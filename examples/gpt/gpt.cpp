// examples/gpt/gpt.cpp — a GPT-2-style decoder trained through pipetype on host threads.
//
//   gpt --schedule NAME --ranks P --microbatches M --layers L --heads H --width C --seq T
//       --steps N [--rows R] [--chunks V] [--lr X] [--seq-lens a,b,...] [--eval] [--json] [--dump DIR]
//       [--dp D] [--fsdp] [--buckets N] [--tie-embeddings] [--clip X] [--zero 1] [--save DIR] [--resume DIR]
//       [--grad-dtype fp32|fp16|bf16] [--loss-scale dynamic] [--loss-scale-window K] [--initial-loss-scale X]
//       [--offload none|auto|all] [--recompute none|auto|all] [--local-losses]
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
#include <pipetype/host.hpp>

#include <cstdio>
#include <string>

#include "../cli.hpp"
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
    "            between stages (every edge detached); any schedule, local-1f1b its own\n";

constexpr examples::cli cli{"gpt", usage};
using args = gpt::run_args;
args parse(int argc, char** argv) {
  args a = gpt::parse_run(argc, argv, cli, 1.0, [](args& x, const std::string& f, const std::string& v) {
    if (f != "--save" && f != "--resume") return false;
    if (v.empty()) cli.fail(f + " needs a directory");
    (f == "--save" ? x.save : x.resume) = v;
    return true;
  });
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
  return a.grad_dtype == "fp16"   ? gpt::train<pt::half>(a, cli)
         : a.grad_dtype == "bf16" ? gpt::train<pt::bfloat16>(a, cli)
                                  : gpt::train<float>(a, cli);
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt: %s\n", e.what());
  return 1;
}
