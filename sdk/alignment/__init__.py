"""Stage C: GRPO alignment with routed rewards, the baselines' reward rules, evaluation and
communication accounting.

Each name loads its module on first use: the selection layer (routing rules, Neural TS, reward
sources) needs neither trl nor transformers, so a server that only scores rewards does not load
them, and a command's ``--help`` loads no model code at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from sdk.alignment._chooser import ONLINE_ROUTER_CONFIG, NeuralTSChooser, loss_feedback
    from sdk.alignment._communication import (
        CommunicationSetting,
        communication_bytes,
        lora_parameter_count,
        parameter_count,
    )
    from sdk.alignment._errors import AlignmentError
    from sdk.alignment._evaluation import (
        EvalSettings,
        evaluate_policy,
        generate_responses,
        style_scores,
    )
    from sdk.alignment._fedavg import train_fedavg_reward_model
    from sdk.alignment._grpo import GRPORewardFunction, StepTimer, align
    from sdk.alignment._grpo_settings import GRPOSettings
    from sdk.alignment._job import AlignJob
    from sdk.alignment._llm_judge import LLMJudge
    from sdk.alignment._parsing import parse_choice
    from sdk.alignment._rest_rewards import RestRewardFunction, enroll_identity
    from sdk.alignment._reward_function import SelectionRewardFunction
    from sdk.alignment._reward_source import EmptyIsWorst, InProcessRewardSource, RewardSource
    from sdk.alignment._selection import (
        SELECTIONS,
        ArmChooser,
        CompletionBatch,
        RewardSelection,
        Routing,
        make_selection,
        register_selection,
        routed_scores,
    )
    from sdk.alignment._warmup import WarmupConfig, warmup_policy

__all__ = [
    "ONLINE_ROUTER_CONFIG",
    "SELECTIONS",
    "AlignJob",
    "AlignmentError",
    "ArmChooser",
    "CommunicationSetting",
    "CompletionBatch",
    "EmptyIsWorst",
    "EvalSettings",
    "GRPORewardFunction",
    "GRPOSettings",
    "InProcessRewardSource",
    "LLMJudge",
    "NeuralTSChooser",
    "RestRewardFunction",
    "RewardSelection",
    "RewardSource",
    "Routing",
    "SelectionRewardFunction",
    "StepTimer",
    "WarmupConfig",
    "align",
    "communication_bytes",
    "enroll_identity",
    "evaluate_policy",
    "generate_responses",
    "lora_parameter_count",
    "loss_feedback",
    "make_selection",
    "parameter_count",
    "parse_choice",
    "register_selection",
    "routed_scores",
    "style_scores",
    "train_fedavg_reward_model",
    "warmup_policy",
]

if not TYPE_CHECKING:  # mypy reads the block above, so a mistyped name stays an error
    __getattr__, __dir__ = lazy_exports(__name__)
