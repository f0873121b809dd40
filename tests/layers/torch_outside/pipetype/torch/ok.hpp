// The same include inside torch/: allowed.
#pragma once
#include <ATen/ATen.h>
#include "pipetype/host/t.hpp"
