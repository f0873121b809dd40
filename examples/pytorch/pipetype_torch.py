"""pipetype_torch — PyTorch's side of pipetype's interop (docs/07_pytorch.md).

  python pipetype_torch.py dump CLASS --ranks P --microbatches M [--comms [--defer-recv]] -o FILE
      PyTorch writes its own order for one of its schedule classes (ScheduleZBVZeroBubble,
      ZBVZeroBubble, ...) the way `_dump_csv` writes one: compute-only, or compute+comms as
      `_PipelineScheduleRuntime` lowers it (optionally with defer_pp_recv=True).
  python pipetype_torch.py run FILE [--format compute_only|compute_comms] [--timeout S]
      Runs one training step of FILE in PyTorch's own runtime (`_PipelineScheduleRuntime.
      _load_csv(FILE, format)`) on one gloo process per rank over 127.0.0.1, with float64
      nn.Linear+Tanh stages, and compares every stage's gradients with an unpipelined run of the
      same stages (microbatch by microbatch, accumulated in order, scaled by 1/M as PyTorch's
      scale_grads does). Exit code 0 when they match (exactly, or within 1e-6 when a stage's
      backwards leave microbatch order), 1 otherwise.

Needs torch (CPU is enough). Every worker runs under one deadline and stops by itself.
"""

import csv
import json
import os
import re
import socket
import subprocess
import sys
import time

ACTION = re.compile(r"^(\d+)([A-Z_]+?)(\d*)$")
COMPUTE = {"F", "B", "I", "W", "BW"}


def free_port():
    """A free TCP port on 127.0.0.1 (the workers' rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_rows(path):
    """The rows of a schedule CSV, as lists of cell strings (empty cells dropped)."""
    with open(path, newline="") as f:
        return [[c.strip() for c in row if c.strip()] for row in csv.reader(f)]


def compute_actions(cell):
    """The compute actions (stage, kind, microbatch) of one cell as written; a pair gives two.
    Kinds: F, B, I, W, and BW (the older notation's full backward)."""
    if cell.startswith("("):
        inner = cell[1 : cell.index(")")]
        return [a for part in inner.split(";") for a in compute_actions(part.strip())]
    m = ACTION.match(cell)
    if not m or m.group(2) not in COMPUTE:
        return []
    return [(int(m.group(1)), m.group(2), int(m.group(3)))]


def computes(rows):
    """Every compute action of a file, per row, in the current notation (an older file, with BW or
    with B and W but no I, has B read as I and BW as B)."""
    written = [[a for cell in row for a in compute_actions(cell)] for row in rows]
    kinds = {k for row in written for _, k, _ in row}
    legacy = "BW" in kinds or ("B" in kinds and "W" in kinds and "I" not in kinds)
    rename = {"B": "I", "BW": "B"} if legacy else {}
    return [[(s, rename.get(k, k), j) for s, k, j in row] for row in written]


def has_markers(rows):
    """True when a file holds cells other than compute actions (transfers, waits, markers)."""
    return any(not compute_actions(cell) for row in rows for cell in row)


def stages_of(rows):
    """Which stages each row (rank) computes."""
    return [sorted({s for (s, _, _) in row}) for row in computes(rows)]


def run_workers(world, directory, deadline_s):
    """Starts `world` gloo workers (this file, `worker` RANK) that run every schedule file of
    directory/manifest.json ([{label, path, format, microbatches}]), all under one deadline;
    returns their result dicts {label, format, rank, diff}. Kills every worker and raises
    RuntimeError on a timeout or a failing worker."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "worker", str(r), "--world", str(world), "--port", str(port),
             "--dir", directory],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    end = time.monotonic() + deadline_s
    outs = []
    try:
        for p in procs:
            left = max(1.0, end - time.monotonic())
            out, err = p.communicate(timeout=left)
            outs.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise RuntimeError(f"the PyTorch workers did not finish within {deadline_s} s (a hang?)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for rank, (rc, out, err) in enumerate(outs):
        if rc != 0:
            raise RuntimeError(f"worker {rank} exited with {rc}:\n{err[-4000:]}")
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return results


def run_files(world, entries, deadline_s):
    """Loads every schedule file in `entries` ([{label, path, format, microbatches}], labels
    unique) with torch's `_load_csv` and runs one step of each it loads, on `world` gloo workers;
    returns {label: {"loads": bool, "error": str (when it does not load), "diff": the largest
    gradient difference over the ranks (when it does)}}. Raises RuntimeError on a timeout or a
    failing worker."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pipetype-torch-") as tmp:
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(entries, f)
        out = {}
        for r in run_workers(world, tmp, deadline_s):
            o = out.setdefault(r["label"], {"loads": r["loads"]})
            if r["loads"]:
                o["diff"] = max(o.get("diff", 0.0), r["diff"])
            else:
                o["loads"], o["error"] = False, r["error"]
        return out


def gradients_match(diff, rows):
    """The rule every run is held to: exact when each stage's weight gradients (B or W) keep
    microbatch order, within 1e-6 otherwise. Returns (ok, rule)."""
    exact = keeps_microbatch_order(rows)
    return (diff == 0.0 if exact else diff <= 1e-6), ("exact" if exact else "within 1e-6")


def quiet_torch():
    """Keeps torch's warnings and logging off the test output."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


DIM = 8
ROWS_PER_MICROBATCH = 2


def make_stage_module(torch, k):
    torch.manual_seed(1000 + k)
    return torch.nn.Sequential(torch.nn.Linear(DIM, DIM, dtype=torch.float64), torch.nn.Tanh())


def batch(torch, m):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(m * ROWS_PER_MICROBATCH, DIM, generator=g, dtype=torch.float64)
    y = torch.randn(m * ROWS_PER_MICROBATCH, DIM, generator=g, dtype=torch.float64)
    return x, y


def reference_grads(torch, num_stages, m):
    """Each stage's parameter gradients without a pipeline: microbatch by microbatch, in order."""
    mods = [make_stage_module(torch, k) for k in range(num_stages)]
    x, y = batch(torch, m)
    loss_fn = torch.nn.MSELoss()
    for xs, ys in zip(x.chunk(m), y.chunk(m)):
        h = xs
        for mod in mods:
            h = mod(h)
        loss_fn(h, ys).backward()
    return [[p.grad.detach().clone() / m for p in mod.parameters()] for mod in mods]


def keeps_microbatch_order(rows):
    """True when every stage runs its weight-gradient actions (B or W) in microbatch order."""
    last = {}
    for row in computes(rows):
        for s, k, j in row:
            if k in ("B", "W"):
                if j < last.get(s, -1):
                    return False
                last[s] = j
    return True


def dump(cls_name, p, m, path, comms=False, defer_recv=False):
    """PyTorch's own order of a schedule class, written like `_dump_csv` (empty cells: idle)."""
    quiet_torch()
    from torch.distributed.pipelining import schedules as S
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    cls = getattr(S, cls_name, None) or getattr(S, "Schedule" + cls_name, None)
    if cls is None:
        raise SystemExit(f"pipetype_torch: torch has no schedule class {cls_name}")
    multi = issubclass(cls, S.PipelineScheduleMulti)
    if comms and not multi:
        raise SystemExit(f"pipetype_torch: {cls.__name__} runs its own loop; PyTorch lowers only multi-stage classes")
    kw = {"with_comms": True, "defer_pp_recv": defer_recv} if comms else {}
    rows = get_schedule_ops(cls, p, m, 2 if multi else None, **kw)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        for row in rows:
            w.writerow(["" if a is None else str(a) for a in row])
    return cls.__name__


def worker(args):
    quiet_torch()
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    rank, world = args.worker, args.world
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    with open(os.path.join(args.dir, "manifest.json")) as f:
        manifest = json.load(f)
    for entry in manifest:
        rows = read_rows(entry["path"])
        held = stages_of(rows)
        num_stages = 1 + max(s for r in held for s in r)
        m = entry["microbatches"]
        mods = {k: make_stage_module(torch, k) for k in held[rank]}
        result = {"label": entry["label"], "format": entry["format"], "rank": rank}
        try:  # torch's loader checks the whole file on every rank alike, before any transfer
            stages = [PipelineStage(mods[k], k, num_stages, torch.device("cpu")) for k in held[rank]]
            schedule = _PipelineScheduleRuntime(stages, m, loss_fn=torch.nn.MSELoss(), scale_grads=True)
            schedule._load_csv(entry["path"], format=entry["format"])
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0]
            print(json.dumps({**result, "loads": False, "error": f"{type(e).__name__}: {first[:200]}"}), flush=True)
            dist.barrier()
            continue
        x, y = batch(torch, m)
        losses = []
        step_args = (x,) if 0 in held[rank] else ()
        target = y if num_stages - 1 in held[rank] else None
        schedule.step(*step_args, target=target, losses=losses)
        ref = reference_grads(torch, num_stages, m)
        diff = 0.0
        for k in held[rank]:
            for p, r in zip(mods[k].parameters(), ref[k]):
                diff = max(diff, (p.grad - r).abs().max().item())
        print(json.dumps({**result, "loads": True, "diff": diff}), flush=True)
        dist.barrier()
    dist.destroy_process_group()



def main(argv):
    import argparse

    ap = argparse.ArgumentParser(prog="pipetype_torch.py")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="PyTorch writes its own order of a schedule class")
    d.add_argument("cls")
    d.add_argument("--ranks", type=int, required=True)
    d.add_argument("--microbatches", type=int, required=True)
    d.add_argument("--comms", action="store_true", help="compute+comms, as _PipelineScheduleRuntime lowers it")
    d.add_argument("--defer-recv", action="store_true", help="with defer_pp_recv=True")
    d.add_argument("-o", "--output", required=True)
    r = sub.add_parser("run", help="one step of a schedule file in PyTorch's runtime, gradients checked")
    r.add_argument("file")
    r.add_argument("--format", choices=["compute_only", "compute_comms"], default=None,
                   help="default: compute_comms when the file has SEND/RECV cells")
    r.add_argument("--timeout", type=float, default=300)
    w = sub.add_parser("worker")
    w.add_argument("rank", type=int)
    w.add_argument("--world", type=int, required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--dir", required=True)
    args = ap.parse_args(argv)
    if args.command == "worker":
        args.worker = args.rank
        worker(args)
        return 0
    if args.command == "dump":
        name = dump(args.cls, args.ranks, args.microbatches, args.output, args.comms, args.defer_recv)
        form = "compute+comms" + (" (receives deferred)" if args.defer_recv else "") if args.comms else "compute-only"
        print(f"wrote {args.output}: {name}, {args.ranks} ranks, {args.microbatches} microbatches, {form}")
        return 0
    rows = read_rows(args.file)
    fmt = args.format or ("compute_comms" if any("SEND_" in c or "RECV_" in c for row in rows for c in row) else "compute_only")
    m = 1 + max(j for row in computes(rows) for _, _, j in row)
    try:
        got = run_files(len(rows), [{"label": args.file, "path": os.path.abspath(args.file), "format": fmt,
                                     "microbatches": m}], args.timeout)[args.file]
    except RuntimeError as e:
        print(f"pipetype_torch: {e}")
        return 1
    if not got["loads"]:
        print(f"{args.file} ({fmt}): torch refuses to load it: {got['error']}")
        return 1
    diff = got["diff"]
    ok, rule = gradients_match(diff, rows)
    print(f"{args.file} ({fmt}) on {len(rows)} gloo ranks, {m} microbatches: max |grad diff| {diff:.3g} against the "
          f"unpipelined run: {'match' if ok else 'MISMATCH'} ({rule} expected)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
