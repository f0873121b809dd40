// The plans the CUDA tests sweep: every built-in schedule with p = 1..4 ranks and m = 2p + 2
// microbatches (where the schedule allows them), under both communicator and group policies.
#pragma once

#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

template <class F>
void for_each_builtin_plan(F&& f) {
  namespace pt = pipetype;
  for (const pt::schedule_info& info : pt::schedule_infos)
    for (const int p : {1, 2, 3, 4}) {
      const int m = 2 * p + 2;
      if (pt::schedule_error(info.name, p, m, 0) || info.local) continue;  // (local: a model of local losses)
      for (const pt::comm_policy comms : {pt::comm_policy::per_edge, pt::comm_policy::per_rank_pair})
        for (const pt::group_policy groups : {pt::group_policy::per_tick, pt::group_policy::per_peer}) {
          CAPTURE(info.name);
          CAPTURE(p);
          CAPTURE(static_cast<int>(comms));
          CAPTURE(static_cast<int>(groups));
          f(pt::build_plan(pt::make_schedule(info.name, p, m), {.comms = comms, .groups = groups}));
        }
    }
}
