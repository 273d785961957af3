"""DICOM images in any source: pixels only, never a header value, windowing, frames, refusals."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _importkit import IDENTIFYING, write_dicom
from PIL import Image

import sdk.cli
from sdk.data import ImportConfig, PreferenceDataError, import_data, load_pairs

# Raw CT values (intercept -1024): air, water (0 HU), 40 HU (the window centre), bone.
RAW = np.array([[0, 1024], [1064, 2000]], dtype=np.uint16).repeat(8, 0).repeat(8, 1)


def _variants(value: str) -> set[str]:
    """A tag value and the forms it could take in output (name parts, dashed dates)."""
    forms = {value, *value.replace("^", " ").split()}
    if len(value) == 8 and value.isdigit():
        forms.add(f"{value[:4]}-{value[4:6]}-{value[6:]}")
    return {f for f in forms if len(f) >= 4}


def _csv(root: Path, images: list[str]) -> Path:
    with (root / "pairs.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "prompt", "chosen", "rejected"])
        for index, image in enumerate(images):
            writer.writerow([image, f"Any fracture in view {index}?", "No fracture.", "Yes."])
    return root / "pairs.csv"


def test_no_identifying_value_reaches_any_output_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    write_dicom(src / "a.dcm", RAW)
    write_dicom(src / "b.dcm", np.stack([RAW, RAW // 2, RAW // 4]))  # three frames
    write_dicom(src / "preamble-only", RAW[::-1])  # DICOM by its preamble, no extension
    source = _csv(src, ["a.dcm", "b.dcm", "preamble-only"])
    blob = (src / "a.dcm").read_bytes()
    pq.write_table(pa.table({"images": [blob], "prompt": ["p"], "chosen": ["c"],
                             "rejected": ["r"]}), src / "hf.parquet")
    caplog.set_level("DEBUG")
    assert sdk.cli.main(["data", "import", "csv", str(source), "--out", str(tmp_path / "csv"),
                         "--eval-fraction", "0.4"]) == 0
    assert sdk.cli.main(["data", "import", "hf", str(src / "hf.parquet"), "--out",
                         str(tmp_path / "hf")]) == 0
    captured = capsys.readouterr()
    pairs = [p for out in ("csv", "hf") for split in ("train", "eval")
             if (tmp_path / out / split / "pairs.jsonl").stat().st_size for p in load_pairs(tmp_path / out / split)]
    assert len(pairs) == 1 + 3 + 1 + 1  # one pair per frame
    texts = [captured.out, captured.err, caplog.text]
    blobs: list[bytes] = []
    for out in ("csv", "hf"):
        for path in sorted((tmp_path / out).rglob("*")):
            texts.append(str(path.relative_to(tmp_path)))
            if path.is_file():
                blobs.append(path.read_bytes())
                if path.suffix == ".png":
                    with Image.open(path) as image:
                        assert set(image.info) <= {"dpi", "gamma"}, image.info
                        assert not image.getexif()
                        texts.append(json.dumps(image.info, default=str))
    assert len(blobs) > 8
    haystack = "\n".join(texts).encode() + b"\n".join(blobs)
    for name, value in IDENTIFYING.items():
        for form in _variants(value):
            for encoded in (form.encode(), form.upper().encode(), form.encode("utf-16-le")):
                assert encoded not in haystack, (name, form)



@pytest.mark.parametrize(("tag", "placeholder", "reason"), [
    ("NumberOfFrames", "000000000001", "tag NumberOfFrames is not a whole number"),
    ("RescaleSlope", "1.0000000001", "a rescale, window, lookup-table or bits value is malformed"),
    ("WindowCenter", "40.000000001", "a rescale, window, lookup-table or bits value is malformed"),
])
def test_a_malformed_number_is_a_record_error_quoting_no_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
    tag: str, placeholder: str, reason: str,
) -> None:
    # A patient id where the header holds a number: pydicom's own message would quote it.
    write_dicom(tmp_path / "bad.dcm", RAW, **{tag: placeholder})
    data = (tmp_path / "bad.dcm").read_bytes()
    assert data.count(placeholder.encode()) == 1
    value = IDENTIFYING["PatientID"].encode().ljust(len(placeholder))
    (tmp_path / "bad.dcm").write_bytes(data.replace(placeholder.encode(), value))
    write_dicom(tmp_path / "ok.dcm", RAW)
    source = _csv(tmp_path, ["bad.dcm", "ok.dcm"])
    caplog.set_level("DEBUG")
    argv = ["data", "import", "csv", str(source), "--out", str(tmp_path / "out"),
            "--eval-fraction", "0"]
    assert sdk.cli.main(argv) == 1
    error = capsys.readouterr().err
    assert f"pairs.csv:2: DICOM image 'bad.dcm': {reason}" in error, error
    assert sdk.cli.main([*argv, "--skip-bad"]) == 0  # a record error: skipped, not a crash
    captured = capsys.readouterr()
    report = (tmp_path / "out" / "import.json").read_text()
    for text in (error, captured.out, captured.err, caplog.text, report):
        assert IDENTIFYING["PatientID"] not in text, text

def test_window_from_the_file_and_the_default(tmp_path: Path) -> None:
    write_dicom(tmp_path / "w.dcm", RAW)
    write_dicom(tmp_path / "plain.dcm", RAW, WindowCenter=None, WindowWidth=None)
    write_dicom(tmp_path / "inv.dcm", RAW, PhotometricInterpretation="MONOCHROME1")
    source = _csv(tmp_path, ["w.dcm", "plain.dcm", "inv.dcm"])
    import_data("csv", source, tmp_path / "out", ImportConfig(eval_fraction=0.0), progress=False)
    grey = [np.asarray(p.image)[::8, ::8, 0] for p in load_pairs(tmp_path / "out" / "train")]
    # Window 40 +/- 200 HU: air and water below/at the lower half, 40 HU mid-grey, bone white.
    assert grey[0].tolist() == [[0, 102], [128, 255]]
    # No window in the file: the frame's own minimum to maximum.
    assert grey[1].tolist() == [[0, 131], [136, 255]]
    assert grey[2].tolist() == [[255, 153], [127, 0]]  # MONOCHROME1: dense is dark: inverted


def test_chosen_frame(tmp_path: Path) -> None:
    write_dicom(tmp_path / "m.dcm", np.stack([RAW, RAW + 500, RAW + 1000]))
    source = _csv(tmp_path, ["m.dcm"])
    config = ImportConfig(eval_fraction=0.0, dicom_frame=1)
    import_data("csv", source, tmp_path / "out", config, progress=False)
    (pair,) = load_pairs(tmp_path / "out" / "train")
    # Frame 1 (raw + 500: -524 HU and up): black, then white; frames 0 and 2 have greys.
    assert np.asarray(pair.image)[::8, ::8, 0].tolist() == [[0, 255], [255, 255]]
    with pytest.raises(PreferenceDataError, match=r"pairs.csv:2: .* has 3 frames; frame 5 asked"):
        import_data("csv", source, tmp_path / "o5", config.model_copy(update={"dicom_frame": 5}),
                    progress=False)


def test_burned_in_annotation_is_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_dicom(tmp_path / "ok.dcm", RAW, BurnedInAnnotation="NO")
    write_dicom(tmp_path / "burned.dcm", RAW, BurnedInAnnotation="YES")
    source = _csv(tmp_path, ["ok.dcm", "burned.dcm"])
    argv = ["data", "import", "csv", str(source), "--out", str(tmp_path / "out")]
    assert sdk.cli.main(argv) == 1
    error = capsys.readouterr().err
    assert "pairs.csv:3: DICOM image 'burned.dcm': BurnedInAnnotation is YES" in error
    assert "--allow-burned-in" in error and not (tmp_path / "out").exists()
    assert sdk.cli.main([*argv, "--allow-burned-in"]) == 0


def test_compressed_syntax_without_plugin_names_the_plugin(tmp_path: Path) -> None:
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGLosslessSV1

    write_dicom(tmp_path / "jpeg.dcm", RAW, TransferSyntaxUID=JPEGLosslessSV1,
                PixelData=encapsulate([b"\xff\xd8\xff\xd9"]))
    source = _csv(tmp_path, ["jpeg.dcm"])
    with pytest.raises(PreferenceDataError, match=r"pairs.csv:2: DICOM image 'jpeg.dcm': "
                       r"transfer syntax JPEG Lossless.* needs a pixel-data plugin.*pylibjpeg"):
        import_data("csv", source, tmp_path / "out", progress=False)


def test_not_dicom_despite_the_name(tmp_path: Path) -> None:
    (tmp_path / "x.dcm").write_bytes(io.BytesIO(b"plain text").getvalue())
    with pytest.raises(PreferenceDataError, match=r"'x.dcm': is not a readable DICOM file"):
        import_data("csv", _csv(tmp_path, ["x.dcm"]), tmp_path / "out", progress=False)
