#!/usr/bin/env python3
"""Inputs too large for the fuzzer's -max_len, generated here: each is refused with one sentence or
processed, never a hang or a crash (the CTest's TIMEOUT guards the time; no timing is asserted).

  large_input.py --explorer EXE --train-mlp EXE --train-graph EXE --out DIR

Cases (docs/03, 3.6): a 2 MB `edges` line of a dense 650-stage graph (once checked pairwise, it
took minutes), the same with one edge repeated at its end, more edges than pipetype::limits::edges,
a dense 140-stage graph at 512 microbatches (edges x microbatches past pipetype::limits::cells),
and the trainers given such files or more ranks than their --ranks cap.
"""
import argparse
import os
import subprocess
import sys


def dense_edges(stages):
    return [(i, j) for i in range(stages) for j in range(i + 1, stages)]


def write(path, edges, rows):
    with open(path, "w") as f:
        f.write("edges " + ", ".join(f"{a}>{b}" for a, b in edges) + "\n")
        f.write("\n".join(rows) + "\n")


def one_rank(stages, m):
    """every stage on rank 0: each microbatch's forwards in order, then its backwards in reverse"""
    acts = [f"{s}F{j}" for j in range(m) for s in range(stages)]
    acts += [f"{s}B{j}" for j in range(m) for s in reversed(range(stages))]
    return [",".join(acts)]


def per_rank(stages, m):
    """stage s on rank s, GPipe order"""
    return [",".join([f"{s}F{j}" for j in range(m)] + [f"{s}B{j}" for j in range(m)]) for s in range(stages)]


failures = []


def run(name, cmd, rc, *needles):
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    ok = p.returncode == rc and all(n in out for n in needles)
    # a refusal is one sentence on stderr, never a trace or an abort
    if rc == 2:
        ok = ok and len(p.stderr.strip().splitlines()) >= 1 and "terminate called" not in out
    print(f"{'ok ' if ok else 'FAIL'} {name}: exit {p.returncode}")
    if not ok:
        failures.append(name)
        print(f"  expected exit {rc} and {needles!r}\n  stderr: {p.stderr[:600]}\n  stdout: {p.stdout[:300]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explorer", required=True)
    ap.add_argument("--train-mlp", required=True)
    ap.add_argument("--train-graph", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    path = lambda n: os.path.join(a.out, n)

    edges650 = dense_edges(650)  # 210925 edges, about 1.8 MB
    write(path("dense650.txt"), edges650, one_rank(650, 1))
    assert os.path.getsize(path("dense650.txt")) > 1_500_000
    run("a 2 MB edges line: checked in n log n and verified", [a.explorer, "--file", path("dense650.txt"),
        "--format", "json"], 0, '"valid": true', '"stages": 650')
    write(path("dense650_repeat.txt"), edges650 + [(3, 500)], one_rank(650, 1))
    run("a 2 MB edges line with its last edge repeated", [a.explorer, "--file", path("dense650_repeat.txt")], 2,
        "edge 210925: an edge appears twice")
    many = [(i // 1000, 2000 + i % 1000) for i in range(1_048_577)]  # past limits::edges, every one distinct
    write(path("many_edges.txt"), many, ["0F0,0B0"])
    run("more edges than pipetype::limits::edges", [a.explorer, "--file", path("many_edges.txt")], 2,
        "more than 1048576 edges (pipetype::limits::edges)")
    write(path("dense140_m512.txt"), dense_edges(140), per_rank(140, 512))
    run("a dense graph at 512 microbatches: edges x microbatches past limits::cells",
        [a.explorer, "--file", path("dense140_m512.txt")], 2,
        "edges x microbatches above 4194304 (pipetype::limits::cells)")
    # the trainers: train_mlp trains chains, within its flags' caps; train_graph its own graphs
    run("train_mlp refuses a dense graph file", [a.train_mlp, "--file", path("dense650.txt")], 2,
        "gives a stage graph (an `edges` line)", "train_graph")
    with open(path("wide.txt"), "w") as f:
        f.write("\n".join(f"{r}F0,{r}B0" for r in range(200)) + "\n")
    run("train_mlp keeps its --ranks cap for a file", [a.train_mlp, "--file", path("wide.txt")], 2,
        "has 200 ranks", "at most 64 ranks")
    run("train_graph refuses a graph that is not its model's", [a.train_graph, "--file", path("dense650.txt")], 2,
        "the trainers take at most")
    write(path("dense4.txt"), dense_edges(4), per_rank(4, 2))
    run("train_graph: a plan of another graph than the model's", [a.train_graph, "--file", path("dense4.txt"),
        "--steps", "1"], 2, "the plan runs the stage graph 0>1,0>2,0>3,1>2,1>3,2>3 but the model's is")
    if failures:
        print(f"{len(failures)} case(s) failed: {failures}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
