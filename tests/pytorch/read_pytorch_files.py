"""PyTorch writes its own schedules; pipetype reads every file and verifies it or names its defect.

For every schedule class the installed torch exports (found by looking, not listed here), at
several sizes, PyTorch generates its order (`_schedule_visualizer.get_schedule_ops`) and the file
is written the way `_dump_csv` writes one (csv.writer over the actions, empty cells for idle):
compute-only, and for multi-stage classes compute+comms (as lowered by
`_PipelineScheduleRuntime`, and again with `defer_pp_recv=True`). PyTorch's shipped test
artifacts (tests/io/data/pytorch/artifacts) are read too. Each file goes through
`pipetype-explore --file F --ranks P --microbatches M --format json`:
  verified   exit 0, valid
  defect     exit 2, one message naming rank, stage, microbatch and action
and anything else (a parse error, a crash, a message without a place) fails the test. An
independent count in Python (every (stage, microbatch) has one F and one B or one I and one W,
indices in range) must agree: a file it finds defective must not verify. Then torch's own
`_load_csv` loads every file (compute_comms when it has transfers, compute_only otherwise), which
must do what pipetype predicted (`"torch": {"loads": ...}` in the explorer's JSON), and every file
it loads runs one step in PyTorch's runtime over gloo, where what happens must be what pipetype
said:
  verified           gradients equal the unpipelined run (exact, or <= 1e-6 when a stage's
                     backwards leave microbatch order)
  transfer mismatch  gradients differ: the k-th receive got another datum (FIFO per peer)
  NCCL deadlock      gradients equal: gloo buffers sends, so only NCCL's blocking rendezvous hangs
(each deadlock is also checked on one NCCL stream per peer and per direction, `--p2p`, and the
table says where it would complete).

  python read_pytorch_files.py --explorer build/release/examples/pipetype-explore [--artifacts DIR] [--keep DIR]
"""

import argparse
import inspect
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SIZES = [(2, 4), (4, 8), (4, 12)]
PLACE = re.compile(r"at rank \d+, stage \d+, microbatch \d+, action \d+[A-Z_]+\d*")


def schedule_classes():
    """Every concrete schedule class the installed torch exports, single- and multi-stage."""
    from torch.distributed.pipelining import schedules as S

    out = []
    for name in S.__all__:
        cls = getattr(S, name, None)
        if not inspect.isclass(cls) or inspect.isabstract(cls):
            continue
        if cls in (S.PipelineScheduleSingle, S.PipelineScheduleMulti):
            continue
        if issubclass(cls, S.PipelineScheduleSingle) or issubclass(cls, S.PipelineScheduleMulti):
            out.append(cls)
    return out


def independent_defect(rows, p, m):
    """A count-level defect found without pipetype, or None."""
    if len(rows) != p:
        return f"{len(rows)} rows for {p} ranks"
    seen = {}
    for row in common.computes(rows):
        for s, k, j in row:
            if j >= m:
                return f"microbatch {j} out of range in {s}{k}{j}"
            seen.setdefault((s, j), []).append(k)
    stages = 1 + max(s for s, _ in seen) if seen else 0
    for s in range(stages):
        for j in range(m):
            ks = sorted(seen.get((s, j), []))
            if ks not in (["B", "F"], ["F", "I", "W"]):
                return f"stage {s} microbatch {j} has {ks}"
    return None


def generate(tmp):
    """PyTorch's own orders as files: (label, path, p, m)."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti

    files, refused = [], []
    for cls in schedule_classes():
        multi = issubclass(cls, PipelineScheduleMulti)
        for p, m in SIZES:
            forms = [("compute", False, False)] + ([("comms", True, False), ("comms-deferred", True, True)] if multi else [])
            for form, comms, defer in forms:
                label = f"{cls.__name__} p={p} m={m} {form}"
                path = os.path.join(tmp, f"{cls.__name__}_p{p}_m{m}_{form}.csv")
                try:
                    common.dump(cls.__name__, p, m, path, comms, defer)
                except Exception as e:  # PyTorch itself refuses this size
                    refused.append((label, f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"))
                    continue
                files.append((label, path, p, m))
    return files, refused


def emulated_nccl(args, files, verdicts):
    """PyTorch's runtime under an emulation of NCCL's blocking point-to-point (gloo underneath,
    pipetype_torch.emulate_nccl): every compute+comms file of p=2 m=4 and p=4 m=8 that pipetype
    verifies runs on one stream per rank (the strictest layout) and must complete with right
    gradients; every one it finds an NCCL deadlock in runs on each stream layout and must hang
    exactly where pipetype says it does (`--p2p`). Returns the number of disagreements."""
    from concurrent.futures import ThreadPoolExecutor

    chosen = [(f, v) for f, v in zip(files, verdicts)
              if "comms" in f[0] and (f[2], f[3]) in ((2, 4), (4, 8)) and v[0] in ("verified", "NCCL deadlock")]
    runs = []  # (label, path, p, m, layout, pipetype says it completes)
    for (label, path, p, m), (kind, _, _) in chosen:
        for layout in (("shared",) if kind == "verified" else ("shared", "per-peer", "per-direction")):
            rc, _, _ = common.run_explorer(args.explorer, ["--file", path, "--ranks", str(p), "--microbatches", str(m),
                                                           "--p2p", layout])
            runs.append((label, path, p, m, layout, rc == 0))
    # one launch per size and layout, all at once (six launches of 2 or 4 workers; most of their
    # time is the 5 s each hanging file waits before it is reported): a file that hangs leaves its transfers'
    # group blocked and the workers go on to the next file
    batches = {}
    for r in runs:
        batches.setdefault((r[2], r[4]), []).append(r)

    retried = []  # (size, layout, why): launches whose workers did not finish the first time

    def launch(batch):
        p, layout = batch[0][2], batch[0][4]
        entries = [{"label": f"{label} [{layout}]", "path": path, "microbatches": m, "format": "compute_comms"}
                   for label, path, _, m, _, _ in batch]
        for attempt in (1, 2):
            try:
                return batch, common.run_files(p, entries, args.timeout, nccl=layout)
            except RuntimeError as e:
                # workers that did not finish at all (no file reported a hang: each reports its own
                # within seconds) are the harness's gloo processes stuck on a loaded machine, not a
                # verdict: run the launch once more, on a fresh port, and say so
                if attempt == 1 and "did not finish" in str(e):
                    retried.append((p, layout, str(e)))
                    continue
                return batch, {x["label"]: {"loads": False, "error": str(e)[:80]} for x in entries}

    print(f"{len(runs)} of them run in PyTorch's runtime under an emulation of NCCL's blocking point-to-point:")
    disagree = 0
    with ThreadPoolExecutor(max_workers=len(batches)) as pool:
        for batch, got in pool.map(launch, batches.values()):
            for label, path, _, _, layout, completes in batch:
                res = got.get(f"{label} [{layout}]", {"loads": False, "error": "no result (an earlier file hung)"})
                if "hangs" in res:
                    what, agree = "hangs: " + res["hangs"], not completes
                elif res.get("loads"):
                    right = common.gradients_match(res["diff"], common.read_rows(path))[0]
                    what, agree = f"completes: max |grad diff| {res['diff']:.3g}", completes and right
                else:
                    what, agree = "fails: " + res["error"], False
                disagree += 0 if agree else 1
                print(f"  {label:<48} {layout:<14} pipetype: {'completes' if completes else 'hangs':<10} emulated NCCL: "
                      f"{what:<42} {'agrees' if agree else 'FAIL: disagrees'}")
    for p, layout, why in retried:
        print(f"  (the p={p} {layout} launch ran twice: the first time {why})")
    return disagree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explorer", required=True)
    ap.add_argument("--artifacts", help="PyTorch's shipped artifacts: NAME_<P>rank_..._<M>mb.csv or zb1p_2rank_*")
    ap.add_argument("--keep", help="also copy the generated files here")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for each group of PyTorch workers")
    args = ap.parse_args()
    common.quiet_torch()
    import torch

    with tempfile.TemporaryDirectory(prefix="pipetype-torch-files-") as tmp:
        files, refused = generate(tmp)
        if args.artifacts:
            sizes = {"dualpipev_4rank_10mb.csv": (4, 10), "zb1p_2rank_2stagep_comms.csv": (2, 8),
                     "zb1p_2rank_2stagep_compute.csv": (2, 8)}
            for name in sorted(os.listdir(args.artifacts)):
                if name in sizes:
                    files.append((f"artifact {name}", os.path.join(args.artifacts, name), *sizes[name]))
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for _, path, _, _ in files:
                with open(path) as src, open(os.path.join(args.keep, os.path.basename(path)), "w") as dst:
                    dst.write(src.read())

        print(f"PyTorch {torch.__version__}: {len(files)} schedule files read by pipetype-explore")
        failures, verified, defects, verdicts = 0, 0, [], []
        for label, path, p, m in files:
            rc, out, err = common.run_explorer(
                args.explorer, ["--file", path, "--ranks", str(p), "--microbatches", str(m), "--format", "json"]
            )
            rows = common.read_rows(path)
            own = independent_defect(rows, p, m)
            try:
                torch_says = json.loads(out)["torch"]  # pipetype's prediction of torch's loader
            except (ValueError, KeyError):
                torch_says = None
            if rc == 0 and json.loads(out).get("valid") is True:
                verdict = "verified (" + json.loads(out).get("notation", "?") + " notation)"
                verified += 1
                if own:
                    verdict = f"FAIL: verified, but a plain count finds: {own}"
                    failures += 1
            elif rc == 2 and PLACE.search(err) and "parse error" not in err:
                msg = err.strip().removeprefix("pipetype-explore: ")
                verdict = "defect: " + msg[msg.index("rejected: ") + 10 :] if "rejected: " in msg else msg
                if "NCCL deadlock" in verdict:  # on which NCCL streams would it complete?
                    sizes = ["--file", path, "--ranks", str(p), "--microbatches", str(m)]
                    fine = [layout for layout in ("per-peer", "per-direction")
                            if common.run_explorer(args.explorer, [*sizes, "--p2p", layout])[0] == 0]
                    verdict += f" [completes with {' and '.join(fine)} streams]" if fine else " [on every stream layout]"
                defects.append((label, verdict))
            else:
                verdict = f"FAIL: exit {rc}: {(err or out).strip()[:300]}"
                failures += 1
            print(f"  {label:<48} {verdict}")
            kind = verdict.split(":")[0].split(" (")[0]
            if kind == "defect":
                kind = "transfer mismatch" if "transfer mismatch" in verdict else "NCCL deadlock" if "NCCL deadlock" in verdict else "defect"
            verdicts.append((kind, verdict, torch_says))
        for label, why in refused:
            print(f"  {label:<48} not generated: PyTorch refuses ({why})")
        print(f"{verified} verified, {len(defects)} with a named defect, {failures} failures, {len(refused)} sizes PyTorch refuses")

        # what PyTorch does with each file, against what pipetype said: torch's loader, then one
        # step in its runtime over gloo for the files it loads
        print("each file loaded by torch's _load_csv and, where it loads, run one step over gloo:")
        for world in sorted({p for _, _, p, _ in files}):
            mine = [(f, v) for f, v in zip(files, verdicts) if f[2] == world and v[2] is not None]
            entries = [{"label": label, "path": path, "microbatches": m, "format": v[2]["format"]}
                       for (label, path, _, m), v in mine]
            try:
                got = common.run_files(world, entries, args.timeout)
            except RuntimeError as e:
                print(f"  FAIL: {e}")
                return 1
            for (label, path, _, _), (kind, _, torch_says) in mine:
                res = got.get(label, {"loads": False, "error": "no result"})
                said = "loads" if torch_says["loads"] else "refuses"
                if not res["loads"]:
                    agree = not torch_says["loads"]
                    what = "refuses: " + res["error"][:60]
                else:
                    d = res["diff"]
                    right = common.gradients_match(d, common.read_rows(path))[0]
                    # verified: right gradients; transfer mismatch: wrong ones (another datum
                    # arrived); NCCL deadlock: gloo buffers sends, so it completes with right ones
                    # (the hang needs NCCL's blocking rendezvous; gloo cannot show it)
                    agree = torch_says["loads"] and (right if kind in ("verified", "NCCL deadlock") else
                                                     kind == "transfer mismatch" and d > 1e-6)
                    what = f"runs: max |grad diff| {d:.3g}"
                failures += 0 if agree else 1
                print(f"  {label:<48} pipetype: {kind:<18} torch {said:<8} | torch: {what:<40} "
                      f"{'agrees' if agree else 'FAIL: disagrees'}")
        failures += emulated_nccl(args, files, verdicts)
        print("every verdict agrees with PyTorch's runtime" if failures == 0 else f"{failures} failures")
        return 1 if failures or not files else 0


if __name__ == "__main__":
    sys.exit(main())
