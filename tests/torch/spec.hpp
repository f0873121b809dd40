// What the LibTorch stage tests share (tests/torch, tests/torch_cuda): the spec of a stage that
// maps [rows, width] to [rows, width], with targets of that shape and, where the plan makes it a
// sink, a summed squared-error loss.
#pragma once

#include <pipetype/torch/stage.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_test {

inline pipetype::torch::stage_spec square_spec(std::string name, std::int64_t rows, std::int64_t width) {
  pipetype::torch::stage_spec s;
  s.name = std::move(name);
  s.inputs = {{{rows, width}}};
  s.outputs = {{{rows, width}}};
  s.targets = {{{rows, width}}};
  s.loss = [](const std::vector<at::Tensor>& out, const std::vector<at::Tensor>& target) {
    return torch::mse_loss(out.at(0), target.at(0), at::Reduction::Sum);
  };
  return s;
}

}  // namespace torch_test
