// examples/trainer_file.hpp — what the trainers (train_mlp, train_graph) take from a --file.
//
// A schedule file may name any sizes up to pipetype::limits, far above what a trainer's flags
// allow (train_mlp: --ranks 64, --microbatches 4096), and a trainer's executor keeps buffers that
// grow with ranks x stages; so a file is held to the flags' caps. train_mlp's model is a chain of
// dense layers, so it refuses a file with an `edges` line (train_graph trains graphs); the model's
// own graph against the plan's is then the executor's check (bind/checks.hpp), whose shape_error
// the trainers print as one sentence. A file's memory actions and collectives are refused: a
// trainer runs neither from a file, and dropping them silently would train another step.
#pragma once

#include <pipetype/core/program.hpp>
#include <pipetype/io/notation.hpp>

#include <optional>
#include <string>

#include "read_text.hpp"

namespace examples {

struct trainer_caps {
  int ranks = 64;
  int microbatches = 4096;
  int stages = 2048;  // 64 ranks of 16 chunks, in each of DualPipe's two lanes
};

/// Why a trainer with `caps` does not take the program read from `file`, or "" (also when the file
/// did not parse: building the plan then says where). `graphs`: the trainer takes an `edges` line.
inline std::string trainer_file_refusal(const pipetype::program& p, const std::string& file, const trainer_caps& caps,
                                        bool graphs) {
  if (!p.source_error.ok()) return "";
  if (!graphs && !p.edges.empty())
    return file +
           " gives a stage graph (an `edges` line), but train_mlp trains a chain of stages: train a graph with "
           "train_graph";
  if (p.ranks > caps.ranks || p.microbatches > caps.microbatches || p.stages > caps.stages)
    return file + " has " + std::to_string(p.ranks) + " ranks, " + std::to_string(p.stages) + " stages and " +
           std::to_string(p.microbatches) + " microbatches; the trainers take at most " + std::to_string(caps.ranks) +
           " ranks, " + std::to_string(caps.stages) + " stages and " + std::to_string(caps.microbatches) +
           " microbatches";
  return "";
}

/// The program a trainer runs for `--file path`: read with read_text's bound, parsed, and held to
/// trainer_file_refusal's rules; nullopt with `why` when the file cannot be read or is refused (a
/// parse error is left to building the plan, which says where).
inline std::optional<pipetype::program> read_trainer_file(const std::string& path, const trainer_caps& caps,
                                                          bool graphs, std::string& why) {
  const std::optional<std::string> text = read_text(path, why);
  if (!text) return std::nullopt;
  const pipetype::schedule_file file = pipetype::read_schedule(*text);
  pipetype::read_options o;
  o.name = "file";
  pipetype::program prog = pipetype::to_program(file, o);
  why = trainer_file_refusal(prog, path, caps, graphs);
  // markers a trainer cannot act on are refused, not dropped (pipetype-explore --file checks them)
  if (why.empty() && file.error.ok() && (pipetype::has_memory_actions(file) || pipetype::has_collectives(file)))
    why = path + " writes " +
          (pipetype::has_memory_actions(file) ? "memory actions (OFFLOAD, RELOAD, RECOMPUTE)"
                                              : "data-parallel collectives (UNSHARD, RESHARD, REDUCE_GRAD)") +
          ", which the trainers do not run from a file; pipetype-explore --file checks and reports them";
  if (!why.empty()) return std::nullopt;
  return prog;
}

}  // namespace examples
