"""A local consortium of real processes (one server, N client apps) on 127.0.0.1.

Used by the tests, the benchmarks and the demo: it writes each process's settings file, a
roster with fresh identity keys and tokens (the wire contract's roster format), optionally a
throw-away PKI (``fedmor_local._pki``), starts ``python -m server_app`` / ``python -m client_app``,
waits for ``/v1/health`` and stops (or SIGKILLs) them. It imports neither app: it starts them
by module name and talks to them over REST, as an operator would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from fedmor_local._pki import client_cert_paths, make_pki
from fedmor_local._ports import free_port
from sdk.membership import add_to_roster
from sdk.wire import (
    EnrollRequest,
    EnrollResponse,
    Role,
    SignedClient,
    load_or_create_key,
    public_key_b64,
    tls_verify,
)

__all__ = ["ADMIN_TOKEN", "OPEN_POLICY", "LocalConsortium", "wait_healthy"]

ADMIN_TOKEN = "local-admin-token"
"""The admin bearer token of a local consortium's server (127.0.0.1 only; never for a deployment)."""
OPEN_POLICY: dict[str, Any] = {
    "round_kinds": ["router_secagg", "rm_fedavg"], "min_participants": 1, "min_threshold": 1,
    "min_local_samples": 1, "allow_captured_rounds": True}
"""A site policy that takes part in every round: for tests and benchmarks of the protocols on
throw-away data, never for a site (the client app's defaults refuse plain and small rounds)."""
FAIL_SAFE_S = 600.0
"""How long a wait on a running process may last before it counts as hung: a start on a loaded
machine takes minutes, and a process that exits ends the wait at once."""
_OPERATOR = "operator"  # the harness's own client certificate under mutual TLS
_REPO = Path(__file__).resolve().parents[2]  # so ``python -m server_app`` finds the packages


def wait_healthy(url: str, *, verify: Any, proc: subprocess.Popen[bytes] | None = None,
                 timeout_s: float = FAIL_SAFE_S, client: httpx.Client | None = None) -> None:
    """Poll ``url``/v1/health until it answers 200; raise if the process ``proc`` exited or
    ``timeout_s`` ran out.

    One ``client`` serves every poll: a new one per poll would build a TLS context each time,
    which costs far more CPU than the poll and competes with the processes being waited for.
    """
    if client is None:
        with httpx.Client(verify=verify, timeout=2) as probe:
            wait_healthy(url, verify=verify, proc=proc, timeout_s=timeout_s, client=probe)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            if client.get(f"{url}/v1/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout_s:g} s")


class LocalConsortium:
    """One server and ``n_clients`` client apps as subprocesses under ``workdir``."""

    def __init__(self, workdir: Path, n_clients: int, *, tls: bool = False, mtls: bool = False,
                 server: dict[str, Any] | None = None,
                 clients: dict[str, Any] | None = None, demo: bool = False,
                 policy: dict[str, Any] | None = None,
                 identities: dict[str, Role] | None = None,
                 capture: Path | None = None, updates: Mapping[str, str] | None = None) -> None:
        """``demo``: the clients may stand in the hash scorer and random updates for what
        ``clients`` leaves unconfigured; ``policy``: the clients' site policy (None: the client
        app's safe default); ``identities``: non-member identities (name -> role);
        ``capture``: the server's capture directory (capture mode on, announced in every
        round's info); ``updates``: member name -> ``module:function``, a Python router update
        that member runs (``fedmor_local._member``) in place of its configured one; ``mtls``
        (implies ``tls``): the server requires a client certificate from every caller, and each
        client app, identity and this harness's operator get one from the CA."""
        # Absolute: the apps run with the checkout as their folder and read these paths.
        self.dir = workdir = Path(workdir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        tls = tls or mtls
        self.tls, self.mtls = tls, mtls
        self.names = [f"site-{i}" for i in range(n_clients)]
        self.updates = dict(updates or {})
        # Client certificates: one per member and identity, and the operator's (this harness).
        certified = [*self.names, *(identities or {}), _OPERATOR] if mtls else []
        self.pki = make_pki(workdir / "pki", certified) if tls else None
        ca = self.pki[0] if self.pki else None
        self.verify: Any = tls_verify(ca)
        scheme = "https" if tls else "http"
        self.server_port = free_port()
        self.server_url = f"{scheme}://127.0.0.1:{self.server_port}"
        roster = workdir / "roster.json"
        # Members first, then the other identities: each gets its roster entry in this order.
        self.client_cfg: dict[str, dict[str, Any]] = {
            name: self._member_config(name, roster, demo=demo, policy=policy,
                                      options=clients or {}) for name in self.names}
        # Non-member identities (name -> role): a key file and a one-time token each, enrolled by
        # whoever runs as them (``identity_key`` and ``enrollment_token`` in ``identity_cfg``).
        self.identity_cfg: dict[str, dict[str, Any]] = {
            name: self._identity_config(name, role, roster)
            for name, role in (identities or {}).items()}
        self.server_cfg = self._server_config(roster, capture, server or {})
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        operator = self._client_cert(_OPERATOR)
        self.cert = (operator["tls_client_cert"], operator["tls_client_key"]) if mtls else None
        """The operator's client certificate and key (mutual TLS), else None."""
        # ``verify`` stays certificate-less: it is what a caller without a certificate uses.
        self.operator_tls: Any = tls_verify(ca, self.cert)
        self._probe = httpx.Client(verify=self.operator_tls, timeout=2)  # health polls
        # The server's first DP round loads its accountant (opacus, torch) before it
        # answers: tens of seconds on a loaded machine, hence the long timeout.
        self.ops = SignedClient(http=httpx.Client(
            base_url=self.server_url, verify=self.operator_tls, timeout=120,
            headers={"authorization": f"Bearer {ADMIN_TOKEN}"}))
        """The operator's one client (the admin token): typed, each refusal a
        ``RequestRefused``; :attr:`admin` is its raw side."""

    @property
    def admin(self) -> httpx.Client:
        """The operator's client's connections (the admin token) for a raw request: the
        response whatever its status (a test's refusal, a router's bytes)."""
        return self.ops.http

    def _member_config(self, name: str, roster: Path, *, demo: bool,
                       policy: dict[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
        """Member ``name``'s settings: its key, roster entry and port, then ``options``."""
        key_path, token = self._roster_entry(name, roster, "member")
        port = free_port()
        scheme = "https" if self.tls else "http"
        return {
            "name": name, "server_url": self.server_url, "enrollment_token": token,
            "identity_key": str(key_path), "db_path": str(self.dir / name / "client.db"),
            "roster_file": str(roster), "port": port,
            "public_url": f"{scheme}://127.0.0.1:{port}", "poll_interval_s": 0.05,
            "retry_max_s": 0.5, "demo": demo, "allow_plain_http": not self.tls,
            **self._tls("server_ca"),
            **self._client_cert(name),
            **({"policy": policy} if policy is not None else {}), **options}

    def add_member(self, name: str, **options: Any) -> None:
        """A member that joins later: its key, its roster entry (the running server follows the
        roster file) and its settings, the first member's with ``options``; start it with
        :meth:`start_client`. Not under mutual TLS (the CA issued its certificates at start)."""
        if self.mtls:
            raise ValueError("a member added after the start has no client certificate")
        first = self.client_cfg[self.names[0]]
        self.client_cfg[name] = {**first, **self._member_config(
            name, Path(self.server_cfg["roster_file"]), demo=first["demo"],
            policy=first.get("policy"), options=options)}

    def _identity_config(self, name: str, role: Role, roster: Path) -> dict[str, Any]:
        """A non-member identity's key file, roster entry and one-time token."""
        key_path, token = self._roster_entry(name, roster, role)
        return {"name": name, "identity_key": str(key_path), "enrollment_token": token,
                "role": role, **self._client_cert(name)}

    def _roster_entry(self, name: str, roster: Path, role: Role) -> tuple[Path, str]:
        """``name``'s key file (made under this folder) and its one-time enrollment token from
        the roster entry written for it."""
        key_path = self.dir / name / "identity.pem"
        return key_path, add_to_roster(roster, name=name, role=role,
                                       public_key=public_key_b64(load_or_create_key(key_path)))

    def _server_config(self, roster: Path, capture: Path | None,
                       options: dict[str, Any]) -> dict[str, Any]:
        """The server's settings, then ``options``."""
        tls = self.tls
        return {
            "db_path": str(self.dir / "server" / "server.db"),
            "identity_key": str(self.dir / "server" / "identity.pem"),
            "roster_file": str(roster), "admin_token": ADMIN_TOKEN, "port": self.server_port,
            "tick_interval_s": 0.2, "allow_http_reward_urls": not tls,
            "allow_plain_http": not tls,
            "allow_private_reward_urls": True, **self._tls("tls_ca"),  # members on 127.0.0.1
            **({"capture": {"enabled": True, "dir": str(capture)}} if capture else {}),
            # The DP accountant (opacus, torch) loads at the first DP round instead of at every
            # start: few of the harness's servers run one, and the import is seconds of CPU.
            "preload_dp_accountant": False,
            "require_client_cert": self.mtls, **options}

    def _tls(self, ca_field: str) -> dict[str, Any]:
        if self.pki is None:
            return {}
        ca, cert, key = self.pki
        return {ca_field: str(ca), "tls_cert": str(cert), "tls_key": str(key)}

    def _client_cert(self, name: str) -> dict[str, str]:
        if not self.mtls or self.pki is None:
            return {}
        cert, key = client_cert_paths(self.pki[0].parent, name)
        return {"tls_client_cert": str(cert), "tls_client_key": str(key)}

    def _spawn(self, who: str, module: str, cfg: dict[str, Any],
               *args: str) -> subprocess.Popen[bytes]:
        path = self.dir / f"{who}.json"
        path.write_text(json.dumps(cfg))
        log = (self.dir / f"{who}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", module, *args, "--config", str(path)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=_REPO)
        self.procs[who] = proc
        return proc

    def start_server(self) -> None:
        """Start (or restart) the server and wait until it is healthy."""
        proc = self._spawn("server", "server_app", self.server_cfg)
        wait_healthy(self.server_url, verify=self.verify, proc=proc, client=self._probe)

    def start_client(self, name: str, wait: bool = True, **overrides: Any) -> None:
        """Start one client app (it enrolls and runs rounds in the background)."""
        cfg = {**self.client_cfg[name], **overrides}
        update = self.updates.get(name)
        proc = self._spawn(name, "client_app", cfg) if update is None \
            else self._spawn(name, "fedmor_local._member", cfg, update)
        if wait:
            wait_healthy(cfg["public_url"], verify=self.verify, proc=proc, client=self._probe)

    def start(self) -> LocalConsortium:
        """Start the server and every client; wait until all clients are enrolled."""
        self.start_server()
        for name in self.names:
            self.start_client(name, wait=False)
        for name in self.names:
            wait_healthy(self.client_cfg[name]["public_url"], verify=self.verify,
                         proc=self.procs[name], client=self._probe)
        return self

    def cpu_s(self, *who: str) -> float:
        """CPU seconds (user and system) the named processes (all when none is named) used so
        far; 0 where ``/proc`` cannot tell (another OS, a process gone)."""
        total = 0.0
        for name in who or tuple(self.procs):
            try:
                stat = Path(f"/proc/{self.procs[name].pid}/stat").read_text()
            except OSError:
                return 0.0
            ticks = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
            total += (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def kill(self, who: str) -> None:
        """SIGKILL one process (a crash)."""
        proc = self.procs.pop(who)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self, who: str) -> None:
        """Stop one process gracefully."""
        proc = self.procs.pop(who)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Stop everything."""
        # This harness's idle keep-alive connections first: over TLS an app's shutdown gives
        # an idle peer a moment to answer its TLS close before cutting the connection.
        self.ops.http.close()
        self._probe.close()
        clients = [w for w in self.procs if w != "server"]
        for who in clients:  # all at once: each shutdown takes a while
            self.procs[who].terminate()
        for who in [*clients, "server"] if "server" in self.procs else clients:
            self.stop(who)

    def __enter__(self) -> LocalConsortium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- admin helpers -------------------------------------------------------------------------
    def enroll(self, name: str) -> str:
        """Enroll ``name`` (a member or another identity) with its one-time token and key, as
        its own process would; its client id."""
        cfg = self.client_cfg.get(name) or self.identity_cfg[name]
        body = EnrollRequest.of(load_or_create_key(Path(cfg["identity_key"])), name=name,
                                token=cfg["enrollment_token"])
        with SignedClient(self.server_url, verify=self.operator_tls, timeout_s=60) as client:
            return client.post("/v1/enroll", body, EnrollResponse).client_id

    def enrolled(self) -> list[str]:
        """Member ids the server knows, by name (from its own store file)."""
        import sqlite3

        with sqlite3.connect(self.server_cfg["db_path"]) as db:
            return [r[0] for r in db.execute("SELECT client_id FROM clients WHERE "
                                             "role='member' ORDER BY name")]

    def wait_enrolled(self, timeout_s: float = FAIL_SAFE_S) -> list[str]:
        """Block until every client has enrolled; returns their ids. It waits as long as the
        server and the clients run, since a loaded machine may take minutes to start them (a
        process that exits raises, naming its log); ``timeout_s`` only stops a hang."""
        deadline = time.monotonic() + timeout_s
        while len(ids := self.enrolled()) < len(self.names):
            self._running("every client enrolled", "server", *self.names)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(ids)} of {len(self.names)} clients enrolled after "
                                   f"{timeout_s:g} s: see their logs in {self.dir}")
            time.sleep(0.1)
        return ids

    def _running(self, awaited: str, *who: str) -> None:
        """Raise, naming its log, if one of the started processes ``who`` has exited: what the
        caller waits for (``awaited``) will not come."""
        for name in who:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} before {awaited}: see "
                                   f"{self.dir / f'{name}.log'}")

    def create_round(self, **body: Any) -> dict[str, Any]:
        """POST /v1/rounds as admin (``body``: a ``RoundCreate``)."""
        return self.ops.post("/v1/rounds", body, dict[str, Any])

    def publish_router(self, params: Any) -> dict[str, Any]:
        """POST /v1/router as admin: the federation's starting router (float32 (P,))."""
        import numpy as np

        body = np.ascontiguousarray(params, dtype="<f4").tobytes()
        return self.ops.post("/v1/router", body, dict[str, Any])

    def round(self, round_id: int) -> dict[str, Any]:
        """GET /v1/rounds/{id} as admin."""
        return self.ops.get(f"/v1/rounds/{round_id}", dict[str, Any])

    def wait_round(self, round_id: int, timeout_s: float = FAIL_SAFE_S) -> dict[str, Any]:
        """Block until a round is finished or failed: the server ends it by itself (a stage
        that misses its deadline fails it), so ``timeout_s`` only stops a hang."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._running(f"round {round_id} ended", "server")
            try:
                info = self.round(round_id)
            except httpx.RemoteProtocolError:
                # The server closed the idle keep-alive connection as this poll reused it (a
                # descheduled process can sit idle past the keep-alive): poll again.
                continue
            if info["status"] != "open":
                return info
            time.sleep(0.05)
        raise TimeoutError(f"round {round_id} still open after {timeout_s:g} s")

    def run_round(self, timeout_s: float = FAIL_SAFE_S, **body: Any) -> dict[str, Any]:
        """Open a round as admin (``body``: a ``RoundCreate``) and wait until it finished;
        raises if it failed."""
        done = self.wait_round(self.create_round(**body)["round_id"], timeout_s=timeout_s)
        if done["status"] != "finished":
            raise RuntimeError(f"round {done['round_id']} failed: {done['error']}")
        return done

    def publish_router_round(self, router: Mapping[str, Any], *, encoder_id: str | None = None,
                             params: Mapping[str, Any] | None = None,
                             timeout_s: float = FAIL_SAFE_S) -> dict[str, Any]:
        """Publish a new router version by one secure round of every member (``router_secagg``)
        and return the finished round.

        ``router``: the ``RouterConfig`` fields of the router the server's alignment settings
        name; the round's vector is that router's parameters, one arm per member, over
        ``encoder_id``'s features (default: the hashing encoder, which the demo members use).
        ``params``: the round's params (default ``clip_range`` 8.0, room above the demo members'
        updates in [-0.5, 0.5]).
        """
        from sdk.router import HashingEncoder, Router, RouterConfig

        features = HashingEncoder().encoder_id if encoder_id is None else encoder_id
        length = Router(RouterConfig(**router), self.names, features).num_params()
        return self.run_round(timeout_s=timeout_s, kind="router_secagg", vector_length=length,
                              min_clients=len(self.names),
                              params=dict(params) if params is not None else {"clip_range": 8.0})
