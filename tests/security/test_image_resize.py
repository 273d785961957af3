"""Finding 2 (resize): a reward-query image within the pixel limit but larger than the model's
input size is scaled down (aspect kept) to it before it is scored or cached, so the score is the
score of the pre-resized image; the decoded-image cache stays within its byte bound; a batch
the model refuses leaves the member's store as it was."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from client_app import ClientStore, HashScorer, RewardService, SitePolicy
from fedmor_local import LocalConsortium
from sdk.data import fit_to_pixels
from sdk.models import build_tiny_vlm, input_pixels
from sdk.reward import ClientScorer, RewardModel, ScoreNormalizer
from sdk.wire import PayloadError, RewardRequest, RewardResponse
from tests.security.conftest import PUSH, client_id, server_signed_post


def _png(width: int, height: int, seed: int = 0) -> bytes:
    # Smooth gradients plus noise: a photo-like image that compresses to a realistic size.
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (width + height)], -1)
    pixels = np.clip(base + rng.integers(-8, 9, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def _request(data: bytes, response: str = "a red square") -> RewardRequest:
    return RewardRequest.model_validate({"items": [{
        "image_sha256": hashlib.sha256(data).hexdigest(), "prompt": "which colour",
        "response": response, "image_b64": base64.b64encode(data).decode()}]})


def _service(tmp_path: Path, scorer: object, **kw: int) -> RewardService:
    return RewardService(ClientStore(tmp_path / "client.db"), scorer,  # type: ignore[arg-type]
                         clip=3.0, policy=SitePolicy(), rate_per_minute=1000, **kw)


def _scores(service: RewardService, data: bytes) -> list[float]:
    out = service.score("server", _request(data))
    assert isinstance(out, RewardResponse), out
    return out.scores


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> ClientScorer:
    backbone = build_tiny_vlm("qwen2_vl", tmp_path_factory.mktemp("rm"),
                              corpus=["a red square", "which colour"])
    return ClientScorer(RewardModel.from_backbone(backbone), ScoreNormalizer.fit([0.0, 1.0, 2.0]))


def test_a_large_image_is_scored_at_the_models_input_size(tmp_path: Path,
                                                          scorer: ClientScorer) -> None:
    # The checkpoint's processor decides: the tiny Qwen2-VL's max_pixels.
    budget = scorer.input_pixels
    assert budget is not None and budget == input_pixels(scorer._model.bundle.processor)
    service = _service(tmp_path, scorer, max_image_side=4096)
    big = _png(3000, 2000)
    digest = hashlib.sha256(big).hexdigest()
    score = _scores(service, big)
    cached = service._decoded.get(digest)
    assert cached is not None and cached.width * cached.height <= budget
    assert cached.size == (102, 68)  # 3:2 kept: sqrt(7056 / 6e6) x (3000, 2000), rounded down
    small = fit_to_pixels(Image.open(io.BytesIO(big)).convert("RGB"), budget)
    buf = io.BytesIO()
    small.save(buf, format="PNG")
    assert _scores(service, buf.getvalue()) == score  # the pre-resized image scores the same
    assert scorer.score([small], ["which colour"], ["a red square"]) == pytest.approx(score)
    assert service._decoded.bytes == 2 * 102 * 68 * 3  # both cached at the model's size
    # Over the pixel limit is still refused before decoding, as before.
    with pytest.raises(ValueError, match="over the limit of 1024 px a side"):
        _scores(_service(tmp_path, scorer), big)



def test_a_batch_the_model_refuses_keeps_none_of_its_images(tmp_path: Path,
                                                            scorer: ClientScorer) -> None:
    service = _service(tmp_path, scorer)
    data = _png(64, 64, seed=5)
    digest = hashlib.sha256(data).hexdigest()
    long = " ".join(["a red square"] * 1500)  # within the wire's limit, over the model's
    with pytest.raises(PayloadError, match="cannot score this batch"):
        service.score("server", _request(data, response=long))
    assert service.store.image(digest) is None and service.store.audit_log() == []
    _scores(service, data)  # the same image in a batch the model takes is kept
    assert service.store.image(digest) == data

def test_the_decoded_cache_is_bounded_by_bytes(tmp_path: Path) -> None:
    budget = 5 * 200 * 200 * 3  # five decoded 200x200 images
    service = _service(tmp_path, HashScorer(), decoded_cache_bytes=budget)
    for seed in range(12):
        _scores(service, _png(200, 200, seed))
        assert service._decoded.bytes <= budget
        assert service._decoded.bytes == sum(i.width * i.height * 3
                                             for i in service._decoded.values())
    assert len(service._decoded) == 5
    # A single image larger than the whole bound is scored but never cached.
    tiny = _service(tmp_path, HashScorer(), decoded_cache_bytes=1000)
    _scores(tiny, _png(200, 200))
    assert tiny._decoded.bytes == 0 and not tiny._decoded


def test_a_member_process_scores_the_resized_image(hostile: LocalConsortium) -> None:
    url, cid = hostile.client_cfg[PUSH]["public_url"], client_id(hostile, PUSH)
    big = _png(1000, 700, seed=3)  # within the 1024 px limit, over the stand-in's 448 x 448
    small = fit_to_pixels(Image.open(io.BytesIO(big)).convert("RGB"), HashScorer.input_pixels)
    assert small.size != (1000, 700)
    buf = io.BytesIO()
    small.save(buf, format="PNG")

    def score(data: bytes) -> float:
        resp = server_signed_post(hostile, url, "/v1/reward",
                                  _request(data).model_dump(exclude_none=True), recipient=cid)
        assert resp.status_code == 200, resp.text
        return float(resp.json()["scores"][0])

    assert score(big) == score(buf.getvalue())
    # The hash scorer hashes the pixels: without the resize the two would differ.
    full = Image.open(io.BytesIO(big)).convert("RGB")
    assert HashScorer().score([full], ["which colour"], ["a red square"]) != [score(big)]
