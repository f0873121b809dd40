// examples/gpt/dump.hpp — one step's weights, batch, loss and gradients as .npy files, for the PyTorch check
// (tests/pytorch/check_gpt_dump.py).
// Part of examples/gpt's model (layers.hpp says its equations and conventions).
#pragma once

#include "model.hpp"
#include "npy.hpp"

namespace gpt {

// ---------------------------------------------------------------------------------------------
// Dump for the PyTorch check (tests/pytorch/check_gpt_dump.py)

/// Writes a dump of one step's weights, batch (every microbatch of full length T), loss and
/// gradients:
///   DIR/weights/<name>.npy   float32, each tensor's shape
///   DIR/grads/<name>.npy     float32, the gradient of the loss below
///   DIR/batch/input_ids.npy, DIR/batch/targets.npy   int64 [m·rows, T] (microbatch j = rows j·rows…)
///   DIR/loss.npy             float32 scalar: the mean cross-entropy over all m·rows·T tokens
///   DIR/config.json          n_layer, n_head, n_embd, vocab_size, seq_len, microbatches, rows, tied
/// With `tied` (the LM head's weight is wte.weight), lm_head.weight is not written: wte.weight's
/// gradient is then the tied parameter's, the sum of both uses.
inline void write_dump(const std::filesystem::path& dir, const gpt_config& c, const model_params<float>& params,
                       std::span<const microbatch> batch, const model_params<float>& grads, double loss,
                       bool tied = false) {
  validate(c);
  if (batch.empty()) throw std::invalid_argument("write_dump: no microbatch");
  for (const microbatch& mb : batch)
    if (mb.t != c.seq) throw std::invalid_argument("write_dump: every microbatch must have length T");
  namespace fs = std::filesystem;
  fs::create_directories(dir / "weights");
  fs::create_directories(dir / "grads");
  fs::create_directories(dir / "batch");
  for (const model_tensor& mt : model_tensors(c)) {
    const tensor_info& t = mt.tensor;
    if (tied && t.name == "lm_head.weight") continue;
    const std::vector<float>& p = part_vector(params, mt.part);
    const std::vector<float>& g = part_vector(grads, mt.part);
    npy::write(dir / "weights" / (t.name + ".npy"), std::span<const float>(p).subspan(t.offset, t.size), t.shape);
    npy::write(dir / "grads" / (t.name + ".npy"), std::span<const float>(g).subspan(t.offset, t.size), t.shape);
  }
  std::vector<std::int64_t> ids, targets;
  for (const microbatch& mb : batch) {
    ids.insert(ids.end(), mb.ids.begin(), mb.ids.end());
    targets.insert(targets.end(), mb.targets.begin(), mb.targets.end());
  }
  const std::vector<std::size_t> shape{batch.size() * detail::z(c.rows), detail::z(c.seq)};
  npy::write(dir / "batch" / "input_ids.npy", ids, shape);
  npy::write(dir / "batch" / "targets.npy", targets, shape);
  const std::vector<float> loss_value{static_cast<float>(loss)};
  npy::write(dir / "loss.npy", loss_value, std::vector<std::size_t>{});
  npy::json_object()
      .add("n_layer", c.layers)
      .add("n_head", c.heads)
      .add("n_embd", c.width)
      .add("vocab_size", c.vocab)
      .add("seq_len", c.seq)
      .add("microbatches", static_cast<int>(batch.size()))
      .add("rows", c.rows)
      .add("tied", tied)
      .write(dir / "config.json");
}

/// The same with the reference's gradients and loss (reference_step on `batch`). Returns the loss.
inline double write_dump(const std::filesystem::path& dir, const gpt_config& c, const model_params<float>& params,
                         std::span<const microbatch> batch) {
  model_params<float> grads;
  const std::vector<double> sums = reference_step<float>(c, params, batch, grads);
  double total = 0.0;
  for (double s : sums) total += s;
  const double loss = total / (static_cast<double>(batch.size()) * c.rows * c.seq);
  write_dump(dir, c, params, batch, grads, loss);
  return loss;
}

}  // namespace gpt
