"""Running a guide's quickstart as written, on 127.0.0.1 (``tests/test_guides*.py``).

The ``bash`` blocks under a guide's "Quickstart" heading are run in order in one shell, in an
empty folder, with ``fedmor`` on the PATH; only the ports are swapped for free ones.
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedmor_local import free_port
from tests._checkout import checkout_env

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"


def quickstart(guide: str) -> str:
    """The guide's quickstart blocks, joined in order."""
    text = (GUIDES / f"{guide}.md").read_text()
    # "## Quickstart" or "## Quickstart: <what it does>"
    section = re.split(r"\n## Quickstart(?::[^\n]*)?\n", text, maxsplit=1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert blocks, f"{guide}.md: no bash block under its Quickstart heading"
    return "\n".join(blocks)


def swap_ports(script: str, server: int, clients: int) -> str:
    """``script`` with the guides' ports (server 8443, members 9441-9444) replaced by ``server``
    and ``clients`` .. ``clients + 3``, in one pass over whole numbers: a port put in for one
    (44944, say) may hold another's digits, which a replacement after it would rewrite."""
    ports = {"8443": server, **{f"944{k + 1}": clients + k for k in range(4)}}
    return re.sub(r"\b(8443|944[1-4])\b", lambda m: str(ports[m.group()]), script)


def run_quickstart(guide: str, tmp_path: Path, timeout: float = 600) -> str:
    script = swap_ports(quickstart(guide), free_port(), free_port(4))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "fedmor"  # the console script, pointing at this checkout
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sdk.cli "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = checkout_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1",
                       FEDMOR_CONFIG_DIR=str(tmp_path / "config"))  # never the user's profiles
    env.pop("FEDMOR_ADMIN_TOKEN", None)
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):  # apps the script's exit trap missed
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    assert proc.returncode == 0, out[-4000:]
    return out


NEEDS_BASH = pytest.mark.skipif(shutil.which("bash") is None, reason="the quickstarts need bash")
