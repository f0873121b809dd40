"""Every pipetype header that README.md, docs/*.md or a header comment names exists: a file that
moves or splits leaves no page pointing at its old name.

  python header_names.py --root .

A name is `AREA/FILE.hpp` with AREA one of include/pipetype's folders (core/, mesh/, ...), read
where it stands: `pipetype/cuda/executor.hpp`, `mesh/plan.hpp`, `compile/lower.hpp's`.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pages import pages  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    args = ap.parse_args()
    include = os.path.join(args.root, "include", "pipetype")
    areas = sorted(d for d in os.listdir(include) if os.path.isdir(os.path.join(include, d)))
    name = re.compile(r"(?<![\w/.-])(?:pipetype/)?((?:%s)/[A-Za-z0-9_/]+\.hpp)" % "|".join(areas))
    texts = [os.path.join(args.root, page) for page in pages(args.root)]
    for d, _, files in sorted(os.walk(include)):
        texts += [os.path.join(d, f) for f in sorted(files) if f.endswith(".hpp")]
    missing, seen = [], set()
    for path in texts:
        for i, line in enumerate(open(path, encoding="utf-8"), 1):
            for m in name.finditer(line):
                seen.add(m.group(1))
                if not os.path.isfile(os.path.join(include, m.group(1))):
                    missing.append(f"{os.path.relpath(path, args.root)}:{i}: names {m.group(1)}, which include/pipetype does not have")
    for x in missing:
        print(x)
    print(f"{len(seen)} header names in {len(texts)} files, {len(missing)} missing")
    return 1 if missing or not seen else 0


if __name__ == "__main__":
    sys.exit(main())
