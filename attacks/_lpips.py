"""LPIPS (Zhang et al. 2018, AlexNet variant, v0.1), only from a user-provided weights file.

LPIPS needs ImageNet-trained backbone weights, which fedmor never downloads. A user who has them
passes one file (a torch state dict or a safetensors file) holding both parts under these keys:

- the torchvision AlexNet convolutions: ``features.{0,3,6,8,10}.{weight,bias}``
- the LPIPS linear heads of ``lpips`` v0.1 ``alex.pth``: ``lin{0..4}.model.1.weight``

Without such a file every LPIPS figure is ``None`` and reports say "unavailable".
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from attacks._errors import AttackInputError
from attacks._metrics import ArrayLike, Layout, as_nchw

__all__ = ["LPIPS_MIN_SIZE", "lpips_available", "lpips_distance"]

LPIPS_MIN_SIZE = 32  # AlexNet's strided conv and pools leave nothing of smaller images.
"""Smallest image side LPIPS is computed for."""
_CONVS = (  # (index in torchvision's features, in, out, kernel, stride, padding)
    (0, 3, 64, 11, 4, 2),
    (3, 64, 192, 5, 1, 2),
    (6, 192, 384, 3, 1, 1),
    (8, 384, 256, 3, 1, 1),
    (10, 256, 256, 3, 1, 1),
)
_SHIFT = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
_SCALE = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)


def _expected_shapes() -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for k, (i, cin, cout, ks, _, _) in enumerate(_CONVS):
        shapes[f"features.{i}.weight"] = (cout, cin, ks, ks)
        shapes[f"features.{i}.bias"] = (cout,)
        shapes[f"lin{k}.model.1.weight"] = (1, cout, 1, 1)
    return shapes


def _load(path: Path) -> dict[str, torch.Tensor] | None:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # any unreadable file means "unavailable", never a crash in a report
        return None
    if not isinstance(state, dict):
        return None
    for key, shape in _expected_shapes().items():
        t = state.get(key)
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            return None
    return state


def lpips_available(weights_path: str | Path | None) -> bool:
    """True when ``weights_path`` names a readable file with every LPIPS key and shape."""
    return (
        weights_path is not None
        and Path(weights_path).is_file()
        and (_load(Path(weights_path)) is not None)
    )


class _AlexLPIPS(nn.Module):
    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.convs = nn.ModuleList()
        self.lins = nn.ParameterList()
        for k, (i, cin, cout, ks, st, pad) in enumerate(_CONVS):
            conv = nn.Conv2d(cin, cout, ks, stride=st, padding=pad)
            conv.load_state_dict(
                {"weight": state[f"features.{i}.weight"], "bias": state[f"features.{i}.bias"]}
            )
            self.convs.append(conv)
            self.lins.append(nn.Parameter(state[f"lin{k}.model.1.weight"].float()))

    def taps(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = ((x * 2.0 - 1.0) - _SHIFT) / _SCALE
        out = []
        for k, conv in enumerate(self.convs):
            if k in (1, 2):  # torchvision AlexNet pools after relu1 and relu2
                x = nn.functional.max_pool2d(x, 3, 2)
            x = torch.relu(conv(x))
            out.append(x / (x.pow(2).sum(1, keepdim=True).sqrt() + 1e-10))
        return out

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        d = torch.zeros(a.shape[0])
        for fa, fb, w in zip(self.taps(a), self.taps(b), self.lins, strict=True):
            d = d + ((fa - fb) ** 2 * w).sum(1).mean(dim=(1, 2))  # (N,)
        return d


def lpips_distance(
    a: ArrayLike,
    b: ArrayLike,
    weights_path: str | Path | None,
    *,
    layout: Layout = "NCHW",
) -> float | None:
    """Mean LPIPS distance of two [0, 1] RGB batches, or None when no usable weights file is
    given or the images are smaller than LPIPS_MIN_SIZE (documented as "unavailable")."""
    if weights_path is None:
        return None
    state = _load(Path(weights_path)) if Path(weights_path).is_file() else None
    if state is None:
        return None
    x = torch.from_numpy(as_nchw(a, layout)).float()
    y = torch.from_numpy(as_nchw(b, layout)).float()
    if x.shape != y.shape or x.shape[1] != 3:
        raise AttackInputError(f"LPIPS needs two equal RGB batches, got {x.shape} and {y.shape}")
    if min(x.shape[2:]) < LPIPS_MIN_SIZE:
        return None
    with torch.no_grad():
        return float(_AlexLPIPS(state)(x, y).mean())
