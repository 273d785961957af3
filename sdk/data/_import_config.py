"""What ``fedmor data import`` reads and how: the source kinds, the options and the summary."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sdk.data._errors import PreferenceDataError
from sdk.data._loading import DEFAULT_MAX_IMAGE_SIDE

__all__ = ["FIELDS", "ImportConfig", "ImportSummary", "SourceKind"]


class SourceKind(str, Enum):
    """The kinds of source an import reads."""

    HF = "hf"
    """trl's preference columns (``images``, ``prompt``, ``chosen``, ``rejected``) in a
    ``datasets`` folder (``save_to_disk``), Parquet, Arrow or JSONL files."""
    SCORES = "scores"
    """Several rated responses per image and prompt (VLFeedback-like); pairs from rating gaps."""
    MC = "mc"
    """Multiple-choice items (question, options, answer); the right option beats wrong ones."""
    CSV = "csv"
    """A CSV file with the fields of ``pairs.jsonl`` and an image folder beside it."""


FIELDS: dict[SourceKind, dict[str, tuple[str, ...]]] = {
    SourceKind.HF: {
        "id": ("id",), "images": ("images", "image"), "prompt": ("prompt",),
        "chosen": ("chosen",), "rejected": ("rejected",), "category": ("category",),
    },
    SourceKind.CSV: {
        "id": ("id",), "image": ("image",), "prompt": ("prompt",), "chosen": ("chosen",),
        "rejected": ("rejected",), "category": ("category",),
    },
    SourceKind.SCORES: {
        "id": ("id",), "image": ("image", "images"), "prompt": ("prompt", "instruction"),
        "responses": ("responses", "completions"), "text": ("text", "response"),
        "ratings": ("ratings", "annotations"), "category": ("category",),
    },
    SourceKind.MC: {
        "id": ("id", "index", "question_id"), "image": ("image", "images", "image_path"),
        "question": ("question", "Question"), "options": ("options", "Answer choices"),
        "answer": ("answer", "Ground truth"), "category": ("category",),
    },
}
"""Per kind, each field the import reads and the source column names tried for it, in order
(``ImportConfig.columns`` names the column outright). ``id`` and ``category`` are optional."""


class ImportConfig(BaseModel):
    """How to import: split, names, per-kind options and the DICOM rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eval_fraction: float = Field(default=0.1, ge=0.0, le=1.0)
    """Share of the items that go to ``eval/``, chosen by a hash of the item's id (with
    ``salt``), so a re-import gives the same split; ``1`` imports a held-out set as eval only,
    ``0`` as train only (the other split is written empty)."""
    salt: str = Field(default="fedmor-import", min_length=1)
    """Mixed into every hash: the split, generated ids and image file names. Keep your own
    secret salt to make names unlinkable across institutions."""
    category: str = Field(default="imported", min_length=1)
    """The category of records whose source has no category column."""
    columns: dict[str, str] = Field(default_factory=dict)
    """Field -> source column name, for sources named otherwise (see ``FIELDS``)."""
    wrong: str = Field(default="all", pattern="^(all|one)$")
    """``mc``: pair the right option with every wrong one, or with one drawn per item."""
    aspects: tuple[str, ...] = ()
    """``scores``: the rating aspects averaged into a response's score (default: every aspect
    each response of the item carries)."""
    min_margin: float = Field(default=1.0, gt=0.0)
    """``scores``: the smallest score difference that makes a pair."""
    dicom_frame: int | None = Field(default=None, ge=0)
    """DICOM: the frame (0-based) to keep; ``None`` keeps every frame, one pair per frame."""
    allow_burned_in: bool = False
    """DICOM: import files whose ``BurnedInAnnotation`` is YES (text in the pixels)."""
    mask_border: int = Field(default=0, ge=0)
    """Pixels blacked out along every edge of every source image (DICOM frames included), where
    scanners burn in text; ``0`` masks nothing. De-identification reads no pixel otherwise."""
    max_image_side: int = Field(default=DEFAULT_MAX_IMAGE_SIDE, ge=8)
    """Images larger than this (px a side) are scaled down to it, so ``load_pairs`` accepts them."""
    max_source_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    """The largest source image (a file, or a Parquet/Arrow/JSON cell) read; a larger one is
    refused before it is decoded (a multi-frame DICOM file is then read one frame at a time)."""
    max_source_pixels: int = Field(default=64 * 1024 * 1024, ge=64)
    """The most pixels a source image (one DICOM frame) may declare; a larger one is refused
    from its header, before decoding (a decompression bomb declares billions)."""
    replace: bool = False
    """Replace an existing output folder (only once the new import validated)."""
    skip_bad: bool = False
    """Skip a refused record (counted, its reason in ``ImportSummary.skipped``) instead of
    stopping the import at the first one."""
    batch_rows: int = Field(default=512, ge=1)
    """Rows read at a time from Parquet and Arrow files (bounds memory)."""

    @field_validator("aspects")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"aspects repeat a name: {list(value)}")
        return value


MAX_SKIPPED = 1000
"""The most skipped records whose reasons ``import.json`` keeps (all are counted)."""
_SKIPPED = "record refused (--skip-bad)"


class ImportSummary(BaseModel):
    """What an import wrote and dropped; written as ``import.json`` and printed.

    Holds counts and the pairs' category names, and with ``skip_bad`` the reasons records were
    skipped: no other source value, no DICOM header value.
    """

    model_config = ConfigDict(extra="forbid")

    kind: SourceKind
    records_read: int = 0
    pairs: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Split -> category -> pairs written."""
    queries: dict[str, int] = Field(default_factory=dict)
    """Split -> queries written (``mc`` only)."""
    images: dict[str, int] = Field(default_factory=dict)
    """Split -> distinct image files written."""
    dropped: dict[str, int] = Field(default_factory=dict)
    """Reason -> records or pairs dropped."""
    shared_images: int = 0
    """Distinct images present in both ``train/`` and ``eval/`` (a leak between the splits)."""
    skipped: list[str] = Field(default_factory=list)
    """``skip_bad``: ``FILE:N: reason`` of each skipped record (the first ``MAX_SKIPPED``; the
    count is under ``dropped``). A reason may quote the record's image path."""

    def skip(self, error: PreferenceDataError) -> None:
        """Count a record refused for ``error`` and keep its place and reason."""
        self.drop(_SKIPPED)
        if len(self.skipped) < MAX_SKIPPED:
            where = f"{error.path.name}:{error.line}" if error.line is not None \
                else error.path.name
            self.skipped.append(f"{where}: {error.reason}")

    def drop(self, reason: str, count: int = 1) -> None:
        """Count ``count`` records dropped for ``reason``."""
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def render(self) -> list[str]:
        """The summary as lines for a terminal or a log."""
        lines = [f"read {self.records_read} source records ({self.kind.value})"]
        for split, categories in sorted(self.pairs.items()):
            total = sum(categories.values())
            detail = ", ".join(f"{name} {count}" for name, count in sorted(categories.items()))
            detail = f" ({detail})" if detail else ""
            lines.append(f"{split}: {total} pairs{detail}, {self.images.get(split, 0)} images"
                         + (f", {self.queries[split]} queries" if split in self.queries else ""))
        if not self.dropped:
            lines.append("dropped: nothing")
        for reason, count in sorted(self.dropped.items()):
            lines.append(f"dropped {count}: {reason}")
        for skipped in self.skipped[:5]:
            lines.append(f"skipped {skipped}")
        if self.shared_images:
            lines.append(f"warning: {self.shared_images} images appear in both train and eval")
        return lines
