"""What a ``SecAggClient`` must keep to continue its round after a process restart.

It holds round secrets (the X25519 keys, the self-mask seed and the Shamir shares other clients
entrusted to this one): persist it only where the identity key itself may live. The update is
not part of it: before the masked-input stage nothing derived from the update has been sent, and
after it the update is no longer needed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sdk.secagg._schema import AdvertisedKeys, RoundParams
from sdk.secagg._stages import Stage

__all__ = ["ClientState"]


class ClientState(BaseModel):
    """A snapshot of one client's round (``SecAggClient.export_state`` / ``restore``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64",
                              val_json_bytes="base64")

    client_id: int
    stage: Stage
    params: RoundParams | None
    enc_sk: bytes  # X25519 raw private key (share encryption)
    mask_sk: bytes  # X25519 raw private key (pairwise masks)
    seed: bytes  # the self-mask seed b
    keys: list[AdvertisedKeys]  # this client's and its live neighbours' signed round keys
    held: dict[int, tuple[bytes, bytes]]  # owner -> (b share, mask-key share)
    share_keys: dict[int, bytes]  # peer -> AES-GCM key of the share ciphertexts
    survivors: list[int] | None  # the survivor set this client signed
