// pipetype/host.hpp — everything in pipetype.hpp, plus host execution (rank threads, the
// NCCL-semantics fabric).
#pragma once

#include "pipetype/exec/channel.hpp"
#include "pipetype/pipetype.hpp"
