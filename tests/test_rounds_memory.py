"""``sdk.rounds.run_in_memory`` drives any round kind's two halves: typed messages, the same
delta arithmetic as the REST drivers, dropouts as lost replies."""

from __future__ import annotations

import numpy as np
import pytest

from sdk.rounds import ROUND_KINDS, UpdateRejected, memory_spec, protocol_ids, run_in_memory
from sdk.secagg import MaskedInput
from sdk.wire import RoundSpec, generate_key

IDS = ["m0", "m1", "m2"]


def _spec(kind: str, **params: object) -> tuple[RoundSpec, dict]:
    keys = {c: generate_key() for c in IDS}
    return memory_spec(kind, keys, 5, params, round_id=4, min_clients=2), keys


def test_fedavg_in_memory_is_base_plus_the_weighted_mean_delta() -> None:
    spec, keys = _spec("rm_fedavg")
    base = np.linspace(-1, 1, 5).astype(np.float32)
    updates = {c: (base + np.float32(i + 1), float(i + 1)) for i, c in enumerate(IDS)}
    out = run_in_memory(ROUND_KINDS["rm_fedavg"], spec, keys, updates, base)
    assert out.failed is None and out.survivors == IDS and out.weight_sum == 6
    assert out.params is not None
    np.testing.assert_allclose(out.params, base + (1 * 1 + 2 * 2 + 3 * 3) / 6, rtol=1e-6)
    assert out.bytes_up == 3 * (8 + 4 * 5)  # float64 weight + float32 vector each


def test_secure_round_in_memory_drops_a_lost_masked_input() -> None:
    spec, keys = _spec("router_secagg", graph_seed="11" * 32, threshold=2)
    base = np.zeros(5, dtype=np.float32)
    updates = {c: (np.full(5, 0.125 * (i + 1), np.float32), 1.0) for i, c in enumerate(IDS)}
    kind = ROUND_KINDS["router_secagg"]
    out = run_in_memory(kind, spec, keys, updates, base,
                        dropouts={"masked_input_collection": {"m1"}})
    assert out.failed is None and out.survivors == ["m0", "m2"] and out.weight_sum == 2
    assert out.params is not None
    np.testing.assert_allclose(out.params, (0.125 + 0.375) / 2, atol=1e-5)
    lost = run_in_memory(kind, spec, keys, updates, base,
                         dropouts={"advertise_keys": {"m0", "m1"}})
    assert lost.params is None and lost.failed is not None and "threshold" in lost.failed


def test_every_stage_message_survives_its_wire_form_unchanged() -> None:
    """The REST drivers only add the wire form at their edge: each typed message of a whole
    secure round, written out as its JSON object (or binary body) and parsed back, is the same
    message, and so is a client's saved state."""
    spec, keys = _spec("router_secagg", graph_seed="22" * 32)
    kind = ROUND_KINDS["router_secagg"]
    terms = kind.terms(spec)
    server = kind.server(terms)
    clients = {c: kind.client(terms, client_id=c, key=keys[c], state=None) for c in IDS}
    outbox: dict[str, object] = {c: server.opening(c) for c in IDS}
    checked = 0
    for stage in server.stages:
        for cid, msg in outbox.items():
            assert clients[cid].decode(stage, server.encode(msg)) == msg
            if stage == clients[cid].update_stage:
                clients[cid].provide(np.full(5, 0.25, np.float32), 2)
            reply = clients[cid].reply(stage, msg)
            assert server.parse(stage, cid, clients[cid].encode(reply)) == reply
            state = clients[cid].state()
            assert kind.client(terms, client_id=cid, key=keys[cid], state=state).state() == state
            server.accept(stage, cid, reply)
            checked += 1
        outbox = server.close_stage(stage)
    assert checked == 5 * len(IDS)
    np.testing.assert_allclose(server.result(), 0.25, atol=1e-5)


def test_on_message_sees_what_the_server_half_receives_under_the_protocol_ids() -> None:
    """An auditor's view of an in-memory round: each message the server half accepted, typed,
    from the client whose protocol id (``protocol_ids``: 1..N in participant order) it carries;
    a reply lost as a dropout is not among them."""
    spec, keys = _spec("router_secagg", graph_seed="33" * 32, threshold=2)
    updates = {c: (np.full(5, 0.125, np.float32), 1.0) for c in IDS}
    seen: list[tuple[str, object]] = []
    out = run_in_memory(ROUND_KINDS["router_secagg"], spec, keys, updates, None,
                        dropouts={"masked_input_collection": {"m2"}},
                        on_message=lambda cid, msg: seen.append((cid, msg)))
    assert out.survivors == ["m0", "m1"]
    ids = protocol_ids(spec)
    assert ids == {"m0": 1, "m1": 2, "m2": 3}
    assert all(msg.sender == ids[cid] for cid, msg in seen)  # type: ignore[attr-defined]
    masked = sorted(cid for cid, msg in seen if isinstance(msg, MaskedInput))
    assert masked == ["m0", "m1"]
    assert len(seen) == 3 + 3 + 2 + 2 + 2  # keys, shares, then the two survivors' stages


def test_a_client_half_never_waits_for_its_update() -> None:
    """A half takes messages in and gives messages out: a reply that needs the local update
    before any driver provided it is refused at once, never a wait."""
    for name in ("rm_fedavg", "router_secagg"):
        spec, keys = _spec(name, **({"graph_seed": "33" * 32} if name == "router_secagg"
                                    else {}))
        kind = ROUND_KINDS[name]
        terms = kind.terms(spec)
        server = kind.server(terms)
        half = kind.client(terms, client_id="m0", key=keys["m0"], state=None)
        others = {c: kind.client(terms, client_id=c, key=keys[c], state=None) for c in IDS}
        others["m0"] = half
        outbox = {c: server.opening(c) for c in IDS}
        for stage in kind.stages:
            if stage == half.update_stage:
                assert not half.has_update
                with pytest.raises(UpdateRejected, match="no local update"):
                    half.reply(stage, outbox["m0"])
                break
            for c, msg in outbox.items():
                server.accept(stage, c, others[c].reply(stage, msg))
            outbox = server.close_stage(stage)
        else:
            raise AssertionError(f"{name}: no stage carries the update")
