"""The member store's reads as records: each row keyed by the columns its query selects."""

from __future__ import annotations

from pathlib import Path

from client_app import ClientStore


def test_the_member_store_reads_rows_as_records_by_their_columns(tmp_path: Path) -> None:
    store = ClientStore(tmp_path / "client.db")
    try:
        store.record_query("server", "q" * 64, ["a", "b"])
        store.record_dp(7, 100.0, 1.5, 0.25)
        store.set_round(7, "running")
        assert store.round_update(7) is None  # no update recorded yet
        store.record_update(7, 12, 0.5, 0.25)
        (audit,) = store.audit_log()
        assert (audit["caller"], audit["query_sha256"], audit["items"]) == ("server", "q" * 64, 2)
        (dp,) = store.dp_ledger()
        assert (dp["round_id"], dp["noise_multiplier"], dp["epsilon"]) == (7, 1.5, 0.25)
        assert store.round_update(7) == {"pairs": 12, "loss_before": 0.5, "loss_after": 0.25}
    finally:
        store.close()
