"""The member's router update as an ``update_source``: local router training on its own pairs.

``update_source = "client_app._router_update:router_update"``; the training and its spec
(``$FEDMOR_ROUTER_SPEC``) are library code in ``sdk.router``.
"""

from __future__ import annotations

import numpy as np

from sdk.router import ROUTER_SPEC_ENV
from sdk.router import router_update as _router_update
from sdk.wire import ROUTER_ROUND_PARAM, RoundInfo

__all__ = ["ROUND_PARAM", "SPEC_ENV", "router_update"]

SPEC_ENV = ROUTER_SPEC_ENV
ROUND_PARAM = ROUTER_ROUND_PARAM


def router_update(name: str, info: RoundInfo, base: np.ndarray | None) -> tuple[np.ndarray, int]:
    """(phi_k (P,) float32 after local training from ``base``, n_k = local pairs used)."""
    return _router_update(name, info, base)
