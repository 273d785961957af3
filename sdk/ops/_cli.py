"""The ``fedmor`` commands of ``sdk.ops``, one ``fedmor.commands`` entry point each (so
``fedmor rounds ...`` imports only what ``rounds`` needs)."""

from __future__ import annotations

from sdk.ops._console_cli import register_console
from sdk.ops._members_cli import register_members
from sdk.ops._profile_cli import register_enroll, register_profile
from sdk.ops._roster_cli import register_roster
from sdk.ops._rounds_cli import register_rounds
from sdk.ops._router_cli import register_admin, register_alignment

__all__ = ["register_admin", "register_alignment", "register_console", "register_enroll",
           "register_members", "register_profile", "register_roster", "register_rounds"]
