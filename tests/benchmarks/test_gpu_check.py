"""examples/gpu_check.py fails fast, with a clear message, on a machine without CUDA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_check_refuses_a_machine_without_cuda() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2
    assert "no CUDA device" in done.stderr
    assert done.stdout == ""  # nothing built or printed before the check
