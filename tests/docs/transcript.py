"""Keeps the pages' transcripts true. Every fenced block of README.md and docs/*.md whose first line
starts with `$ ` is a transcript: its commands run one after another in a scratch directory of
the page's own, and what each prints (stdout and stderr together) must be the lines the page
shows under it, exactly (trailing spaces aside; a line starting with `...` stands for lines left out). The scratch directory has the repository's
`tests/`, `examples/` and `docs/` linked in and `build/dev/examples` and `build/release/examples`
pointing at the tools built here, which are also first on PATH, so a command runs as the page
writes it from the repository's root without writing into the repository.

A line right above a block changes what is checked:
  <!-- transcript: excerpt -->    the page shows part of each command's output: those lines must
                                  be printed, together and in that order
  <!-- transcript: fields; WHY --> the page shows a JSON line reflowed or cut: each `"key": value`
                                  it shows must be printed as shown
  <!-- transcript: run; WHY -->   its commands must run (no command missing, no crash: exit status
                                  below 126), their output is not compared: timings, elided output
  <!-- transcript: skip; WHY -->  not run (it builds, trains for minutes, needs a device)
Blocks under `<!-- help: TOOL -->` are help_blocks.py's.

  python transcript.py --root . --bin build/release/examples [--page docs/07_pytorch.md ...]
                       [--exclude docs/07_pytorch.md] [--copy FILE] [--update]

--page limits the run to those pages, --exclude leaves pages out, --copy puts a file into each
scratch directory, --update rewrites the compared blocks with what this run printed.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pages import pages  # noqa: E402

BLOCK = re.compile(r"(?:^(<!-- (?:transcript|help): [^\n]*-->)\n)?^```[a-z]*\n(\$ .*?)^```", re.M | re.S)
MODE = re.compile(r"<!-- transcript: (excerpt|fields|run|skip)\b")
FIELD = re.compile(r'"[A-Za-z_]+": (?:\[[^\]]*\]|"[^"]*"|[-0-9.eE]+|true|false|null)')


def scratch(root, bin_dir, copies):
    tmp = tempfile.mkdtemp(prefix="pipetype-transcript-")
    for name in ("tests", "examples", "docs"):
        os.symlink(os.path.join(root, name), os.path.join(tmp, name))
    for preset in ("dev", "release"):
        os.makedirs(os.path.join(tmp, "build", preset))
        os.symlink(os.path.abspath(bin_dir), os.path.join(tmp, "build", preset, "examples"))
    for f in copies:
        with open(f, "rb") as src, open(os.path.join(tmp, os.path.basename(f)), "wb") as dst:
            dst.write(src.read())
    return tmp


def clean(text):
    lines = [line.rstrip() for line in text.rstrip("\n").split("\n")]
    return "\n".join(lines) if text.strip() else ""


def matches(shown, printed, anchored):
    """True when the lines shown are lines printed, in that order: each run of them together, a line
    starting with `...` standing for any lines; `anchored`: the first run starts the output and
    the last ends it (unless an elision comes before or after it)."""
    runs = [[]]
    for line in shown.split("\n"):
        if line.startswith("..."):
            runs.append([])
        else:
            runs[-1].append(line)
    w, at = printed.split("\n"), 0
    for k, run in enumerate(runs):
        if not run:
            continue
        first = k == 0 and anchored
        ends = range(at, at + 1) if first else range(at, len(w) - len(run) + 1)
        hit = next((i for i in ends if w[i : i + len(run)] == run), None)
        if hit is None:
            return False
        at = hit + len(run)
    return not anchored or not runs[-1] or at == len(w)


def run_block(block, cwd, env, compare):
    """(the block as this run prints it, [(command, shown, printed, why)])"""
    out, failures = [], []
    for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
        command, _, shown = chunk.partition("\n")
        p = subprocess.run(command, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=300)
        printed = clean(p.stdout)
        if p.returncode >= 126:
            failures.append((command, clean(shown), printed, f"exit status {p.returncode}"))
        elif compare == "fields":
            missing = [f for f in FIELD.findall(shown) if f not in printed]
            if missing or not FIELD.search(shown):
                failures.append((command, clean(shown), printed, "does not print " + ", ".join(missing or ["fields"])))
        elif compare != "run" and not matches(clean(shown), printed, compare == "exact"):
            failures.append((command, clean(shown), printed, "prints otherwise"))
        out.append("$ " + command + "\n" + (printed + "\n" if printed else ""))
    return "".join(out), failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--bin", required=True, help="the folder of the built tools (build/release/examples)")
    ap.add_argument("--page", action="append", default=[])
    ap.add_argument("--exclude", action="append", default=[])
    ap.add_argument("--copy", action="append", default=[])
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.abspath(args.bin), os.path.dirname(sys.executable), env.get("PATH", "")])
    failed, compared, ran = 0, 0, 0
    for page in args.page or pages(root):
        if page in args.exclude:
            continue
        text = open(os.path.join(root, page), encoding="utf-8").read()
        cwd, new_text, last = scratch(root, args.bin, args.copy), [], 0
        for m in BLOCK.finditer(text):
            mark, block = m.group(1) or "", m.group(2)
            mode = MODE.match(mark)
            if mark.startswith("<!-- help:") or (mode and mode.group(1) == "skip"):
                continue
            compare = "exact" if mode is None else mode.group(1)
            printed, failures = run_block(block, cwd, env, compare)
            where = f"{page}:{text[: m.start(2)].count(chr(10)) + 1}"
            for command, shown, got, why in failures:
                print(f"FAILS: {where}: `{command}` {why}\n--- the page shows:\n{shown}\n--- this run printed:\n{got}\n")
            failed += len(failures)
            compared, ran = compared + (compare != "run"), ran + (compare == "run")
            if compare == "exact" and "\n..." not in "\n" + block:
                new_text += [text[last : m.start(2)], printed]
                last = m.end(2)
        new_text.append(text[last:])
        shutil.rmtree(cwd)
        if args.update:
            open(os.path.join(root, page), "w", encoding="utf-8").write("".join(new_text))
    print(f"{compared} transcripts compared, {ran} run, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
