"""What each role may read of the rounds: a member sees only what its protocol steps need.

A member runs a round from its terms (kind, stages, participants and their identity keys, which
SecAgg+ checks key advertisements against, parameters, deadline, DP terms) and its status. It
has no business with rounds it is not in, nor with what other members did there: their
refusals (a member's site policy and reason), who dropped out, or their ids in a failure
reason. The other roles (operator, auditor, aligner, the admin token) see the full status.
Stage inputs need no filter here: each member is only ever handed the entries addressed to it.
"""

from __future__ import annotations

from sdk.wire import RoundInfo
from server_app._identity._access import Identity
from server_app._rounds._manager import RoundManager
from server_app._rounds._state import WHO_LEFT

__all__ = ["member_view", "visible_round", "visible_rounds"]

OTHER_MEMBER = "another member"


def member_view(info: RoundInfo, member: str) -> RoundInfo:
    """``info`` as ``member`` (a participant) may see it: its own refusal, dropout and failure
    only, and the failure reason without who left and with other participants' ids replaced."""
    error = info.error
    if error is not None:
        error = error.partition(WHO_LEFT)[0]  # other members' causes are theirs
        for other in info.participants:
            if other != member:
                error = error.replace(other, OTHER_MEMBER)
    return info.model_copy(update={
        "refusals": [r for r in info.refusals if r.client_id == member],
        "dropouts": [d for d in info.dropouts if d == member],
        "failures": [f for f in info.failures if f.client_id == member],
        "error": error})


def visible_round(rounds: RoundManager, caller: Identity, round_id: int) -> RoundInfo:
    """Round ``round_id`` as ``caller`` may see it; 403 for a member outside the round."""
    info = rounds.info(round_id)
    if caller.role != "member":
        return info
    if caller.caller_id not in info.participants:
        raise PermissionError(f"client {caller.caller_id} is not a participant of round "
                              f"{round_id}: members read only their own rounds")
    return member_view(info, caller.caller_id)


def visible_rounds(rounds: RoundManager, caller: Identity,
                   status: str | None = None) -> list[RoundInfo]:
    """The rounds ``caller`` may see (a member: the ones it takes part in), oldest first."""
    found = rounds.list(status)
    if caller.role != "member":
        return found
    return [member_view(i, caller.caller_id) for i in found
            if caller.caller_id in i.participants]
