"""pipetype_torch — PyTorch's side of pipetype's interop (docs/07_pytorch.md).

  python pipetype_torch.py dump CLASS --ranks P --microbatches M [--comms [--defer-recv]] -o FILE
      PyTorch writes its own order for one of its schedule classes (ScheduleZBVZeroBubble,
      ZBVZeroBubble, ...) the way `_dump_csv` writes one: compute-only, or compute+comms as
      `_PipelineScheduleRuntime` lowers it (optionally with defer_pp_recv=True).
  python pipetype_torch.py run FILE [--format compute_only|compute_comms] [--nccl LAYOUT] [--timeout S]
      Runs one training step of FILE in PyTorch's own runtime (`_PipelineScheduleRuntime.
      _load_csv(FILE, format)`) on one gloo process per rank over 127.0.0.1, with float64
      nn.Linear+Tanh stages, and compares every stage's gradients with an unpipelined run of the
      same stages (microbatch by microbatch, accumulated in order, scaled by 1/M as PyTorch's
      scale_grads does). Exit code 0 when they match (exactly, or within 1e-6 when a stage's
      backwards leave microbatch order), 1 otherwise. --nccl shared|per-peer|per-direction makes
      the transfers block as NCCL's do (emulate_nccl), on one stream per rank, per peer or per
      peer and direction: an order that would hang on NCCL hangs here too, and is reported.

Needs torch (CPU is enough). Every worker runs under one deadline and stops by itself.
"""

import csv
import json
import os
import re
import socket
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


def stages_of(rows):
    """Which stages each row (rank) computes."""
    return [sorted({s for (s, _, _) in row}) for row in computes(rows)]


_forkserver = None


def workers_context():
    """Where workers come from: forked from a server process that imported torch once
    (multiprocessing's forkserver), instead of each starting Python and importing torch (3 s of
    CPU a worker: a test that started 30 workers spent most of its time there). The server is
    single-threaded, so its forks are safe; each worker then makes its own process group."""
    global _forkserver
    if _forkserver is None:
        import multiprocessing

        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # read when the server imports torch
        _forkserver = multiprocessing.get_context("forkserver")
        _forkserver.set_forkserver_preload(["torch", "torch.distributed", "torch.distributed.pipelining",
                                            "torch.distributed.fsdp"])
    return _forkserver


def _to_files(target, args, out_path, err_path):
    """A worker: its stdout and stderr go to files (a worker whose pipe filled up, as when torch
    logs a failed step's whole table, would block while its siblings are read)."""
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    target(*args)


def run_processes(target, argsets, deadline_s, directory):
    """Runs target(*args) for each of `argsets` in a worker of its own (workers_context), all under
    one deadline, their output in `directory`; returns [(exit code, stdout, stderr)] in order, the
    exit code None for every worker when the deadline passed (they are killed then)."""
    ctx = workers_context()
    logs = [(os.path.join(directory, f"worker{i}.out"), os.path.join(directory, f"worker{i}.err"))
            for i in range(len(argsets))]
    procs = [ctx.Process(target=_to_files, args=(target, args, *log), daemon=True) for args, log in zip(argsets, logs)]
    for p in procs:
        p.start()

    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""

    end = time.monotonic() + deadline_s
    late = False
    for p in procs:
        p.join(timeout=max(1.0, end - time.monotonic()))
        if p.exitcode is None:
            late = True
            for q in procs:
                q.kill()
                q.join()
            break
    return [(None if late else p.exitcode, read(out), read(err)) for p, (out, err) in zip(procs, logs)]


def run_workers(world, directory, deadline_s, nccl=None):
    """Starts `world` gloo workers that run every schedule file of directory/manifest.json
    ([{label, path, format, microbatches}]), all under one deadline; returns their result dicts
    {label, format, rank, loads, diff | error | hangs}. With `nccl` (shared, per-peer,
    per-direction) the workers emulate NCCL's blocking point-to-point (emulate_nccl). Kills every
    worker and raises RuntimeError on a timeout or a failing worker."""
    port = free_port()
    outs = run_processes(worker, [(r, world, port, directory, nccl) for r in range(world)], deadline_s, directory)
    if outs[0][0] is None:
        said = [err.strip().splitlines()[-2:] for _, _, err in outs]
        raise RuntimeError(f"the PyTorch workers did not finish within {deadline_s} s (a hang?); their last words: " +
                           "; ".join(f"worker {r}: {' | '.join(w) or '-'}" for r, w in enumerate(said)))
    results = []
    for rank, (rc, out, err) in enumerate(outs):
        if rc != 0:
            raise RuntimeError(f"worker {rank} exited with {rc}:\n{err[-4000:]}")
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return results


def run_files(world, entries, deadline_s, nccl=None):
    """Loads every schedule file in `entries` ([{label, path, format, microbatches}], labels
    unique) with torch's `_load_csv` and runs one step of each it loads, on `world` gloo workers;
    returns {label: {"loads": bool, "error": str (when it does not load), "diff": the largest
    gradient difference over the ranks (when it runs through), "hangs": where (when a rank's
    wait never ends under `nccl` emulation)}}. Raises RuntimeError on a timeout or a failing
    worker."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pipetype-torch-") as tmp:
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(entries, f)
        out = {}
        for r in run_workers(world, tmp, deadline_s, nccl):
            o = out.setdefault(r["label"], {"loads": r["loads"]})
            if "hangs" in r:
                o["hangs"] = o.get("hangs") or r["hangs"]
            elif r["loads"]:
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


class _Hang(Exception):
    pass


def emulate_nccl(dist, rank, streams, wait_s):
    """Makes torch.distributed's isend/irecv behave as NCCL's point-to-point on gloo: every op
    runs on a stream (a thread) in issue order — one per rank (`shared`), per peer (`per-peer`) or
    per peer and direction (`per-direction`) — and blocks that stream until its partner is
    reached (a request/acknowledge handshake before the data), FIFO per directed pair. A wait on
    an op that has not completed within `wait_s` seconds raises _Hang: the order would hang. The
    rank that finds it says so in the process group's store, and every rank's waits on the same
    schedule end at once (each would end after its own `wait_s` anyway, one after another).
    Each schedule's transfers run on a gloo group of their own (`wrap`), so the threads that a
    hang leaves blocked hold only that group, and the next schedule starts clean in the same
    processes."""
    import queue
    import threading

    import torch
    import torch.distributed.distributed_c10d as c10d

    real_isend, real_irecv = c10d.isend, c10d.irecv  # (c10d.send and recv call the patched names)
    lanes = {}
    group = [None]  # the current schedule's gloo group (wrap)
    store, schedules = c10d._get_default_store(), [0]  # a hang of schedule n sets the key pipetype_hang_n

    def send(tensor, peer, tag, g):
        real_isend(tensor, peer, group=g, tag=tag).wait()

    def recv(tensor, peer, tag, g):
        real_irecv(tensor, peer, group=g, tag=tag).wait()

    class Work:
        def __init__(self, what):
            self.what, self.done, self.error = what, threading.Event(), None

        def wait(self, timeout=None):
            end = time.monotonic() + wait_s
            while not self.done.wait(0.05):
                if time.monotonic() > end:
                    store.set(f"pipetype_hang_{schedules[0]}", str(rank))
                    raise _Hang(f"rank {rank} waits for {self.what}")
                if store.check([f"pipetype_hang_{schedules[0]}"]):  # another rank found the hang
                    raise _Hang(f"rank {rank} waits for {self.what}")
            if self.error:
                raise self.error
            return True

        def is_completed(self):
            return self.done.is_set()

    def run(q):
        token = torch.zeros(1)
        while True:
            op, tensor, peer, work, g = q.get()
            try:
                if op == "send":  # announce, wait until the receiver is there, then the data
                    send(token, peer, 1, g)
                    recv(token, peer, 2, g)
                    send(tensor, peer, 3, g)
                else:
                    recv(token, peer, 1, g)
                    send(token, peer, 2, g)
                    recv(tensor, peer, 3, g)
            except Exception as e:  # noqa: BLE001
                work.error = e
            work.done.set()

    def issue(op, tensor, peer):
        key = 0 if streams == "shared" else peer if streams == "per-peer" else (peer, op)
        if key not in lanes:
            lanes[key] = queue.Queue()
            threading.Thread(target=run, args=(lanes[key],), daemon=True).start()
        work = Work(f"{op} {'to' if op == 'send' else 'from'} rank {peer}")
        lanes[key].put((op, tensor, peer, work, group[0]))
        return work

    active = [False]  # on once the schedule's stages are initialised (their shape exchange is plain)

    def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
        if not active[0]:
            return real_isend(tensor, dst, group=group, tag=tag, group_dst=group_dst)
        return issue("send", tensor, dst if dst is not None else group_dst)

    def irecv(tensor, src=None, group=None, tag=0, group_src=None):
        if not active[0]:
            return real_irecv(tensor, src, group=group, tag=tag, group_src=group_src)
        return issue("recv", tensor, src if src is not None else group_src)

    c10d.isend, c10d.irecv = isend, irecv
    dist.isend, dist.irecv = isend, irecv

    class Emulation:
        @staticmethod
        def off():  # plain gloo until the next wrap (building the next file's stages)
            active[0] = False

        @staticmethod
        def wrap(schedule):  # the emulation starts after the schedule initialises its stages
            # (every rank calls this for every file, in one order: new_group is collective)
            active[0] = False
            lanes.clear()  # a hang's blocked lanes stay with the old group
            group[0] = dist.new_group(backend="gloo")
            schedules[0] += 1
            init = schedule._initialize_stages

            def initialize_then_emulate(*a, **k):
                out = init(*a, **k)
                active[0] = True
                return out

            schedule._initialize_stages = initialize_then_emulate

    return Emulation()


def worker(rank, world, port, directory, nccl=None, hang_s=5.0):
    """One gloo rank of run_workers: runs every file of directory/manifest.json, one JSON line each."""
    quiet_torch()
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    emulation = emulate_nccl(dist, rank, nccl, hang_s) if nccl else None
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    for entry in manifest:
        if emulation:
            emulation.off()
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
            if emulation:  # the stages' shape exchange before the first step stays plain gloo
                emulation.wrap(schedule)
        except Exception as e:
            first = (str(e).strip().splitlines() or [""])[0]
            print(json.dumps({**result, "loads": False, "error": f"{type(e).__name__}: {first[:200]}"}), flush=True)
            dist.barrier()
            continue
        x, y = batch(torch, m)
        losses = []
        step_args = (x,) if 0 in held[rank] else ()
        target = y if num_stages - 1 in held[rank] else None
        try:
            schedule.step(*step_args, target=target, losses=losses)
        except Exception as e:  # noqa: BLE001 — _Hang, or what the schedule made of it
            if not nccl:
                raise
            # the streams of this file are stuck for good (on its own group): report, go on
            print(json.dumps({**result, "loads": True, "hangs": str(e).splitlines()[0][:200]}), flush=True)
        else:
            ref = reference_grads(torch, num_stages, m)
            diff = 0.0
            for k in held[rank]:
                for p, r in zip(mods[k].parameters(), ref[k]):
                    diff = max(diff, (p.grad - r).abs().max().item())
            print(json.dumps({**result, "loads": True, "diff": diff}), flush=True)
        dist.barrier()  # on the default group, which a hang leaves untouched
    if not nccl:
        dist.destroy_process_group()
    else:  # threads a hang left blocked would hold up the group's teardown
        sys.stdout.flush()
        os._exit(0)



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
    r.add_argument("--nccl", choices=["shared", "per-peer", "per-direction"], default=None,
                   help="make the transfers block as NCCL's do, on one stream per rank, per peer or per direction")
    args = ap.parse_args(argv)
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
                                     "microbatches": m}], args.timeout, args.nccl)[args.file]
    except RuntimeError as e:
        print(f"pipetype_torch: {e}")
        return 1
    if not got["loads"]:
        print(f"{args.file} ({fmt}): torch refuses to load it: {got['error']}")
        return 1
    if "hangs" in got:
        print(f"{args.file} ({fmt}) on {len(rows)} gloo ranks with NCCL's blocking transfers ({args.nccl} streams): "
              f"hangs ({got['hangs']})")
        return 1
    diff = got["diff"]
    ok, rule = gradients_match(diff, rows)
    print(f"{args.file} ({fmt}) on {len(rows)} gloo ranks, {m} microbatches: max |grad diff| {diff:.3g} against the "
          f"unpipelined run: {'match' if ok else 'MISMATCH'} ({rule} expected)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
