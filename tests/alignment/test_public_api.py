import sdk.alignment as alignment


def test_public_api_is_pinned() -> None:
    assert sorted(alignment.__all__) == sorted([
        "ONLINE_ROUTER_CONFIG", "SELECTIONS", "AlignJob", "AlignmentError", "ArmChooser",
        "BrokerRewardSource", "CategoryScore", "CommunicationSetting", "CompletionBatch",
        "EmptyIsWorst", "EvalSettings", "GRPORewardFunction", "GRPOSettings",
        "InProcessRewardSource", "LLMJudge", "NeuralTSChooser", "PolicyEvaluation",
        "RestRewardFunction", "RewardQueryBroker", "RewardSelection", "RewardSource", "Routing",
        "ScoreFn", "SelectionRewardFunction", "StepTimer", "StyleScore", "WarmupConfig", "align",
        "communication_bytes", "enroll_identity", "evaluate_policy", "generate_responses",
        "lora_parameter_count", "loss_feedback", "make_selection", "parameter_count",
        "parse_choice", "register_selection", "routed_scores", "style_scores",
        "train_fedavg_reward_model", "warmup_policy"
    ])
    for name in alignment.__all__:
        assert hasattr(alignment, name), name
