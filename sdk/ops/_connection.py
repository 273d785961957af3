"""How a command reaches the server: ``--profile`` (the default profile when none is given),
with ``--server --ca --client-cert --client-key --key-file --sender`` as overrides, and the
admin token (``FEDMOR_ADMIN_TOKEN``) as the fallback of the operator commands. A plain
``http://`` server needs ``--insecure-http`` (or a profile enrolled with it), and a key file
other users may read or write is refused, as ssh does."""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.ops._profiles import CONFIG_DIR_ENV, ProfileBook, check_owner_only, profiles_path

if TYPE_CHECKING:
    from sdk.wire import SignedClient

__all__ = ["ADMIN_TOKEN_ENV", "Connection", "add_connection_options", "connection_from_args"]

ADMIN_TOKEN_ENV = "FEDMOR_ADMIN_TOKEN"
"""The environment variable holding the server's admin token, the operator commands' fallback
when no identity signs (never a command-line option: it would show in the process list)."""


@dataclass(frozen=True)
class Connection:
    """One server and who talks to it: a signing identity (``key_file`` and ``sender``) or,
    without one, the admin token."""

    server: str
    ca: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    key_file: Path | None = None
    sender: str | None = None
    role: str | None = None
    profile: str | None = None
    insecure_http: bool = False

    def __post_init__(self) -> None:
        scheme = self.server.split("://", 1)[0].lower() if "://" in self.server else ""
        if scheme == "http" and not self.insecure_http:
            raise ValueError(f"server {self.server} is plain http: requests and their answers "
                             f"cross the network unencrypted; use its https:// URL, or give "
                             f"--insecure-http (local tests only)")
        if scheme not in ("http", "https"):
            raise ValueError(f"server {self.server!r} is not an https:// URL")

    def verify(self) -> ssl.SSLContext | bool:
        """What an HTTP client verifies the server with (and the client certificate it
        presents), for an API that takes httpx's ``verify``."""
        from sdk.wire import tls_verify

        return tls_verify(self.ca, self._cert())

    def _cert(self) -> tuple[str, str] | None:
        return None if self.client_cert is None else (str(self.client_cert),
                                                       str(self.client_key))

    def client(self, *, timeout_s: float = 30.0, unsigned: bool = False) -> SignedClient:
        """A :class:`sdk.wire.SignedClient` for this server: signed by the identity, else
        with the admin token (``unsigned``: neither, for enrollment)."""
        from sdk.wire import SignedClient, key_passphrase, load_private_key

        if self.client_key is not None:
            check_owner_only(self.client_key)
        kw: dict[str, Any] = {"ca": self.ca, "client_cert": self._cert(), "timeout_s": timeout_s}
        if unsigned:
            return SignedClient(self.server.rstrip("/"), **kw)
        if self.key_file is not None and self.sender:
            check_owner_only(self.key_file)
            return SignedClient(self.server.rstrip("/"), sender=self.sender,
                                key=load_private_key(self.key_file, key_passphrase()), **kw)
        # On the server's host the operator has the server's own variable; either names it.
        token = os.environ.get(ADMIN_TOKEN_ENV) or os.environ.get("FEDMOR_SERVER_ADMIN_TOKEN")
        if not token:
            raise ValueError(f"no identity to sign with: give --profile (see `fedmor profile "
                             f"list`), --key-file and --sender, or set {ADMIN_TOKEN_ENV} to "
                             f"the server's admin token")
        return SignedClient(self.server.rstrip("/"), admin_token=token, **kw)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--profile`` and the six overrides."""
    g = parser.add_argument_group("server connection (default: the default profile)")
    g.add_argument("--profile", default=None, help="the profile to use (`fedmor profile list`)")
    g.add_argument("--server", default=None, help="server URL, e.g. https://host:8443")
    g.add_argument("--ca", type=Path, default=None, help="CA bundle that verifies the server")
    g.add_argument("--client-cert", type=Path, default=None,
                   help="client certificate (PEM), for a server with require_client_cert")
    g.add_argument("--client-key", type=Path, default=None,
                   help="the private key of --client-cert (PEM)")
    g.add_argument("--key-file", type=Path, default=None,
                   help="the identity key that signs (else the profile's, else the admin "
                        f"token in {ADMIN_TOKEN_ENV})")
    g.add_argument("--sender", default=None, help="that identity's client id")
    g.add_argument("--insecure-http", action="store_true",
                   help="allow a plain http:// server URL (local tests only)")


def connection_from_args(args: argparse.Namespace) -> Connection:
    """The profile ``--profile`` names (else the default one, if any) with the given options
    over it; without any profile, the options alone (``--server`` then required)."""
    fields: dict[str, Any] = {}
    book = ProfileBook.load()
    name = getattr(args, "profile", None)
    if name is not None or (book.profiles and getattr(args, "server", None) is None):
        name, profile = book.pick(name)
        fields = {"server": profile.server, "ca": profile.ca,
                  "client_cert": profile.client_cert, "client_key": profile.client_key,
                  "key_file": profile.identity, "sender": profile.client_id,
                  "role": profile.role, "profile": name,
                  "insecure_http": profile.insecure_http}
    for field in ("server", "ca", "client_cert", "client_key", "key_file", "sender"):
        value = getattr(args, field, None)
        if value is not None:
            fields[field] = value
    if getattr(args, "insecure_http", False):
        fields["insecure_http"] = True
    if not fields.get("server"):
        raise ValueError(f"no server: {profiles_path()} holds no profile; give --profile "
                         f"(after `fedmor enroll`; {CONFIG_DIR_ENV} moves that folder) or "
                         f"--server URL")
    if (fields.get("client_cert") is None) != (fields.get("client_key") is None):
        raise ValueError("give both --client-cert and --client-key, or neither")
    if (getattr(args, "key_file", None) is None) != (getattr(args, "sender", None) is None) \
            and not fields.get("profile"):
        raise ValueError("give both --key-file and --sender (the identity's client id), or "
                         "neither")
    return Connection(**fields)
