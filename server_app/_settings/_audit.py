"""``[capture]`` and ``[audit]``: the server's capture mode and what an auditor may ask."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AuditSettings", "CaptureSettings"]


class CaptureSettings(BaseModel):
    """``[capture]``: off by default. When on, every round opened says ``captured`` in its info
    before any member sends anything; changing it changes only rounds opened later."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="keep what the server receives and "
                          "publishes, for the consortium's auditor (announced to every member)")
    dir: Path = Field(default=Path("fedmor-server/capture"), description="capture directory "
                      "(sdk.capture format, read with fedmor audit --capture)")
    retention_rounds: int = Field(default=100, ge=1, description="newest rounds kept; older "
                                  "round folders are deleted")
    reward_queries: bool = Field(default=True, description="log every brokered reward query "
                                 "(image hash, prompt, response, score, member)")
    router: dict[str, Any] | None = Field(default=None, description="RouterConfig naming the "
                                          "parameters (default: alignment.router)")
    encoder: dict[str, Any] | None = Field(default=None, description="HashingEncoderConfig "
                                           "(default: alignment.encoder)")


class AuditSettings(BaseModel):
    """``[audit]``: what one auditor identity may ask of the members through the server."""

    model_config = ConfigDict(extra="forbid")

    query_budget: int = Field(default=2000, ge=0, description="scored items per auditor per "
                              "window (a membership attack costs two per candidate pair)")
    window_s: float = Field(default=86400.0, gt=0, description="the budget's sliding window")
