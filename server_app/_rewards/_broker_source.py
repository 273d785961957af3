"""The broker as the selection layer's ``RewardSource``: the one place a selection's client
index becomes a member's client id."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sdk.wire import ImageRef, RequestRefused
from server_app._rewards._broker import BrokerError, RewardBroker

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["BrokerRewardSource"]

_log = logging.getLogger("fedmor.server.rewards")


class BrokerRewardSource:
    """The broker as a :class:`~sdk.alignment.RewardSource`: client index k is member
    ``client_ids[k]`` (the one mapping from a selection's arm to a member). Images must be
    :class:`~sdk.wire.ImageRef` (passed on unchanged). With ``failure`` set, a member that
    times out or refuses gives that value for its items (counted in ``failed``) instead of
    failing the batch; ``judges`` keeps who scored each (sha256, prompt, response)."""

    def __init__(self, broker: RewardBroker, client_ids: Sequence[str], *,
                 failure: float | None = None) -> None:
        if not client_ids:
            raise ValueError("BrokerRewardSource needs at least one member")
        self.broker, self.client_ids, self.failure = broker, list(client_ids), failure
        self.failed = 0
        self.judges: dict[tuple[str, str, str], list[str]] = {}

    @property
    def num_clients(self) -> int:
        """Number of members K."""
        return len(self.client_ids)

    def reset(self) -> None:
        """Forget the failures and judges counted so far (one aligner batch at a time)."""
        self.failed, self.judges = 0, {}

    def judge(self, image: ImageRef, prompt: str, response: str) -> str:
        """The member that scored this item (the next one for a repeated item); ``""`` when no
        member was asked or it failed."""
        found = self.judges.get((image.sha256, prompt, response))
        return found.pop(0) if found else ""

    async def score(self, client_index: int, images: Sequence[Image.Image | ImageRef | None],
                    prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """Member ``client_ids[client_index]``'s checked scores (or the failure value)."""
        if not 0 <= client_index < len(self.client_ids):
            raise IndexError(f"client index {client_index} out of range "
                             f"0..{len(self.client_ids) - 1}")
        refs = [i for i in images if isinstance(i, ImageRef)]
        if len(refs) != len(images):
            raise TypeError("the broker sends image references (sdk.wire.ImageRef, or "
                            "sdk.router.image_ref of a PIL image) for every item")
        client_id = self.client_ids[client_index]
        try:
            scores = await self.broker.query(client_id, refs, prompts, responses)
        except (BrokerError, RequestRefused) as exc:
            if self.failure is None:
                raise
            _log.warning("reward query to member %s failed: %s", client_id, exc)
            self.failed += len(prompts)
            scores, client_id = [self.failure] * len(prompts), ""
        for ref, prompt, response in zip(refs, prompts, responses, strict=True):
            self.judges.setdefault((ref.sha256, prompt, response), []).append(client_id)
        return scores
