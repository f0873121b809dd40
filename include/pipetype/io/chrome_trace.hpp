// pipetype/io/chrome_trace.hpp — a step as Trace Event Format JSON, for Perfetto
// (ui.perfetto.dev) and chrome://tracing.
//
//   std::string j = pipetype::chrome_trace(trace_of(executor.trace()));
//   std::string both = pipetype::chrome_trace({{measured, "measured"}, {simulated, "simulated"}});
//
// Each part (a step_trace, io/step_trace.hpp) becomes one process per rank, named "<part> rank
// r" and sorted in part and rank order, with two threads: "compute" (tid 0) and "communication"
// (tid 1). Every compute span is a complete event (ph "X") named by its label ("1F3",
// "(0F7;7B3)") with category F, B, I, W or F&B and args {stage, microbatch, kind, activations};
// every communication span (a measured NCCL group) is a complete event "group" with args
// {transfers}; a mesh step's collectives are complete events on a third thread, "data-parallel"
// (tid 2), named REDUCE_GRAD(1), UNSHARD(2), ... with category collective and args {communicator};
// its memory actions' copies on a fourth, "copy" (tid 3), named OFFLOAD(0,3), RELOAD(0,3). Every transfer is a
// flow ("s" on the sender's span, "f" with "bp": "e" on the receiver's) named "activation 1F3" or "gradient 2B3", so
// the viewer draws an arrow from send to receive. Timestamps are microseconds: `us_per_unit` per unit of the trace (a
// measured trace is in ms, so 1000; a simulated one in cost units, drawn as ms by default).
//
// The format: Trace Event Format (Google, "Trace Event Format" document): "X" needs name, ph, ts,
// dur, pid, tid; "s"/"f" need name, cat, ph, id, ts, pid, tid; "M" names processes and threads.
// A flow's end binds to the slice enclosing its timestamp on its thread, so each end is placed
// just inside its span.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>

#include "pipetype/detail/format.hpp"
#include "pipetype/io/step_trace.hpp"

namespace pipetype {

struct trace_part {
  const step_trace* trace = nullptr;
  std::string name{};         // process names start with it ("measured", "simulated"); may be empty
  double us_per_unit = 1000;  // µs per unit of the trace's times
};

inline std::string chrome_trace(std::span<const trace_part> parts) {
  using detail::decimal;
  std::string s = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string& e) {
    s += (first ? "" : ",\n") + e;
    first = false;
  };
  int pid_base = 0, flow_id = 0;
  for (std::size_t part = 0; part < parts.size(); ++part) {
    const trace_part& p = parts[part];
    if (!p.trace) continue;
    const step_trace& tr = *p.trace;
    const double k = p.us_per_unit;
    // timestamps in whole ns; a duration is the difference of its rounded ends, so spans that
    // touch stay touching after rounding
    auto whole_ns = [&](double t) { return detail::round_of(t * k * 1000); };
    auto ns = [&](double t) { return whole_ns(t) / 1000; };
    auto ts = [&](double t) { return decimal(ns(t), 3); };
    auto dur = [&](double a, double b) { return decimal(ns(b) - ns(a), 3); };
    auto where = [&](int rank, int tid) {
      return "\"pid\": " + std::to_string(pid_base + rank) + ", \"tid\": " + std::to_string(tid);
    };
    for (int r = 0; r < tr.ranks; ++r) {
      const std::string pname = (p.name.empty() ? "" : p.name + " ") + "rank " + std::to_string(r);
      event("{\"name\": \"process_name\", \"ph\": \"M\", " + where(r, 0) +
            ", \"args\": {\"name\": " + detail::json_quote(pname) + "}}");
      event("{\"name\": \"process_sort_index\", \"ph\": \"M\", " + where(r, 0) +
            ", \"args\": {\"sort_index\": " + std::to_string(pid_base + r) + "}}");
      event("{\"name\": \"thread_name\", \"ph\": \"M\", " + where(r, 0) + ", \"args\": {\"name\": \"compute\"}}");
      event("{\"name\": \"thread_name\", \"ph\": \"M\", " + where(r, 1) + ", \"args\": {\"name\": \"communication\"}}");
      if (!tr.collectives.empty())
        event("{\"name\": \"thread_name\", \"ph\": \"M\", " + where(r, 2) +
              ", \"args\": {\"name\": \"data-parallel\"}}");
      if (!tr.copies.empty())
        event("{\"name\": \"thread_name\", \"ph\": \"M\", " + where(r, 3) + ", \"args\": {\"name\": \"copy\"}}");
    }
    for (const traced_collective& c : tr.collectives)
      event("{\"name\": " + detail::json_quote(c.name) +
            ", \"cat\": \"collective\", \"ph\": \"X\", \"ts\": " + ts(c.start) + ", \"dur\": " + dur(c.start, c.end) +
            ", " + where(c.rank, 2) + ", \"args\": {\"communicator\": " + std::to_string(c.comm) + "}}");
    for (const traced_collective& c : tr.copies)
      event("{\"name\": " + detail::json_quote(c.name) + ", \"cat\": \"copy\", \"ph\": \"X\", \"ts\": " + ts(c.start) +
            ", \"dur\": " + dur(c.start, c.end) + ", " + where(c.rank, 3) + ", \"args\": {}}");
    for (const traced_compute& c : tr.computes) {
      std::string args = "\"stage\": " + std::to_string(c.first.stage) +
                         ", \"microbatch\": " + std::to_string(c.first.microbatch) + ", \"kind\": \"" +
                         kind_char(c.first.what) + '"';
      ;
      if (c.paired) args += ", \"paired_with\": " + detail::json_quote(to_text(c.second));
      args += ", \"activations\": " + decimal(c.activations, 3);
      event("{\"name\": " + detail::json_quote(c.label()) + ", \"cat\": \"" +
            (c.paired ? std::string("F&B") : std::string(1, kind_char(c.first.what))) +
            "\", \"ph\": \"X\", \"ts\": " + ts(c.start) + ", \"dur\": " + dur(c.start, c.end) + ", " +
            where(c.rank, 0) + ", \"args\": {" + args + "}}");
    }
    for (const traced_comm& c : tr.comms)
      event("{\"name\": \"group\", \"cat\": \"comm\", \"ph\": \"X\", \"ts\": " + ts(c.start) +
            ", \"dur\": " + dur(c.start, c.end) + ", " + where(c.rank, 1) +
            ", \"args\": {\"transfers\": " + std::to_string(c.transfers) + "}}");
    // a flow's ends sit inside their spans, 1/1000 of the span from its edge and at least 1 ns:
    // a measured span of a few hundred ns would round 1/1000 of itself onto its edge, where the
    // flow could bind to the span beside it. A span under 2 ns gets its ends at its start.
    auto inside = [&](double a, double b, bool near_end) {
      const double from = whole_ns(a), to = whole_ns(b);
      if (to - from < 2) return decimal(from / 1000, 3);
      const double off = std::max(1.0, detail::round_of((to - from) / 1000));
      return decimal((near_end ? to - off : from + off) / 1000, 3);
    };
    auto span_of = [&](bool comm, int i, double& a, double& b) {
      if (comm) {
        const traced_comm& c = tr.comms[static_cast<std::size_t>(i)];
        a = c.start, b = c.end;
      } else {
        const traced_compute& c = tr.computes[static_cast<std::size_t>(i)];
        a = c.start, b = c.end;
      }
    };
    const int tid = 0;
    for (const traced_transfer& x : tr.transfers) {
      if (x.from_span < 0 || x.to_span < 0) continue;
      double a0, a1, b0, b1;
      span_of(x.via_comm, x.from_span, a0, a1);
      span_of(x.via_comm, x.to_span, b0, b1);
      const int thread = x.via_comm ? 1 : tid;
      const std::string id = std::to_string(flow_id++);
      const std::string name = detail::json_quote(x.label());
      event("{\"name\": " + name + ", \"cat\": \"transfer\", \"ph\": \"s\", \"id\": " + id +
            ", \"ts\": " + inside(a0, a1, true) + ", " + where(x.from, thread) + "}");
      event("{\"name\": " + name + ", \"cat\": \"transfer\", \"ph\": \"f\", \"bp\": \"e\", \"id\": " + id +
            ", \"ts\": " + inside(b0, b1, x.via_comm) + ", " + where(x.to, thread) + "}");
    }
    pid_base += std::max(tr.ranks, 1);
  }
  return s + "\n]}\n";
}

inline std::string chrome_trace(std::initializer_list<trace_part> parts) {
  return chrome_trace(std::span<const trace_part>(parts.begin(), parts.size()));
}

/// One step.
inline std::string chrome_trace(const step_trace& t, double us_per_unit = 1000) {
  return chrome_trace({trace_part{&t, {}, us_per_unit}});
}

}  // namespace pipetype
