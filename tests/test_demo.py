import json
from pathlib import Path

from sdk._demo import DemoConfig, run_demo


def test_demo_stage_a_shows_the_style_clients_disagree(tmp_path: Path) -> None:
    config = DemoConfig(clients=("detail", "safety"), train_pairs=64, eval_pairs=24,
                        heldout_pairs=8, rm_steps=40, rm_batch_size=8)
    metrics = run_demo(config, tmp_path / "run")

    stage_a = metrics["stage_a"]
    assert stage_a["architectures"] == {"detail": "qwen2_vl", "safety": "qwen2_5_vl"}
    assert stage_a["own_accuracy"]["detail"] >= 0.75
    assert stage_a["own_accuracy"]["safety"] >= 0.75
    # The detail-focused model prefers long answers: it ranks the safety pairs backwards.
    assert stage_a["cross_accuracy"]["detail"]["safety"] < 0.5
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == metrics
    for checkpoint in stage_a["checkpoints"].values():
        assert (Path(checkpoint) / "normalizer.json").is_file()
