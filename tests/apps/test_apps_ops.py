"""Operations on real processes: readiness, Prometheus metrics, and an online backup that,
restored after a restart, completes the next round."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_app._demo import demo_params
from fedmor_local import LocalConsortium
from fedmor_local._local import FAIL_SAFE_S

from .conftest import running

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    with running(tmp_path_factory.mktemp("ops"), 3, demo=True,
                 server={"stage_deadline_s": 30.0, "log_format": "json"}) as c:
        yield c


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the metrics:\n{text}")


def _metrics_once(c: LocalConsortium, url: str, name: str) -> str:
    """The app's metrics once they show ``name`` (a process that exits or the harness's
    fail-safe ends the wait)."""
    deadline = time.monotonic() + FAIL_SAFE_S
    while (name + " ") not in (text := c._probe.get(f"{url}/metrics").text):
        c._running(f"{name} in {url}/metrics", *c.procs)
        assert time.monotonic() < deadline, f"{name} not in the metrics:\n{text}"
        time.sleep(0.05)
    return text


def test_readiness_and_metrics(ops: LocalConsortium) -> None:
    client_url = ops.client_cfg[ops.names[0]]["public_url"]
    for url in (ops.server_url, client_url):
        ready = ops._probe.get(f"{url}/v1/ready")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    refused = ops.create_round(kind="rm_fedavg", vector_length=4, min_clients=3)
    assert ops.wait_round(refused["round_id"], timeout_s=25)["status"] == "failed"
    done = ops.create_round(kind="router_secagg", vector_length=4, min_clients=3,
                            params=demo_params(samples=3))
    assert ops.wait_round(done["round_id"], timeout_s=60)["status"] == "finished"
    server = ops._probe.get(f"{ops.server_url}/metrics").text
    assert _metric(server, 'fedmor_server_rounds{status="finished"}') == 1
    assert _metric(server, 'fedmor_server_rounds{status="failed"}') == 1
    assert _metric(server, 'fedmor_server_refusals{reason="round_kind"}') == 3
    assert _metric(server, 'fedmor_server_requests_total{method="POST",route="/v1/rounds",'
                           'status="200"}') == 2
    # The member counts its round done once the server's ack of its last message reaches it,
    # which may be after the server finished the round: wait for that count.
    client = _metrics_once(ops, client_url, 'fedmor_client_rounds{status="done"}')
    assert _metric(client, 'fedmor_client_refusals{reason="round_kind"}') == 1
    assert _metric(client, 'fedmor_client_rounds{status="done"}') == 1
    assert 'fedmor_client_request_seconds_count{method="GET",route="/v1/ready"}' in client
    # The server logs JSON lines (log_format = "json"), one per round event and refusal.
    lines = [json.loads(line) for line in (ops.dir / "server.log").read_text().splitlines()
             if line.startswith("{")]
    messages = [(line["level"], line["msg"]) for line in lines]
    assert ("INFO", f"round {done['round_id']} opened: router_secagg over 3 participants") \
        in messages
    assert sum(level == "WARNING" and "refused round" in msg for level, msg in messages) == 3


def _backup(ops: LocalConsortium, module: str, who: str, out: Path) -> None:
    run = subprocess.run([sys.executable, "-m", module, "backup", str(out), "--config",
                          str(ops.dir / f"{who}.json")], capture_output=True, text=True,
                         timeout=60, cwd=_REPO)
    assert run.returncode == 0, run.stderr
    assert "backed up" in run.stdout and out.stat().st_mode & 0o777 == 0o600


def _restore(backup: Path, db: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(db + suffix).unlink(missing_ok=True)
    shutil.copy2(backup, db)  # keeps its mode 0600: the app refuses a readable database


def test_restore_from_an_online_backup_completes_the_next_round(ops: LocalConsortium,
                                                               tmp_path: Path) -> None:
    first = ops.create_round(kind="router_secagg", vector_length=4, min_clients=3,
                             params=demo_params(samples=3))
    first_done = ops.wait_round(first["round_id"], timeout_s=60)
    assert first_done["status"] == "finished"
    # Backups of the running server and of one running member.
    _backup(ops, "server_app", "server", tmp_path / "server.db")
    site = ops.names[0]
    _backup(ops, "client_app", site, tmp_path / "client.db")
    with pytest.raises(subprocess.CalledProcessError):  # never over an existing file
        subprocess.run([sys.executable, "-m", "server_app", "backup", str(tmp_path / "server.db"),
                        "--config", str(ops.dir / "server.json")], check=True,
                       capture_output=True, timeout=60, cwd=_REPO)
    # A round after the backup, lost with the disk: the restored server does not know it.
    lost = ops.create_round(kind="router_secagg", vector_length=4, min_clients=3,
                            params=demo_params(samples=3))
    assert ops.wait_round(lost["round_id"], timeout_s=60)["status"] == "finished"
    ops.stop("server")
    ops.stop(site)
    _restore(tmp_path / "server.db", ops.server_cfg["db_path"])
    _restore(tmp_path / "client.db", ops.client_cfg[site]["db_path"])
    ops.start_server()
    ops.start_client(site)
    assert ops.round(first["round_id"])["status"] == "finished"
    nxt = ops.create_round(kind="router_secagg", vector_length=4, min_clients=3,
                           params=demo_params(samples=3))
    # The restored server hands out the lost round's id again; the members that ended the
    # lost round tell the two apart by the server's creation time and take part.
    assert nxt["round_id"] == lost["round_id"]
    done = ops.wait_round(nxt["round_id"], timeout_s=60)
    assert done["status"] == "finished" and done["dropouts"] == [], done
    assert done["base_version"] == first_done["router_version"]
