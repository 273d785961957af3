"""Protocol stages and the one transition table both parties obey."""

from __future__ import annotations

import enum

__all__ = ["TRANSITIONS", "Stage", "StageTracker"]


class Stage(enum.Enum):
    """Stages of a SecAgg+ round (Bonawitz et al. 2017 / Bell et al. 2020)."""

    ADVERTISE_KEYS = "advertise_keys"
    SHARE_KEYS = "share_keys"
    MASKED_INPUT_COLLECTION = "masked_input_collection"
    CONSISTENCY_CHECK = "consistency_check"
    UNMASKING = "unmasking"
    DONE = "done"
    ABORTED = "aborted"
    ERROR = "error"


_TERMINAL = frozenset({Stage.DONE, Stage.ABORTED, Stage.ERROR})

# The happy path; any live stage may also fall to ABORTED (too few survivors) or ERROR.
TRANSITIONS: dict[Stage, Stage] = {
    Stage.ADVERTISE_KEYS: Stage.SHARE_KEYS,
    Stage.SHARE_KEYS: Stage.MASKED_INPUT_COLLECTION,
    Stage.MASKED_INPUT_COLLECTION: Stage.CONSISTENCY_CHECK,
    Stage.CONSISTENCY_CHECK: Stage.UNMASKING,
    Stage.UNMASKING: Stage.DONE,
}


class StageTracker:
    """Current stage of one party; refuses any step not in ``TRANSITIONS``."""

    def __init__(self) -> None:
        self.stage = Stage.ADVERTISE_KEYS

    @property
    def terminal(self) -> bool:
        """True once the round is over for this party."""
        return self.stage in _TERMINAL

    def advance(self) -> Stage:
        """Move to the next stage of the happy path and return it."""
        if self.terminal:
            raise RuntimeError(f"cannot advance from terminal stage {self.stage.value}")
        self.stage = TRANSITIONS[self.stage]
        return self.stage

    def fail(self, to: Stage) -> None:
        """Move to a terminal failure stage (ABORTED or ERROR)."""
        if to not in (Stage.ABORTED, Stage.ERROR):
            raise ValueError(f"fail() goes to ABORTED or ERROR, not {to.value}")
        self.stage = to
