"""The Chrome traces the explorer and train_mlp write, read back as Trace Event Format.

  python3 check_trace.py --explorer PATH --train PATH --out DIR

For every built-in schedule at p = 4, m = 8 (a transfer latency of 0.25) the explorer's --trace,
and for train_mlp's --trace (a measured step and its simulation), checks that
  - the file is JSON with a traceEvents list, each event with the fields its phase needs;
  - complete events ("X") on one thread are in time order and do not overlap;
  - every process is named, every thread that has events is named;
  - every flow id has one start ("s") and one end ("f", bp "e"), each inside a complete event
    of its own thread: the producing action and the consuming one (a simulated step), or the
    two NCCL groups (a measured one);
  - the counts match the plan the tool reports in --format json / --json: one compute event per
    action (a pair of F&B counts two), one flow per send, and for a measured step one compute
    event per compute op and one communication event per group.
Exits 1 with every problem listed.
"""
import argparse
import collections
import json
import os
import re
import sys

from common import finish, problem, problems, run, valid_schedules


NEEDS = {
    "X": {"name": str, "ph": str, "ts": (int, float), "dur": (int, float), "pid": int, "tid": int},
    "s": {"name": str, "cat": str, "ph": str, "id": int, "ts": (int, float), "pid": int, "tid": int},
    "f": {"name": str, "cat": str, "ph": str, "id": int, "ts": (int, float), "pid": int, "tid": int, "bp": str},
    "M": {"name": str, "ph": str, "pid": int, "args": dict},
}


def check_file(path, where):
    """Generic Trace Event Format checks; returns the events."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        problem(where, f"not JSON: {e}")
        return []
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        problem(where, "no traceEvents list")
        return []
    slices = collections.defaultdict(list)
    flows = collections.defaultdict(list)
    named_pids, named_threads, used_threads = set(), set(), set()
    for k, e in enumerate(events):
        ph = e.get("ph")
        if ph not in NEEDS:
            problem(where, f"event {k} has phase {ph!r}")
            continue
        for field, kind in NEEDS[ph].items():
            if not isinstance(e.get(field), kind) or isinstance(e.get(field), bool):
                problem(where, f"event {k} ({ph}) lacks {field} of type {kind}")
        if ph == "M":
            if e["name"] == "process_name":
                named_pids.add(e["pid"])
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e.get("tid")))
            continue
        used_threads.add((e["pid"], e["tid"]))
        if ph == "X":
            if e["dur"] < 0:
                problem(where, f"event {k} has a negative duration")
            slices[(e["pid"], e["tid"])].append(e)
        else:
            flows[e["id"]].append(e)
    for thread in used_threads:
        if thread[0] not in named_pids:
            problem(where, f"process {thread[0]} has no name")
        if thread not in named_threads:
            problem(where, f"thread {thread} has no name")
    for thread, xs in slices.items():
        for a, b in zip(xs, xs[1:]):
            if b["ts"] < a["ts"]:
                problem(where, f"thread {thread}: {b['name']} at {b['ts']} listed after {a['name']} at {a['ts']}")
            elif b["ts"] < a["ts"] + a["dur"] - 1e-3:
                problem(where, f"thread {thread}: {a['name']} and {b['name']} overlap")

    def enclosing(e):
        """The complete event of e's thread whose span holds e's timestamp, or None."""
        return next((x for x in slices[(e["pid"], e["tid"])] if x["ts"] <= e["ts"] <= x["ts"] + x["dur"]), None)

    def wanted(flow_name, phase):
        """The actions the span at a flow's end may hold: its producer (s) or its consumer (f)."""
        m = re.fullmatch(r"(activation|gradient) (\d+)([FB])(\d+)", flow_name)
        if not m:
            return None
        stage, mb = int(m.group(2)), m.group(4)
        if m.group(1) == "activation":
            return {f"{stage if phase == 's' else stage + 1}F{mb}"}
        at = stage if phase == "s" else stage - 1
        return {f"{at}B{mb}", f"{at}I{mb}"}

    for fid, ends in flows.items():
        phases = sorted(e["ph"] for e in ends)
        if phases != ["f", "s"]:
            problem(where, f"flow {fid} has ends {phases}")
            continue
        for e in ends:
            if e["ph"] == "f" and e["bp"] != "e":
                problem(where, f"flow {fid} ends with bp {e['bp']!r}")
            span = enclosing(e)
            if span is None:
                problem(where, f"flow {fid} ({e['name']}): its {e['ph']} at {e['ts']} is in no event of its thread")
            elif e["tid"] == 1:
                if span["name"] != "group":
                    problem(where, f"flow {fid} ({e['name']}): its {e['ph']} is in {span['name']}, not a group")
            else:
                want = wanted(e["name"], e["ph"])
                held = set(re.findall(r"\d+[FBIW]\d+", span["name"]))
                if want is None or not (want & held):
                    problem(where, f"flow {fid} ({e['name']}): its {e['ph']} is in {span['name']}, not {want}")
    return events


def counts(events, pids):
    """Compute events (and pairs among them), communication events and flow starts of `pids`."""
    c = collections.Counter()
    for e in events:
        if e.get("pid") not in pids:
            continue
        if e["ph"] == "X" and e["tid"] == 0:
            c["computes"] += 1
            c["pairs"] += e.get("cat") == "F&B"
        elif e["ph"] == "X" and e["tid"] == 1:
            c["groups"] += 1
        elif e["ph"] == "s":
            c["flows"] += 1
    return c


def pids_named(events, prefix):
    return {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"
            and e["args"]["name"].startswith(prefix)}


def expect(where, what, got, want):
    if got != want:
        problem(where, f"{what}: {got} in the trace, {want} in the plan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explorer", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    names = valid_schedules(a.explorer)
    if len(names) < 10:
        problem("explorer", f"only {len(names)} schedules: {names}")
    for name in names:
        path = os.path.join(a.out, f"{name}.trace.json")
        report = json.loads(run([a.explorer, "--schedule", name, "--ranks", "4", "--microbatches", "8",
                                 "--cost-comm", "0.25", "--format", "json", "--trace", path]))
        events = check_file(path, name)
        c = counts(events, {e.get("pid") for e in events})
        expect(name, "actions", c["computes"] + c["pairs"], report["actions"])
        expect(name, "transfers", c["flows"], report["lowered"]["sends"])
        expect(name, "communication events", c["groups"], 0)
    path = os.path.join(a.out, "train_mlp.trace.json")
    report = json.loads(run([a.train, "--schedule", "zb-h1", "--steps", "2", "--json", "--trace", path]))
    events = check_file(path, "train_mlp")
    measured = counts(events, pids_named(events, "measured rank"))
    simulated = counts(events, pids_named(events, "simulated rank"))
    low = report["lowered"]
    expect("train_mlp measured", "compute events", measured["computes"], low["computes"])
    expect("train_mlp measured", "groups", measured["groups"], low["groups"])
    expect("train_mlp measured", "transfers", measured["flows"], low["sends"])
    expect("train_mlp simulated", "compute events", simulated["computes"], low["computes"])
    expect("train_mlp simulated", "transfers", simulated["flows"], low["sends"])
    return finish(f"{len(names)} explorer traces and train_mlp's measured + simulated trace: well formed, counts match")


if __name__ == "__main__":
    sys.exit(main())
