// The same include inside torch/: allowed.
#pragma once
#include <ATen/ATen.h>
#include "pipetype/exec/t.hpp"
