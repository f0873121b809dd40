// examples/gpt/run.hpp — what the two GPT trainers share: examples/gpt (its own kernels) and
// examples/torch_gpt (LibTorch's modules as stages) take the same flags, build the same plan, read
// the same corpus and draw the same microbatches, so their runs compare step for step.
#pragma once

#include <pipetype/host.hpp>
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "../cli.hpp"
#include "../figures.hpp"
#include "../plan_set_run.hpp"
#include "layers.hpp"

#ifndef GPT_CORPUS_DIR
#define GPT_CORPUS_DIR "docs"
#endif

/// The lines of both tools' usage that explain the flags they share (a macro: the usages are
/// string literals joined at compile time).
#define GPT_RUN_FLAGS_HELP                                                                                     \
  "NAME: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb-v, v-min, v-half, dualpipe-v, dualpipe, " \
  "zb-auto, local-1f1b (with --local-losses)\n"                                                                \
  "--ranks P, --microbatches M, --chunks V: the plan's sizes (defaults 4, 8, and the schedule's own chunks)\n" \
  "--layers L, --heads H, --width C, --seq T: the decoder's blocks, attention heads, width and context\n"      \
  "            (defaults 4, 4, 64, 64); --rows R: sequences per microbatch (default 4)\n"                      \
  "--steps N: training steps (default 200); --lr X: Adam's learning rate (default 0.003)\n"                    \
  "--json: the run's figures as one JSON object\n"                                                             \
  "--seq-lens: the microbatches' sequence lengths, each in [1, T], cycled over the microbatches\n"             \
  "--dump DIR: the initial weights, the first batch, its loss and gradients as .npy (needs full-length\n"      \
  "            microbatches); tests/pytorch/check_gpt_dump.py checks them against PyTorch\n"                   \
  "--corpus DIR: the text to train on, every .md file of DIR (default: the repository's docs)\n"               \
  "--dp D: D data-parallel replicas of the pipeline, each step D x M microbatches (--fsdp: sharded)\n"         \
  "--buckets N: each stage's gradient reduction as N all-reduces (reduce-scatters with --fsdp, --zero),\n"     \
  "            each started once the backward has written its part (needs --dp)\n"

namespace gpt {

namespace pt = pipetype;

/// The flags of a run (examples/gpt's usage lists them).
struct run_args {
  std::string schedule = "1f1b";
  int ranks = 4, microbatches = 8, chunks = 0, steps = 200, dp = 1, buckets = 1;
  int intra = 1;  // torch_gpt: LibTorch's intra-op threads
  bool fsdp = false, tie = false;
  bool local = false;  // examples/gpt's --local-losses: local learning, a head and a loss on every stage
  std::vector<pt::slowdown> slow;  // --slow RANK:FACTOR: that rank's stage sleeps in proportion
  bool plan_set = false;           // examples/gpt's --plan-set: a plan per slowed rank, switched between steps
  std::string lengths;             // examples/gpt's --lengths FILE: a step's document lengths, packed
  int token_cap = 0;               // --token-cap N: tokens a microbatch holds at most
  double attention_at = -1;        // --attention-at T (-1: the token cap)
  pt::memory_policy offload = pt::memory_policy::none, recompute = pt::memory_policy::none;
  gpt_config model{0, 64, 4, 4, 64, 4};  // vocab from the corpus
  float lr = 3e-3f;
  float clip = 0;  // --clip: the global gradient norm's bound (0: none)
  int zero = 0;    // --zero 1: ZeRO-1, the optimizer in the step on each replica's shard
  std::string grad_dtype = "fp32";  // --grad-dtype: the weight gradients' type (fp32, fp16, bf16)
  bool dynamic_scale = false;       // --loss-scale dynamic
  int scale_window = 0;             // --loss-scale-window K (0: not given: 1000)
  int scale_init = 0;               // --initial-loss-scale X, a power of two (0: not given: 65536)
  std::vector<int> seq_lens;
  bool json = false, eval = false;
  std::string dump, corpus = GPT_CORPUS_DIR;
  std::string save, resume;  // examples/gpt's checkpoints (--save DIR, --resume DIR)
};

/// The flags; `extra(args, flag, value)` takes a tool's own valued flags (true: taken). Fails
/// (exit 2, one sentence) on anything else, on sizes that do not fit, and when the run would ask
/// for more than 16 GB: per replica the parameters six times (weights, gradients, Adam's two
/// moments, the reference's two) and every microbatch's saved activations at once (GPipe's worst
/// case, ≈ 16·T·C floats per layer and row plus `attention_copies` H·T² for the attention).
template <class Extra>
run_args parse_run(int argc, char** argv, const examples::cli& cli, double attention_copies, Extra&& extra) {
  run_args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    cli.help(f);
    if (f == "--json" || f == "--eval" || f == "--fsdp" || f == "--tie-embeddings" || f == "--local-losses" ||
        f == "--plan-set") {
      (f == "--json"           ? a.json
       : f == "--eval"         ? a.eval
       : f == "--fsdp"         ? a.fsdp
       : f == "--local-losses" ? a.local
       : f == "--plan-set"     ? a.plan_set
                               : a.tie) = true;
      continue;
    }
    if (i + 1 >= argc) cli.fail(f.rfind("--", 0) == 0 ? f + " needs a value" : "unknown argument '" + f + "'");
    const std::string v = argv[++i];
    if (extra(a, f, v)) continue;
    if (f == "--schedule")
      a.schedule = v;
    else if (f == "--ranks")
      a.ranks = cli.whole(f, v, 1, 64);
    else if (f == "--dp")
      a.dp = cli.whole(f, v, 1, 16);
    else if (f == "--buckets")
      a.buckets = cli.whole(f, v, 1, 1024);
    else if (f == "--offload" || f == "--recompute") {
      if (v != "none" && v != "auto" && v != "all") cli.fail(f + " is none, auto or all, got '" + v + "'");
      (f == "--offload" ? a.offload : a.recompute) = v == "all"    ? pt::memory_policy::all
                                                     : v == "auto" ? pt::memory_policy::automatic
                                                                   : pt::memory_policy::none;
    } else if (f == "--microbatches")
      a.microbatches = cli.whole(f, v, 1, 1024);
    else if (f == "--chunks")
      a.chunks = cli.whole(f, v, 1, 16);
    else if (f == "--layers")
      a.model.layers = cli.whole(f, v, 1, 128);
    else if (f == "--heads")
      a.model.heads = cli.whole(f, v, 1, 64);
    else if (f == "--width")
      a.model.width = cli.whole(f, v, 1, 4096);
    else if (f == "--seq")
      a.model.seq = cli.whole(f, v, 1, 4096);
    else if (f == "--rows")
      a.model.rows = cli.whole(f, v, 1, 1024);
    else if (f == "--steps")
      a.steps = cli.whole(f, v, 1, 1000000);
    else if (f == "--lr")
      a.lr = cli.rate(f, v, 1);
    else if (f == "--clip")
      a.clip = cli.rate(f, v, 1000000);
    else if (f == "--zero") {
      if (v != "0" && v != "1")
        cli.fail("--zero is 0 or 1 (ZeRO-1: the optimizer's state sharded over the replicas; ZeRO-3 is --fsdp), got '" +
                 v + "'");
      a.zero = v == "1" ? 1 : 0;
    } else if (f == "--grad-dtype") {
      if (v != "fp32" && v != "fp16" && v != "bf16") cli.fail("--grad-dtype is fp32, fp16 or bf16, got '" + v + "'");
      a.grad_dtype = v;
    } else if (f == "--loss-scale") {
      if (v != "dynamic")
        cli.fail(
            "--loss-scale is dynamic (halved on an overflow, doubled after --loss-scale-window clean steps), got '" +
            v + "'");
      a.dynamic_scale = true;
    } else if (f == "--loss-scale-window")
      a.scale_window = cli.whole(f, v, 1, 1000000);
    else if (f == "--initial-loss-scale") {
      a.scale_init = cli.whole(f, v, 1, 1 << 30);
      if ((a.scale_init & (a.scale_init - 1)) != 0)
        cli.fail("--initial-loss-scale needs a power of two (dividing by it is then exact), got " + v);
    } else if (f == "--lengths") {
      if (v.empty()) cli.fail("--lengths needs a file (one document length per line)");
      a.lengths = v;
    } else if (f == "--token-cap")
      a.token_cap = cli.whole(f, v, 1, 4096);
    else if (f == "--attention-at")
      a.attention_at = cli.rate(f, v, 1000000);
    else if (f == "--slow") {
      const auto [rank, factor] = cli.rank_factor(f, v, 63, !a.slow.empty());
      a.slow.push_back({rank, factor});
    } else if (f == "--seq-lens") {
      std::size_t at = 0;
      while (at <= v.size()) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        a.seq_lens.push_back(cli.whole(f, v.substr(at, comma - at), 1, 4096));
        at = comma + 1;
      }
    } else if (f == "--dump" || f == "--corpus") {
      if (v.empty()) cli.fail(f + " needs a directory");
      (f == "--dump" ? a.dump : a.corpus) = v;
    } else
      cli.fail("unknown argument '" + f + "'\n" + cli.usage);
  }
  if (!a.slow.empty())
    if (const char* e = pt::slowdown_error(a.slow[0], a.ranks))
      cli.fail("--slow: " + std::string(e) + examples::cli::rank_range(a.slow[0].rank, a.ranks));
  if (a.plan_set && a.slow.empty()) cli.fail("--plan-set holds plans for slowed ranks: give --slow RANK:FACTOR too");
  if (a.plan_set)
    if (const char* e = examples::plan_set_run::steps_error(a.steps)) cli.fail(e);
  if (a.lengths.empty() != (a.token_cap == 0))
    cli.fail(a.lengths.empty() ? "--token-cap packs the documents of --lengths FILE: give it too"
                               : "--lengths packs documents under a token cap: give --token-cap N too");
  if (a.attention_at > 0 && a.lengths.empty()) cli.fail("--attention-at prices the documents of --lengths FILE");
  if (a.buckets > 1 && a.dp < 2)
    cli.fail("--buckets splits the data-parallel gradient reduction: give --dp D (D >= 2) too");
  if (a.zero > 0 && a.dp < 2)
    cli.fail("--zero 1 shards the optimizer's state over the replicas: give --dp D (D >= 2) too");
  if (a.zero > 0 && a.fsdp) cli.fail("--zero 1 with --fsdp: FSDP shards the optimizer's state already (give one)");
  if (a.dynamic_scale && a.grad_dtype == "fp32")
    cli.fail("--loss-scale dynamic scales 16-bit gradients: give --grad-dtype fp16 or bf16 too");
  if ((a.scale_window > 0 || a.scale_init > 0) && !a.dynamic_scale)
    cli.fail(std::string(a.scale_window > 0 ? "--loss-scale-window" : "--initial-loss-scale") +
             " needs --loss-scale dynamic");
  if (!a.dump.empty() && a.grad_dtype != "fp32")
    cli.fail("--dump writes float gradients for PyTorch's check: drop --grad-dtype " + a.grad_dtype);
  if (a.model.width % a.model.heads != 0)
    cli.fail("--width " + std::to_string(a.model.width) + " is no multiple of --heads " +
             std::to_string(a.model.heads));
  for (const int t : a.seq_lens)
    if (t > a.model.seq)
      cli.fail("--seq-lens: a length of " + std::to_string(t) + " is above --seq " + std::to_string(a.model.seq));
  if (!a.dump.empty())
    for (const int t : a.seq_lens)
      if (t != a.model.seq) cli.fail("--dump writes full-length microbatches; drop --seq-lens or give only T");
  // Each flag is bounded, their product is not: --layers 128 --width 4096 is 26 G parameters.
  // The estimate is in doubles (no wrap), before anything is allocated (docs/03 §3.8).
  const double C = a.model.width, T = a.model.seq, L = a.model.layers, H = a.model.heads;
  const double params = L * (12 * C * C + 13 * C) + 256 * C + T * C;  // (a character vocabulary: at most 256)
  const double acts =
      static_cast<double>(a.microbatches) * a.model.rows * L * (16 * T * C + attention_copies * H * T * T);
  const double bytes = 4 * (a.dp * (6 * params + acts));
  constexpr double most = 16e9;
  if (bytes > most)
    cli.fail("--layers, --width, --seq, --rows, --microbatches and --dp ask for about " +
             std::to_string(static_cast<long long>(bytes / 1e9)) + " GB; " + cli.name + " runs at most " +
             std::to_string(static_cast<long long>(most / 1e9)) + " GB (docs/03 §3.8)");
  return a;
}

/// The run's plan, or one sentence and exit 2. With --local-losses the schedule runs over the
/// local chain 0~1~… (every edge detached: local learning), which local-1f1b needs.
inline pt::runtime_plan make_run_plan(run_args& a, const examples::cli& cli) {
  const pt::schedule_info* info = pt::find_schedule(a.schedule);
  if (info) a.chunks = pt::default_chunks(*info, a.chunks);
  if (const char* e = pt::schedule_error(a.schedule, a.ranks, a.microbatches, a.chunks)) cli.fail(e);
  if (info->local && !a.local)
    cli.fail("--schedule " + a.schedule + " trains every stage on a loss of its own: give --local-losses too");
  try {
    pt::schedule_params params;
    if (a.local) {  // the model's stages (one lane's), each its own loss
      const pt::program one = pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks);
      params.edges = pt::local_chain_dag(one.view().lane_length()).edges;
    }
    pt::runtime_plan plan = pt::build_plan(pt::make_schedule(a.schedule, a.ranks, a.microbatches, a.chunks, params));
    if (!plan.ok()) cli.fail("the schedule was rejected: " + pt::explain(plan.result));
    return plan;
  } catch (const std::invalid_argument& e) {
    cli.fail(e.what());
  }
}

/// --corpus DIR: its .md files, each a regular file (a FIFO would hang the read), at most
/// corpus_bytes in all (the corpus costs ≈ 12 bytes of memory per byte of text).
inline constexpr std::uintmax_t corpus_bytes = 64u << 20;
inline char_corpus read_docs(const std::string& dir, const examples::cli& cli) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  std::uintmax_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".md") continue;
    std::error_code fe;
    if (!e.is_regular_file(fe))
      cli.fail("--corpus " + dir + ": " + e.path().filename().string() + " is not a regular file");
    total += e.file_size(fe);
    if (fe) cli.fail("--corpus " + dir + ": cannot read " + e.path().filename().string() + ": " + fe.message());
    if (total > corpus_bytes) cli.fail("--corpus " + dir + ": its .md files hold more than 64 MiB (the corpus limit)");
    files.push_back(e.path());
  }
  if (ec || files.empty()) cli.fail("--corpus " + dir + ": no .md files to read");
  std::sort(files.begin(), files.end());
  return read_corpus(files);
}

/// What a run starts from: the corpus to train on, the last tenth held back for --eval, and the
/// initial weights (with --tie-embeddings the LM head a copy of the token embedding). Sets the
/// vocabulary from the corpus and fails (exit 2) when `stages` cannot hold the model.
struct run_start {
  char_corpus corpus, held;
  model_params<float> initial;
};
inline run_start start_run(run_args& a, int stages, const examples::cli& cli) {
  const char_corpus all = read_docs(a.corpus, cli);
  run_start r{all, all, {}};
  const auto cut = static_cast<std::ptrdiff_t>(all.ids.size() / 10 * 9);
  r.corpus.ids.assign(all.ids.begin(), all.ids.begin() + cut);
  r.held.ids.assign(all.ids.begin() + cut, all.ids.end());
  a.model.vocab = all.vocab_size();
  const gpt_config& c = a.model;
  if (c.layers < stages)
    cli.fail("--layers " + std::to_string(c.layers) + " cannot fill the plan's " + std::to_string(stages) +
             " stages with whole blocks");
  if (a.tie && stages < 2) cli.fail("--tie-embeddings needs at least two stages (the embedding's and the LM head's)");
  r.initial = init_model(c, 1234);
  if (a.local) add_local_heads(r.initial, c, stages, 1234);
  if (a.tie)  // one parameter, two copies: the LM head starts as the token embedding
    std::copy(tied_in_embedding(r.initial.embedding, c).begin(), tied_in_embedding(r.initial.embedding, c).end(),
              tied_in_head(r.initial.head, c).begin());
  return r;
}

/// FSDP: each replica holds its own shard of every stage's gradients (and, once released, of its
/// parameters); replica 0 takes the others' shards to hold the whole. `Model`: a uniform_chain.
template <class Model>
void gather_shards(std::deque<Model>& models, const run_args& a, bool gradients) {
  if (a.dp < 2 || !(a.fsdp || (gradients && a.zero > 0))) return;  // (ZeRO-1 gathers its parameters itself)
  auto gather = [&](auto of) {
    for (int s = 0; s < models.front().size(); ++s) {
      const auto dst = of(models.front().stage(s));
      for (int r = 1; r < a.dp; ++r) {
        const auto src = of(models[static_cast<std::size_t>(r)].stage(s));
        const pt::shard_range own = pt::shard_of(dst.size(), a.dp, r);
        std::copy(src.begin() + static_cast<std::ptrdiff_t>(own.begin),
                  src.begin() + static_cast<std::ptrdiff_t>(own.end),
                  dst.begin() + static_cast<std::ptrdiff_t>(own.begin));
      }
    }
  };
  if (gradients)
    gather([](auto& st) { return st.weight_gradients(); });
  else
    gather([](auto& st) { return st.parameters(); });
}

/// Whether every replica holds bitwise replica 0's gradients (compare only where each holds the
/// whole reduced gradient: not under FSDP or ZeRO-1), or its parameters (`gradients` false).
template <class Model>
bool replicas_agree(std::deque<Model>& models, bool gradients = true) {
  auto agree = [&](auto of) {
    for (std::size_t r = 1; r < models.size(); ++r)
      for (int s = 0; s < models.front().size(); ++s) {
        const auto x = of(models[r].stage(s)), y = of(models.front().stage(s));
        if (std::memcmp(x.data(), y.data(), x.size_bytes()) != 0) return false;
      }
    return true;
  };
  return gradients ? agree([](auto& st) { return st.weight_gradients(); })
                   : agree([](auto& st) { return st.parameters(); });
}

/// Step `step`'s microbatches, and the batch pipetype reads them from: each microbatch's ids and
/// targets first in its slot of rows·T, its length in the batch's lengths.
struct step_data {
  std::vector<microbatch> mbs;
  std::vector<float> no_hidden;  // the first stage takes no hidden states
  std::vector<std::int32_t> ids, targets;
  std::vector<std::size_t> lens;
  std::size_t tokens = 0;
  pt::batch batch;
};

inline void draw(step_data& d, const char_corpus& corpus, const run_args& a, int step, int sinks = 1) {
  const gpt_config& c = a.model;
  const std::size_t slot = token_capacity(c);
  d.mbs.clear();
  d.lens.clear();
  const int count = a.microbatches * a.dp;  // every replica's, replica d's after replica d − 1's
  d.ids.assign(slot * static_cast<std::size_t>(count), 0);
  d.targets.assign(d.ids.size(), 0);
  d.tokens = 0;
  for (int j = 0; j < count; ++j) {
    const int t = a.seq_lens.empty() ? c.seq : a.seq_lens[static_cast<std::size_t>(j) % a.seq_lens.size()];
    d.mbs.push_back(
        draw_microbatch(corpus, c.rows, t, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(j)));
    const microbatch& mb = d.mbs.back();
    std::copy(mb.ids.begin(), mb.ids.end(),
              d.ids.begin() + static_cast<std::ptrdiff_t>(slot * static_cast<std::size_t>(j)));
    std::copy(mb.targets.begin(), mb.targets.end(),
              d.targets.begin() + static_cast<std::ptrdiff_t>(slot * static_cast<std::size_t>(j)));
    d.lens.push_back(static_cast<std::size_t>(t));
    d.tokens += mb.ids.size();
  }
  d.batch.clear();
  d.batch.input(d.no_hidden).input(d.ids);
  for (int k = 0; k < sinks; ++k) d.batch.target(d.targets);  // (local learning: every stage is a sink)
  d.batch.lengths(d.lens, static_cast<std::size_t>(c.seq));
  d.batch.scale(pt::loss_scaling::per(static_cast<double>(d.tokens)));
}

/// --lengths: step `step`'s documents (lengths[i] tokens each, document i drawn from the corpus by
/// (step, i), the same whatever the packing) packed as `pack` says: microbatch j one row of its
/// documents back to back, their starts in `starts` (blocks.hpp: each computed as if alone).
inline void draw_packed(step_data& d, const char_corpus& corpus, const run_args& a, int step,
                        const std::vector<int>& lengths, const pt::packing& pack) {
  const gpt_config& c = a.model;
  const std::size_t slot = token_capacity(c);
  d.mbs.clear();
  d.lens.clear();
  d.ids.assign(slot * pack.microbatches.size(), 0);
  d.targets.assign(d.ids.size(), 0);
  d.tokens = 0;
  for (std::size_t j = 0; j < pack.microbatches.size(); ++j) {
    microbatch mb;
    for (const int i : pack.microbatches[j]) {
      const microbatch doc = draw_microbatch(corpus, 1, lengths[static_cast<std::size_t>(i)],
                                             static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(i));
      const auto at = static_cast<std::int32_t>(mb.ids.size());
      mb.ids.insert(mb.ids.end(), doc.ids.begin(), doc.ids.end());
      mb.targets.insert(mb.targets.end(), doc.targets.begin(), doc.targets.end());
      mb.starts.insert(mb.starts.end(), doc.ids.size(), at);
    }
    mb.t = static_cast<int>(mb.ids.size());
    std::copy(mb.ids.begin(), mb.ids.end(), d.ids.begin() + static_cast<std::ptrdiff_t>(slot * j));
    std::copy(mb.targets.begin(), mb.targets.end(), d.targets.begin() + static_cast<std::ptrdiff_t>(slot * j));
    d.lens.push_back(mb.ids.size());
    d.tokens += mb.ids.size();
    d.mbs.push_back(std::move(mb));
  }
  d.batch.clear();
  d.batch.input(d.no_hidden).input(d.ids).target(d.targets);
  d.batch.lengths(d.lens, static_cast<std::size_t>(c.seq));
  d.batch.scale(pt::loss_scaling::per(static_cast<double>(d.tokens)));
}

/// The fields every --json line starts with (the tool adds its own, then "}\n").
inline void print_json_head(const run_args& a, int ranks, int stages, int microbatches, double loss_first,
                            double loss_last, bool grads_match, double max_diff, double step_ms, double reference_ms) {
  std::printf(
      "{\"schedule\": \"%s\", \"ranks\": %d, \"stages\": %d, \"microbatches\": %d, \"layers\": %d, \"steps\": %d, "
      "\"loss_first\": %s, \"loss_last\": %s, \"grads_match_reference\": %s, \"max_abs_grad_diff\": %s, "
      "\"step_ms\": %.4f, \"reference_step_ms\": %.4f",
      a.schedule.c_str(), ranks, stages, microbatches, a.model.layers, a.steps,
      examples::json_number(loss_first).c_str(), examples::json_number(loss_last).c_str(),
      grads_match ? "true" : "false", examples::json_number(max_diff).c_str(), step_ms, reference_ms);
}

/// Whether the run asks for memory actions (--offload, --recompute).
inline bool wants_memory(const run_args& a) {
  return a.offload != pt::memory_policy::none || a.recompute != pt::memory_policy::none;
}

/// --offload, --recompute: the actions plan_memory places for what each stage saves (`sizes`: per
/// plan stage what its forward saves and, recomputed, keeps), a copy taking one forward (k = 2/3);
/// none without the flags. Refused: --recompute auto (it recomputes only what a memory limit needs,
/// and the tools set none), a placement the pass rejects.
inline pt::memory_program place_run_memory(const run_args& a, const pt::runtime_plan& plan,
                                           const pt::memory_sizes& sizes, const examples::cli& cli) {
  if (!wants_memory(a)) return pt::no_memory_actions(plan.compute());
  if (a.recompute == pt::memory_policy::automatic)
    cli.fail("--recompute auto recomputes only what a memory limit needs, and this tool sets none: give all or none");
  pt::memory_options mo;
  mo.offload = a.offload;
  mo.recompute = a.recompute;
  mo.copy_bandwidth = static_cast<double>(std::max<std::int64_t>(sizes.saved_of(0), 1));
  const pt::memory_step placed = pt::plan_memory(plan.compute(), plan.lowered(), sizes, pt::costs{}, mo);
  if (!placed.result.ok()) cli.fail("the memory actions were refused: " + pt::describe(placed.result));
  return placed.actions;
}

/// [f(0), f(1), ..., f(n − 1)] as a JSON list of numbers.
template <class F>
std::string json_list(std::size_t n, F f) {
  std::string out = "[";
  for (std::size_t g = 0; g < n; ++g) out += (g ? ", " : "") + std::to_string(f(g));
  return out + "]";
}

/// What a run with memory actions reports: the actions per replica, and per global rank the stash
/// pool planned (the plan's peak in stashes), the most in use as the last step ran, the same plan's
/// peak without the actions, and the activation slots with and without them.
struct memory_report {
  int offloaded = 0, recomputed = 0;
  std::vector<pipetype::host::stash_pool_use> pools;
  std::vector<int> slots_without;
  bool within = true;  // every rank: most in use <= planned, and planned == the plan's peak

  template <class Executor>
  memory_report(const Executor& ex, const pt::runtime_plan& plan, const pt::memory_program& actions, int dp)
      : pools(ex.stash_pools()) {
    // (counted in stashes: a byte a stash)
    const std::vector<pt::rank_memory> planned =
        pt::memory_of(plan.compute(), actions, pt::memory_sizes{{1}, {0}}, pt::stash_model);
    for (const pt::memory_action& x : actions.ops) {
      offloaded += x.what == pt::memory_kind::offload;
      recomputed += x.what == pt::memory_kind::recompute;
    }
    const pt::mesh shape{plan.compute().ranks, dp};
    for (std::size_t g = 0; g < pools.size(); ++g) {
      const pt::rank_memory& r = planned[static_cast<std::size_t>(shape.pipeline_rank(static_cast<int>(g)))];
      slots_without.push_back(static_cast<int>(r.base_peak_bytes));
      within = within && pools[g].high_water <= pools[g].slots && pools[g].slots == static_cast<int>(r.peak_bytes);
    }
  }
  template <class F>
  std::string list(F f) const {
    return json_list(pools.size(), f);
  }
  /// The --json field `"memory": {...}`, with its leading comma.
  void print_json() const {
    std::printf(
        ", \"memory\": {\"offloaded\": %d, \"recomputed\": %d, \"stash_slots\": %s, \"stash_high_water\": %s, "
        "\"stash_slots_without\": %s, \"high_water_within_plan\": %s, \"activation_slots\": %s, "
        "\"activation_slots_without\": %s}",
        offloaded, recomputed, list([&](std::size_t g) { return pools[g].slots; }).c_str(),
        list([&](std::size_t g) { return pools[g].high_water; }).c_str(),
        list([&](std::size_t g) { return slots_without[g]; }).c_str(), within ? "true" : "false",
        list([&](std::size_t g) { return pools[g].activation_slots; }).c_str(),
        list([&](std::size_t g) { return pools[g].lowered_activation_slots; }).c_str());
  }
  /// The text line.
  void print_text() const {
    std::printf(
        "memory actions: %d offloads, %d recomputes per replica; stash slots per rank (most in use / planned / "
        "without the actions):",
        offloaded, recomputed);
    for (std::size_t g = 0; g < pools.size(); ++g)
      std::printf(" %d/%d/%d", pools[g].high_water, pools[g].slots, slots_without[g]);
    std::printf("; activation slots (with / without):");
    for (std::size_t g = 0; g < pools.size(); ++g)
      std::printf(" %d/%d", pools[g].activation_slots, pools[g].lowered_activation_slots);
    std::printf("\n");
  }
};

/// What a run reports whose stages lend their parameters (FSDP on the host, graph/stage.hpp):
/// per global rank the parameter pool's slots (the plan's: mesh_program::param_slots), the most in
/// use at once as the last step ran, the bytes the rank holds for parameters (its shards and its
/// slots), and the bytes of its stages' whole parameters (what it holds without FSDP).
struct param_report {
  std::vector<pipetype::host::param_pool_use> pools;
  std::vector<std::size_t> unsharded;
  bool within = true;  // every rank: most in use <= its slots == the plan's

  template <class Executor, class Model>
  param_report(const Executor& ex, const pt::runtime_plan& plan, Model& model) : pools(ex.parameter_pools()) {
    const pt::mesh_program& mp = ex.program();
    const pt::program_view p = plan.compute();
    for (std::size_t g = 0; g < pools.size(); ++g) {
      const int r = mp.shape.pipeline_rank(static_cast<int>(g));
      std::size_t bytes = 0;
      for (int s = 0; s < p.stages; ++s)
        if (p.stage_rank[static_cast<std::size_t>(s)] == r)
          bytes += model.stage(s % model.size()).weight_grad_extent() * sizeof(float);
      unsharded.push_back(bytes);
      within = within && pools[g].high_water <= pools[g].slots && pools[g].slots == mp.param_slots.at(g);
    }
  }
  template <class F>
  std::string list(F f) const {
    return json_list(pools.size(), f);
  }
  /// The --json field `"params": {...}`, with its leading comma.
  void print_json() const {
    std::printf(
        ", \"params\": {\"held\": true, \"slots\": %s, \"high_water\": %s, \"high_water_within_plan\": %s, "
        "\"resident_bytes\": %s, \"unsharded_bytes\": %s}",
        list([&](std::size_t g) { return pools[g].slots; }).c_str(),
        list([&](std::size_t g) { return pools[g].high_water; }).c_str(), within ? "true" : "false",
        list([&](std::size_t g) { return pools[g].resident_bytes; }).c_str(),
        list([&](std::size_t g) { return unsharded[g]; }).c_str());
  }
  /// The text line.
  void print_text() const {
    std::printf("parameters held by pipetype per rank (bytes resident / unsharded, slots in use / planned):");
    for (std::size_t g = 0; g < pools.size(); ++g)
      std::printf(" %zu/%zu %d/%d", pools[g].resident_bytes, unsharded[g], pools[g].high_water, pools[g].slots);
    std::printf("\n");
  }
};

using examples::median;
using examples::since_ms;

}  // namespace gpt
