// pipetype/host.hpp — everything in pipetype.hpp, plus host execution: the stage graph bound to
// a plan and run on rank threads, transfers through the NCCL-semantics fabric; a pp × dp mesh
// of them with its collectives (mesh_executor).
#pragma once

#include "pipetype/exec/binding.hpp"
#include "pipetype/exec/channel.hpp"
#include "pipetype/exec/collective.hpp"
#include "pipetype/exec/host_executor.hpp"
#include "pipetype/exec/mesh_executor.hpp"
#include "pipetype/pipetype.hpp"
