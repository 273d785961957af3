import pytest
import torch

from sdk.router import route, soft_weights
from sdk.router._errors import RouterShapeError


def test_route_is_argmax_and_soft_weights_are_a_softmax() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert route(logits).tolist() == [1, 0]
    assert route(logits).dtype == torch.long
    w = soft_weights(logits)
    torch.testing.assert_close(w.sum(dim=1), torch.ones(2))
    assert w.argmax(dim=1).tolist() == [1, 0]
    sharp = soft_weights(logits, temperature=0.01)
    torch.testing.assert_close(sharp, torch.nn.functional.one_hot(route(logits), 3).float())


def test_bad_logits_and_temperature() -> None:
    with pytest.raises(RouterShapeError, match=r"\(B, K\)"):
        route(torch.zeros(3))
    with pytest.raises(ValueError, match="temperature"):
        soft_weights(torch.zeros(1, 2), temperature=0.0)
