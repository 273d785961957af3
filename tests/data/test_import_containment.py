"""An import opens only images inside its source folder: ``..``, absolute paths and symlinks that
lead out are refused naming ``file:record`` and the column, for every source kind."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _importkit import color_image

from sdk.data import ImportConfig, PreferenceDataError, import_data, load_pairs

_CLI = "import sys, sdk.cli; sys.exit(sdk.cli.main(sys.argv[1:]))"


def _csv(root: Path, images: list[str]) -> tuple[Path, str, str]:
    with (root / "export.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "image", "prompt", "chosen", "rejected"])
        writer.writeheader()
        writer.writerows({"id": f"c{i}", "image": image, "prompt": "p?", "chosen": "yes",
                          "rejected": "no"} for i, image in enumerate(images))
    return root / "export.csv", "export.csv:3", "image"  # line 1 is the header


def _jsonl(root: Path, records: list[dict[str, object]]) -> Path:
    (root / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root / "items.jsonl"


def _mc(root: Path, images: list[str]) -> tuple[Path, str, str]:
    return _jsonl(root, [{"id": f"m{i}", "image": image, "question": "Colour?",
                          "options": ["red", "blue"], "answer": "red"}
                         for i, image in enumerate(images)]), "items.jsonl:2", "image"


def _scores(root: Path, images: list[str]) -> tuple[Path, str, str]:
    responses = [{"text": "good", "ratings": {"helpfulness": 5}},
                 {"text": "bad", "ratings": {"helpfulness": 1}}]
    return _jsonl(root, [{"id": f"s{i}", "image": image, "prompt": "Describe.",
                          "responses": responses} for i, image in enumerate(images)]
                  ), "items.jsonl:2", "image"


def _hf(root: Path, images: list[str]) -> tuple[Path, str, str]:
    count = len(images)
    pq.write_table(pa.table({"images": images, "prompt": ["p?"] * count,
                             "chosen": ["yes"] * count, "rejected": ["no"] * count}),
                   root / "pairs.parquet")
    return root / "pairs.parquet", "pairs.parquet:2", "images"


def _hf_dict(root: Path, images: list[str]) -> tuple[Path, str, str]:
    """``datasets``' stored Image, ``{"bytes": None, "path": ...}``: the path is read."""
    count = len(images)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"images": pa.array([[{"bytes": None, "path": p}] for p in images],
                                         pa.list_(image_type)),
                      "prompt": ["p?"] * count, "chosen": ["yes"] * count,
                      "rejected": ["no"] * count})
    pq.write_table(table, root / "pairs.parquet")
    return root / "pairs.parquet", "pairs.parquet:2", "images"


Builder = Callable[[Path, list[str]], tuple[Path, str, str]]
KINDS: dict[str, tuple[str, Builder]] = {
    "csv": ("csv", _csv), "mc": ("mc", _mc), "scores": ("scores", _scores),
    "hf-path": ("hf", _hf), "hf-image-dict": ("hf", _hf_dict),
}


def _escape(how: str, tmp_path: Path) -> str:
    secret = tmp_path / "outside" / "secret.png"
    if how == "relative":
        return "../outside/secret.png"
    if how == "absolute":
        return str(secret)
    (tmp_path / "src" / "img" / "link.png").symlink_to(secret)
    return "img/link.png"


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink"])
@pytest.mark.parametrize("name", list(KINDS))
def test_an_image_outside_the_source_folder_is_refused(tmp_path: Path, name: str, how: str
                                                       ) -> None:
    rng = random.Random(1)
    for folder in ("src/img", "outside"):
        (tmp_path / folder).mkdir(parents=True)
    color_image(rng, "red").save(tmp_path / "src" / "img" / "inside.png")
    color_image(rng, "blue").save(tmp_path / "outside" / "secret.png")
    kind, build = KINDS[name]
    source, where, column = build(tmp_path / "src", ["img/inside.png", _escape(how, tmp_path)])
    with pytest.raises(PreferenceDataError) as caught:
        import_data(kind, source, tmp_path / "out", ImportConfig(eval_fraction=0.0),
                    progress=False)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / "src" / where) + ": "), message
    assert f"field {column!r}: image path" in message and "escapes the source folder" in message
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "outside", "src"]


def test_a_file_outside_is_never_opened(tmp_path: Path) -> None:
    """``/etc/passwd`` is refused for where it is, not read and found to be no image."""
    (tmp_path / "src").mkdir()
    source, _where, _column = _csv(tmp_path / "src", ["/etc/passwd"])
    with pytest.raises(PreferenceDataError, match="is absolute and escapes the source folder"):
        import_data("csv", source, tmp_path / "out", progress=False)


def test_a_symlink_that_stays_inside_is_followed(tmp_path: Path) -> None:
    (tmp_path / "src" / "img").mkdir(parents=True)
    color_image(random.Random(2), "green").save(tmp_path / "src" / "img" / "real.png")
    (tmp_path / "src" / "img" / "alias.png").symlink_to(tmp_path / "src" / "img" / "real.png")
    source, _where, _column = _csv(tmp_path / "src", ["img/alias.png"])
    import_data("csv", source, tmp_path / "out", ImportConfig(eval_fraction=0.0), progress=False)
    assert len(load_pairs(tmp_path / "out" / "train")) == 1


def _saved(folder: Path, prompt: str) -> Path:
    """A ``Dataset.save_to_disk`` folder of one pair asking ``prompt``; returns its shard."""
    from datasets import Dataset

    image = io.BytesIO()
    color_image(random.Random(3), "red").save(image, format="PNG")
    Dataset.from_dict({"images": [image.getvalue()], "prompt": [prompt], "chosen": ["yes"],
                       "rejected": ["no"]}).save_to_disk(str(folder))
    (shard,) = folder.glob("*.arrow")
    return shard


def _index_names(src: Path, how: str, secret: Path) -> None:
    """``src`` made to reach ``secret`` (a shard outside it) by a path it holds."""
    if how == "symlink":  # a plain folder of data files, one a symlink that leads out
        src.mkdir()
        (src / "shard.arrow").symlink_to(secret)
        return
    _saved(src, "inside")
    if how == "split":  # DatasetDict.save_to_disk's index names its split folders
        (src / "dataset_dict.json").write_text(json.dumps({"splits": ["../outside"]}))
        return
    named = str(secret) if how == "absolute" else f"../outside/{secret.name}"
    state = json.loads((src / "state.json").read_text())
    state["_data_files"] = [{"filename": named}]
    (src / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize("how", ["relative", "absolute", "split", "symlink"])
def test_a_data_file_outside_a_datasets_folder_is_refused(tmp_path: Path, how: str) -> None:
    secret = _saved(tmp_path / "outside", "SECRET-OUTSIDE")
    _index_names(tmp_path / "src", how, secret)
    with pytest.raises(PreferenceDataError, match="escapes the source folder") as caught:
        import_data("hf", tmp_path / "src", tmp_path / "out", ImportConfig(eval_fraction=0.0),
                    progress=False)
    assert str(caught.value).startswith(str(tmp_path / "src")), caught.value
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_shard_that_is_a_fifo_is_refused_unopened(tmp_path: Path) -> None:
    _saved(tmp_path / "src", "inside")
    os.mkfifo(tmp_path / "src" / "pipe.arrow")  # opening it would wait for a writer
    state = json.loads((tmp_path / "src" / "state.json").read_text())
    state["_data_files"] = [{"filename": "pipe.arrow"}]
    (tmp_path / "src" / "state.json").write_text(json.dumps(state))
    # In a child process, so an import that opens the pipe fails by its timeout, not a hang.
    run = subprocess.run([sys.executable, "-c", _CLI, "data", "import", "hf",
                          str(tmp_path / "src"), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "pipe.arrow: not found, or not a regular file" in run.stderr
