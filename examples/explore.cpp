// pipetype-explore — look at a schedule: its grid, its figures, its lowered program.
//
//   pipetype-explore --schedule NAME --ranks P --microbatches M [--chunks V]
//                    [--cost-f T] [--cost-b T] [--cost-i T] [--cost-w T] [--cost-comm T]
//                    [--rank-speed S,S,...] [--microbatch-scale X,X,...] [--placement one|v|auto]
//                    [--mem-limit K] [--groups auto|tick|peer] [--file SCHEDULE]
//                    [--notation auto|current|legacy] [--p2p shared|per-peer|per-direction]
//                    [--format text|json|csv|csv-comms] [--output FILE] [--svg FILE] [--trace FILE]
//                    [--layout STRING] [--edges A>B,C~D,...] [--forward-only]
//                    [--dp D [--fsdp [--window W]] [--buckets N] [--zero 1] --param-mb X --dp-gbps B
//                     [--dp-alpha-ms A] [--opt-gbps G]]
//                    [--offload none|auto|all] [--recompute none|auto|all] --act-mb X
//                    [--input-mb Y] [--pcie-gbps B] [--act-limit-mb L] [--offload-share S]
//                    [--lengths FILE --token-cap N [--attention-at T]] [--slow RANK:FACTOR [--plan-set]]
//
// NAME is one of the registry's schedules or `all` (a comparison table). --mem-limit K (in
// microbatch activations per rank; halves allowed, as I and W each release half of one) rejects
// schedules that need more, and is the limit zb-auto searches within. --groups: one NCCL group
// per tick, one per peer and tick, or (auto, the default) per peer for schedules with overlapped
// F&B pairs and per tick otherwise (group_policy, lowered.hpp). --file reads a
// schedule in PyTorch's notation instead (io/notation.hpp: compute-only or compute+comms CSV,
// current or older notation, detected unless --notation says); --ranks and --microbatches then
// fix the sizes instead of inferring them, so an index out of range is named where it is. A
// file with its own transfers has their order checked against NCCL's rules, on one NCCL stream
// per rank (--p2p shared: torch's default "nccl" backend), per peer ("nccl-lazy") or per peer
// and direction (pipeline_per_edge_p2p). --format csv
// writes the compute program as PyTorch's compute-only CSV, csv-comms the lowered program as its
// compute+comms CSV (both refuse DualPipe's two directions; with --dp [--fsdp], csv-comms writes
// each rank's UNSHARD, RESHARD and REDUCE_GRAD where the mesh step places them, and needs no
// bandwidth); --output writes the result to FILE
// (atomically) instead of standard output. --svg FILE draws the simulated step as an SVG timeline
// (io/svg.hpp; with `--schedule all`, one panel per schedule on one time scale; transfers drawn as
// arrows up to 256 of them) and --trace FILE writes it as a Chrome trace (io/chrome_trace.hpp,
// for Perfetto; one time unit is drawn as 1 ms), both atomically. Costs and activations count a rank's whole share of
// the model (one stage of a one-stage-per-rank split): with v chunks per rank a chunk costs 1/v
// of them and holds 1/v of an activation, so schedules with different v compare fairly. Cost
// defaults F=1, B=2, I=W=B/2 (B = I + W when only those are given), comm 0. --rank-speed gives
// each rank's relative speed (1 nominal, 0.5 takes twice as long: a slower device) and
// --microbatch-scale each microbatch's length relative to the others (variable sequence lengths);
// every schedule is simulated under them and zb-auto searches with them. --placement says where
// zb-auto places stages: one per rank (the default), two per rank in a V as ZB-V does, or auto,
// both searched and the shorter rank span kept. --layout STRING splits the model unevenly, in
// Megatron's layout language (graph/layer_layout.hpp: `E|t*3|t*4|t*4|t*3,L`): its stages are
// the program's (one per rank and chunk, so the count must suit the schedule), the costs given
// are then those of one decoder layer and each stage costs its layers' weight times them
// (analysis/layout_costs.hpp), and the peaks count decoder-layer activations. --edges gives the
// stage graph of the p stages instead of the chain (skip connections, towers: graph/dag.hpp);
// the one-stage-per-rank schedules run over it (the others skip), verified, simulated and lowered over
// every edge; a --file states its graph with an `edges` line. `A~B` is a detached edge (local
// learning: activations only, no gradient back; every stage whose edges out are all detached
// computes its own loss); --schedule local-1f1b needs them all detached (its default graph is the
// chain 0~1~…) and reports 1F1B over the same stages with every edge attached beside it. The run-time path
// is the same code make_plan runs at compile time (build_plan, simulate). --forward-only keeps
// only the schedule's forwards (forward_only_of: an evaluation or inference plan): no backward is
// needed, no gradient travels, and an activation lives only until its consumer's F has read it.
// --dp D runs the plan as D data-parallel replicas (a pp × dp mesh, docs/12_data_parallel.md):
// each stage's gradient reduction placed after its last backward (--fsdp: reduce-scatter, with the
// parameters gathered before use and released after), the whole step lowered, proved deadlock-free
// across every communicator and simulated; --param-mb X is a rank share's parameters in MB (a
// chunk holds X/v), --dp-gbps B the bus bandwidth in GB/s, and one time unit is 1 ms (as --trace
// draws it). It reports exposed_dp: how much longer the step is than the same plan without its
// collectives; --svg and --trace then draw the step over the replicas, every global rank with its
// collectives (REDUCE_GRAD(1), UNSHARD(2), ...) on a data-parallel band or thread of their own.
// With --fsdp (--window W: the stages a rank keeps gathered, 3 by default) it reports each rank's
// parameter slots and the MB of parameters it holds: its shard of X and one slot per stage
// gathered at once, each the size of a chunk (dp.param_slots, dp.param_mb_resident; a column
// `param MB` beside exposed DP). --buckets N splits each stage's reduction into N all-reduces
// (reduce-scatters with --fsdp or --zero 1) of 1/N of its parameters each, bucket b ready once
// b + 1 Nths of the stage's last backward have run, as DDP's buckets overlap the backward
// (dp.buckets). --dp-alpha-ms A charges
// every collective a latency of A ms besides its bytes (0 by default), past which more buckets
// cost more than they hide (dp.alpha_ms). --zero 1 (not with --fsdp) is ZeRO-1: each
// stage's reduction a reduce-scatter, its optimizer step on each replica's shard (OPT_STEP) and the
// all-gather of the updated parameters after it (PARAM_SYNC) in the step (dp.zero). Every --dp
// report gives the MB of Adam's two moments a rank holds, each the size of the parameters: 2·X,
// divided by D with --zero 1 or --fsdp (dp.optimizer_mb). --opt-gbps G puts the optimizer in the
// step (OPT_STEP a stage after its reductions) at G GB/s of parameters updated, each replica all of
// them or with --zero 1 or --fsdp its shard (dp.opt_gbps); exposed_dp then counts it too.
// --offload and --recompute add memory actions (docs/13_memory.md): OFFLOAD/RELOAD of a
// microbatch's saved activation over each rank's host link, RECOMPUTE of a forward before its
// backward, placed by the pass (all, or auto: what costs at most 2 % of the step, and with
// --act-limit-mb L what brings every rank under L MB), lowered onto a copy stream, proved and
// simulated. --act-mb X is a rank share's saved activation per microbatch in MB (a chunk holds
// X/v), --input-mb Y what a recomputed forward keeps (its input; X/17 by default, a transformer
// layer's input beside its 34·b·s·h bytes), --pcie-gbps B the host link per direction in GB/s, one
// time unit 1 ms; --offload-share S offloads that share of what the rules allow, spread evenly (half
// offload: 0.5). It reports per rank the resident peak with and without the actions (peak_bytes,
// peak_activations), the host pool, what was offloaded and recomputed, PipeOffload's k and the
// modelled step time with and without; --svg and --trace draw the copies (OFFLOAD(0,3), ...) on a
// band or thread of their own and each RECOMPUTE as 0R3. --schedule zb-auto with --act-limit-mb
// and memory actions (and no --mem-limit) searches at activation limits from what L holds as it is
// up to none, and keeps the one whose step with the actions models fastest under L (limit_search
// in JSON): holding more and offloading can beat the schedule that fits as it is. With --dp D the
// step with memory actions is the one over the replicas: lowered and proved with its collectives
// and copy streams together, and timed against the same mesh step without the actions (zb-auto's
// search under L stays with one replica).
// --lengths FILE (one sequence length per line) with --token-cap N packs a step's sequences into
// microbatches of at most N tokens instead of --microbatches, a sequence of t tokens costing
// t + t²/T token units (--attention-at T: the length whose attention part costs what the rest
// does; N by default), so that --cost-f and --cost-b are those of one sequence of N tokens
// (schedules/balance.hpp). It reports the arrival order's packing (each sequence into the open
// microbatch while N allows) and the balanced one (the longest-processing-time rule under the cap,
// in the order that simulates shortest), each under the schedule, and the rest of the report is the
// balanced step's (balance.* in JSON: arrival_makespan, balanced_makespan, ratio).
// --slow RANK:FACTOR runs rank RANK FACTOR times as long (a straggler: 1:1.5) under the plan made
// for nominal speeds, a fixed plan. --plan-set (with --layout, the model's layers one stage per
// rank) holds a plan for each rank slowed by FACTOR, layers moved off it (schedules/plan_set.hpp),
// and reports each plan's makespan and the one the detector's rule switches to between steps
// (stragglers.* in JSON: fixed_makespan, switched_makespan, ratio, plans); --svg and --trace draw
// the fixed plan's step and the chosen plan's, one above the other.
//
// Exit codes: 0 valid, 2 bad arguments or a rejected schedule (one message naming the place).
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "lengths_file.hpp"
#include "plain_number.hpp"
#include "read_text.hpp"
#include "write_file.hpp"

namespace pt = pipetype;

namespace {

/// Why a built-in schedule of these sizes is past pipetype::limits (one F and one B, or an I
/// and a W, per stage and microbatch), or nullptr: refused before anything is generated.
const char* past_limits(int p, int m, int v, bool split, std::size_t edges) {
  const long long stages = 1LL * p * v;
  return pt::limits::exceeded(p, stages, m, (split ? 3 : 2) * stages * m, static_cast<long long>(edges));
}

struct args {
  std::string schedule = "1f1b";
  int ranks = 4;
  int microbatches = 8;
  int chunks = 0;  // 0: 2 for chunked schedules, 1 otherwise
  bool ranks_given = false, microbatches_given = false;
  pt::costs costs{};
  std::vector<double> rank_speed, microbatch_scale;                     // --rank-speed, --microbatch-scale
  pt::search_placement placement = pt::search_placement::one_per_rank;  // --placement (zb-auto)
  double mem_limit = 0;
  bool cost_b_given = false;
  std::string file;
  std::string format = "text";  // text, json, csv, csv-comms
  bool json() const { return format == "json"; }
  std::string output;
  std::string svg, trace;  // --svg, --trace files
  pt::notation form = pt::notation::automatic;
  pt::p2p_streams p2p = pt::p2p_streams::shared;
  pt::group_policy groups = pt::group_policy::automatic;
  std::string layout_text;  // --layout
  pt::layer_layout layout;
  std::vector<pt::stage_edge> edges;                                                         // --edges
  bool forward_only = false;                                                                 // --forward-only
  int dp = 1;                                                                                // --dp
  bool fsdp = false;                                                                         // --fsdp
  int window = 3;                                                                            // --window
  bool window_given = false;
  int buckets = 1;  // --buckets
  bool buckets_given = false;
  int zero = 0;                                                                              // --zero
  double param_mb = 0, dp_gbps = 0;                                                          // --param-mb, --dp-gbps
  double dp_alpha = 0;                                                                       // --dp-alpha-ms
  double opt_gbps = 0;                                                                       // --opt-gbps
  pt::memory_policy offload = pt::memory_policy::none, recompute = pt::memory_policy::none;  // --offload, --recompute
  double act_mb = 0, input_mb = -1, pcie_gbps = 0,
         act_limit_mb = 0;   // --act-mb, --input-mb, --pcie-gbps, --act-limit-mb
  double offload_share = 1;  // --offload-share
  std::string lengths_file;  // --lengths
  std::vector<int> lengths;  // its lengths (read by parse)
  long long token_cap = 0;   // --token-cap
  double attention_at = -1;  // --attention-at (-1: not given: the token cap)
  std::vector<pt::slowdown> slow;  // --slow RANK:FACTOR (at most one)
  bool plan_set = false;           // --plan-set
  bool has_layout() const { return !layout_text.empty(); }
  /// Memory actions asked for (or their sizes given): the step is planned with them.
  bool memory() const {
    return offload != pt::memory_policy::none || recompute != pt::memory_policy::none || act_limit_mb > 0 || act_mb > 0;
  }
};

constexpr const char* usage =
    "usage: pipetype-explore --schedule NAME --ranks P --microbatches M [--chunks V]\n"
    "         [--cost-f T] [--cost-b T] [--cost-i T] [--cost-w T] [--cost-comm T]\n"
    "         [--rank-speed S,S,...] [--microbatch-scale X,X,...] [--placement one|v|auto]\n"
    "         [--mem-limit K] [--groups auto|tick|peer] [--file SCHEDULE] [--notation auto|current|legacy]\n"
    "         [--p2p shared|per-peer|per-direction] [--format text|json|csv|csv-comms] [--output FILE]\n"
    "         [--svg FILE] [--trace FILE] [--layout STRING] [--edges A>B,C~D,...]\n"
    "         [--forward-only] [--dp D [--fsdp [--window W]] [--buckets N] [--zero 1] --param-mb X\n"
    "          --dp-gbps B [--dp-alpha-ms A] [--opt-gbps G]]\n"
    "         [--offload none|auto|all] [--recompute none|auto|all] --act-mb X [--input-mb Y]\n"
    "         [--pcie-gbps B] [--act-limit-mb L] [--offload-share S]\n"
    "         [--lengths FILE --token-cap N [--attention-at T]] [--slow RANK:FACTOR [--plan-set]]\n"
    "NAME: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zb-v, v-min, v-half, dualpipe-v, dualpipe, "
    "zb-auto, local-1f1b, all\n";

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "pipetype-explore: " << msg << "\n";
  std::exit(2);
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "pipetype-explore: " << msg << "\n" << usage;
  std::exit(2);
}

double to_number(const std::string& flag, const std::string& v, bool integer) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (!examples::plain_number(v, !integer) || end != v.c_str() + v.size() || !(x >= 0) || x > 1e9)
    usage_error(flag + " needs a non-negative " + (integer ? "whole" : "decimal") + " number, got '" + v + "'");
  if (integer && x != static_cast<double>(static_cast<long>(x)))
    usage_error(flag + " needs a whole number, got '" + v + "'");
  return x;
}

/// A comma-separated list of positive decimals (--rank-speed 1,1,0.5,1), each in [0.000001,
/// 1000000] (pipetype::cost_bounds: a speed of 10^-300 would make every simulated time infinite).
std::vector<double> to_numbers(const std::string& flag, const std::string& v) {
  std::vector<double> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = v.find(',', at);
    const double x = to_number(flag, v.substr(at, comma == std::string::npos ? std::string::npos : comma - at), false);
    if (!(x > 0)) usage_error(flag + " needs positive numbers separated by commas, got '" + v + "'");
    if (x < pt::cost_bounds::min_scale || x > pt::cost_bounds::max_scale)
      usage_error(flag + " needs numbers in [0.000001, 1000000] (pipetype::cost_bounds), got '" + v + "'");
    out.push_back(x);
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

/// --edges 0>1,1>2,0~2: the stage graph's edges, `~` a detached one (its rules are verify's).
std::vector<pt::stage_edge> to_edges(const std::string& v) {
  std::vector<pt::stage_edge> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = v.find(',', at);
    const std::string one = v.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const std::size_t gt = one.find_first_of(">~");
    if (gt == std::string::npos)
      usage_error("--edges needs edges A>B (or A~B, detached) separated by commas, got '" + v + "'");
    const int from = static_cast<int>(to_number("--edges", one.substr(0, gt), true));
    const int to = static_cast<int>(to_number("--edges", one.substr(gt + 1), true));
    out.push_back({from, to, one[gt] == '~'});
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

args parse(int argc, char** argv) {
  args a;
  for (int k = 1; k < argc; ++k) {
    const std::string flag = argv[k];
    if (flag == "--help" || flag == "-h") {
      std::cout << "pipetype-explore: look at a pipeline schedule (docs/00_quickstart.md)\n" << usage;
      std::exit(0);
    }
    if (flag == "--forward-only" || flag == "--fsdp" || flag == "--plan-set") {
      (flag == "--fsdp" ? a.fsdp : flag == "--plan-set" ? a.plan_set : a.forward_only) = true;
      continue;
    }
    if (k + 1 >= argc) usage_error("missing value after " + flag);
    const std::string v = argv[++k];
    if (flag == "--schedule")
      a.schedule = v;
    else if (flag == "--ranks") {
      a.ranks = static_cast<int>(to_number(flag, v, true));
      a.ranks_given = true;
    } else if (flag == "--microbatches") {
      a.microbatches = static_cast<int>(to_number(flag, v, true));
      a.microbatches_given = true;
    } else if (flag == "--chunks")
      a.chunks = static_cast<int>(to_number(flag, v, true));
    else if (flag == "--cost-f")
      a.costs.f = to_number(flag, v, false);
    else if (flag == "--cost-b") {
      a.costs.b = to_number(flag, v, false);
      a.cost_b_given = true;
    } else if (flag == "--cost-i") {
      a.costs.i = to_number(flag, v, false);
    } else if (flag == "--cost-w") {
      a.costs.w = to_number(flag, v, false);
    } else if (flag == "--cost-comm")
      a.costs.comm = to_number(flag, v, false);
    else if (flag == "--slow") {
      const std::size_t colon = v.find(':');
      if (colon == std::string::npos || !a.slow.empty())
        usage_error("--slow takes one RANK:FACTOR (rank RANK runs FACTOR times as long: 1:1.5), got '" + v + "'");
      a.slow.push_back(
          {static_cast<int>(to_number(flag, v.substr(0, colon), true)), to_number(flag, v.substr(colon + 1), false)});
    } else if (flag == "--lengths") {
      if (v.empty()) usage_error("--lengths needs a file (one sequence length per line)");
      a.lengths_file = v;
    } else if (flag == "--token-cap")
      a.token_cap = static_cast<long long>(to_number(flag, v, true));
    else if (flag == "--attention-at")
      a.attention_at = to_number(flag, v, false);
    else if (flag == "--rank-speed")
      a.rank_speed = to_numbers(flag, v);
    else if (flag == "--microbatch-scale")
      a.microbatch_scale = to_numbers(flag, v);
    else if (flag == "--placement") {
      if (v != "one" && v != "v" && v != "auto") usage_error("--placement is one, v or auto, got '" + v + "'");
      a.placement = v == "v"      ? pt::search_placement::v
                    : v == "auto" ? pt::search_placement::automatic
                                  : pt::search_placement::one_per_rank;
    } else if (flag == "--mem-limit")
      a.mem_limit = to_number(flag, v, false);
    else if (flag == "--file")
      a.file = v;
    else if (flag == "--groups") {
      if (v != "auto" && v != "tick" && v != "peer") usage_error("--groups is auto, tick or peer, got '" + v + "'");
      a.groups = v == "peer"   ? pt::group_policy::per_peer
                 : v == "tick" ? pt::group_policy::per_tick
                               : pt::group_policy::automatic;
    } else if (flag == "--format") {
      if (v != "text" && v != "json" && v != "csv" && v != "csv-comms")
        usage_error("--format is text, json, csv or csv-comms, got '" + v + "'");
      a.format = v;
    } else if (flag == "--notation") {
      if (v != "auto" && v != "current" && v != "legacy")
        usage_error("--notation is auto, current or legacy, got '" + v + "'");
      a.form = v == "legacy" ? pt::notation::legacy : v == "current" ? pt::notation::current : pt::notation::automatic;
    } else if (flag == "--p2p") {
      if (v != "shared" && v != "per-peer" && v != "per-direction")
        usage_error("--p2p is shared, per-peer or per-direction, got '" + v + "'");
      a.p2p = v == "per-peer"        ? pt::p2p_streams::per_peer
              : v == "per-direction" ? pt::p2p_streams::per_direction
                                     : pt::p2p_streams::shared;
    } else if (flag == "--output") {
      if (v.empty()) usage_error("--output needs a file name");
      a.output = v;
    } else if (flag == "--edges") {
      a.edges = to_edges(v);
    } else if (flag == "--layout") {
      a.layout_text = v;
      a.layout = pt::parse_layout(v);
      if (!a.layout.ok())
        usage_error("--layout '" + v + "': column " + std::to_string(a.layout.error.column) + ": " +
                    a.layout.error.detail);
    } else if (flag == "--dp") {
      a.dp = static_cast<int>(to_number(flag, v, true));
    } else if (flag == "--window") {
      a.window = static_cast<int>(to_number(flag, v, true));
      a.window_given = true;
    } else if (flag == "--buckets") {
      a.buckets = static_cast<int>(std::min(to_number(flag, v, true), 1e6));
      a.buckets_given = true;
    } else if (flag == "--zero") {
      if (v != "0" && v != "1") usage_error("--zero is 0 or 1 (ZeRO-1; ZeRO-3 is --fsdp), got '" + v + "'");
      a.zero = v == "1" ? 1 : 0;
    } else if (flag == "--param-mb" || flag == "--dp-gbps" || flag == "--opt-gbps") {
      (flag == "--param-mb" ? a.param_mb : flag == "--dp-gbps" ? a.dp_gbps : a.opt_gbps) = to_number(flag, v, false);
    } else if (flag == "--dp-alpha-ms") {
      a.dp_alpha = to_number(flag, v, false);
      if (a.dp_alpha > 1000) usage_error("--dp-alpha-ms is at most 1000 ms a collective");
    } else if (flag == "--offload" || flag == "--recompute") {
      if (v != "none" && v != "auto" && v != "all") usage_error(flag + " is none, auto or all, got '" + v + "'");
      (flag == "--offload" ? a.offload : a.recompute) = v == "all"    ? pt::memory_policy::all
                                                        : v == "auto" ? pt::memory_policy::automatic
                                                                      : pt::memory_policy::none;
    } else if (flag == "--offload-share") {
      a.offload_share = to_number(flag, v, false);
      if (!(a.offload_share > 0) || a.offload_share > 1)
        usage_error("--offload-share is a share in (0, 1], got '" + v + "'");
    } else if (flag == "--act-mb" || flag == "--input-mb" || flag == "--pcie-gbps" || flag == "--act-limit-mb") {
      (flag == "--act-mb"      ? a.act_mb
       : flag == "--input-mb"  ? a.input_mb
       : flag == "--pcie-gbps" ? a.pcie_gbps
                               : a.act_limit_mb) = to_number(flag, v, false);
    } else if (flag == "--svg" || flag == "--trace") {
      if (v.empty()) usage_error(flag + " needs a file name");
      (flag == "--svg" ? a.svg : a.trace) = v;
    } else
      usage_error("unknown flag " + flag);
  }
  // sizes and bandwidths within what the figures hold: a bandwidth near 0 made every copy and
  // collective take "inf", and 10^15-byte activations wrapped a rank's 64-bit sums (docs/03 §3.8)
  for (const auto& [flag, x] :
       {std::pair{"--dp-gbps", a.dp_gbps}, std::pair{"--pcie-gbps", a.pcie_gbps}, std::pair{"--opt-gbps", a.opt_gbps}})
    if (x != 0 && (x < 0.001 || x > 100000))
      usage_error(std::string(flag) + " is a bandwidth in [0.001, 100000] GB/s");
  for (const auto& [flag, x] : {std::pair{"--param-mb", a.param_mb}, std::pair{"--act-mb", a.act_mb},
                                std::pair{"--input-mb", a.input_mb}, std::pair{"--act-limit-mb", a.act_limit_mb}})
    if (x > 1e6) usage_error(std::string(flag) + " is at most 1000000 MB (pipetype::limits::saved_bytes is 2^40 bytes)");
  if (a.mem_limit * 2 != static_cast<double>(static_cast<long>(a.mem_limit * 2)))
    usage_error("--mem-limit counts activations in halves (e.g. 4 or 3.5)");
  if (a.mem_limit > 1e6) usage_error("--mem-limit is at most 1000000 activations");
  // I and W given without B: a full backward is their sum
  if (!a.cost_b_given && a.costs.i >= 0 && a.costs.w >= 0) a.costs.b = a.costs.i + a.costs.w;
  if (a.ranks < 1) usage_error("--ranks must be at least 1");
  if (a.dp < 1 || 1LL * a.dp * a.ranks > pt::limits::ranks)
    usage_error("--dp needs at least 1 replica, and --ranks × --dp at most " + std::to_string(pt::limits::ranks) +
                " ranks (pipetype::limits)");
  if (a.dp > 1 && !(a.dp_gbps > 0) && a.format != "csv-comms")
    usage_error("--dp needs --dp-gbps B, the data-parallel bus bandwidth in GB/s (B > 0)");
  if (a.dp == 1 && (a.fsdp || a.param_mb > 0 || a.dp_gbps > 0 || a.dp_alpha > 0 || a.opt_gbps > 0))
    usage_error(
        "--fsdp, --param-mb, --dp-gbps, --dp-alpha-ms and --opt-gbps describe data parallelism: give --dp D (D ≥ 2) "
        "too");
  if (a.window_given && !a.fsdp)
    usage_error("--window is FSDP's (the stages a rank keeps gathered at once): give --fsdp too");
  if (a.window < 1) usage_error("--window must be at least 1 (a stage gathered at a time)");
  if (a.buckets_given && a.dp == 1)
    usage_error("--buckets splits data parallelism's gradient reductions: give --dp D (D ≥ 2) too");
  if (a.buckets < 1) usage_error("--buckets must be at least 1 (a stage's gradients in one reduction)");
  if (a.buckets > pt::limits::buckets) usage_error("--buckets is at most 1024 (pipetype::limits::buckets)");
  if (a.zero > 0 && a.dp == 1)
    usage_error("--zero 1 shards the optimizer's state over data-parallel replicas: give --dp D (D ≥ 2) too");
  if (a.zero > 0 && a.fsdp) usage_error("--zero 1 with --fsdp: FSDP shards the optimizer's state already (give one)");
  if (a.dp > 1 && a.forward_only) usage_error("--dp reduces gradients: a --forward-only plan has none");
  if ((a.memory() || a.input_mb >= 0 || a.pcie_gbps > 0) && !(a.act_mb > 0))
    usage_error(
        "--offload, --recompute, --input-mb, --pcie-gbps and --act-limit-mb need --act-mb X, a rank share's "
        "saved activation per microbatch in MB (X > 0)");
  if (a.offload != pt::memory_policy::none && !(a.pcie_gbps > 0))
    usage_error("--offload needs --pcie-gbps B, the host link's bandwidth per direction in GB/s (B > 0)");
  if (a.memory() && a.forward_only)
    usage_error("a --forward-only plan keeps no activation for a backward: nothing to offload or recompute");
  if (a.memory() && (a.format == "csv" || a.format == "csv-comms"))
    usage_error("--format " + a.format + ": PyTorch's schedule files have no memory actions (text and json show them)");
  if (a.offload_share < 1 && a.offload == pt::memory_policy::none)
    usage_error("--offload-share is a share of the offloads: give --offload all or auto too");
  if (a.input_mb > a.act_mb) usage_error("--input-mb is part of the saved activation: at most --act-mb");
  if (a.microbatches < 1) usage_error("--microbatches must be at least 1");
  if (!a.slow.empty()) {  // the straggler: its rank's speed, the others nominal
    if (const char* e = pt::slowdown_error(a.slow[0], a.ranks))
      usage_error("--slow: " + std::string(e) + examples::cli::rank_range(a.slow[0].rank, a.ranks));
    if (!a.rank_speed.empty()) usage_error("--slow sets a rank's speed: give it or --rank-speed, not both");
    if (!a.file.empty() || a.schedule == "all")
      usage_error("--slow runs one --schedule NAME (not with --file or --schedule all yet)");
    a.rank_speed.assign(static_cast<std::size_t>(a.ranks), 1.0);
    a.rank_speed[static_cast<std::size_t>(a.slow[0].rank)] = 1 / a.slow[0].factor;
  }
  if (a.plan_set && (a.slow.empty() || !a.has_layout()))
    usage_error(
        "--plan-set holds plans for slowed ranks: give --slow RANK:FACTOR and --layout (the model's layers, "
        "one stage per rank) too");
  if (!a.slow.empty() && (!a.lengths_file.empty() || a.act_limit_mb > 0))
    usage_error(
        "--slow with --lengths or --act-limit-mb: one at a time for now (the slowed rank's plan must be "
        "the nominal one)");
  if (a.lengths_file.empty() != (a.token_cap == 0))
    usage_error(a.lengths_file.empty() ? "--token-cap packs the sequences of --lengths FILE: give it too"
                                       : "--lengths packs sequences under a token cap: give --token-cap N (N >= 1)");
  if (a.attention_at >= 0 && a.lengths_file.empty())
    usage_error("--attention-at prices the sequences of --lengths FILE: give it too");
  if (!a.lengths_file.empty()) {
    if (a.token_cap < 1 || a.token_cap > (1LL << 30)) usage_error("--token-cap is a whole number in [1, 2^30]");
    if (a.microbatches_given || !a.microbatch_scale.empty())
      usage_error("--lengths packs the microbatches itself: drop --microbatches and --microbatch-scale");
    if (!a.file.empty() || a.schedule == "all" || a.has_layout())
      usage_error("--lengths packs for one --schedule NAME (not with --file, --schedule all or --layout yet)");
    std::string why;
    const std::optional<std::vector<int>> read = examples::read_lengths(a.lengths_file, a.token_cap, why);
    if (!read) usage_error("--lengths " + why);
    a.lengths = *read;
    if (a.attention_at < 0) a.attention_at = static_cast<double>(a.token_cap);
  }
  if (a.ranks > pt::limits::ranks || a.microbatches > pt::limits::microbatches || a.chunks > 64)
    usage_error("--ranks is at most " + std::to_string(pt::limits::ranks) + ", --microbatches at most " +
                std::to_string(pt::limits::microbatches) + " (pipetype::limits) and --chunks at most 64");
  if (!a.rank_speed.empty() && a.file.empty() && static_cast<int>(a.rank_speed.size()) != a.ranks)
    usage_error("--rank-speed needs one speed per rank: " + std::to_string(a.ranks) + ", got " +
                std::to_string(a.rank_speed.size()));
  if (!a.microbatch_scale.empty() && a.file.empty() && static_cast<int>(a.microbatch_scale.size()) != a.microbatches)
    usage_error("--microbatch-scale needs one scale per microbatch: " + std::to_string(a.microbatches) + ", got " +
                std::to_string(a.microbatch_scale.size()));
  // a layout of S stages over p ranks: S / p chunks per rank, unless --chunks says otherwise; the
  // same cap as --chunks
  if (a.has_layout() && a.chunks == 0 && a.layout.size() % a.ranks == 0) a.chunks = a.layout.size() / a.ranks;
  if (a.chunks > 64)
    usage_error("--layout: its " + std::to_string(a.layout.size()) + " stages over " + std::to_string(a.ranks) +
                " ranks are " + std::to_string(a.chunks) + " chunks per rank, and --chunks is at most 64");
  return a;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + '"';
}

std::string num(double x) {
  if (!std::isfinite(x)) die("a figure came out as " + std::to_string(x) + "; the flags' bounds should prevent that (a bug)");
  std::ostringstream o;
  o.precision(10);
  o << x;
  return o.str();
}

template <class Range, class F>
std::string json_array(const Range& v, F f) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + f(v[i]);
  return out + "]";
}

/// A built-in schedule for the arguments (zb-auto searches with the given costs and limit, and
/// under --layout each stage weighs its layers); throws std::invalid_argument when there is none.
pt::schedule_params schedule_params_of(const args& a) {
  return {a.costs, a.mem_limit, a.rank_speed, a.microbatch_scale, a.placement, a.edges, pt::layout_weights(a.layout)};
}
pt::program make(std::string_view name, const args& a, int v) {
  return pt::make_schedule(name, a.ranks, a.microbatches, v, schedule_params_of(a));
}

/// Stages per rank of a model share (DualPipe holds the model twice, one lane each); `fallback`
/// when the lanes do not divide evenly.
int chunks_of(const pt::program& prog, int fallback) {
  const int model_stages = prog.view().lane_length();
  return prog.ranks > 0 && model_stages % prog.ranks == 0 ? model_stages / prog.ranks : fallback;
}

/// The --layout's stages as the program's: stage s of the program runs the layout's stage
/// s mod its length (DualPipe's second lane runs the model again).
pt::layer_layout program_layout(const args& a, int stages) {
  pt::layer_layout out;
  for (int s = 0; s < stages; ++s) out.stages.push_back(a.layout.stages[static_cast<std::size_t>(s % a.layout.size())]);
  return out;
}

/// Why `prog` cannot run the --layout (its model stages differ in number), or "".
std::string layout_mismatch(const args& a, const pt::program& prog) {
  if (!a.has_layout() || prog.view().lane_length() == a.layout.size()) return "";
  return "the layout has " + std::to_string(a.layout.size()) + " stages, the schedule's program " +
         std::to_string(prog.view().lane_length()) + " (one per rank and chunk over " + std::to_string(prog.ranks) +
         " ranks)";
}

/// Per rank, the peak in the report's unit: a rank share's activations, or decoder-layer
/// activations under --layout.
std::vector<double> peaks_of(const args& a, const pt::runtime_plan& plan, int chunks) {
  std::vector<double> out;
  if (a.has_layout()) return pt::layout_peak_activations(plan.compute(), program_layout(a, plan.compute().stages));
  for (int k = 0; k < plan.compute().ranks; ++k) out.push_back(plan.peak_activations(k) / chunks);
  return out;
}

/// The layout's stages as "E+3t", one entry per stage, for the report.
std::string layout_summary(const pt::layer_layout& l) {
  std::string out;
  for (int s = 0; s < l.size(); ++s) {
    const pt::stage_layers& x = l.stages[static_cast<std::size_t>(s)];
    std::string one;
    auto add = [&](int n, const char* what) {
      if (n == 0) return;
      one += (one.empty() ? "" : "+") + (n > 1 ? std::to_string(n) : std::string()) + what;
    };
    add(x.embedding, "E"), add(x.decoder, "t"), add(x.mtp, "m"), add(x.loss, "L");
    out += (s ? " | " : "") + (one.empty() ? std::string("-") : one);
  }
  return out;
}

/// Under --layout with --mem-limit the two count different things: the limit a rank's share of
/// microbatch activations (each stage's input, whatever its layers), the peaks beside it
/// decoder-layer activations. Said once in text ("" otherwise) ...
std::string limit_units_text(const args& a) {
  if (!a.has_layout() || a.mem_limit <= 0) return "";
  return "--mem-limit " + num(a.mem_limit) +
         " counts microbatch activations of a rank's share of the model (a stage's input, whatever its layers), not "
         "the decoder-layer activations of the peaks\n";
}
/// ... and in JSON as keys of their own (", \"mem_limit\": ..."; "" otherwise).
std::string limit_units_json(const args& a) {
  if (!a.has_layout() || a.mem_limit <= 0) return "";
  return ", \"mem_limit\": " + num(a.mem_limit) +
         ", \"mem_limit_unit\": \"microbatch activations per rank share\", \"peak_unit\": \"decoder-layer "
         "activations\"";
}

struct result {
  pt::runtime_plan plan;
  pt::timeline t;
  pt::makespan_bound bound;  // analysis/bounds.hpp
  int chunks = 1;
};

/// The costs of one stage when a rank's share of the model is cut into v chunks: the given
/// costs are those of a whole share, so schedules with different v compare fairly; each stage
/// then runs at its rank's speed and each microbatch at its scale (--rank-speed,
/// --microbatch-scale).
pt::cost_model per_stage(const args& a, pt::program_view p, int v) {
  if (a.has_layout())  // the costs are one decoder layer's; each stage costs its layers
    return pt::scaled_costs(pt::layout_costs(program_layout(a, p.stages), a.costs),
                            {p.stage_rank.begin(), p.stage_rank.end()}, a.rank_speed, a.microbatch_scale);
  pt::costs c = a.costs;
  auto scale = [v](double& x) {
    if (x >= 0) x /= v;
  };
  scale(c.f), scale(c.b), scale(c.i), scale(c.w), scale(c.fb);
  if (!a.rank_speed.empty() && static_cast<int>(a.rank_speed.size()) != p.ranks)
    die("--rank-speed gives " + std::to_string(a.rank_speed.size()) + " speeds for " + std::to_string(p.ranks) +
        " ranks");
  if (!a.microbatch_scale.empty() && static_cast<int>(a.microbatch_scale.size()) != p.microbatches)
    die("--microbatch-scale gives " + std::to_string(a.microbatch_scale.size()) + " scales for " +
        std::to_string(p.microbatches) + " microbatches");
  return pt::scaled_costs(c, {p.stage_rank.begin(), p.stage_rank.end()}, a.rank_speed, a.microbatch_scale);
}

result evaluate(pt::program prog, const args& a, int chunks);

/// The edges of p's model graph that are detached (local learning).
std::vector<pt::stage_edge> detached_of(pt::program_view p) {
  std::vector<pt::stage_edge> out;
  for (const pt::stage_edge& e : p.lane_edges())
    if (e.detached) out.push_back(e);
  return out;
}

/// A plan with detached edges beside 1F1B over the same stages and costs with every edge attached
/// (gradients travelling back): that step's makespan and largest peak, the ratio this plan's
/// makespan is of it. Empty when the plan is not one stage per rank (1F1B's form).
struct versus_attached {
  double makespan = 0, peak = 0, ratio = 0;
};
std::optional<versus_attached> local_versus(const result& r, const args& a) {
  const pt::program_view p = r.plan.compute();
  if (!p.has_detached() || p.lanes > 1 || p.stages != p.ranks) return std::nullopt;
  args attached = a;  // (the plan's own sizes: a --file's are not the flags')
  attached.ranks = p.ranks, attached.microbatches = p.microbatches;
  attached.edges.assign(p.edges.begin(), p.edges.end());
  for (pt::stage_edge& e : attached.edges) e.detached = false;
  pt::program prog;
  try {
    prog = make("1f1b", attached, 1);
  } catch (const std::invalid_argument&) {  // (a graph 1F1B cannot run: no comparison)
    return std::nullopt;
  }
  const result one = evaluate(std::move(prog), attached, 1);
  if (!one.plan.ok()) return std::nullopt;
  const std::vector<double> peaks = peaks_of(attached, one.plan, 1);
  const double most = peaks.empty() ? 0.0 : *std::max_element(peaks.begin(), peaks.end());
  return versus_attached{one.t.makespan(), most, r.t.makespan() / one.t.makespan()};
}

/// --lengths: the step's sequences, both packings and their steps as evaluate() models them (the
/// balanced one is the report's own step, `balanced`).
struct balance_figures {
  std::size_t sequences = 0;
  long long tokens = 0;
  int median = 0, longest = 0;
  int arrival_m = 0, balanced_m = 0;
  double arrival_makespan = 0, balanced_makespan = 0;
  double arrival_scale_lo = 0, arrival_scale_hi = 0, balanced_scale_lo = 0, balanced_scale_hi = 0;
  const char* order = "";
  bool from_arrival = false;
  double ratio() const { return balanced_makespan / arrival_makespan; }
};
std::optional<balance_figures> balance_figures_of(const std::optional<pt::balance_result>& packed,
                                                  const result& balanced, const args& a, int chunks) {
  if (!packed) return std::nullopt;
  balance_figures f;
  std::vector<int> sorted = a.lengths;
  std::sort(sorted.begin(), sorted.end());
  f.sequences = sorted.size();
  for (const int t : sorted) f.tokens += t;
  f.median = sorted[sorted.size() / 2], f.longest = sorted.back();
  args arrival = a;
  arrival.microbatches = packed->arrival.pack.size();
  arrival.microbatch_scale = packed->arrival.pack.scale;
  const result ar = evaluate(packed->arrival.prog, arrival, chunks);
  if (!ar.plan.ok()) die("the arrival order's plan was rejected: " + pt::explain(ar.plan.result));
  f.arrival_m = packed->arrival.pack.size(), f.balanced_m = packed->balanced.pack.size();
  f.arrival_makespan = ar.t.makespan(), f.balanced_makespan = balanced.t.makespan();
  const auto [alo, ahi] = std::minmax_element(packed->arrival.pack.scale.begin(), packed->arrival.pack.scale.end());
  const auto [blo, bhi] = std::minmax_element(packed->balanced.pack.scale.begin(), packed->balanced.pack.scale.end());
  f.arrival_scale_lo = *alo, f.arrival_scale_hi = *ahi, f.balanced_scale_lo = *blo, f.balanced_scale_hi = *bhi;
  f.order = packed->order, f.from_arrival = packed->from_arrival;
  return f;
}

/// --plan-set: the plans held for each rank slowed by --slow's factor, and the one the detector's
/// rule picks under the actual slowdown.
struct straggler_figures {
  pt::plan_set set;
  std::vector<int> slowed_rank;        // per plan: the rank it is for (-1: the nominal plan)
  std::vector<double> nominal, under;  // per plan: its makespan at nominal speeds and under --slow
  int chosen = 0;
  double ratio() const { return under[static_cast<std::size_t>(chosen)] / under[0]; }
};
straggler_figures stragglers_of(const args& a) {
  std::vector<pt::slowdown> scenarios;
  for (int r = 0; r < a.ranks; ++r) scenarios.push_back({r, a.slow[0].factor});
  args base = a;
  base.rank_speed.clear();
  straggler_figures f{
      pt::make_plan_set(a.schedule, a.ranks, a.microbatches, a.layout, a.costs, scenarios, schedule_params_of(base)),
      {},
      {},
      {},
      0};
  const std::vector<double> nominal(static_cast<std::size_t>(a.ranks), 1.0);
  for (int k = 0; k < static_cast<int>(f.set.plans.size()); ++k) {
    f.slowed_rank.push_back(k - 1);
    f.nominal.push_back(f.set.makespan(k, nominal));
    f.under.push_back(f.set.makespan(k, a.rank_speed));
  }
  f.chosen = f.set.choose(a.rank_speed, 0);
  return f;
}

result evaluate(pt::program prog, const args& a, int chunks) {
  result r;
  r.chunks = chunks;
  pt::plan_options o;
  // the limit counts activations of a rank's whole share of the model: v chunk activations each
  o.mem_limit_units = static_cast<int>(a.mem_limit * o.memory.unit * chunks);
  o.groups = a.groups;
  if (a.forward_only) prog = pt::forward_only_of(std::move(prog));
  r.plan = pt::build_plan(std::move(prog), o);
  if (r.plan.ok()) {
    const pt::cost_model c = per_stage(a, r.plan.compute(), chunks);
    if (const char* e = c.error()) die(e);  // (the flags' bounds keep within it; a library check all the same)
    r.t = pt::simulate(r.plan.compute(), c);
    r.bound = pt::makespan_lower_bound(r.plan.compute(), c);
  }
  return r;
}

/// The step of `r` over --dp replicas: its collectives placed, the mesh lowered and proved, and
/// its makespan with and without them (mesh/simulate.hpp).
struct dp_figures {
  std::string error;  // why the plan cannot run over the mesh ("" when it can)
  double makespan = 0, without = 0, exposed = 0;
  int collectives = 0, communicators = 0;
  pt::step_trace picture;  // the simulated mesh step, for --svg and --trace
  // sharded, per pipeline rank: its parameter slots (mesh_program::param_slots) and the MB of
  // parameters it holds: its shard of the rank share, and a slot the size of its largest chunk each
  std::vector<int> param_slots;
  std::vector<double> param_mb;
  double param_mb_most() const { return param_mb.empty() ? 0 : *std::max_element(param_mb.begin(), param_mb.end()); }
};
// A --file's own collectives (its UNSHARD, RESHARD, REDUCE_GRAD), used instead of placing them.
std::optional<pt::collective_program> file_collectives;
bool file_shards = false;  // the file gathers (UNSHARD): FSDP
// A --file's own memory actions (its OFFLOAD, RELOAD, RECOMPUTE), checked against its plan.
std::optional<pt::memory_program> file_memory;

/// Why `p` cannot run over --dp replicas ("" when it can).
std::string mesh_refusal(pt::program_view p) {
  return p.lanes > 1 ? "a plan of " + std::to_string(p.lanes) + " lanes (DualPipe) does not run over a mesh yet" : "";
}
/// Whether the step shards its parameters: --fsdp, or a file whose UNSHARDs say so (one answer
/// for the report, the JSON, the placement and the CSV).
bool sharded(const args& a) { return a.fsdp || (file_collectives && file_shards); }
pt::dp_options dp_options_of(const args& a) {
  return {.dp = a.dp,
          .shard = sharded(a),
          .window = a.window,
          .buckets = a.buckets,
          .optimizer = a.opt_gbps > 0,
          .zero = a.zero};
}
/// The MB of Adam's two moments a rank holds (each the size of its parameters), a replica's
/// shard of them with ZeRO-1 or FSDP.
double optimizer_mb(const args& a) { return 2 * a.param_mb / (a.zero > 0 || sharded(a) ? a.dp : 1); }
/// " with FSDP", " with ZeRO-1" or nothing: how the step shards (sharding_note: in brackets).
const char* sharding_text(const args& a) {
  if (sharded(a)) return " with FSDP";
  return a.zero > 0 ? " with ZeRO-1" : "";
}
const char* sharding_note(const args& a) {
  if (sharded(a)) return " (FSDP)";
  return a.zero > 0 ? " (ZeRO-1)" : "";
}
/// ", each reduction in N buckets" with --buckets N > 1, ", A ms a collective" with --dp-alpha-ms,
/// and ", the optimizer at G GB/s" with --opt-gbps.
std::string buckets_text(const args& a) {
  return (a.buckets > 1 ? ", each reduction in " + std::to_string(a.buckets) + " buckets" : std::string()) +
         (a.dp_alpha > 0 ? ", " + num(a.dp_alpha) + " ms a collective" : std::string()) +
         (a.opt_gbps > 0 ? ", the optimizer at " + num(a.opt_gbps) + " GB/s" : std::string());
}
/// The collectives' costs: a chunk holds 1/v of a rank share's parameters; bytes per time unit
/// (1 ms) from GB/s.
pt::mesh_costs dp_costs_of(const args& a, int chunks) {
  return {.param_bytes = {a.param_mb * 1e6 / chunks},
          .bandwidth = a.dp_gbps * 1e6,
          .alpha = a.dp_alpha,
          .optimizer_bandwidth = a.opt_gbps * 1e6};
}

dp_figures dp_of(const result& r, const args& a) {
  dp_figures out;
  const pt::program_view p = r.plan.compute();
  if (out.error = mesh_refusal(p); !out.error.empty()) return out;
  const pt::dp_options o = dp_options_of(a);
  const pt::mesh m{p.ranks, a.dp};
  // the step's size before any of it is made (a file's collectives count per replica too)
  const auto lowered_ops = static_cast<long long>(r.plan.lowered().ops.size());
  if (const pt::verdict v = pt::check_mesh_ops(
          m, lowered_ops + (file_collectives ? static_cast<long long>(file_collectives->ops.size()) : 0));
      !v.ok())
    return out.error = pt::describe(v), out;
  const pt::collective_program c = file_collectives ? *file_collectives : pt::place_collectives(p, o);
  if (const pt::verdict v = pt::check_collectives(p, c, o); !v.ok()) return out.error = pt::describe(v), out;
  if (const pt::verdict v = pt::check_mesh_ops(m, lowered_ops + static_cast<long long>(c.ops.size())); !v.ok())
    return out.error = pt::describe(v), out;
  const pt::mesh_program mp = pt::lower_mesh(p, r.plan.lowered(), m, c, o);
  if (const pt::verdict v = pt::verify_mesh(mp); !v.ok()) return out.error = pt::describe(v), out;
  const pt::mesh_costs d = dp_costs_of(a, r.chunks);
  const pt::cost_model costs = per_stage(a, p, r.chunks);
  const pt::mesh_timeline timeline = pt::simulate_mesh(mp, costs, d);
  out.makespan = timeline.makespan;
  out.picture = pt::trace_of(mp, timeline);
  out.exposed = pt::exposed_dp(p, r.plan.lowered(), m, c, o, costs, d);
  out.without = out.makespan - out.exposed;
  for (const pt::mesh_op& op : mp.ops) out.collectives += pt::is_collective(op.code);
  out.communicators = static_cast<int>(mp.comms.size());
  if (!mp.param_slots.empty())
    for (int rank = 0; rank < p.ranks; ++rank) {
      const int slots = mp.param_slots[static_cast<std::size_t>(m.global(rank, 0))];
      out.param_slots.push_back(slots);
      out.param_mb.push_back(a.param_mb / a.dp + slots * a.param_mb / r.chunks);
    }
  return out;
}
std::string dp_json(const dp_figures& f, const args& a) {
  std::string out = ", \"dp\": {\"replicas\": " + std::to_string(a.dp) + ", \"fsdp\": " + (sharded(a) ? "true" : "false") +
                    ", \"param_mb\": " + num(a.param_mb) + ", \"gbps\": " + num(a.dp_gbps);
  if (!f.error.empty()) return out + ", \"error\": " + json_string(f.error) + "}";
  out += ", \"makespan\": " + num(f.makespan) + ", \"makespan_without\": " + num(f.without) +
         ", \"exposed_dp\": " + num(f.exposed) + ", \"collectives\": " + std::to_string(f.collectives) +
         ", \"communicators\": " + std::to_string(f.communicators) + ", \"buckets\": " + std::to_string(a.buckets) +
         ", \"alpha_ms\": " + num(a.dp_alpha);
  if (!f.param_slots.empty()) {
    out += ", \"window\": " + std::to_string(a.window) + ", \"param_slots\": [";
    for (std::size_t k = 0; k < f.param_slots.size(); ++k) out += (k ? ", " : "") + std::to_string(f.param_slots[k]);
    out += "], \"param_mb_resident\": [";
    for (std::size_t k = 0; k < f.param_mb.size(); ++k) out += (k ? ", " : "") + num(f.param_mb[k]);
    out += "]";
  }
  return out + ", \"zero\": " + std::to_string(a.zero) + ", \"optimizer_mb\": " + num(optimizer_mb(a)) +
         ", \"opt_gbps\": " + num(a.opt_gbps) + "}";
}

const char* policy_name(pt::memory_policy x) {
  return x == pt::memory_policy::all ? "all" : x == pt::memory_policy::automatic ? "auto" : "none";
}
std::string host_link_text(const args& a) {
  std::string out = a.pcie_gbps > 0 ? ", host link " + num(a.pcie_gbps) + " GB/s, 1 time unit = 1 ms" : "";
  if (a.act_limit_mb > 0) out += ", limit " + num(a.act_limit_mb) + " MB per rank";
  return out;
}
/// The step of `r` with memory actions (--offload, --recompute): placed, lowered onto each rank's
/// copy stream, proved and simulated (mesh/memory_plan.hpp: plan_memory), in rank shares as the report.
struct memory_figures {
  std::string error;  // why no such step ("" when there is one)
  pt::memory_step step;
  int chunks = 1;
  pt::step_trace picture;
};
/// A stage's saved bytes per microbatch when a rank share is cut into `chunks` (a chunk holds 1/v
/// of a rank share's activation).
/// With --edges a stage saves an input per incoming edge (a fan-in several), as the plan's
/// peaks count them.
pt::memory_sizes memory_sizes_of(const args& a, int chunks, pt::program_view p = {}) {
  const double saved = a.act_mb * 1e6 / chunks, kept = (a.input_mb >= 0 ? a.input_mb : a.act_mb / 17) * 1e6 / chunks;
  if (!p.has_edges()) return {{static_cast<std::int64_t>(saved)}, {static_cast<std::int64_t>(kept)}};
  std::vector<int> in(static_cast<std::size_t>(p.stages), 0);
  for (const pt::stage_edge& e : p.edges) ++in[static_cast<std::size_t>(e.to)];
  pt::memory_sizes z;
  for (const int n : in) {
    z.saved.push_back(static_cast<std::int64_t>(saved) * std::max(1, n));
    z.kept.push_back(static_cast<std::int64_t>(kept) * std::max(1, n));
  }
  return z;
}
/// The memory actions the flags allow; bytes per time unit (1 ms) from GB/s.
pt::memory_options memory_options_of(const args& a) {
  pt::memory_options o;
  o.offload = a.offload;
  o.recompute = a.recompute;
  o.limit = static_cast<std::int64_t>(a.act_limit_mb * 1e6);
  o.copy_bandwidth = a.pcie_gbps * 1e6;
  o.density = a.offload_share;
  return o;
}
memory_figures memory_step_of(const result& r, const args& a) {
  memory_figures out;
  out.chunks = r.chunks;
  const pt::program_view p = r.plan.compute();
  const pt::memory_sizes z = memory_sizes_of(a, r.chunks, r.plan.compute());
  const pt::memory_options o = memory_options_of(a);
  const pt::cost_model costs = per_stage(a, p, r.chunks);
  pt::memory_mesh over;  // --dp: the step over the replicas, their collectives timed with it
  if (a.dp > 1) {
    if (out.error = mesh_refusal(p); !out.error.empty()) return out;
    over.dp = dp_options_of(a);
    over.collectives = file_collectives;
    over.costs = dp_costs_of(a, r.chunks);
  }
  out.step = pt::plan_memory(p, r.plan.lowered(), z, costs, o, 0.02, over);
  if (!out.step.result.ok()) return out.error = pt::describe(out.step.result), out;
  pt::mesh_costs d = over.costs;
  d.activations = z;
  d.copy_bandwidth = o.copy_bandwidth;
  out.picture = pt::trace_of(out.step.step, pt::simulate_mesh(out.step.step, costs, d));
  return out;
}
/// Per rank, `f` of its rank_memory.
template <class F>
std::string memory_array(const memory_figures& m, F f) {
  return json_array(m.step.memory, [&](const pt::rank_memory& x) { return f(x); });
}
std::string memory_json(const memory_figures& m, const args& a) {
  auto policy = [](pt::memory_policy x) { return std::string("\"") + policy_name(x) + "\""; };
  std::string out = ", \"memory\": {\"offload\": " + policy(a.offload) + ", \"recompute\": " + policy(a.recompute) +
                    ", \"act_mb\": " + num(a.act_mb) + ", \"pcie_gbps\": " + num(a.pcie_gbps) +
                    ", \"limit_mb\": " + num(a.act_limit_mb);
  if (!m.error.empty()) return out + ", \"error\": " + json_string(m.error) + "}";
  const double v = m.chunks;
  return out + ", \"k\": " + (a.pcie_gbps > 0 ? num(m.step.k) : "null") + ", \"share\": " + num(m.step.density) +
         ", \"makespan\": " + num(m.step.makespan) + ", \"makespan_without\": " + num(m.step.base_makespan) +
         ", \"cost\": " + num(m.step.cost()) + ", \"peak_activations\": " +
         memory_array(m, [&](const pt::rank_memory& x) { return num(x.peak_activations / v); }) +
         ", \"peak_activations_without\": " +
         memory_array(m, [&](const pt::rank_memory& x) { return num(x.base_peak_activations / v); }) +
         ", \"peak_bytes\": " + memory_array(m, [](const pt::rank_memory& x) { return std::to_string(x.peak_bytes); }) +
         ", \"peak_bytes_without\": " +
         memory_array(m, [](const pt::rank_memory& x) { return std::to_string(x.base_peak_bytes); }) +
         ", \"host_peak_bytes\": " +
         memory_array(m, [](const pt::rank_memory& x) { return std::to_string(x.host_peak_bytes); }) +
         ", \"offloaded\": " + memory_array(m, [](const pt::rank_memory& x) { return std::to_string(x.offloaded); }) +
         ", \"recomputed\": " + memory_array(m, [](const pt::rank_memory& x) { return std::to_string(x.recomputed); }) +
         "}";
}
double memory_peak_max(const memory_figures& m) {
  double most = 0;
  for (const pt::rank_memory& x : m.step.memory) most = std::max(most, x.peak_activations / m.chunks);
  return most;
}

/// zb-auto under --act-limit-mb with memory actions and no --mem-limit of its own: its searches at
/// activation limits from what the byte limit holds as it is up to none are the candidates, and
/// the one whose step with the actions models fastest under the byte limit is kept
/// (mesh/memory_search.hpp): holding more and offloading or recomputing wins where it saves
/// more bubble than it costs.
struct limit_search {
  std::vector<double> limits;     // per candidate, zb-auto's limit in rank-share activations (0: none)
  std::vector<double> makespans;  // its step under the byte limit with the actions; −1: it cannot fit
  int chosen = -1;                // the candidate kept; −1: none fits (the memory step says why)
};
bool searches_under_limit(const args& a) {
  return a.file.empty() && a.schedule == "zb-auto" && a.memory() && a.act_limit_mb > 0 && a.act_mb > 0 &&
         a.mem_limit <= 0 && a.dp <= 1 && !a.has_layout();
}
/// Searches as above, `prog` being zb-auto's unconstrained answer for `v` chunks; `prog` becomes
/// the candidate kept.
limit_search search_under_limit(const args& a, int v, pt::program& prog) {
  limit_search out;
  auto chunks_in = [v](pt::program_view p) {
    return p.ranks > 0 && p.lane_length() % p.ranks == 0 ? p.lane_length() / p.ranks : v;
  };
  double top = 0;  // the unconstrained search's peak: no candidate needs a higher limit
  if (const pt::runtime_plan free = pt::build_plan(prog); free.ok())
    for (int k = 0; k < prog.ranks; ++k) top = std::max(top, free.peak_activations(k) / chunks_in(prog.view()));
  std::vector<pt::program> candidates;
  constexpr std::size_t most = 8;  // searches with a limit, besides the unconstrained one
  for (double l = std::max(1.0, std::floor(2 * a.act_limit_mb / a.act_mb) / 2); l < top && out.limits.size() < most;
       l = std::floor(l) + 1) {
    args b = a;
    b.mem_limit = l;
    try {
      candidates.push_back(make("zb-auto", b, v));
      out.limits.push_back(l);
    } catch (const std::invalid_argument&) {  // no schedule within l: the next limit may have one
    }
  }
  candidates.push_back(prog);
  out.limits.push_back(0);
  const pt::memory_choice c = pt::fastest_under_limit(
      candidates, [&](pt::program_view p) { return memory_sizes_of(a, chunks_in(p), p); },
      [&](pt::program_view p) { return per_stage(a, p, chunks_in(p)); }, memory_options_of(a));
  out.makespans = c.makespans;
  out.chosen = c.chosen;
  if (c.chosen >= 0) prog = std::move(candidates[static_cast<std::size_t>(c.chosen)]);
  return out;
}
std::string limit_name(double l) { return l > 0 ? num(l) : "none"; }
std::string limit_search_json(const limit_search& x) {
  return ", \"limit_search\": {\"limits\": " + json_array(x.limits, num) +
         ", \"makespans\": " + json_array(x.makespans, num) +
         ", \"chosen_limit\": " + (x.chosen >= 0 ? num(x.limits[static_cast<std::size_t>(x.chosen)]) : "null") +
         ", \"unit\": \"microbatch activations per rank share; 0: none\"}";
}
std::string limit_search_text(const limit_search& x, const args& a) {
  std::string out = "zb-auto under " + num(a.act_limit_mb) + " MB per rank: searched at activation limits";
  for (std::size_t k = 0; k < x.limits.size(); ++k)
    out += (k ? ", " : " ") + limit_name(x.limits[k]) + " (" +
           (x.makespans[k] >= 0 ? "step " + num(x.makespans[k]) : std::string("does not fit")) + ")";
  if (x.chosen < 0) return out + "; none fits\n";
  return out + "; kept the search at " + limit_name(x.limits[static_cast<std::size_t>(x.chosen)]) +
         ", the fastest under the limit\n";
}

/// The simulated step of `r` as drawable events (activations per rank share, as the report).
pt::step_trace trace_of(const result& r, const args& a) {
  pt::trace_options o;
  o.activation_scale = 1.0 / r.chunks;
  return pt::trace_of(r.plan.compute(), r.t, per_stage(a, r.plan.compute(), r.chunks), o);
}

std::string titled(const std::string& name, int chunks) {
  return chunks > 1 ? name + " (v=" + std::to_string(chunks) + ")" : name;
}
std::string replicas_title(const args& a) { return a.dp > 1 ? " × " + std::to_string(a.dp) : ""; }

/// --svg and --trace: every panel (name, simulated step) into the files asked for.
void write_pictures(const args& a, const std::vector<std::pair<std::string, pt::step_trace>>& steps) {
  std::string why;
  if (!a.svg.empty()) {
    std::vector<pt::svg_panel> panels;
    std::size_t transfers = 0;
    for (const auto& [name, t] : steps) {
      panels.push_back({&t, name});
      transfers += t.transfers.size();
    }
    pt::svg_options o;
    o.transfers = transfers <= 256;
    if (!examples::write_file(a.svg, pt::svg(panels, o), why)) die(why);
  }
  if (!a.trace.empty()) {
    std::vector<pt::trace_part> parts;
    for (const auto& [name, t] : steps) parts.push_back({&t, name, 1000});
    if (!examples::write_file(a.trace, pt::chrome_trace(parts), why)) die(why);
  }
}

int print_all(const args& a) {
  std::vector<std::pair<std::string, result>> rows;
  std::vector<std::pair<std::string, std::string>> skipped;
  for (const pt::schedule_info& s : pt::schedule_infos) {
    const int v = s.chunks ? s.chunks : pt::default_chunks(s, a.chunks);
    if (const char* e = pt::schedule_error(s.name, a.ranks, a.microbatches, v)) {
      skipped.emplace_back(std::string(s.name), e);
      continue;
    }
    if (s.local && std::none_of(a.edges.begin(), a.edges.end(), [](const pt::stage_edge& e) { return e.detached; })) {
      skipped.emplace_back(std::string(s.name),
                           "local learning trains another objective (every stage a loss of its own): give --edges "
                           "with detached edges (A~B), or run --schedule " +
                               std::string(s.name) + " alone to see it beside 1f1b");
      continue;
    }
    if (const char* why = past_limits(a.ranks, a.microbatches, v, s.split, a.edges.size())) {
      skipped.emplace_back(std::string(s.name), std::string("too large: ") + why);
      continue;
    }
    try {
      pt::program prog = make(s.name, a, v);
      const int chunks = chunks_of(prog, v);  // zb-auto may answer with a V
      if (const std::string why = layout_mismatch(a, prog); !why.empty()) {
        skipped.emplace_back(std::string(s.name), why);
        continue;
      }
      rows.emplace_back(std::string(s.name), evaluate(std::move(prog), a, chunks));
    } catch (const std::invalid_argument& e) {
      skipped.emplace_back(std::string(s.name), e.what());
    }
  }
  // each row's step over --dp replicas, made once when first asked for (pictures, JSON, table)
  std::vector<std::optional<dp_figures>> dps(rows.size());
  auto dp_for = [&](std::size_t k) -> const dp_figures& {
    if (!dps[k]) dps[k] = dp_of(rows[k].second, a);
    return *dps[k];
  };
  // and with its memory actions (--offload, --recompute)
  std::vector<std::optional<memory_figures>> mems(rows.size());
  auto mem_for = [&](std::size_t k) -> const memory_figures& {
    if (!mems[k]) mems[k] = memory_step_of(rows[k].second, a);
    return *mems[k];
  };
  if (!a.svg.empty() || !a.trace.empty()) {
    std::vector<std::pair<std::string, pt::step_trace>> steps;
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const auto& [name, r] = rows[k];
      if (!r.plan.ok()) continue;
      if (a.memory() && mem_for(k).error.empty())  // with its copies and recomputes (and collectives)
        steps.emplace_back(titled(name, r.chunks) + replicas_title(a) + " with memory actions", mem_for(k).picture);
      else if (a.dp > 1 && dp_for(k).error.empty())  // the step over the replicas, with its collectives
        steps.emplace_back(titled(name, r.chunks) + replicas_title(a), dp_for(k).picture);
      else
        steps.emplace_back(titled(name, r.chunks), trace_of(r, a));
    }
    write_pictures(a, steps);
  }
  auto peak_max = [&a](const result& r) {
    const std::vector<double> peaks = peaks_of(a, r.plan, r.chunks);
    return peaks.empty() ? 0.0 : *std::max_element(peaks.begin(), peaks.end());
  };
  if (a.json()) {
    std::string out = "{\"ranks\": " + std::to_string(a.ranks) +
                      ", \"microbatches\": " + std::to_string(a.microbatches) + limit_units_json(a) +
                      ", \"schedules\": [";
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const result& r = rows[k].second;
      out += (k ? ", " : "") + std::string("{\"schedule\": ") + json_string(rows[k].first) +
             ", \"chunks\": " + std::to_string(r.chunks) + ", \"stages\": " + std::to_string(r.plan.compute().stages) +
             ", \"valid\": " + (r.plan.ok() ? "true" : "false");
      if (r.plan.ok())
        out += ", \"makespan\": " + num(r.t.makespan()) + ", \"lower_bound\": " + num(r.bound.value()) +
               ", \"gap\": " + num(r.bound.gap(r.t.makespan())) + ", \"max_rank_span\": " + num(r.t.max_rank_span()) +
               ", \"bubble_fraction\": " + num(r.t.bubble_fraction()) +
               ", \"peak_activations_max\": " + num(peak_max(r)) + (a.dp > 1 ? dp_json(dp_for(k), a) : "") +
               (a.memory() ? memory_json(mem_for(k), a) : "");
      else
        out += ", \"error\": " + json_string(pt::describe(r.plan.result)) +
               ", \"fix\": " + json_string(pt::how_to_fix(r.plan.result.code));
      out += "}";
    }
    out += "], \"skipped\": [";
    for (std::size_t k = 0; k < skipped.size(); ++k)
      out += (k ? ", " : "") + std::string("{\"schedule\": ") + json_string(skipped[k].first) +
             ", \"reason\": " + json_string(skipped[k].second) + "}";
    std::cout << out << "]}\n";
    return 0;
  }
  std::printf("ranks %d, microbatches %d, costs (per %s) F=%g B=%g I=%g W=%g comm=%g\n", a.ranks, a.microbatches,
              a.has_layout() ? "decoder layer" : "rank share", a.costs.f, a.costs.b, a.costs.of(pt::kind::I),
              a.costs.of(pt::kind::W), a.costs.comm);
  if (a.has_layout())
    std::printf("layout %s: %d stages: %s (peaks in decoder-layer activations)\n%s", a.layout_text.c_str(),
                a.layout.size(), layout_summary(a.layout).c_str(), limit_units_text(a).c_str());
  for (const auto& [what, xs] :
       {std::pair{"rank speeds", &a.rank_speed}, std::pair{"microbatch scales", &a.microbatch_scale}}) {
    if (xs->empty()) continue;
    std::printf("%s", what);
    for (std::size_t k = 0; k < xs->size(); ++k) std::printf("%s%g", k ? "," : " ", (*xs)[k]);
    std::printf("\n");
  }
  std::printf("%-18s %6s %6s %10s %8s %10s %8s %10s%s%s\n", "schedule", "chunks", "stages", "makespan", "gap",
              "rank span", "bubble", "peak act", a.dp > 1 ? (sharded(a) ? "  exposed DP  param MB" : "  exposed DP") : "",
              a.memory() ? "  resident    step" : "");
  bool graph = false;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const auto& [name, r] = rows[k];
    graph = graph || (r.plan.compute().has_edges() && !a.edges.empty());
    if (!r.plan.ok()) {
      std::printf("%-18s rejected: %s\n", name.c_str(), pt::explain(r.plan.result).c_str());
      continue;
    }
    std::printf("%-18s %6d %6d %10g %7.1f%% %10g %7.1f%% %10g", name.c_str(), r.chunks, r.plan.compute().stages,
                r.t.makespan(), 100 * r.bound.gap(r.t.makespan()), r.t.max_rank_span(), 100 * r.t.bubble_fraction(),
                peak_max(r));
    if (a.dp > 1) {
      const dp_figures& f = dp_for(k);
      if (f.error.empty()) {
        std::printf("  %10g", f.exposed);
        if (!f.param_mb.empty()) std::printf("  %8g", f.param_mb_most());
      } else
        std::printf("  (no mesh: %s)", f.error.c_str());
    }
    if (a.memory() && (a.dp <= 1 || dp_for(k).error.empty())) {  // a mesh refusal is said once, above
      const memory_figures& m = mem_for(k);
      if (m.error.empty())
        std::printf("  %8g %+6.1f%%", memory_peak_max(m), 100 * m.step.cost());
      else
        std::printf("  (no memory plan: %s)", m.error.c_str());
    }
    std::printf("\n");
  }
  for (const auto& [name, why] : skipped) std::printf("%-18s skipped: %s\n", name.c_str(), why.c_str());
  if (a.dp > 1)
    std::printf(
        "exposed DP: the step over %d replicas%s (%g MB of parameters per rank share at %g GB/s, 1 time unit = 1 ms%s) "
        "less the same plan without its collectives%s\n",
        a.dp, sharding_text(a), a.param_mb, a.dp_gbps, buckets_text(a).c_str(),
        sharded(a) ? ("; param MB: the largest rank's parameters held (its shard and window " +
                      std::to_string(a.window) + "'s slots, each its largest chunk)")
                         .c_str()
                   : "");
  if (a.memory())
    std::printf(
        "resident: the largest rank's peak activations with the memory actions (offload %s, recompute %s; %g MB "
        "saved per rank share and microbatch%s); step: the modelled step's change\n",
        policy_name(a.offload), policy_name(a.recompute), a.act_mb, host_link_text(a).c_str());
  if (graph) std::printf("(over the --edges graph: verified, lowered and proved deadlock-free over every edge)\n");
  return 0;
}

// --output FILE: standard output goes to FILE (write_file.hpp: through FILE.tmp.PID and a rename
// for a regular file, in place for a device or a FIFO); a partial file is removed on an error.
examples::stdout_to_file output;

void open_output(const std::string& path) {
  std::string why;
  if (!output.open(path, why)) usage_error("--output: " + why);
}

int finish_output() {
  std::string why;
  if (output.finish(why)) return 0;
  std::cerr << "pipetype-explore: --output: " << why << "\n";
  return 2;
}

/// The file's own facts for the report: notation read, transfers, markers.
struct file_facts {
  bool read = false;
  pt::notation form = pt::notation::current;
  int transfers = 0, waits = 0, markers = 0;
  bool collectives = false;                   // its UNSHARD, RESHARD and REDUCE_GRAD were checked (check_collectives)
  int memory_actions = 0;                     // its OFFLOAD, RELOAD and RECOMPUTE, checked (check_memory_actions)
  const char* torch_format = "compute_only";  // as torch would be asked to load it
  bool torch_loads = false;                   // torch 2.15's loader takes it as pipetype reads it
  bool transfer_verdict = false;              // the file's transfers were rejected (its computes verify)
  std::string torch_note;                     // why not (io/write_schedule.hpp: torch_load_note)
};

std::string torch_json(const file_facts& ff) {
  return ", \"torch\": {\"format\": \"" + std::string(ff.torch_format) +
         "\", \"loads\": " + (ff.torch_loads ? "true" : "false") +
         (ff.torch_note.empty() ? std::string() : ", \"note\": " + json_string(ff.torch_note)) + "}";
}

}  // namespace

int main(int argc, char** argv) {
  examples::tool_exits("pipetype-explore");
  args a = parse(argc, argv);  // (--lengths: the balanced packing's microbatches and scales, below)
  const bool csv = a.format == "csv" || a.format == "csv-comms";
  if (a.file.empty() && a.schedule == "all") {
    if (csv) usage_error("--format " + a.format + " writes one schedule, not --schedule all");
    if (!a.output.empty()) open_output(a.output);
    const int rc = print_all(a);
    return rc != 0 ? rc : finish_output();
  }

  pt::program prog;
  int chunks = 1;
  file_facts ff;
  std::optional<limit_search> search;  // zb-auto under --act-limit-mb with memory actions
  std::optional<pt::balance_result> packed;  // --lengths: both packings under the schedule
  std::optional<straggler_figures> stragglers;  // --plan-set
  if (!a.file.empty()) {
    std::string why;
    const std::optional<std::string> text = examples::read_text(a.file, why);
    if (!text) usage_error(why);
    const pt::schedule_file file = pt::read_schedule(*text, a.form);
    if (static_cast<long long>(file.steps.size()) > pt::limits::actions)
      usage_error(a.file + " has more than " + std::to_string(pt::limits::actions) +
                  " actions (pipetype::limits::actions)");
    if (file.error.ok() && a.ranks_given && a.ranks > file.rows)
      usage_error("--ranks " + std::to_string(a.ranks) + " but " + a.file + " has " + std::to_string(file.rows) +
                  " rank rows (a rank with no row holds no stage)");
    pt::read_options o;
    o.form = a.form;
    o.ranks = a.ranks_given ? a.ranks : 0;
    o.microbatches = a.microbatches_given ? a.microbatches : 0;
    o.name = "file";
    o.p2p = a.p2p;
    prog = pt::to_program(file, o);
    ff.read = true;
    ff.form = file.form;
    ff.transfers = file.transfers, ff.waits = file.waits, ff.markers = file.markers;
    if (pt::has_memory_actions(file)) {  // checked once the plan is (below)
      if (a.memory())
        usage_error(a.file + " places its own memory actions: drop --offload, --recompute and --act-limit-mb");
      file_memory = pt::memory_actions_of(file, prog.view());
    }
    if (pt::has_collectives(file)) {  // read as collectives, checked once the plan is (below)
      file_collectives = pt::collectives_of(file, prog.ranks);
      for (const pt::collective& x : file_collectives->ops)
        file_shards = file_shards || x.what == pt::collective_kind::unshard;
    }
    // what torch 2.15 would do: its loader's own rules, and a compute program it can validate
    const pt::csv_format fmt = file.has_transfers() ? pt::csv_format::compute_comms : pt::csv_format::compute_only;
    ff.torch_format = file.has_transfers() ? "compute_comms" : "compute_only";
    ff.torch_note = pt::torch_load_note(file, prog.view(), fmt);
    // torch also needs a compute program it can validate; the transfers' order does not stop it
    // loading the file. to_program checked the transfers only once the compute part verified, so a
    // transfer verdict there means the computes are fine (settled after build_plan below).
    ff.torch_loads = ff.torch_note.empty() && file.error.ok();
    ff.transfer_verdict = !prog.source_error.ok();
    if (prog.source_error.ok()) {
      chunks = chunks_of(prog, chunks);
    }
  } else {
    const pt::schedule_info* s = pt::find_schedule(a.schedule);
    chunks = s ? pt::default_chunks(*s, a.chunks) : 1;
    // (with --lengths the packing gives the microbatches: balance() says what the schedule refuses)
    const int m = a.lengths.empty() ? a.microbatches : static_cast<int>(a.lengths.size());
    if (const char* e = pt::schedule_error(a.schedule, a.ranks, a.lengths.empty() ? m : 1, chunks);
        e && (a.lengths.empty() || !s))
      usage_error("--schedule " + a.schedule + ": " + e);
    if (const char* why = past_limits(a.ranks, m, chunks, s->split, a.edges.size()))
      usage_error("--schedule " + a.schedule + ": too large: " + why);
    try {
      const int v = chunks;
      if (!a.lengths.empty()) {  // the balanced packing's step; the arrival order's beside it
        packed = pt::balance(a.lengths, static_cast<int>(a.token_cap), pt::length_cost{a.attention_at}, a.schedule,
                             a.ranks, v, schedule_params_of(a));
        a.microbatches = packed->balanced.pack.size();
        a.microbatch_scale = packed->balanced.pack.scale;
      }
      if (packed)
        prog = packed->balanced.prog;
      else if (!a.slow.empty()) {  // the nominal plan (zb-auto: searched at nominal speeds), run under the slowdown
        args nominal = a;
        nominal.rank_speed.clear();
        prog = make(a.schedule, nominal, v);
      } else
        prog = make(a.schedule, a, v);
      if (a.plan_set) stragglers = stragglers_of(a);
      chunks = chunks_of(prog, v);  // zb-auto may answer with a V
      if (searches_under_limit(a)) {
        search = search_under_limit(a, v, prog);
        chunks = chunks_of(prog, v);
      }
    } catch (const std::invalid_argument& e) {
      usage_error("--schedule " + a.schedule + ": " + e.what());
    }
  }
  if (const std::string why = layout_mismatch(a, prog); !why.empty()) usage_error("--layout: " + why);
  if (!a.output.empty()) open_output(a.output);
  const std::string name = a.file.empty() ? a.schedule : a.file;
  const result r = evaluate(std::move(prog), a, chunks);
  const std::optional<balance_figures> balanced = balance_figures_of(packed, r, a, chunks);
  ff.torch_loads = ff.torch_loads && (r.plan.ok() || ff.transfer_verdict);
  const pt::runtime_plan& plan = r.plan;

  // a rejection: its JSON (with --format json) and `shown` on standard error; exit code 2
  auto reject = [&](const pt::verdict& v, const std::string& shown) {
    if (a.json())
      std::cout << "{\"schedule\": " << json_string(name) << ", \"valid\": false, \"error\": "
                << json_string("schedule " + name + " rejected: " + pt::describe(v))
                << ", \"fix\": " << json_string(pt::how_to_fix(v.code)) << (ff.read ? torch_json(ff) : std::string())
                << "}\n";
    std::cerr << "pipetype-explore: schedule " << name << " rejected: " << shown << "\n";
    return 2;
  };
  if (!plan.ok()) return reject(plan.result, pt::explain(plan.result));
  // the step over --dp replicas, made once when first asked for (the pictures, the report)
  std::optional<dp_figures> dp;
  auto meshed = [&]() -> const dp_figures& {
    if (!dp) dp = dp_of(r, a);
    return *dp;
  };
  // the step with memory actions, likewise
  std::optional<memory_figures> mem;
  auto memory_plan = [&]() -> const memory_figures& {
    if (!mem) mem = memory_step_of(r, a);
    return *mem;
  };
  // a file's data-parallel markers: placed so that the step is right (PyTorch's window of 3),
  // checked before anything is written (the pictures, csv-comms)
  if (file_collectives) {
    const pt::dp_options o{.dp = a.dp > 1 ? a.dp : 2, .shard = file_shards};
    if (const pt::verdict v = pt::check_collectives(plan.compute(), *file_collectives, o); !v.ok())
      return reject(v, pt::describe(v));
    ff.collectives = true;
  }
  if (file_memory) {  // a RELOAD with no OFFLOAD, a stage the rank does not run, ...: one sentence, exit 2
    if (const pt::verdict v = pt::check_memory_actions(plan.compute(), *file_memory); !v.ok())
      return reject(v, pt::describe(v));
    ff.memory_actions = static_cast<int>(file_memory->ops.size());
  }
  if (!a.svg.empty() || !a.trace.empty()) {
    if (a.dp > 1 && !meshed().error.empty()) {
      std::cerr << "pipetype-explore: --dp " << a.dp << ": " << dp->error << "\n";
      return 2;
    }
    if (a.memory()) {  // the step with its copies and recomputes (over --dp replicas: and collectives)
      const memory_figures& m = memory_plan();
      if (!m.error.empty()) return reject(m.step.result, m.error);
      write_pictures(a, {{titled(name, chunks) + replicas_title(a) + " with memory actions", m.picture}});
    } else if (a.dp > 1) {  // the step over the replicas, with its collectives
      write_pictures(a, {{titled(name, chunks) + replicas_title(a), dp->picture}});
    } else if (stragglers) {  // the fixed plan under the slowdown, then the plan switched to
      args chosen = a;
      chosen.layout = stragglers->set.plans[static_cast<std::size_t>(stragglers->chosen)].layout;
      const result c = evaluate(stragglers->set.plans[static_cast<std::size_t>(stragglers->chosen)].prog, chosen, 1);
      const std::string slow = ", rank " + std::to_string(a.slow[0].rank) + " at " + num(a.slow[0].factor) + "×";
      write_pictures(a, {{titled(name, chunks) + slow + ": the fixed plan", trace_of(r, a)},
                         {titled(name, chunks) + slow + ": switched to plan " + std::to_string(stragglers->chosen),
                          trace_of(c, chosen)}});
    } else {
      write_pictures(a, {{titled(name, chunks), trace_of(r, a)}});
    }
  }
  if (csv) {  // PyTorch's CSV: the compute program, or the lowered program's transfers as PyTorch issues them
    try {
      if (a.format == "csv-comms" && a.dp > 1) {  // a mesh step's rows: its collectives where they were placed
        const pt::dp_options o = dp_options_of(a);
        const pt::collective_program c =
            file_collectives ? *file_collectives : pt::place_collectives(plan.compute(), o);
        std::cout << pt::to_csv(plan.compute(), plan.lowered(), c);
      } else {
        std::cout << (a.format == "csv" ? pt::to_csv(plan.compute()) : pt::to_csv(plan.compute(), plan.lowered()));
      }
    } catch (const std::invalid_argument& e) {
      std::cerr << "pipetype-explore: --format " << a.format << ": " << e.what() << "\n";
      return 2;
    }
    return finish_output();
  }

  const pt::timeline& t = r.t;
  const int P = plan.compute().ranks;
  if (a.dp > 1) meshed();
  // a memory step the plan refuses
  if (a.memory() && !memory_plan().error.empty() && !mem->step.result.ok()) return reject(mem->step.result, mem->error);
  // a step the mesh refuses: exit 2 in every format (JSON first says why in its "dp" or "memory")
  const std::string refused = dp && !dp->error.empty()     ? "--dp " + std::to_string(a.dp) + ": " + dp->error
                              : mem && !mem->error.empty() ? "memory actions: " + mem->error
                                                           : "";
  if (!refused.empty() && !a.json()) die(refused);
  const std::vector<double> peaks = peaks_of(a, plan, chunks);
  const std::optional<versus_attached> local = local_versus(r, a);
  std::vector<double> busy;
  for (int k = 0; k < P; ++k) busy.push_back(t.busy(k));
  if (a.json()) {
    auto res = plan.lowered().resources;
    std::cout << "{\"schedule\": " << json_string(name) << ", \"ranks\": " << P
              << ", \"microbatches\": " << plan.compute().microbatches << ", \"stages\": " << plan.compute().stages
              << ", \"chunks\": " << chunks << ", \"valid\": true";
    if (a.has_layout())
      std::cout << ", \"layout\": {\"string\": " << json_string(a.layout_text) << ", \"layers\": "
                << json_array(a.layout.stages, [](const pt::stage_layers& x) { return std::to_string(x.layers()); })
                << ", \"weights\": "
                << json_array(a.layout.stages, [](const pt::stage_layers& x) { return num(pt::layer_weights{}.of(x)); })
                << ", \"peak_layer_activations\": " << json_array(peaks, num) << limit_units_json(a) << "}";
    if (ff.read)
      std::cout << ", \"notation\": \"" << pt::notation_name(ff.form)
                << "\", \"file\": {\"transfers\": " << ff.transfers << ", \"waits\": " << ff.waits
                << ", \"markers\": " << ff.markers
                << ", \"collectives_checked\": " << (ff.collectives ? "true" : "false")
                << ", \"memory_actions_checked\": " << ff.memory_actions
                << ", \"transfers_complete\": " << (ff.transfers > 0 ? "true" : "null") << ", \"p2p\": \""
                << pt::p2p_streams_name(a.p2p) << "\"}" << torch_json(ff);
    if (plan.compute().has_edges()) {  // the model's graph, as the text's `stage graph:` line
      std::cout << ", \"edges\": " << json_array(plan.compute().lane_edges(), [](const pt::stage_edge& e) {
        return "[" + std::to_string(e.from) + ", " + std::to_string(e.to) + "]";
      });
      if (plan.compute().has_detached())  // those that carry no gradient back (local learning)
        std::cout << ", \"detached_edges\": " << json_array(detached_of(plan.compute()), [](const pt::stage_edge& e) {
          return "[" + std::to_string(e.from) + ", " + std::to_string(e.to) + "]";
        });
      if (plan.compute().lanes > 1) std::cout << ", \"lanes\": " << plan.compute().lanes;  // a copy in each
    }
    std::cout << ", \"makespan\": " << num(t.makespan()) << ", \"lower_bound\": " << num(r.bound.value())
              << ", \"gap\": " << num(r.bound.gap(t.makespan())) << ", \"max_rank_span\": " << num(t.max_rank_span())
              << ", \"bubble_fraction\": " << num(t.bubble_fraction())
              << ", \"peak_activations\": " << json_array(peaks, num) << ", \"busy\": " << json_array(busy, num);
    if (local)
      std::cout << ", \"local\": {\"one_f_one_b_makespan\": " << num(local->makespan)
                << ", \"one_f_one_b_peak_activations_max\": " << num(local->peak)
                << ", \"makespan_ratio\": " << num(local->ratio) << "}";
    if (stragglers) {
      const straggler_figures& g = *stragglers;
      std::cout << ", \"stragglers\": {\"slow_rank\": " << a.slow[0].rank << ", \"factor\": " << num(a.slow[0].factor)
                << ", \"fixed_makespan\": " << num(g.under[0])
                << ", \"switched_makespan\": " << num(g.under[static_cast<std::size_t>(g.chosen)])
                << ", \"ratio\": " << num(g.ratio()) << ", \"chosen\": " << g.chosen << ", \"plans\": [";
      for (std::size_t k = 0; k < g.set.plans.size(); ++k)
        std::cout << (k ? ", " : "") << "{\"slowed_rank\": " << g.slowed_rank[k] << ", \"layers\": "
                  << json_array(g.set.plans[k].layout.stages,
                                [](const pt::stage_layers& x) { return std::to_string(x.decoder); })
                  << ", \"nominal_makespan\": " << num(g.nominal[k])
                  << ", \"makespan_under_slowdown\": " << num(g.under[k]) << "}";
      std::cout << "]}";
    }
    if (balanced)
      std::cout << ", \"balance\": {\"sequences\": " << balanced->sequences << ", \"tokens\": " << balanced->tokens
                << ", \"median_length\": " << balanced->median << ", \"longest\": " << balanced->longest
                << ", \"token_cap\": " << a.token_cap << ", \"attention_at\": " << num(a.attention_at)
                << ", \"arrival_microbatches\": " << balanced->arrival_m
                << ", \"balanced_microbatches\": " << balanced->balanced_m << ", \"balanced_packing\": \""
                << (balanced->from_arrival ? "arrival" : "rule") << "\", \"balanced_order\": \"" << balanced->order
                << "\", \"arrival_makespan\": " << num(balanced->arrival_makespan)
                << ", \"balanced_makespan\": " << num(balanced->balanced_makespan)
                << ", \"ratio\": " << num(balanced->ratio()) << "}";
    std::cout << ", \"ticks\": " << plan.ticks() << ", \"actions\": " << plan.compute().actions.size()
              << ", \"lowered\": {\"ops\": " << plan.lowered().ops.size() << ", \"sends\": "
              << std::count_if(plan.lowered().ops.begin(), plan.lowered().ops.end(),
                               [](const pt::lowered_op& o) { return o.code == pt::op_code::send; })
              << ", \"communicators\": " << plan.lowered().comms.size() << ", \"activation_slots\": "
              << json_array(res, [](const pt::rank_resources& x) { return std::to_string(x.activation_slots); })
              << ", \"gradient_slots\": "
              << json_array(res, [](const pt::rank_resources& x) { return std::to_string(x.gradient_slots); })
              << ", \"events\": "
              << json_array(res, [](const pt::rank_resources& x) { return std::to_string(x.events); })
              << ", \"groups\": "
              << json_array(res, [](const pt::rank_resources& x) { return std::to_string(x.groups); }) << "}"
              << (dp ? dp_json(*dp, a) : std::string()) << (mem ? memory_json(*mem, a) : std::string())
              << (search ? limit_search_json(*search) : std::string()) << "}\n";
    if (!refused.empty()) die(refused);
    return finish_output();
  }
  std::printf("schedule %s: %d ranks, %d stages, %d microbatches (costs per %s F=%g B=%g I=%g W=%g comm=%g)\n\n",
              name.c_str(), P, plan.compute().stages, plan.compute().microbatches,
              a.has_layout() ? "decoder layer" : "rank share", a.costs.f, a.costs.b, a.costs.of(pt::kind::I),
              a.costs.of(pt::kind::W), a.costs.comm);
  if (a.has_layout())
    std::printf("layout %s: %s (costs above are one decoder layer's; peak act counts decoder-layer activations)\n%s\n",
                a.layout_text.c_str(), layout_summary(a.layout).c_str(), limit_units_text(a).c_str());
  if (ff.read) {
    std::printf("file: %s notation", pt::notation_name(ff.form));
    if (ff.form == pt::notation::legacy) std::printf(" (B = backward for inputs, BW = full backward)");
    if (ff.transfers > 0)
      std::printf(
          "; its %d transfers and %d send waits, as written, complete under NCCL's rules (blocking rendezvous, "
          "FIFO per peer; %s streams)",
          ff.transfers, ff.waits, pt::p2p_streams_name(a.p2p));
    if (ff.collectives)
      std::printf(
          "; its %d data-parallel markers (UNSHARD, RESHARD, REDUCE_GRAD) are placed as a step needs them "
          "(check_collectives%s)",
          ff.markers, a.dp > 1 ? "; --dp runs them" : "");
    else if (ff.markers > 0)
      std::printf("; %d markers kept", ff.markers);
    if (ff.memory_actions > 0)
      std::printf("; its %d memory actions (OFFLOAD, RELOAD, RECOMPUTE) read only what is there (check_memory_actions)",
                  ff.memory_actions);
    if (ff.torch_loads)
      std::printf("\ntorch 2.15 loads it as written (format=\"%s\")", ff.torch_format);
    else
      std::printf("\ntorch 2.15 would not load it as pipetype reads it (format=\"%s\"): %s", ff.torch_format,
                  ff.torch_note.c_str());
    std::printf("\n\n");
  }
  std::cout << pt::grid(plan.compute(), t) << "\n";
  std::printf("makespan %g   max rank span %g   bubble %.1f%%   lock-step ticks %d\n", t.makespan(), t.max_rank_span(),
              100 * t.bubble_fraction(), plan.ticks());
  std::printf("lower bound %g (busiest rank %g, critical path %g): gap %.1f%%\n\n", r.bound.value(),
              r.bound.busiest_rank, r.bound.critical_path, 100 * r.bound.gap(t.makespan()));
  if (local)
    std::printf(
        "local learning: no gradient crosses a detached edge. 1f1b over the same stages and costs with every edge "
        "attached: makespan %g, peak act %g; this plan's makespan is %.3f of it\n\n",
        local->makespan, local->peak, local->ratio);
  if (!a.slow.empty())
    std::printf("rank %d runs %g× as long: the step above is the nominal plan under it (a fixed plan)\n%s",
                a.slow[0].rank, a.slow[0].factor, stragglers ? "" : "\n");
  if (stragglers) {
    const straggler_figures& g = *stragglers;
    std::printf("plan set: the nominal plan, then one per rank slowed %g× (decoder layers moved off it):\n",
                a.slow[0].factor);
    for (std::size_t k = 0; k < g.set.plans.size(); ++k) {
      std::string layers;
      for (const pt::stage_layers& x : g.set.plans[k].layout.stages) layers += " " + std::to_string(x.decoder);
      std::printf("  plan %zu %-16s layers%s: makespan %g nominal, %g under the slowdown%s\n", k,
                  g.slowed_rank[k] < 0 ? "(nominal)" : ("(rank " + std::to_string(g.slowed_rank[k]) + " slow)").c_str(),
                  layers.c_str(), g.nominal[k], g.under[k], static_cast<int>(k) == g.chosen ? "  <- chosen" : "");
    }
    std::printf("switched to plan %d between two steps: makespan %g against the fixed plan's %g (%.3f)\n\n", g.chosen,
                g.under[static_cast<std::size_t>(g.chosen)], g.under[0], g.ratio());
  }
  if (balanced) {
    const balance_figures& b = *balanced;
    std::printf(
        "lengths %s: %zu sequences, %lld tokens, median %d, longest %d (%.1f× the median); token cap %lld, a "
        "sequence of t tokens costs t + t²/%g\n",
        a.lengths_file.c_str(), b.sequences, b.tokens, b.median, b.longest, static_cast<double>(b.longest) / b.median,
        a.token_cap, a.attention_at);
    std::printf("arrival order: %d microbatches (each %.3g to %.3g of a full one), makespan %g\n", b.arrival_m,
                b.arrival_scale_lo, b.arrival_scale_hi, b.arrival_makespan);
    std::printf(
        "balanced:      %d microbatches (each %.3g to %.3g of a full one; %s, %s), makespan %g: %.3f of the "
        "arrival order's (the step above)\n\n",
        b.balanced_m, b.balanced_scale_lo, b.balanced_scale_hi,
        b.from_arrival ? "the arrival packing" : "packed by the longest-first rule", b.order, b.balanced_makespan,
        b.ratio());
  }
  if (plan.compute().has_edges()) {
    const pt::program_view pc = plan.compute();
    std::printf("stage graph:");
    for (const pt::stage_edge& e : pc.lane_edges()) std::printf(" %d%c%d", e.from, pt::edge_mark(e), e.to);
    if (pc.lanes > 1)
      std::printf("   (a copy in each of %d lanes: lane k's stages are these plus %d k)", pc.lanes, pc.lane_length());
    std::printf("\n\n");
  }
  std::printf("rank   busy    idle  peak act  act slots  grad slots  events  groups\n");
  for (int k = 0; k < P; ++k) {
    const pt::rank_resources& res = plan.lowered().resources[static_cast<std::size_t>(k)];
    std::printf("%4d %6g %7g %9g %10d %11d %7d %7d\n", k, t.busy(k), t.idle(k), peaks[static_cast<std::size_t>(k)],
                res.activation_slots, res.gradient_slots, res.events, res.groups);
  }
  const std::size_t nc = plan.lowered().comms.size();
  std::printf(
      "\nlowered: %zu ops on %zu communicator%s (one per stage edge that crosses ranks); proved deadlock-free\n",
      plan.lowered().ops.size(), nc, nc == 1 ? "" : "s");
  if (dp)
    std::printf(
        "\ndata parallel: %d replicas%s, %g MB of parameters per rank share at %g GB/s (1 time unit = 1 ms)%s: %d "
        "collectives on %d communicators, proved deadlock-free with the transfers; step %g, %g without its "
        "collectives: exposed_dp %g\n",
        a.dp, sharding_note(a), a.param_mb, a.dp_gbps, buckets_text(a).c_str(), dp->collectives, dp->communicators,
        dp->makespan, dp->without, dp->exposed);
  if (dp && !dp->param_slots.empty()) {
    std::printf("parameters per rank under FSDP (window %d): slots", a.window);
    for (std::size_t k = 0; k < dp->param_slots.size(); ++k) std::printf("%s%d", k ? ", " : " ", dp->param_slots[k]);
    std::printf("; MB held (shard + slots)");
    for (std::size_t k = 0; k < dp->param_mb.size(); ++k) std::printf("%s%g", k ? ", " : " ", dp->param_mb[k]);
    std::printf(" of %g unsharded\n", a.param_mb);
  }
  if (dp)
    std::printf("optimizer state: Adam's two moments, %g MB a rank (each the size of its parameters%s)\n",
                optimizer_mb(a), a.zero > 0 || sharded(a) ? "; a replica's shard of them" : "");
  if (mem) {
    const pt::memory_step& m = mem->step;
    std::printf("\nmemory actions: offload %s, recompute %s; %g MB saved per rank share and microbatch%s%s\n",
                policy_name(a.offload), policy_name(a.recompute), a.act_mb, host_link_text(a).c_str(),
                a.pcie_gbps > 0 ? ("; k = " + num(m.k) + " (a round trip over F + B)").c_str() : "");
    std::printf("rank  resident act  (without)   peak MB  (without)   host MB  offloaded  recomputed\n");
    for (int k = 0; k < P; ++k) {
      const pt::rank_memory& x = m.memory[static_cast<std::size_t>(k)];
      std::printf("%4d %13g %10g %9.1f %10.1f %9.1f %10d %11d\n", k, x.peak_activations / chunks,
                  x.base_peak_activations / chunks, static_cast<double>(x.peak_bytes) / 1e6,
                  static_cast<double>(x.base_peak_bytes) / 1e6, static_cast<double>(x.host_peak_bytes) / 1e6,
                  x.offloaded, x.recomputed);
    }
    std::printf(
        "step %g, %g without the actions (%+.1f%%)%s; lowered onto a copy stream per rank%s and proved: copies and "
        "recomputes ordered before what reads them, deadlock-free\n",
        m.makespan, m.base_makespan, 100 * m.cost(),
        a.offload == pt::memory_policy::automatic && m.density < 1
            ? (", offloading " + num(m.density) + " of the activations the gap rule allows").c_str()
            : "",
        a.dp > 1 ? (" of each of " + std::to_string(a.dp) + " replicas, with their collectives").c_str() : "");
  }
  if (search) std::printf("%s", limit_search_text(*search, a).c_str());
  return finish_output();
}
