"""A page that shows an example tool's `--help` shows what the tool prints today: every block of
README.md and docs/*.md under a line `<!-- help: TOOL -->` starts with `$ TOOL --help` and then
holds the tool's output exactly. Every tool given on the command line must have such a block.

  python help_blocks.py --root . --tool train_mlp=build/release/examples/train_mlp [--tool ...]
"""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pages import pages  # noqa: E402

MARK = re.compile(r"^<!-- help: ([A-Za-z_-]+) -->\n```\n(.*?)```", re.M | re.S)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--tool", action="append", default=[], help="NAME=PATH of a built tool")
    args = ap.parse_args()
    tools = dict(t.split("=", 1) for t in args.tool)
    failed, shown = 0, set()
    for page in pages(args.root):
        text = open(os.path.join(args.root, page), encoding="utf-8").read()
        for m in MARK.finditer(text):
            name, block = m.group(1), m.group(2)
            where = f"{page}:{text[: m.start()].count(chr(10)) + 1}"
            command, _, printed = block.partition("\n")
            if command != f"$ {name} --help":
                print(f"FAILS: {where}: the block must start with `$ {name} --help`, not `{command}`")
                failed += 1
                continue
            if name not in tools:
                print(f"not checked here: {where} ({name} is not built)")
                continue
            shown.add(name)
            p = subprocess.run([tools[name], "--help"], capture_output=True, text=True, timeout=60)
            if p.returncode != 0 or p.stdout != printed:
                import difflib

                print(f"FAILS: {where}: `{name} --help` (exit {p.returncode}) prints otherwise:")
                sys.stdout.writelines(difflib.unified_diff(printed.splitlines(True), p.stdout.splitlines(True), "page", name))
                failed += 1
            else:
                print(f"true: {where} ({name} --help)")
    for name in sorted(set(tools) - shown):
        print(f"FAILS: no page shows `{name} --help` under a `<!-- help: {name} -->` line")
        failed += 1
    print(f"{len(shown)} tools' --help shown as they print it, {failed} failures")
    return 1 if failed or not shown else 0


if __name__ == "__main__":
    sys.exit(main())
