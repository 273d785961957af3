"""The server side of a SecAgg+ round as a sans-IO state machine.

``start()`` returns the first message per client; ``receive(msg)`` records one client message;
``close_stage()`` (called by the driver at a deadline) moves on with whoever answered and returns
the next messages per client. A client that did not answer has dropped out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sdk.secagg._crypto import Roster, apply_masks, pair_mask_key, raw_public, self_mask_key
from sdk.secagg._errors import ProtocolViolation, RoundAborted
from sdk.secagg._graph import neighbour_graph
from sdk.secagg._quantize import decode_sum
from sdk.secagg._schema import (
    AdvertisedKeys,
    AdvertiseKeysRequest,
    ClientMessage,
    ConsistencyCheckRequest,
    ConsistencySignature,
    EncryptedShare,
    MaskedInput,
    MaskedInputRequest,
    RoundParams,
    ServerMessage,
    ShareKeysRequest,
    ShareKeysResponse,
    UnmaskingRequest,
    UnmaskingResponse,
    consistency_payload,
    keys_payload,
)
from sdk.secagg._shamir import ShamirError, reconstruct_many
from sdk.secagg._stages import Stage, StageTracker

__all__ = ["AggregateResult", "SecAggServer"]


@dataclass(frozen=True)
class AggregateResult:
    """What the server learns: the weighted mean of the survivors' updates and the weight sum."""

    mean: np.ndarray  # (P,) float64
    weighted_sum: np.ndarray  # (P,) float64, sum_k n_k x_k
    weight_sum: int
    survivors: list[int]
    dropped: list[int]


class SecAggServer:
    """The aggregator of one round; it never holds an individual update in the clear."""

    def __init__(self, params: RoundParams, roster: Roster) -> None:
        missing = [c for c in params.participants if c not in roster]
        if missing:
            raise ValueError(f"participants {missing} are not in the roster")
        self.params = params
        self._roster = roster
        self._tracker = StageTracker()
        self._graph = neighbour_graph(params.participants, params.degree, params.graph_seed)
        self._inbox: dict[int, ClientMessage] = {}
        self._keys: dict[int, AdvertisedKeys] = {}
        self._shares: dict[int, list[EncryptedShare]] = {}  # recipient -> ciphertexts
        self._u2: set[int] = set()
        self._masked: dict[int, MaskedInput] = {}
        # Ring sum (P+1,) uint32 of the masked inputs, added as each one is accepted: every one
        # in the inbox is kept when the stage closes (or the round aborts), so unmasking starts
        # from the finished sum instead of adding N vectors on the round's critical path.
        self._masked_sum: np.ndarray | None = None
        self._signatures: dict[int, bytes] = {}
        self._last: dict[int, ClientMessage] = {}
        self.result: AggregateResult | None = None

    @property
    def stage(self) -> Stage:
        """The stage whose client messages the server is collecting."""
        return self._tracker.stage

    def start(self) -> dict[int, ServerMessage]:
        """The round's first message, for every participant."""
        p = self.params
        req = AdvertiseKeysRequest(round_id=p.round_id, params=p)
        return dict.fromkeys(p.participants, req)

    def receive(self, msg: ClientMessage) -> None:
        """Record a client message; an illegal one raises ``ProtocolViolation`` and is dropped."""
        stage, sender = self._tracker.stage, msg.sender
        party = f"client {sender}"
        if msg.round_id != self.params.round_id:
            raise ProtocolViolation(party=party, stage=stage, reason=f"message of round {msg.round_id!r}")
        if stage != msg.STAGE:
            raise ProtocolViolation(party=party, stage=stage, reason=f"{msg.kind} is late or early")
        if sender not in self._expected():
            raise ProtocolViolation(party=party, stage=stage, reason="not a live participant of this stage")
        if sender in self._inbox:
            raise ProtocolViolation(party=party, stage=stage, reason="duplicate message")
        self._check(msg, party, stage)
        if isinstance(msg, MaskedInput):
            if self._masked_sum is None:
                self._masked_sum = np.zeros(self.params.vector_length + 1, dtype=np.uint32)
            np.add(self._masked_sum, msg.vector(), out=self._masked_sum)
        self._inbox[sender] = msg

    def _expected(self) -> set[int]:
        s = self._tracker.stage
        return {
            Stage.ADVERTISE_KEYS: set(self.params.participants),
            Stage.SHARE_KEYS: set(self._keys),
            Stage.MASKED_INPUT_COLLECTION: self._u2,
            Stage.CONSISTENCY_CHECK: set(self._masked),
            Stage.UNMASKING: set(self._signatures),
        }.get(s, set())

    def _check(self, msg: ClientMessage, party: str, stage: Stage) -> None:
        reason = self._invalid(msg)
        if reason is not None:
            raise ProtocolViolation(party=party, stage=stage, reason=reason)

    def _invalid(self, msg: ClientMessage) -> str | None:
        p = self.params
        if isinstance(msg, AdvertisedKeys):
            if not self._roster.verify(msg.sender, msg.signature, keys_payload(p.round_id, msg.sender, msg.enc_pk, msg.mask_pk)):
                return "round keys not signed by the client's identity"
        elif isinstance(msg, ShareKeysResponse):
            nbrs = self._graph[msg.sender] & set(self._keys)
            if {s.recipient for s in msg.shares} != nbrs or len(msg.shares) != len(nbrs) or any(s.sender != msg.sender for s in msg.shares):
                return "shares are not exactly one per live neighbour"
        elif isinstance(msg, MaskedInput):
            if len(msg.masked) != 4 * (p.vector_length + 1):
                return f"masked vector has {len(msg.masked)} bytes, expected {4 * (p.vector_length + 1)}"
        elif isinstance(msg, ConsistencySignature) and not self._roster.verify(msg.sender, msg.signature, consistency_payload(p.round_id, sorted(self._masked))):
            return "consistency signature invalid"
        return None

    def close_stage(self) -> dict[int, ServerMessage]:
        """End the current stage with the messages received; return the next stage's messages.

        Raises ``RoundAborted`` (and learns nothing) if fewer than the threshold answered.
        """
        stage = self._tracker.stage
        closers: dict[Stage, Callable[[], dict[int, ServerMessage]]] = {
            Stage.ADVERTISE_KEYS: self._close_advertise,
            Stage.SHARE_KEYS: self._close_share,
            Stage.MASKED_INPUT_COLLECTION: self._close_masked,
            Stage.CONSISTENCY_CHECK: self._close_consistency,
            Stage.UNMASKING: self._close_unmasking,
        }
        if stage not in closers:
            raise RuntimeError(f"round already ended ({stage.value})")
        inbox, self._inbox = self._inbox, {}
        if len(inbox) < self.params.threshold:
            self._tracker.fail(Stage.ABORTED)
            raise RoundAborted(stage=stage, survivors=len(inbox), threshold=self.params.threshold)
        try:
            self._stash(inbox)
            out = closers[stage]()
        except RoundAborted:
            self._tracker.fail(Stage.ABORTED)
            raise
        self._tracker.advance()
        return out

    def _stash(self, inbox: dict[int, ClientMessage]) -> None:
        for sender, m in inbox.items():
            if isinstance(m, AdvertisedKeys):
                self._keys[sender] = m
            elif isinstance(m, MaskedInput):
                self._masked[sender] = m
            elif isinstance(m, ConsistencySignature):
                self._signatures[sender] = m.signature
        self._last = inbox

    def _close_advertise(self) -> dict[int, ServerMessage]:
        rid = self.params.round_id
        return {
            c: ShareKeysRequest(round_id=rid, keys=[self._keys[v] for v in sorted((self._graph[c] | {c}) & set(self._keys))])
            for c in self._keys
        }

    def _close_share(self) -> dict[int, ServerMessage]:
        self._u2 = set(self._last)
        for sender in sorted(self._u2):
            m = self._last[sender]
            assert isinstance(m, ShareKeysResponse)
            for s in m.shares:
                if s.recipient in self._u2:  # shares for clients that already left are useless
                    self._shares.setdefault(s.recipient, []).append(s)
        rid = self.params.round_id
        return {c: MaskedInputRequest(round_id=rid, shares=self._shares.get(c, [])) for c in self._u2}

    def _close_masked(self) -> dict[int, ServerMessage]:
        survivors = sorted(self._masked)
        req = ConsistencyCheckRequest(round_id=self.params.round_id, survivors=survivors)
        return dict.fromkeys(survivors, req)

    def _close_consistency(self) -> dict[int, ServerMessage]:
        survivors = sorted(self._masked)
        dropped = sorted(self._u2 - set(survivors))
        # Each signer gets only its share holders' signatures: its unmasking answer concerns
        # only its neighbours' secrets, so the check it makes is scoped to them.
        return {
            u: UnmaskingRequest(round_id=self.params.round_id, survivors=survivors, dropped=dropped,
                                signatures={v: sig for v, sig in self._signatures.items() if v == u or v in self._graph[u]})
            for u in self._signatures
        }

    def _close_unmasking(self) -> dict[int, ServerMessage]:
        p = self.params
        survivors = sorted(self._masked)
        dropped = sorted(self._u2 - set(survivors))
        responses = [m for m in self._last.values() if isinstance(m, UnmaskingResponse)]
        b_seeds = self._reconstruct(responses, survivors, self_mask=True)
        mask_keys = self._reconstruct(responses, dropped, self_mask=False)
        for v, raw in mask_keys.items():
            if raw_public(X25519PrivateKey.from_private_bytes(raw)) != self._keys[v].mask_pk:
                raise RoundAborted(stage=Stage.UNMASKING, survivors=len(responses), threshold=p.threshold, reason=f"mask key of client {v} reconstructs wrongly (bad shares)")
        assert self._masked_sum is not None  # the masked stage closed with survivors
        total, self._masked_sum = self._masked_sum, None  # (P+1,), sum over ``survivors``
        masks = [(self_mask_key(b_seeds[u], p.round_id), -1) for u in survivors]
        # Survivor u added sign(u, v) * PRG(s_uv) for each dropped neighbour v; remove it.
        for v in dropped:
            v_sk = X25519PrivateKey.from_private_bytes(mask_keys[v])
            for u in sorted(self._graph[v] & set(survivors)):
                masks.append((pair_mask_key(v_sk, self._keys[u].mask_pk, p.round_id, u, v), -1 if u < v else 1))
        apply_masks(total, masks)
        weighted, weight_sum = decode_sum(total, p.quantization)
        if weight_sum <= 0:
            raise RoundAborted(stage=Stage.UNMASKING, survivors=len(survivors), threshold=p.threshold, reason="weight sum decodes to zero (corrupted inputs)")
        self.result = AggregateResult(mean=weighted / weight_sum, weighted_sum=weighted, weight_sum=weight_sum, survivors=survivors, dropped=dropped)
        return {}

    def _reconstruct(self, responses: list[UnmaskingResponse], owners: list[int], *, self_mask: bool) -> dict[int, bytes]:
        t = self.params.threshold
        got: dict[int, tuple[list[int], list[np.ndarray]]] = {o: ([], []) for o in owners}
        for r in sorted(responses, key=lambda r: r.sender):
            for owner, share in (r.self_mask_shares if self_mask else r.key_shares).items():
                if owner in got and len(share) == 64:
                    got[owner][0].append(r.sender)
                    got[owner][1].append(np.frombuffer(share, dtype="<u4").astype(np.int64))
        short = [o for o, (h, _) in got.items() if len(h) < t]
        if short:
            what = "self-mask seeds" if self_mask else "mask keys"
            raise RoundAborted(stage=Stage.UNMASKING, survivors=min(len(got[o][0]) for o in short), threshold=t, reason=f"too few shares to rebuild the {what} of clients {short}")
        try:
            secrets = reconstruct_many([(h, np.stack(s)) for h, s in got.values()], t)
        except ShamirError as exc:
            raise RoundAborted(stage=Stage.UNMASKING, survivors=len(responses), threshold=t, reason=str(exc)) from exc
        return dict(zip(got, secrets, strict=True))

