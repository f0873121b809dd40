"""The pages the docs tests read: README.md, then docs/*.md in name order (paths relative to the
repository's root)."""

import os


def pages(root):
    docs = os.path.join(root, "docs")
    return ["README.md"] + sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
