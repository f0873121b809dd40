"""Checks a GPT dump of examples/gpt/layers.hpp (write_dump) against GPT-2 written in PyTorch.

The dump directory holds weights/<name>.npy (float32, Hugging Face GPT-2 names without the
`transformer.` prefix, Conv1D layout W [in, out]), batch/input_ids.npy and batch/targets.npy (int64
[microbatches * rows, seq_len]), loss.npy (the mean cross-entropy over every token), grads/<name>.npy
(its gradient for every weight) and config.json (n_layer, n_head, n_embd, vocab_size, seq_len,
microbatches, rows, tied). The model here is written independently with torch ops (pre-LayerNorm
blocks, causal attention, tanh GELU, no dropout; the LM head its own lm_head.weight, or with tied
true wte.weight itself, so that autograd sums both uses) and evaluated in float64 on the
dumped weights and batch; autograd gives the reference gradients. Every tensor must satisfy
|ours - torch| <= 1e-4 * max|torch tensor| + 1e-7 (the loss: 1e-4 * |torch loss| + 1e-7).

  python check_gpt_dump.py DIR [--dtype float64|float32]

Exit 0 when everything matches, 1 when something does not (one line per failing tensor), 77 when
torch (or numpy) cannot be imported.
"""

import argparse
import json
import math
import os
import sys

REL = 1e-4
FLOOR = 1e-7


def block_names(i):
    p = f"h.{i}."
    return [p + n for n in (
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
        "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias")]


def expected_shapes(cfg):
    V, T, C, L = cfg["vocab_size"], cfg["seq_len"], cfg["n_embd"], cfg["n_layer"]
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C)}
    for i in range(L):
        for name, shape in zip(block_names(i), [(C,), (C,), (C, 3 * C), (3 * C,), (C, C), (C,), (C,), (C,),
                                                (C, 4 * C), (4 * C,), (4 * C, C), (C,)]):
            shapes[name] = shape
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    if not cfg.get("tied", False):  # tied: the LM head's weight is wte.weight
        shapes["lm_head.weight"] = (V, C)
    return shapes


def gpt2_loss(torch, W, ids, targets, cfg):
    """Mean cross-entropy of GPT-2 over every token of ids [B, T]."""
    F = torch.nn.functional
    B, T = ids.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    hd = C // H
    h = W["wte.weight"][ids] + W["wpe.weight"][:T].unsqueeze(0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        x = F.layer_norm(h, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps=1e-5)
        qkv = x @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (z.view(B, T, H, hd).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        scores = scores.masked_fill(~causal, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        h = h + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        x = F.layer_norm(h, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps=1e-5)
        u = F.gelu(x @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], approximate="tanh")
        h = h + u @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = F.layer_norm(h, (C,), W["ln_f.weight"], W["ln_f.bias"], eps=1e-5)
    logits = x @ W["wte.weight" if cfg.get("tied", False) else "lm_head.weight"].t()
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))


def main():
    ap = argparse.ArgumentParser(description="check a GPT dump of examples/gpt/layers.hpp against PyTorch")
    ap.add_argument("dir")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    args = ap.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(f"SKIP: {e} (the GPT dump check needs numpy and torch)")
        return 77

    d = args.dir
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    dtype = getattr(torch, args.dtype)
    failures = 0
    shapes = expected_shapes(cfg)

    def load(sub, name):
        return np.load(os.path.join(d, sub, name + ".npy"), allow_pickle=False)

    present = {f[:-4] for f in os.listdir(os.path.join(d, "weights")) if f.endswith(".npy")}
    for extra in sorted(present - set(shapes)):
        print(f"FAIL {extra}: unexpected tensor in weights/")
        failures += 1
    W, ours = {}, {}
    for name, shape in shapes.items():
        try:
            w, g = load("weights", name), load("grads", name)
        except OSError as e:
            print(f"FAIL {name}: {e}")
            failures += 1
            continue
        if w.dtype != np.float32 or g.dtype != np.float32 or w.shape != shape or g.shape != shape:
            print(f"FAIL {name}: weight {w.dtype}{list(w.shape)}, grad {g.dtype}{list(g.shape)}, "
                  f"expected float32{list(shape)}")
            failures += 1
            continue
        W[name] = torch.tensor(w, dtype=dtype, requires_grad=True)
        ours[name] = g.astype(np.float64)
    if failures:
        print(f"{failures} problem(s) with the dump's tensors")
        return 1

    ids = load("batch", "input_ids")
    targets = load("batch", "targets")
    rows_total = cfg["microbatches"] * cfg["rows"]
    if ids.dtype != np.int64 or targets.dtype != np.int64 or ids.shape != (rows_total, cfg["seq_len"]) \
            or targets.shape != ids.shape:
        print(f"FAIL batch: input_ids {ids.dtype}{list(ids.shape)}, targets {targets.dtype}{list(targets.shape)}, "
              f"expected int64[{rows_total}, {cfg['seq_len']}]")
        return 1
    our_loss = float(np.asarray(np.load(os.path.join(d, "loss.npy"))).reshape(-1)[0])

    loss = gpt2_loss(torch, W, torch.from_numpy(ids), torch.from_numpy(targets), cfg)
    loss.backward()
    ref_loss = float(loss.detach())
    worst, bad = 0.0, 0
    if not abs(our_loss - ref_loss) <= REL * abs(ref_loss) + FLOOR:
        print(f"FAIL loss: ours {our_loss:.9g}, torch {ref_loss:.9g}")
        failures += 1
    for name in shapes:
        ref = W[name].grad.detach().to(torch.float64).numpy()
        scale = float(np.abs(ref).max())
        diff = float(np.abs(ours[name] - ref).max())
        tol = REL * scale + FLOOR
        if not diff <= tol:  # also catches NaN
            at = np.unravel_index(int(np.argmax(np.abs(ours[name] - ref))), ref.shape)
            print(f"FAIL {name}: max |ours - torch| {diff:.3g} > {tol:.3g} (max |torch| {scale:.3g}); "
                  f"at {tuple(int(i) for i in at)}: ours {ours[name][at]:.9g}, torch {ref[at]:.9g}")
            bad += 1
        elif scale > 0:
            worst = max(worst, diff / scale)
    failures += bad
    n = len(shapes)
    print(f"GPT dump {d}: L={cfg['n_layer']} H={cfg['n_head']} C={cfg['n_embd']} V={cfg['vocab_size']} "
          f"T={cfg['seq_len']}, {cfg['microbatches']} x {cfg['rows']} rows; loss ours {our_loss:.7f}, "
          f"torch {ref_loss:.7f}; {n - bad}/{n} gradients within "
          f"{REL:g} x max|torch| (worst {worst:.2g})")
    if failures:
        print(f"{failures} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
