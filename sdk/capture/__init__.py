"""The capture directory: what a consortium server received and published, round by round,
written by the server's opt-in capture mode and attacked by ``fedmor audit --capture DIR``.

The format lives here, below both the server (which writes it) and ``attacks`` (which reads
it): pydantic manifest models, the safetensors update file, :func:`write_capture` and a
checked reader. numpy and safetensors only: no torch.
"""

from sdk.capture._dir import (
    CAPTURE_DIR_FORMAT,
    CapturedArtefact,
    CapturedRound,
    CaptureFiles,
    CaptureManifest,
    RewardQuery,
    RoundCapture,
    prune_capture,
    write_capture,
)
from sdk.capture._update import (
    CAPTURE_FORMAT,
    CaptureError,
    CaptureMeta,
    read_update_file,
    write_update_file,
)

__all__ = [
    "CAPTURE_DIR_FORMAT",
    "CAPTURE_FORMAT",
    "CaptureError",
    "CaptureFiles",
    "CaptureManifest",
    "CaptureMeta",
    "CapturedArtefact",
    "CapturedRound",
    "RewardQuery",
    "RoundCapture",
    "prune_capture",
    "read_update_file",
    "write_capture",
    "write_update_file",
]
