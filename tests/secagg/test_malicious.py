"""An active server: every deviation is refused by the client with a specific error."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from sdk.secagg import (
    Attack,
    ProtocolViolation,
    RoundAborted,
    SecAggConfig,
    Stage,
    generate_identities,
)
from sdk.secagg._crypto import raw_public
from sdk.secagg._errors import MaliciousServerError
from sdk.secagg._graph import neighbour_graph
from sdk.secagg._schema import (
    AdvertisedKeys,
    AdvertiseKeysRequest,
    ConsistencyCheckRequest,
    EncryptedShare,
    MaskedInputRequest,
    ShareKeysRequest,
    UnmaskingRequest,
    keys_payload,
)

from .conftest import Harness


def _refused(h: Harness, client: int, msg: object, attack: Attack) -> MaliciousServerError:
    with pytest.raises(MaliciousServerError) as info:
        h.clients[client].receive(msg)  # type: ignore[arg-type]
    assert info.value.attack is attack and info.value.party == "server"
    assert h.clients[client].stage is Stage.ERROR
    with pytest.raises(MaliciousServerError):  # an errored client never answers again
        h.clients[client].receive(msg)  # type: ignore[arg-type]
    return info.value


def _at_unmasking(h: Harness) -> None:
    for _ in range(4):
        h.step()
    assert h.server.stage is Stage.UNMASKING


def test_both_shares_of_one_peer_refused(harness: Harness) -> None:
    _at_unmasking(harness)
    req = harness.outbox[0]
    assert isinstance(req, UnmaskingRequest)
    evil = req.model_copy(update={"dropped": [*req.dropped, 1]})
    _refused(harness, 0, evil, Attack.DOUBLE_REVEAL)


def test_survivor_moved_to_dropped_refused(harness: Harness) -> None:
    _at_unmasking(harness)
    req = harness.outbox[0]
    assert isinstance(req, UnmaskingRequest)
    evil = req.model_copy(update={"survivors": [s for s in req.survivors if s != 1], "dropped": [1]})
    _refused(harness, 0, evil, Attack.INCONSISTENT_SURVIVORS)


def _at_consistency_check(n: int) -> tuple[Harness, ConsistencyCheckRequest]:
    """A round of ``n`` clients three stages in: the server's consistency-check request."""
    h = Harness(n=n)
    for _ in range(3):
        h.step()
    req = h.outbox[0]
    assert isinstance(req, ConsistencyCheckRequest)
    return h, req


def test_differing_survivor_sets_refused() -> None:
    h, req = _at_consistency_check(6)
    # The server shows client 5 a set without client 4, everyone else the full set.
    lie = req.model_copy(update={"survivors": [0, 1, 2, 3, 5]})
    sigs = {c: h.clients[c].receive(lie if c == 5 else req) for c in range(6)}
    unmask = UnmaskingRequest(round_id="r1", survivors=req.survivors, dropped=[], signatures={c: s.signature for c, s in sigs.items()})  # type: ignore[union-attr]
    _refused(h, 0, unmask, Attack.INCONSISTENT_SURVIVORS)


def test_too_few_consistency_signatures_abort() -> None:
    h, req = _at_consistency_check(6)
    sigs = {c: h.clients[c].receive(req) for c in range(6)}
    unmask = UnmaskingRequest(round_id="r1", survivors=req.survivors, dropped=[], signatures={0: sigs[0].signature})  # type: ignore[union-attr]
    with pytest.raises(RoundAborted):
        h.clients[0].receive(unmask)


def test_sparse_round_checks_only_the_neighbourhood_signatures() -> None:
    # 40 clients at the default degree: a sparse graph, each client with a few share holders.
    h = Harness(n=40, config=SecAggConfig(), seed=3)
    graph = neighbour_graph(h.server.params.participants, h.server.params.degree, h.server.params.graph_seed)
    _at_unmasking(h)
    for u, req in h.outbox.items():
        assert isinstance(req, UnmaskingRequest)
        assert set(req.signatures) == graph[u] | {u} and len(req.signatures) < 40
        assert req.survivors == list(range(40))
    req0, req1 = h.outbox[0], h.outbox[1]
    assert isinstance(req0, UnmaskingRequest) and isinstance(req1, UnmaskingRequest)
    # Client 0 is also sent a valid signature over the same set, from a survivor outside its
    # neighbourhood; client 1 a neighbour's signature forged by the server.
    stranger = next(v for v in range(40) if v not in graph[0] | {0})
    stranger_req = h.outbox[stranger]
    assert isinstance(stranger_req, UnmaskingRequest)
    outsider = {**req0.signatures, stranger: stranger_req.signatures[stranger]}
    forged = {**req1.signatures, min(graph[1]): Ed25519PrivateKey.generate().sign(b"fedmor-secagg/consistency/r1")}
    _refused(h, 0, req0.model_copy(update={"signatures": outsider}), Attack.INCONSISTENT_SURVIVORS)
    _refused(h, 1, req1.model_copy(update={"signatures": forged}), Attack.INCONSISTENT_SURVIVORS)
    # Client 2 is sent its own and neighbours' signatures, one short of the threshold.
    req2 = h.outbox[2]
    assert isinstance(req2, UnmaskingRequest)
    short = dict(sorted(req2.signatures.items(), key=lambda kv: kv[0] != 2)[: h.server.params.threshold - 1])
    with pytest.raises(RoundAborted):
        h.clients[2].receive(req2.model_copy(update={"signatures": short}))
    # The others' answers still rebuild every secret: the round ends with all 40 inputs.
    h.step(skip=frozenset({0, 1, 2}))
    h.assert_weighted_mean_of_all()


def test_forged_and_unsigned_keys_refused(harness: Harness) -> None:
    harness.step()
    req = harness.outbox[0]
    assert isinstance(req, ShareKeysRequest)
    victim = next(k for k in req.keys if k.sender != 0)
    # Server substitutes its own mask key (man in the middle), keeping the old signature.
    swapped = victim.model_copy(update={"mask_pk": raw_public(X25519PrivateKey.generate())})
    _refused(harness, 0, req.model_copy(update={"keys": [swapped if k is victim else k for k in req.keys]}), Attack.FORGED_SIGNATURE)
    # Keys signed by a non-roster identity (the server's) are refused the same way.
    h2 = Harness()
    h2.step()
    req2 = h2.outbox[0]
    assert isinstance(req2, ShareKeysRequest)
    enc, mask = raw_public(X25519PrivateKey.generate()), raw_public(X25519PrivateKey.generate())
    sig = Ed25519PrivateKey.generate().sign(keys_payload("r1", 1, enc, mask))
    fake = AdvertisedKeys(round_id="r1", sender=1, enc_pk=enc, mask_pk=mask, signature=sig)
    _refused(h2, 0, req2.model_copy(update={"keys": [fake if k.sender == 1 else k for k in req2.keys]}), Attack.FORGED_SIGNATURE)


def test_injected_participant_refused() -> None:
    h = Harness()
    req = h.outbox[0]
    assert isinstance(req, AdvertiseKeysRequest)
    params = req.params.model_copy(update={"participants": [*req.params.participants, 99]})
    _refused(h, 0, req.model_copy(update={"params": params}), Attack.UNKNOWN_CLIENT)


def test_replay_and_reorder_refused(harness: Harness) -> None:
    first = harness.step()
    harness.step()
    _refused(harness, 0, first[0], Attack.OUT_OF_ORDER)  # replay of stage 0
    h2 = Harness()
    h2.step()
    h2.step()
    h2.step()
    skipped = h2.outbox[1]  # consistency request delivered to a client still owed its masked input
    h3 = Harness()
    h3.step()
    _refused(h3, 1, skipped.model_copy(update={"round_id": "r1"}), Attack.OUT_OF_ORDER)


def test_message_of_another_round_refused() -> None:
    ids = generate_identities(range(5))
    a, b = Harness(round_id="A", identities=ids), Harness(round_id="B", identities=ids)
    for h in (a, b):
        h.step()
    # Same identities, same stage, but the keys were signed for round B.
    _refused(a, 0, b.outbox[0], Attack.WRONG_ROUND)
    a2, b2 = Harness(round_id="A", identities=ids), Harness(round_id="B", identities=ids)
    for h in (a2, b2):
        h.step()
    req_a, req_b = a2.outbox[0], b2.outbox[0]
    assert isinstance(req_a, ShareKeysRequest) and isinstance(req_b, ShareKeysRequest)
    # Round-B keys relabelled as round A: the signature no longer matches.
    relabelled = [k.model_copy(update={"round_id": "A"}) if k.sender != 0 else k for k in req_b.keys]
    mixed = req_a.model_copy(update={"keys": [k for k in req_a.keys if k.sender == 0] + [k for k in relabelled if k.sender != 0]})
    _refused(a2, 0, mixed, Attack.FORGED_SIGNATURE)


def test_tampered_and_redirected_ciphertexts_refused(harness: Harness) -> None:
    harness.step()
    harness.step()
    req = harness.outbox[0]
    assert isinstance(req, MaskedInputRequest) and req.shares
    s = req.shares[0]
    flipped = bytearray(s.ciphertext)
    flipped[20] ^= 1
    tampered = s.model_copy(update={"ciphertext": bytes(flipped)})
    _refused(harness, 0, req.model_copy(update={"shares": [tampered, *req.shares[1:]]}), Attack.TAMPERED_CIPHERTEXT)
    # A share from 2 to 1 relabelled as coming from 3 to 1 fails the AAD binding.
    req1 = harness.outbox[1]
    assert isinstance(req1, MaskedInputRequest)
    src = next(x for x in req1.shares if x.sender == 2)
    moved = EncryptedShare(sender=3, recipient=1, ciphertext=src.ciphertext)
    others = [x for x in req1.shares if x.sender not in (2, 3)]
    _refused(harness, 1, req1.model_copy(update={"shares": [moved, *others]}), Attack.TAMPERED_CIPHERTEXT)


def test_server_rejects_bad_client_messages(harness: Harness) -> None:
    replies = {c: harness.clients[c].receive(m) for c, m in harness.outbox.items()}
    forged = replies[3].model_copy(update={"sender": 4})
    with pytest.raises(ProtocolViolation) as info:
        harness.server.receive(forged)
    assert info.value.party == "client 4" and info.value.stage is Stage.ADVERTISE_KEYS
    harness.server.receive(replies[3])
    with pytest.raises(ProtocolViolation, match="duplicate"):
        harness.server.receive(replies[3])
    with pytest.raises(ProtocolViolation, match="round"):
        harness.server.receive(replies[1].model_copy(update={"round_id": "other"}))


def test_wrong_threshold_parameters_refused() -> None:
    h = Harness(n=4, config=SecAggConfig(degree=3, threshold=3))
    req = h.outbox[0]
    assert isinstance(req, AdvertiseKeysRequest)
    bad = req.params.model_copy(update={"threshold": 9})
    _refused(h, 0, req.model_copy(update={"params": bad}), Attack.BAD_PARAMETERS)
    assert np.all(np.isfinite(h.updates[0]))


def test_minority_threshold_from_a_hostile_server_refused() -> None:
    # 4 participants, complete graph: 4 share holders each; with t = 2 two disjoint halves of
    # them could each rebuild one of a client's two secrets, so the client replies nothing.
    h = Harness(n=4, config=SecAggConfig(degree=3, threshold=3))
    req = h.outbox[0]
    assert isinstance(req, AdvertiseKeysRequest)
    bad = req.params.model_copy(update={"threshold": 2})
    err = _refused(h, 0, req.model_copy(update={"params": bad}), Attack.BAD_PARAMETERS)
    assert "threshold 2 is not a majority of the 4 share holders" in str(err)
    assert "2 x threshold > share holders" in str(err)


def test_round_weaker_than_required_dp_refused() -> None:
    from sdk.secagg import DPConfig, SecAggClient

    h = Harness(n=4, config=SecAggConfig(degree=3, threshold=3, dp=DPConfig(noise_multiplier=0.5)))
    strict = SecAggClient(0, h.keys[0], h.roster, h.updates[0], h.weights[0], require_dp=DPConfig(noise_multiplier=1.0))
    h.clients[0] = strict
    _refused(h, 0, h.outbox[0], Attack.BAD_PARAMETERS)
    ok = SecAggClient(1, h.keys[1], h.roster, h.updates[1], h.weights[1], require_dp=DPConfig(noise_multiplier=0.5))
    assert ok.receive(h.outbox[1]).sender == 1
