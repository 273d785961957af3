"""``fedmor audit --server URL --identity KEY --member NAME``: membership inference on a live
member through the consortium server, as the ``auditor`` role, with no server secret.

Every query goes to ``POST /v1/audit/members/{name}/reward`` signed with the auditor's own key:
the server relays it through its reward broker (the member's site policy and budget apply),
charges the auditor's budget, and logs it when capture mode is on. The candidate pairs are the
audited member's own: its train pairs (members) and eval pairs (non-members).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attacks._errors import AttackInputError
from attacks._html import write_report
from attacks._membership import threshold_attack
from attacks._remote import RemoteRewardScorer
from attacks._report import AuditReport, membership_report

__all__ = ["audit_live_member"]

ARTEFACT = "reward answers (/v1/reward)"


def audit_live_member(server_url: str, key: Any, *, caller_id: str, member: str,
                      pairs_dir: Path, out_dir: Path, max_pairs: int = 50, seed: int = 0,
                      n_boot: int = 1000, verify: Any = True) -> AuditReport:
    """The threshold attack on ``member``'s live reward answers, relayed by the server at
    ``server_url``; writes report.json and report.html into ``out_dir``. ``key``: the
    auditor's Ed25519 private key, ``caller_id``: its enrolled client id."""
    import httpx

    from sdk.data import load_pairs
    from sdk.wire import SERVER_SENDER

    if not (pairs_dir / "train").is_dir() or not (pairs_dir / "eval").is_dir():
        raise AttackInputError(f"{pairs_dir} needs train/ (members) and eval/ (non-members)")
    train = load_pairs(pairs_dir / "train")[:max_pairs]
    held = load_pairs(pairs_dir / "eval")[:max_pairs]
    with httpx.Client(base_url=server_url, verify=verify, timeout=120) as http:
        scorer = RemoteRewardScorer(http, key, recipient=SERVER_SENDER, sender=caller_id,
                                    path=f"/v1/audit/members/{member}/reward")
        attack = threshold_attack(scorer, train, held, seed=seed)
    rep = membership_report(attack, setting=f"{member}: live reward answers relayed by the "
                            f"server ({scorer.items_sent} scored items)", n_boot=n_boot,
                            seed=seed)
    report = AuditReport(
        title=f"fedmor live audit of {member} through {server_url}",
        memberships=[rep.model_copy(update={"members": [member], "artefact": ARTEFACT})],
        notes=["Queried as the auditor role through the consortium server: the member's site "
               "policy and budget applied to every query, and the server charged them to the "
               "auditor's own budget."])
    write_report(report, out_dir)
    return report
