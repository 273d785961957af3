"""Stage C: GRPO alignment with routed rewards, the baselines' reward rules, evaluation and
communication accounting.

The selection layer (routing rules, Neural TS, reward sources) imports eagerly and needs neither
trl nor transformers, so a server that only scores rewards does not load them; the training side
(GRPO, evaluation, export) loads on first use of one of its names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sdk.alignment._chooser import ONLINE_ROUTER_CONFIG, NeuralTSChooser, loss_feedback
from sdk.alignment._empty_source import EmptyIsWorst
from sdk.alignment._errors import (
    AlignmentError,
    ArchitectureMismatchError,
    RewardShapeError,
    UnknownSelectionError,
)
from sdk.alignment._llm_judge import JUDGE_DIMENSIONS, JudgeError, LLMJudge, load_judge_prompt
from sdk.alignment._parsing import is_correct, normalize_answer, parse_choice
from sdk.alignment._reward_function import SelectionRewardFunction, message_text
from sdk.alignment._reward_source import InProcessRewardSource, RewardSource, ScoreFn, check_lengths
from sdk.alignment._selection import (
    SELECTIONS,
    ArmChooser,
    AvgRM,
    BestSingle,
    CompletionBatch,
    FedAvgRM,
    MoRNoOnline,
    MoRSelection,
    PendingFeedback,
    PluralLLMAlpha,
    RandomSelection,
    RewardSelection,
    Routing,
    make_selection,
    register_selection,
    routed_scores,
)

if TYPE_CHECKING:
    from sdk.alignment._communication import (
        CommunicationSetting,
        communication_bytes,
        lora_parameter_count,
        parameter_count,
    )
    from sdk.alignment._evaluation import (
        CategoryScore,
        EvalSettings,
        PolicyEvaluation,
        StyleScore,
        best_of_n_accuracy,
        evaluate_policy,
        generate_responses,
        option_probabilities,
        right_option_probabilities,
        style_scores,
    )
    from sdk.alignment._export import export_policy
    from sdk.alignment._fedavg import fedavg_state_dicts, train_fedavg_reward_model
    from sdk.alignment._feedback import RouterFeedbackCallback, sync_router_update
    from sdk.alignment._grpo import (
        GRPORewardFunction,
        GRPOSettings,
        StepTimer,
        align,
        query_dataset,
    )
    from sdk.alignment._job import AlignJob, run_align_job
    from sdk.alignment._rest_rewards import (
        RestFeedbackCallback,
        RestRewardError,
        RestRewardFunction,
        enroll_identity,
    )
    from sdk.alignment._warmup import WarmupConfig, warmup_cache_key, warmup_policy

# name -> the private module that defines it, imported on first access (PEP 562)
_LAZY = {
    "CommunicationSetting": "sdk.alignment._communication",
    "communication_bytes": "sdk.alignment._communication",
    "lora_parameter_count": "sdk.alignment._communication",
    "parameter_count": "sdk.alignment._communication",
    "CategoryScore": "sdk.alignment._evaluation",
    "EvalSettings": "sdk.alignment._evaluation",
    "PolicyEvaluation": "sdk.alignment._evaluation",
    "StyleScore": "sdk.alignment._evaluation",
    "best_of_n_accuracy": "sdk.alignment._evaluation",
    "evaluate_policy": "sdk.alignment._evaluation",
    "generate_responses": "sdk.alignment._evaluation",
    "option_probabilities": "sdk.alignment._evaluation",
    "right_option_probabilities": "sdk.alignment._evaluation",
    "style_scores": "sdk.alignment._evaluation",
    "export_policy": "sdk.alignment._export",
    "fedavg_state_dicts": "sdk.alignment._fedavg",
    "train_fedavg_reward_model": "sdk.alignment._fedavg",
    "RouterFeedbackCallback": "sdk.alignment._feedback",
    "sync_router_update": "sdk.alignment._feedback",
    "GRPORewardFunction": "sdk.alignment._grpo",
    "GRPOSettings": "sdk.alignment._grpo",
    "StepTimer": "sdk.alignment._grpo",
    "align": "sdk.alignment._grpo",
    "query_dataset": "sdk.alignment._grpo",
    "AlignJob": "sdk.alignment._job",
    "run_align_job": "sdk.alignment._job",
    "RestFeedbackCallback": "sdk.alignment._rest_rewards",
    "RestRewardError": "sdk.alignment._rest_rewards",
    "RestRewardFunction": "sdk.alignment._rest_rewards",
    "enroll_identity": "sdk.alignment._rest_rewards",
    "WarmupConfig": "sdk.alignment._warmup",
    "warmup_cache_key": "sdk.alignment._warmup",
    "warmup_policy": "sdk.alignment._warmup",
}

__all__ = [
    "JUDGE_DIMENSIONS",
    "ONLINE_ROUTER_CONFIG",
    "SELECTIONS",
    "AlignJob",
    "AlignmentError",
    "ArchitectureMismatchError",
    "ArmChooser",
    "AvgRM",
    "BestSingle",
    "CategoryScore",
    "CommunicationSetting",
    "CompletionBatch",
    "EmptyIsWorst",
    "EvalSettings",
    "FedAvgRM",
    "GRPORewardFunction",
    "GRPOSettings",
    "InProcessRewardSource",
    "JudgeError",
    "LLMJudge",
    "MoRNoOnline",
    "MoRSelection",
    "NeuralTSChooser",
    "PendingFeedback",
    "PluralLLMAlpha",
    "PolicyEvaluation",
    "RandomSelection",
    "RestFeedbackCallback",
    "RestRewardError",
    "RestRewardFunction",
    "RewardSelection",
    "RewardShapeError",
    "RewardSource",
    "RouterFeedbackCallback",
    "Routing",
    "ScoreFn",
    "SelectionRewardFunction",
    "StepTimer",
    "StyleScore",
    "UnknownSelectionError",
    "WarmupConfig",
    "align",
    "best_of_n_accuracy",
    "check_lengths",
    "communication_bytes",
    "enroll_identity",
    "evaluate_policy",
    "export_policy",
    "fedavg_state_dicts",
    "generate_responses",
    "is_correct",
    "load_judge_prompt",
    "lora_parameter_count",
    "loss_feedback",
    "make_selection",
    "message_text",
    "normalize_answer",
    "option_probabilities",
    "parameter_count",
    "parse_choice",
    "query_dataset",
    "register_selection",
    "right_option_probabilities",
    "routed_scores",
    "run_align_job",
    "style_scores",
    "sync_router_update",
    "train_fedavg_reward_model",
    "warmup_cache_key",
    "warmup_policy",
]


def __getattr__(name: str) -> Any:
    """Import a training-side name's module on first use, then keep the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
