import asyncio

import torch
from transformers import TrainerControl, TrainerState, TrainingArguments

from sdk.alignment import InProcessRewardSource, SelectionRewardFunction, loss_feedback
from sdk.alignment._feedback import RouterFeedbackCallback
from sdk.alignment._selection import MoRSelection
from tests.alignment.conftest import make_chooser
from tests.alignment.test_reward_function import client, trl_kwargs


def test_feedback_sign() -> None:
    assert loss_feedback(None, 1.0) is None
    assert loss_feedback(1.0, 0.5) == 1.0  # loss went down: reward the arm
    assert loss_feedback(1.0, 1.0) == 1.0  # did not increase
    assert loss_feedback(1.0, 1.5) == 0.0


def _step(fn: SelectionRewardFunction, cb: RouterFeedbackCallback, loss: float, step: int,
          tmp_path) -> None:
    asyncio.run(fn(**trl_kwargs(4)))
    state = TrainerState()
    state.global_step = step
    cb.on_log(TrainingArguments(output_dir=str(tmp_path), report_to="none"), state,
              TrainerControl(), logs={"loss": loss})


def _mean_estimate(chooser, contexts, arm: int) -> float:
    r_hat, _ = chooser.bandit.scores(contexts)
    return float(r_hat[:, arm].mean())


def test_callback_moves_the_chosen_arm_towards_the_feedback(tmp_path) -> None:
    chooser = make_chooser(num_clients=2)
    sel = MoRSelection(chooser)
    fn = SelectionRewardFunction(sel, InProcessRewardSource([client(0.0), client(1.0)]))
    cb = RouterFeedbackCallback(sel)
    with torch.no_grad():  # bring arm 1 to r^ ~ 0.5 so gradients are not saturated
        chooser.bandit.router.head.bias.copy_(torch.tensor([-50.0, 0.0]))
        chooser.bandit.router.head.weight.zero_()
    chooser.bandit.phi0_bias = chooser.bandit.router.head.bias.detach().clone()
    chooser.bandit.phi0_weight = chooser.bandit.router.head.weight.detach().clone()
    _step(fn, cb, 1.0, 1, tmp_path)  # first log: no delta, pairs dropped
    assert cb.history[-1][2:] == (None, 0)
    _step(fn, cb, 0.8, 2, tmp_path)  # loss went down: r_t = 1 for the 4 routed pairs
    assert cb.history[-1][2:] == (1.0, 4)
    # The estimate at the zero context is the head's bias through the link alone: the arm's own
    # prior, which each feedback moves (random contexts also see the weights' random drift).
    z = torch.zeros(1, chooser.bandit.router.head.in_features)
    assert float(chooser.bandit.router.head.bias.detach()[1]) > 0.0
    up = _mean_estimate(chooser, z, 1)
    _step(fn, cb, 0.9, 3, tmp_path)  # loss went up: r_t = 0
    assert cb.history[-1][2:] == (0.0, 4)
    assert _mean_estimate(chooser, z, 1) < up
