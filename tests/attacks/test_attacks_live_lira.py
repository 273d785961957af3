"""``fedmor audit --server`` runs LiRA too, on real processes: a server and one member app
serving a tiny LoRA reward model, and an auditor identity. The auditor holds the member's
``reward_config.json`` (no weights) and its data; it trains the shadows itself, queries the
member only through the server's budgeted auditor endpoint, and sizes the audit to the budget
left."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _attack_kit import CLIENT, reward_run_dir

from attacks import AuditReport
from attacks._cli import register
from attacks._errors import AttackInputError
from fedmor_local import LocalConsortium
from sdk.models import build_tiny_vlm
from sdk.reward import LoraSettings, RewardTrainingConfig
from sdk.wire import load_private_key, public_key_b64

AUDITOR = "privacy-officer"
BUDGET = 48
LORA = RewardTrainingConfig(steps=3, batch_size=4, lr=1e-3, warmup_steps=1, eval_every=0,
                            lora=LoraSettings(r=2, alpha=4))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalConsortium, Path,
                                                                     str]]:
    root = tmp_path_factory.mktemp("live-lira")
    reward_run_dir(root / "member", LORA,
                   lambda out, corpus: build_tiny_vlm("qwen2_vl", out, corpus=corpus))
    with LocalConsortium(root / "consortium", 1, demo=True, identities={AUDITOR: "auditor"},
                         server={"audit": {"query_budget": BUDGET}}) as c:
        c.client_cfg["site-0"]["reward_model_dir"] = str(root / "member" / "reward_models" /
                                                         CLIENT)
        c.start()
        c.wait_enrolled()
        cfg = c.identity_cfg[AUDITOR]
        key = load_private_key(Path(cfg["identity_key"]))
        resp = httpx.post(f"{c.server_url}/v1/enroll", json={
            "name": AUDITOR, "token": cfg["enrollment_token"], "public_key": public_key_b64(key)})
        assert resp.status_code == 200 and resp.json()["role"] == "auditor", resp.text
        yield c, root / "member", resp.json()["client_id"]


def _audit(c: LocalConsortium, caller: str, out: Path, *extra: str) -> AuditReport:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args([
        "audit", "live", "--server", c.server_url, "--insecure-http", "--key-file",
        c.identity_cfg[AUDITOR]["identity_key"], "--sender", caller, "--member", "site-0", "--out", str(out), *extra])
    assert args.handler(args) == 0
    return AuditReport.model_validate(json.loads((out / "report.json").read_text()))


def test_lira_over_rest_within_the_auditors_budget(
        live: tuple[LocalConsortium, Path, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    c, member, caller = live
    truth = ["--truth-pairs", str(member / "data" / "clients" / CLIENT)]
    report = _audit(c, caller, tmp_path / "a", *truth, "--max-pairs", "8", "--target-config",
                    str(member / "reward_models" / CLIENT / "reward_config.json"),
                    "--shadow-models", "2")
    threshold, lira = report.memberships
    assert threshold.attack == "threshold" and lira.attack == "lira"
    assert "32 scored items" in threshold.setting and "LiRA (2 shadow models)" in lira.setting
    assert lira.members == ["site-0"] and lira.artefact == "reward answers (/v1/reward)"
    assert report.notes[0].startswith("Auditor budget: this audit used 32 scored items; 32 of "
                                      "48 are used")
    out, err = capsys.readouterr()
    assert "this audit used 32 scored items" in out
    # The shadows were trained here, from the member's recorded base with its LoRA recipe.
    assert f"from the target's recorded base {member / 'backbone'}, LoRA rank 2" in err
    assert err.count("shadow model") >= 2 and "shadow model 2/2" in err
    # 16 items left: the next audit shrinks to 4 candidate pairs a side and spends them all.
    second = _audit(c, caller, tmp_path / "b", *truth, "--max-pairs", "8")
    (only,) = second.memberships
    assert "16 scored items" in only.setting and "(0 left)" in second.notes[0]
    assert "No LiRA" in second.notes[1]
    # Nothing left: refused before any member is asked.
    with pytest.raises(AttackInputError, match="0 of 48 scored items left"):
        _audit(c, caller, tmp_path / "c", *truth)


def test_a_base_that_is_not_the_members_is_refused(
        live: tuple[LocalConsortium, Path, str], tmp_path: Path) -> None:
    from attacks._live_audit import read_target_config
    from attacks._shadow_base import recorded_shadow_base

    _, member, _ = live
    config: dict[str, Any] = read_target_config(member / "reward_models" / CLIENT)
    assert recorded_shadow_base(config).path == member / "backbone"
    moved = config | {"backbone": config["backbone"] | {"source": str(tmp_path / "gone")}}
    with pytest.raises(AttackInputError, match="--shadow-base"):
        recorded_shadow_base(moved)
    other = build_tiny_vlm("qwen2_5_vl", tmp_path / "other", corpus=["a b c"])
    with pytest.raises(AttackInputError, match="is a qwen2_5_vl"):
        recorded_shadow_base(config, other)
