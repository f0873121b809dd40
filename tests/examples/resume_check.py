#!/usr/bin/env python3
"""examples/gpt's checkpoints (--save DIR, --resume DIR), end to end.

  resume_check.py --gpt EXE --dir SCRATCH

1. Four steps equal two, a save, a resume and two more, bit for bit (the printed losses).
2. A checkpoint saved from one layout (2 ranks, plain data parallelism) resumed in another
   (4 ranks, FSDP; ZeRO-1) continues as that layout's own four-step run does, and a
   ZeRO-1 run's own checkpoint resumes bit for bit; so does one of fp16 gradients whose dynamic
   loss scale skipped steps (the scale and Adam's step count are in it).
3. The files are safetensors as other readers see them: an independent parse of the header (8-byte
   little-endian length, JSON, F32 tensors whose offsets tile the data) finds GPT-2's names.
4. A missing, truncated, foreign or other-model checkpoint is refused with exit 2 and one sentence
   naming the file (and the tensor), and no partial file is left behind by a save.
Every run has a timeout; the script prints what it checked and exits non-zero on the first failure.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

SMALL = ["--layers", "4", "--heads", "2", "--width", "16", "--seq", "12", "--rows", "2", "--microbatches", "4",
         "--schedule", "1f1b"]


def run(exe, args, expect_rc=0):
    p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=120)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}{p.stderr}")
    return p


def fields(out):
    return json.loads(out.strip().splitlines()[-1])


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = len(data) - 8 - n
    spans = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t)
        b, e = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        assert e - b == 4 * count, (name, t)
        spans.append((b, e))
    spans.sort()
    at = 0
    for b, e in spans:  # the tensors tile the data, in order, to its end
        assert b == at, (path, b, at)
        at = e
    assert at == body, (path, at, body)
    return header


def refused(exe, args, needle):
    p = run(exe, args, 2)
    lines = p.stderr.strip().splitlines()
    if len(lines) != 1 or needle not in lines[0]:
        sys.exit(f"FAIL: {' '.join(args)}: expected one line with {needle!r}, got\n{p.stderr}")
    print(f"refused: {lines[0]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpt", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    exe, scratch = a.gpt, a.dir
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)

    # 1. the same layout: bit for bit
    plain = SMALL + ["--ranks", "2", "--dp", "2", "--tie-embeddings"]
    whole = fields(run(exe, plain + ["--steps", "4", "--json"]).stdout)
    ck = os.path.join(scratch, "ck")
    run(exe, plain + ["--steps", "2", "--save", ck])
    again = fields(run(exe, plain + ["--steps", "2", "--resume", ck, "--json"]).stdout)
    if again["loss_last"] != whole["loss_last"] or not again["grads_match_reference"]:
        sys.exit(f"FAIL: 4 steps give loss_last {whole['loss_last']}, 2 + resume + 2 give {again['loss_last']}")
    print(f"same layout: loss_last {again['loss_last']} both")

    # 2. another layout: 4 ranks, FSDP, from the 2-rank plain checkpoint
    other = SMALL + ["--ranks", "4", "--dp", "2", "--fsdp", "--tie-embeddings"]
    own = fields(run(exe, other + ["--steps", "4", "--json"]).stdout)
    moved = fields(run(exe, other + ["--steps", "2", "--resume", ck, "--json"]).stdout)
    diff = abs(moved["loss_last"] - own["loss_last"])
    if diff > 1e-5 * abs(own["loss_last"]):
        sys.exit(f"FAIL: another layout resumed gives loss_last {moved['loss_last']}, its own run {own['loss_last']}")
    print(f"another layout: loss_last {moved['loss_last']}, its own run {own['loss_last']} (difference {diff:g})")

    # 2b. ZeRO-1 (each replica's moments for its shard): the plain layout's losses bit for bit, its
    # own checkpoint too, and the plain one resumed into it as its own run goes
    zero = plain + ["--zero", "1"]
    zero_whole = fields(run(exe, zero + ["--steps", "4", "--json"]).stdout)
    if zero_whole["loss_last"] != whole["loss_last"]:
        sys.exit(f"FAIL: ZeRO-1 gives loss_last {zero_whole['loss_last']}, plain data parallelism {whole['loss_last']}")
    zk = os.path.join(scratch, "zero")
    run(exe, zero + ["--steps", "2", "--save", zk])
    zero_again = fields(run(exe, zero + ["--steps", "2", "--resume", zk, "--json"]).stdout)
    if zero_again["loss_last"] != zero_whole["loss_last"] or not zero_again["replica_params_agree"]:
        sys.exit(f"FAIL: ZeRO-1: 4 steps give loss_last {zero_whole['loss_last']}, 2 + resume + 2 give "
                 f"{zero_again['loss_last']}")
    zero_moved = fields(run(exe, zero + ["--steps", "2", "--resume", ck, "--json"]).stdout)
    zdiff = abs(zero_moved["loss_last"] - zero_whole["loss_last"])
    if zdiff > 1e-5 * abs(zero_whole["loss_last"]):
        sys.exit(f"FAIL: the plain checkpoint resumed with ZeRO-1 gives loss_last {zero_moved['loss_last']}, "
                 f"its own run {zero_whole['loss_last']}")
    print(f"ZeRO-1: loss_last {zero_again['loss_last']} both; from the plain checkpoint {zero_moved['loss_last']} "
          f"(difference {zdiff:g})")

    # 2c. fp16 gradients with a dynamic loss scale that overflows and skips (a window of one
    # step): the scale's state and Adam's own step count travel in the checkpoint, so 8 steps =
    # 4 + save + resume + 4 bit for bit, skipped steps and the final scale included
    mixed = plain + ["--grad-dtype", "fp16", "--loss-scale", "dynamic", "--loss-scale-window", "1"]
    mixed_whole = fields(run(exe, mixed + ["--steps", "8", "--json"]).stdout)
    mk = os.path.join(scratch, "mixed")
    first = fields(run(exe, mixed + ["--steps", "4", "--save", mk, "--json"]).stdout)
    mixed_again = fields(run(exe, mixed + ["--steps", "4", "--resume", mk, "--json"]).stdout)
    meta = read_safetensors(os.path.join(mk, "optimizer.safetensors"))["__metadata__"]
    if (mixed_again["loss_last"] != mixed_whole["loss_last"] or mixed_again["loss_scale"] != mixed_whole["loss_scale"]
            or first["skipped_steps"] + mixed_again["skipped_steps"] != mixed_whole["skipped_steps"]
            or mixed_whole["skipped_steps"] < 1):
        sys.exit(f"FAIL: fp16, dynamic loss scale: 8 steps give {mixed_whole}, 4 + resume + 4 give {first}, "
                 f"{mixed_again}")
    if int(meta["adam_step"]) != 4 - first["skipped_steps"] or int(meta["loss_scale_log2"]) < 1:
        sys.exit(f"FAIL: fp16 checkpoint's metadata {meta} after {first['skipped_steps']} skipped steps of 4")
    print(f"fp16, dynamic loss scale: loss_last {mixed_again['loss_last']} both, "
          f"{mixed_whole['skipped_steps']} steps skipped, scale {mixed_whole['loss_scale']:g}")

    # 3. the files as another reader sees them
    model = read_safetensors(os.path.join(ck, "model.safetensors"))
    opt = read_safetensors(os.path.join(ck, "optimizer.safetensors"))
    for name in ["wte.weight", "wpe.weight", "h.0.attn.c_attn.weight", "h.3.mlp.c_proj.bias", "ln_f.weight"]:
        assert name in model, name
        assert "exp_avg." + name in opt and "exp_avg_sq." + name in opt, name
    assert "lm_head.weight" not in model  # tied: wte.weight is the one parameter
    assert opt["__metadata__"]["step"] == "2", opt["__metadata__"]
    assert model["__metadata__"]["n_embd"] == "16", model["__metadata__"]
    leftovers = [f for f in os.listdir(ck) if f.endswith(".partial")]
    assert not leftovers, leftovers
    print(f"safetensors: {len(model) - 1} model tensors, {len(opt) - 1} optimizer tensors, tiled, no partial file")

    # 4. what is refused
    refused(exe, plain + ["--steps", "1", "--resume", os.path.join(scratch, "none")], "cannot read")
    cut = os.path.join(scratch, "cut")
    shutil.copytree(ck, cut)
    path = os.path.join(cut, "model.safetensors")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    refused(exe, plain + ["--steps", "1", "--resume", cut], "ends before tensor 'wte.weight' does")
    foreign = os.path.join(scratch, "foreign")
    shutil.copytree(ck, foreign)
    with open(os.path.join(foreign, "optimizer.safetensors"), "wb") as f:
        f.write(b"\xff" * 64)
    refused(exe, plain + ["--steps", "1", "--resume", foreign], "is no safetensors file")
    wide = os.path.join(scratch, "wide")
    run(exe, [x if x != "16" else "32" for x in plain] + ["--steps", "1", "--save", wide])
    refused(exe, plain + ["--steps", "1", "--resume", wide], "a checkpoint of another model (n_embd 32, this run's 16)")
    untied = os.path.join(scratch, "untied")
    run(exe, [x for x in plain if x != "--tie-embeddings"] + ["--steps", "1", "--save", untied])
    refused(exe, plain + ["--steps", "1", "--resume", untied], "tie_word_embeddings false, this run's true")
    print("resume_check: all checks passed")


if __name__ == "__main__":
    main()
