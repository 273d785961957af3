"""The client side of a SecAgg+ round as a sans-IO state machine: ``receive(msg) -> reply``.

The consistency check is scoped to the neighbourhood: a client accepts the unmasking request only
if at least ``threshold`` of its share holders (itself and its neighbours) validly signed the
survivor set it signed, and no other signature is present. This keeps the double-reveal
guarantee: an honest holder of w's shares answers once, for the one survivor set it signed, with
either w's self-mask share or its mask-key share; so with a threshold that is a majority of w's
share holders (``check_majority_threshold``, refused otherwise before any reply), the two
secrets cannot both gather threshold honest shares.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sdk.secagg._client_state import ClientState
from sdk.secagg._crypto import (
    Roster,
    aead_open,
    aead_seal,
    apply_masks,
    pair_mask_key,
    raw_public,
    self_mask_key,
    share_key,
)
from sdk.secagg._dp import DPConfig, clip_and_noise
from sdk.secagg._errors import (
    Attack,
    ConfigError,
    InvalidUpdateError,
    MaliciousServerError,
    RoundAborted,
    SecAggError,
)
from sdk.secagg._graph import check_majority_threshold, neighbour_graph
from sdk.secagg._quantize import encode_weighted, validate_update
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
from sdk.secagg._shamir import SECRET_BYTES, share_secrets
from sdk.secagg._stages import Stage, StageTracker

__all__ = ["SecAggClient"]

_SHARE_BYTES = 64  # 16 field elements as uint32 LE
_ANY_WEIGHT = 2**31 - 1  # the weight bound before the round's parameters are known


class SecAggClient:
    """One client's view of one round. Feed it each server message; it returns its reply.

    An update given at construction is validated before anything can be sent. ``update=None``
    defers it: the key stages run first and ``provide_input`` must come before the masked-input
    request, so the key agreement overlaps local training. ``require_dp`` makes
    the client refuse rounds whose announced DP is weaker (larger clip, smaller noise). Any detected
    misbehaviour raises a typed error (``MaliciousServerError`` naming the attack) and moves the
    client to ``Stage.ERROR``; it never answers again in this round.
    """

    def __init__(
        self,
        client_id: int,
        identity: Ed25519PrivateKey,
        roster: Roster,
        update: np.ndarray | None,
        weight: int | None,
        *,
        rng: np.random.Generator | None = None,
        require_dp: DPConfig | None = None,
    ) -> None:
        self.client_id = client_id
        self._identity = identity
        self._roster = roster
        self._update: np.ndarray | None = None
        self._weight = 0
        if update is not None:
            self._update, self._weight = validate_update(update, weight, length=None, max_weight=_ANY_WEIGHT)
        self._rng = rng if rng is not None else np.random.default_rng(secrets.randbits(128))
        self._require_dp = require_dp  # the least privacy this client accepts from a round
        self._tracker = StageTracker()
        self._params: RoundParams | None = None
        self._nbrs: frozenset[int] = frozenset()
        self._enc_sk = X25519PrivateKey.generate()
        self._mask_sk = X25519PrivateKey.generate()
        self._seed = os.urandom(SECRET_BYTES)  # b: the self-mask seed
        self._keys: dict[int, AdvertisedKeys] = {}
        self._held: dict[int, tuple[bytes, bytes]] = {}  # owner -> (b share, key share)
        self._share_keys: dict[int, bytes] = {}  # peer -> AES-GCM key, derived once
        self._survivors: list[int] | None = None
        # ``prepare_masked_input``'s work: the encoded, self-masked input (P+1,) uint32, then the
        # same plus the pairwise masks of the neighbours named in the frozenset.
        self._encoded: np.ndarray | None = None
        self._premasked: tuple[np.ndarray, frozenset[int]] | None = None

    @property
    def has_input(self) -> bool:
        """Whether the update to mask is known (given at construction or provided since)."""
        return self._update is not None

    def provide_input(self, update: np.ndarray, weight: int) -> None:
        """Give the deferred update and its weight; any time before the masked-input request."""
        if self._update is not None:
            raise InvalidUpdateError("this client's update was already given")
        if self._tracker.stage not in (Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT_COLLECTION):
            raise InvalidUpdateError(f"too late for an update: the round is at {self._tracker.stage.value}")
        p = self._params
        self._update, self._weight = validate_update(
            update, weight, length=None if p is None else p.vector_length,
            max_weight=_ANY_WEIGHT if p is None else p.quantization.max_weight)

    @property
    def stage(self) -> Stage:
        """The stage whose server message this client expects next."""
        return self._tracker.stage

    @property
    def params(self) -> RoundParams:
        """The round's public parameters (after the first message)."""
        if self._params is None:
            raise RuntimeError("no round parameters received yet")
        return self._params

    def export_state(self) -> ClientState:
        """Everything needed to continue this round in another process (round secrets
        included: store it like the identity key)."""
        return ClientState(
            client_id=self.client_id, stage=self._tracker.stage, params=self._params,
            enc_sk=self._enc_sk.private_bytes_raw(), mask_sk=self._mask_sk.private_bytes_raw(),
            seed=self._seed, keys=list(self._keys.values()), held=dict(self._held),
            share_keys=dict(self._share_keys), survivors=self._survivors)

    @classmethod
    def restore(cls, state: ClientState, identity: Ed25519PrivateKey, roster: Roster,
                update: np.ndarray | None, weight: int | None, *, rng: np.random.Generator | None = None,
                require_dp: DPConfig | None = None) -> SecAggClient:
        """A client that continues the round ``state`` was exported from. ``update`` and
        ``weight`` are only used if the masked input was not produced yet."""
        client = cls(state.client_id, identity, roster, update, weight, rng=rng,
                     require_dp=require_dp)
        client._enc_sk = X25519PrivateKey.from_private_bytes(state.enc_sk)
        client._mask_sk = X25519PrivateKey.from_private_bytes(state.mask_sk)
        client._keys = {k.sender: k for k in state.keys}
        own = client._keys.get(client.client_id)
        if own is not None and (own.enc_pk, own.mask_pk) != (raw_public(client._enc_sk),
                                                            raw_public(client._mask_sk)):
            raise ValueError("state's private keys do not match its advertised round keys")
        client._tracker.stage = state.stage
        client._params = state.params
        if state.params is not None:
            p = state.params
            client._nbrs = neighbour_graph(p.participants, p.degree, p.graph_seed)[client.client_id]
        client._seed = state.seed
        client._held = dict(state.held)
        client._share_keys = dict(state.share_keys)
        client._survivors = state.survivors
        return client

    def receive(self, msg: ServerMessage) -> ClientMessage:
        """Process one server message and return the reply to send."""
        stage = self._tracker.stage
        if self._tracker.terminal:
            raise MaliciousServerError(stage=stage, attack=Attack.OUT_OF_ORDER, reason=f"round already ended ({stage.value})")
        handler = self._handlers().get(type(msg))
        try:
            if handler is None or stage != msg.STAGE:
                raise MaliciousServerError(stage=stage, attack=Attack.OUT_OF_ORDER, reason=f"got {msg.kind} while expecting stage {stage.value}")
            if self._params is not None and msg.round_id != self._params.round_id:
                raise MaliciousServerError(stage=stage, attack=Attack.WRONG_ROUND, reason=f"message of round {msg.round_id!r} in round {self._params.round_id!r}")
            reply = handler(msg)
        except RoundAborted:
            self._tracker.fail(Stage.ABORTED)
            raise
        except SecAggError:
            self._tracker.fail(Stage.ERROR)
            raise
        self._tracker.advance()
        return reply

    def _handlers(self) -> dict[type, Callable[..., ClientMessage]]:
        return {
            AdvertiseKeysRequest: self._advertise,
            ShareKeysRequest: self._share,
            MaskedInputRequest: self._mask,
            ConsistencyCheckRequest: self._consistency,
            UnmaskingRequest: self._unmask,
        }

    def _bad(self, attack: Attack, reason: str) -> MaliciousServerError:
        return MaliciousServerError(stage=self._tracker.stage, attack=attack, reason=reason)

    # ---- stage 0 ---------------------------------------------------------------------------
    def _advertise(self, msg: AdvertiseKeysRequest) -> AdvertisedKeys:
        p = msg.params
        if msg.round_id != p.round_id:
            raise self._bad(Attack.WRONG_ROUND, "request and parameters name different rounds")
        strangers = [c for c in p.participants if c not in self._roster]
        if strangers:
            raise self._bad(Attack.UNKNOWN_CLIENT, f"participants {strangers} are not in the roster")
        if self.client_id not in p.participants or len(set(p.participants)) != len(p.participants):
            raise self._bad(Attack.BAD_PARAMETERS, "participant list is duplicated or lacks this client")
        if p.degree > len(p.participants) - 1 or p.threshold > p.degree + 1:
            raise self._bad(Attack.BAD_PARAMETERS, f"threshold {p.threshold} / degree {p.degree} impossible for {len(p.participants)} participants")
        try:
            check_majority_threshold(p.threshold, p.degree, len(p.participants))
            p.quantization.check_capacity(len(p.participants))
        except ConfigError as exc:
            raise self._bad(Attack.BAD_PARAMETERS, str(exc)) from exc
        self._check_dp(p)
        # Shape and weight range are only known now; this still happens before any reply.
        if self._update is not None:
            validate_update(self._update, self._weight, length=p.vector_length, max_weight=p.quantization.max_weight)
        self._params = p
        self._nbrs = neighbour_graph(p.participants, p.degree, p.graph_seed)[self.client_id]
        enc_pk, mask_pk = raw_public(self._enc_sk), raw_public(self._mask_sk)
        sig = self._identity.sign(keys_payload(p.round_id, self.client_id, enc_pk, mask_pk))
        own = AdvertisedKeys(round_id=p.round_id, sender=self.client_id, enc_pk=enc_pk, mask_pk=mask_pk, signature=sig)
        self._keys[self.client_id] = own
        return own

    def _check_dp(self, p: RoundParams) -> None:
        need = self._require_dp
        if need is None:
            return
        got = p.dp
        if got is None or got.clip_norm > need.clip_norm or got.resolved_noise_multiplier() < need.resolved_noise_multiplier():
            raise self._bad(Attack.BAD_PARAMETERS, f"round DP {got} is weaker than this client requires ({need})")

    # ---- stage 1 ---------------------------------------------------------------------------
    def _share(self, msg: ShareKeysRequest) -> ShareKeysResponse:
        p = self.params
        own = self._keys[self.client_id]
        keys: dict[int, AdvertisedKeys] = {}
        for k in msg.keys:
            if k.sender in keys:
                raise self._bad(Attack.BAD_PARAMETERS, f"keys of client {k.sender} listed twice")
            if k.sender != self.client_id and k.sender not in self._nbrs:
                raise self._bad(Attack.UNKNOWN_CLIENT, f"client {k.sender} is not a neighbour")
            if k.round_id != p.round_id:
                raise self._bad(Attack.WRONG_ROUND, f"keys of client {k.sender} belong to round {k.round_id!r}")
            if not self._roster.verify(k.sender, k.signature, keys_payload(p.round_id, k.sender, k.enc_pk, k.mask_pk)):
                raise self._bad(Attack.FORGED_SIGNATURE, f"round keys of client {k.sender} are not signed by its identity")
            keys[k.sender] = k
        if keys.get(self.client_id) != own:
            raise self._bad(Attack.FORGED_SIGNATURE, "this client's own keys were dropped or altered")
        if len(keys) < p.threshold:
            raise RoundAborted(stage=Stage.SHARE_KEYS, survivors=len(keys), threshold=p.threshold, reason=f"client {self.client_id} has too few live neighbours")
        self._keys = keys
        holders = sorted(keys)
        shares = share_secrets([self._seed, self._mask_sk.private_bytes_raw()], holders, p.threshold)  # (H, 2, 16)
        out = []
        for h, sh in zip(holders, shares, strict=True):
            plain = sh.astype("<u4").tobytes()  # b share || key share, 128 bytes
            if h == self.client_id:
                self._held[h] = (plain[:_SHARE_BYTES], plain[_SHARE_BYTES:])
                continue
            self._share_keys[h] = share_key(self._enc_sk, keys[h].enc_pk, p.round_id)
            ct = aead_seal(self._share_keys[h], p.round_id, self.client_id, h, plain)
            out.append(EncryptedShare(sender=self.client_id, recipient=h, ciphertext=ct))
        return ShareKeysResponse(round_id=p.round_id, sender=self.client_id, shares=out)

    # ---- stage 2 ---------------------------------------------------------------------------
    def _mask(self, msg: MaskedInputRequest) -> MaskedInput:
        p = self.params
        for s in msg.shares:
            if s.recipient != self.client_id or s.sender not in self._keys or s.sender == self.client_id:
                raise self._bad(Attack.UNKNOWN_CLIENT, f"share {s.sender}->{s.recipient} is not for this client")
            if s.sender in self._held:
                raise self._bad(Attack.BAD_PARAMETERS, f"two shares from client {s.sender}")
            plain = aead_open(self._share_keys[s.sender], p.round_id, s.sender, self.client_id, s.ciphertext)
            if plain is None or len(plain) != 2 * _SHARE_BYTES:
                raise self._bad(Attack.TAMPERED_CIPHERTEXT, f"share from client {s.sender} fails authentication")
            self._held[s.sender] = (plain[:_SHARE_BYTES], plain[_SHARE_BYTES:])
        if len(self._held) < p.threshold:
            raise RoundAborted(stage=Stage.MASKED_INPUT_COLLECTION, survivors=len(self._held), threshold=p.threshold, reason=f"client {self.client_id} received too few shares")
        # Pairwise masks only with neighbours that shared (the U2 view); they cancel in the sum.
        shared = frozenset(v for v in self._held if v != self.client_id)
        if self._update is None and self._premasked is None:
            raise InvalidUpdateError("the masked input was requested before provide_input gave the update")
        self.prepare_masked_input()
        assert self._premasked is not None
        y, masked_with = self._premasked
        self._encoded = self._premasked = None  # one use: the next call would reuse rng draws
        # Every sender was checked against ``self._keys`` above, so ``shared <= masked_with``:
        # undo the masks of neighbours whose keys arrived but whose shares did not.
        apply_masks(y, [(self._pair_key(v), -self._pair_sign(v)) for v in sorted(masked_with - shared)])
        return MaskedInput(round_id=p.round_id, sender=self.client_id, masked=y.astype("<u4", copy=False).tobytes())

    def _pair_key(self, v: int) -> bytes:
        p = self.params
        return pair_mask_key(self._mask_sk, self._keys[v].mask_pk, p.round_id, self.client_id, v)

    def _pair_sign(self, v: int) -> int:
        return 1 if self.client_id < v else -1

    def prepare_masked_input(self) -> None:
        """Do the masked input's arithmetic ahead of the server's request (optional, pure).

        After the advertise-keys reply it encodes the update (DP noise, stochastic rounding) and
        adds the self mask; after the share-keys reply it also adds the pairwise mask of every
        neighbour whose round keys this client accepted. The masked-input reply then only undoes
        the masks of neighbours whose shares never arrived. An app may call this in a background
        thread while it waits for the next stage (not concurrently with ``receive``), so the
        round's critical path no longer holds the masking: the reply is the same as without it
        (the same rng draws in the same order). Elsewhere in the round it does nothing.
        """
        stage = self._tracker.stage
        if self._params is None or stage not in (Stage.SHARE_KEYS, Stage.MASKED_INPUT_COLLECTION):
            return
        p = self._params
        if self._encoded is None and self._premasked is None:
            if self._update is None:  # deferred and not provided yet: nothing to prepare
                return
            x = self._update
            if p.dp is not None:
                x = clip_and_noise(x, p.dp, min_survivors=p.threshold, max_weight=p.quantization.max_weight, rng=self._rng)
            y = encode_weighted(x, self._weight, p.quantization, self._rng)  # (P+1,) uint32
            apply_masks(y, [(self_mask_key(self._seed, p.round_id), 1)])
            self._encoded = y
        if stage is Stage.MASKED_INPUT_COLLECTION and self._encoded is not None:
            encoded, self._encoded = self._encoded, None
            nbrs = frozenset(v for v in self._keys if v != self.client_id)
            apply_masks(encoded, [(self._pair_key(v), self._pair_sign(v)) for v in sorted(nbrs)])
            self._premasked = (encoded, nbrs)

    # ---- stage 3 ---------------------------------------------------------------------------
    def _consistency(self, msg: ConsistencyCheckRequest) -> ConsistencySignature:
        p = self.params
        survivors = sorted(set(msg.survivors))
        if len(survivors) != len(msg.survivors) or self.client_id not in survivors:
            raise self._bad(Attack.INCONSISTENT_SURVIVORS, "survivor set is duplicated or omits this client")
        if not set(survivors) <= set(p.participants):
            raise self._bad(Attack.UNKNOWN_CLIENT, "survivor set names non-participants")
        if len(survivors) < p.threshold:
            raise RoundAborted(stage=Stage.CONSISTENCY_CHECK, survivors=len(survivors), threshold=p.threshold)
        self._survivors = survivors
        sig = self._identity.sign(consistency_payload(p.round_id, survivors))
        return ConsistencySignature(round_id=p.round_id, sender=self.client_id, signature=sig)

    # ---- stage 4 ---------------------------------------------------------------------------
    def _unmask(self, msg: UnmaskingRequest) -> UnmaskingResponse:
        p = self.params
        assert self._survivors is not None
        survivors, dropped = set(msg.survivors), set(msg.dropped)
        both = survivors & dropped
        if both:
            raise self._bad(Attack.DOUBLE_REVEAL, f"asked for both the self-mask and key shares of {sorted(both)}")
        if sorted(survivors) != self._survivors or len(survivors) != len(msg.survivors):
            raise self._bad(Attack.INCONSISTENT_SURVIVORS, "survivor set differs from the one this client signed")
        payload = consistency_payload(p.round_id, self._survivors)
        # Only the neighbourhood's signatures count: this answer reveals shares of the
        # neighbours' secrets alone (the module docstring says why that suffices).
        holders = (self._nbrs | {self.client_id}) & survivors
        signers = [c for c, sig in msg.signatures.items() if c in holders and self._roster.verify(c, sig, payload)]
        if len(signers) != len(msg.signatures):
            raise self._bad(Attack.INCONSISTENT_SURVIVORS, "a consistency signature is invalid, from outside this client's neighbourhood, or covers another survivor set")
        if self.client_id not in signers:
            raise self._bad(Attack.INCONSISTENT_SURVIVORS, "this client's own consistency signature is missing")
        if len(signers) < p.threshold:
            raise RoundAborted(stage=Stage.UNMASKING, survivors=len(signers), threshold=p.threshold)
        # Each held share reveals exactly one secret: b for survivors, the mask key for dropouts.
        b_shares = {o: sh[0] for o, sh in self._held.items() if o in survivors}
        k_shares = {o: sh[1] for o, sh in self._held.items() if o in dropped and o != self.client_id}
        return UnmaskingResponse(round_id=p.round_id, sender=self.client_id, self_mask_shares=b_shares, key_shares=k_shares)
