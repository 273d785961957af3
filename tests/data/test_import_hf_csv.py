"""``fedmor data import hf`` and ``csv``: sources written by datasets, pyarrow and csv."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _importkit import color_image
from PIL import Image

import sdk.cli
from sdk.data import ImportConfig, PreferenceDataError, import_data, load_pairs

FEATURES = datasets.Features({
    "id": datasets.Value("string"), "images": datasets.List(datasets.Image()),
    "prompt": datasets.Value("string"), "chosen": datasets.Value("string"),
    "rejected": datasets.Value("string"),
})


def _trl_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"t{i}", "images": [color_image(rng, "blue", 16 + i % 5)],
             "prompt": f"What is shown in picture {i}?", "chosen": f"good {i}",
             "rejected": f"bad {i}"} for i in range(count)]


def _all_pairs(out: Path) -> dict[str, Any]:
    return {p.id: p for split in ("train", "eval") if (out / split / "pairs.jsonl").stat().st_size
            for p in load_pairs(out / split)}


def test_hf_save_to_disk_keeps_text_and_pixels(tmp_path: Path) -> None:
    rows = _trl_rows(30)
    datasets.Dataset.from_list(rows, features=FEATURES).save_to_disk(str(tmp_path / "ds"))
    summary = import_data("hf", tmp_path / "ds", tmp_path / "out", progress=False)
    pairs = _all_pairs(tmp_path / "out")
    assert sorted(pairs) == sorted(r["id"] for r in rows) and summary.records_read == 30
    for row in rows:
        pair = pairs[row["id"]]
        assert (pair.prompt, pair.chosen, pair.rejected, pair.category) == (
            row["prompt"], row["chosen"], row["rejected"], "imported")
        assert np.array_equal(np.asarray(pair.image), np.asarray(row["images"][0]))
    written = json.loads((tmp_path / "out" / "import.json").read_text())
    assert written["pairs"] == summary.pairs and sum(
        sum(c.values()) for c in summary.pairs.values()) == 30


def test_hf_dataset_dict_reads_every_split(tmp_path: Path) -> None:
    dataset = datasets.Dataset.from_list(_trl_rows(12), features=FEATURES)
    datasets.DatasetDict({"train": dataset.select(range(8)), "test": dataset.select(range(8, 12))}
                         ).save_to_disk(str(tmp_path / "dd"))
    summary = import_data("hf", tmp_path / "dd", tmp_path / "out", progress=False)
    assert summary.records_read == 12 and sorted(_all_pairs(tmp_path / "out")) == sorted(
        f"t{i}" for i in range(12))


def test_hf_split_is_by_hash_of_the_id_and_stable(tmp_path: Path) -> None:
    rows = _trl_rows(200)
    datasets.Dataset.from_list(rows, features=FEATURES).to_parquet(str(tmp_path / "a.parquet"))
    datasets.Dataset.from_list(rows[::-1], features=FEATURES).to_parquet(str(tmp_path / "b.parquet"))
    config = ImportConfig(eval_fraction=0.3)
    import_data("hf", tmp_path / "a.parquet", tmp_path / "a", config, progress=False)
    import_data("hf", tmp_path / "b.parquet", tmp_path / "b", config, progress=False)
    eval_a = {p.id for p in load_pairs(tmp_path / "a" / "eval")}
    assert eval_a == {p.id for p in load_pairs(tmp_path / "b" / "eval")}  # order-free
    # The documented rule: eval when SHA-256(salt, "split", id) falls in the first 30%.
    expected = {row["id"] for row in rows if int.from_bytes(hashlib.sha256(
        f"fedmor-import\0split\0{row['id']}".encode()).digest()[:8], "big") / 2**64 < 0.3}
    assert eval_a == expected and 0 < len(expected) < 200
    assert {p.id for p in load_pairs(tmp_path / "a" / "train")} == {
        row["id"] for row in rows} - expected
    import_data("hf", tmp_path / "a.parquet", tmp_path / "c",
                config.model_copy(update={"salt": "other"}), progress=False)
    assert eval_a != {p.id for p in load_pairs(tmp_path / "c" / "eval")}


def test_hf_parquet_with_paths_and_arrow_with_bytes_mapped_columns(tmp_path: Path) -> None:
    rng = random.Random(2)
    (tmp_path / "pics").mkdir()
    blobs: list[bytes] = []
    sources: dict[str, list[np.ndarray]] = {"p": [], "b": []}
    for index in range(4):
        color_image(rng, "green").save(tmp_path / "pics" / f"{index}.jpg", quality=95)
        with Image.open(tmp_path / "pics" / f"{index}.jpg") as jpeg:  # the decoded JPEG
            sources["p"].append(np.asarray(jpeg.convert("RGB")))
        buffer = io.BytesIO()
        red = color_image(rng, "red")
        red.save(buffer, format="PNG")
        blobs.append(buffer.getvalue())
        sources["b"].append(np.asarray(red))
    text = {"question": [f"q{i}" for i in range(4)], "good": ["yes"] * 4, "bad": ["no"] * 4}
    pq.write_table(pa.table({"image": [f"pics/{i}.jpg" for i in range(4)], **text}),
                   tmp_path / "paths.parquet")
    with pa.OSFile(str(tmp_path / "bytes.arrow"), "wb") as sink, pa.ipc.new_file(
            sink, pa.schema([("img", pa.binary()), *[(k, pa.string()) for k in text]])) as writer:
        writer.write_table(pa.table({"img": blobs, **text}))
    mapping = {"prompt": "question", "chosen": "good", "rejected": "bad"}
    config = ImportConfig(columns=mapping, eval_fraction=0.0, category="photos")
    import_data("hf", tmp_path / "paths.parquet", tmp_path / "p", config, progress=False)
    import_data("hf", tmp_path / "bytes.arrow", tmp_path / "b",
                config.model_copy(update={"columns": {**mapping, "images": "img"}}),
                progress=False)
    ids = set()
    for out in ("p", "b"):
        pairs = load_pairs(tmp_path / out / "train")
        assert [p.prompt for p in pairs] == text["question"]
        assert {p.category for p in pairs} == {"photos"}
        assert [(p.chosen, p.rejected) for p in pairs] == [("yes", "no")] * 4
        for pair, source in zip(pairs, sources[out], strict=True):
            assert np.array_equal(np.asarray(pair.image), source)
        # ids are generated (salted hash of file name and row) when the source has none
        assert all(p.id.startswith("r") and len(p.id) == 17 for p in pairs)
        ids |= {p.id for p in pairs}
    assert len(ids) == 8  # the file name is part of the hash: no id repeats across files


def test_hf_in_memory_dataset_with_pil_images(tmp_path: Path) -> None:
    rows = _trl_rows(5)
    dataset = datasets.Dataset.from_list(rows, features=FEATURES)
    import_data("hf", dataset, tmp_path / "out", ImportConfig(eval_fraction=0.0), progress=False)
    pairs = load_pairs(tmp_path / "out" / "train")
    assert [(p.id, p.prompt, p.chosen, p.rejected) for p in pairs] == [
        (r["id"], r["prompt"], r["chosen"], r["rejected"]) for r in rows]
    for pair, row in zip(pairs, rows, strict=True):
        assert np.array_equal(np.asarray(pair.image), np.asarray(row["images"][0]))


def test_hf_errors_name_the_record_and_write_nothing(tmp_path: Path) -> None:
    rows = _trl_rows(3)
    rows[1]["images"] = rows[1]["images"] * 2
    datasets.Dataset.from_list(rows, features=FEATURES).to_parquet(str(tmp_path / "two.parquet"))
    with pytest.raises(PreferenceDataError, match=r"two.parquet:2: field 'images' holds 2 images"):
        import_data("hf", tmp_path / "two.parquet", tmp_path / "out", progress=False)
    pq.write_table(pa.table({"images": [b"not an image"], "prompt": ["p"], "chosen": ["c"],
                             "rejected": ["r"]}), tmp_path / "bad.parquet")
    with pytest.raises(PreferenceDataError, match=r"bad.parquet:1: image 'images' is unreadable"):
        import_data("hf", tmp_path / "bad.parquet", tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet", "two.parquet"]


def _write_csv(root: Path, rows: list[dict[str, str]]) -> Path:
    with (root / "export.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return root / "export.csv"


def _csv_source(root: Path, count: int) -> list[dict[str, str]]:
    rng = random.Random(4)
    (root / "images").mkdir(parents=True)
    rows = []
    for index in range(count):
        color_image(rng, "yellow").save(root / "images" / f"scan{index}.png")
        rows.append({"id": f"c{index}", "image": f"images/scan{index}.png",
                     "prompt": "Is the finding benign?", "chosen": "Yes, benign.",
                     "rejected": "No.", "category": "derm"})
    return rows


def test_csv_with_an_image_folder_drops_and_counts_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _csv_source(tmp_path / "src", 10)
    rows.append(rows[3] | {"id": "copy-of-c3"})  # same content under another id
    rows.append(rows[4] | {"rejected": "Yes, benign."})  # chosen equals rejected
    rows.append(rows[5] | {"prompt": "Other prompt?"})  # same id, other content
    source = _write_csv(tmp_path / "src", rows)
    out = tmp_path / "out"
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "dropped 1: duplicate pair (same image, prompt, chosen and rejected)" in printed
    assert "dropped 1: chosen equals rejected" in printed
    assert "dropped 1: id repeated with other content" in printed
    pairs = _all_pairs(out)
    assert sorted(pairs) == sorted(f"c{i}" for i in range(10))
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(out)]) == 1
    assert "exists; pick a new folder or pass --replace" in capsys.readouterr().err
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(out), "--replace",
                         "--category", "ignored-when-a-column-exists"]) == 0
    assert {p.category for p in _all_pairs(out).values()} == {"derm"}


def test_csv_missing_image_names_the_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _csv_source(tmp_path / "src", 3)
    rows[1]["image"] = "images/absent.png"
    source = _write_csv(tmp_path / "src", rows)
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(tmp_path / "o")]) == 1
    assert "export.csv:3: image 'images/absent.png' not found" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and len(list(tmp_path.iterdir())) == 1


def test_same_image_in_train_and_eval_is_warned_by_import_and_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _csv_source(tmp_path / "src", 1)
    rows = [rows[0] | {"id": f"s{i}", "prompt": f"Question {i}?"} for i in range(40)]
    source = _write_csv(tmp_path / "src", rows)
    summary = import_data("csv", source, tmp_path / "out", ImportConfig(eval_fraction=0.5),
                          progress=False)
    assert summary.shared_images == 1
    assert "warning: 1 images appear in both train and eval" in summary.render()
    assert sdk.cli.main(["data", "check", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "warning: 1 images appear in both a train and an eval folder" in printed
    # A folder not made by the import: the same bytes under clients/x/train and clients/y/eval.
    for split in ("x/train", "y/eval"):
        (tmp_path / "other" / split).mkdir(parents=True)
        (tmp_path / "other" / split / "a.png").write_bytes(
            (tmp_path / "src" / "images" / "scan0.png").read_bytes())
        (tmp_path / "other" / split / "pairs.jsonl").write_text(json.dumps(
            {"id": "1", "image": "a.png", "prompt": "p", "chosen": "c", "rejected": "r",
             "category": "k"}) + "\n")
    assert sdk.cli.main(["data", "check", str(tmp_path / "other")]) == 0
    printed = capsys.readouterr().out
    assert "the same image is in train and eval" in printed and "x/train/a.png" in printed
    color_image(random.Random(9), "red").save(tmp_path / "other" / "y" / "eval" / "a.png")
    assert sdk.cli.main(["data", "check", str(tmp_path / "other")]) == 0
    assert "warning" not in capsys.readouterr().out
