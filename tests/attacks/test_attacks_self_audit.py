"""``fedmor audit --client-config``: a member audits its own reward answers from inside its
network, with its own client app's settings and data, no server: a real ``fedmor`` process on
a tiny LoRA reward model, threshold attack and LiRA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _attack_kit import CLIENT, reward_run_dir

from attacks import AuditReport
from attacks._errors import AttackInputError
from attacks._self_audit import audit_own_scorer
from sdk.data import load_pairs
from sdk.models import build_tiny_vlm
from sdk.reward import ClientScorer, LoraSettings, RewardTrainingConfig
from tests._checkout import checkout_env

ROOT = Path(__file__).resolve().parents[2]
LORA = RewardTrainingConfig(steps=3, batch_size=4, lr=1e-3, warmup_steps=1, eval_every=0,
                            lora=LoraSettings(r=2, alpha=4))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A member's directory: its trained reward model, its data and its client settings."""
    root = tmp_path_factory.mktemp("site")
    reward_run_dir(root, LORA, lambda out, corpus: build_tiny_vlm("qwen2_vl", out, corpus=corpus))
    settings = root / "client.json"
    settings.write_text(json.dumps({
        "name": "hospital-a", "server_url": "https://consortium.invalid:8443",
        "db_path": str(root / "state" / "client.db"),
        "identity_key": str(root / "state" / "identity.pem"),
        "reward_model_dir": str(root / "reward_models" / CLIENT), "device": "cpu"}))
    return root, settings


def test_a_member_audits_its_own_reward_answers_without_a_server(
        site: tuple[Path, Path], tmp_path: Path) -> None:
    root, settings = site
    out = tmp_path / "self"
    proc = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "audit", "self", "--client-config", str(settings),
         "--truth-pairs", str(root / "data" / "clients" / CLIENT), "--max-pairs", "8",
         "--shadow-models", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=checkout_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    threshold, lira = report.memberships
    assert threshold.attack == "threshold" and lira.attack == "lira"
    assert threshold.setting == ("hospital-a: this site's own reward answers (32 scored items, "
                                 "no server)")
    assert "LiRA (2 shadow models)" in lira.setting and lira.members == ["hospital-a"]
    assert (out / "report.html").is_file() and "self-audit" in report.title
    # The shadows start from the checkpoint's recorded base, with its LoRA recipe.
    assert f"from the target's recorded base {root / 'backbone'}, LoRA rank 2" in proc.stderr
    assert "shadow model 2/2" in proc.stderr
    # Nothing was written into the site's own state: no query was logged against a caller.
    assert not (root / "state").exists()


def test_the_self_audit_attacks_exactly_what_v1_reward_answers(
        site: tuple[Path, Path], tmp_path: Path) -> None:
    """The margins the audit attacks are the site's normalized, clipped scores as its app's
    reward service answers them (images through PNG and the wire's decoding); a site that
    serves no reward queries has nothing to audit."""
    from attacks import AuditConfig
    from attacks._self_audit import _ServiceScorer
    from client_app import ClientSettings, ClientStore, site_reward_service
    from sdk.serving import load_settings

    root, settings = site
    data = root / "data" / "clients" / CLIENT
    report = audit_own_scorer(settings, data, tmp_path / "a",
                              AuditConfig(max_pairs=4, shadow_models=0))
    (only,) = report.memberships
    assert "16 scored items" in only.setting and "No LiRA" in report.notes[0]
    pairs = load_pairs(data / "train")[:3]
    store = ClientStore(tmp_path / "s.db")
    service = site_reward_service(load_settings(ClientSettings, settings), store)
    got = _ServiceScorer(service)(pairs)
    store.close()
    scorer = ClientScorer.from_pretrained(root / "reward_models" / CLIENT)
    with torch.no_grad():
        chosen, rejected = (np.clip(np.asarray(scorer.score(
            [p.image for p in pairs], [p.prompt for p in pairs], [getattr(p, side) for p in pairs]),
            dtype=np.float64), -scorer.clip, scorer.clip) for side in ("chosen", "rejected"))
    np.testing.assert_allclose(got, chosen - rejected, atol=1e-5)
    refusing = json.loads(settings.read_text()) | {"policy": {"serve_rewards": False}}
    (tmp_path / "refusing.json").write_text(json.dumps(refusing))
    with pytest.raises(AttackInputError, match="serve_rewards"):
        audit_own_scorer(tmp_path / "refusing.json", data, tmp_path / "b",
                         AuditConfig(max_pairs=4, shadow_models=0))
