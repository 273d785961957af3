import math
from pathlib import Path
from typing import Any

import pytest
import torch

from sdk.alignment import (
    EvalSettings,
    evaluate_policy,
    style_scores,
)
from sdk.alignment._evaluation import (
    CategoryScore,
    PolicyEvaluation,
    best_of_n_accuracy,
    option_probabilities,
)
from sdk.data import PreferencePair, Query, load_queries
from sdk.models import encode_batch, load_vlm
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
    assert ev.average(["diagram", "poster"], "greedy") == pytest.approx(0.375)
    assert ev.average(["diagram", "poster"], "sampled") == pytest.approx(0.5)
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


def test_option_probabilities_match_forced_generation(base_policy: Path, data_dir: Path) -> None:
    """Teacher forcing through the chat template gives the probability that generate() (left
    padding, KV cache, stop at EOS) emits exactly the option and then EOS, at the temperature."""
    bundle = load_vlm(base_policy)
    tok = bundle.processor.tokenizer
    queries = load_queries(data_dir / "policy" / "eval" / "color")[:2]
    got = option_probabilities(bundle, queries, temperature=1.5)
    assert got.shape == (len(queries), len(queries[0].options))
    for i, query in enumerate(queries):
        batch = encode_batch(bundle.processor, [query.image], [query.prompt],
                             max_length=bundle.max_length, padding_side="left")
        start = batch["input_ids"].shape[1]
        for j, option in enumerate(query.options):
            forced = [*tok(option, add_special_tokens=False)["input_ids"], tok.eos_token_id]
            out: Any = bundle.model.generate(  # type: ignore[operator]
                **batch, max_new_tokens=len(forced), do_sample=False, output_logits=True,
                return_dict_in_generate=True, pad_token_id=tok.pad_token_id,
                prefix_allowed_tokens_fn=lambda _b, ids, f=forced, s=start: [f[len(ids) - s]])
            assert out.sequences[0, start:].tolist() == forced
            logp = sum(float(torch.log_softmax(step[0].float() / 1.5, -1)[t])
                       for step, t in zip(out.logits, forced, strict=True))
            assert math.log(float(got[i, j])) == pytest.approx(logp, abs=1e-4)


def test_expected_accuracy_is_the_mean_probability_of_the_right_option(
        base_policy: Path, data_dir: Path) -> None:
    queries = load_queries(data_dir / "policy" / "eval" / "color")
    ev = evaluate_policy(base_policy, {"color": queries}, EvalSettings(samples=3, max_new_tokens=3))
    probs = option_probabilities(load_vlm(base_policy), queries)
    right = torch.tensor([probs[i, list(q.options).index(str(q.answer))]
                          for i, q in enumerate(queries)])
    score = ev.categories["color"]
    assert score.expected == pytest.approx(float(right.mean()), rel=1e-5)
    assert score.expected_best_of_n == pytest.approx(float((1 - (1 - right) ** 3).mean()), rel=1e-5)
    assert ev.average(["color"], "expected") == score.expected
