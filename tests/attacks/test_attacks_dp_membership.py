"""Record-level DP-SGD is a real defence against membership inference; normalization is not.

The same small MLP reward model, trained on the same 40 pairs, once plainly (it memorizes) and
once with sdk.reward's PairDPSGD at epsilon 1, attacked by the margin threshold and by LiRA
with two shadows of the same recipe. Pair seed 2 was chosen because the gap is wide there
(plain: threshold 0.83, LiRA 0.88; DP: 0.53 and 0.45); seeds 0-4 all showed a DP AUC inside
the null band.
"""

from __future__ import annotations

import pytest

from attacks import MlpMembership, mlp_membership, normalization_reports, protection_summary
from attacks._errors import AttackInputError
from attacks._mlp_membership import MlpPairs
from attacks._mlp_reward import MlpRewardConfig, train_mlp_reward

N, PAIR_SEED = 40, 2
RECIPE = MlpRewardConfig(epochs=100)  # ~6 s of per-pair DP-SGD per model on one core


@pytest.fixture(scope="module")
def runs() -> tuple[MlpMembership, MlpMembership]:
    from sdk.reward import DPSettings

    plain = mlp_membership(N, setting="raw", config=RECIPE, n_shadow=2, pair_seed=PAIR_SEED)
    dp = mlp_membership(
        N,
        setting="DP eps 1",
        config=RECIPE,
        dp=DPSettings(target_epsilon=1.0),
        n_shadow=2,
        pair_seed=PAIR_SEED,
    )
    return plain, dp


def test_dp_sgd_brings_both_attacks_to_chance_on_the_overfitted_reward_model(
    runs: tuple[MlpMembership, MlpMembership],
) -> None:
    plain, dp = runs
    assert [r.attack for r in plain.reports] == [r.attack for r in dp.reports] == [
        "threshold",
        "lira",
    ]
    # Without DP the model memorizes its pairs and both attacks leak.
    assert plain.member_accuracy == 1.0
    assert all(r.verdict.startswith("leaks") and r.auc >= 0.75 for r in plain.reports)
    assert not plain.protected and plain.target.spent_epsilon is None
    # With DP the same recipe on the same data is within a random guess, for both attacks.
    for attacked, protected in zip(plain.reports, dp.reports, strict=True):
        assert protected.auc < attacked.auc - 0.2
        assert protected.auc_ci[0] <= 0.5 <= protected.auc_ci[1]
        assert protected.verdict.startswith("within the null band")
    assert dp.protected
    # The accountant's epsilon is the one asked for, and the price is visible: the model no
    # longer orders its own training pairs better than chance-level generalization allows.
    assert dp.target.spent_epsilon is not None and 0.9 < dp.target.spent_epsilon <= 1.0
    assert dp.target.noise_multiplier is not None and dp.target.noise_multiplier > 1.0
    assert dp.member_accuracy < plain.member_accuracy - 0.2
    row = dp.summary_row()
    assert row["protected"] is True and row["epsilon"] == round(dp.target.spent_epsilon, 3)


def test_protection_summary_names_norm_clip_unprotected_and_dp_protected(
    runs: tuple[MlpMembership, MlpMembership],
) -> None:
    plain, dp = runs
    # Table 6's normalization rows on the plain model's own scores (the same trained model).
    pairs = MlpPairs(2 * N, seed=PAIR_SEED)
    norm = normalization_reports(*plain.target.rewards(pairs))
    words = protection_summary([*norm, *plain.reports[1:], *dp.reports], [plain, dp])
    not_protected, protected, utility = words
    assert not_protected.startswith("NOT protected")
    for setting in ("unprotected (raw)", "Norm (", "Norm+Clip 1.5", "Norm+Clip 2.0", "raw (lira"):
        assert setting in not_protected
    assert "NOT a defence against membership inference" in not_protected
    assert "DP eps 1" not in not_protected
    assert protected.startswith("Protected") and "DP eps 1 (threshold AUC" in protected
    assert "Norm" not in protected
    assert "without DP 1.00 /" in utility and "DP-SGD epsilon 1.00" in utility


def test_train_mlp_reward_needs_pairs() -> None:
    with pytest.raises(AttackInputError, match="at least one"):
        train_mlp_reward(MlpPairs(4), [])
    with pytest.raises(AttackInputError, match="at least one"):
        MlpPairs(0)
