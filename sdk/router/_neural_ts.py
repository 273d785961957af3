"""Neural Thompson Sampling over the router's linear head, for the online (GRPO) phase.

Only the head phi = (W (K, d), b (K,)) moves; the Transformer trunk is frozen and gives the
context z = router.features(h) (d,). Per arm k, with p = d + 1:

    r^_k  = sigmoid(W_k . z + b_k)
    g_k   = d r^_k / d phi, non-zero only on (W_k, b_k):  r^_k (1 - r^_k) [z, 1]   (p,)
    s2_k  = lambda * g_k^T U_k^-1 g_k
    r~_k ~ N(r^_k, nu^2 s2_k),   pick argmax_k r~_k

Every g touches one arm's block, so the shared U = lambda I + sum g g^T is block-diagonal: we keep
one (p, p) block per arm (``diagonal=False``; its inverse, by Sherman-Morrison) or its diagonal.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from sdk.router._errors import RouterShapeError
from sdk.router._model import Router
from sdk.router._policy import route

__all__ = ["NeuralTSConfig", "NeuralThompsonRouter"]



class NeuralTSConfig(BaseModel):
    """Neural TS hyper-parameters: exploration ``nu``, regularisation ``lam`` (lambda, also the
    initial U = lam I), head learning rate, gradient steps per update, U shape, sampling seed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nu: float = Field(default=0.1, ge=0.0)
    lam: float = Field(default=0.01, gt=0.0)
    lr: float = Field(default=0.1, gt=0.0)
    steps: int = Field(default=1, ge=1)
    diagonal: bool = True
    seed: int = 0


class NeuralThompsonRouter:
    """Wraps a :class:`Router`; updates ``router.head`` in place with bandit feedback."""

    def __init__(self, router: Router, config: NeuralTSConfig | None = None) -> None:
        self.router = router
        self.config = config or NeuralTSConfig()
        head = router.head
        k, d = head.weight.shape
        p = d + 1
        self.phi0_weight = head.weight.detach().clone()  # (K, d)
        self.phi0_bias = head.bias.detach().clone()  # (K,)
        device = head.weight.device  # U lives beside the head (the router's device)
        if self.config.diagonal:
            self.u = torch.full((k, p), self.config.lam, device=device)  # diag(U_k), (K, p)
        else:
            self.u = torch.eye(p, device=device).repeat(k, 1, 1) / self.config.lam  # (K, p, p)
        self.num_updates = 0
        self._gen = torch.Generator().manual_seed(self.config.seed)

    # -- scoring -------------------------------------------------------------------------------

    def context(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """Frozen-trunk context features z (B, d) for encoded inputs."""
        was_training = self.router.training
        self.router.eval()
        with torch.no_grad():
            device = self.router.head.weight.device
            z = self.router.features(hidden.to(device), mask.to(device))
        self.router.train(was_training)
        return z

    def _check_z(self, z: Tensor) -> Tensor:
        d = self.router.head.in_features
        if z.dim() == 1:
            z = z.unsqueeze(0)
        if z.dim() != 2 or z.shape[1] != d:
            raise RouterShapeError(f"contexts must be (B, {d}) or ({d},), got {tuple(z.shape)}")
        return z.detach().float().to(self.router.head.weight.device)

    def _mean_and_grad(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """r^ (B, K) and g (B, K, p) at the current head."""
        w, b = self.router.head.weight.detach(), self.router.head.bias.detach()
        r_hat = torch.sigmoid(z @ w.T + b)  # (B, K)
        z1 = torch.cat([z, torch.ones(z.shape[0], 1, device=z.device)], dim=1)  # (B, p)
        g = (r_hat * (1 - r_hat)).unsqueeze(-1) * z1.unsqueeze(1)  # (B, K, p)
        return r_hat, g

    def _variance(self, g: Tensor) -> Tensor:
        """sigma^2 = lam g^T U^-1 g, (B, K)."""
        if self.config.diagonal:
            quad = (g * g / self.u).sum(-1)
        else:
            quad = torch.einsum("bkp,kpq,bkq->bk", g, self.u, g)
        return self.config.lam * quad.clamp_min(0.0)

    def scores(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Posterior mean r^ (B, K) and standard deviation sigma (B, K) for contexts z."""
        z = self._check_z(z)
        r_hat, g = self._mean_and_grad(z)
        return r_hat, self._variance(g).sqrt()

    def select(self, z: Tensor, allowed: Tensor | None = None) -> Tensor:
        """Thompson draw r~ ~ N(r^, nu^2 sigma^2) per arm; returns argmax arms, LongTensor (B,).
        ``allowed`` (K,) bool: only those arms are picked (the draw is the same either way)."""
        r_hat, sigma = self.scores(z)
        # The generator is a CPU one (its state is saved and restored): draw there, then move.
        noise = torch.randn(r_hat.shape, generator=self._gen).to(r_hat.device)
        return route(r_hat + self.config.nu * sigma * noise, allowed)

    # -- learning ------------------------------------------------------------------------------

    def update(self, z: Tensor, arms: Tensor, rewards: Tensor) -> float:
        """Feedback r_t in {0, 1} (1 = the GRPO loss did not increase) for each (z, arm).

        Takes ``steps`` gradient steps on mean_i 0.5 (r^_{a_i}(z_i) - r_i)^2
        + lam/2 ||phi_a - phi0_a||^2 over the touched arms' blocks (an untouched arm keeps its
        head rather than decaying to phi0), then U_a += g g^T with g taken before the step.
        Returns the loss before the first step.
        """
        z = self._check_z(z)
        arms = torch.as_tensor(arms, dtype=torch.long).reshape(-1).to(z.device)
        rewards = torch.as_tensor(rewards, dtype=torch.float32).reshape(-1).to(z.device)
        k = self.router.num_clients
        if not (arms.shape[0] == rewards.shape[0] == z.shape[0]):
            raise RouterShapeError(
                f"z, arms and rewards differ in length: {z.shape[0]}, {arms.shape[0]}, "
                f"{rewards.shape[0]}"
            )
        if bool(((arms < 0) | (arms >= k)).any()):
            raise RouterShapeError(f"arm index out of range for K={k}: {arms.tolist()}")
        _, g_all = self._mean_and_grad(z)
        g = g_all[torch.arange(z.shape[0], device=z.device), arms]  # (B, p)

        head = self.router.head
        touched = torch.unique(arms)
        first_loss = 0.0
        for step in range(self.config.steps):
            with torch.enable_grad():
                w = head.weight.detach().clone().requires_grad_(True)
                b = head.bias.detach().clone().requires_grad_(True)
                r_hat = torch.sigmoid((z * w[arms]).sum(-1) + b[arms])  # (B,)
                data = 0.5 * ((r_hat - rewards) ** 2).mean()
                reg = ((w[touched] - self.phi0_weight[touched]) ** 2).sum() + (
                    (b[touched] - self.phi0_bias[touched]) ** 2
                ).sum()
                loss = data + 0.5 * self.config.lam * reg
                gw, gb = torch.autograd.grad(loss, [w, b])
            if step == 0:
                first_loss = float(loss.detach())
            with torch.no_grad():
                head.weight.sub_(self.config.lr * gw)
                head.bias.sub_(self.config.lr * gb)

        self._grow_u(arms, g)
        self.num_updates += int(z.shape[0])
        return first_loss

    def _grow_u(self, arms: Tensor, g: Tensor) -> None:
        """U_a += g g^T for each (arm, g) row."""
        if self.config.diagonal:
            self.u.index_add_(0, arms, g * g)
            return
        for a, gi in zip(arms.tolist(), g, strict=True):
            u_inv = self.u[a]  # (p, p)
            ug = u_inv @ gi  # (p,)
            # Sherman-Morrison: (U + g g^T)^-1 = U^-1 - U^-1 g g^T U^-1 / (1 + g^T U^-1 g)
            self.u[a] = u_inv - torch.outer(ug, ug) / (1.0 + gi @ ug)

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """All online state as tensors (safetensors-compatible), for broadcasting or resuming."""
        return {
            "head.weight": self.router.head.weight.detach().clone(),
            "head.bias": self.router.head.bias.detach().clone(),
            "phi0.weight": self.phi0_weight.clone(),
            "phi0.bias": self.phi0_bias.clone(),
            "u_diag" if self.config.diagonal else "u_inv": self.u.clone(),
            "num_updates": torch.tensor(self.num_updates, dtype=torch.int64),
            "rng": self._gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`state_dict` output; shapes and the U mode must match."""
        u_key = "u_diag" if self.config.diagonal else "u_inv"
        if u_key not in state:
            raise RouterShapeError(
                f"state has no {u_key!r} (diagonal={self.config.diagonal}); keys: {sorted(state)}"
            )
        expected = {
            "head.weight": self.router.head.weight.shape,
            "head.bias": self.router.head.bias.shape,
            "phi0.weight": self.phi0_weight.shape,
            "phi0.bias": self.phi0_bias.shape,
            u_key: self.u.shape,
        }
        for key, shape in expected.items():
            if state[key].shape != shape:
                raise RouterShapeError(
                    f"wrong shape for {key}: got {tuple(state[key].shape)}, expected {tuple(shape)}"
                )
        with torch.no_grad():
            self.router.head.weight.copy_(state["head.weight"])
            self.router.head.bias.copy_(state["head.bias"])
        device = self.router.head.weight.device
        self.phi0_weight = state["phi0.weight"].to(device, copy=True)
        self.phi0_bias = state["phi0.bias"].to(device, copy=True)
        self.u = state[u_key].to(device, copy=True)
        self.num_updates = int(state["num_updates"])
        self._gen.set_state(state["rng"])
