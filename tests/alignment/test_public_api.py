import sdk.alignment as alignment


def test_public_api_is_pinned() -> None:
    assert sorted(alignment.__all__) == sorted([
        "JUDGE_DIMENSIONS", "ONLINE_ROUTER_CONFIG", "SELECTIONS", "AlignmentError", "ArchitectureMismatchError",
        "ArmChooser", "AvgRM", "BestSingle", "CategoryScore",
        "CommunicationSetting", "CompletionBatch", "EmptyIsWorst", "EvalSettings", "FedAvgRM",
        "GRPOSettings",
        "InProcessRewardSource", "JudgeError", "LLMJudge", "MoRNoOnline", "MoRSelection",
        "NeuralTSChooser", "PendingFeedback", "PluralLLMAlpha", "PolicyEvaluation",
        "RandomSelection", "RewardSelection", "RewardShapeError",
        "RewardSource", "RouterFeedbackCallback", "Routing", "ScoreFn",
        "SelectionRewardFunction", "StepTimer", "StyleScore", "UnknownSelectionError",
        "WarmupConfig", "align", "best_of_n_accuracy", "check_lengths", "communication_bytes",
        "evaluate_policy", "export_policy", "fedavg_state_dicts", "generate_responses",
        "is_correct",
        "load_judge_prompt", "loss_feedback", "lora_parameter_count", "make_selection",
        "message_text", "normalize_answer", "option_probabilities", "parameter_count", "right_option_probabilities", "parse_choice", "query_dataset",
        "register_selection", "routed_scores", "style_scores", "sync_router_update", "train_fedavg_reward_model", "warmup_cache_key",
        "warmup_policy",
        # alignment as a client of the consortium server (rewards over REST, fedmor align)
        "AlignJob", "GRPORewardFunction", "RestFeedbackCallback", "RestRewardError",
        "RestRewardFunction", "enroll_identity", "run_align_job",
    ])
    for name in alignment.__all__:
        assert hasattr(alignment, name), name
