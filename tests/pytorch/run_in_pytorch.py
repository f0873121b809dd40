"""pipetype's schedules, written by pipetype-explore, run in PyTorch's own pipelining runtime.

For every built-in schedule PyTorch can express (all but DualPipe's two directions; zb-auto at two
memory limits with unequal costs), pipetype-explore writes PyTorch's compute-only CSV and its
compute+comms CSV; P gloo processes on 127.0.0.1 load each file with
`_PipelineScheduleRuntime._load_csv(path, format=...)`, run one training step over small
float64 `nn.Linear` stages, and compare every parameter's gradient with an unpipelined run of the
same stages (microbatch by microbatch, accumulated in microbatch order, scaled by 1/M as PyTorch's
`scale_grads` does). Orders that keep each stage's microbatch order must match exactly, others
within 1e-6. The compute+comms files run a second time with the transfers made to block as NCCL's
do, on one stream per rank (pipetype_torch.emulate_nccl): pipetype's order must complete there too.

  python run_in_pytorch.py --explorer build/release/examples/pipetype-explore [--ranks 4] [--microbatches 8]

Prints one line per schedule and format; exits non-zero when a file fails to load or run, a
gradient differs, or the workers do not finish in time.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# name, explorer flags (zb-auto: unequal costs, two memory limits)
SCHEDULES = [
    ("gpipe", []),
    ("1f1b", []),
    ("interleaved-1f1b", ["--chunks", "2"]),
    ("looped-bfs", ["--chunks", "2"]),
    ("zb-h1", []),
    ("zb-h2", []),
    ("zb-v", []),
    ("dualpipe-v", []),
    ("zb-auto", ["--cost-f", "1", "--cost-i", "1.5", "--cost-w", "0.7", "--mem-limit", "4"]),
    ("zb-auto", ["--cost-f", "1", "--cost-i", "1.5", "--cost-w", "0.7", "--mem-limit", "8"]),
]
FORMATS = [("csv", "compute_only"), ("csv-comms", "compute_comms")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explorer")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    p, m = args.ranks, args.microbatches
    with tempfile.TemporaryDirectory(prefix="pipetype-torch-") as tmp:
        manifest = []
        for name, flags in SCHEDULES:
            label = name + ("" if "--mem-limit" not in flags else " (limit " + flags[flags.index("--mem-limit") + 1] + ")")
            for fmt, torch_format in FORMATS:
                path = os.path.join(tmp, f"{len(manifest)}.csv")
                rc, out, err = common.run_explorer(
                    args.explorer,
                    ["--schedule", name, "--ranks", str(p), "--microbatches", str(m), *flags, "--format", fmt, "--output", path],
                )
                if rc != 0:
                    print(f"FAIL {label} {fmt}: pipetype-explore exited {rc}: {err.strip()}")
                    return 1
                manifest.append({"label": f"{label} {torch_format}", "format": torch_format, "path": path,
                                 "microbatches": m, "rows": common.read_rows(path)})
        entries = [{k: e[k] for k in ("label", "format", "path", "microbatches")} for e in manifest]
        try:
            got = common.run_files(p, entries, args.timeout)
            # the compute+comms files once more, with PyTorch's transfers made to block as NCCL's do
            # on one stream per rank (pipetype_torch.emulate_nccl): pipetype's order must not hang
            nccl = common.run_files(p, [e for e in entries if e["format"] == "compute_comms"], args.timeout,
                                    nccl="shared")
        except RuntimeError as e:
            print(f"FAIL: {e}")
            return 1
    failures = 0
    print(f"pipetype schedules in PyTorch's runtime: {p} gloo ranks, {m} microbatches, float64 nn.Linear stages")
    print(f"{'schedule':<20} {'format':<14} {'max |grad diff|':>16}  {'emulated NCCL':<22} verdict")
    for entry in manifest:
        name, fmt = entry["label"].rsplit(" ", 1)
        res = got.get(entry["label"], {"loads": False, "error": "no result"})
        if not res["loads"]:
            print(f"{name:<20} {fmt:<14} {'-':>16}  FAIL (torch does not load it: {res['error']})")
            failures += 1
            continue
        d = res["diff"]
        ok, rule = common.gradients_match(d, entry["rows"])
        emulated = "-"
        if fmt == "compute_comms":
            e = nccl.get(entry["label"], {"loads": False, "error": "no result"})
            emulated = ("hangs: " + e["hangs"]) if "hangs" in e else (f"completes, {e['diff']:.3g}" if e["loads"] else "fails")
            ok = ok and e.get("loads") and "hangs" not in e and common.gradients_match(e["diff"], entry["rows"])[0]
        failures += 0 if ok else 1
        print(f"{name:<20} {fmt:<14} {d:>16.3g}  {emulated:<22} {'ok' if ok else 'FAIL'} ({rule})")
    print("all gradients match the unpipelined run" if failures == 0 else f"{failures} schedule files failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
