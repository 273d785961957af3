import sdk.router


def test_public_api_is_pinned() -> None:
    assert sorted(sdk.router.__all__) == [
        "Aggregator", "AverageRM", "DropoutSchedule", "EncodedBatch", "Encoder", "FederatedConfig",
        "FederatedRouterTrainer", "HashingEncoder", "HashingEncoderConfig", "LocalRouterUpdate",
        "LocalTrainingConfig", "NeuralTSConfig", "NeuralThompsonRouter", "PairScores",
        "PlainAggregator", "RandomRM", "RewardScores", "RoundAggregate", "RoundStats", "Router",
        "RouterClient", "RouterConfig", "RouterError", "RouterSelection",
        "RouterUpdateSpec", "SecureAggregator", "SelectionMethod", "SingleRM", "SiteData",
        "SiteRound", "Table4", "VLMEncoder", "VLMEncoderConfig", "concat_batches",
        "default_federated_config", "encode_pairs", "fedavg_plain", "image_digest",
        "load_router_clients", "load_router_update", "local_router_update", "reward_scores",
        "route", "route_pairs", "router_update", "soft_weights", "table4", "train_federated_router",
        "train_router_locally"
    ]
    for name in sdk.router.__all__:
        assert hasattr(sdk.router, name), name
