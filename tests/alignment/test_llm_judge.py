"""The LLM judge against a real (in-process) OpenAI-compatible FastAPI endpoint."""

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from sdk.alignment import LLMJudge
from sdk.alignment._llm_judge import JUDGE_DIMENSIONS, JudgeError, load_judge_prompt
from tests.alignment.conftest import grey


def endpoint(reply: str) -> tuple[FastAPI, list[dict]]:
    app, seen = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> dict:
        seen.append(body)
        return {"choices": [{"message": {"role": "assistant", "content": reply}}]}

    return app, seen


def judge_for(app: FastAPI) -> LLMJudge:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://judge")
    return LLMJudge("http://judge/v1", "any-model", api_key="k", client=client)


def test_prompt_is_read_from_docs() -> None:
    prompt = load_judge_prompt()
    assert all(d in prompt for d in JUDGE_DIMENSIONS)


def test_ratings_are_parsed_and_averaged() -> None:
    app, seen = endpoint('Sure: {"helpfulness": 8, "faithfulness": 6, "ethics": 10}')
    judge = judge_for(app)
    got = asyncio.run(judge.mean_ratings([grey(), grey(3)], ["q1", "q2"], ["a1", "a2"]))
    assert got == {"helpfulness": 8.0, "faithfulness": 6.0, "ethics": 10.0}
    assert len(seen) == 2 and seen[0]["model"] == "any-model"
    image_part = seen[0]["messages"][1]["content"][0]
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")


def test_malformed_reply_is_a_typed_error() -> None:
    app, _ = endpoint("I refuse")
    with pytest.raises(JudgeError, match="not the expected JSON"):
        asyncio.run(judge_for(app).judge(grey(), "q", "a"))


def test_no_endpoint_means_no_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDMOR_JUDGE_URL", raising=False)
    assert LLMJudge.from_env() is None
