"""A capture-dir audit finds a member's own pairs in the reward-query log the server's capture
writes: the log names each image by the sha256 of the bytes the aligner sent, so the audit
matches candidate pairs by their image files' bytes (pairs from a data folder) or by the PNG
the aligner's ``image_ref`` makes of decoded pixels (pairs given as PIL images)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _attack_kit import synth_client_data
from PIL import Image

from attacks import MemberTruth, audit_capture_dir
from sdk.data import load_pairs
from sdk.data._loading import PAIRS_FILE, json_objects
from sdk.router import image_ref
from sdk.wire import ImageRef, RewardItem
from server_app import Store
from server_app._capture import ServerCapture
from server_app._settings._audit import CaptureSettings

MEMBER = "site-1"


def _recompress(folder: Path) -> None:
    """Rewrite every image file as an uncompressed PNG: the same pixels in other bytes than
    ``image_ref`` makes, so only the files' own hash can match them."""
    for path in folder.rglob("*.png"):
        with Image.open(path) as im:
            pixels = im.convert("RGB")
        pixels.save(path, format="PNG", compress_level=0)


def _sent(split: Path, as_files: bool) -> list[ImageRef]:
    """Each pair's image as the aligner sends it: its file's bytes, or ``image_ref`` of its
    decoded pixels."""
    if as_files:
        return [ImageRef.of((split / rec["image"]).read_bytes())
                for _, rec in json_objects(split / PAIRS_FILE)]
    return [image_ref(p.image) for p in load_pairs(split)]


def _captured(tmp_path: Path, data: Path, as_files: bool) -> Path:
    """The server's capture of one member's answers to queries of its own pairs: train pairs
    with a wide margin, eval pairs with a narrow one."""
    store = Store(tmp_path / "server.db")
    capture = ServerCapture(store, CaptureSettings(enabled=True, dir=tmp_path / "capture"),
                            router={}, encoder={}, members=None)
    try:
        for split, margin in (("train", 2.0), ("eval", 0.1)):
            pairs = load_pairs(data / split)
            for k, (p, sent) in enumerate(zip(pairs, _sent(data / split, as_files),
                                              strict=True)):
                items = [RewardItem(image_sha256=sent.sha256, prompt=p.prompt, response=y)
                         for y in (p.chosen, p.rejected)]
                capture.reward_query(MEMBER, items, [margin + 0.01 * k, -margin])
    finally:
        capture.close()
        store.close()
    return tmp_path / "capture"


@pytest.mark.parametrize("as_files", [True, False], ids=["file-bytes", "decoded"])
def test_the_audit_finds_the_members_pairs_in_the_captured_query_log(
        as_files: bool, tmp_path: Path) -> None:
    data = synth_client_data(tmp_path / "data", train_pairs=6, eval_pairs=6)
    _recompress(data)  # file bytes and image_ref's PNG differ: each key is tested alone
    truth = (MemberTruth.load(pairs=data) if as_files  # candidates from the data folder
             else MemberTruth(members=load_pairs(data / "train"),  # PIL images only
                              non_members=load_pairs(data / "eval")))
    root = _captured(tmp_path, data, as_files)
    report = audit_capture_dir(root, tmp_path / "audit", truth={MEMBER: truth})
    (mia,) = report.memberships
    assert mia.members == [MEMBER] and mia.auc == 1.0, mia
    assert mia.verdict.startswith("leaks")
