"""Keeps the code shown to users compiling: every ```cpp block of README.md and docs/*.md that is
a whole file (it has an #include), and every example in a header comment that the header marks
as compiled, goes through the compiler (-std=c++20 -fsyntax-only). A whole-file block that is a
sketch (your own stage types, `...` for what you would write) says so on the line before its
fence, `<!-- not compiled: WHY -->`, and is listed with its reason.

A header marks an example with a comment line `Example:` or `Example, given NAME, NAME (WORDS):`
(after `//` or `///`), followed by the example's lines indented by three spaces (its #include lines go to
the top of the file, after the header's own and pipetype.hpp). The other lines become the body of a function whose parameters are the given names (`auto&&`, so what the example does with
them is checked when it is used, while every name it spells out of pipetype, a type, a function
or a member of a non-dependent object, is looked up where it stands). A renamed or removed API
that an example still shows fails this test.

  python code_blocks.py --cxx g++ --root . [-I DIR ...] [--cuda]

--cuda: the CUDA toolkit's and NCCL's headers are among the -I directories, so the examples of
cuda/runtime.hpp and cuda/mpi.hpp (which include them) are compiled too; without it they are
listed as not compiled, with the reason. --torch likewise for LibTorch's headers (blocks that
include pipetype/torch/).
"""

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pages import pages  # noqa: E402

FENCE = re.compile(r"```(?:cpp|c\+\+)\n(.*?)```", re.S)
MARK = re.compile(r"^//+ ?Example\b(.*):$")  # any such line: an example follows (none after it fails)
GIVEN = re.compile(r"^, given ([A-Za-z_][A-Za-z_0-9]*(?:, [A-Za-z_][A-Za-z_0-9]*)*)")
SKETCH = re.compile(r"^<!-- not compiled: (.*) -->$")  # the line before a fence: a sketch, said why
NEEDS_CUDA = ("pipetype/cuda/runtime.hpp", "pipetype/cuda/mpi.hpp", "pipetype/cuda.hpp")
NEEDS_TORCH = ("pipetype/torch/",)
# a block that specializes a template or defines macros stands in a translation unit of its own;
# the others are compiled together (batched), each in a namespace of its own
STANDALONE = re.compile(r"template\s*<>|^\s*namespace pipetype\b|^\s*#\s*(?!include)", re.M)


def doc_blocks(root):
    """(where, source) for every whole-file ```cpp block of the README and docs/."""
    out = []
    for name in pages(root):
        text = open(os.path.join(root, name)).read()
        for m in FENCE.finditer(text):
            where = f"{name}:{text[: m.start()].count(chr(10)) + 2}"
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKETCH.match(before)
            if skip:
                out.append((where, ("sketch", skip.group(1))))
            elif "#include" in m.group(1):
                out.append((where, m.group(1)))
    return out


def header_examples(root):
    """(where, source) for every marked example in include/pipetype's headers."""
    out = []
    base = os.path.join(root, "include")
    for d, _, files in sorted(os.walk(os.path.join(base, "pipetype"))):
        for f in sorted(files):
            if not f.endswith(".hpp"):
                continue
            path = os.path.join(d, f)
            header = os.path.relpath(path, base)
            lines = open(path).read().split("\n")
            for i, line in enumerate(lines):
                m = MARK.match(line.strip())
                if not m:
                    continue
                prefix = line[: len(line) - len(line.lstrip())] + line.strip().split(" ")[0] + "   "
                body = []
                for nxt in lines[i + 1 :]:
                    if not nxt.startswith(prefix):
                        break
                    body.append(nxt[len(prefix) :])
                if not body:
                    out.append((f"include/{header}:{i + 1}", None))  # a mark with no example: a failure
                    continue
                hoisted = [b for b in body if b.startswith("#include")]  # an example's own includes
                body = [b for b in body if not b.startswith("#include")]
                head = f"#include <{header}>\n#include <pipetype/pipetype.hpp>\n" + "".join(h + "\n" for h in hoisted)
                code = "\n".join(body) + "\n"
                # an example that defines things (a function, a type) stands at namespace scope; one
                # that does things is the body of a function of the given names
                if not body or re.match(r"\s*(constexpr |struct |class |template|using |namespace |inline )", body[0]):
                    src = head + code
                else:
                    given = GIVEN.match(m.group(1))
                    names = given.group(1).split(", ") if given else []
                    params = ", ".join(f"[[maybe_unused]] auto&& {n}" for n in names)
                    src = head + f"[[maybe_unused]] void pipetype_example({params}) {{\n" + code + "}\n"
                out.append((f"include/{header}:{i + 1}", src))
    return out


def batched(members):
    """One translation unit of several blocks: their #include lines first, then each block in a
    namespace of its own (a `main` there is an ordinary function), its lines numbered as in its
    file so that a diagnostic names the block. A batch that does not compile is compiled again
    block by block (main), so a failure is always a block's own."""
    includes, bodies = [], []
    for k, where, src in members:
        lines = src.split("\n")
        includes += [line for line in lines if line.startswith("#include") and line not in includes]
        file, line = where.rsplit(":", 1)
        body = "\n".join("" if x.startswith("#include") else x for x in lines)
        bodies.append(f'namespace pipetype_block_{k} {{\n#line {line} "{file}"\n{body}\n}}  // namespace pipetype_block_{k}\n')
    return "\n".join(includes) + "\n" + "".join(bodies)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cxx", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("-I", dest="includes", action="append", default=[])
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--torch", action="store_true")
    args = ap.parse_args()
    blocks = doc_blocks(args.root) + header_examples(args.root)
    flags = ["-std=c++20", "-fsyntax-only", "-I", os.path.join(args.root, "include")]
    flags += [f for d in args.includes for f in ("-I", d)]
    with tempfile.TemporaryDirectory(prefix="pipetype-code-blocks-") as tmp:

        def compile_source(name, src):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(src)
            p = subprocess.run([args.cxx, *flags, path], capture_output=True, text=True, timeout=300)
            return p.returncode == 0, p.stderr.strip()

        def alone(k, where, src):
            ok, err = compile_source(f"block{k}.cpp", src)
            return where, ok, "" if ok else err[:3000] + "\n--- the code:\n" + src

        def batch(members):  # [(k, where, src)]: one translation unit, or each alone if it fails
            ok, _ = compile_source(f"batch{members[0][0]}.cpp", batched(members))
            return [(where, True, "") for _, where, _ in members] if ok else [alone(*m) for m in members]

        results, batches = {}, {}
        for k, (where, src) in enumerate(blocks):
            if src is None:
                results[k] = where, False, "an `Example:` mark with no indented example under it"
            elif isinstance(src, tuple):
                results[k] = where, None, src[1]
            elif not args.cuda and any(h in src for h in NEEDS_CUDA):
                results[k] = where, None, "needs the CUDA toolkit's headers (not found)"
            elif not args.torch and any(h in src for h in NEEDS_TORCH):
                results[k] = where, None, "needs LibTorch's headers (not found)"
            else:  # LibTorch's and CUDA's headers are slow to read: the blocks that need them go together
                heavy = any(h in src for h in NEEDS_CUDA + NEEDS_TORCH)
                batches.setdefault("alone" if STANDALONE.search(src) else heavy, []).append((k, where, src))
        jobs = [[m] for m in batches.pop("alone", [])] + list(batches.values())
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for members, got in zip(jobs, pool.map(batch, jobs)):
                results.update((m[0], r) for m, r in zip(members, got))
        results = [results[k] for k in sorted(results)]
    failed = 0
    for where, ok, why in results:
        print(f"{'compiles' if ok else 'not compiled' if ok is None else 'FAILS'}: {where}" +
              (f" ({why})" if ok is None else ""))
        if ok is False:
            failed += 1
            print(why)
    compiled = sum(1 for _, ok, _ in results if ok)
    print(f"{compiled} code blocks compile, {failed} fail, "
          f"{sum(1 for _, ok, _ in results if ok is None)} not compiled here")
    return 1 if failed or compiled == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
