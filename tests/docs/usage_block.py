"""docs/00_quickstart.md shows pipetype-explore's contract "from the top of the file": the block
must be examples/explore.cpp's header comment from its usage line to its exit codes, word for word
(the comment without its `// `), so that a flag added to the tool is added to the page.

  python usage_block.py --root .
"""

import argparse
import os
import sys

MARK = "The contract, from the top of the file:"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    args = ap.parse_args()
    lines = open(os.path.join(args.root, "examples", "explore.cpp"), encoding="utf-8").read().split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("//   pipetype-explore --schedule"))
    last = next(i for i, line in enumerate(lines) if line.startswith("// Exit codes:"))
    want = "\n".join(line[3:] if line.startswith("// ") else line[2:] for line in lines[first : last + 1]) + "\n"
    page = open(os.path.join(args.root, "docs", "00_quickstart.md"), encoding="utf-8").read()
    at = page.find(MARK)
    if at < 0:
        print(f"docs/00_quickstart.md has no line '{MARK}'")
        return 1
    start = page.index("```\n", at) + 4
    got = page[start : page.index("```", start)]
    if got != want:
        import difflib

        sys.stdout.writelines(difflib.unified_diff(got.splitlines(True), want.splitlines(True), "docs/00", "explore.cpp"))
        print("docs/00_quickstart.md's contract block differs from examples/explore.cpp's header comment")
        return 1
    print(f"docs/00's contract block is explore.cpp's comment ({want.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
