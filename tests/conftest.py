"""Suite-wide settings: one torch thread per process, and no test reads or writes the user's own
fedmor profiles."""

from __future__ import annotations

import os
import tempfile

import pytest

# One intra-op thread for torch in every worker and every process the suite starts (apps, CLI
# commands): the suite runs several processes per core, and OpenMP's threads spin-wait for
# each other when they share cores. Set before any test module imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def _private_config_dir() -> object:
    """``$FEDMOR_CONFIG_DIR`` points at a folder of the suite's own (subprocesses inherit it), so
    a developer's ``fedmor enroll`` profiles never pick a test's server."""
    with tempfile.TemporaryDirectory(prefix="fedmor-config-") as folder:
        old = os.environ.get("FEDMOR_CONFIG_DIR")
        os.environ["FEDMOR_CONFIG_DIR"] = folder
        yield folder
        if old is None:
            os.environ.pop("FEDMOR_CONFIG_DIR", None)
        else:
            os.environ["FEDMOR_CONFIG_DIR"] = old


@pytest.fixture(autouse=True)
def _quiet_mode_stays_in_its_test() -> object:
    """A command run in-process with ``--quiet`` sets ``FEDMOR_QUIET`` for the processes it
    starts; put it back after each test, so a later test's subprocesses still print progress."""
    from sdk.progress import QUIET_ENV

    old = os.environ.get(QUIET_ENV)
    yield
    if old is None:
        os.environ.pop(QUIET_ENV, None)
    else:
        os.environ[QUIET_ENV] = old


# The files whose run dominates the suite (a demo, model training, a consortium of processes),
# longest first: `--dist loadfile` hands them out before the short files, so the run does not end
# on one worker running a long file alone. test_apps_rounds.py kills members of the apps' shared
# consortium (one per worker), so it comes after the other files that use it.
_FIRST = tuple(f"tests/{name}.py" for name in (
    "test_guides", "test_guides_operator", "test_demo", "test_docs", "alignment/test_align_service",
    "apps/test_apps_capture_fixed", "apps/test_apps_policy", "apps/test_apps_capture_consent",
    "attacks/test_attacks_audit", "attacks/test_attacks_lira_base", "apps/test_apps_mtls",
    "benchmarks/test_attacks_real_size", "alignment/test_grpo", "apps/test_apps_reannounce",
    "apps/test_apps_ops", "alignment/test_oracle_grpo", "test_demo_dp",
    "attacks/test_attacks_html_chromium",
    "attacks/test_attacks_live_lira", "models/test_memory", "benchmarks/test_real_size",
    "test_progress", "apps/test_apps_badinput", "apps/test_apps_reward", "apps/test_apps_rounds"))


def pytest_configure(config: pytest.Config) -> None:
    # xdist orders files by their number of tests by default, which says nothing of their cost.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
