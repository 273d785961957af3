"""Memory of a training or scoring run beyond the weights: the host allocator and frozen towers.

On long sequences (LLaVA-OneVision's rows) most of a LoRA step's peak on a CPU is neither
weights nor activations kept for backward, but freed activations the C allocator keeps; the
figures are in docs/hardware.md, "Where LLaVA-OneVision's memory goes".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from typing import Any

import torch
from torch import nn

__all__ = ["MMAP_THRESHOLD_BYTES", "return_freed_host_memory", "run_frozen_without_graph",
           "vision_encoder"]

MMAP_THRESHOLD_BYTES = 1 << 17
"""Host allocations at least this large get their own mapping, unmapped when freed: glibc's own
starting threshold (128 KiB), pinned so that it no longer rises."""

_M_MMAP_THRESHOLD = -3  # mallopt parameter, glibc's malloc.h
_applied = False


def return_freed_host_memory() -> bool:
    """Make glibc's malloc give freed tensors of 128 KiB or more back to the OS; True if in force.

    glibc raises its mmap threshold (up to 32 MiB) each time a mapped block is freed, so the
    activation tensors of a long sequence (a few MiB to 32 MiB each) are later carved from the
    heap and stay resident after they are freed, so a long sequence's step grows with every
    decoder layer. A fixed threshold (which also stops the adjustment) maps each such tensor on
    its own; glibc's starting 128 KiB rather than 1 MiB lets smaller per-row tensors go too, at
    the same speed (docs/hardware.md). Process-wide and idempotent; the numbers computed do not
    change. A no-op (False) off glibc (e.g. macOS) and when the environment sets
    ``MALLOC_MMAP_THRESHOLD_`` itself.
    """
    global _applied
    if _applied:
        return True
    if (sys.platform != "linux" or platform.libc_ver()[0] != "glibc"
            or "MALLOC_MMAP_THRESHOLD_" in os.environ):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    return _applied


def vision_encoder(model: nn.Module) -> nn.Module | None:
    """The vision tower of a VLM (``visual`` in Qwen2-VL / Qwen2.5-VL, ``vision_tower`` in
    LLaVA-OneVision), on the model or its inner ``model``; None if it has none."""
    for holder in (model, getattr(model, "model", None)):
        for name in ("visual", "vision_tower"):
            tower = getattr(holder, name, None)
            if isinstance(tower, nn.Module):
                return tower
    return None


_RESTORE_GRAD = "_fedmor_restore_grad"


def _wants_grad(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.requires_grad
    if isinstance(value, (list, tuple)):
        return any(_wants_grad(v) for v in value)
    return False


def _enter(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    if (torch.is_grad_enabled() and not any(p.requires_grad for p in module.parameters())
            and not _wants_grad(args) and not _wants_grad(list(kwargs.values()))):
        torch.set_grad_enabled(False)
        module.__dict__[_RESTORE_GRAD] = True


def _leave(module: nn.Module, args: Any, output: Any) -> None:
    if module.__dict__.pop(_RESTORE_GRAD, False):
        torch.set_grad_enabled(True)


def run_frozen_without_graph(module: nn.Module) -> None:
    """Run ``module`` under ``no_grad`` whenever neither its parameters nor its inputs require
    grad (a frozen vision tower under LoRA on the language model).

    Nothing then needs a backward, yet in grad mode activation checkpointing still saves every
    layer's input for a recompute that never comes, which for a large vision tower over many
    crops is a sizeable share of a step's peak. Checked at each call, so a tower unfrozen later (``train_vision``) or
    an input optimised through it (gradient inversion) gets its graph as before; the outputs
    are the same numbers. The hooks hold no reference to ``module``, so a deep copy gets its own.
    """
    module.register_forward_pre_hook(_enter, with_kwargs=True)
    module.register_forward_hook(_leave, always_call=True)
