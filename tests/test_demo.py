"""``fedmor demo`` on a cheap config: real client processes, real secure rounds, real REST
reward queries during GRPO (one run shared by the tests of the three stages)."""

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from fedmor_local._demo import DemoConfig, run_demo
from sdk.data import HELDOUT_CATEGORIES, load_pairs
from sdk.router import Router, SiteRound, image_digest, local_router_update
from sdk.secagg import QuantizationConfig
from sdk.wire import ROUTER_ROUND_PARAM, ConsortiumRouterConfig, RoundInfo

CONFIG = DemoConfig(clients=("detail", "safety"), train_pairs=64, eval_pairs=24, heldout_pairs=8,
                    rm_steps=16, rm_batch_size=8, router_max_pairs=64, router_rounds=3,
                    router_epochs=5,
                    grpo_steps=3, grpo_prompts=4, warmup_steps=20, eval_queries=4,
                    capture=True)


# What the demo's secure rounds and reward queries leave in its capture.
CAPTURED_KINDS = ("masked input (secure aggregation)", "unmasking shares (secure aggregation)",
                  "router aggregate (published)", "reward-query log (captured)")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path_factory.mktemp("demo") / "run"
    return run_dir, run_demo(CONFIG, run_dir)


def test_demo_stage_a_shows_the_style_clients_disagree(run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, metrics = run
    stage_a = metrics["stage_a"]
    assert stage_a["architectures"] == {"detail": "qwen2_vl", "safety": "qwen2_5_vl"}
    assert stage_a["own_accuracy"]["detail"] >= 0.75
    assert stage_a["own_accuracy"]["safety"] >= 0.75
    # The detail-focused model prefers long answers: it ranks the safety pairs backwards.
    assert stage_a["cross_accuracy"]["detail"]["safety"] < 0.5
    assert json.loads((run_dir / "metrics.json").read_text()) == metrics
    for checkpoint in stage_a["checkpoints"].values():
        assert (Path(checkpoint) / "normalizer.json").is_file()


def _versions(run_dir: Path) -> dict[int, np.ndarray]:
    with sqlite3.connect(run_dir / "consortium" / "server" / "server.db") as db:
        return {v: np.frombuffer(b, dtype="<f4")
                for v, b in db.execute("SELECT version, blob FROM router_versions")}


def test_demo_stage_b_router_is_the_secure_mean_of_the_clients_local_training(
        run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, metrics = run
    stage_b = metrics["stage_b"]
    assert [r["dropouts"] for r in stage_b["rounds"]] == [[]] * CONFIG.router_rounds
    versions = _versions(run_dir)
    # The members trained with the built-in update on the server's declared configuration
    # (their [router_training] named only their pairs): redo each round's local training here,
    # in the clear, from the same base: the secure aggregate published by the server equals
    # sum_k n_k phi_k / sum_k n_k. The rounds sum deltas from the published seeded router
    # (version 1) within the default clip range.
    declared = ConsortiumRouterConfig.model_validate_json(
        (run_dir / "router" / "config.json").read_text())
    assert stage_b["router_config_sha256"] == declared.sha256
    assert stage_b["router_params"] == declared.num_params == len(versions[1])
    for site, client in zip(("site-0", "site-1"), CONFIG.clients, strict=True):
        settings = json.loads((run_dir / "consortium" / f"{site}.json").read_text())
        assert "update_source" not in settings and settings["router_training"]["pairs_dir"] \
            == str(run_dir / "data" / "clients" / client / "train")
    step = 2.0 ** -QuantizationConfig.fitted(num_clients=2, clip_range=1.0,
                                             max_weight=1000).scale_bits
    base = versions[1].copy()
    assert [r["router_version"] for r in stage_b["rounds"]] == \
        list(range(2, CONFIG.router_rounds + 2))
    for index, r in enumerate(stage_b["rounds"]):
        info = RoundInfo.model_construct(round_id=r["round_id"], vector_length=len(versions[1]),
                                         params={ROUTER_ROUND_PARAM: index})
        ups = [local_router_update(SiteRound(
            config=declared, name=site, info=info, base=base,
            pairs_dir=run_dir / "data" / "clients" / client / "train"))
            for site, client in zip(("site-0", "site-1"), CONFIG.clients, strict=True)]
        expected = sum(u.num_samples * u.params.astype(np.float64) for u in ups) \
            / sum(u.num_samples for u in ups)
        published = versions[r["router_version"]]
        # Quantization (one step) plus float rounding: the client processes train with other
        # thread counts, which reorders sums (measured: max 3e-5 over 10k parameters).
        assert np.max(np.abs(published - expected)) <= step + 1e-4
        assert np.median(np.abs(published - expected)) <= step + 1e-6
        assert np.max(np.abs(published - ups[0].params)) > 1e-3  # not one client's update (~8e-3 off)
        base = published.copy()
    final = Router.load(run_dir / "router" / "final")
    np.testing.assert_array_equal(final.get_flat_params(), versions[max(versions)])
    # The federated router sends responses to their own client far above chance (1/2).
    assert stage_b["routing_accuracy"] >= 0.8
    assert stage_b["id_avg"]["Router+RM"] > stage_b["id_avg"]["Random"]
    assert stage_b["bytes"]["uplink"] > 0 and stage_b["bytes"]["downlink"] > 0


def test_demo_stage_c_every_reward_came_from_a_client_process(
        run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, metrics = run
    stage_c = metrics["stage_c"]
    assert [s["step"] for s in stage_c["steps"]] == [1, 2, 3]
    completions = 3 * stage_c["grpo"]["prompts_per_step"] * stage_c["grpo"]["num_generations"]
    # The server revealed its judges to the demo (the whole consortium): every completion but
    # the empty ones went to the client its router chose.
    assert sum(stage_c["arm_counts"].values()) + stage_c["empty_completions"] == completions
    assert stage_c["failed_completions"] == 0
    # The broker's audit trail in the server's store: the routed queries scored every GRPO
    # completion but the empty ones (those get -c without a query).
    with sqlite3.connect(run_dir / "consortium" / "server" / "server.db") as db:
        queried = [json.loads(d)["items"] for a, d in db.execute("SELECT action, detail FROM audit")
                   if a == "reward_query"]
    assert sum(queried) + stage_c["empty_completions"] == completions
    assert sum(queried) > 0
    assert stage_c["bytes"]["reward_queries"] > 0
    assert set(stage_c["results"]) == {"base", "MoR (REST)"}
    for row in stage_c["results"].values():
        assert 0.0 <= row["heldout_avg"] <= 1.0
        assert set(row["per_category"]) == set(HELDOUT_CATEGORIES)
    base = _tensors(run_dir / "cache")
    aligned = _tensors(run_dir / "alignment" / "policy")
    assert base.keys() == aligned.keys()
    assert any(not torch.equal(base[k], aligned[k]) for k in base)  # GRPO moved the policy


def test_demo_style_clients_are_judged_by_held_out_reward_models(
        run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, metrics = run
    stage_c = metrics["stage_c"]
    # The judges learned the clients' preferences from pairs the clients never had: no image of
    # the judges' training data is one of the clients' (another synthesis seed).
    for client, judge in stage_c["judges"].items():
        assert judge["architecture"] != metrics["stage_a"]["architectures"][client]
        assert judge["accuracy_on_client_eval"] >= 0.75
        ours = {image_digest(p.image) for p in load_pairs(run_dir / "data" / "clients" / client
                                                           / "train")}
        theirs = {image_digest(p.image) for p in load_pairs(run_dir / "judges" / "data" / "clients"
                                                             / client / "train")}
        assert not ours & theirs
    for row in stage_c["results"].values():
        assert set(row["style"]) == set(CONFIG.clients)
        for score in row["style"].values():
            assert score["n"] == 3 * CONFIG.eval_queries
            assert 0.0 <= score["win_rate"] <= 1.0
    # Each policy's answers were judged, not copied: the two policies' scores differ.
    scores = [r["style"]["detail"]["mean_score"] for r in stage_c["results"].values()]
    assert all(math.isfinite(v) for v in scores) and scores[0] != scores[1]


def test_demo_run_directory_has_config_metrics_and_plots(
        run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, metrics = run
    assert DemoConfig.model_validate_json((run_dir / "config.json").read_text()) == CONFIG
    assert set(metrics["communication_bytes"]) == {"router rounds", "reward queries"}
    assert metrics["plots"] == ["router_accuracy.png", "alignment.png", "communication.png"]
    for name in metrics["plots"]:
        assert (run_dir / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(metrics["wall_s"]) == {"stage_a", "stage_b", "stage_c", "stage_c_warmup",
                                      "total"}
    _assert_alignment_figure(metrics["stage_c"])  # what alignment.png draws, from the run


def _assert_alignment_figure(stage_c: dict[str, Any]) -> None:
    """alignment.png's data is the summary line's figure: expected accuracy per category,
    base beside aligned, and each step's routed reward under its moving average."""
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer

    from fedmor_local._demo_report import alignment_figure
    from sdk.curves import moving_average

    fig = alignment_figure(stage_c)
    bars, curve = fig.axes
    (base_name, base), (name, aligned) = list(stage_c["results"].items())[:2]
    ids = stage_c["id_categories"]
    cats = [*ids, *(c for c in base["expected"] if c not in ids)]
    groups = [c for c in bars.containers if isinstance(c, BarContainer)]
    assert [g.get_label() for g in groups] == [base_name, name]
    for group, row in zip(groups, (base, aligned), strict=True):
        assert [b.get_height() for b in group] == [row["expected"][c] for c in cats]
    if base["id_expected"] is not None:
        points = 100 * (aligned["id_expected"] - base["id_expected"])
        assert f"({points:+.1f} points)" in bars.get_title()
    steps = [e for e in stage_c["steps"] if e["reward"] is not None]
    raw, average = curve.get_lines()
    assert list(raw.get_xdata()) == [e["step"] for e in steps]
    assert list(raw.get_ydata()) == [e["reward"] for e in steps]
    np.testing.assert_allclose(average.get_ydata(),
                               moving_average([e["reward"] for e in steps]), rtol=1e-12)
    plt.close(fig)


def test_the_alignment_figure_shows_the_expected_accuracy_and_the_reward_trend() -> None:
    """On stage C's metrics as the demo records them (two policies, expected accuracy per
    category, the trainer's per-step log), with a noisy rising reward whose moving average
    is smoother than the raw trace."""
    rng = np.random.default_rng(0)

    def row(expected: dict[str, float]) -> dict[str, Any]:
        ids = [expected[c] for c in ("diagram", "chart")]
        return {"id_avg": 0.5, "heldout_avg": 0.4, "per_category": dict.fromkeys(expected, 0.5),
                "greedy": dict.fromkeys(expected, 0.5), "id_expected": sum(ids) / 2,
                "heldout_expected": expected["heldout-a"], "expected": expected, "style": {}}

    stage_c = {"id_categories": ["diagram", "chart"],
               "results": {"base": row({"heldout-a": 0.30, "diagram": 0.50, "chart": 0.60}),
                           "MoR (REST)": row({"heldout-a": 0.31, "diagram": 0.58,
                                              "chart": 0.62})},
               "steps": [{"step": s, "loss": 0.1, "reward": float(0.02 * s + rng.normal(0, .4)),
                          "kl": 0.001 * s} for s in range(1, 61)]}
    stage_c["steps"][7]["reward"] = None  # a log line without a reward is skipped, not zero
    _assert_alignment_figure(stage_c)
    from sdk.curves import moving_average

    rewards = np.array([e["reward"] for e in stage_c["steps"] if e["reward"] is not None])
    average = moving_average(list(rewards))
    assert np.diff(average[10:]).std() < np.diff(rewards[10:]).std() / 3


def _tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the (single) safetensors file under ``directory``."""
    (path,) = directory.rglob("*.safetensors")
    return load_file(str(path))


@pytest.fixture(scope="module")
def capture_audit(run: tuple[Path, dict[str, Any]],
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """``fedmor audit capture`` on the demo's capture, once: its folder and its report."""
    from attacks import audit_capture_dir

    out = tmp_path_factory.mktemp("capture-audit")
    return out, audit_capture_dir(run[0] / "capture", out)


def test_demo_capture_holds_every_round_and_query_and_audits(
        run: tuple[Path, dict[str, Any]], capture_audit: tuple[Path, Any]) -> None:
    """``fedmor demo --capture``: the server kept each secure round as received and every reward
    query of stage C, and ``fedmor audit capture`` reports on them with one summary card per
    member and captured artefact kind."""
    from attacks import AuditReport
    from attacks._capture_dir import CaptureDir

    run_dir, _ = run
    cap = CaptureDir.open(run_dir / "capture")  # every file matches its sha256
    rounds = cap.manifest.rounds
    assert len(rounds) == CONFIG.router_rounds
    for r in rounds:
        assert r.secure_aggregation and sorted(a.kind for a in r.artefacts) == (
            ["aggregate"] + ["masked_input"] * 2 + ["unmasking_shares"] * 2)
    assert cap.manifest.n_reward_queries > 0
    assert {q.member for q in cap.reward_queries()} <= {"site-0", "site-1"}
    out, report = capture_audit
    html = (out / "report.html").read_text()
    for kind in CAPTURED_KINDS:  # one section per captured artefact kind
        assert html.count(f'<section class="captured" data-artefact="{kind}">') == 1, kind
    again = AuditReport.model_validate_json((out / "report.json").read_text())
    cards = {m.member: {v.artefact: v.level for v in m.verdicts} for m in again.summary.members}
    assert report.summary == again.summary
    for member in ("site-0", "site-1"):
        assert cards[member]["masked input (secure aggregation)"] == "no measurable leak"
        assert cards[member]["router aggregate (published)"] != "leak"


def test_demo_capture_report_sections_in_chromium(
        capture_audit: tuple[Path, Any], tmp_path: Path) -> None:
    """The report of the real demo capture, rendered by headless Chromium: a section per
    captured artefact kind, each finding with its attack, baseline, interval and verdict in
    words and colour as report.json has them (tests/_chromium.py)."""
    from tests._chromium import capture_sections, ensure_chromium

    seen = capture_sections(ensure_chromium(), capture_audit[0], tmp_path)
    assert set(CAPTURED_KINDS) <= set(seen)
    assert all(seen[kind] for kind in CAPTURED_KINDS)


def test_the_change_line_is_computed_from_the_results() -> None:
    """What alignment changed, in words: rose, fell or did not change, from the figures."""
    from fedmor_local._demo_report import change_summary

    def result(id_expected: float, heldout: float, win: float) -> dict[str, object]:
        return {"id_expected": id_expected, "heldout_expected": heldout,
                "style": {"detail": {"win_rate": win, "mean_score": 0.0}}}

    stage_c = {"id_categories": ["diagram"],
               "results": {"base": result(0.510, 0.358, 0.812),
                           "MoR (REST)": result(0.587, 0.358, 0.781)}}
    line = change_summary(stage_c)
    assert line.startswith("MoR (REST) against the base policy: ")
    assert "task categories (diagram) rose from 0.510 to 0.587 (+7.7 points)" in line
    assert "held-out categories it did not change (0.358)" in line
    assert "the detail win rate fell from 0.812 to 0.781 (-3.1 points)" in line
