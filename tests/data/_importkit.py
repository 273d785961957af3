"""Helpers for the import tests: sources built with each format's own library."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

COLORS = {"red": (220, 30, 30), "green": (30, 180, 40), "blue": (30, 60, 220),
          "yellow": (235, 215, 30)}
"""The learnable multiple-choice set: the colour filling most of the image."""

IDENTIFYING: dict[str, str] = {
    "PatientName": "Quenneville^Marguerite",
    "PatientID": "PID83920417",
    "PatientBirthDate": "19610523",
    "OtherPatientIDs": "OPID5550193",
    "PatientAddress": "17 Wrenfield Lane Ostbury",
    "StudyInstanceUID": "1.2.826.0.1.3680043.8.498.10234567891234567",
    "SeriesInstanceUID": "1.2.826.0.1.3680043.8.498.20987654321987654",
    "SOPInstanceUID": "1.2.826.0.1.3680043.8.498.30555444333222111",
    "StudyDate": "20240117",
    "SeriesDate": "20240118",
    "AcquisitionDate": "20240119",
    "ContentDate": "20240120",
    "StudyTime": "101530",
    "InstitutionName": "Saint Hypothetia Infirmary",
    "InstitutionAddress": "9 Larkspur Road Vellmoor",
    "ReferringPhysicianName": "Oakenshield^Bartholomew",
    "PerformingPhysicianName": "Thistlewood^Ingrid",
    "OperatorsName": "Pemberton^Casimir",
    "AccessionNumber": "ACC77312904",
    "StudyID": "STU55219",
    "StationName": "CTNORTHWING7",
    "DeviceSerialNumber": "SN-4471-XQ-990",
    "StudyDescription": "CHEST PA Marguerite follow-up",
}
"""Identifying tag values written into every test DICOM file (none may reach the output)."""


def color_image(rng: random.Random, color: str, size: int = 32) -> Image.Image:
    """An image mostly of ``color``, with a little noise so no two are alike."""
    base = np.array(COLORS[color], dtype=np.int16)
    noise = np.array([[rng.randrange(-20, 21) for _ in range(3)] for _ in range(size * size)])
    pixels = np.clip(base + noise.reshape(size, size, 3), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, mode="RGB")


def write_mc_jsonl(root: Path, count: int, seed: int = 0) -> Path:
    """A multiple-choice source: ``items.jsonl`` + ``img/<i>.png``, MME-RealWorld-like fields
    (``Question``, lettered ``Answer choices``, ``Ground truth`` letter)."""
    rng = random.Random(seed)
    (root / "img").mkdir(parents=True, exist_ok=True)
    names = list(COLORS)
    lines = []
    for index in range(count):
        answer = rng.randrange(4)
        color_image(rng, names[answer]).save(root / "img" / f"{index}.png")
        lines.append(json.dumps({
            "question_id": f"q{index}", "image": f"img/{index}.png",
            "Question": "What color fills the image?",
            "Answer choices": [f"({'ABCD'[i]}) {name}" for i, name in enumerate(names)],
            "Ground truth": "ABCD"[answer], "category": "fill",
        }))
    (root / "items.jsonl").write_text("\n".join(lines) + "\n")
    return root / "items.jsonl"


def write_dicom(path: Path, pixels: np.ndarray, **tags: Any) -> None:
    """A CT DICOM file (explicit VR little endian) of ``pixels`` (uint16, ``(H, W)`` or
    ``(frames, H, W)``) carrying every ``IDENTIFYING`` value, plus ``tags``."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import UID, CTImageStorage, ExplicitVRLittleEndian

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = CTImageStorage
    meta.MediaStorageSOPInstanceUID = UID(IDENTIFYING["SOPInstanceUID"])
    meta.TransferSyntaxUID = tags.pop("TransferSyntaxUID", ExplicitVRLittleEndian)
    dataset = Dataset()
    dataset.file_meta = meta
    dataset.SOPClassUID = CTImageStorage
    for name, value in IDENTIFYING.items():
        setattr(dataset, name, value)
    dataset.Modality = "CT"
    frames = pixels.shape[0] if pixels.ndim == 3 else 1
    if frames > 1:
        dataset.NumberOfFrames = frames
    dataset.Rows, dataset.Columns = pixels.shape[-2:]
    dataset.SamplesPerPixel = 1
    dataset.PhotometricInterpretation = "MONOCHROME2"
    dataset.BitsAllocated, dataset.BitsStored, dataset.HighBit = 16, 12, 11
    dataset.PixelRepresentation = 0
    dataset.RescaleSlope, dataset.RescaleIntercept = 1, -1024
    dataset.WindowCenter, dataset.WindowWidth = 40, 400
    for name, value in tags.items():
        if value is None:
            delattr(dataset, name)
        else:
            setattr(dataset, name, value)
    if "PixelData" not in tags:
        dataset.PixelData = pixels.astype(np.uint16).tobytes()
    dataset.save_as(path, enforce_file_format=True)
