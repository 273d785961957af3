"""The ``fedmor`` commands of ``sdk.ops``, one ``fedmor.commands`` entry point each (so
``fedmor rounds ...`` imports only what ``rounds`` needs)."""

from __future__ import annotations

from sdk.ops._alignment_cli import register_alignment
from sdk.ops._console_cli import register_console
from sdk.ops._members_cli import register_members
from sdk.ops._profile_cli import register_enroll, register_profile
from sdk.ops._roster_cli import register_roster
from sdk.ops._rounds_cli import register_rounds

__all__ = ["register_alignment", "register_console", "register_enroll", "register_members",
           "register_profile", "register_roster", "register_rounds"]
