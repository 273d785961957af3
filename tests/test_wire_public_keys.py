"""A public key in a request is checked where the request is parsed: a 422 naming the problem,
never a ValueError deeper in the server (a 500)."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from sdk.wire import EnrollRequest, KeyRotation, RosterAdd, generate_key, public_key_b64

NOT_KEYS = {
    "not base64": "!" * 44,
    "33 bytes": base64.b64encode(bytes(33)).decode(),
}


def _fields(model: type, key: str) -> dict[str, object]:
    if model is RosterAdd:
        return {"name": "st-mary", "public_key": key}
    if model is EnrollRequest:
        return {"name": "st-mary", "token": "t" * 16, "public_key": key}
    return {"public_key": key, "proof": "p", "endorsement": "e"}


@pytest.mark.parametrize("model", [RosterAdd, EnrollRequest, KeyRotation])
@pytest.mark.parametrize("problem", sorted(NOT_KEYS))
def test_a_request_whose_key_is_no_key_is_refused_as_it_is_parsed(model: type,
                                                                 problem: str) -> None:
    with pytest.raises(ValidationError, match=problem.split()[-1]):
        model(**_fields(model, NOT_KEYS[problem]))
    good = public_key_b64(generate_key().public_key())
    assert model(**_fields(model, good)).public_key == good
