"""``Router``: Transformer layers over the encoder tokens and a linear head with one logit per client."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from sdk.router._errors import RouterMismatchError, RouterShapeError
from sdk.wire._router_config import RouterConfig

__all__ = ["Router", "RouterConfig"]

_WEIGHTS = "router.safetensors"
_META = "router.json"
_FORMAT = "fedmor-router-v1"


class Router(nn.Module):
    """g_phi(h): Transformer encoder over h (B, T, D) with padding mask, masked mean pooling,
    a final LayerNorm and a linear head with K = len(client_ids) outputs."""

    def __init__(self, config: RouterConfig, client_ids: Sequence[str], encoder_id: str) -> None:
        super().__init__()
        if config.d_model % config.num_heads:
            raise ValueError(
                f"d_model={config.d_model} is not divisible by num_heads={config.num_heads}"
            )
        ids = list(client_ids)
        if not ids:
            raise RouterMismatchError("a router needs at least one client id")
        if len(set(ids)) != len(ids):
            raise RouterMismatchError(f"duplicate client ids: {ids}")
        self.config = config
        self.client_ids: list[str] = ids
        self.encoder_id = encoder_id
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.input_proj = nn.Linear(config.input_dim, config.d_model)
            layer = nn.TransformerEncoderLayer(
                config.d_model,
                config.num_heads,
                config.dim_feedforward,
                dropout=config.dropout,
                batch_first=True,
                norm_first=True,
            )
            # enable_nested_tensor=False: the same maths in train and eval mode.
            self.layers = nn.TransformerEncoder(
                layer, config.num_layers, enable_nested_tensor=False
            )
            self.norm = nn.LayerNorm(config.d_model)
            self.head = nn.Linear(config.d_model, len(ids))

    @property
    def num_clients(self) -> int:
        """K, the number of head outputs."""
        return len(self.client_ids)

    def features(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """Pooled context features z (B, d_model): the input of the linear head."""
        if hidden.dim() != 3 or hidden.shape[2] != self.config.input_dim:
            raise RouterShapeError(
                f"hidden must be (B, T, {self.config.input_dim}), got {tuple(hidden.shape)}"
            )
        if mask.shape != hidden.shape[:2]:
            raise RouterShapeError(
                f"mask shape {tuple(mask.shape)} != hidden (B, T) {tuple(hidden.shape[:2])}"
            )
        mask = mask.bool()
        if not bool(mask.any(dim=1).all()):
            raise RouterShapeError("every row of mask needs at least one real token")
        # Zero padded inputs: attention gives them weight 0, but 0 * NaN would still be NaN.
        hidden = hidden.masked_fill(~mask.unsqueeze(-1), 0.0)
        x = self.input_proj(hidden)  # (B, T, d)
        x = self.layers(x, src_key_padding_mask=~mask)  # (B, T, d)
        w = mask.unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        pooled = (x * w).sum(dim=1) / w.sum(dim=1)  # (B, d)
        return self.norm(pooled)

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """Routing logits (B, K), one per client in ``client_ids`` order."""
        return self.head(self.features(hidden, mask))

    # -- the client set ------------------------------------------------------------------------

    def add_client(self, client_id: str) -> None:
        """Grow the head by one zero row: existing logits stay identical, the new one starts at 0."""
        if client_id in self.client_ids:
            raise RouterMismatchError(f"client id {client_id!r} is already in the router")
        old = self.head
        new = nn.Linear(old.in_features, old.out_features + 1)
        with torch.no_grad():
            new.weight.zero_()
            new.bias.zero_()
            new.weight[: old.out_features] = old.weight
            new.bias[: old.out_features] = old.bias
        self.head = new.to(old.weight.device)
        self.client_ids.append(client_id)

    def check_compatible(self, client_ids: Sequence[str], encoder_id: str) -> None:
        """Raise :class:`RouterMismatchError` unless the router serves exactly these clients, in
        this order, on this encoder."""
        if encoder_id != self.encoder_id:
            raise RouterMismatchError(
                f"router was trained on encoder {self.encoder_id!r}, not {encoder_id!r}"
            )
        if list(client_ids) != self.client_ids:
            raise RouterMismatchError(
                f"router serves clients {self.client_ids}, not {list(client_ids)}"
            )

    # -- flat parameters (what secure aggregation averages) -----------------------------------

    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return sum(p.numel() for p in self.parameters())

    def get_flat_params(self) -> np.ndarray:
        """All parameters, in ``parameters()`` order, as one float32 vector."""
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in self.parameters()])
        return flat.numpy().astype(np.float32, copy=True)

    def set_flat_params(self, vec: np.ndarray) -> None:
        """Load a vector from :meth:`get_flat_params` (of a router with the same shape)."""
        arr = np.asarray(vec)
        if arr.ndim != 1 or arr.shape[0] != self.num_params():
            raise RouterShapeError(
                f"wrong shape for flat router parameters: got {arr.shape}, "
                f"expected ({self.num_params()},)"
            )
        if not np.all(np.isfinite(arr)):
            raise RouterShapeError("flat router parameters contain NaN or inf")
        src = torch.from_numpy(arr.astype(np.float32, copy=False))
        offset = 0
        with torch.no_grad():
            for p in self.parameters():
                n = p.numel()
                p.copy_(src[offset : offset + n].view_as(p))
                offset += n

    # -- checkpoints ---------------------------------------------------------------------------

    def save(self, directory: str | Path) -> Path:
        """Write ``router.safetensors`` and ``router.json`` (config, client ids, encoder id)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(tensors, str(out / _WEIGHTS))
        meta = {
            "format": _FORMAT,
            "config": self.config.model_dump(),
            "client_ids": self.client_ids,
            "encoder_id": self.encoder_id,
        }
        (out / _META).write_text(json.dumps(meta, indent=2))
        return out

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        client_ids: Sequence[str] | None = None,
        encoder_id: str | None = None,
    ) -> Router:
        """Load a checkpoint; when ``client_ids`` / ``encoder_id`` are given they must match."""
        src = Path(directory)
        meta_path = src / _META
        if not meta_path.is_file():
            raise FileNotFoundError(f"no router checkpoint at {src} (missing {_META})")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != _FORMAT:
            raise RouterMismatchError(
                f"{meta_path} has format {meta.get('format')!r}, not {_FORMAT}"
            )
        router = cls(RouterConfig(**meta["config"]), meta["client_ids"], meta["encoder_id"])
        router.check_compatible(
            router.client_ids if client_ids is None else client_ids,
            router.encoder_id if encoder_id is None else encoder_id,
        )
        router.load_state_dict(load_file(str(src / _WEIGHTS)))
        return router
