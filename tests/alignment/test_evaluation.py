from pathlib import Path

import pytest

from sdk.alignment import (
    CategoryScore,
    EvalSettings,
    PolicyEvaluation,
    best_of_n_accuracy,
    evaluate_policy,
    style_scores,
)
from sdk.data import PreferencePair, Query, load_queries
from tests.alignment.conftest import grey

OPTIONS = ("A. red", "B. green", "C. blue", "D. yellow")


def q(i: int, answer: str) -> Query:
    return Query(id=f"q{i}", image=grey(), prompt="p", category="color", answer=answer,
                 options=OPTIONS)


def test_best_of_n_counts_a_query_if_any_sample_is_strictly_right() -> None:
    queries = [q(0, "A. red"), q(1, "B. green"), q(2, "C. blue"), q(3, "D. yellow")]
    samples = [
        ["A. red", "A. red", "the answer is C. blue", "D"],
        ["C. blue", "B. green", "C", "A. red"],
        ["junk", "junk", "c. blue.", "junk"],
    ]
    assert best_of_n_accuracy(queries, samples) == pytest.approx(3 / 4)
    assert best_of_n_accuracy(queries, samples[:1]) == pytest.approx(1 / 4)  # greedy-style
    with pytest.raises(ValueError, match="sample 0 has 1 responses for 4 queries"):
        best_of_n_accuracy(queries, [["A. red"]])


def test_averages_split_in_distribution_and_heldout() -> None:
    ev = PolicyEvaluation({"diagram": CategoryScore(0.5, 0.25, 4, sampled=0.25),
                           "poster": CategoryScore(1.0, 0.5, 4, sampled=0.75),
                           "color": CategoryScore(0.0, 0.0, 4)})
    assert ev.average(["diagram", "poster"]) == pytest.approx(0.75)
    assert ev.average(["diagram", "poster"], greedy=True) == pytest.approx(0.375)
    assert ev.average(["diagram", "poster"], sampled=True) == pytest.approx(0.5)
    assert ev.average(["color"]) == 0.0


def test_style_scores_win_rate_against_the_rejected_answer() -> None:
    pairs = [PreferencePair(id=str(i), image=grey(), prompt="describe", chosen="long answer",
                            rejected="short", category="detail") for i in range(4)]

    def judge(images, prompts, responses):  # the judge prefers longer answers
        return [float(len(r)) for r in responses]

    got = style_scores(judge, pairs, ["much longer answer", "tiny", "short", "a longer one"])
    assert got.win_rate == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    assert got.mean_score == pytest.approx((18 + 4 + 5 + 12) / 4)


def test_evaluate_policy_runs_on_a_real_tiny_model(base_policy: Path, data_dir: Path) -> None:
    queries = load_queries(data_dir / "policy" / "eval" / "color")
    ev = evaluate_policy(base_policy, {"color": queries},
                         EvalSettings(samples=2, max_new_tokens=3))
    score = ev.categories["color"]
    assert score.n == len(queries)
    assert 0.0 <= score.greedy <= 1.0 and 0.0 <= score.best_of_n <= 1.0
    # One sample is never right more often than the best of two.
    assert 0.0 <= score.sampled <= score.best_of_n
