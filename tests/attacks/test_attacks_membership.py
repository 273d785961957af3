"""Membership inference bites on an over-fitted raw-score reward model and stays inside the
null band when the scores do not depend on membership."""

from collections.abc import Sequence

import numpy as np
import pytest
from _attack_kit import Pair, PairData, train_reward_scorer

from attacks import MembershipReport
from attacks._errors import AttackInputError
from attacks._membership import LiraConfig, PairScorer, balance, lira_attack, threshold_attack
from attacks._report import membership_report

DATA = PairData(400)
MEMBERS = list(range(0, 100))
NON_MEMBERS = list(range(100, 200))
POPULATION = list(range(200, 400))  # the auditor's own data from the same distribution


@pytest.fixture(scope="module")
def overfit() -> PairScorer[Pair]:
    return train_reward_scorer(DATA, MEMBERS)


@pytest.fixture(scope="module")
def independent() -> PairScorer[Pair]:
    # Trained on pairs that are neither "members" nor "non-members": its scores cannot
    # depend on the membership labels.
    return train_reward_scorer(DATA, POPULATION[:100], seed=1)


def shadow_trainer(pairs: Sequence[Pair]) -> PairScorer[Pair]:
    return train_reward_scorer(DATA, pairs, seed=len(pairs))


def test_threshold_attack_bites_on_overfit_raw_scores(overfit: PairScorer[Pair]) -> None:
    rep = membership_report(threshold_attack(overfit, MEMBERS, NON_MEMBERS), setting="unprotected")
    assert rep.auc >= 0.75
    assert rep.auc_ci[0] <= rep.auc <= rep.auc_ci[1]
    assert rep.auc_ci[0] > rep.null_band[1]
    assert rep.verdict.startswith("leaks")
    assert (rep.n_members, rep.n_non_members) == (100, 100)
    assert set(rep.tpr_at_fpr) == {"0.001", "0.01", "0.05", "0.1"}
    assert rep.roc.fpr[0] == 0.0 and rep.roc.tpr[-1] == 1.0


def test_threshold_attack_is_null_on_independent_scores(independent: PairScorer[Pair]) -> None:
    rep = membership_report(
        threshold_attack(independent, MEMBERS, NON_MEMBERS), setting="independent"
    )
    assert rep.null_band[0] <= rep.auc <= rep.null_band[1]
    assert rep.verdict.startswith("within the null band")


def _lira_report(scorer: PairScorer[Pair], setting: str) -> MembershipReport:
    scores = lira_attack(scorer, MEMBERS, NON_MEMBERS, shadow_trainer,
                         population=POPULATION[:50], config=LiraConfig(n_shadow=4))
    return membership_report(scores, setting=setting)


def test_lira_bites_on_overfit_scores(overfit: PairScorer[Pair]) -> None:
    rep = _lira_report(overfit, "unprotected")
    assert rep.auc >= 0.75
    assert rep.verdict.startswith("leaks")


def test_lira_is_null_on_independent_scores(independent: PairScorer[Pair]) -> None:
    rep = _lira_report(independent, "independent")
    assert rep.null_band[0] <= rep.auc <= rep.null_band[1]


def test_balance_and_scorer_checks() -> None:
    m, n = balance(list(range(10)), list(range(100, 104)), seed=0)
    assert len(m) == len(n) == 4 and set(m) <= set(range(10))
    with pytest.raises(AttackInputError, match="at least one"):
        balance([], [1])

    def wrong(pairs: Sequence[Pair]) -> np.ndarray:
        return np.zeros(len(pairs) + 1)

    with pytest.raises(AttackInputError, match="margins"):
        threshold_attack(wrong, [0, 1], [2, 3])


def test_normalizing_and_clipping_scores_keeps_the_membership_leak() -> None:
    """The benchmark's Table 6 finding, pinned: a z-score is monotone and a clip only ties the
    extremes, so the normalized, clipped margins of an over-fitted model still leak."""
    import torch

    from attacks import normalization_reports, overfit_mlp_scores
    from attacks._errors import AttackInputError

    pos, neg = overfit_mlp_scores(100, epochs=300)  # (200,) each, first 100 members
    raw, norm, clip15, clip20 = normalization_reports(pos, neg)
    assert [r.setting for r in (raw, norm, clip15, clip20)] == [
        "unprotected (raw)", "Norm", "Norm+Clip 1.5", "Norm+Clip 2.0"
    ]
    assert raw.auc >= 0.75 and (raw.n_members, raw.n_non_members) == (100, 100)
    # The unclipped z-score only rescales every margin by 1 / (sigma + eps): the same ranking.
    assert norm.auc == raw.auc
    for clipped in (clip15, clip20):
        assert clipped.auc >= 0.75 and abs(clipped.auc - raw.auc) < 0.02
        assert clipped.verdict.startswith("leaks")
    with pytest.raises(AttackInputError, match="two"):
        normalization_reports(pos, neg[:10])
    with pytest.raises(AttackInputError, match="two"):
        normalization_reports(torch.zeros(3), torch.zeros(3))
