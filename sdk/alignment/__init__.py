"""Stage C: GRPO alignment with routed rewards, the baselines' reward rules, evaluation and
communication accounting."""

from sdk.alignment._broker_source import BrokerRewardSource, RewardQueryBroker
from sdk.alignment._chooser import ONLINE_ROUTER_CONFIG, NeuralTSChooser
from sdk.alignment._communication import (
    CommunicationSetting,
    communication_bytes,
    lora_parameter_count,
    parameter_count,
)
from sdk.alignment._empty_source import EmptyIsWorst
from sdk.alignment._errors import (
    AlignmentError,
    ArchitectureMismatchError,
    RewardShapeError,
    UnknownSelectionError,
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
from sdk.alignment._feedback import RouterFeedbackCallback, loss_feedback, sync_router_update
from sdk.alignment._grpo import GRPOSettings, StepTimer, align, query_dataset
from sdk.alignment._llm_judge import JUDGE_DIMENSIONS, JudgeError, LLMJudge, load_judge_prompt
from sdk.alignment._parsing import is_correct, normalize_answer, parse_choice
from sdk.alignment._reward_function import SelectionRewardFunction, message_text
from sdk.alignment._reward_source import (
    InProcessRewardSource,
    RewardSource,
    ScoreFn,
    check_lengths,
)
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
from sdk.alignment._warmup import WarmupConfig, warmup_cache_key, warmup_policy

__all__ = [
    "JUDGE_DIMENSIONS",
    "ONLINE_ROUTER_CONFIG",
    "SELECTIONS",
    "AlignmentError",
    "ArchitectureMismatchError",
    "ArmChooser",
    "AvgRM",
    "BestSingle",
    "BrokerRewardSource",
    "CategoryScore",
    "CommunicationSetting",
    "CompletionBatch",
    "EmptyIsWorst",
    "EvalSettings",
    "FedAvgRM",
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
    "RewardQueryBroker",
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
    "style_scores",
    "sync_router_update",
    "train_fedavg_reward_model",
    "warmup_cache_key",
    "warmup_policy",
]
