// A LibTorch header below torch/: check.cmake must refuse it.
#pragma once
#include <ATen/ATen.h>
