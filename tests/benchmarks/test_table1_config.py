"""Table 1's typed settings (examples/benchmarks/_table1_config.py): flags and config files.

The row settings are pinned as the flag-by-flag ``main`` computed them before the config model:
``--resume`` compares them with ``settings.json`` of saved runs, so a drift would refuse (or,
worse, silently mix) rows saved by earlier runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "examples" / "benchmarks"))
import table1
from _table1_clients import RAW_SCALES
from _table1_config import Table1Config, UsageError
from _table1_flags import add_model_flags, parse_model
from _table1_methods import method_registry, pick_methods

ROW_COLUMNS = ["id", "heldout", "id_greedy", "id_sampled", "id_expected", "heldout_expected",
               "id_expected_bo3", "heldout_expected_bo3"]
WARMUP = {"steps": 1600, "batch_size": 16, "learning_rate": 0.001, "warmup_steps": 10,
          "seed": 0, "stop_at_expected": 0.72, "check_every": 50, "label_noise": 0.0}
DEFAULT_SETTINGS: dict[str, Any] = {
    "quick": False, "raw_scales": "mixed", "router_rounds": 30, "router_epochs": 1,
    "steps": None, "beta": None, "freeze_vision": True, "lora_rank": 8,
    "lora_targets": "q_proj,k_proj,v_proj,o_proj", "lora_vision": False, "learning_rate": None,
    "warmup_target": 0.72, "warmup_label_noise": 0.0, "num_generations": 4,
    "grpo_temperature": None, "scale_rewards": None, "invalid_choice_reward": -1.6,
    "style": True, "row_columns": ROW_COLUMNS, "warmup": WARMUP}
QUICK_WEIGHTS = ["--quick", "--lora-rank", "0", "--no-freeze-vision", "--warmup-target", "none",
                 "--steps", "5", "--beta", "0.2", "--scale-rewards", "batch", "--no-style",
                 "--seeds", "2", "--methods", "mor"]
QUICK_WEIGHTS_SETTINGS = DEFAULT_SETTINGS | {
    "quick": True, "steps": 5, "beta": 0.2, "freeze_vision": False, "lora_rank": 0,
    "warmup_target": None, "scale_rewards": "batch", "style": False,
    "warmup": WARMUP | {"stop_at_expected": None}}
LORA_VISION = ["--lora-vision", "--lora-targets", "q_proj,v_proj", "--learning-rate", "0.002",
               "--warmup-label-noise", "0.3", "--raw-scales", "mild", "--grpo-temperature",
               "0.7", "--num-generations", "6", "--invalid-choice-reward", "-2",
               "--router-rounds", "3", "--router-epochs", "2", "--resume", "--overhead-steps", "0"]
LORA_VISION_SETTINGS = DEFAULT_SETTINGS | {
    "raw_scales": "mild", "router_rounds": 3, "router_epochs": 2, "lora_targets": "q_proj,v_proj",
    "lora_vision": True, "learning_rate": 0.002, "warmup_label_noise": 0.3,
    "num_generations": 6, "grpo_temperature": 0.7, "invalid_choice_reward": -2.0,
    "warmup": WARMUP | {"label_noise": 0.3}}


class _Stop(Exception):
    pass


def _row_log_arguments(argv: list[str], tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What ``main`` hands RowLog for ``argv`` (RowLog is its first step after the checks)."""
    seen: dict[str, Any] = {}

    def row_log(out: Path, settings: dict[str, Any], resume: bool, *,
                defaults: dict[str, Any]) -> None:
        seen.update(out=out, settings=settings, resume=resume, defaults=defaults)
        raise _Stop

    monkeypatch.setattr(table1, "RowLog", row_log)
    monkeypatch.setattr(sys, "argv", ["table1.py", "--out", str(tmp_path), *argv])
    with pytest.raises(_Stop):
        table1.main()
    return seen


@pytest.mark.parametrize(("argv", "settings", "resume"), [
    ([], DEFAULT_SETTINGS, False),
    (QUICK_WEIGHTS, QUICK_WEIGHTS_SETTINGS, False),
    (LORA_VISION, LORA_VISION_SETTINGS, True),
])
def test_row_settings_are_those_saved_runs_recorded(
        argv: list[str], settings: dict[str, Any], resume: bool, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _row_log_arguments(argv, tmp_path, monkeypatch)
    assert seen["settings"] == settings
    assert list(seen["settings"]) == list(settings)  # the key order of settings.json's dump too
    assert json.dumps(seen["settings"]) == json.dumps(settings)  # -2 saved as -2.0, as before
    assert seen["resume"] is resume and seen["out"] == tmp_path
    # A setting saved rows lack was at its default; the derived ones have none.
    assert seen["defaults"] == {k: v for k, v in DEFAULT_SETTINGS.items()
                                if k not in ("row_columns", "warmup")} | {
        "row_columns": None, "warmup": None}


def test_a_config_file_is_the_base_and_flags_override_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('quick = true\nlora_rank = 0\nfreeze_vision = false\nsteps = 7\n'
                    'raw_scales = "mild"\ninvalid_choice_reward = -2\n')
    seen = _row_log_arguments(["--config", str(toml), "--steps", "9"], tmp_path, monkeypatch)
    assert seen["settings"] == DEFAULT_SETTINGS | {
        "quick": True, "lora_rank": 0, "freeze_vision": False, "steps": 9, "raw_scales": "mild",
        "invalid_choice_reward": -2.0}
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps({"warmup_target": None, "lora_vision": True}))
    seen = _row_log_arguments(["--config", str(as_json)], tmp_path, monkeypatch)
    assert seen["settings"]["warmup"]["stop_at_expected"] is None
    assert seen["settings"]["lora_vision"] is True


@pytest.mark.parametrize(("content", "argv", "message"), [
    ("lora_rnak = 4\n", [], "--lora-rnak: Extra inputs are not permitted"),
    ("lora_rank = 0\nlora_vision = true\n", [], "--lora-vision needs LoRA"),
    ("lora_rank = 0\nlora_vision = true\n", ["--lora-rank", "8"], None),  # the flag wins
    ("warmup_label_noise = 1.0\n", [], "--warmup-label-noise: Input should be less than 1"),
    ("quick = [\n", [], "--config"),
])
def test_config_files_are_checked_like_flags(content: str, argv: list[str], message: str | None,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.toml"
    path.write_text(content)
    if message is None:
        _row_log_arguments(["--config", str(path), *argv], tmp_path, monkeypatch)
        return
    monkeypatch.setattr(sys, "argv", ["table1.py", "--config", str(path), *argv])
    with pytest.raises(SystemExit) as exit_:
        table1.main()
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_every_field_is_a_documented_flag() -> None:
    parser = argparse.ArgumentParser()
    add_model_flags(parser, Table1Config)
    flags = {a.dest: a for a in parser._actions}
    for name, field in Table1Config.model_fields.items():
        assert field.description, name
        assert flags[name].help == field.description
        assert f"--{name.replace('_', '-')}" in flags[name].option_strings
    assert set(get_args(Table1Config.model_fields["raw_scales"].annotation)) == set(RAW_SCALES)
    assert parse_model(parser, Table1Config, []) == Table1Config()


@pytest.mark.parametrize(("argv", "lora_rank", "learning_rate", "freeze_vision"), [
    ([], 8, 1e-3, True),  # LoRA's own learning rate
    (["--lora-rank", "0", "--no-freeze-vision"], None, 3e-4, False),  # GRPOSettings' default
    (["--lora-vision", "--learning-rate", "2e-3"], 8, 2e-3, False),
])
def test_grpo_settings_follow_the_lora_flags(argv: list[str], lora_rank: int | None,
                                             learning_rate: float, freeze_vision: bool) -> None:
    parser = argparse.ArgumentParser()
    add_model_flags(parser, Table1Config)
    grpo = table1.grpo_settings(parse_model(parser, Table1Config, argv))
    assert (grpo.lora.r if grpo.lora else None) == lora_rank
    assert grpo.learning_rate == learning_rate and grpo.freeze_vision is freeze_vision


def test_methods_are_picked_by_name_in_the_order_given() -> None:
    registry = method_registry([], [], chooser=lambda seed: None,  # type: ignore[arg-type,return-value]
                               fedavg=lambda: None, clients=("diagram", "detail"))
    assert {"mor", "fedavg_rm", "best_single_diagram", "best_single_detail"} <= set(registry)
    assert list(pick_methods(registry, " random,mor ,")) == ["random", "mor"]
    assert pick_methods(registry, None) is registry
    with pytest.raises(UsageError, match=r"unknown methods \['mro'\]; choose from"):
        pick_methods(registry, "mor,mro")
