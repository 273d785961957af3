"""The router's federated training runs the consortium's round kind, not its own SecAgg+."""

from __future__ import annotations

from pathlib import Path


def test_router_training_reaches_secure_aggregation_only_through_the_round_kind() -> None:
    """``sdk.router`` holds no second SecAgg+ implementation: it never names the protocol's
    state machines or its in-memory transport, only ``sdk.wire``'s round-kind driver."""
    router = Path(__file__).resolve().parents[2] / "sdk" / "router"
    banned = ("SecAggClient", "SecAggServer", "drive_round", "simulate_round")
    found = [f"{path.name}: {name}" for path in sorted(router.glob("*.py"))
             for name in banned if name in path.read_text()]
    assert not found, found
    text = (router / "_aggregators.py").read_text()
    assert "run_in_memory" in text
