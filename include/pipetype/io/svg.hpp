// pipetype/io/svg.hpp — a step as an SVG timeline: ranks as rows, time to the right.
//
//   std::string s = pipetype::svg(trace_of(plan.compute(), t), {.title = "1f1b"});
//   std::string both = pipetype::svg({{measured, "measured"}, {simulated, "simulated"}});
//
// Each panel (one step_trace, io/step_trace.hpp) has a title line (its name, ranks,
// microbatches, makespan, bubble, peak activations), a time axis with round ticks and the unit,
// then per rank a row where idle time is grey and each compute span is a box coloured by kind
// (below), labelled "1F3" where the label fits, with a tooltip giving its times; under the row,
// the rank's live activations as a step curve with its peak marked. With `transfers`, each
// transfer is an arrow from its sending rank (when sent) to its receiving rank (when arrived).
// A mesh step's collectives (step_trace::collectives) are grey boxes in a band under each rank's
// row, labelled REDUCE_GRAD(1), UNSHARD(2), ... where they fit; its memory actions' copies
// (step_trace::copies) brown boxes in a band under that, OFFLOAD(0,3), RELOAD(0,3), and a
// RECOMPUTE a light blue span on the row, 0R3.
// Panels in the same unit share one time scale, so a measured step and its simulation line up.
// Under a panel whose program gives its stage graph as edges (step_trace::edges), the graph
// itself: a box per stage ("stage 2 · rank 1", data-stage) in columns by depth from a source,
// an arrow per edge (data-from, data-to). A legend closes the picture.
//
//   F  #4e79a7 blue     B  #59a14f green      I  #f28e2b orange
//   W  #b07aa1 purple   overlapped F&B pair  #e15759 red      idle #e6e6e6
//   RECOMPUTE #a0cbe8 light blue   collective #7f7f7f grey   copy #9c755f brown
//
// The SVG is plain SVG 1.1 (rects, lines, polylines, text): browsers and rsvg-convert draw it.
// Its geometry is stated on the elements for tools: each panel's <g> carries data-t0 (the time
// at the left edge), data-x0 (its x in px) and data-px-per-unit; each rank's row <g> carries
// data-rank, data-y and data-height.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "pipetype/detail/format.hpp"
#include "pipetype/io/step_trace.hpp"

namespace pipetype {

struct svg_options {
  double width = 1200;     // px
  double row_height = 22;  // px of a rank's row of spans
  bool memory = true;      // the activation curve under each row
  bool transfers = false;  // arrows for transfers
  std::string title{};     // the first words of every panel's title (a schedule's name)
};

struct svg_panel {
  const step_trace* trace = nullptr;
  std::string title{};  // after svg_options::title
};

/// The colour of a span: by kind (F, B, I, W), red for an overlapped pair whatever its kinds.
inline const char* svg_colour(const traced_compute& c) {
  constexpr const char* by_kind[kind_count] = {"#4e79a7", "#59a14f", "#f28e2b", "#b07aa1"};
  if (c.recompute) return "#a0cbe8";  // a RECOMPUTE: its forward's colour, lighter
  return c.paired ? "#e15759" : by_kind[static_cast<int>(c.first.what)];
}

namespace detail {

struct svg_geometry {
  static constexpr double left = 72, right = 16, title_h = 22, axis_h = 26, gap = 8, memory_h = 18, legend_h = 28;
};

/// The stage graph under a panel: stages as boxes ("stage 2 · rank 1"; with lanes, the rank of
/// each lane's copy: "ranks 2, 1") in columns by their depth from a source, each edge an arrow
/// (a skip over columns bends below the boxes between).
inline std::string svg_graph_body(const step_trace& tr, double width, double y, double& height) {
  using G = svg_geometry;
  const int L = tr.graph_stages;  // one lane's stages; edges outside them are not drawn (verify names them)
  std::vector<stage_edge> edges;
  for (const stage_edge& e : tr.edges)
    if (e.from >= 0 && e.from < L && e.to >= 0 && e.to < L) edges.push_back(e);
  const stage_links links = links_of(L, edges);
  std::vector<int> depth(static_cast<std::size_t>(L), 0), row(static_cast<std::size_t>(L), 0), in_column;
  for (const int v : link_order(links, L))
    for (int k = links.succ_begin[static_cast<std::size_t>(v)]; k < links.succ_begin[static_cast<std::size_t>(v) + 1];
         ++k) {
      const auto w = static_cast<std::size_t>(links.succ[static_cast<std::size_t>(k)]);
      depth[w] = std::max(depth[w], depth[static_cast<std::size_t>(v)] + 1);
    }
  std::vector<std::string> label(static_cast<std::size_t>(L));
  std::size_t widest = 0;
  int rows = 0;
  for (int v = 0; v < L; ++v) {
    const auto d = static_cast<std::size_t>(depth[static_cast<std::size_t>(v)]);
    if (in_column.size() <= d) in_column.resize(d + 1, 0);
    row[static_cast<std::size_t>(v)] = in_column[d]++;
    rows = std::max(rows, in_column[d]);
    std::string& t = label[static_cast<std::size_t>(v)];
    t = "stage " + std::to_string(v) + " · rank" + (tr.lanes > 1 ? "s " : " ");
    for (int lane = 0; lane < tr.lanes; ++lane) {
      const auto ps = static_cast<std::size_t>(lane * L + v);
      t += (lane ? ", " : "") + (ps < tr.stage_rank.size() ? std::to_string(tr.stage_rank[ps]) : std::string("?"));
    }
    widest = std::max(widest, t.size() - 1);  // "·" is two bytes
  }
  const double box_w = 6.2 * static_cast<double>(widest) + 12, box_h = 18, pitch = 26, top = y + 6;
  const double x0 = G::left;
  // columns box_w + 44 apart, closer when a deep graph would run past the right edge
  const double columns = static_cast<double>(in_column.size() > 1 ? in_column.size() - 1 : 1);
  const double step = std::max(std::min(box_w + 44, (width - G::right - x0 - box_w) / columns), 8.0);
  auto bx = [&](int v) { return x0 + depth[static_cast<std::size_t>(v)] * step; };
  auto by = [&](int v) { return top + row[static_cast<std::size_t>(v)] * pitch; };
  std::string s = "<g class=\"graph\">\n<text x=\"" + decimal(x0 - 6) + "\" y=\"" + decimal(top + box_h / 2 + 4) +
                  "\" class=\"rankname\">graph</text>\n";
  for (const stage_edge& e : edges) {
    const double x1 = bx(e.from) + box_w, y1 = by(e.from) + box_h / 2, x2 = bx(e.to), y2 = by(e.to) + box_h / 2;
    const bool skips = depth[static_cast<std::size_t>(e.to)] - depth[static_cast<std::size_t>(e.from)] > 1;
    const double bend = skips ? 17 : 0, reach = std::min(30.0, (x2 - x1) / 2);
    s += "<path d=\"M" + decimal(x1) + "," + decimal(y1) + " C" + decimal(x1 + reach) + "," + decimal(y1 + bend) + " " +
         decimal(x2 - reach) + "," + decimal(y2 + bend) + " " + decimal(x2) + "," + decimal(y2) +
         "\" class=\"graphedge\" marker-end=\"url(#arrow)\" data-from=\"" + std::to_string(e.from) + "\" data-to=\"" +
         std::to_string(e.to) + "\"/>\n";
  }
  for (int v = 0; v < L; ++v)
    s += "<rect x=\"" + decimal(bx(v)) + "\" y=\"" + decimal(by(v)) + "\" width=\"" + decimal(box_w) + "\" height=\"" +
         decimal(box_h) + "\" rx=\"3\" class=\"node\" data-stage=\"" + std::to_string(v) + "\"/><text x=\"" +
         decimal(bx(v) + box_w / 2) + "\" y=\"" + decimal(by(v) + box_h / 2 + 4) + "\" class=\"nodelabel\">" +
         xml_escape(label[static_cast<std::size_t>(v)]) + "</text>\n";
  s += "</g>\n";
  height = 6 + (rows - 1) * pitch + box_h + 22;
  return s;
}

inline std::string svg_panel_body(const step_trace& tr, const std::string& title, const svg_options& o, double y,
                                  double t0, double scale, double& height) {
  using G = svg_geometry;
  const double x0 = G::left;
  auto X = [&](double t) { return x0 + (t - t0) * scale; };
  const std::string unit = tr.unit.empty() ? "time units" : tr.unit;
  int microbatches = 0;
  for (const traced_compute& c : tr.computes)
    microbatches = std::max({microbatches, c.first.microbatch + 1, c.paired ? c.second.microbatch + 1 : 0});
  std::string s = "<g class=\"panel\" data-t0=\"" + decimal(t0, 6) + "\" data-x0=\"" + decimal(x0) +
                  "\" data-px-per-unit=\"" + decimal(scale, 6) + "\">\n";
  // title line
  std::string head = title.empty() ? std::string() : title + " · ";
  head += std::to_string(tr.ranks) + " ranks, " + std::to_string(microbatches) + " microbatches · makespan " +
          decimal(tr.makespan()) + (tr.unit.empty() ? "" : " " + tr.unit) + " · bubble " +
          decimal(100 * tr.bubble_fraction(), 1) + "%" +
          (tr.peak_activations() > 0 ? " · peak " + decimal(tr.peak_activations(), 2) + " activations" : "");
  s +=
      "<text x=\"" + decimal(x0) + "\" y=\"" + decimal(y + 15) + "\" class=\"title\">" + xml_escape(head) + "</text>\n";
  // time axis
  const double axis_y = y + G::title_h + 16;
  const double t_end = std::max(tr.finish(), tr.begin());
  s += "<line x1=\"" + decimal(X(t0)) + "\" y1=\"" + decimal(axis_y) + "\" x2=\"" + decimal(X(t_end)) + "\" y2=\"" +
       decimal(axis_y) + "\" class=\"axis\"/>\n";
  const double span = t_end - t0;
  if (span > 0) {
    const double step = nice_at_least(span / 10);
    for (double t = ceil_of(t0 / step) * step; t <= t_end + step * 1e-9; t += step) {
      s += "<line x1=\"" + decimal(X(t)) + "\" y1=\"" + decimal(axis_y) + "\" x2=\"" + decimal(X(t)) + "\" y2=\"" +
           decimal(axis_y - 4) + "\" class=\"axis\"/><text x=\"" + decimal(X(t)) + "\" y=\"" + decimal(axis_y - 6) +
           "\" class=\"tick\">" + decimal(t) + "</text>\n";
    }
  }
  s += "<text x=\"" + decimal(x0 - 6) + "\" y=\"" + decimal(axis_y - 6) + "\" class=\"unit\">" + xml_escape(unit) +
       "</text>\n";
  // rows
  // a mesh step's collectives: a band of their own under each rank's row
  const double dp_h = tr.collectives.empty() ? 0 : o.row_height * 0.6;
  const double copy_h = tr.copies.empty() ? 0 : o.row_height * 0.6;  // and its copies, under that
  const double row_step = o.row_height + (o.memory ? G::memory_h : 0) + dp_h + copy_h + G::gap;
  const double rows_y = y + G::title_h + G::axis_h;
  const double peak_all = tr.peak_activations();
  std::vector<double> row_y(static_cast<std::size_t>(tr.ranks));
  std::size_t k = 0;
  for (int r = 0; r < tr.ranks; ++r) {
    const double ry = rows_y + r * row_step;
    row_y[static_cast<std::size_t>(r)] = ry;
    s += "<g class=\"rank\" data-rank=\"" + std::to_string(r) + "\" data-y=\"" + decimal(ry) + "\" data-height=\"" +
         decimal(o.row_height) + "\">\n";
    s += "<text x=\"" + decimal(x0 - 6) + "\" y=\"" + decimal(ry + o.row_height / 2 + 4) +
         "\" class=\"rankname\">rank " + std::to_string(r) + "</text>\n";
    s += "<rect x=\"" + decimal(X(t0)) + "\" y=\"" + decimal(ry) + "\" width=\"" + decimal(X(t_end) - X(t0)) +
         "\" height=\"" + decimal(o.row_height) + "\" class=\"idle\"/>\n";
    const std::size_t first = k;
    for (; k < tr.computes.size() && tr.computes[k].rank == r; ++k) {
      const traced_compute& c = tr.computes[k];
      const double w = std::max((c.end - c.start) * scale, 0.5);
      const std::string label = c.label();
      s += "<rect x=\"" + decimal(X(c.start)) + "\" y=\"" + decimal(ry) + "\" width=\"" + decimal(w) + "\" height=\"" +
           decimal(o.row_height) + "\" fill=\"" + svg_colour(c) + "\" class=\"span\"><title>" + xml_escape(label) +
           " rank " + std::to_string(r) + " · " + decimal(c.start) + " – " + decimal(c.end) + " " + xml_escape(unit) +
           "</title></rect>\n";
      if (w >= 6.2 * static_cast<double>(label.size()) + 4)
        s += "<text x=\"" + decimal(X(c.start) + w / 2) + "\" y=\"" + decimal(ry + o.row_height / 2 + 3.5) +
             "\" class=\"label\">" + xml_escape(label) + "</text>\n";
    }
    // the data-parallel stream's spans, then the copy stream's, each in a band of its own
    auto band = [&](const std::vector<traced_collective>& spans, double dy, double h, const char* cls) {
      for (const traced_collective& c : spans) {
        if (c.rank != r) continue;
        const double w = std::max((c.end - c.start) * scale, 0.5);
        s += "<rect x=\"" + decimal(X(c.start)) + "\" y=\"" + decimal(dy) + "\" width=\"" + decimal(w) +
             "\" height=\"" + decimal(h - 2) + "\" class=\"" + cls + "\"><title>" + xml_escape(c.name) + " rank " +
             std::to_string(r) + (c.comm >= 0 ? " on communicator " + std::to_string(c.comm) : std::string()) + " · " +
             decimal(c.start) + " – " + decimal(c.end) + " " + xml_escape(unit) + "</title></rect>\n";
        if (w >= 5.5 * static_cast<double>(c.name.size()) + 4)
          s += "<text x=\"" + decimal(X(c.start) + w / 2) + "\" y=\"" + decimal(dy + h / 2 + 2) +
               "\" class=\"label\">" + xml_escape(c.name) + "</text>\n";
      }
    };
    const double below = ry + o.row_height + (o.memory ? G::memory_h : 0) + 1;
    if (dp_h > 0) band(tr.collectives, below, dp_h, "collective");
    if (copy_h > 0) band(tr.copies, below + dp_h, copy_h, "copy");
    if (o.memory && k > first && peak_all > 0) {
      // live activations: 0 from the rank's first start, then the value after each span
      const double base = ry + o.row_height + G::memory_h - 2, h = G::memory_h - 5;
      auto Y = [&](double a) { return base - h * a / peak_all; };
      std::string pts = decimal(X(tr.computes[first].start)) + "," + decimal(Y(0));
      double prev = 0, peak = 0, peak_t = tr.computes[first].start;
      for (std::size_t i = first; i < k; ++i) {
        const traced_compute& c = tr.computes[i];
        pts += " " + decimal(X(c.end)) + "," + decimal(Y(prev));
        if (c.high > c.activations) pts += " " + decimal(X(c.end)) + "," + decimal(Y(c.high));  // a pair's F first
        pts += " " + decimal(X(c.end)) + "," + decimal(Y(c.activations));
        prev = c.activations;
        if (c.high > peak) peak = c.high, peak_t = c.end;
      }
      s += "<polyline points=\"" + pts + "\" class=\"memory\"/>\n";
      s += "<circle cx=\"" + decimal(X(peak_t)) + "\" cy=\"" + decimal(Y(peak)) + "\" r=\"2.5\" class=\"peak\"/>" +
           "<text x=\"" + decimal(X(peak_t) + 4) + "\" y=\"" + decimal(Y(peak) + 4) + "\" class=\"peak\">peak " +
           decimal(peak, 2) + "</text>\n";
    }
    s += "</g>\n";
  }
  if (o.transfers) {
    for (const traced_transfer& x : tr.transfers) {
      if (x.from < 0 || x.to < 0 || x.from >= tr.ranks || x.to >= tr.ranks) continue;
      const double ya = row_y[static_cast<std::size_t>(x.from)] + o.row_height / 2;
      const double yb = row_y[static_cast<std::size_t>(x.to)] + o.row_height / 2;
      s += "<line x1=\"" + decimal(X(x.sent)) + "\" y1=\"" + decimal(ya) + "\" x2=\"" + decimal(X(x.arrived)) +
           "\" y2=\"" + decimal(yb) + "\" class=\"transfer\" marker-end=\"url(#arrow)\"><title>" +
           xml_escape(x.label()) + ": rank " + std::to_string(x.from) + " → rank " + std::to_string(x.to) +
           "</title></line>\n";
    }
  }
  height = G::title_h + G::axis_h + tr.ranks * row_step;
  if (!tr.edges.empty() && tr.graph_stages > 0) {
    double gh = 0;
    s += svg_graph_body(tr, o.width, y + height, gh);
    height += gh;
  }
  s += "</g>\n";
  return s;
}

}  // namespace detail

/// Several steps, one panel each, one above the other.
inline std::string svg(std::span<const svg_panel> panels, const svg_options& o = {}) {
  using G = detail::svg_geometry;
  const double plot_w = std::max(o.width - G::left - G::right, 10.0);
  // one time scale for all panels of one unit
  auto range = [&](const std::string& unit, double& lo, double& hi) {
    bool any = false;
    for (const svg_panel& p : panels)
      if (p.trace && p.trace->unit == unit) {
        lo = any ? std::min(lo, p.trace->begin()) : p.trace->begin();
        hi = any ? std::max(hi, p.trace->finish()) : p.trace->finish();
        any = true;
      }
  };
  std::string body;
  double y = 8;
  for (const svg_panel& p : panels) {
    if (!p.trace) continue;
    double lo = 0, hi = 0;
    range(p.trace->unit, lo, hi);
    const double scale = hi > lo ? plot_w / (hi - lo) : 1;
    const std::string title = o.title.empty() ? p.title : p.title.empty() ? o.title : o.title + " · " + p.title;
    double h = 0;
    body += detail::svg_panel_body(*p.trace, title, o, y, lo, scale, h);
    y += h + 12;
  }
  // legend: the kinds drawn, then idle
  bool present[kind_count + 1] = {};  // F, B, I, W, pair
  bool recomputes = false, copies = false;
  for (const svg_panel& p : panels)
    if (p.trace) {
      for (const traced_compute& c : p.trace->computes)
        (c.recompute ? recomputes : present[c.paired ? kind_count : static_cast<int>(c.first.what)]) = true;
      copies = copies || !p.trace->copies.empty();
    }
  struct swatch {
    const char* colour;
    const char* name;
    bool shown;
  };
  const swatch legend[] = {{"#4e79a7", "F forward", present[static_cast<int>(kind::F)]},
                           {"#59a14f", "B backward", present[static_cast<int>(kind::B)]},
                           {"#f28e2b", "I backward (inputs)", present[static_cast<int>(kind::I)]},
                           {"#b07aa1", "W backward (weights)", present[static_cast<int>(kind::W)]},
                           {"#e15759", "overlapped F&B", present[kind_count]},
                           {"#a0cbe8", "R recompute", recomputes},
                           {"#9c755f", "offload / reload", copies},
                           {"#e6e6e6", "idle", true}};
  double lx = G::left;
  const double ly = y + 4;
  for (const swatch& w : legend) {
    if (!w.shown) continue;
    body += "<rect x=\"" + detail::decimal(lx) + "\" y=\"" + detail::decimal(ly) +
            "\" width=\"12\" height=\"12\" fill=\"" + w.colour + "\"/><text x=\"" + detail::decimal(lx + 16) +
            "\" y=\"" + detail::decimal(ly + 10) + "\" class=\"legend\">" + detail::xml_escape(w.name) + "</text>\n";
    lx += 28 + 6.2 * static_cast<double>(std::string(w.name).size());
  }
  bool curves = false;  // a panel has a memory curve (a mesh step's trace has none)
  for (const svg_panel& p : panels) curves = curves || (p.trace && p.trace->peak_activations() > 0);
  if (o.memory && curves) {
    body += "<polyline points=\"" + detail::decimal(lx) + "," + detail::decimal(ly + 10) + " " +
            detail::decimal(lx + 6) + "," + detail::decimal(ly + 10) + " " + detail::decimal(lx + 6) + "," +
            detail::decimal(ly + 2) + " " + detail::decimal(lx + 12) + "," + detail::decimal(ly + 2) +
            "\" class=\"memory\"/><text x=\"" + detail::decimal(lx + 16) + "\" y=\"" + detail::decimal(ly + 10) +
            "\" class=\"legend\">live activations</text>\n";
    lx += 28 + 6.2 * 16;
  }
  if (o.transfers)
    body += "<line x1=\"" + detail::decimal(lx) + "\" y1=\"" + detail::decimal(ly + 6) + "\" x2=\"" +
            detail::decimal(lx + 14) + "\" y2=\"" + detail::decimal(ly + 6) +
            "\" class=\"transfer\" marker-end=\"url(#arrow)\"/><text x=\"" + detail::decimal(lx + 20) + "\" y=\"" +
            detail::decimal(ly + 10) + "\" class=\"legend\">transfer</text>\n";
  const double height = ly + G::legend_h;
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  detail::decimal(o.width) + "\" height=\"" + detail::decimal(height) + "\" viewBox=\"0 0 " +
                  detail::decimal(o.width) + " " + detail::decimal(height) + "\">\n";
  s += "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
       "orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#444444\"/></marker>\n"
       "<style>text{font-family:DejaVu Sans,Arial,sans-serif;font-size:11px;fill:#222222}"
       ".title{font-size:13px;font-weight:bold}.tick{font-size:10px;text-anchor:middle;fill:#555555}"
       ".unit{font-size:10px;text-anchor:end;fill:#555555}.rankname{text-anchor:end}"
       ".label{font-family:DejaVu Sans Mono,monospace;font-size:10px;text-anchor:middle;fill:#ffffff}"
       ".legend{font-size:11px}.axis{stroke:#555555;stroke-width:1}.idle{fill:#e6e6e6}.span{stroke:#ffffff;stroke-"
       "width:0.6}"
       ".memory{fill:none;stroke:#333333;stroke-width:1}.peak{fill:#d62728;font-size:9px}"
       ".transfer{stroke:#444444;stroke-width:0.8;stroke-opacity:0.6}"
       ".collective{fill:#7f7f7f;stroke:#ffffff;stroke-width:0.6}"
       ".copy{fill:#9c755f;stroke:#ffffff;stroke-width:0.6}"
       ".node{fill:#f2f2f2;stroke:#555555;stroke-width:0.8}.nodelabel{font-size:10px;text-anchor:middle}"
       ".graphedge{fill:none;stroke:#444444;stroke-width:0.9}</style></defs>\n"
       "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  return s + body + "</svg>\n";
}

inline std::string svg(std::initializer_list<svg_panel> panels, const svg_options& o = {}) {
  return svg(std::span<const svg_panel>(panels.begin(), panels.size()), o);
}

/// One step.
inline std::string svg(const step_trace& t, const svg_options& o = {}) { return svg({svg_panel{&t, {}}}, o); }

}  // namespace pipetype
