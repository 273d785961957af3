"""The aligner's one check of the server's answer: a server that returns another number of
rewards than items sent is an error, never a silently shifted reward column."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from PIL import Image

from sdk.alignment import RestRewardFunction
from sdk.alignment._errors import RewardShapeError
from sdk.router import image_ref
from sdk.wire import AlignerRequest, AlignerResponse, generate_key
from tests._serve import served


@pytest.fixture(scope="module")
def short_server() -> Iterator[str]:
    """A server on 127.0.0.1 that answers every batch with one reward too few."""
    app = FastAPI()

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/rewards")
    def rewards(req: AlignerRequest) -> AlignerResponse:
        return AlignerResponse(rewards=[0.0] * (len(req.items) - 1))

    with served(app) as url:
        yield url


def test_a_short_answer_is_a_shape_error(short_server: str) -> None:
    fn = RestRewardFunction(short_server, generate_key(), "c-aligner", verify=False)
    image = image_ref(Image.new("RGB", (8, 8)))
    with pytest.raises(RewardShapeError, match="returned 1 rewards for 2 completions"):
        asyncio.run(fn(prompts=["p", "q"], completions=["a", "b"], image=[image] * 2))
