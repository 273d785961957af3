"""Table 1's simulated task clients: exact judges of their own task on a raw score scale.

Client k's reward model is replaced by an exact judge of its task (+1 strictly right, 0 wrong
option, -1 unparseable) that answers out-of-domain questions with a consistent pseudo-random
preference, on a client-specific raw scale (scale, offset). Normalized clients divide by mu_k,
sigma_k measured on a calibration set (sdk.reward.ScoreNormalizer).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from PIL import Image

from sdk.alignment import parse_choice
from sdk.data import TASK_CLIENTS, Query
from sdk.reward import ScoreNormalizer
from sdk.router import image_digest

__all__ = ["RAW_SCALES", "SimulatedClient", "build_clients"]

# (scale, offset) of each client's raw score, per preset. "mild": within 8x of each other.
# "mixed": two Bradley-Terry logit heads at the spread our trained reward models reached
# (sigma 3.8-7.0, mu -1.1..0.8 in reward_models.py and the demo) beside a probability-output
# head (a sigmoid: scores in [0, 1], sigma ~0.2), as a consortium of different RM families has.
RAW_SCALES = {"mild": ((1.0, 0.0), (4.0, 3.0), (0.5, -2.0)),
              "mixed": ((6.0, 0.8), (4.0, -1.1), (0.2, 0.5))}


class SimulatedClient:
    """An exact judge of one task on a raw scale; pseudo-random outside its task."""

    def __init__(self, category: str, answers: dict[str, Query], scale: float, offset: float,
                 normalizer: ScoreNormalizer | None = None) -> None:
        self.category, self.answers = category, answers
        self.scale, self.offset, self.normalizer = scale, offset, normalizer

    def raw(self, image: Image.Image | None, response: str) -> float:
        q = self.answers.get(image_digest(image)) if image is not None else None
        if q is not None and q.category == self.category:
            index = parse_choice(response, q.options)
            base = -1.0 if index is None else 1.0 if q.options[index] == q.answer else 0.0
        else:  # an RM asked outside its domain: arbitrary but consistent preferences
            digest = hashlib.sha256(f"{self.category}|{response}".encode()).digest()
            base = digest[0] / 127.5 - 1.0
        return self.scale * base + self.offset

    def __call__(self, images: Sequence[Image.Image | None], prompts: Sequence[str],
                 responses: Sequence[str]) -> list[float]:
        raw = torch.tensor([self.raw(i, r) for i, r in zip(images, responses, strict=True)])
        if self.normalizer is not None:
            raw = self.normalizer.normalize(raw)
        return [float(x) for x in raw]


def build_clients(answers: dict[str, Query], calibration: Sequence[Query], normalize: bool,
                  scales: Sequence[tuple[float, float]]) -> list[SimulatedClient]:
    clients = []
    for category, (scale, offset) in zip(TASK_CLIENTS, scales, strict=True):
        client = SimulatedClient(category, answers, scale, offset)
        if normalize:  # mu, sigma over the options and a junk answer of calibration queries
            raw = [client.raw(q.image, r) for q in calibration for r in (*q.options, "junk")]
            client.normalizer = ScoreNormalizer.fit(raw)
        clients.append(client)
    return clients
