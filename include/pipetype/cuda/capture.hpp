// pipetype/cuda/capture.hpp — one step as one CUDA graph: the origin stream, the fork and join
// between it and the streams a step uses, and the executable graph kept across captures.
//
// A device executor captures its rank's step; a loopback pipeline captures every rank's (an
// event recorded in one capture cannot be waited on in another, so the whole pipeline is one
// graph). Both do it the same way, here:
//   capture(step)   begin_capture(origin); fork; step(); join; end_capture → instantiate, or
//                   update in place when only addresses changed (cudaGraphExecUpdate)
//   replay()        join (after everything already on the streams); launch on the origin; fork
//                   (before whatever comes next on them) — so eager steps and replays mix
// where fork = record on the origin, every stream waits on it; join = every stream records,
// the origin waits on each. The streams may belong to several drivers (one per rank).
#pragma once

#include <stdexcept>
#include <vector>

#include "pipetype/cuda/driver.hpp"

namespace pipetype::cuda {

/// A captured step's executable graph: the first capture instantiates it; a later one updates it
/// in place (cudaGraphExecUpdate) when only addresses changed, else instantiates anew.
template <class D>
struct step_graph {
  typename D::graph_exec exec{};
  bool captured = false;
  int instantiations = 0, updates = 0;

  void take(D& d, typename D::graph g) {
    if (captured && d.update(exec, g)) {
      ++updates;
    } else {
      if (captured) {
        captured = false;
        d.destroy(exec);
      }
      try {
        exec = d.instantiate(g);
      } catch (...) {
        d.destroy(g);
        throw;
      }
      captured = true;
      ++instantiations;
    }
    d.destroy(g);
  }
  /// Destroys the executable graph (before the driver goes; errors are swallowed).
  void release(D& d) noexcept {
    if (!captured) return;
    captured = false;
    try {
      d.destroy(exec);
    } catch (...) {
    }
  }
  void launch(D& d, typename D::stream s) {
    if (!captured) throw std::logic_error("pipetype::cuda: replay() before capture()");
    d.launch(exec, s);
  }
};

/// Ends a capture that failed half-way and drops its graph, so the origin stream is usable again
/// (the failure itself is what the caller reports).
template <class D>
void abandon_capture(D& d, typename D::stream origin) noexcept {
  try {
    d.destroy(d.end_capture(origin));
  } catch (...) {
  }
}

/// The origin stream of a captured step and its fork/join with the streams the step uses.
template <class D>
requires captures_graphs<D>
class step_capture {
 public:
  /// Makes the origin stream and the fork event on `origin` (the driver the graph belongs to).
  void open(D& origin) {
    origin_d_ = &origin;
    origin_ = origin.make_stream();
    fork_ = origin.make_event();
  }
  /// Adds a stream a step uses (of driver `d`), with its join event.
  void add(D& d, typename D::stream s) { links_.push_back({&d, s, d.make_event()}); }

  /// Records one step into the graph (or updates the graph made before in place).
  template <class Step>
  void capture(Step&& step) {
    D& d = *origin_d_;
    d.begin_capture(origin_);
    fork();
    try {
      step();
    } catch (...) {
      abandon_capture(d, origin_);
      throw;
    }
    join();
    graph_.take(d, d.end_capture(origin_));
  }
  /// Launches the captured step, ordered like an eager one.
  void replay() {
    join();
    graph_.launch(*origin_d_, origin_);
    fork();
  }
  /// Destroys the executable graph (before the driver goes).
  void release() noexcept {
    if (origin_d_) graph_.release(*origin_d_);
  }

  typename D::stream origin() const noexcept { return origin_; }
  int instantiations() const noexcept { return graph_.instantiations; }
  int updates() const noexcept { return graph_.updates; }

 private:
  struct link {
    D* d;
    typename D::stream s;
    typename D::event join;
  };
  void fork() {
    origin_d_->record(fork_, origin_);
    for (const link& l : links_) l.d->wait(l.s, fork_);
  }
  void join() {
    for (const link& l : links_) {
      l.d->record(l.join, l.s);
      origin_d_->wait(origin_, l.join);
    }
  }

  D* origin_d_ = nullptr;
  typename D::stream origin_{};
  typename D::event fork_{};
  std::vector<link> links_;
  step_graph<D> graph_{};
};

namespace detail {
struct no_capture {};
/// A step_capture for drivers that capture graphs, nothing for the others.
template <class D, bool = captures_graphs<D>>
struct capture_select {
  using type = no_capture;
};
template <class D>
struct capture_select<D, true> {
  using type = step_capture<D>;
};
template <class D>
using capture_for = typename capture_select<D>::type;
}  // namespace detail

}  // namespace pipetype::cuda
