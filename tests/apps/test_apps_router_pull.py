"""A member pulls a published router version from a real server over HTTP (sha256-checked, a
corrupt one refused with nothing written) and evaluates it with its own reward model and
pairs only: how often the router sends its pairs to it, and its model's accuracy on them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from fedmor_local import free_port
from sdk.cli import main
from sdk.data import SynthConfig, load_pairs, synthesize
from sdk.membership import add_to_roster
from sdk.models import build_tiny_vlm
from sdk.reward import RewardModel, RewardTrainingConfig, pairwise_accuracy, train_reward_model
from sdk.router import HashingEncoder, Router
from sdk.wire import ConsortiumRouterConfig, SignedClient, generate_key, public_key_b64
from sdk.wire._auth import write_private_key
from server_app import ServerSettings
from server_app._app import create_app
from tests._serve import served

HEADS = ["st-mary", "st-luke"]
CONFIG = ConsortiumRouterConfig.model_validate({
    "encoder": {"dim": 16}, "heads": HEADS,
    "router": {"input_dim": 16, "d_model": 16, "num_layers": 1, "num_heads": 2,
               "dim_feedforward": 16}})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A served server with a [router], st-mary enrolled (its key file and client id) and one
    published router version whose head sends every response to st-mary."""
    work = tmp_path_factory.mktemp("router-pull")
    key = generate_key()
    write_private_key(key, work / "mary.pem")
    tokens = {name: add_to_roster(work / "roster.json", name=name,
                                  public_key=public_key_b64(key if name == "st-mary"
                                                            else generate_key()))
              for name in HEADS}
    port = free_port()  # the settings name it: requests are signed for the server they reach
    cfg = ServerSettings(db_path=work / "s.db", identity_key=work / "id.pem",
                         roster_file=work / "roster.json", admin_token="adm",  # type: ignore[arg-type]
                         router=CONFIG, port=port)
    router = Router(CONFIG.router, HEADS, HashingEncoder(CONFIG.encoder).encoder_id)
    with torch.no_grad():
        router.head.bias.copy_(torch.tensor([20.0, -20.0]))  # every response: st-mary
    params = router.get_flat_params()
    with served(create_app(cfg), port) as url:
        enrolled = httpx.post(f"{url}/v1/enroll", json={
            "name": "st-mary", "token": tokens["st-mary"], "public_key": public_key_b64(key)})
        assert enrolled.status_code == 200, enrolled.text
        with SignedClient(url, admin_token="adm") as admin:
            published = admin.request("POST", "/v1/router", params.astype("<f4").tobytes(),
                                      media="application/octet-stream")
            assert published.status_code == 200, published.text
        yield {"url": url, "work": work, "client_id": enrolled.json()["client_id"],
               "params": params, "version": published.json()["version"]}


def _member(site: dict[str, object]) -> list[str]:
    work = site["work"]
    assert isinstance(work, Path)
    return ["--server", str(site["url"]), "--insecure-http", "--key-file", str(work / "mary.pem"),
            "--sender", str(site["client_id"])]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_pull_writes_the_published_version_as_a_router_folder(
        site: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "router", "pull", "--out", str(tmp_path / "r"), *_member(site))
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["version"] == site["version"] and summary["heads"] == HEADS
    pulled = Router.load(tmp_path / "r")
    np.testing.assert_array_equal(pulled.get_flat_params(), site["params"])
    assert pulled.client_ids == HEADS
    assert pulled.encoder_id == HashingEncoder(CONFIG.encoder).encoder_id
    assert json.loads((tmp_path / "r" / "version.json").read_text())["version"] == \
        site["version"]
    # The same version named explicitly; one that does not exist is refused.
    code, _, err = _run(capsys, "router", "pull", str(site["version"]), "--out",
                        str(tmp_path / "again"), *_member(site))
    assert code == 0, err
    code, _, err = _run(capsys, "router", "pull", "99", "--out", str(tmp_path / "none"),
                        *_member(site))
    assert code == 1 and "router version 99 does not exist" in err
    assert not (tmp_path / "none").exists()


def test_pull_refuses_a_version_that_fails_its_sha256(
        site: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = site["work"]
    assert isinstance(work, Path)
    # The stored parameters change after publication (corruption at rest): the server serves
    # them with the hash it listed, which they no longer have.
    with sqlite3.connect(work / "s.db") as db:
        (blob,) = db.execute("SELECT blob FROM router_versions WHERE version=?",
                             (site["version"],)).fetchone()
        db.execute("UPDATE router_versions SET blob=? WHERE version=?",
                   (bytes(b ^ 0xFF for b in blob[:4]) + blob[4:], site["version"]))
    try:
        code, _, err = _run(capsys, "router", "pull", "--out", str(tmp_path / "bad"),
                            *_member(site))
        assert code == 1 and "hashes to" in err and "nothing written" in err
        assert not (tmp_path / "bad").exists()
    finally:
        with sqlite3.connect(work / "s.db") as db:
            db.execute("UPDATE router_versions SET blob=? WHERE version=?",
                       (blob, site["version"]))


def test_eval_with_one_members_reward_model_and_pairs(
        site: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthesize(SynthConfig(clients=("detail",), heldout=(), train_pairs=8, eval_pairs=6,
                           warmup_queries=0, policy_train_queries=0, policy_eval_queries=0),
               tmp_path / "data")
    split = tmp_path / "data" / "clients" / "detail"
    train = load_pairs(split / "train")
    backbone = build_tiny_vlm("qwen2_vl", tmp_path / "backbone",
                              corpus=[t for p in train for t in (p.prompt, p.chosen, p.rejected)])
    model = RewardModel.from_backbone(backbone)
    train_reward_model(model, train, [], RewardTrainingConfig(steps=1, batch_size=4),
                       out_dir=tmp_path / "rm", progress=False)
    code, _, err = _run(capsys, "router", "pull", "--out", str(tmp_path / "r"), *_member(site))
    assert code == 0, err
    argv = ["router", "eval", str(tmp_path / "r"), "--model", str(tmp_path / "rm"),
            "--pairs", str(split / "eval")]
    code, out, err = _run(capsys, *argv, "--member", "st-mary")
    assert code == 0, err
    mary = json.loads(out.strip().splitlines()[-1])
    pairs = load_pairs(split / "eval")
    expected = pairwise_accuracy(RewardModel.from_pretrained(tmp_path / "rm"), pairs)
    # The published head sends every response to st-mary: all six pairs are hers.
    assert mary == {"member": "st-mary", "pairs": 6, "routed_to_self": 1.0,
                    "pairs_routed_to_self": 6, "accuracy": expected,
                    "accuracy_routed_to_self": expected}
    code, out, err = _run(capsys, *argv, "--member", "st-luke")
    assert code == 0, err
    luke = json.loads(out.strip().splitlines()[-1])
    assert luke["routed_to_self"] == 0.0 and luke["accuracy_routed_to_self"] is None
    code, _, err = _run(capsys, *argv, "--member", "st-john")
    assert code == 1 and "no output 'st-john'" in err
