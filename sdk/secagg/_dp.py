"""Client-level differential privacy (DP-FedAvg with distributed Gaussian noise).

Each client clips its update to L2 norm C and adds N(0, sigma^2) with
sigma = z * C * max_weight / sqrt(t_min): the server only sees the sum over at least t_min
survivors (the threshold), whose noise std is >= z * C * max_weight, the sensitivity of the
weighted sum to one client. Epsilon comes from opacus' RDP accountant.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sdk._heap import freeze_heap

__all__ = ["DPConfig", "client_noise_std", "clip_and_noise", "composed_epsilon", "dp_clip_range",
           "preload_accountant"]

_log = logging.getLogger("fedmor.dp")


class DPConfig(BaseModel):
    """DP-FedAvg parameters. Give ``noise_multiplier`` or ``target_epsilon`` (not both)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Past these bounds opacus' RDP accountant overflows, divides by zero or searches without
    # end (a round's request would fail with a 500 or hold its thread); inside them epsilon is
    # already far beyond any privacy.
    clip_norm: float = Field(default=1.0, gt=0)
    noise_multiplier: float | None = Field(default=None, ge=1e-6)
    target_epsilon: float | None = Field(default=None, gt=0, le=1e6)
    delta: float = Field(default=1e-5, gt=0, lt=1)
    rounds: int = Field(default=100, ge=1)
    sample_rate: float = Field(default=1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _one_of(self) -> DPConfig:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("DPConfig needs exactly one of noise_multiplier or target_epsilon")
        return self

    def resolved_noise_multiplier(self) -> float:
        """z: given, or the smallest one reaching ``target_epsilon`` after ``rounds`` rounds."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier
        assert self.target_epsilon is not None
        # opacus pulls in torch: imported here so servers and clients start fast without DP.
        from opacus.accountants.utils import get_noise_multiplier

        return float(
            get_noise_multiplier(
                target_epsilon=self.target_epsilon,
                target_delta=self.delta,
                sample_rate=self.sample_rate,
                steps=self.rounds,
                accountant="rdp",
            )
        )

    def epsilon(self, rounds: int | None = None) -> float:
        """Epsilon at ``delta`` after ``rounds`` rounds (default: all), via the RDP accountant."""
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
        acc.history = [(self.resolved_noise_multiplier(), self.sample_rate, rounds or self.rounds)]
        return float(acc.get_epsilon(delta=self.delta))


def client_noise_std(cfg: DPConfig, *, min_survivors: int, max_weight: int) -> float:
    """Std of each client's noise so that >= ``min_survivors`` clients sum to std z*C*max_weight."""
    return cfg.resolved_noise_multiplier() * cfg.clip_norm * max_weight / math.sqrt(min_survivors)


def dp_clip_range(cfg: DPConfig, *, min_survivors: int) -> float:
    """The per-coordinate quantization range a client's clipped, noised update fits (uniform
    weights): C + 4 x its noise std. Clipping the noise at a smaller range would bias the
    aggregate and void the noise's calibration."""
    return cfg.clip_norm + 4 * client_noise_std(cfg, min_survivors=min_survivors, max_weight=1)


def clip_and_noise(update: np.ndarray, cfg: DPConfig, *, min_survivors: int, max_weight: int, rng: np.random.Generator) -> np.ndarray:
    """Clip ``update`` (P,) to L2 norm C and add this client's share of the Gaussian noise."""
    x = update.astype(np.float64)
    norm = float(np.linalg.norm(x))
    if norm > cfg.clip_norm:
        x *= cfg.clip_norm / norm
    std = client_noise_std(cfg, min_survivors=min_survivors, max_weight=max_weight)
    return x + rng.normal(0.0, std, size=x.shape[0])


def composed_epsilon(rounds: list[tuple[float, float]], delta: float) -> float:
    """Epsilon at ``delta`` after one step per ``(noise_multiplier, sample_rate)`` in ``rounds``
    (rounds of different noise compose), via opacus' RDP accountant; 0 for no rounds."""
    if not rounds:
        return 0.0
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(z, q, 1) for z, q in rounds]
    return float(acc.get_epsilon(delta=delta))


def preload_accountant() -> threading.Thread:
    """Import opacus' RDP accountant (and torch with it, a slow import) in a background
    thread, so the first DP round's request does not wait for it. Returns the
    (daemon) thread; importing stays lazy for processes that never call this."""

    def load() -> None:
        if "opacus.accountants" in sys.modules:
            return
        started = time.monotonic()
        import opacus.accountants  # noqa: F401  (the import is the point)

        _log.info("DP accountant (opacus) loaded in %.1f s", time.monotonic() - started)
        freeze_heap("the DP accountant loaded")  # torch's objects too: loaded once, kept

    thread = threading.Thread(target=load, name="fedmor-dp-preload", daemon=True)
    thread.start()
    return thread
