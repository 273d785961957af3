"""A member's Python update function (``LocalConsortium(updates=...)``) for the capture tests: one FedSGD step on a single sample.

The member's router (``ROUTER``, outputs ``MEMBERS``) takes one BCE gradient step on one
random input embedding (one token), from the round's base: the update an unmasked round kind
hands the server in the clear, and the one whose first layer the analytic attack inverts.
"""

from __future__ import annotations

import numpy as np

ROUTER = {"input_dim": 32, "d_model": 16, "num_layers": 1, "num_heads": 2,
          "dim_feedforward": 32}
MEMBERS = ["site-0", "site-1", "site-2"]


def single_sample_update(name: str, info: object, base: np.ndarray | None
                         ) -> tuple[np.ndarray, int]:
    """(phi_k = base - gradient (P,) float32, n_k = 1)."""
    import torch

    from sdk.router import Router, RouterConfig

    router = Router(RouterConfig(**ROUTER), MEMBERS, "capture-test")
    if base is not None:
        router.set_flat_params(base)
    before = router.get_flat_params()
    x = torch.randn(1, 1, ROUTER["input_dim"], generator=torch.Generator().manual_seed(7))
    logits = router(x, torch.ones(1, 1, dtype=torch.bool))  # (1, K)
    target = torch.zeros_like(logits)
    target[0, MEMBERS.index(name)] = 1.0
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
    grads = torch.autograd.grad(loss, list(router.parameters()))
    flat = torch.cat([g.reshape(-1) for g in grads]).numpy()
    return (before - flat).astype(np.float32), 1
