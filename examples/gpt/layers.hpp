// examples/gpt/layers.hpp — the numerics of a small GPT-2 decoder (forward, backward, init), in plain C++20.
//
// The model is GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"):
// pre-LayerNorm blocks, no dropout, an untied LM head. Weights are laid out as in Hugging Face's GPT-2
// (Conv1D: y = x·W + b with W stored [in, out]) and named as its state dict without the
// `transformer.` prefix, so a dump can be loaded and checked by an independent PyTorch model
// (tests/pytorch/check_gpt_dump.py). The code here is written from the equations, not copied.
//
//   h      = wte[id] + wpe[position]                                   embedding part
//   a      = h + attn(ln_1(h))                                         block i (i = 0..L-1)
//   h'     = a + mlp(ln_2(a))
//   loss   = Σ_tokens cross_entropy(ln_f(h) · lm_head.weightᵀ, target)  head part (a SUM, see below)
//   ln     = LayerNorm over C, eps 1e-5, biased variance
//   attn   = per head causal softmax(q·kᵀ/√(C/H))·v, q|k|v = x·c_attn.weight + c_attn.bias (in that
//            order along the last dim), heads concatenated, then ·c_proj.weight + c_proj.bias
//   mlp    = gelu_tanh(x·c_fc.weight + c_fc.bias)·c_proj.weight + c_proj.bias,
//            gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
//
// Conventions.
//  * Three kinds of part, each with its own flat parameter vector (tensors back to back, C order,
//    offsets from *_tensors(cfg)) and a weight-gradient vector of the same layout: the embedding
//    (wte [V,C], wpe [T,C]), one block (12 tensors) and the head (ln_f.weight, ln_f.bias,
//    lm_head.weight [V,C]).
//  * A microbatch is `rows` sequences of the same actual length t ≤ T (= cfg.seq). Every function
//    takes t; buffers are sized for T but only their packed prefix is used: activations are
//    [rows, t, C] with element (r, τ, c) at (r·t + τ)·C + c; token ids and targets are int32
//    [rows, t] at r·t + τ. Position τ of every row uses wpe row τ.
//  * Each part has forward / backward_input / backward_weight over a per-microbatch stash (R
//    elements, size *_stash_floats(cfg), sized for T). forward fills it with what the backward needs;
//    backward_input computes the input gradient (none for the embedding) and leaves in the stash the
//    intermediate gradients that backward_weight reads; backward_weight WRITES (never accumulates)
//    this microbatch's gradient of every parameter of the part. backward = backward_input then
//    backward_weight, literally, so splitting the backward gives the same bits. A microbatch's stash
//    must stay untouched from its forward to its backward_weight (one stash per microbatch in flight).
//  * The head's forward returns the SUM of the cross-entropy of its rows·t tokens as a double (each
//    token's term computed in R, summed in double). Its backward_input takes loss_scale = d(loss)/d(sum),
//    e.g. 1/(total tokens of the step) for a mean over every token of every microbatch.
//  * Templates over the element type R (float for training; double for finite-difference checks).
//    Single-threaded with fixed loop orders: the same inputs give the same bits, on every run.
//  * Gradients of a step are the per-microbatch weight gradients added into a zeroed accumulator in
//    microbatch order (add_into); reference_step does exactly that, so a pipelined run that adds
//    each stage's per-microbatch gradients in microbatch order gets identical bits.
//  * Initialisation (GPT-2-like): weights ~ normal(0, 0.02), both c_proj weights ~ normal(0,
//    0.02/√(2L)), biases 0, LayerNorm weights 1. Each tensor draws from its own splitmix64 stream
//    seeded from (seed, tensor name), so a part's values do not depend on how the model is split.
//
// The code is in six headers, in the order each needs the one before: params.hpp (configuration,
// parameter layout, initialisation), kernels.hpp (the building blocks), blocks.hpp (the three
// kinds of part), model.hpp (the whole model unpipelined), corpus.hpp (the text and its
// microbatches) and dump.hpp (the .npy dump); this header includes them all.
#pragma once

#include "params.hpp"
#include "kernels.hpp"
#include "blocks.hpp"
#include "model.hpp"
#include "corpus.hpp"
#include "dump.hpp"
