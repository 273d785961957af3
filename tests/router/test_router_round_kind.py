"""The router's federated training and the attacks' captured rounds run the consortium's round
kind, not their own SecAgg+ or delta arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("folder", "driver"), [("sdk/router", "_aggregators.py"),
                                                 ("attacks", "_capture.py")])
def test_rounds_reach_secure_aggregation_only_through_the_round_kind(folder: str,
                                                                     driver: str) -> None:
    """``folder`` holds no second SecAgg+ implementation: it never names the protocol's state
    machines or its in-memory transport, only ``sdk.rounds``' round-kind driver."""
    banned = ("SecAggClient", "SecAggServer", "drive_round", "simulate_round")
    found = [f"{path.name}: {name}" for path in sorted((ROOT / folder).glob("*.py"))
             for name in banned if name in path.read_text()]
    assert not found, found
    assert "run_in_memory" in (ROOT / folder / driver).read_text()
