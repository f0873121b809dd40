// pipetype/pipetype.hpp — the schedule algebra: generate, verify, lower, analyse, print.
// (<pipetype/host.hpp> adds host execution; <pipetype/cuda.hpp> will add the CUDA executor.
// Kept apart so that a TU that only builds plans does not pay for threading headers.)
//
//   #include <pipetype/pipetype.hpp>
//   namespace pt = pipetype;
//   constexpr auto plan = pt::make_plan<pt::one_f_one_b<pt::ranks<4>, pt::microbatches<8>>>();
#pragma once

#include "pipetype/core/action.hpp"
#include "pipetype/core/memory.hpp"
#include "pipetype/core/mesh.hpp"
#include "pipetype/core/program.hpp"
#include "pipetype/core/schedule.hpp"
#include "pipetype/core/sizes.hpp"
#include "pipetype/core/step.hpp"
#include "pipetype/core/verdict.hpp"

#include "pipetype/graph/chain.hpp"
#include "pipetype/graph/dag.hpp"
#include "pipetype/graph/floats.hpp"
#include "pipetype/graph/layer_layout.hpp"
#include "pipetype/graph/placement.hpp"
#include "pipetype/graph/stage.hpp"

#include "pipetype/analysis/bounds.hpp"
#include "pipetype/analysis/costs.hpp"
#include "pipetype/analysis/layout_costs.hpp"
#include "pipetype/analysis/simulate.hpp"

#include "pipetype/schedules/balance.hpp"
#include "pipetype/schedules/dualpipe.hpp"
#include "pipetype/schedules/dualpipe_v.hpp"
#include "pipetype/schedules/gpipe.hpp"
#include "pipetype/schedules/interleaved_1f1b.hpp"
#include "pipetype/schedules/local_1f1b.hpp"
#include "pipetype/schedules/looped_bfs.hpp"
#include "pipetype/schedules/one_f_one_b.hpp"
#include "pipetype/schedules/registry.hpp"
#include "pipetype/schedules/v_half.hpp"
#include "pipetype/schedules/v_min.hpp"
#include "pipetype/schedules/zb_auto.hpp"
#include "pipetype/schedules/zb_exact.hpp"
#include "pipetype/schedules/zb_h1.hpp"
#include "pipetype/schedules/zb_h2.hpp"
#include "pipetype/schedules/zb_v.hpp"

#include "pipetype/mesh/collectives.hpp"
#include "pipetype/compile/diagnostics.hpp"
#include "pipetype/compile/lower.hpp"
#include "pipetype/compile/lowered.hpp"
#include "pipetype/mesh/memory_actions.hpp"
#include "pipetype/mesh/memory_plan.hpp"
#include "pipetype/mesh/memory_search.hpp"
#include "pipetype/mesh/memory_slots.hpp"
#include "pipetype/mesh/simulate.hpp"
#include "pipetype/mesh/ops.hpp"
#include "pipetype/mesh/plan.hpp"
#include "pipetype/mesh/verify.hpp"
#include "pipetype/mesh/place_memory.hpp"
#include "pipetype/compile/plan.hpp"
#include "pipetype/compile/pool_bytes.hpp"
#include "pipetype/compile/verify.hpp"
#include "pipetype/compile/verify_lowered.hpp"
#include "pipetype/mesh/verify_memory.hpp"
#include "pipetype/compile/verify_transfers.hpp"

#include "pipetype/io/chrome_trace.hpp"
#include "pipetype/io/grid.hpp"
#include "pipetype/io/notation.hpp"
#include "pipetype/io/write_schedule.hpp"
#include "pipetype/io/step_trace.hpp"
#include "pipetype/io/svg.hpp"
#include "pipetype/io/text.hpp"
