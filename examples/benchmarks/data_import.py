"""Memory of ``fedmor data import`` on a large Parquet source and a 2,000-frame DICOM file,
against baselines in the run.

Writes a Parquet file of trl-column pairs (32x32 noise PNGs as ``datasets`` stores images:
``{"bytes", "path"}``), then measures the peak RSS of three fresh processes: the baseline
(Python with the import's libraries loaded), a naive load (``pyarrow.parquet.read_table`` into
Python rows) and the import itself, at two sizes (a tenth of the pairs, at least two row groups, and all of them). A
streaming import keeps its peak flat as the source grows; a naive load grows with it. Then a
DICOM file of 2,000 frames (uint16, written with pydicom) named by a one-row CSV: the peak of
its import (every frame its own pair, decoded one at a time) against the baseline and a naive
decode (``dcmread(...).pixel_array``, every frame at once). The last stdout line is one JSON
object.

    .venv/bin/python examples/benchmarks/data_import.py --quick
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MB = 1024 * 1024
_CHILD = r"""
import json, resource, sys, time
import pyarrow.parquet as pq
import pydicom, pydicom.pixels
from sdk.data import ImportConfig, import_data
mode, source, out = sys.argv[1:4]
start = time.perf_counter()
if mode == "naive":
    rows = pq.read_table(source).to_pylist()
    assert rows
elif mode == "import":
    import_data("hf", source, out, ImportConfig(), progress=False)
elif mode == "dicom-naive":
    assert pydicom.dcmread(source).pixel_array.size
elif mode == "dicom-import":
    import_data("csv", source, out, ImportConfig(), progress=False)
wall = time.perf_counter() - start
try:  # VmHWM: this process's own peak (ru_maxrss keeps the parent's peak across fork+exec)
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    peak = int(status.split()[0]) / 1024
except (OSError, IndexError):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"peak_rss_mb": peak, "wall_s": wall}))
"""


def write_source(path: Path, pairs: int, batch: int = 1000) -> None:
    """``pairs`` rows of trl columns in row groups of ``batch`` rows (as ``datasets`` writes),
    generated batch by batch."""
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("id", pa.string()), ("images", pa.list_(image_type)),
                        ("prompt", pa.string()), ("chosen", pa.string()),
                        ("rejected", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for first in range(0, pairs, batch):
            ids, images = [], []
            for index in range(first, min(first + batch, pairs)):
                buffer = io.BytesIO()
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels, mode="RGB").save(buffer, format="PNG")
                ids.append(f"pair-{index:07d}")
                images.append([{"bytes": buffer.getvalue(), "path": None}])
            count = len(ids)
            writer.write_table(pa.table({
                "id": ids, "images": images,
                "prompt": [f"What is in picture {i}? Answer in one sentence." for i in ids],
                "chosen": ["A precise description of the picture."] * count,
                "rejected": ["A vague answer."] * count,
            }, schema=schema))


def child(mode: str, source: Path, out: Path) -> dict[str, float]:
    """Run one measurement in a fresh process; its peak RSS (MB) and wall time."""
    done = subprocess.run([sys.executable, "-c", _CHILD, mode, str(source), str(out)],
                          check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(root: Path, pairs: int) -> dict[str, float]:
    """Baseline, naive and import peaks for a source of ``pairs`` pairs."""
    source = root / f"source-{pairs}.parquet"
    write_source(source, pairs)
    baseline = child("baseline", source, root / "unused")
    naive = child("naive", source, root / "unused")
    imported = child("import", source, root / f"out-{pairs}")
    written = sum(1 for _ in (root / f"out-{pairs}").rglob("*.png"))
    return {
        "pairs": pairs, "source_mb": round(source.stat().st_size / MB, 1),
        "baseline_rss_mb": round(baseline["peak_rss_mb"], 1),
        "naive_load_rss_mb": round(naive["peak_rss_mb"], 1),
        "import_rss_mb": round(imported["peak_rss_mb"], 1),
        "import_over_baseline_mb": round(imported["peak_rss_mb"] - baseline["peak_rss_mb"], 1),
        "naive_over_baseline_mb": round(naive["peak_rss_mb"] - baseline["peak_rss_mb"], 1),
        "import_wall_s": round(imported["wall_s"], 1),
        "pairs_per_s": round(pairs / imported["wall_s"], 1), "images_written": written,
    }


def measure_dicom(root: Path, frames: int, rows: int, columns: int) -> dict[str, float | str]:
    """Baseline, naive decode and import peaks for a DICOM file of ``frames`` frames."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = CTImageStorage, generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    dataset = Dataset()
    dataset.file_meta, dataset.SOPClassUID, dataset.Modality = meta, CTImageStorage, "CT"
    dataset.NumberOfFrames, dataset.Rows, dataset.Columns = frames, rows, columns
    dataset.SamplesPerPixel, dataset.PhotometricInterpretation = 1, "MONOCHROME2"
    dataset.BitsAllocated, dataset.BitsStored, dataset.HighBit = 16, 12, 11
    dataset.PixelRepresentation = 0
    base = np.arange(rows * columns, dtype=np.int64).reshape(rows, columns)
    dataset.PixelData = b"".join(((base + 3 * i) % 4096).astype(np.uint16).tobytes()
                                 for i in range(frames))
    dicom = root / "cine.dcm"
    dataset.save_as(dicom, enforce_file_format=True)
    del dataset
    (root / "cine.csv").write_text("image,prompt,chosen,rejected\ncine.dcm,Any finding?,No.,Yes.\n")
    baseline = child("baseline", dicom, root / "unused")
    naive = child("dicom-naive", dicom, root / "unused")
    imported = child("dicom-import", root / "cine.csv", root / "out-dicom")
    return {
        "frames": frames, "frame": f"{rows}x{columns}",
        "source_mb": round(dicom.stat().st_size / MB, 1),
        "baseline_rss_mb": round(baseline["peak_rss_mb"], 1),
        "naive_decode_rss_mb": round(naive["peak_rss_mb"], 1),
        "import_rss_mb": round(imported["peak_rss_mb"], 1),
        "import_over_baseline_mb": round(imported["peak_rss_mb"] - baseline["peak_rss_mb"], 1),
        "frames_per_s": round(frames / imported["wall_s"], 1),
        "images_written": sum(1 for _ in (root / "out-dicom").rglob("*.png")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6,000 pairs instead of 100,000")
    parser.add_argument("--pairs", type=int, help="the largest source (default 100,000)")
    args = parser.parse_args()
    largest = args.pairs or (6_000 if args.quick else 100_000)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fedmor-import-bench-") as tmp:
        rows = [measure(Path(tmp), max(largest // 10, 2_000)), measure(Path(tmp), largest)]
        # 2,000 frames: 128x128 quick (64 MB), 128x256 full (131 MB).
        dicom = measure_dicom(Path(tmp), 2_000, 128, 128 if args.quick else 256)
    for row in rows:
        print(f"{row['pairs']:>7} pairs ({row['source_mb']} MB Parquet): import peak "
              f"{row['import_rss_mb']} MB (baseline {row['baseline_rss_mb']}, naive load "
              f"{row['naive_load_rss_mb']}), {row['pairs_per_s']} pairs/s", flush=True)
    print(f"{dicom['frames']} DICOM frames of {dicom['frame']} ({dicom['source_mb']} MB): import "
          f"peak {dicom['import_rss_mb']} MB (baseline {dicom['baseline_rss_mb']}, naive decode "
          f"{dicom['naive_decode_rss_mb']}), {dicom['frames_per_s']} frames/s", flush=True)
    small, large = rows
    print(json.dumps({
        "benchmark": "data_import", "quick": args.quick, "sizes": rows, "dicom": dicom,
        "import_growth_mb": round(large["import_rss_mb"] - small["import_rss_mb"], 1),
        "naive_growth_mb": round(large["naive_load_rss_mb"] - small["naive_load_rss_mb"], 1),
        "wall_s": round(time.perf_counter() - start, 1),
    }))


if __name__ == "__main__":
    main()
