// libFuzzer harness over the path every schedule file takes: read → verify → lower → verify the
// lowered program → simulate → write back (pipetype's text, PyTorch's compute-only and
// compute+comms CSV) → read again. Built by the `clang` preset (clang++ with ASan and UBSan), so
// a crash, undefined behaviour or a leak fails it as well as the properties below:
//   - a rejected file has a sentence, and a deadlock's wait-for cycle is a chain of real links;
//   - a file with an `edges` line that verifies simulates to completion and its text form reads
//     back the same graph and actions; lowered, it takes every check below but PyTorch's forms;
//   - a verified plan simulates to completion, with a finite positive makespan, a bubble in
//     [0, 1), spanning its actions, and per-rank peaks equal to the verifier's; its lowering is
//     proved by the tick certificate; drawn as an SVG and a Chrome trace, it has a box and an
//     event per span and an arrow and a flow per transfer;
//   - each written form reads back to the same compute program, and the compute+comms form's own
//     transfers verify (docs/03 and docs/07 say what each form keeps) — except a program with an
//     empty rank before a busy one, which no written form keeps for pipetype's reader (below).
// Inputs past pipetype::limits::file_bytes are skipped, as the tools refuse them before reading.
//
//   ./build/clang/tests/fuzz/fuzz_schedule -dict=tests/fuzz/schedule.dict NEW_DIR tests/fuzz/corpus
#include <pipetype/pipetype.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pt = pipetype;

namespace {

[[noreturn]] void broken(const char* property, const std::string& detail) {
  std::fprintf(stderr, "fuzz_schedule: property broken: %s\n  %s\n", property, detail.c_str());
  std::abort();
}

void expect(bool ok, const char* property, const pt::runtime_plan& plan) {
  if (!ok) broken(property, "plan: " + pt::describe(plan.result) + "\n" + pt::to_text(plan.compute()));
}

bool same_compute(pt::program_view a, pt::program_view b) {
  if (a.ranks != b.ranks || a.actions.size() != b.actions.size()) return false;
  for (int r = 0; r < a.ranks; ++r) {
    const auto x = a.rank_actions(r), y = b.rank_actions(r);
    if (x.size() != y.size()) return false;
    for (std::size_t k = 0; k < x.size(); ++k)
      if (!(x[k] == y[k])) return false;
  }
  return true;
}

void check_rejected(const pt::runtime_plan& plan) {
  const pt::verdict& v = plan.result;
  expect(!pt::describe(v).empty() && !pt::explain(v).empty(), "a rejection has a sentence", plan);
  if (v.code != pt::errc::cross_rank_deadlock) return;
  expect(v.cycle_length >= 2, "a deadlock has at least two links", plan);
  const int kept = v.cycle_length < pt::max_cycle ? v.cycle_length : pt::max_cycle;
  expect(v.cycle[0].rank == v.rank, "the cycle starts at the reported rank", plan);
  for (int i = 0; i < kept; ++i) {
    expect(v.cycle[i].from != v.cycle[i].rank && v.cycle[i].rank >= v.rank,
           "a link leads to another rank, the first is the lowest", plan);
    if (i + 1 < kept) expect(v.cycle[i].from == v.cycle[i + 1].rank, "each link leads to the next", plan);
  }
  if (kept == v.cycle_length) expect(v.cycle[kept - 1].from == v.rank, "the last link closes the cycle", plan);
}

void check_accepted(const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  const pt::timeline t = pt::simulate(plan);
  expect(t.complete, "a verified plan simulates to completion", plan);
  const double span = t.makespan();
  expect(std::isfinite(span) && span > 0, "the makespan is finite and positive", plan);
  const double bubble = t.bubble_fraction();
  expect(bubble >= 0 && bubble < 1, "the bubble is in [0, 1)", plan);
  double first = t.start[0], last = t.end[0];
  for (std::size_t k = 0; k < p.actions.size(); ++k) {
    expect(t.start[k] >= 0 && t.end[k] > t.start[k], "every action takes time", plan);
    first = t.start[k] < first ? t.start[k] : first;
    last = t.end[k] > last ? t.end[k] : last;
  }
  expect(std::abs((last - first) - span) <= 1e-9 * span, "the makespan spans the actions", plan);
  for (int r = 0; r < p.ranks; ++r)
    expect(t.peak_activations(r) == plan.peak_activations(r), "simulated and verified peaks agree", plan);
  for (std::size_t k = 0; k < p.actions.size(); ++k)
    expect(plan.facts.tick[k] >= 0 && plan.facts.tick[k] < plan.ticks(), "every action has a tick", plan);
  bool by_certificate = false;
  expect(pt::verify_lowered(plan.lowered(), &by_certificate).ok() && by_certificate,
         "the lowering carries a valid tick certificate", plan);

  // drawn: the SVG and the Chrome trace hold one box / one event per span and one arrow / flow
  // per transfer, and the trace's figures are the simulator's
  const pt::step_trace tr = pt::trace_of(p, t);
  std::size_t pairs = 0;
  for (const pt::action& a : p.actions) pairs += a.overlapped ? 1 : 0;
  expect(tr.computes.size() == p.actions.size() - pairs, "a span per action, a pair as one", plan);
  expect(std::abs(tr.makespan() - span) <= 1e-9 * span, "the drawn makespan is the simulated one", plan);
  auto count = [](const std::string& s, std::string_view what) {
    std::size_t n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  pt::svg_options so;
  so.transfers = true;
  const std::string svg = pt::svg(tr, so);
  expect(svg.size() > 6 && svg.compare(svg.size() - 7, 7, "</svg>\n") == 0, "the SVG is closed", plan);
  expect(count(svg, "class=\"span\"") == tr.computes.size(), "a box per span", plan);
  expect(count(svg, "class=\"transfer\" marker-end") == tr.transfers.size() + 1,
         "an arrow per transfer (and the legend's)", plan);
  std::size_t sends = 0;
  for (const pt::lowered_op& o : plan.lowered().ops) sends += o.code == pt::op_code::send ? 1 : 0;
  expect(tr.transfers.size() == sends, "a transfer per lowered send", plan);
  const std::string json = pt::chrome_trace(tr);
  expect(count(json, "\"ph\": \"X\"") == tr.computes.size(), "an event per span", plan);
  expect(count(json, "\"ph\": \"s\"") == tr.transfers.size() && count(json, "\"ph\": \"f\"") == tr.transfers.size(),
         "a flow per transfer", plan);

  // A rank with no actions is written as a blank line (a rank to torch's csv reader), which
  // pipetype's reader skips (docs/07): trailing ones come back with read_options::ranks, one
  // before a rank with actions does not survive a write.
  bool gap = false;
  for (int r = 0, seen_empty = 0; r < p.ranks; ++r) {
    if (p.rank_actions(r).empty())
      seen_empty = 1;
    else
      gap = gap || seen_empty;
  }
  if (gap) return;
  // pipetype's text form reads back to the same program
  pt::read_options sized;
  sized.ranks = p.ranks;
  const pt::program text = pt::parse_schedule(pt::to_text(p), sized);
  expect(text.source_error.ok() && same_compute(p, text.view()), "the text form reads back the same", plan);
  if (p.lanes > 1 || p.has_edges()) return;  // PyTorch's files hold neither lanes nor edges (to_csv refuses them)
  const pt::program csv = pt::parse_schedule(pt::to_csv(p), sized);
  expect(csv.source_error.ok() && same_compute(p, csv.view()), "the compute-only CSV reads back the same", plan);
  const pt::program comms = pt::parse_schedule(pt::to_csv(p, plan.lowered()), sized);
  expect(comms.source_error.ok(), "the compute+comms CSV's transfers verify", plan);
  expect(same_compute(p, comms.view()), "the compute+comms CSV reads back the same compute", plan);
}

/// A program over a stage graph given as edges that verified: it simulates to completion and its
/// text form reads back the same graph and actions.
void check_graph(const pt::runtime_plan& plan) {
  const pt::program_view p = plan.compute();
  expect(pt::simulate(p, pt::costs{.comm = 0.5}).complete, "a verified graph program simulates to completion", plan);
  pt::read_options sized;
  sized.ranks = p.ranks;
  const pt::program text = pt::parse_schedule(pt::to_text(p), sized);
  expect(text.source_error.ok() && same_compute(p, text.view()) &&
             std::equal(text.edges.begin(), text.edges.end(), p.edges.begin(), p.edges.end()),
         "a graph program's text form reads back the same", plan);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > static_cast<std::size_t>(pt::limits::file_bytes)) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const pt::runtime_plan plan = pt::build_plan(pt::parse_schedule(text));
  if (plan.ok())
    check_accepted(plan);
  else
    check_rejected(plan);
  if (plan.facts.result.ok() && plan.compute().has_edges()) check_graph(plan);
  return 0;
}
