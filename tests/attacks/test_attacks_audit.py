"""``fedmor audit`` on a tiny demo-layout run directory: membership inference (threshold and
LiRA) on a real reward model, gradient inversion on captured real router updates."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from _attack_kit import CLIENT, synth_client_data
from fastapi.testclient import TestClient

from attacks import (
    AuditConfig,
    AuditReport,
    RemoteRewardScorer,
    audit_run_dir,
    capture_round,
)
from attacks._audit import CapturedRouterUpdate
from attacks._capture import capture_run_dir, pooled_embeddings
from attacks._cli import register
from attacks._errors import AttackInputError
from attacks._report import NO_LEAK
from attacks._summary import verdict_level
from client_app import ClientSettings
from client_app._app import create_client_app
from sdk.data import load_pairs
from sdk.models import build_tiny_vlm
from sdk.reward import (
    ClientScorer,
    RewardModel,
    RewardTrainingConfig,
    pair_texts,
    train_reward_model,
)
from sdk.router import (
    EncodedBatch,
    FederatedConfig,
    HashingEncoder,
    HashingEncoderConfig,
    LocalTrainingConfig,
    Router,
    RouterConfig,
    encode_pairs,
    fedavg_plain,
    train_router_locally,
)
from sdk.wire import RequestRefused, generate_key, public_key_b64


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory in the demo's layout: data/clients/<c>/{train,eval}, reward_models/<c>/."""
    root = tmp_path_factory.mktemp("run")
    # 24 train pairs: 3 clients x 16 responses for the SecAgg capture.
    train = load_pairs(synth_client_data(root / "data", train_pairs=24, eval_pairs=16) / "train")
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
    lira = ["--shadow-models", "2", "--shadow-steps", "10"]
    args = _parse(["audit", "run", str(run_dir), "--out", str(out), "--max-pairs", "16", *lira])
    assert args.handler(args) == 0
    for name in ("report.json", "report.html", "roc.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    settings = [m.setting for m in report.memberships]
    assert settings == [
        f"{CLIENT}: raw scores",
        f"{CLIENT}: normalized, clipped at c=3 (/v1/reward)",
        f"{CLIENT}: raw scores, LiRA (2 shadow models)",
        f"{CLIENT}: normalized, clipped at c=3 (/v1/reward), LiRA (2 shadow models)",
    ]
    assert [m.attack for m in report.memberships] == ["threshold"] * 2 + ["lira"] * 2
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
    # The summary counts leaks and inconclusive settings; "no measurable leak" only when neither.
    n_leaks = sum(m.verdict.startswith("leaks") for m in report.memberships)
    n_unclear = sum(m.verdict.startswith("inconclusive") for m in report.memberships)
    assert report.notes[0].startswith(
        f"Membership inference leaks in {n_leaks} of 4"
        if n_leaks
        else f"Membership inference is inconclusive in {n_unclear} of 4"
        if n_unclear
        else "Membership inference: no measurable"
    )
    assert (f"inconclusive in {n_unclear} of 4" in report.notes[0]) == bool(n_unclear)
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and report.memberships[0].verdict[:20] in html
    # The summary: one card for the client, the checkpoint's raw scores and the /v1/reward
    # answers as two artefacts, each the worst of its threshold and LiRA settings.
    (member,) = report.summary.members
    assert member.member == CLIENT
    by_kind = {v.artefact: v for v in member.verdicts}
    assert list(by_kind) == ["reward model (raw scores)", "reward answers (/v1/reward)"]
    for kind, rows in zip(
        by_kind, (report.memberships[::2], report.memberships[1::2]), strict=True
    ):
        levels = {verdict_level(m.verdict) for m in rows}
        worst = next(lv for lv in ("leak", "inconclusive", "no measurable leak") if lv in levels)
        assert by_kind[kind].level == worst and by_kind[kind].n_settings == 2


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
        policy={"reward_budget": 64},  # type: ignore[arg-type]
        public_urls=["http://testserver"],  # the test client's address
    )
    scorer = ClientScorer.from_pretrained(run_dir / "reward_models" / CLIENT)
    app = create_client_app(settings, scorer=scorer)
    app.state.store.put("client_id", "c-audited")  # as enrollment leaves it
    with TestClient(app) as http:
        live = RemoteRewardScorer(http, server_key, recipient="c-audited")
        report = audit_run_dir(
            run_dir,
            tmp_path / "out",
            AuditConfig(max_pairs=16, shadow_models=0),
            live={CLIENT: live},
        )
        assert live.items_sent == 64  # 32 pairs x (chosen, rejected)
        with pytest.raises(RequestRefused) as spent:  # the member's own refusal, as it is
            live(load_pairs(run_dir / "data" / "clients" / CLIENT / "eval")[:1])
        assert spent.value.status == 429 and spent.value.retry_after is not None
        assert "refused by member c-audited (429)" in str(spent.value)
        stranger = RemoteRewardScorer(http, generate_key(), recipient="c-audited")
        with pytest.raises(RequestRefused) as unknown:
            stranger(load_pairs(run_dir / "data" / "clients" / CLIENT / "eval")[:1])
        assert unknown.value.status == 403
    local, remote = report.memberships[1], report.memberships[2]
    assert remote.setting == f"{CLIENT}: live /v1/reward"
    # The app answers what the in-process normalized scorer computes: the same attack figure.
    assert remote.auc == pytest.approx(local.auc, abs=1e-9)
    assert remote.verdict == local.verdict


def test_live_audit_needs_one_client_and_the_server_key(run_dir: Path, tmp_path: Path) -> None:
    args = _parse(["audit", "run", str(run_dir), "--out", str(tmp_path), "--client-url", "http://x"])
    with pytest.raises(ValueError, match="exactly one --client and --server-key"):
        args.handler(args)


# ---- gradient inversion on captured router updates ---------------------------------------


def _router() -> Router:
    enc = HashingEncoder(HashingEncoderConfig())
    cfg = RouterConfig(input_dim=enc.dim, d_model=32, num_layers=1, num_heads=2, dim_feedforward=64)
    return Router(cfg, ["a", "b", "c"], enc.encoder_id)


@pytest.fixture(scope="module")
def captures(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two captured updates of real router rounds on the run's pairs (HashingEncoder tokens):
    one unprotected FedSGD gradient of a single response, and the SecAgg aggregate of 3 clients
    x 16 responses (the library's default minimum) after 3 local AdamW steps each."""
    out = tmp_path_factory.mktemp("captured")
    enc = HashingEncoder(HashingEncoderConfig())
    train = load_pairs(run_dir / "data" / "clients" / CLIENT / "train")
    pool = encode_pairs(enc, load_pairs(run_dir / "data" / "clients" / CLIENT / "eval"))
    router = _router()
    # One response through an encoder that yields one embedding per response (a pooled,
    # [CLS]-style encoder): the router's first linear layer then sees exactly that vector.
    tokens = encode_pairs(enc, train[:1])
    single = EncodedBatch(
        hidden=pooled_embeddings(tokens.hidden[:1], tokens.mask[:1])[:, None],
        mask=torch.ones(1, 1, dtype=torch.bool),
    )
    pooled_pool = EncodedBatch(
        hidden=pooled_embeddings(pool.hidden, pool.mask)[:, None],
        mask=torch.ones(len(pool), 1, dtype=torch.bool),
    )
    plain = capture_round(
        router, [single], [0], setting="plaintext", update="gradient", pool=pooled_pool
    )
    batches = [encode_pairs(enc, train[8 * k : 8 * k + 8]) for k in range(3)]  # 16 rows each
    local = LocalTrainingConfig(epochs=3, batch_size=16, lr=1e-3)
    agg = capture_round(router, batches, [0, 1, 2], setting="aggregate", local=local, pool=pool)
    return {
        "plain": plain.save(out / "plaintext-a.safetensors"),
        "secagg": agg.save(out / "secagg.safetensors"),
    }


def test_captured_update_file_round_trips(captures: dict[str, Path], tmp_path: Path) -> None:
    back = CapturedRouterUpdate.load(captures["secagg"])
    assert back.meta.setting == "aggregate"
    assert back.meta.samples_per_client == [16, 16, 16] and back.meta.local_steps == 3
    assert back.truth is not None and back.truth.shape == (
        48,
        back.before["input_proj.weight"].shape[1],
    )
    # A secure aggregate moves every parameter by the clients' mean delta: not all zeros.
    assert max(float(t.abs().max()) for t in back.delta().values()) > 0
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(AttackInputError, match="not a safetensors file"):
        CapturedRouterUpdate.load(bad)


def test_audit_command_refuses_a_bad_update_file_before_attacking(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sdk.cli import main

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")  # a valid, empty file
    assert main(["audit", "run", str(run_dir), "--out", str(tmp_path / "o"), "--update", str(bad)]) == 1
    assert "not fedmor-captured-update-v1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before any attack ran


def test_audit_inverts_captured_updates_and_says_which_leak(
    run_dir: Path, captures: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "audit"
    args = _parse(
        [
            "audit",
            "run",
            str(run_dir),
            "--out",
            str(out),
            "--max-pairs",
            "16",
            "--shadow-models",
            "0",
            "--inversion-steps",
            "100",
            "--update",
            str(captures["plain"]),
            "--update",
            str(captures["secagg"]),
        ]
    )
    assert args.handler(args) == 0
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    rows = {(r.setting.split(":")[0], r.attack): r for r in report.reconstructions}
    plain_analytic = rows[("plaintext-a", "analytic")]
    # Unprotected, one sample: the first linear layer gives the embedding back exactly.
    assert plain_analytic.metrics["cosine"].mean >= 0.99
    assert plain_analytic.verdict.startswith("leaks")
    # Secure aggregation of 3 clients x 16 responses after local AdamW steps: both attacks land
    # within the trivial baselines, and the report says so in words.
    for attack in ("analytic", "inverting-gradients"):
        row = rows[("secagg", attack)]
        best = max(b["cosine"].ci_high for b in row.baselines.values())
        assert row.metrics["cosine"].mean <= best
        assert row.verdict.startswith(NO_LEAK)
    assert any(n.startswith("Gradient inversion leaks in 1 of 4") for n in report.notes)
    # Client a's card: its plaintext update leaks, the aggregate it took part in does not.
    cards = {m.member: {v.artefact: v.level for v in m.verdicts} for m in report.summary.members}
    assert cards["a"]["router update, plaintext (no secure aggregation)"] == "leak"
    assert cards["a"]["router aggregate (published)"] == "no measurable leak"
    assert cards["c"]["router aggregate (published)"] == "no measurable leak"
    assert "secagg" in (out / "report.html").read_text()


def test_capture_run_dir_replays_round_one_as_the_server_publishes_it(
    run_dir: Path, tmp_path: Path
) -> None:
    from sdk.router import RouterUpdateSpec, SiteData

    pairs_dir = run_dir / "data" / "clients" / CLIENT / "train"
    spec = RouterUpdateSpec(
        encoder=HashingEncoderConfig(),
        router=_router().config,
        client_ids=["a", "b", "c"],
        federated=FederatedConfig(local=LocalTrainingConfig(epochs=1)),
        max_pairs=8,
        sites={f"site-{k}": SiteData(index=k, pairs_dir=pairs_dir) for k in (0, 1)},
    )
    (tmp_path / "router").mkdir()
    (tmp_path / "router" / "spec.json").write_text(spec.model_dump_json())
    plain_path, agg_path = capture_run_dir(tmp_path, tmp_path / "captured")
    plain, agg = CapturedRouterUpdate.load(plain_path), CapturedRouterUpdate.load(agg_path)
    assert plain.meta.samples_per_client == [16] and agg.meta.samples_per_client == [16, 16]
    # What the demo's clients compute in their first round (sdk.router.local_router_update: the
    # spec's schedule at round 0, seeded per site), averaged in the clear: the secure aggregate
    # must equal it up to fixed-point rounding.
    encoded = encode_pairs(HashingEncoder(spec.encoder), load_pairs(pairs_dir)[:8])
    updates = [
        train_router_locally(spec.build_router(), encoded, k, spec.local_config(0, k))
        for k in (0, 1)
    ]
    expected = fedavg_plain(updates)
    got = torch.cat([agg.after[n].reshape(-1) for n, _ in spec.build_router().named_parameters()])
    assert np.allclose(got.numpy(), expected, atol=1e-5)
    first = torch.cat(
        [plain.after[n].reshape(-1) for n, _ in spec.build_router().named_parameters()]
    )
    assert np.allclose(first.numpy(), updates[0].params, atol=1e-7)
    with pytest.raises(AttackInputError, match=r"spec\.json"):
        capture_run_dir(run_dir, tmp_path / "none")
