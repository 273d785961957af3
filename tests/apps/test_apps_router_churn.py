"""Membership is live in the router, on real processes over HTTP: a revoked member's head is
never selected and reward queries keep answering; a member that joins gets a lineage carried
over from the current router (trunk and old heads bit for bit), selection keeps answering
before that lineage's first round, and the new head becomes selectable only after a round;
the operator's commands tell one story (lineages, origins, a rollback as "restored version")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedmor_local import OPEN_POLICY, LocalConsortium
from fedmor_local._local import ADMIN_TOKEN
from sdk.cli import main
from sdk.router import HashingEncoder, HashingEncoderConfig, Router
from sdk.wire import ConsortiumRouterConfig

from .test_apps_aligner import FAILURE, Aligner, _items

SMALL = {"encoder": {"dim": 8}, "router": {"input_dim": 8, "d_model": 8, "num_layers": 1,
                                           "num_heads": 2, "dim_feedforward": 8}}
CONFIG = ConsortiumRouterConfig.model_validate({**SMALL, "heads": ["site-0", "site-1"]})
D = CONFIG.router.d_model


def _initial() -> np.ndarray:
    """A router whose head prefers site-1 everywhere, site-0 last: bias +10 and -10."""
    encoder = HashingEncoder(HashingEncoderConfig.model_validate(SMALL["encoder"]))
    router = Router(CONFIG.router, CONFIG.heads, encoder.encoder_id)
    flat = router.get_flat_params()
    flat[-2:] = [-10.0, 10.0]  # b (K,) closes the flat vector: site-0, site-1
    return flat


def _head(flat: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(trunk, (W (k, d), b (k,))) of a flat router with ``k`` heads."""
    trunk = flat.shape[0] - (D + 1) * k
    return flat[:trunk], np.concatenate([flat[trunk:trunk + D * k], flat[-k:]])


def _wait(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


class _Run:
    """One ``fedmor`` command, in this process, as the operator (the admin token)."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def fedmor(consortium: LocalConsortium, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str]) -> Callable[..., _Run]:
    monkeypatch.setenv("FEDMOR_CONFIG_DIR", str(tmp_path / "config"))  # no profile
    monkeypatch.setenv("FEDMOR_ADMIN_TOKEN", ADMIN_TOKEN)

    def run(*argv: str) -> _Run:
        code = main([*argv, "--server", consortium.server_url, "--insecure-http"])
        out = capsys.readouterr()
        return _Run(code, out.out, out.err)

    return run


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    alignment = {"reveal_judges": True, "failure_reward": FAILURE}
    with LocalConsortium(tmp_path_factory.mktemp("churn"), 3, demo=True, policy=OPEN_POLICY,
                         identities={"trainer": "aligner"},
                         server={"router": CONFIG.model_dump(mode="json"),
                                 "alignment": alignment, "reward_timeout_s": 30.0}) as c:
        c.start_server()
        for name in ("site-0", "site-1"):  # site-2 joins later
            c.start_client(name)
        _wait("two members", lambda: len(c.enrolled()) == 2)
        c.publish_router(_initial())
        yield c


def _ids(c: LocalConsortium) -> dict[str, str]:
    return {m["name"]: m["client_id"] for m in c.admin.get("/v1/members").json()
            if m["client_id"]}


def _judged(c: LocalConsortium, aligner: Aligner) -> set[str]:
    """The names of the members that scored one batch of six (every item answered)."""
    resp = aligner.post("/v1/rewards", {"items": _items(with_bytes=True)[0], "step": 0})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["failed"] == 0 and len(body["rewards"]) == 6 and FAILURE not in body["rewards"]
    names = {v: k for k, v in _ids(c).items()}
    return {names[j] for j in body["judges"]}


def test_membership_is_live_in_the_router(consortium: LocalConsortium,
                                          fedmor: Callable[..., _Run]) -> None:
    c = consortium
    aligner = Aligner.enroll(c)
    assert _judged(c, aligner) == {"site-1"}  # the router prefers site-1 everywhere

    # Revoked: its head is masked at once; the queries go on to the member that is left.
    removed = fedmor("roster", "remove", "--name", "site-1", "--reason", "left")
    assert removed.returncode == 0, removed.stderr
    assert _judged(c, aligner) == {"site-0"}
    stats = aligner.get("/v1/rewards/stats").json()
    assert stats["heads"] == ["site-0", "site-1"] and stats["masked_heads"] == {
        "site-1": "revoked"}
    status = fedmor("alignment", "status")
    assert status.returncode == 0, status.stderr
    assert "1 of 2 heads (masked: site-1: revoked)" in status.stdout

    # Joins: a new lineage whose first version carries version 1 over, bit for bit.
    c.start_client("site-2")
    latest = _wait("the joined lineage's version", lambda: (
        r := c.admin.get("/v1/router/latest").json()).get("carried_from") and r)
    assert latest["router_config"]["lineage"] == 2 and latest["carried_from"] == 1
    old = np.frombuffer(c.admin.get("/v1/router/1").content, dtype="<f4")
    new = np.frombuffer(c.admin.get(f"/v1/router/{latest['version']}").content, dtype="<f4")
    (old_trunk, old_head), (new_trunk, new_head) = _head(old, 2), _head(new, 3)
    assert old_trunk.tobytes() == new_trunk.tobytes()
    w_old, w_new = old_head[:2 * D].reshape(2, D), new_head[:3 * D].reshape(3, D)
    assert w_new[:2].tobytes() == w_old.tobytes() and not w_new[2].any()
    assert new_head[-3:-1].tobytes() == old_head[-2:].tobytes() and new_head[-1] == 0.0
    # Before any round of lineage 2, selection keeps answering over the heads it knows: the
    # new head (logit 0, far above site-0's -10) is never chosen while untrained.
    assert _judged(c, aligner) == {"site-0"}
    masked = aligner.get("/v1/rewards/stats").json()["masked_heads"]
    assert masked == {"site-1": "revoked",
                      "site-2": "joined in lineage 2, not trained in a round yet"}

    # A round of lineage 2 (site-0 and site-2) trains the new head: now it may be chosen.
    done = c.run_round(kind="router_secagg", min_clients=2, params={"clip_range": 8.0})
    assert done["router_config"]["lineage"] == 2
    stats = aligner.get("/v1/rewards/stats").json()
    assert stats["masked_heads"] == {"site-1": "revoked"}
    assert stats["serving_version"] == done["router_version"]
    assert _judged(c, aligner) <= {"site-0", "site-2"}

    # One story: lineages with their members and versions; the history names each origin.
    lineages = fedmor("router", "lineages")
    assert lineages.returncode == 0, lineages.stderr
    rows = [line.split() for line in lineages.stdout.splitlines()[1:]]
    assert rows[0][:2] == ["1", CONFIG.sha256[:12]] and rows[0][2:4] == ["site-0,", "site-1"]
    assert rows[1][:2] == ["2", "(current)"] and "enrollment" in lineages.stdout
    assert rows[0][5:7] == ["1", "1"]  # FIRST, LATEST of lineage 1
    rolled = fedmor("router", "rollback", str(latest["version"]))
    assert rolled.returncode == 0, rolled.stderr
    history = fedmor("router", "history")
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert lines[0].split()[:3] == ["VERSION", "LINEAGE", "FROM"]
    restored = f"restored version {latest['version']}"
    assert "carried over from version 1" in history.stdout and restored in history.stdout
    assert f"round {done['round_id']}" in history.stdout
    show = fedmor("router", "show")
    assert show.returncode == 0, show.stderr
    assert restored in show.stdout and "of 3 heads" in show.stdout
    # The rollback serves the carried router again: its new head is untrained once more.
    masked = aligner.get("/v1/rewards/stats").json()["masked_heads"]
    assert set(masked) == {"site-1", "site-2"}
    as_json = fedmor("router", "lineages", "--json")
    assert as_json.returncode == 0 and '"latest_version"' in as_json.stdout
