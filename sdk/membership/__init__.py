"""Who belongs to the consortium: the roster file (names, identity keys, roles, one-time
enrollment tokens) and the key-rotation chain a member follows from its own roster copy. What
travels over HTTP about them (roles, rotation records, member views) is defined in ``sdk.wire``.
"""

from sdk.membership._roster import RosterEntry, RosterFile, add_to_roster
from sdk.membership._rotations import RotationChain, follow_rotations

__all__: list[str] = ["RosterEntry", "RosterFile", "RotationChain", "add_to_roster",
                      "follow_rotations"]
