"""What ``fedmor client`` checks before it starts, and ``fedmor client check`` on demand: every
path and setting the member will need, and the server, each named by its key in the settings
file with the fix. A member that would fail later (at its first round, its first reward query,
or silently waiting for an enrollment it cannot make) refuses to start instead; an enrolled
member whose identity and server checks pass tells the server which settings failed (their keys
and the kind of problem, never a path: see ``_causes``), so the operator sees why it is silent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from client_app._settings import ClientSettings
from sdk.wire import (
    RequestRefused,
    RoundInfo,
    SignedClient,
    check_private_files,
    key_passphrase,
    load_private_key,
    tls_verify,
)

__all__ = ["Check", "report", "report_refused_start", "run_checks"]

_TIMEOUT_S = 10.0  # one answer from a reachable server; a longer wait is the server's problem


@dataclass(frozen=True)
class Check:
    """One check's verdict: ``problem`` None when it passed, else what is wrong and the fix."""

    key: str
    ok: str
    problem: str | None = None
    kind: str = "invalid"
    """The kind of problem in words without a path (what the server may be told)."""


def _named(key: str) -> str:
    """``section.field`` as the settings file writes it: ``[section] field``."""
    section, _, field = key.rpartition(".")
    return f"[{section}] {field}" if section else field


def _enrolled_id(cfg: ClientSettings) -> str | None:
    """The client id this member's database holds, read without creating the database."""
    if not Path(cfg.db_path).is_file():
        return None
    try:
        with sqlite3.connect(f"{Path(cfg.db_path).resolve().as_uri()}?mode=ro",
                             uri=True) as db:
            row = db.execute("SELECT value FROM kv WHERE key='client_id'").fetchone()
    except sqlite3.Error as exc:  # the app could not open it either: say so, naming it
        raise ValueError(f"{cfg.db_path} cannot be read ({exc}): restore it from a copy "
                         f"`fedmor client backup` made, or point db_path at it") from exc
    return None if row is None else str(row[0])


def _files(cfg: ClientSettings) -> Iterator[tuple[str, Path | None, str]]:
    yield "server_ca", cfg.server_ca, "the CA bundle the operator handed out"
    yield "tls_cert", cfg.tls_cert, "this app's HTTPS certificate"
    yield "tls_key", cfg.tls_key, "this app's HTTPS key"
    yield "tls_client_cert", cfg.tls_client_cert, "this member's client certificate"
    yield "tls_client_key", cfg.tls_client_key, "this member's client certificate key"
    yield "roster_file", cfg.roster_file, "the consortium's roster copy"
    yield ("identity_key_passphrase_file", cfg.identity_key_passphrase_file,
           "the identity key's passphrase file")


def _identity(cfg: ClientSettings, enrolled: str | None) -> Check:
    path = cfg.identity_key
    if not path.exists():
        if enrolled is not None:
            return Check("identity_key", "", f"{path} is missing, but this member enrolled as "
                         f"{enrolled} with the key it held: restore the key file from its "
                         f"backup (a new key is a new identity the server does not know)")
        return Check("identity_key", f"{path} will be created (not enrolled yet)")
    try:
        if not cfg.allow_readable_files:
            check_private_files(path)
        load_private_key(path, key_passphrase(cfg.identity_key_passphrase_file))
    except (OSError, ValueError) as exc:
        return Check("identity_key", "", f"{path} cannot be used: {exc}")
    return Check("identity_key", f"{path}")


def _enrollment(cfg: ClientSettings, enrolled: str | None) -> Check:
    if enrolled is not None:
        return Check("enrollment_token", f"enrolled as {enrolled} (db_path {cfg.db_path})")
    if cfg.enrollment_token is None:
        return Check("enrollment_token", "", f"this member is not enrolled ({cfg.db_path} holds "
                     f"no client id) and has no token: set enrollment_token to the one-time "
                     f"token the operator's `fedmor roster add` printed")
    return Check("enrollment_token", "set: the member enrolls at start")


def _reward_model(cfg: ClientSettings) -> Check:
    found = cfg.reward_model_dir
    if found is not None:
        if not (found / "normalizer.json").is_file():
            what = "does not exist" if not found.exists() else "holds no normalizer.json"
            return Check("reward_model_dir", "", f"{found} {what}: point it at the folder "
                         f"`fedmor reward train` wrote (with normalizer.json)",
                         "not found" if not found.exists() else "no normalizer.json")
        if cfg.reward_base_dir is not None and not cfg.reward_base_dir.is_dir():
            return Check("reward_base_dir", "", f"{cfg.reward_base_dir} does not exist: point "
                         f"it at the base model the reward model was trained on", "not found")
        return Check("reward_model_dir", f"{found}")
    if cfg.scorer:
        return Check("scorer", cfg.scorer)
    if cfg.demo or not cfg.policy.serve_rewards:
        return Check("reward_model_dir", "not used (demo, or policy.serve_rewards = false)")
    return Check("reward_model_dir", "", "no reward model configured: set reward_model_dir "
                 "(the folder `fedmor reward train` wrote) or scorer (module:factory), or "
                 "policy.serve_rewards = false; demo = true (--demo) uses the hash scorer "
                 "instead", "not set")


def _training(cfg: ClientSettings, rounds: bool) -> Iterator[Check]:
    training = cfg.router_training
    if not rounds:
        yield Check("router_training.pairs_dir", "not used (no rounds)")
        return
    if training is None:
        if not cfg.demo:
            yield Check("router_training.pairs_dir", "", "no router training: add a "
                        "[router_training] section with pairs_dir (this member's pairs "
                        "folder), or run with --no-rounds", "not set")
        return
    for key, folder in (("pairs_dir", training.pairs_dir),
                        ("eval_pairs_dir", training.eval_pairs_dir)):
        if folder is None:
            continue
        if not (folder / "pairs.jsonl").is_file():
            what = "does not exist" if not folder.exists() else "holds no pairs.jsonl"
            yield Check(f"router_training.{key}", "", f"{folder} {what}: import the pairs "
                        f"there (`fedmor data import ...`) or correct the path",
                        "not found" if not folder.exists() else "no pairs.jsonl")
        else:
            yield Check(f"router_training.{key}", f"{folder}")


def _plain_http(cfg: ClientSettings) -> Check | None:
    """An ``http://`` server_url without the opt-in: this member's signed requests, round
    messages and the server's answers would cross the network unencrypted."""
    if urlsplit(cfg.server_url).scheme.lower() != "http" or cfg.allow_plain_http:
        return None
    return Check("server_url", "", f"{cfg.server_url} is plain http: use the server's "
                 f"https:// URL (with server_ca), or set allow_plain_http = true (a local "
                 f"test on 127.0.0.1 only)", "plain http")


def _server(cfg: ClientSettings, enrolled: str | None, key_ok: bool) -> Check:
    """The server answers its health probe, and (enrolled) still takes this identity."""
    try:
        verify = tls_verify(cfg.server_ca, (str(cfg.tls_client_cert), str(cfg.tls_client_key))
                            if cfg.tls_client_cert and cfg.tls_client_key else None)
        health = httpx.get(f"{cfg.server_url.rstrip('/')}/v1/health", verify=verify,
                           timeout=_TIMEOUT_S)
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return Check("server_url", "", f"{cfg.server_url} cannot be reached ({exc}): start "
                     f"the server or correct server_url (and server_ca for HTTPS)")
    if health.status_code != 200:
        return Check("server_url", "", f"{cfg.server_url}/v1/health answers "
                     f"{health.status_code}: is server_url the consortium server?")
    if enrolled is None or not key_ok:
        return Check("server_url", f"{cfg.server_url} answers")
    key = load_private_key(cfg.identity_key, key_passphrase(cfg.identity_key_passphrase_file))
    with SignedClient(cfg.server_url, key=key, sender=enrolled, verify=verify,
                      timeout_s=_TIMEOUT_S) as http:
        try:
            http.get("/v1/rounds?status=open", list[RoundInfo])
        except RequestRefused as exc:
            if exc.status in (401, 403):
                return Check("server_url", "", f"{cfg.server_url} refuses this member "
                             f"({enrolled}): {exc.reason}; ask the operator (a revoked member "
                             f"needs a new identity: a new key and token)")
    return Check("server_url", f"{cfg.server_url} answers and knows this member as {enrolled}")


def run_checks(cfg: ClientSettings, *, rounds: bool, source: str,
               server: bool = True) -> list[Check]:
    """Every start-up check of ``cfg`` (``rounds``: it takes part in rounds), each named by
    its key in ``source`` (the settings file); ``server``: also ask the server."""
    try:
        enrolled, state = _enrolled_id(cfg), None
    except ValueError as exc:
        enrolled, state = None, Check("db_path", "", str(exc))
    identity = _identity(cfg, enrolled)
    checks = [identity, state or _enrollment(cfg, enrolled), _reward_model(cfg),
              *_training(cfg, rounds)]
    if (cfg.tls_client_cert is None) != (cfg.tls_client_key is None):
        checks.append(Check("tls_client_cert", "", "give both tls_client_cert and "
                            "tls_client_key (mutual TLS), or neither"))
    for key, path, what in _files(cfg):
        if path is not None:
            checks.append(Check(key, f"{path}") if path.is_file() else Check(
                key, "", f"{path} does not exist: set it to {what}", "not found"))
    plain = _plain_http(cfg)  # refused before anything is sent over it
    if plain is not None:
        checks.append(plain)
    elif server:
        checks.append(_server(cfg, enrolled, identity.problem is None))
    return [Check(_named(c.key) + ("" if c.problem is None else f" ({source})"), c.ok,
                  c.problem, c.kind) for c in checks]


def report(checks: list[Check], out: Callable[[str], None]) -> bool:
    """Print one line per check; True when every check passed."""
    for c in checks:
        out(f"ok    {c.key}: {c.ok}" if c.problem is None else f"FAIL  {c.key}: {c.problem}")
    return all(c.problem is None for c in checks)


_SIGNING = frozenset({"identity_key", "identity_key_passphrase_file", "enrollment_token",
                      "db_path", "server_url", "server_ca", "tls_client_cert", "tls_client_key"})
"""Checks without which the member cannot send the server a signed report."""


def report_refused_start(cfg: ClientSettings, failed: list[Check]) -> str | None:
    """Tell the server (one signed ``POST /v1/identity/status``) which of ``failed`` keep
    this enrolled member from starting, each as its setting key and the kind of problem;
    returns the line sent, or None when it could not be sent (not enrolled, a failing check
    it needs to sign or reach the server, or no answer)."""
    settings = [(c.key.split(" (", 1)[0], c.kind) for c in failed]
    if not settings or any(key in _SIGNING for key, _ in settings):
        return None
    line = "not started: " + "; ".join(f"{key}: {kind}" for key, kind in settings)
    try:
        enrolled = _enrolled_id(cfg)
        if enrolled is None:
            return None
        verify = tls_verify(cfg.server_ca, (str(cfg.tls_client_cert), str(cfg.tls_client_key))
                            if cfg.tls_client_cert and cfg.tls_client_key else None)
        key = load_private_key(cfg.identity_key,
                               key_passphrase(cfg.identity_key_passphrase_file))
        with SignedClient(cfg.server_url, key=key, sender=enrolled, verify=verify,
                          timeout_s=_TIMEOUT_S) as http:
            http.post("/v1/identity/status", {"problem": line[:500]})
    except (httpx.HTTPError, OSError, ValueError, RequestRefused):
        return None
    return line
