"""Optional LLM-as-a-judge over an OpenAI-compatible chat endpoint given by the user.

The system prompt lives in ``docs/judge_prompt.md`` (between markers); a copy ships here so the
package works without the docs folder. With no endpoint configured, :meth:`LLMJudge.from_env`
returns ``None`` and callers skip this evaluation.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import httpx
from PIL import Image

from sdk.alignment._errors import AlignmentError

__all__ = ["JUDGE_DIMENSIONS", "JudgeError", "LLMJudge", "load_judge_prompt"]

JUDGE_DIMENSIONS = ("helpfulness", "faithfulness", "ethics")
"""The dimensions the LLM judge scores an answer on."""
_MARKERS = re.compile(r"<!-- judge-prompt-start -->\n(.*?)<!-- judge-prompt-end -->", re.S)
_DOC = Path(__file__).resolve().parents[2] / "docs" / "judge_prompt.md"


class JudgeError(AlignmentError):
    """The judge endpoint failed or answered something that is not the expected JSON."""


def load_judge_prompt(path: Path = _DOC) -> str:
    """The system prompt between the markers of ``docs/judge_prompt.md``."""
    match = _MARKERS.search(path.read_text(encoding="utf-8"))
    if match is None:
        raise JudgeError(f"{path} has no judge-prompt markers")
    return match.group(1).strip()


def _data_url(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _parse(text: str) -> dict[str, float]:
    match = re.search(r"\{.*\}", text, re.S)
    try:
        data = json.loads(match.group(0) if match else text)
        return {d: float(data[d]) for d in JUDGE_DIMENSIONS}
    except (ValueError, KeyError, TypeError) as exc:
        raise JudgeError(f"judge reply is not the expected JSON: {text!r:.200}") from exc


class LLMJudge:
    """Scores (image, prompt, response) on the three dimensions through ``/chat/completions``."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 client: httpx.AsyncClient | None = None, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._headers = headers
        self.system_prompt = load_judge_prompt()

    @classmethod
    def from_env(cls) -> LLMJudge | None:
        """A judge from ``FEDMOR_JUDGE_URL`` / ``_MODEL`` / ``_API_KEY``, or None when unset."""
        url = os.environ.get("FEDMOR_JUDGE_URL")
        if not url:
            return None
        return cls(url, os.environ.get("FEDMOR_JUDGE_MODEL", "gpt-4o-mini"),
                   api_key=os.environ.get("FEDMOR_JUDGE_API_KEY"))

    async def judge(self, image: Image.Image, prompt: str, response: str) -> dict[str, float]:
        """The three ratings (1-10) for one answer."""
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": _data_url(image)}},
                    {"type": "text", "text": f"Question: {prompt}\n\nAnswer: {response}"},
                ]},
            ],
        }
        try:
            reply = await self._client.post(f"{self.base_url}/chat/completions", json=body,
                                            headers=self._headers)
            reply.raise_for_status()
            text = reply.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise JudgeError(f"judge endpoint {self.base_url} failed: {exc}") from exc
        return _parse(str(text))

    async def mean_ratings(self, images: Sequence[Image.Image], prompts: Sequence[str],
                           responses: Sequence[str]) -> dict[str, float]:
        """Mean rating per dimension over a set of answers."""
        if not responses:
            raise ValueError("mean_ratings needs at least one response")
        ratings = [await self.judge(i, p, r)
                   for i, p, r in zip(images, prompts, responses, strict=True)]
        return {d: sum(r[d] for r in ratings) / len(ratings) for d in JUDGE_DIMENSIONS}

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
