#!/usr/bin/env python3
"""Rewrites zb_reference.txt: the zero-bubble authors' heuristic on zb_compare's kind of grid.

    python3 tests/schedules/data/zb_reference.py /path/to/zero-bubble-pipeline-parallelism > zb_reference.body

It loads their scheduler module (megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py) from a
checkout, without torch or pulp (the heuristic needs neither: both are stubbed), runs
Graph.manual_order under each of its eight flag settings and prints the shortest score per case.
Not run by the tests: they read the figures it printed (their code stays out of this repository).
"""
import importlib.util
import itertools
import pathlib
import sys
import types

# case: F, I, W, latency, whether the last stage's F and I cost twice as much
CASES = {
    "F=I=W": (1, 1, 1, 0, False),
    "I>W": (1, 1.5, 0.5, 0, False),
    "W>I": (1, 0.75, 1.25, 0, False),
    "comm": (1, 1, 1, 0.25, False),
    "mixed": (1, 1.1, 0.8, 0.1, False),
    "mixed+": (1, 1.3, 0.9, 0.5, False),
    "headx2": (1, 1, 1, 0, True),
}


def load(checkout):
    sched = pathlib.Path(checkout) / "megatron/core/pipeline_parallel/zerobubble/scheduler"
    for name in ("torch", "pulp"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["torch"].Tensor = object
    package = "megatron.core.pipeline_parallel.zerobubble.scheduler"
    parts = package.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    modules = {}
    for leaf in ("graph", "zb"):
        spec = importlib.util.spec_from_file_location(f"{package}.{leaf}", sched / f"{leaf}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules[leaf] = module
    return modules["graph"], modules["zb"]


def main():
    graph_mod, zb = load(sys.argv[1])
    for name, (f, i, w, comm, head) in CASES.items():
        for p in (4, 8):
            for m in (p, 2 * p, 4 * p):
                for limit in (p, 1.5 * p, 2 * p):
                    cost_f, cost_b, cost_w = [float(f)] * p, [float(i)] * p, [float(w)] * p
                    if head:
                        cost_f[-1], cost_b[-1] = 2.0 * f, 2.0 * i
                    config = graph_mod.GraphConfig(
                        mem_f=[2.0] * p, mem_b=[-1.0] * p, mem_w=[-1.0] * p, max_mem=[2.0 * limit] * p,
                        cost_f=cost_f, cost_b=cost_b, cost_w=cost_w, cost_comm=float(comm), n_stages=p, n_micro=m)
                    graph = zb.Graph.build_graph(p, m, config)
                    best = None
                    for before, prio, greedy in itertools.product([True, False], repeat=3):
                        try:
                            _, _, span = graph.manual_order(
                                allow_bubble_before_first_b=before, prioritize_b=prio, no_bubble_greedy=greedy)
                        except (ValueError, AssertionError):
                            continue
                        best = span if best is None or span < best else best
                    print(name, p, m, limit, best)


if __name__ == "__main__":
    main()
