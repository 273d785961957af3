"""A member's production path: a ``[router_training]`` section and nothing else (no
environment variable, no private module path) takes part in a secure router round over real
processes, on the configuration it fetched from the server; a plug-in of the
``fedmor.router_updates`` entry-point group, installed as a real distribution, is found and run."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from client_app import ClientRunner, ClientSettings
from client_app._policy import PolicyRefused
from client_app._router_update import ConfiguredRouterUpdate
from client_app._settings import RouterTrainingSettings
from fedmor_local import OPEN_POLICY, LocalConsortium
from sdk.data import SynthConfig, synthesize
from sdk.router import (
    HashingEncoder,
    Router,
    SiteRound,
    load_router_update,
    local_router_update,
)
from sdk.router._site_update import RouterUpdateError
from sdk.wire import (
    ROUTER_ROUND_PARAM,
    ConsortiumRouterConfig,
    RoundInfo,
    RouterConfigInfo,
    RouterConfigRef,
    generate_key,
    load_private_key,
    public_key_b64,
)

CATEGORIES = ("diagram", "position")
CONFIG = ConsortiumRouterConfig.model_validate({
    "encoder": {"dim": 16}, "heads": ["site-0", "site-1"],
    "router": {"input_dim": 16, "d_model": 16, "num_layers": 1, "num_heads": 2,
               "dim_feedforward": 16},
    "federated": {"rounds": 2, "local": {"epochs": 1, "batch_size": 16, "lr": 3e-3}}})
PLUGIN = "fedmor_test_plugin"


def _install_plugin(site: Path) -> Path:
    """A distribution in ``site`` (a folder for sys.path) whose entry point ``mine`` in the
    ``fedmor.router_updates`` group wraps the built-in update and leaves a marker file."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{PLUGIN}.py").write_text(
        "from pathlib import Path\n"
        "from sdk.router import local_router_update\n\n\n"
        "def update(job):\n"
        "    Path(__file__).with_name('called-' + job.name).write_text(job.config.sha256)\n"
        "    return local_router_update(job)\n")
    info = site / f"{PLUGIN}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fedmor.router_updates]\nmine = {PLUGIN}:update\n")
    return site


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("router-member")
    synthesize(SynthConfig(clients=CATEGORIES, train_pairs=16, eval_pairs=1, heldout_pairs=1,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               root / "data")
    return root


@pytest.fixture(scope="module")
def consortium(data: Path) -> Iterator[LocalConsortium]:
    site = _install_plugin(data / "site")
    env = {k: os.environ.get(k) for k in ("PYTHONPATH",)}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env["PYTHONPATH"]]))
    try:
        # Members that train the router and answer no reward query (no reward model here).
        with LocalConsortium(data / "run", 2, policy={"min_participants": 2,
                                                      "min_threshold": 2,
                                                      "serve_rewards": False},
                             identities={"ops": "operator"},
                             server={"router": CONFIG.model_dump(mode="json"),
                                     "stage_deadline_s": 60.0}) as c:
            for k, (name, category) in enumerate(zip(c.names, CATEGORIES, strict=True)):
                # Only this section: the built-in training for site-0, the plug-in for site-1.
                c.client_cfg[name]["router_training"] = {
                    "pairs_dir": str(data / "data" / "clients" / category / "train"),
                    **({"update": "mine"} if k else {})}
            c.start()
            c.wait_enrolled()
            yield c
    finally:
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_members_with_only_a_router_training_section_finish_a_secure_round(
        consortium: LocalConsortium, data: Path) -> None:
    seeded = Router(CONFIG.router, CONFIG.heads, HashingEncoder(CONFIG.encoder).encoder_id)
    base = consortium.publish_router(seeded.get_flat_params())
    assert base["router_config"]["sha256"] == CONFIG.sha256
    # The operator names no length: the server takes it from its [router].
    done = consortium.run_round(timeout_s=240, kind="router_secagg", min_clients=2,
                                params={ROUTER_ROUND_PARAM: 0})
    assert done["vector_length"] == CONFIG.num_params and not done["dropouts"]
    assert done["router_config"] == {"lineage": 1, "sha256": CONFIG.sha256,
                                     "num_params": CONFIG.num_params}
    published = consortium.admin.get(f"/v1/router/{done['router_version']}").content
    assert not np.array_equal(np.frombuffer(published, dtype="<f4"), seeded.get_flat_params())
    # site-1 ran the entry-point plug-in, on the configuration it fetched from the server.
    assert (data / "site" / "called-site-1").read_text() == CONFIG.sha256
    assert not (data / "site" / "called-site-0").exists()  # site-0: the built-in one
    _members_see_what_they_gave(consortium, data, done, seeded.get_flat_params())


def _members_see_what_they_gave(consortium: LocalConsortium, data: Path, done: dict[str, Any],
                                base: np.ndarray) -> None:
    """Each member's store, its ``fedmor client status`` and its log give the round's local
    pairs and the router's local loss before and after its update: the values the same
    update gives when redone here from the round's base."""
    info = RoundInfo.model_construct(round_id=done["round_id"], vector_length=len(base),
                                     params={ROUTER_ROUND_PARAM: 0})
    for name, category in zip(consortium.names, CATEGORIES, strict=True):
        expected = local_router_update(SiteRound(
            config=CONFIG, name=name, info=info, base=base,
            pairs_dir=data / "data" / "clients" / category / "train"))
        assert expected.loss_before is not None and expected.loss_after is not None
        assert expected.loss_after < expected.loss_before  # local training lowers it
        config = consortium.dir / f"{name}.json"
        row = _wait_done(config, done["round_id"])
        assert row["pairs"] == expected.num_samples == 16
        assert row["loss_before"] == pytest.approx(expected.loss_before, rel=1e-3)
        assert row["loss_after"] == pytest.approx(expected.loss_after, rel=1e-3)
        log = (consortium.dir / f"{name}.log").read_text()
        assert (f"round {done['round_id']}: done (16 local pairs, local router loss "
                f"{row['loss_before']:.4f} -> {row['loss_after']:.4f})") in log
        table = _fedmor("client", "status", "--config", str(config)).splitlines()
        cells = next(line.split() for line in table if line.split()[:1] == [str(row["round_id"])])
        assert cells[:5] == [str(row["round_id"]), "done", "16", f"{row['loss_before']:.4f}",
                             f"{row['loss_after']:.4f}"]


def _fedmor(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sdk.cli", *argv], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _wait_done(config: Path, round_id: int) -> dict[str, Any]:
    """The member's own record of the round once it marked it done (its last stage's
    acknowledgement can reach it just after the server finished the round)."""
    deadline = time.monotonic() + 60
    while True:
        answer = json.loads(_fedmor("client", "status", "--config", str(config), "--json"))
        rows = [r for r in answer["rounds"] if r["round_id"] == round_id]
        if (rows and rows[0]["status"] == "done") or time.monotonic() > deadline:
            assert rows and rows[0]["status"] == "done", answer
            return dict(rows[0])


def test_the_operator_command_starts_a_new_lineage(consortium: LocalConsortium,
                                                   data: Path) -> None:
    ops = consortium.identity_cfg["ops"]
    key = load_private_key(Path(ops["identity_key"]))
    enrolled = httpx.post(f"{consortium.server_url}/v1/enroll", timeout=30, json={
        "name": "ops", "token": ops["enrollment_token"], "public_key": public_key_b64(key)})
    assert enrolled.status_code == 200, enrolled.text
    sender = enrolled.json()["client_id"]
    # The new configuration as an operator keeps it: a server settings file's [router].
    swapped = CONFIG.model_copy(update={"heads": ["site-1", "site-0"]})
    settings = data / "server-next.json"
    settings.write_text(json.dumps({"router": swapped.model_dump(mode="json")}))
    argv = [sys.executable, "-m", "sdk.cli", "router", "lineage", "--config", str(settings),
            "--server", consortium.server_url, "--insecure-http", "--key-file", ops["identity_key"],
            "--sender", sender]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "router lineage 2 started" in out.stdout and swapped.sha256[:12] in out.stdout
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "is the current one already" in again.stderr
    served = consortium.admin.get("/v1/router/config").json()
    assert (served["lineage"], served["sha256"]) == (2, swapped.sha256)
    with sqlite3.connect(consortium.server_cfg["db_path"]) as db:
        audited = db.execute("SELECT actor FROM audit WHERE action='router_lineage_started'"
                             ).fetchall()
    assert audited == [(sender,)]


def _round(sha256: str, length: int = CONFIG.num_params) -> RoundInfo:
    return RoundInfo.model_construct(
        round_id=3, vector_length=length, params={},
        router_config=RouterConfigRef(lineage=1, sha256=sha256, num_params=length))


def _served(config: ConsortiumRouterConfig, claimed: str | None = None) -> RouterConfigInfo:
    return RouterConfigInfo(lineage=1, sha256=claimed or config.sha256,
                            num_params=config.num_params, config=config, created_at=0.0,
                            current=True)


def test_a_member_refuses_a_round_whose_configuration_it_was_not_served(
        consortium: LocalConsortium, data: Path, tmp_path: Path) -> None:
    """The member app against the real server: a round opened on the current router lineage,
    then a new lineage started before the member fetched any configuration. The member fetches
    what the server now serves, whose hash is not the round's, and refuses the round by its
    site policy's ``router_config`` rule, which the server records."""
    key = generate_key()
    added = consortium.admin.post("/v1/roster", json={"name": "site-late",
                                                      "public_key": public_key_b64(key)})
    assert added.status_code == 200, added.text
    settings = ClientSettings.model_validate({
        **consortium.client_cfg[consortium.names[0]], "name": "site-late",
        "enrollment_token": added.json()["token"], "db_path": str(tmp_path / "client.db"),
        "identity_key": str(tmp_path / "identity.pem"), "policy": OPEN_POLICY,
        "router_training": {"pairs_dir": str(data / "data" / "clients" / CATEGORIES[0] /
                                             "train")}})
    runner = ClientRunner(settings, key=key)
    try:
        me = runner.enroll()
        named = ConsortiumRouterConfig.model_validate(
            consortium.admin.get("/v1/router/config").json()["config"])
        rid = consortium.create_round(kind="rm_fedavg", participants=[me],
                                      min_clients=1)["round_id"]
        assert consortium.round(rid)["router_config"]["sha256"] == named.sha256
        served = named.model_copy(update={"heads": list(reversed(named.heads))})
        started = consortium.admin.post("/v1/router/lineage",
                                        json=served.model_dump(mode="json"))
        assert started.status_code == 200, started.text
        assert runner.run_round(rid) == "refused"
    finally:
        runner.close()
    (refusal,) = consortium.round(rid)["refusals"]
    assert (refusal["client_id"], refusal["reason"]) == (me, "router_config")
    assert named.sha256[:12] in refusal["detail"] and served.sha256[:12] in refusal["detail"]


def test_the_configured_update_believes_no_lying_server_and_needs_a_configuration(
        tmp_path: Path) -> None:
    """What no honest server sends: a configuration whose hash is not the one it claims, and
    a round that names no configuration."""
    other = CONFIG.model_copy(update={"heads": ["site-1", "site-0"]})
    lying = ConfiguredRouterUpdate(RouterTrainingSettings(pairs_dir=tmp_path),
                                   lambda: _served(CONFIG, claimed=other.sha256))
    with pytest.raises(PolicyRefused, match="hashes to"):
        lying.config_for(_round(other.sha256))
    # A round that names no configuration (a server without [router]) is refused too.
    update = ConfiguredRouterUpdate(RouterTrainingSettings(pairs_dir=tmp_path),
                                    lambda: _served(CONFIG))
    bare = RoundInfo.model_construct(round_id=4, vector_length=5, params={},
                                     router_config=None)
    with pytest.raises(PolicyRefused, match="names no router configuration"):
        update.config_for(bare)


def test_an_entry_point_plugin_is_found(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(_install_plugin(tmp_path / "site")))
    assert load_router_update("builtin") is local_router_update
    found = load_router_update("mine")
    assert found.__module__ == PLUGIN and found.__name__ == "update"
    with pytest.raises(RouterUpdateError, match="registered: mine"):
        load_router_update("absent")
