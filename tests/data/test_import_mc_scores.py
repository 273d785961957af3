"""``fedmor data import mc`` and ``scores``: the paper's conversions into pairs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import datasets
import pytest
from _importkit import color_image, write_mc_jsonl

import sdk.cli
from sdk.data import ImportConfig, import_data, load_pairs, load_queries
from sdk.data._catalog import get_category


def test_mc_prefers_the_right_option_in_the_benchmark_template(tmp_path: Path) -> None:
    source = write_mc_jsonl(tmp_path / "src", 12)
    summary = import_data("mc", source, tmp_path / "out", ImportConfig(eval_fraction=0.25),
                          progress=False)
    pairs = load_pairs(tmp_path / "out" / "train") + load_pairs(tmp_path / "out" / "eval")
    items = [json.loads(line) for line in source.read_text().splitlines()]
    assert len(pairs) == 12 * 3 and summary.dropped == {}
    # The synthetic benchmark's own prompt for the same question and options.
    synthetic = cast(Any, get_category("color")).options()
    assert pairs[0].prompt == (
        f"What color fills the image? Options: {' '.join(synthetic)}. Answer with one option."
    )
    by_item = {p.id.rsplit("-", 1)[0]: p for p in pairs}
    for item in items:
        expected = "ABCD".index(item["Ground truth"])
        assert by_item[item["question_id"]].chosen == synthetic[expected]
    assert all(p.rejected != p.chosen and p.rejected in synthetic for p in pairs)
    queries = load_queries(tmp_path / "out" / "train") + load_queries(tmp_path / "out" / "eval")
    assert len(queries) == 12 and all(q.options == synthetic for q in queries)
    assert {q.id: q.answer for q in queries}["q0"] == by_item["q0"].chosen


def test_mc_wrong_one_draws_one_wrong_option_reproducibly(tmp_path: Path) -> None:
    source = write_mc_jsonl(tmp_path / "src", 20)
    config = ImportConfig(wrong="one", eval_fraction=0.0)
    import_data("mc", source, tmp_path / "a", config, progress=False)
    import_data("mc", source, tmp_path / "b", config, progress=False)
    first = (tmp_path / "a" / "train" / "pairs.jsonl").read_bytes()
    assert first == (tmp_path / "b" / "train" / "pairs.jsonl").read_bytes()
    pairs = load_pairs(tmp_path / "a" / "train")
    assert len(pairs) == 20 and len({p.rejected for p in pairs}) > 1


def test_mc_answer_outside_the_options_names_file_and_record(tmp_path: Path) -> None:
    source = write_mc_jsonl(tmp_path / "src", 3)
    lines = source.read_text().splitlines()
    bad = json.loads(lines[1]) | {"Ground truth": "purple"}
    source.write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    with pytest.raises(ValueError, match=r"items.jsonl:2: answer is not one of the 4 options"):
        import_data("mc", source, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]  # no temporary folder left


def _vlfeedback(tmp_path: Path) -> Path:
    """A VLFeedback-like Parquet file written by ``datasets``: ratings as {"Rating": "4"}."""
    import random

    rng = random.Random(1)
    rows = []
    for index, ratings in enumerate([(5, 3, 1), (4, 4, 3), (2, 3, "N/A")]):
        completions = [
            {"response": f"answer {index}-{k}",
             "annotations": {"Helpfulness": {"Rating": str(r)},
                             "Ethics": {"Rating": "5"}}}
            for k, r in enumerate(ratings)
        ]
        rows.append({"id": f"v{index}", "image": color_image(rng, "red"),
                     "instruction": f"Describe image {index}.", "completions": completions})
    features = datasets.Features({
        "id": datasets.Value("string"), "image": datasets.Image(),
        "instruction": datasets.Value("string"),
        "completions": datasets.List({"response": datasets.Value("string"), "annotations": {
            "Helpfulness": {"Rating": datasets.Value("string")},
            "Ethics": {"Rating": datasets.Value("string")}}}),
    })
    path = tmp_path / "vlfeedback.parquet"
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


def test_scores_pairs_from_rating_gaps_with_aspects_and_margin(tmp_path: Path) -> None:
    source = _vlfeedback(tmp_path)
    config = ImportConfig(aspects=("Helpfulness",), min_margin=2.0, eval_fraction=0.0)
    summary = import_data("scores", source, tmp_path / "out", config, progress=False)
    pairs = {(p.chosen, p.rejected) for p in load_pairs(tmp_path / "out" / "train")}
    # v0: 5 > 3 > 1 by 2 each; v1: 4, 4, 3 under the margin; v2: 2, 3 and N/A (dropped).
    assert pairs == {("answer 0-0", "answer 0-1"), ("answer 0-0", "answer 0-2"),
                     ("answer 0-1", "answer 0-2")}
    assert summary.dropped == {
        "response pair under the minimum margin": 4,
        "response without a numeric rating on every aspect": 1,
        "record without a pair over the margin": 2,
    }
    # With both aspects averaged, v0's 5 vs 3 is a gap of 1: under a margin of 2.
    summary = import_data("scores", source, tmp_path / "both",
                          config.model_copy(update={"aspects": ()}), progress=False)
    assert {(p.chosen, p.rejected) for p in load_pairs(tmp_path / "both" / "train")} == {
        ("answer 0-0", "answer 0-2")}


def test_cli_scores_with_mapped_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    source = _vlfeedback(tmp_path)
    argv = ["data", "import", "scores", str(source), "--out", str(tmp_path / "out"),
            "--column", "prompt=instruction", "--aspects", "Helpfulness", "--min-margin", "1",
            "--eval-fraction", "0", "--category", "vlfeedback"]
    assert sdk.cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "train: 6 pairs (vlfeedback 6)" in printed
    assert "dropped 1: response without a numeric rating on every aspect" in printed
    assert sdk.cli.main([*argv[:5], str(tmp_path / "x"), "--column", "nope=x"]) == 1
    assert "unknown field(s) ['nope'] for 'scores'" in capsys.readouterr().err
