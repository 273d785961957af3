"""``fedmor audit --capture DIR``: the capture directory format (manifest, safetensors, JSON
lines) built from real in-process rounds (sdk.router local training, the router_secagg round
kind run in memory with every wire message recorded), attacked with and without ground
truth."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from _attack_kit import MEMBERS, build_capture, synth_client_data
from safetensors.torch import save_file

from attacks import AuditReport, MemberTruth, audit_capture_dir
from attacks._capture_audit import _ks_critical
from attacks._capture_dir import CaptureDir
from attacks._cli import register
from attacks._errors import AttackInputError
from attacks._report import NO_LEAK
from sdk.capture import CaptureError, RoundCapture, write_capture

PLAIN = "router update, plaintext (no secure aggregation)"
AGG = "router aggregate (published)"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_client_data(tmp_path_factory.mktemp("data"), train_pairs=24, eval_pairs=16)


@pytest.fixture(scope="module")
def capture(
    data: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, MemberTruth]]:
    return build_capture(tmp_path_factory.mktemp("capture") / "cap", data)


def test_capture_directory_round_trips_and_refuses_tampering(
    capture: tuple[Path, dict[str, MemberTruth]], tmp_path: Path
) -> None:
    root, _ = capture
    cap = CaptureDir.open(root)
    m = cap.manifest
    assert m.format == "fedmor-capture-dir-v2" and m.description == "test consortium"
    assert [r.round_id for r in m.rounds] == [1, 2] and m.n_reward_queries == 80
    r1, r2 = m.rounds
    assert not r1.secure_aggregation and r2.secure_aggregation and r2.router_version == 2
    assert r1.status == r2.status == "finished" and r1.failure is None
    assert (
        sorted(a.kind for a in r2.artefacts)
        == ["aggregate"] + ["masked_input"] * 3 + ["unmasking_shares"] * 3
    )
    plain = cap.update(next(a for a in r1.artefacts if a.kind == "plain_update"))
    assert plain.meta.setting == "plaintext" and plain.truth is None  # no ground truth inside
    masked = cap.masked(next(a for a in r2.artefacts if a.kind == "masked_input"))
    assert (
        masked.dtype == np.uint32
        and masked.size == sum(t.numel() for t in plain.before.values()) + 1
    )
    with pytest.raises(CaptureError, match="already in the capture"):
        write_capture(root, rounds=[RoundCapture(round_id=1, meta=r1.meta, before=plain.before)])
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(root, copy)
    victim = copy / r2.artefacts[1].file
    victim.write_bytes(victim.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(AttackInputError, match="does not match its sha256"):
        CaptureDir.open(copy)
    (copy / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(AttackInputError, match="not fedmor-capture-dir-v2 or fedmor-capture-dir-v1"):
        CaptureDir.open(copy)
    with pytest.raises(AttackInputError, match=r"no manifest\.json"):
        CaptureDir.open(tmp_path)


def test_capture_without_ground_truth_reports_what_was_recovered(
    capture: tuple[Path, dict[str, MemberTruth]], tmp_path: Path
) -> None:
    root, _ = capture
    report = audit_capture_dir(root, tmp_path / "audit")
    checks = {c.setting: c for c in report.checks}
    # The single-sample update: every strong row names the same input, recovered exactly.
    plain = checks["round 1 plain update of a"]
    assert plain.value >= 0.99 and plain.verdict.startswith("leaks")
    assert (tmp_path / "audit" / "recovered").is_dir()
    # Masked inputs look like uniform noise; no member's both masks could be rebuilt.
    for m in MEMBERS:
        c = checks[f"round 2 masked input of {m}"]
        assert "no measurable leak" in c.verdict and c.artefact.startswith("masked input")
    shares = checks["round 2: unmasking shares of 3 member(s)"]
    assert "no measurable leak" in shares.verdict
    assert shares.value < float(shares.baseline.split("threshold ")[1].split(":")[0])
    assert not checks["round 2 aggregate"].verdict.startswith("leaks")
    log = next(c for c in report.checks if c.artefact == "reward-query log (captured)")
    assert log.verdict.startswith("inconclusive") and "80 (image hash" in log.recovered
    assert not report.reconstructions and not report.memberships


def test_capture_with_ground_truth_scores_the_attacks(
    capture: tuple[Path, dict[str, MemberTruth]], tmp_path: Path
) -> None:
    root, truth = capture
    report = audit_capture_dir(root, tmp_path / "audit", truth=truth)
    rows = {(r.setting.split(":")[0], r.attack): r for r in report.reconstructions}
    plain = rows[("round 1 plain update of a", "analytic")]
    assert plain.metrics["cosine"].mean >= 0.99 and plain.verdict.startswith("leaks")
    for attack in ("analytic", "inverting-gradients"):
        row = rows[("round 2 aggregate", attack)]
        assert row.verdict.startswith(NO_LEAK), row.verdict
    cards = {m.member: {v.artefact: v.level for v in m.verdicts} for m in report.summary.members}
    # Round 1's published router is a's update alone: a's aggregate card leaks through it,
    # while b took part only in the secure round.
    assert cards["a"][PLAIN] == "leak" and cards["a"][AGG] == "leak"
    assert rows[("round 1 aggregate", "analytic")].verdict.startswith("leaks")
    assert cards["b"][AGG] == "no measurable leak"


def test_audit_command_takes_a_capture_and_one_members_ground_truth(
    capture: tuple[Path, dict[str, MemberTruth]],
    data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, truth = capture
    emb = tmp_path / "a-truth.safetensors"
    a = truth["a"]
    assert a.pool is not None
    # One tensor per round: the samples behind a's update of that round.
    save_file(
        {f"round-{r}": t.contiguous() for r, t in a.rounds.items()} | {"pool": a.pool.contiguous()},
        str(emb),
    )
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    out = tmp_path / "audit"
    args = parser.parse_args(
        [
            "audit",
            "capture",
            str(root),
            "--out",
            str(out),
            "--member",
            "a",
            "--truth-embeddings",
            str(emb),
            "--truth-pairs",
            str(data),
            "--inversion-steps",
            "20",
        ]
    )
    assert args.handler(args) == 0
    printed = capsys.readouterr().out
    assert f"a: {PLAIN}: LEAK: turn secure aggregation on" in printed
    report = AuditReport.model_validate(json.loads((out / "report.json").read_text()))
    (mia,) = report.memberships
    # The logged scores separate a's train pairs (margin 4) from its eval pairs.
    assert mia.members == ["a"] and mia.auc == 1.0 and mia.verdict.startswith("leaks")
    cards = {m.member: {v.artefact: v.level for v in m.verdicts} for m in report.summary.members}
    assert cards["a"][PLAIN] == "leak"
    assert cards["a"]["reward-query log (captured)"] == "leak"
    bad = parser.parse_args(["audit", "capture", str(root), "--member", "a"])
    with pytest.raises(ValueError, match="go together"):
        bad.handler(bad)


def test_capture_checks_flag_an_unmasked_input_and_rebuildable_masks(
    capture: tuple[Path, dict[str, MemberTruth]], tmp_path: Path
) -> None:
    """The structural checks can fail: an input sent without masks (small signed ring values)
    or with a biased mask is not uniform, beside an honest one that passes at the audit's
    family-wise level; and a server holding both kinds of shares of one member could unmask
    it."""
    root, _ = capture
    r2 = CaptureDir.open(root).manifest.rounds[1]
    agg = CaptureDir.open(root).update(next(a for a in r2.artefacts if a.kind == "aggregate"))
    n = sum(t.numel() for t in agg.before.values()) + 1
    rng = np.random.default_rng(0)
    plain = rng.normal(0, 1000, n).astype(np.int32).view(np.uint32)
    honest = rng.integers(0, 2**32, n, dtype=np.uint32)
    biased = honest.copy()
    biased[rng.random(n) < 0.05] = 0  # one word in twenty left unmasked at zero
    both = {"self_mask_shares": {"0": "AA=="}, "key_shares": {"0": "AA=="}}
    bad = RoundCapture(
        round_id=7,
        meta=r2.meta,
        before=agg.before,
        masked_inputs={"a": plain.tobytes(), "b": honest.tobytes(), "c": biased.tobytes()},
        unmasking={m: both for m in MEMBERS},
        threshold=2,
        secagg_ids={m: i for i, m in enumerate(MEMBERS)},
    )
    write_capture(tmp_path / "bad", rounds=[bad])
    report = audit_capture_dir(tmp_path / "bad", tmp_path / "audit")
    checks = {c.setting: c for c in report.checks}
    assert checks["round 7 masked input of a"].verdict.startswith("leaks")
    assert checks["round 7 masked input of c"].verdict.startswith("leaks")
    assert "no measurable leak" in checks["round 7 masked input of b"].verdict
    assert "over the audit's 3 masked input(s)" in checks["round 7 masked input of b"].baseline
    shares = next(c for c in report.checks
                  if c.artefact == "unmasking shares (secure aggregation)")
    assert shares.verdict.startswith("leaks") and "['a']" in shares.verdict
    with pytest.raises(CaptureError, match="unfit for file names"):
        write_capture(
            tmp_path / "x",
            rounds=[
                RoundCapture(
                    round_id=1,
                    meta=r2.meta,
                    before=agg.before,
                    masked_inputs={"../a": b"\0" * 4 * n},
                )
            ],
        )


def _kolmogorov_tail(x: float) -> float:
    """P(sqrt(n) D > x) for the KS distance D of n uniform values, n large."""
    return 2 * sum((-1) ** (k - 1) * np.exp(-2 * k * k * x * x) for k in range(1, 50))


@pytest.mark.parametrize("tests", [1, 3, 12])
def test_the_uniformity_level_is_family_wise(tests: int) -> None:
    """Each of an audit's masked inputs is held to 0.1% / m, so honest masks raise a false
    alarm in at most 0.1% of audits however many inputs they hold (Bonferroni)."""
    n = 10_000
    x = _ks_critical(n, tests) * n**0.5
    assert _kolmogorov_tail(x) == pytest.approx(0.001 / tests, rel=1e-3)


def test_a_failed_round_round_trips_and_a_v1_directory_reads_and_upgrades(
    capture: tuple[Path, dict[str, MemberTruth]], tmp_path: Path
) -> None:
    """A failed round keeps what the server received (masked inputs), no aggregate, the reason;
    a v1 directory (no status fields) reads as finished rounds and becomes v2 on append."""
    import shutil

    root, _ = capture
    v1 = tmp_path / "v1"
    shutil.copytree(root, v1)
    raw = json.loads((v1 / "manifest.json").read_text())
    raw["format"] = "fedmor-capture-dir-v1"
    for rnd in raw["rounds"]:
        del rnd["status"], rnd["failure"]
    (v1 / "manifest.json").write_text(json.dumps(raw))
    cap = CaptureDir.open(v1)
    assert cap.manifest.format == "fedmor-capture-dir-v1"
    assert [r.status for r in cap.manifest.rounds] == ["finished", "finished"]
    r2 = cap.manifest.rounds[1]
    agg = cap.update(next(a for a in r2.artefacts if a.kind == "aggregate"))
    received = {a.member: cap.masked(a).tobytes() for a in r2.artefacts
                if a.kind == "masked_input" and a.member}
    failed = RoundCapture(round_id=3, meta=r2.meta, before=agg.before, masked_inputs=received,
                          threshold=2, secagg_ids=r2.secagg_ids, status="failed",
                          failure="stage unmask: too few survivors")
    with pytest.raises(CaptureError, match="no published router"):
        write_capture(v1, rounds=[RoundCapture(**{**failed.__dict__, "aggregate": agg.after})])
    write_capture(v1, rounds=[failed])
    cap = CaptureDir.open(v1)
    assert cap.manifest.format == "fedmor-capture-dir-v2"
    r1, _, r3 = cap.manifest.rounds
    assert r1.status == "finished" and r1.router_version is not None
    assert r3.status == "failed" and r3.failure == "stage unmask: too few survivors"
    assert r3.router_version is None and {a.kind for a in r3.artefacts} == {"masked_input"}
    assert {a.member: cap.masked(a).tobytes() for a in r3.artefacts} == received
    report = audit_capture_dir(v1, tmp_path / "audit")
    (note,) = [n for n in report.notes if n.startswith("Round 3")]
    assert "failed: stage unmask: too few survivors" in note and "no aggregate" in note
    checks = {c.setting: c for c in report.checks}
    assert all(f"round 3 (failed) masked input of {m}" in checks for m in received)
    assert not any(c.setting.startswith("round 3 (failed) aggregate") for c in report.checks)
