// pipetype/host.hpp — everything in pipetype.hpp, plus host execution: the stage graph bound to
// a plan and run on rank threads, transfers through the NCCL-semantics fabric; a pp × dp mesh
// of them with its collectives (mesh_executor).
#pragma once

#include "pipetype/host/binding.hpp"
#include "pipetype/host/channel.hpp"
#include "pipetype/host/collective.hpp"
#include "pipetype/host/executor.hpp"
#include "pipetype/host/mesh_executor.hpp"
#include "pipetype/host/stragglers.hpp"
#include "pipetype/pipetype.hpp"
