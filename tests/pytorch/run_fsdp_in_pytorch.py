"""A mesh step written by pipetype-explore, run by PyTorch's own runtime with FSDP over gloo.

pipetype-explore --dp 2 --fsdp --format csv-comms writes a pipeline's compute+comms CSV whose rows
carry the mesh step's UNSHARD, RESHARD and REDUCE_GRAD where pipetype placed them. Four gloo
processes on 127.0.0.1 (pp = 2 x dp = 2, global rank = pipeline rank * 2 + replica, as pipetype's
default dp_inner order) give each pipeline rank its stages (float64 Linear + Tanh), wrap each with
FSDP2 (`fully_shard` over the replica group), load the file into
`_PipelineScheduleRuntime._load_csv(path, format="compute_comms")` and run one step, each replica
on its own 4 microbatches. Torch's runtime then gathers, releases and reduces exactly where the
file says (it refuses to compute on a sharded stage), and every stage's full gradient is compared
with an unpipelined run over all 8 microbatches (the mean over the whole batch: torch's 1/M times
FSDP's 1/dp). A control run of the same file without its UNSHARD cells must fail in torch's own
check. 1F1B and interleaved 1F1B (two stages a rank).

  python run_fsdp_in_pytorch.py --explorer build/release/examples/pipetype-explore [--timeout 150]

Exits 0 when every run matches (max |diff| <= 1e-12) and the control fails as it should, 1
otherwise, 77 when torch cannot be imported.
"""

import argparse
import csv
import datetime
import json
import os
import re
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

WIDTH, ROWS, M, PP, DP = 8, 2, 4, 2, 2
TOLERANCE = 1e-12


def held_stages(path):
    """Per row (pipeline rank), the stages its compute cells name."""
    out = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            cells = [c.strip() for c in row if c.strip()]
            out.append(sorted({int(m.group(1)) for c in cells for m in [re.match(r"^(\d+)[FBIW]\d+$", c)] if m}))
    return out


def make_stage(torch, k):
    torch.manual_seed(1000 + k)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64), torch.nn.Tanh())


def global_batch(torch):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(DP * M * ROWS, WIDTH, generator=g, dtype=torch.float64)
    y = torch.randn(DP * M * ROWS, WIDTH, generator=g, dtype=torch.float64)
    return x, y


def reference(torch, stages):
    """The unpipelined step: every stage over the whole batch, the mean squared error over all of it."""
    mods = [make_stage(torch, k) for k in range(stages)]
    x, y = global_batch(torch)
    h = x
    for m in mods:
        h = m(h)
    torch.nn.MSELoss()(h, y).backward()
    return [[p.grad.detach().clone() for p in m.parameters()] for m in mods]


def worker(path):
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (PP, DP), mesh_dim_names=("pp", "dp"))  # global rank = pp * DP + dp
    pp_rank, dp_rank = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
    held = held_stages(path)
    stages = 1 + max(s for row in held for s in row)
    mods = {}
    for k in held[pp_rank]:
        mods[k] = make_stage(torch, k)
        fully_shard(mods[k], mesh=mesh["dp"], reshard_after_forward=False)
    calls = {"unshard": 0, "reshard": 0}  # what the file's markers made FSDP do
    for name in list(calls):
        original = getattr(FSDPModule, name)

        def counted(self, *a, _original=original, _name=name, **kw):
            calls[_name] += 1
            return _original(self, *a, **kw)

        setattr(FSDPModule, name, counted)
    pipe = [PipelineStage(mods[k], k, stages, torch.device("cpu"), group=mesh["pp"].get_group()) for k in held[pp_rank]]
    schedule = _PipelineScheduleRuntime(pipe, M, loss_fn=torch.nn.MSELoss(), scale_grads=True)
    schedule._load_csv(path, format="compute_comms")
    x, y = global_batch(torch)
    mine = slice(dp_rank * M * ROWS, (dp_rank + 1) * M * ROWS)  # this replica's microbatches
    schedule.step(*((x[mine],) if 0 in held[pp_rank] else ()), target=y[mine] if stages - 1 in held[pp_rank] else None)
    ref = reference(torch, stages)
    worst = 0.0
    for k in held[pp_rank]:
        for p, r in zip(mods[k].parameters(), ref[k]):
            full = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            worst = max(worst, (full - r).abs().max().item())
    print(json.dumps({"rank": dist.get_rank(), "stages": held[pp_rank], "max_diff": worst, "calls": calls}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def environment_worker(env, path):
    """A worker with torch's distributed environment variables set (RANK, WORLD_SIZE, ...), on
    one intra-op thread (four workers share the machine)."""
    import torch

    os.environ.update(env)
    torch.set_num_threads(1)
    worker(path)


def run(path, timeout):
    """Runs the four workers on `path` (forked from one server that imported torch, as
    pipetype_torch's workers); returns (every rank finished, worst diff, reports, errors)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    envs = [dict(RANK=str(r), WORLD_SIZE=str(PP * DP), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            for r in range(PP * DP)]
    with tempfile.TemporaryDirectory(prefix="pipetype-fsdp-workers-") as logs:
        outs = common.run_processes(environment_worker, [(env, path) for env in envs], timeout, logs)
    reports, errors, ok = [], [], True
    for rc, out, err in outs:
        if rc is None:
            err += "\n(timed out)"
        ok = ok and rc == 0
        reports += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if rc != 0:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {rc}")
    return ok, max([r["max_diff"] for r in reports] or [float("inf")]), reports, errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explorer", required=True)
    ap.add_argument("--timeout", type=float, default=150)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (this check needs torch)")
        return 77
    failures = 0
    with tempfile.TemporaryDirectory(prefix="pipetype-fsdp-") as tmp:
        for name, chunks in (("1f1b", 1), ("interleaved-1f1b", 2)):
            path = os.path.join(tmp, f"{name}.csv")
            rc, out, err = common.run_explorer(args.explorer, ["--schedule", name, "--ranks", str(PP), "--chunks", str(chunks),
                                                                "--microbatches", str(M), "--dp", str(DP), "--fsdp",
                                                                "--format", "csv-comms", "--output", path])
            if rc != 0:
                print(f"FAIL {name}: pipetype-explore exited {rc}: {err.strip()}")
                failures += 1
                continue
            ok, worst, reports, errors = run(path, args.timeout)
            gathers = sum(r["calls"]["unshard"] for r in reports)
            good = ok and worst <= TOLERANCE and gathers >= DP * len(held_stages(path)[0] + held_stages(path)[1])
            print(f"{'ok  ' if good else 'FAIL'} {name}, pp {PP} x dp {DP}, FSDP in torch's runtime: "
                  f"{'ran' if ok else 'failed: ' + '; '.join(errors)}; {gathers} gathers; max |grad diff| {worst:.3g}")
            failures += 0 if good else 1
            if name != "1f1b":
                continue
            # the control: without its UNSHARD cells the same file must be refused by torch's own check
            control = os.path.join(tmp, "no_unshard.csv")
            with open(path) as f, open(control, "w") as g:
                for line in f:
                    g.write(",".join(c for c in line.rstrip("\n").split(",") if not c.endswith("UNSHARD")) + "\n")
            ok, _, _, errors = run(control, args.timeout)
            refused = not ok and any("Attempted to compute on sharded" in e for e in errors)
            print(f"{'ok  ' if refused else 'FAIL'} {name} without its UNSHARD cells: "
                  f"{'refused by torch: ' + errors[0] if refused else 'not refused as expected: ' + '; '.join(errors)}")
            failures += 0 if refused else 1
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        sys.exit(main())
