"""pipetype's order against PyTorch's, rank by rank, for the schedules both libraries ship.

For each pair (p = 4, m = 8, two stages per rank where the family has chunks) it compares the
compute actions of every rank (idle cells and markers left out) and, where they differ, both
orders' simulated makespan and peak activations from pipetype-explore (costs F=1, B=2, I=W=1 per
rank share). Prints a Markdown table; with --doc FILE it also checks that the table between
`<!-- compare_orders -->` markers in FILE is this one (docs/07_pytorch.md), so the docs stay true.

  python compare_orders.py --explorer build/release/examples/pipetype-explore [--doc docs/07_pytorch.md]
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

P, M = 4, 8
PAIRS = [  # pipetype name, PyTorch class, stages per rank
    ("gpipe", "ScheduleGPipe", None),
    ("1f1b", "Schedule1F1B", None),
    ("interleaved-1f1b", "ScheduleInterleaved1F1B", 2),
    ("looped-bfs", "ScheduleLoopedBFS", 2),
    ("zb-v", "ScheduleZBVZeroBubble", 2),
    ("dualpipe-v", "ScheduleDualPipeV", 2),
]


def figures(explorer, args):
    rc, out, err = common.run_explorer(explorer, [*args, "--format", "json"])
    if rc != 0:
        return None, err.strip().removeprefix("pipetype-explore: ")
    j = json.loads(out)
    return (j["makespan"], max(j["peak_activations"])), None


def table(explorer):
    common.quiet_torch()
    import torch

    lines = [
        f"| schedule (p={P}, m={M}) | PyTorch {torch.__version__.split('+')[0]} class | same order per rank | "
        "pipetype makespan / peak | PyTorch makespan / peak |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="pipetype-compare-") as tmp:
        for name, cls_name, v in PAIRS:
            flags = ["--ranks", str(P), "--microbatches", str(M)] + (["--chunks", str(v)] if v else [])
            ours_path = os.path.join(tmp, name + ".csv")
            rc, _, err = common.run_explorer(explorer, ["--schedule", name, *flags, "--format", "csv", "--output", ours_path])
            if rc != 0:
                raise SystemExit(f"pipetype-explore --schedule {name}: {err}")
            theirs_path = os.path.join(tmp, cls_name + ".csv")
            common.dump(cls_name, P, M, theirs_path)
            ours = common.computes(common.read_rows(ours_path))
            theirs = common.computes(common.read_rows(theirs_path))
            same = [r for r in range(P) if r < len(theirs) and ours[r] == theirs[r]]
            verdict = "all ranks" if len(same) == P else ("ranks " + ", ".join(map(str, same)) if same else "none")
            ours_fig, _ = figures(explorer, ["--schedule", name, *flags])
            theirs_fig, why = figures(explorer, ["--file", theirs_path, "--ranks", str(P), "--microbatches", str(M)])
            show = lambda f: f"{f[0]:g} / {f[1]:g}"  # noqa: E731
            if len(same) == P:
                lines.append(f"| {name} | {cls_name} | {verdict} | {show(ours_fig)} | same |")
            else:
                theirs_txt = show(theirs_fig) if theirs_fig else "rejected: " + why.split(": ", 1)[-1].split(" (index")[0]
                lines.append(f"| {name} | {cls_name} | {verdict} | {show(ours_fig)} | {theirs_txt} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explorer", required=True)
    ap.add_argument("--doc")
    args = ap.parse_args()
    t = table(args.explorer)
    print(t, end="")
    if args.doc:
        text = open(args.doc).read()
        marker = "<!-- compare_orders -->"
        parts = text.split(marker)
        if len(parts) != 3:
            print(f"{args.doc}: expected the table between two `{marker}` lines")
            return 1
        if parts[1].strip() != t.strip():
            print(f"{args.doc}: the table differs from what this run measured (above); update the docs")
            return 1
        print(f"{args.doc}: table up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
