"""The ``fedmor`` groups of ``sdk.ops`` (registered through the ``fedmor.commands``
entry-point group)."""

from __future__ import annotations

import argparse

from sdk.ops._members_cli import register_members
from sdk.ops._profile_cli import register_enroll, register_profile
from sdk.ops._roster_cli import register_roster
from sdk.ops._rounds_cli import register_rounds
from sdk.ops._router_cli import register_admin, register_alignment

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``enroll``, ``profile``, ``members``, ``rounds``, ``roster``, ``alignment`` and
    ``admin``."""
    for add in (register_enroll, register_profile, register_members, register_rounds,
                register_roster, register_alignment, register_admin):
        add(sub)
