// The schedules and memory-action policies the executors' memory tests sweep (host/host_memory
// and cuda/memory): every schedule that runs over a mesh, with every activation offloaded, every
// forward recomputed, and both. f(name, offload, recompute) runs inside their CAPTUREs.
#pragma once

#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <utility>

template <class F>
void for_each_memory_mode(F&& f) {
  namespace pt = pipetype;
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "v-min",
                           "v-half", "dualpipe-v", "zb-auto"})
    for (const std::pair<pt::memory_policy, pt::memory_policy>& mode :
         {std::pair{pt::memory_policy::all, pt::memory_policy::none},
          std::pair{pt::memory_policy::none, pt::memory_policy::all},
          std::pair{pt::memory_policy::all, pt::memory_policy::all}}) {
      const pt::memory_policy offload = mode.first, recompute = mode.second;  // (clang 14: no bindings in CAPTURE)
      CAPTURE(name);
      CAPTURE(static_cast<int>(offload));
      CAPTURE(static_cast<int>(recompute));
      f(name, offload, recompute);
    }
}
