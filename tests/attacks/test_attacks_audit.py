"""``fedmor audit`` on a tiny demo-layout run directory with a real, over-fitted reward model."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from attacks import (
    AttackError,
    AttackInputError,
    AuditConfig,
    AuditReport,
    RemoteRewardScorer,
    audit_run_dir,
)
from attacks._cli import register
from client_app import ClientSettings, create_client_app
from sdk.data import SynthConfig, load_pairs, synthesize
from sdk.models import build_tiny_vlm
from sdk.reward import (
    ClientScorer,
    RewardModel,
    RewardTrainingConfig,
    pair_texts,
    train_reward_model,
)
from server_app import generate_key, public_key_b64

CLIENT = "detail"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory in the demo's layout: data/clients/<c>/{train,eval}, reward_models/<c>/."""
    root = tmp_path_factory.mktemp("run")
    synthesize(
        SynthConfig(
            seed=1,
            image_size=32,
            clients=(CLIENT,),
            heldout=("color",),
            train_pairs=16,
            eval_pairs=16,
            heldout_pairs=1,
            warmup_queries=0,
            policy_train_queries=0,
            policy_eval_queries=0,
        ),
        root / "data",
    )
    train = load_pairs(root / "data" / "clients" / CLIENT / "train")
    backbone = build_tiny_vlm("qwen2_5_vl", root / "backbone", corpus=pair_texts(train))
    model = RewardModel.from_backbone(backbone)
    # A few steps only: the audit's plumbing is under test here; that the attack bites on an
    # over-fitted model is shown in test_attacks_membership.py and the benchmark.
    cfg = RewardTrainingConfig(steps=40, batch_size=16, lr=3e-3, warmup_steps=5, eval_every=0)
    train_reward_model(
        model, train, [], cfg, out_dir=root / "reward_models" / CLIENT, progress=False
    )
    return root


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fedmor")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_audit_command_writes_a_consistent_report(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    args = _parse(["audit", str(run_dir), "--out", str(out), "--max-pairs", "16"])
    assert args.handler(args) == 0
    for name in ("report.json", "report.html", "roc.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    settings = [m.setting for m in report.memberships]
    assert settings == [
        f"{CLIENT}: raw scores",
        f"{CLIENT}: normalized, clipped at c=3 (/v1/reward)",
    ]
    for m in report.memberships:
        assert (m.n_members, m.n_non_members) == (16, 16)
        assert m.auc_ci[0] <= m.auc <= m.auc_ci[1]
        # The verdict's words must follow from its own figures.
        outside = m.auc_ci[0] > m.null_band[1] or m.auc_ci[1] < m.null_band[0]
        assert m.verdict.startswith("leaks") == outside
        figures = [float(x) for x in re.findall(r"\d\.\d{3}", m.verdict)]
        assert figures[:3] == pytest.approx([m.auc, *m.auc_ci], abs=1e-3)
    # The /v1/reward view is the raw one through a monotone map and a clip: same ranking
    # unless the clip ties some scores.
    assert report.memberships[1].auc == pytest.approx(report.memberships[0].auc, abs=0.15)
    n_leaks = sum(m.verdict.startswith("leaks") for m in report.memberships)
    assert report.notes[0].startswith(
        f"Membership inference leaks in {n_leaks} of 2" if n_leaks else "No measurable"
    )
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and report.memberships[0].verdict[:20] in html


def test_audit_rejects_a_directory_without_reward_models(tmp_path: Path) -> None:
    with pytest.raises(AttackInputError, match="reward_models"):
        audit_run_dir(tmp_path, tmp_path / "out")


def test_audit_rejects_an_unknown_client(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(AttackInputError, match="nobody"):
        audit_run_dir(run_dir, tmp_path / "out", AuditConfig(clients=("nobody",)))


def test_audit_attacks_a_live_client_app_and_pays_its_budget(run_dir: Path, tmp_path: Path) -> None:
    server_key = generate_key()
    settings = ClientSettings(
        db_path=tmp_path / "client.db",
        identity_key=tmp_path / "client.pem",
        server_public_key=public_key_b64(server_key),
        query_budget=64,
    )
    scorer = ClientScorer.from_pretrained(run_dir / "reward_models" / CLIENT)
    with TestClient(create_client_app(settings, scorer=scorer)) as http:
        live = RemoteRewardScorer(http, server_key)
        report = audit_run_dir(
            run_dir, tmp_path / "out", AuditConfig(max_pairs=16), live={CLIENT: live}
        )
        assert live.items_sent == 64  # 32 pairs x (chosen, rejected)
        with pytest.raises(AttackError, match="429"):
            live(load_pairs(run_dir / "data" / "clients" / CLIENT / "eval")[:1])
        stranger = RemoteRewardScorer(http, generate_key())
        with pytest.raises(AttackError, match="403"):
            stranger(load_pairs(run_dir / "data" / "clients" / CLIENT / "eval")[:1])
    local, remote = report.memberships[1], report.memberships[2]
    assert remote.setting == f"{CLIENT}: live /v1/reward"
    # The app answers what the in-process normalized scorer computes: the same attack figure.
    assert remote.auc == pytest.approx(local.auc, abs=1e-9)
    assert remote.verdict == local.verdict


def test_live_audit_needs_one_client_and_the_server_key(run_dir: Path, tmp_path: Path) -> None:
    args = _parse(["audit", str(run_dir), "--out", str(tmp_path), "--client-url", "http://x"])
    with pytest.raises(ValueError, match="exactly one --client and --server-key"):
        args.handler(args)
