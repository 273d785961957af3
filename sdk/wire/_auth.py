"""Request signing and verification with Ed25519 identity keys (shared by both apps).

Every authenticated request carries seven headers; the signature covers
``METHOD \\n path?query \\n sha256(body) \\n timestamp \\n nonce \\n sender \\n recipient
\\n authority`` (path and query percent-encoded, as they travel; ``authority``: the receiver's
``host:port`` as the signer dialled it) so a captured request cannot be moved to another
path, body, time, sender, recipient (a member that receives a server-signed query cannot
replay it to another member) or server (a listener that captured a request signed for its
own address cannot relay it to the real server), and the nonce makes it single-use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import secrets
import threading
import time
import urllib.parse
from collections.abc import Collection
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "BAD_SIGNATURE",
    "HEADER_AUTHORITY",
    "HEADER_CONTENT_SHA256",
    "HEADER_NONCE",
    "HEADER_RECIPIENT",
    "HEADER_SENDER",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "KEY_PASSPHRASE_ENV",
    "SERVER_SENDER",
    "AuthError",
    "SignedRequest",
    "authority_of",
    "canonical_message",
    "check_private_files",
    "generate_key",
    "key_passphrase",
    "load_or_create_key",
    "load_private_key",
    "parse_public_key",
    "public_key_b64",
    "sign_headers",
    "signature_checks",
    "signed_by",
    "verify_signed",
    "write_private_key",
]
SERVER_SENDER = "server"
"""The consortium server's id as a sender (its reward queries) and as a recipient."""


HEADER_SENDER = "x-fedmor-sender"
"""Request header: the signer's id (a member's client id, or ``server``)."""
HEADER_TIMESTAMP = "x-fedmor-timestamp"
"""Request header: Unix seconds when the request was signed (checked against the clock skew)."""
HEADER_NONCE = "x-fedmor-nonce"
"""Request header: a single-use random token (replays are refused)."""
HEADER_SIGNATURE = "x-fedmor-signature"
"""Request header: base64 Ed25519 signature over the canonical message."""
HEADER_RECIPIENT = "x-fedmor-recipient"
"""Request header: the id of the party the request is for (a signed request cannot be replayed to
another)."""
HEADER_AUTHORITY = "x-fedmor-authority"
"""Request header: the receiver's ``host:port`` as the signer dialled it (lower-case, the port
always given); the receiver refuses one that is not its own, so a request cannot be relayed."""
HEADER_CONTENT_SHA256 = "x-fedmor-content-sha256"  # signed: checked before the body is read
"""Request header: the body's hex sha256, signed, so the signature is checked before the body is
read."""
# One answer for an unknown sender and a bad signature: a caller cannot probe which ids exist.
BAD_SIGNATURE = "unknown sender or bad signature"
_log = logging.getLogger("fedmor.auth")
_checks_lock = threading.Lock()
_checks = {"passed": 0, "failed": 0}  # Ed25519 verifications in this process, by outcome


def signature_checks() -> dict[str, float]:
    """How many request signatures this process verified, by outcome (``passed``,
    ``failed``): each is one Ed25519 verification, the costliest step of a request's auth."""
    with _checks_lock:
        return {k: float(v) for k, v in _checks.items()}


class AuthError(ValueError):
    """A request's authentication is missing or wrong; ``status`` is 401 or 403."""

    def __init__(self, message: str, *, status: int = 401) -> None:
        self.status = status
        super().__init__(message)


class SignedRequest:
    """The authentication fields parsed from one request's headers."""

    def __init__(self, *, sender: str, timestamp: int, nonce: str, signature: bytes,
                 recipient: str, content_sha256: str, authority: str) -> None:
        self.authority = authority
        self.content_sha256 = content_sha256
        self.sender = sender
        self.recipient = recipient
        self.timestamp = timestamp
        self.nonce = nonce
        self.signature = signature

    @classmethod
    def from_headers(cls, headers: dict[str, str]) -> SignedRequest:
        """Parse the auth headers; raise ``AuthError`` (401) naming the missing/bad one."""
        lower = {k.lower(): v for k, v in headers.items()}
        missing = [h for h in (HEADER_SENDER, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE,
                               HEADER_RECIPIENT, HEADER_CONTENT_SHA256, HEADER_AUTHORITY)
                   if not lower.get(h)]
        if missing:
            raise AuthError(f"missing authentication header(s): {', '.join(missing)}")
        try:
            timestamp = int(lower[HEADER_TIMESTAMP])
        except ValueError:
            raise AuthError(f"header {HEADER_TIMESTAMP} is not an integer") from None
        nonce = lower[HEADER_NONCE]
        if not 8 <= len(nonce) <= 64 or not nonce.isalnum():
            raise AuthError(f"header {HEADER_NONCE} must be 8-64 alphanumeric characters")
        try:
            signature = base64.b64decode(lower[HEADER_SIGNATURE], validate=True)
        except (binascii.Error, ValueError):
            raise AuthError(f"header {HEADER_SIGNATURE} is not base64") from None
        content = lower[HEADER_CONTENT_SHA256].lower()
        if len(content) != 64 or any(c not in "0123456789abcdef" for c in content):
            raise AuthError(f"header {HEADER_CONTENT_SHA256} must be a hex sha256")
        return cls(sender=lower[HEADER_SENDER], timestamp=timestamp, nonce=nonce,
                   signature=signature, recipient=lower[HEADER_RECIPIENT],
                   content_sha256=content, authority=lower[HEADER_AUTHORITY])


_DEFAULT_PORTS = {"https": 443, "http": 80}


def authority_of(url: str) -> str:
    """The ``host:port`` a signature names for a receiver at ``url``: the host lower-case
    (an IPv6 address in brackets), the port always given (443 for https, 80 for http when the
    URL leaves it out), so a signer and a verifier write one receiver one way."""
    parts = urllib.parse.urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise ValueError(f"{url!r} has no valid port") from None
    host = parts.hostname.rstrip(".").lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def canonical_message(*, method: str, path: str, body: bytes, timestamp: int, nonce: str,
                      sender: str, recipient: str, authority: str,
                      body_sha256: str | None = None) -> bytes:
    """The exact bytes that are signed for one request (``authority``: see
    :func:`authority_of`; ``body_sha256``: the body's hex sha256 if the caller already has
    it)."""
    digest = hashlib.sha256(body).hexdigest() if body_sha256 is None else body_sha256
    return "\n".join([method.upper(), path, digest, str(timestamp), nonce, sender,
                      recipient, authority]).encode()


def sign_headers(key: Ed25519PrivateKey, *, sender: str, method: str, path: str, body: bytes,
                 authority: str, recipient: str = SERVER_SENDER,
                 now: float | None = None) -> dict[str, str]:
    """Headers that authenticate one request from ``sender`` to ``recipient`` (a member's
    client id, or the server) reached at ``authority`` (the receiver's ``host:port`` as
    dialled: :func:`authority_of` of its URL); ``path`` includes the query."""
    timestamp = int(time.time() if now is None else now)
    nonce = secrets.token_hex(16)
    digest = hashlib.sha256(body).hexdigest()
    message = canonical_message(method=method, path=path, body=body, timestamp=timestamp,
                                nonce=nonce, sender=sender, recipient=recipient,
                                authority=authority, body_sha256=digest)
    return {
        HEADER_SENDER: sender,
        HEADER_RECIPIENT: recipient,
        HEADER_AUTHORITY: authority,
        HEADER_CONTENT_SHA256: digest,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: base64.b64encode(key.sign(message)).decode(),
    }


def verify_signed(request: SignedRequest, public_key: Ed25519PublicKey, *, method: str,
                  path: str, body: bytes, max_skew_s: float, recipient: str,
                  authorities: Collection[str], now: float | None = None,
                  body_sha256: str | None = None) -> None:
    """Check the recipient (``recipient``: this receiver's own id), the authority (one of
    ``authorities``: the ``host:port`` forms this receiver is reached at), the signature and
    the clock skew; raise ``AuthError`` otherwise.

    The signature comes before the clock: a caller without the sender's key learns nothing
    about the sender (``BAD_SIGNATURE`` is also the answer to an unknown sender). Nonce reuse is
    checked by the caller, which owns the nonce store.
    """
    current = time.time() if now is None else now
    if request.recipient != recipient:
        raise AuthError("request addressed to another recipient", status=403)
    if request.authority not in authorities:
        # A relayed request, or a caller that reaches this app by a name it was not told of.
        raise AuthError(f"request signed for {request.authority!r}, not for this receiver "
                        f"(reached at {', '.join(sorted(authorities)) or 'no address'}; "
                        f"setting public_urls): a request signed for another server is "
                        f"refused")
    if not signed_by(request, public_key, method=method, path=path, body=body,
                     recipient=recipient, body_sha256=body_sha256):
        _log.info("bad signature for sender %r", request.sender)
        raise AuthError(BAD_SIGNATURE, status=403)
    if abs(current - request.timestamp) > max_skew_s:
        raise AuthError(f"timestamp {request.timestamp} is more than {max_skew_s:g} s away "
                        f"from the server clock")


def signed_by(request: SignedRequest, public_key: Ed25519PublicKey, *, method: str, path: str,
              body: bytes, recipient: str, body_sha256: str | None = None) -> bool:
    """Whether ``public_key`` made ``request``'s signature over its own authority header (no
    recipient, authority or clock check)."""
    message = canonical_message(method=method, path=path, body=body,
                                timestamp=request.timestamp, nonce=request.nonce,
                                sender=request.sender, recipient=recipient,
                                authority=request.authority, body_sha256=body_sha256)
    try:
        public_key.verify(request.signature, message)
    except InvalidSignature:
        passed = False
    else:
        passed = True
    with _checks_lock:
        _checks["passed" if passed else "failed"] += 1
    return passed


def generate_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 identity key."""
    return Ed25519PrivateKey.generate()


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw 32-byte public key, base64 (the form used in rosters and on the wire)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def parse_public_key(text: str) -> Ed25519PublicKey:
    """Parse a base64 raw Ed25519 public key; raise ``ValueError`` naming the problem."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("public key is not base64") from None
    if len(raw) != 32:
        raise ValueError(f"public key must be 32 bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


KEY_PASSPHRASE_ENV = "FEDMOR_KEY_PASSPHRASE"
"""Environment variable holding the passphrase of an encrypted identity key (else the
``identity_key_passphrase_file`` setting names a file holding it)."""


def key_passphrase(path: Path | None = None) -> bytes | None:
    """The identity key's passphrase: ``FEDMOR_KEY_PASSPHRASE``, else the first line of the
    file at ``path`` (refused when other users may read it), else None (a plain key)."""
    found = os.environ.get(KEY_PASSPHRASE_ENV)
    if found:
        return found.encode()
    if path is None:
        return None
    check_private_files(path)
    text = path.read_text().splitlines()
    if not text or not text[0]:
        raise ValueError(f"passphrase file {path} is empty")
    return text[0].encode()


def load_private_key(path: Path, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """Load a PEM (PKCS#8) Ed25519 private key, encrypted when ``passphrase`` is given; a
    ``ValueError`` says what is missing (the passphrase, or the right one)."""
    data = path.read_bytes()
    encrypted = b"ENCRYPTED PRIVATE KEY" in data
    if encrypted and passphrase is None:
        raise ValueError(f"identity key {path} is encrypted: set {KEY_PASSPHRASE_ENV} or the "
                         f"identity_key_passphrase_file setting to its passphrase")
    try:
        key = serialization.load_pem_private_key(data, password=passphrase if encrypted
                                                 else None)
    except ValueError:
        if encrypted:
            raise ValueError(f"identity key {path}: wrong passphrase") from None
        raise
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    if passphrase is not None and not encrypted:
        _log.warning("identity key %s is not encrypted although a passphrase is configured; "
                     "encrypt it with fedmor keys new --encrypt and a rotation", path)
    return key


def write_private_key(key: Ed25519PrivateKey, path: Path, passphrase: bytes | None = None) -> None:
    """Write ``key`` as PEM PKCS#8 to a new file (mode 0600; it must not exist), encrypted
    with ``passphrase`` when given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase
        else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            encryption)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)


def check_private_files(*paths: Path | None) -> None:
    """Refuse (``PermissionError`` naming the file and its mode) a key or database that other
    users may read or write; a database's -wal and -shm files are checked with it. Missing
    files are skipped: the apps create them owner-only."""
    for path in paths:
        if path is None or str(path) == ":memory:":
            continue
        for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            if not candidate.exists():
                continue
            mode = candidate.stat().st_mode & 0o777
            if mode & 0o077:
                raise PermissionError(
                    f"{candidate} has mode {mode:o}: other users may read it; run "
                    f"chmod 600 {candidate} (or set allow_readable_files to start anyway)")


def load_or_create_key(path: Path, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """Load the key at ``path``, or create it there (mode 0600) if missing: encrypted with
    ``passphrase`` when one is given (see :func:`key_passphrase`)."""
    if path.exists():
        return load_private_key(path, passphrase)
    key = generate_key()
    write_private_key(key, path, passphrase)
    return key
