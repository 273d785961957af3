"""BrokerRewardSource: items reach the broker per client, images as PNG bytes encoded once."""

import asyncio
import io
from dataclasses import dataclass

import pytest
from PIL import Image

from sdk.alignment import BrokerRewardSource, CompletionBatch
from sdk.alignment._errors import RewardShapeError
from sdk.alignment._selection import BestSingle
from tests.alignment.conftest import grey


@dataclass(frozen=True)
class Item:  # the shape of server_app's QueryItem
    image: bytes
    prompt: str
    response: str


class RecordingBroker:
    """A broker that scores by response length and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[Item]]] = []

    async def query(self, client_id: str, items: list[Item]) -> list[float]:
        self.asked.append((client_id, items))
        return [float(len(i.response)) for i in items]


def test_scores_come_from_the_named_client_with_png_images() -> None:
    broker = RecordingBroker()
    source = BrokerRewardSource(broker, ["hospital-a", "bank-b"], Item)
    image = grey(50)
    batch = CompletionBatch(images=[image, image], prompts=["p", "p"], responses=["ab", "abcd"])
    assert asyncio.run(BestSingle(1).rewards(batch, source)) == [2.0, 4.0]
    client_id, items = broker.asked[0]
    assert client_id == "bank-b"
    decoded = Image.open(io.BytesIO(items[0].image))
    assert decoded.format == "PNG" and decoded.convert("RGB").tobytes() == image.tobytes()
    assert items[0].image is items[1].image  # the same image is encoded once


def test_missing_image_and_bad_index_are_errors() -> None:
    source = BrokerRewardSource(RecordingBroker(), ["a"], Item)
    with pytest.raises(RewardShapeError, match="needs an image"):
        asyncio.run(source.score(0, [None], ["p"], ["r"]))
    with pytest.raises(IndexError, match="out of range"):
        asyncio.run(source.score(3, [grey()], ["p"], ["r"]))
