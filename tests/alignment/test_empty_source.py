"""EmptyIsWorst: empty completions get the worst score and never reach a client's reward model."""

import asyncio

import pytest

from sdk.alignment import CompletionBatch, EmptyIsWorst, InProcessRewardSource, make_selection
from sdk.models import build_tiny_vlm
from sdk.reward import ClientScorer, RewardModel, ScoreNormalizer
from tests.alignment.conftest import grey


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> ClientScorer:
    backbone = build_tiny_vlm("qwen2_vl", tmp_path_factory.mktemp("rm"),
                              corpus=["a red square", "which colour", "blue"])
    return ClientScorer(RewardModel.from_backbone(backbone), ScoreNormalizer.fit([0.0, 1.0, 2.0]))


def test_the_real_scorer_refuses_an_empty_response(scorer: ClientScorer) -> None:
    # The reason the wrapper exists: without it one empty sample stops GRPO.
    with pytest.raises(ValueError, match="response"):
        scorer.score([grey()], ["which colour"], [""])


def test_empty_responses_get_worst_and_the_rest_keep_their_order(scorer: ClientScorer) -> None:
    inner = InProcessRewardSource([scorer.score, scorer.score])
    source = EmptyIsWorst(inner, worst=-scorer.clip)
    images = [grey(10), grey(20), grey(30), grey(40)]
    prompts = ["which colour"] * 4
    responses = ["a red square", "", "blue", "  \n"]
    scores = asyncio.run(source.score(1, images, prompts, responses))
    direct = scorer.score([images[0], images[2]], ["which colour"] * 2, ["a red square", "blue"])
    assert scores == [pytest.approx(direct[0]), -scorer.clip, pytest.approx(direct[1]),
                      -scorer.clip]
    assert source.empty == 2
    assert inner.triples == [0, 2]  # only the two non-empty responses were sent to client 1
    assert source.num_clients == 2


def test_all_empty_asks_no_client(scorer: ClientScorer) -> None:
    inner = InProcessRewardSource([scorer.score])
    source = EmptyIsWorst(inner, worst=-3.0)
    assert asyncio.run(source.score(0, [grey(), grey()], ["p", "p"], ["", ""])) == [-3.0, -3.0]
    assert inner.calls == [0]


def test_a_strategy_over_the_wrapper_survives_empty_samples(scorer: ClientScorer) -> None:
    source = EmptyIsWorst(InProcessRewardSource([scorer.score] * 3), worst=-3.0)
    batch = CompletionBatch(images=[grey()] * 3, prompts=["p"] * 3, responses=["", "blue", ""])
    rewards = asyncio.run(make_selection("avg_rm").rewards(batch, source))
    assert rewards[0] == rewards[2] == -3.0
    assert -3.0 <= rewards[1] <= 3.0
