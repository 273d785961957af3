import asyncio

import pytest
import torch

from sdk.alignment import (
    SELECTIONS,
    CompletionBatch,
    InProcessRewardSource,
    RewardSelection,
    make_selection,
    register_selection,
    routed_scores,
)
from sdk.alignment._errors import ArchitectureMismatchError, RewardShapeError, UnknownSelectionError
from sdk.alignment._fedavg import fedavg_state_dicts
from sdk.alignment._selection import (
    AvgRM,
    BestSingle,
    FedAvgRM,
    MoRNoOnline,
    PluralLLMAlpha,
    RandomSelection,
)
from tests.alignment.conftest import grey, make_chooser


def constant(value: float):  # a client that gives every response the same score
    def score(images, prompts, responses):
        return [value] * len(responses)
    return score


def length_scorer(images, prompts, responses):
    return [float(len(r)) for r in responses]


def batch(n: int) -> CompletionBatch:
    return CompletionBatch(images=[grey(i) for i in range(n)], prompts=["q"] * n,
                           responses=["x" * (i + 1) for i in range(n)])


SOURCE = InProcessRewardSource([constant(1.0), constant(2.0), length_scorer])


def run(selection: RewardSelection, b: CompletionBatch, source=SOURCE) -> list[float]:
    return asyncio.run(selection.rewards(b, source))


def test_registry_has_every_method() -> None:
    assert set(SELECTIONS) == {"mor", "mor_no_online", "best_single", "random", "avg_rm",
                               "plurallm_alpha", "fedavg_rm"}
    assert isinstance(make_selection("best_single", client=2), BestSingle)
    with pytest.raises(UnknownSelectionError, match="nope"):
        make_selection("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_selection("avg_rm")(AvgRM)


def test_best_single_asks_one_client() -> None:
    assert run(BestSingle(2), batch(3)) == [1.0, 2.0, 3.0]
    assert run(BestSingle(1), batch(2)) == [2.0, 2.0]


def test_avg_rm_averages_all_clients() -> None:
    assert run(AvgRM(), batch(2)) == pytest.approx([(1 + 2 + 1) / 3, (1 + 2 + 2) / 3])


def test_random_selection_uses_several_clients_and_one_score_each() -> None:
    source = InProcessRewardSource([constant(0.0), constant(1.0), constant(2.0)])
    rewards = run(RandomSelection(seed=3), batch(30), source)
    assert len(rewards) == 30 and set(rewards) == {0.0, 1.0, 2.0}
    assert sum(source.triples) == 30  # each completion scored exactly once


def test_routed_scores_asks_each_completion_s_client_once_and_keeps_order() -> None:
    source = InProcessRewardSource([constant(1.0), constant(2.0), length_scorer])
    scores = asyncio.run(routed_scores(batch(5), [2, 0, 2, 1, 0], source))
    assert scores == [1.0, 1.0, 3.0, 2.0, 1.0]
    assert source.triples == [2, 1, 2]  # one grouped query per client, one score each
    with pytest.raises(RewardShapeError, match="2 arms for 5 completions"):
        asyncio.run(routed_scores(batch(5), [0, 1], source))


def test_plurallm_weights_favour_the_under_aligned_group() -> None:
    sel = PluralLLMAlpha(alpha=2.0, eta=0.5)
    w0 = sel.weights(3)
    assert torch.allclose(w0, torch.full((3,), 1 / 3, dtype=torch.float64))
    first = run(sel, batch(2))
    assert first == pytest.approx([(1 + 2 + 1) / 3, (1 + 2 + 2) / 3])  # uniform before any update
    w = sel.weights(3)
    # client 0 gave the lowest mean reward (1.0), client 1 the highest (2.0).
    assert w[0] > w[2] > w[1]
    assert float(w.sum()) == pytest.approx(1.0)
    second = run(sel, batch(2))
    expected = [float(w[0] * 1 + w[1] * 2 + w[2] * n) for n in (1, 2)]
    assert second == pytest.approx(expected)


def test_plurallm_alpha_zero_is_avg_rm() -> None:
    b = batch(3)
    sel = PluralLLMAlpha(alpha=0.0)
    run(sel, b)
    assert run(sel, b) == pytest.approx(run(AvgRM(), b))


def test_fedavg_rm_scores_with_the_averaged_model_only() -> None:
    averaged = InProcessRewardSource([constant(7.0)])
    clients = InProcessRewardSource([constant(1.0), constant(2.0)])
    assert run(FedAvgRM(averaged), batch(2), clients) == [7.0, 7.0]
    assert clients.calls == [0, 0]


def test_fedavg_state_dicts_weights_and_architecture_check() -> None:
    a = {"w": torch.ones(2, 2), "steps": torch.tensor(3)}
    b = {"w": torch.full((2, 2), 4.0), "steps": torch.tensor(5)}
    avg = fedavg_state_dicts([a, b], weights=[2, 1])
    assert torch.allclose(avg["w"], torch.full((2, 2), 2.0))
    assert int(avg["steps"]) == 3
    with pytest.raises(ArchitectureMismatchError, match="'w' is \\(3,\\)"):
        fedavg_state_dicts([a, {"w": torch.ones(3), "steps": torch.tensor(1)}])
    with pytest.raises(ArchitectureMismatchError, match="different parameters"):
        fedavg_state_dicts([a, {"v": torch.ones(2, 2), "steps": torch.tensor(1)}])


def test_mor_no_online_routes_by_argmax_and_keeps_nothing_pending() -> None:
    chooser = make_chooser()
    with torch.no_grad():
        chooser.bandit.router.head.bias.copy_(torch.tensor([-50.0, -50.0, 50.0]))
    sel = MoRNoOnline(chooser)
    source = InProcessRewardSource([constant(0.0), constant(1.0), length_scorer])
    assert run(sel, batch(4), source) == [1.0, 2.0, 3.0, 4.0]
    assert source.calls == [0, 0, 1]
    assert sel.take_pending() == (None, [])
    assert sel.chooser is None


def test_scorer_returning_wrong_count_is_an_error() -> None:
    bad = InProcessRewardSource([lambda i, p, r: [0.0]])
    with pytest.raises(RewardShapeError, match="client 0 returned 1 scores for 2 triples"):
        run(BestSingle(0), batch(2), bad)
    with pytest.raises(RewardShapeError, match="same length"):
        CompletionBatch(images=[None], prompts=["a", "b"], responses=["c"])
