"""Test-only helpers for the PyTorch tests; PyTorch's side (dump, run over gloo, the gradient
check) is examples/pytorch/pipetype_torch.py, which users run too."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
from pipetype_torch import (  # noqa: E402,F401
    computes,
    dump,
    gradients_match,
    quiet_torch,
    read_rows,
    run_files,
    run_processes,
)


def run_explorer(explorer, args, timeout=60):
    """Runs pipetype-explore; returns (exit code, stdout, stderr)."""
    p = subprocess.run([explorer, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr
