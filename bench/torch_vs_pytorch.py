"""The same GPT trained by PyTorch's own pipelining runtime and by pipetype (docs/14).

PyTorch's side: torch.distributed.pipelining (PipelineStage, Schedule1F1B and
ScheduleInterleavedZeroBubble) in `world` gloo processes on 127.0.0.1, one intra-op thread each.
pipetype's side: examples/torch_gpt (the same decoder in torch::nn, its stages module_stage) on the
host executor, `world` rank threads with one intra-op thread each: the same threads in all. Both
run examples/gpt's shape (pre-LayerNorm blocks, causal attention, a tanh-GELU MLP, ln_f, an LM head,
the mean cross-entropy over every token) at two sizes, 8 microbatches of 4 × 64 tokens, one stage
per rank (1F1B) or two (the interleaved zero-bubble schedule; pipetype's counterpart is zb-v, whose
two stages per rank are placed as a V where PyTorch's loop). Each run takes the median of its
steps after one warm-up step; every process runs under a deadline and the table ends the output.

  python bench/torch_vs_pytorch.py --torch-gpt build/release/examples/torch_gpt [--steps N]

Exit 0 when every run finished, 1 otherwise (the failing run's last words are printed), 77 when
torch cannot be imported.
"""

import argparse
import datetime
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {"small": dict(layers=8, heads=4, width=64), "large": dict(layers=8, heads=4, width=256)}
SEQ, ROWS, MICROBATCHES, VOCAB = 64, 4, 8, 128
SCHEDULES = {"1f1b": ("Schedule1F1B", 1), "zb": ("ScheduleInterleavedZeroBubble", 2)}
PIPETYPE = {"1f1b": "1f1b", "zb": "zb-v"}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_stage(torch, size, index, stages):
    """Stage `index` of `stages`: whole blocks, the embeddings on the first, ln_f and the head on the last."""
    nn, F = torch.nn, torch.nn.functional
    C, H, L = size["width"], size["heads"], size["layers"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
            q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.last = index == 0, index == stages - 1
            if self.first:
                self.wte, self.wpe = nn.Embedding(VOCAB, C), nn.Embedding(SEQ, C)
            self.blocks = nn.ModuleList(Block() for _ in range(index * L // stages, (index + 1) * L // stages))
            if self.last:
                self.ln_f, self.lm_head = nn.LayerNorm(C), nn.Linear(C, VOCAB, bias=False)

        def forward(self, x):
            if self.first:
                x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
            for b in self.blocks:
                x = b(x)
            return self.lm_head(self.ln_f(x)) if self.last else x

    return Stage()


def worker(a):
    import torch
    import torch.distributed as dist
    from torch.distributed import pipelining

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout))
    size = SIZES[a.size]
    cls, per_rank = SCHEDULES[a.schedule]
    stages = a.world * per_rank
    torch.manual_seed(1234)
    held = [a.rank + k * a.world for k in range(per_rank)]  # PyTorch's looped placement
    mods = {i: build_stage(torch, size, i, stages) for i in held}
    pstages = [pipelining.PipelineStage(mods[i], i, stages, torch.device("cpu")) for i in held]

    def loss_fn(logits, target):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))

    schedule_cls = getattr(pipelining, cls)
    sched = schedule_cls(pstages[0] if per_rank == 1 else pstages, MICROBATCHES, loss_fn=loss_fn)
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, VOCAB, (MICROBATCHES * ROWS, SEQ), generator=g)
    y = torch.randint(0, VOCAB, (MICROBATCHES * ROWS, SEQ), generator=g)
    times = []
    for step in range(a.steps + 1):
        for m in mods.values():
            m.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = time.perf_counter()
        args = (x,) if 0 in held else ()
        target = y if stages - 1 in held else None
        sched.step(*args, target=target, losses=[] if target is not None else None)
        dist.barrier()
        if step > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    if a.rank == 0:
        print(json.dumps({"step_ms": statistics.median(times)}), flush=True)
    dist.destroy_process_group()


def run_pytorch(size, world, schedule, steps, timeout):
    port = free_port()
    logs = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in range(world)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r), "--world",
                               str(world), "--port", str(port), "--size", size, "--schedule", schedule, "--steps",
                               str(steps), "--timeout", str(timeout)],
                              stdout=logs[r][0], stderr=logs[r][1], text=True) for r in range(world)]
    end = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = []
    for p, (o, e) in zip(procs, logs):
        o.seek(0)
        e.seek(0)
        out.append((p.returncode, o.read(), e.read()))
    if any(rc != 0 for rc, _, _ in out):
        last = next((err.strip().splitlines()[-1:] for rc, _, err in out if rc != 0 and err.strip()), ["(no output)"])
        raise RuntimeError(f"PyTorch {SCHEDULES[schedule][0]} on {world} processes failed: {last[0][:300]}")
    return json.loads(next(line for line in out[0][1].splitlines() if line.startswith("{")))["step_ms"]


def run_pipetype(exe, size, world, schedule, steps, timeout):
    s = SIZES[size]
    cmd = [exe, "--schedule", PIPETYPE[schedule], "--ranks", str(world), "--microbatches", str(MICROBATCHES),
           "--layers", str(s["layers"]), "--heads", str(s["heads"]), "--width", str(s["width"]), "--seq", str(SEQ),
           "--rows", str(ROWS), "--steps", str(steps + 1), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["step_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch-gpt", help="examples/torch_gpt, release build")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=300, help="seconds for each run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--size", default="small", help=argparse.SUPPRESS)
    ap.add_argument("--schedule", default="1f1b", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    if not a.torch_gpt:
        ap.error("--torch-gpt is required")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (this comparison needs torch)")
        return 77
    rows, failed, one_rank = [], 0, {}
    cores = os.cpu_count() or 1
    for size in SIZES:
        # pipetype's own step on one rank: what a pipeline of p ranks on this machine can at best
        # reach, (m + p - 1) / m of the p-th part of it, and never less than the cores allow
        try:
            one_rank[size] = run_pipetype(a.torch_gpt, size, 1, "1f1b", a.steps, a.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"FAILED {size} one rank: {e}")
            failed += 1
        for world in (2, 4):
            for schedule in SCHEDULES:
                try:
                    theirs = run_pytorch(size, world, schedule, a.steps, a.timeout)
                    ours = run_pipetype(a.torch_gpt, size, world, schedule, a.steps, a.timeout)
                    rows.append((size, world, schedule, theirs, ours))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"FAILED {size} world {world} {schedule}: {e}")
                    failed += 1
    print(f"\nthe same GPT, {MICROBATCHES} microbatches of {ROWS} x {SEQ} tokens, one intra-op thread per rank; "
          f"median step (ms) of {a.steps}")
    print(f"bound: pipetype's one-rank step T1 (small {one_rank.get('small', 0):.1f} ms, large "
          f"{one_rank.get('large', 0):.1f} ms) as a pipeline of p ranks on {cores} cores can at best run it, "
          f"max((m + p - 1) / m * T1 / p, T1 / cores)")
    print(f"{'size':<7}{'world':>6}  {'PyTorch schedule':<30}{'PyTorch':>9}  {'pipetype':<10}{'pipetype':>9}{'ratio':>8}"
          f"{'bound':>8}{'pipetype/bound':>16}")
    for size, world, schedule, theirs, ours in rows:
        t1 = one_rank.get(size, 0.0)
        bound = max((MICROBATCHES + world - 1) / MICROBATCHES * t1 / world, t1 / min(world, cores))
        print(f"{size:<7}{world:>6}  {SCHEDULES[schedule][0]:<30}{theirs:>9.1f}  {PIPETYPE[schedule]:<10}{ours:>9.1f}"
              f"{ours / theirs:>8.2f}{bound:>8.1f}{(ours / bound if bound else 0):>16.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
