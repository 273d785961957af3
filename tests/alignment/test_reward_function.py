import asyncio
import inspect

import pytest
import torch
from PIL import Image

from sdk.alignment import InProcessRewardSource, SelectionRewardFunction
from sdk.alignment._errors import RewardShapeError
from sdk.alignment._reward_function import message_text
from sdk.alignment._selection import BestSingle, CompletionBatch, MoRSelection
from sdk.router import image_ref
from tests.alignment.conftest import grey, make_chooser


def client(value: float):
    def score(images, prompts, responses):
        assert all(img is not None for img in images)  # the image column reached the scorer
        return [value + len(r) / 100 for r in responses]
    return score


def trl_kwargs(n: int) -> dict:
    """What GRPOTrainer passes: conversational prompts/completions and the image column."""
    prompts = [[{"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": f"question {i}"}]}]
               for i in range(n)]
    completions = [[{"role": "assistant", "content": "y" * (i + 1)}] for i in range(n)]
    return {"prompts": prompts, "completions": completions,
            "completion_ids": [[1] * (i + 1) for i in range(n)],
            "image": [grey(10 * i) for i in range(n)], "trainer_state": None}


def test_mor_reward_function_one_float_per_completion_routed_to_the_chosen_client() -> None:
    chooser = make_chooser()
    with torch.no_grad():  # make client 1 the router's clear favourite
        chooser.bandit.router.head.bias.copy_(torch.tensor([-50.0, 50.0, -50.0]))
    source = InProcessRewardSource([client(0.0), client(10.0), client(20.0)])
    fn = SelectionRewardFunction(MoRSelection(chooser), source)
    assert inspect.iscoroutinefunction(fn.__call__)
    rewards = asyncio.run(fn(**trl_kwargs(6)))
    assert len(rewards) == 6 and all(isinstance(r, float) for r in rewards)
    assert rewards == [10.0 + (i + 1) / 100 for i in range(6)]
    assert source.triples == [0, 6, 0] and source.calls == [0, 1, 0]
    contexts, arms = fn.selection.take_pending()
    assert arms == [1] * 6 and contexts is not None and contexts.shape[0] == 6


def test_mor_groups_a_mixed_batch_by_client() -> None:
    chooser = make_chooser(num_clients=2)
    torch.manual_seed(0)
    source = InProcessRewardSource([client(0.0), client(10.0)])
    sel = MoRSelection(chooser)
    fn = SelectionRewardFunction(sel, source)
    rewards = asyncio.run(fn(**trl_kwargs(8)))
    _, arms = sel.take_pending()
    for r, arm, i in zip(rewards, arms, range(8), strict=True):
        assert r == 10.0 * arm + (i + 1) / 100  # each completion got its own client's score
    assert source.calls == [int(0 in arms), int(1 in arms)]  # one grouped query per client


def test_message_text_reads_both_formats() -> None:
    assert message_text("plain") == "plain"
    assert message_text([{"role": "assistant", "content": "hi"}]) == "hi"
    assert message_text([{"role": "user", "content": [{"type": "image"},
                                                      {"type": "text", "text": "q"}]}]) == "q"


def test_invalid_choices_get_the_format_reward_and_reach_no_client() -> None:
    options = ["A. red", "B. green"]
    kwargs = trl_kwargs(4)
    kwargs["completions"] = [[{"role": "assistant", "content": c}]
                             for c in ("A. red", "D......... blue", "b. green.", "a nice picture")]
    kwargs["options"] = [options, options, options, []]  # the last prompt is open generation
    source = InProcessRewardSource([client(0.0)])
    fn = SelectionRewardFunction(BestSingle(0), source, invalid_choice_reward=-3.0)
    rewards = asyncio.run(fn(**kwargs))
    assert rewards == [0.06, -3.0, 0.09, 0.14]  # client 0 scores len/100; the format rule -3
    assert source.triples == [3] and fn.invalid_choices == 1
    # Off by default: every completion goes to the selection.
    plain = SelectionRewardFunction(BestSingle(0), InProcessRewardSource([client(0.0)]))
    assert asyncio.run(plain(**kwargs))[1] == 0.15


def test_a_typed_batch_is_scored_as_trls_columns_are() -> None:
    # The server's call: a CompletionBatch it built and each item's options, no trl columns.
    options = ["A. red", "B. green"]
    responses = ["A. red", "D......... blue", "b. green.", "a nice picture"]
    batch = CompletionBatch(images=[grey(10 * i) for i in range(4)],
                            prompts=[f"question {i}" for i in range(4)], responses=responses)
    fn = SelectionRewardFunction(BestSingle(0), InProcessRewardSource([client(0.0)]),
                                 invalid_choice_reward=-3.0)
    rewards = asyncio.run(fn.score(batch, options=[options, options, options, []]))
    assert rewards == [0.06, -3.0, 0.09, 0.14] and fn.invalid_choices == 1


def test_the_columns_are_checked_once_where_they_enter() -> None:
    fn = SelectionRewardFunction(BestSingle(0), InProcessRewardSource([client(0.0)]),
                                 invalid_choice_reward=-3.0)
    kwargs = trl_kwargs(4)
    with pytest.raises(RewardShapeError, match="same length"):  # the CompletionBatch
        asyncio.run(fn(**(kwargs | {"prompts": kwargs["prompts"][:3]})))
    with pytest.raises(RewardShapeError, match="3 option lists for 4 completions"):
        asyncio.run(fn(**(kwargs | {"options": [["A. red"]] * 3})))


def test_image_references_reach_a_local_scorer_as_their_pixels() -> None:
    seen: list[bytes] = []

    def scorer(images: list[Image.Image], prompts: list[str], responses: list[str]) -> list[float]:
        seen.extend(i.convert("RGB").tobytes() for i in images)
        return [0.0] * len(images)

    fn = SelectionRewardFunction(BestSingle(0), InProcessRewardSource([scorer]))
    kwargs = trl_kwargs(2)
    pixels = [i.tobytes() for i in kwargs["image"]]
    rewards = asyncio.run(fn(**(kwargs | {"image": [image_ref(i) for i in kwargs["image"]]})))
    assert rewards == [0.0, 0.0] and seen == pixels
