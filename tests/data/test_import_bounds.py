"""An import's memory follows the input's shape, not its size: a multi-frame DICOM file is
streamed one frame at a time, an oversized cell or a decompression bomb is refused with its
limit; pydicom's own files show the decoder's reason and the palette's colours."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _importkit import write_dicom
from PIL import Image

import sdk.cli
from sdk.data import ImportConfig, PreferenceDataError, import_data, load_pairs

FRAMES, SIDE = 2000, 64
GROWTH_BOUND_MB = 12
"""The most an import of the 2,000-frame file may raise the process's peak RSS: a few frames'
worth; decoding every frame at once holds the whole pixel data (16 MiB) and its RGB frames (24 MiB)."""

_CHILD = r"""
import json, sys
import pydicom.pixels  # loaded before the baseline: the import loads it lazily
from sdk.data import ImportConfig, import_data

def peak_mb():  # VmHWM: this process's own peak (ru_maxrss keeps the forking parent's)
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024

before = peak_mb()
summary = import_data("csv", sys.argv[1], sys.argv[2], ImportConfig(eval_fraction=0.0),
                      progress=False)
print(json.dumps({"before": before, "after": peak_mb(), "pairs": summary.pairs}))
"""


def _csv(root: Path, images: list[str]) -> Path:
    with (root / "pairs.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "prompt", "chosen", "rejected"])
        writer.writerows([image, f"View {i}?", "Normal.", "Abnormal."]
                         for i, image in enumerate(images))
    return root / "pairs.csv"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_a_2000_frame_dicom_is_imported_one_frame_at_a_time(tmp_path: Path) -> None:
    shift = np.arange(FRAMES, dtype=np.int64).reshape(FRAMES, 1, 1) * 3
    pixels = (np.arange(SIDE * SIDE).reshape(1, SIDE, SIDE) + shift) % 4096
    write_dicom(tmp_path / "cine.dcm", pixels.astype(np.uint16), WindowCenter=None,
                WindowWidth=None)
    del pixels, shift
    assert (tmp_path / "cine.dcm").stat().st_size > FRAMES * SIDE * SIDE * 2
    source = _csv(tmp_path, ["cine.dcm"])
    run = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300, check=True)
    measured = json.loads(run.stdout.splitlines()[-1])
    assert measured["pairs"]["train"] == {"imported": FRAMES}  # every frame its own pair
    growth = measured["after"] - measured["before"]
    assert growth < GROWTH_BOUND_MB, f"peak RSS grew {growth:.0f} MB over {measured['before']:.0f}"
    assert "Warning" not in run.stderr


def test_a_frame_count_the_pixel_data_does_not_hold_is_refused_in_little_memory(
        tmp_path: Path) -> None:
    # A few hundred bytes of pixels under a header that claims five million frames: the
    # claim must size no allocation before pydicom finds the pixel data short.
    write_dicom(tmp_path / "claims.dcm", np.zeros((16, 16), np.uint16),
                NumberOfFrames=5_000_000)
    source = _csv(tmp_path, ["claims.dcm"])
    tracemalloc.start()
    try:
        with pytest.raises(PreferenceDataError, match=r"pairs.csv:2: DICOM image 'claims.dcm': "
                           r"pixel data cannot be decoded"):
            import_data("csv", source, tmp_path / "out", progress=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert not (tmp_path / "out").exists()


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_oversized_cell_is_refused_with_its_limit(tmp_path: Path) -> None:
    cell = _png(16, 16) + b"\0" * 200_000  # bytes after IEND: a large cell, a small image
    pq.write_table(pa.table({"images": [_png(16, 16), cell], "prompt": ["p", "q"],
                             "chosen": ["c", "c"], "rejected": ["r", "r"]}),
                   tmp_path / "big.parquet")
    config = ImportConfig(max_source_bytes=100_000)
    with pytest.raises(PreferenceDataError, match=r"big.parquet:2: image 'images' is \d+ bytes, "
                       r"over the limit of 100000 \(max_source_bytes\)"):
        import_data("hf", tmp_path / "big.parquet", tmp_path / "out", config, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_decompression_bomb_is_refused_before_decoding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 12,000 x 12,000 PNG (144 M pixels, a few hundred KB) is refused from its header, and
    Pillow's DecompressionBombWarning does not reach stderr."""
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "bomb.png").write_bytes(_png(12_000, 12_000))
    source = _csv(tmp_path, ["img/bomb.png"])
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(tmp_path / "o")]) == 1
    error = capsys.readouterr().err
    assert ("pairs.csv:2: image 'img/bomb.png' is 12000x12000, over the limit of 67108864 "
            "pixels (max_source_pixels)\n") in error, error
    assert "DecompressionBombWarning" not in error and not (tmp_path / "o").exists()
    config = ImportConfig(max_source_pixels=1000)
    with pytest.raises(PreferenceDataError, match=r"is 12000x12000, over the limit of 1000 pixels"):
        import_data("csv", source, tmp_path / "o", config, progress=False)


def _testdata(name: str, folder: Path) -> str:
    from pydicom.data import get_testdata_file

    found = get_testdata_file(name)  # bundled with pydicom: nothing is downloaded
    assert found is not None
    shutil.copy(found, folder / name)
    return name


def test_an_undecodable_frame_gives_pydicoms_reason_and_the_plugins(tmp_path: Path) -> None:
    source = _csv(tmp_path, [_testdata("JPEG-lossy.dcm", tmp_path)])  # 12-bit JPEG Extended
    with pytest.raises(PreferenceDataError) as caught:
        import_data("csv", source, tmp_path / "out", progress=False)
    message = str(caught.value)
    assert "pairs.csv:2: DICOM image 'JPEG-lossy.dcm': pixel data cannot be decoded (" in message
    assert "12-bit" in message and "install one of:" in message and "pylibjpeg" in message
    assert not (tmp_path / "out").exists()


def test_palette_color_goes_through_the_colour_table(tmp_path: Path) -> None:
    source = _csv(tmp_path, [_testdata("examples_palette.dcm", tmp_path)])
    import_data("csv", source, tmp_path / "out", ImportConfig(eval_fraction=0.0),
                progress=False)
    (pair,) = load_pairs(tmp_path / "out" / "train")
    pixels = np.asarray(pair.image).astype(int)
    # Grey indices would give equal channels; the table's colours differ between them.
    assert (pixels[..., 0] != pixels[..., 2]).mean() > 0.1
