"""Gradient inversion bites on unprotected updates and lands at the trivial baselines on
aggregated or DP-noised ones."""

import numpy as np
import pytest
import torch
from _attack_kit import Router, embeddings, image_model, router_loss, smooth_images
from torch import nn

from attacks import (
    CapturedUpdate,
    InversionConfig,
    ReconstructionReport,
    UpdateKind,
    compute_update,
    invert_update,
    reconstruction_report,
)
from attacks._analytic import (
    analytic_attack_on_update,
    analytic_linear_candidates,
    first_linear_layer,
)
from attacks._errors import AttackInputError
from attacks._inversion import infer_label
from attacks._metrics import cosine_similarity
from attacks._report import NO_LEAK

CE = nn.functional.cross_entropy
IMAGE_CFG = InversionConfig(checkpoints=(50, 200), lr=0.1, tv_weight=1e-4)


def one_hot(k: int, n: int) -> torch.Tensor:
    return nn.functional.one_hot(torch.full((n,), k), 3).float()  # (n, K=3)


def summed(updates: list[CapturedUpdate]) -> CapturedUpdate:
    """What secure aggregation reveals: only the sum of the clients' updates."""
    names = list(updates[0].tensors)
    return CapturedUpdate(
        {n: sum((u.tensors[n] for u in updates), torch.zeros(())) for n in names},
        kind=updates[0].kind,
        local_steps=updates[0].local_steps,
        local_lr=updates[0].local_lr,
    )


def _invert_image(model: nn.Module, update: CapturedUpdate, truth: torch.Tensor, *, label: int,
                  setting: str, best_match: bool = False) -> ReconstructionReport:
    """Invert ``update`` for one 16x16 image of class ``label``, scored against ``truth``."""
    res = invert_update(model, update, input_shape=(1, 3, 16, 16), labels=torch.tensor([label]),
                        loss_fn=CE, config=IMAGE_CFG)
    return reconstruction_report(truth, res.final.reconstruction, smooth_images(32, seed=5),
                                 attack="inverting-gradients", setting=setting,
                                 step=res.final.step, best_match=best_match)


# ---- analytic attack on the router's first linear layer -------------------------------


@pytest.mark.parametrize("kind", [UpdateKind.GRADIENT, UpdateKind.DELTA])
def test_analytic_recovers_one_embedding(kind: UpdateKind) -> None:
    router, e = Router(), embeddings(1)
    upd = compute_update(
        router, router_loss, e, one_hot(0, 1), kind=kind, local_steps=5, local_lr=0.1
    )
    x = analytic_attack_on_update(router, upd.tensors)
    assert cosine_similarity(x[None], e) >= 0.99
    rep = reconstruction_report(
        e, x[None], embeddings(64, seed=7), attack="analytic", setting="unprotected"
    )
    assert rep.verdict.startswith("leaks")
    cands = analytic_linear_candidates(
        upd.tensors["proj.weight"], upd.tensors["proj.bias"], top_k=4
    )
    assert cands.shape == (4, 32)
    assert cosine_similarity(cands, e.expand(4, -1)) >= 0.99


def test_analytic_returns_a_mixture_under_secure_aggregation() -> None:
    router, e = Router(), embeddings(48)
    per_client = 16  # 3 clients x 16 samples, 2 local steps each, summed
    ups = [
        compute_update(
            router,
            router_loss,
            e[k * per_client : (k + 1) * per_client],
            one_hot(k, per_client),
            kind=UpdateKind.DELTA,
            local_steps=2,
            local_lr=0.1,
        )
        for k in range(3)
    ]
    x = analytic_attack_on_update(router, summed(ups).tensors)[None]
    assert max(cosine_similarity(x, e[i : i + 1]) for i in range(48)) < 0.95
    rep = reconstruction_report(
        e, x, embeddings(64, seed=7), attack="analytic", setting="secagg-3", best_match=True
    )
    assert rep.verdict.startswith(NO_LEAK), rep.verdict


def test_first_linear_layer_and_missing_entries() -> None:
    assert first_linear_layer(Router())[0] == "proj"
    assert first_linear_layer(image_model())[0] == "5"
    with pytest.raises(AttackInputError, match=r"no nn\.Linear"):
        first_linear_layer(nn.Sequential(nn.ReLU()))
    with pytest.raises(AttackInputError, match="no entry"):
        analytic_attack_on_update(Router(), {"head.bias": torch.ones(3)})


# ---- optimization attack (DLG / Inverting Gradients) ----------------------------------


def test_optimization_recovers_an_embedding_from_a_multistep_delta() -> None:
    router, e = Router(), embeddings(1)
    upd = compute_update(
        router, router_loss, e, one_hot(1, 1), kind=UpdateKind.DELTA, local_steps=3, local_lr=0.1
    )
    assert infer_label(upd, "head.bias") == 1
    cfg = InversionConfig(checkpoints=(20, 150), input_kind="embedding", lr=0.1)
    res = invert_update(
        router, upd, input_shape=(1, 32), labels=one_hot(1, 1), loss_fn=router_loss, config=cfg
    )
    assert [c.step for c in res.checkpoints] == [20, 150]
    assert res.final.match_loss < res.checkpoints[0].match_loss + 1e-6
    assert cosine_similarity(res.final.reconstruction, e) >= 0.99


def test_optimization_reaches_20db_on_one_unprotected_image() -> None:
    model, x = image_model(), smooth_images(1)
    upd = compute_update(model, CE, x, torch.tensor([2]))
    assert infer_label(upd, "7.bias") == 2
    rep = _invert_image(model, upd, x, label=2, setting="unprotected")
    assert rep.metrics["psnr"].mean >= 20.0
    assert rep.verdict.startswith("leaks")
    assert rep.lpips is None and rep.lpips_status.startswith("unavailable")


def test_single_image_attacker_fails_on_an_aggregate_of_three_clients() -> None:
    model, x = image_model(), smooth_images(3)
    ups = [compute_update(model, CE, x[i : i + 1], torch.tensor([i])) for i in range(3)]
    rep = _invert_image(model, summed(ups), x, label=0, setting="secagg-3", best_match=True)
    assert rep.verdict.startswith(NO_LEAK), rep.verdict
    assert rep.metrics["psnr"].mean < 20.0


def test_optimization_fails_on_a_dp_noised_update() -> None:
    model, x = image_model(), smooth_images(1)
    upd = compute_update(model, CE, x, torch.tensor([2]))
    flat = torch.cat([t.reshape(-1) for t in upd.tensors.values()])
    # Clip to norm C = 1, then Gaussian noise with multiplier 1 (std C per coordinate).
    g = torch.Generator().manual_seed(0)
    scale = min(1.0, 1.0 / float(flat.norm()))
    noisy = {k: t * scale + torch.randn(t.shape, generator=g) for k, t in upd.tensors.items()}
    rep = _invert_image(model, CapturedUpdate(noisy), x, label=2, setting="dp")
    assert rep.verdict.startswith(NO_LEAK), rep.verdict


def test_inversion_config_and_update_validation() -> None:
    with pytest.raises(ValueError, match="checkpoints"):
        InversionConfig(checkpoints=(100, 50))
    with pytest.raises(AttackInputError, match="local_lr"):
        CapturedUpdate({"w": torch.ones(1)}, kind=UpdateKind.DELTA)
    with pytest.raises(AttackInputError, match="client_sizes"):
        invert_update(
            Router(),
            CapturedUpdate({"proj.bias": torch.ones(64)}),
            input_shape=(2, 32),
            labels=one_hot(0, 2),
            loss_fn=router_loss,
            client_sizes=[1, 2],
        )
    with pytest.raises(AttackInputError, match="not among"):
        invert_update(
            Router(),
            CapturedUpdate({"nope": torch.ones(1)}),
            input_shape=(1, 32),
            labels=one_hot(0, 1),
            loss_fn=router_loss,
        )
    assert InversionConfig().checkpoints == (1000, 5000, 8000)
    assert np.isclose(InversionConfig(checkpoints=(3, 9)).steps, 9)


def test_batch_aware_attacker_recovers_three_single_sample_clients() -> None:
    # The limit of the test above: the sum of 3 single-sample gradients with distinct, known
    # labels (the router's case) is the gradient of one batch of 3, and DLG on that batch
    # recovers all three. Secure aggregation protects only when the sum covers many samples.
    model, x = image_model(), smooth_images(3)
    ups = [compute_update(model, CE, x[i : i + 1], torch.tensor([i])) for i in range(3)]
    res = invert_update(
        model,
        summed(ups),
        input_shape=(3, 3, 16, 16),
        labels=torch.tensor([0, 1, 2]),
        loss_fn=CE,
        config=IMAGE_CFG,
    )
    rep = reconstruction_report(
        x,
        res.final.reconstruction,
        smooth_images(32, seed=5),
        attack="inverting-gradients",
        setting="secagg-3x1",
        best_match=True,
    )
    assert rep.verdict.startswith("leaks"), rep.verdict


def test_batch_aware_attacker_fails_on_a_many_sample_multistep_aggregate() -> None:
    model, per = image_model(), 8  # 3 clients x 8 images, 2 local SGD steps each, summed
    x = smooth_images(3 * per, seed=11)
    labels = torch.arange(3).repeat_interleave(per)
    ups = [
        compute_update(
            model,
            CE,
            x[k * per : (k + 1) * per],
            labels[k * per : (k + 1) * per],
            kind=UpdateKind.DELTA,
            local_steps=2,
            local_lr=0.1,
        )
        for k in range(3)
    ]
    # The strongest replay: three clients simulated separately (rows grouped by their known
    # label) and summed, so the captured update can be matched exactly.
    res = invert_update(
        model,
        summed(ups),
        input_shape=(3 * per, 3, 16, 16),
        labels=labels,
        loss_fn=CE,
        config=IMAGE_CFG,
        client_sizes=[per] * 3,
    )
    assert res.final.match_loss < 1e-3
    rep = reconstruction_report(
        x,
        res.final.reconstruction,
        smooth_images(32, seed=5),
        attack="inverting-gradients",
        setting="secagg-3x8",
        best_match=True,
    )
    assert rep.verdict.startswith(NO_LEAK), rep.verdict


def test_secure_mean_is_the_weighted_mean_the_server_learns() -> None:
    from attacks import secure_mean

    ups = [
        CapturedUpdate({"w": torch.full((2, 3), 0.1 * k), "b": torch.tensor([-0.2 * k])},
                       UpdateKind.DELTA, 3, 0.1)
        for k in range(3)
    ]
    got = secure_mean(ups, [1, 2, 3], rng=np.random.default_rng(0))
    # sum_k n_k x_k / sum_k n_k, through the masked fixed-point protocol.
    assert torch.allclose(got.tensors["w"], torch.full((2, 3), 0.8 / 6), atol=1e-5)
    assert torch.allclose(got.tensors["b"], torch.tensor([-1.6 / 6]), atol=1e-5)
    assert (got.kind, got.local_steps, got.local_lr) == (UpdateKind.DELTA, 3, 0.1)
    with pytest.raises(AttackInputError, match="one size per update"):
        secure_mean(ups, [1, 2], rng=np.random.default_rng(0))
    mixed = [*ups[:2], CapturedUpdate(dict(ups[2].tensors))]
    with pytest.raises(AttackInputError, match="share kind"):
        secure_mean(mixed, [1, 1, 1], rng=np.random.default_rng(0))
