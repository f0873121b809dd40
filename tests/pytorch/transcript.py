"""Keeps the transcript in docs/07_pytorch.md true: runs every `$ ` command of its ```console
blocks in one fresh directory (pipetype-explore and this Python on PATH, pipetype_torch.py copied
in) and compares what it prints, stdout and stderr together, with the lines the docs show under
the command.

  python transcript.py --doc docs/07_pytorch.md --explorer build/dev/examples/pipetype-explore [--update]

--update rewrites the docs' outputs with what this run printed instead of comparing.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def run_block(block, cwd, env):
    """(new block text, mismatches) for one console block."""
    out_lines, mismatches = [], []
    chunks = re.split(r"^\$ ", block, flags=re.M)
    for chunk in chunks[1:]:
        command, _, expected = chunk.partition("\n")
        p = subprocess.run(command, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=600)
        got = "\n".join(line.rstrip() for line in p.stdout.rstrip("\n").split("\n")) if p.stdout.strip() else ""
        want = "\n".join(line.rstrip() for line in expected.rstrip("\n").split("\n")) if expected.strip() else ""
        if got != want:
            mismatches.append((command, want, got))
        out_lines.append("$ " + command + "\n" + (got + "\n" if got else ""))
    return "".join(out_lines), mismatches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--doc", required=True)
    ap.add_argument("--explorer", required=True)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    text = open(args.doc).read()
    with tempfile.TemporaryDirectory(prefix="pipetype-transcript-") as tmp:
        shutil.copy(os.path.join(HERE, "..", "..", "examples", "pytorch", "pipetype_torch.py"), tmp)
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join(
            [os.path.dirname(os.path.abspath(args.explorer)), os.path.dirname(sys.executable), env.get("PATH", "")])
        failures, new_text, last = [], [], 0
        for m in BLOCK.finditer(text):
            block, bad = run_block(m.group(1), tmp, env)
            failures += bad
            new_text += [text[last : m.start(1)], block]
            last = m.end(1)
        new_text.append(text[last:])
    if args.update:
        open(args.doc, "w").write("".join(new_text))
        print(f"{args.doc}: outputs rewritten")
        return 0
    for command, want, got in failures:
        print(f"$ {command}\n--- the docs show:\n{want}\n--- this run printed:\n{got}\n")
    print(f"{args.doc}: transcript {'true' if not failures else 'differs in ' + str(len(failures)) + ' commands'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
