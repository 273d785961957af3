"""``fedmor align`` against a local consortium of real processes: trl's GRPOTrainer with every
reward from the server's ``POST /v1/rewards``, on one process and on two torchrun ranks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file

from fedmor_local import OPEN_POLICY, LocalConsortium
from tests._checkout import checkout_env

ROUTER = {"d_model": 16, "num_layers": 1, "num_heads": 2, "dim_feedforward": 32}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with LocalConsortium(tmp_path_factory.mktemp("align"), 2, demo=True, policy=OPEN_POLICY,
                         identities={"trainer": "aligner"},
                         server={"alignment": {"router": ROUTER, "empty_reward": -1.0},
                                 "reward_timeout_s": 30.0}) as c:
        c.start()
        c.wait_enrolled()
        c.publish_router_round(ROUTER)
        yield c


def _stats(c: LocalConsortium) -> dict[str, Any]:
    resp = c.admin.get("/v1/rewards/stats")
    resp.raise_for_status()
    return dict(resp.json())


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(next(directory.glob("*.safetensors")))


def _run(c: LocalConsortium, launcher: list[str], base_policy: Path, data_dir: Path,
         out: Path, steps: int, *extra: str, **grpo: Any) -> subprocess.CompletedProcess[str]:
    cfg = c.identity_cfg["trainer"]
    job = out.parent / f"{out.name}.json"
    job.write_text(json.dumps({"grpo": {"steps": steps, "prompts_per_step": 2,
                                        "num_generations": 2, "max_completion_length": 4,
                                        "warmup_steps": 0, **grpo}}))
    env = checkout_env(OMP_NUM_THREADS="1")
    return subprocess.run(
        [*launcher, "-m", "sdk.cli", "align", "--server", c.server_url, "--insecure-http",
         "--identity", cfg["identity_key"], "--name", "trainer",
         "--token", cfg["enrollment_token"], "--policy", str(base_policy),
         "--queries", str(data_dir / "policy" / "train"), "--out", str(out),
         "--config", str(job), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@dataclass
class _AlignRun:
    """One ``fedmor align`` run of 2 steps with a checkpoint after each, and the server's
    reward statistics around it."""

    out: Path
    done: subprocess.CompletedProcess[str]
    before: dict[str, Any]
    after: dict[str, Any]


@pytest.fixture(scope="module")
def align_run(consortium: LocalConsortium, base_policy: Path, data_dir: Path,
              tmp_path_factory: pytest.TempPathFactory) -> _AlignRun:
    """Shared by the training test and the resume test, so the suite starts trl once for both."""
    out = tmp_path_factory.mktemp("align-run") / "one"
    before = _stats(consortium)
    done = _run(consortium, [sys.executable], base_policy, data_dir, out, steps=2, save_steps=1)
    return _AlignRun(out, done, before, _stats(consortium))


def test_fedmor_align_trains_with_rewards_from_the_server(
        consortium: LocalConsortium, align_run: _AlignRun, base_policy: Path) -> None:
    done, out = align_run.done, align_run.out
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "GRPO step 2/2" in done.stderr  # a progress line per step (stderr, as all progress)
    metrics = json.loads((out / "metrics.json").read_text())
    assert [t["step"] for t in metrics["step_seconds"]] == [1, 2]
    assert all(t["seconds"] > 0 for t in metrics["step_seconds"])
    _assert_plots(out, metrics)
    assert metrics["rest"]["requests"] >= 2 and metrics["rest"]["failed_items"] == 0
    before, after = align_run.before, align_run.after
    # Every completion of both steps went to the server (2 prompts x 2 completions per step).
    assert after["items"] - before["items"] == 2 * 2 * 2
    assert after["feedback_applied"] - before["feedback_applied"] == 2
    assert after["step"] == 2
    base, aligned = _weights(base_policy), _weights(out / "policy")
    assert any(not torch.equal(base[k], aligned[k]) for k in base)
    # The aligner process held no server secret: the server's files never entered its config.
    assert consortium.server_cfg["identity_key"] not in done.stdout + done.stderr


def test_fedmor_align_resumes_from_its_checkpoint(
        consortium: LocalConsortium, align_run: _AlignRun, base_policy: Path, data_dir: Path,
        tmp_path: Path) -> None:
    assert align_run.done.returncode == 0, align_run.done.stderr[-3000:]
    # A checkpoint after every step (save_steps 1), the last one at the end.
    assert sorted(p.name for p in (align_run.out / "trainer").glob("checkpoint-*")) == [
        "checkpoint-1", "checkpoint-2"]
    out = tmp_path / "resumable"
    shutil.copytree(align_run.out, out)
    # A job killed while saving checkpoint-2 left it without its trainer state (written
    # last): the resume takes checkpoint-1, the newest complete one.
    (out / "trainer" / "checkpoint-2" / "trainer_state.json").unlink()
    # The first run's metrics, kept elsewhere and linked in: the resume replaces the link with
    # a new file (renamed over it, as every write of metrics.json is) and leaves the copy be.
    kept = tmp_path / "first-run-metrics.json"
    (out / "metrics.json").rename(kept)
    (out / "metrics.json").symlink_to(kept)
    first = kept.read_bytes()
    again = _run(consortium, [sys.executable], base_policy, data_dir, out, 2, "--resume",
                 save_steps=1)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert kept.read_bytes() == first and not (out / "metrics.json").is_symlink()
    metrics = json.loads((out / "metrics.json").read_text())
    log = metrics["log_history"]
    assert [e["step"] for e in log if "loss" in e] == [1, 2]  # step 1 from the checkpoint
    # ... and only step 2 was trained again; the first run's clock covers step 1.
    assert "GRPO step 2/2" in again.stderr and "GRPO step 1/2" not in again.stderr
    assert [t["step"] for t in metrics["step_seconds"]] == [1, 2]
    _assert_plots(out, metrics)


def test_two_torchrun_ranks_share_the_servers_router(
        consortium: LocalConsortium, base_policy: Path, data_dir: Path, tmp_path: Path) -> None:
    steps = 3
    # A fresh online phase: a new router version is published first.
    consortium.publish_router_round(ROUTER)
    consortium.stop("server")  # fresh counters for the assertions below
    consortium.start_server()
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_port", str(_port())]
    done = _run(consortium, launcher, base_policy, data_dir, tmp_path / "two", steps=steps)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / "two" / f"rest_rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["requests"] >= steps and r["failed_items"] == 0 for r in ranks)
    stats = _stats(consortium)
    assert stats["items"] == 2 * steps * 2 * 2  # both ranks' completions, every step
    assert stats["feedback_applied"] == steps  # once per step, not once per rank
    assert stats["router_updates"] == steps - 1  # the first step has no previous loss
    base, aligned = _weights(base_policy), _weights(tmp_path / "two" / "policy")
    assert any(not torch.equal(base[k], aligned[k]) for k in base)


def _assert_plots(out: Path, metrics: dict[str, Any]) -> None:
    """Reward, KL and seconds per step as PNG files beside metrics.json."""
    assert metrics["plots"] == ["reward.png", "kl.png", "seconds_per_step.png"]
    for name in metrics["plots"]:
        assert (out / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _port() -> int:
    from fedmor_local import free_port

    return free_port()


def test_the_aligner_cannot_reach_member_endpoints(consortium: LocalConsortium) -> None:
    # The role check happens server side; here over real HTTP with the aligner's own key.
    from sdk.alignment import enroll_identity
    from sdk.wire import load_private_key, sign_headers
    from sdk.wire._auth import authority_of

    cfg = consortium.identity_cfg["trainer"]
    key = load_private_key(Path(cfg["identity_key"]))
    sender = enroll_identity(consortium.server_url, key, name="trainer",
                             token=cfg["enrollment_token"]).client_id
    headers = sign_headers(key, sender=sender, method="GET", path="/v1/reward/pending", body=b"",
                           authority=authority_of(consortium.server_url))
    resp = httpx.get(f"{consortium.server_url}/v1/reward/pending", headers=headers)
    assert resp.status_code == 403
