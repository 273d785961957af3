"""The server's reward service (routing, Neural TS, the reward rules) runs without trl,
transformers or peft: a server with an ``[alignment]`` section never imports the GRPO trainer or
a model library, which only the aligner and the members need."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

# Runs in a fresh interpreter, so nothing another test imported hides an import of trl.
_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import numpy as np
    from fastapi.testclient import TestClient

    from sdk.router import HashingEncoder, HashingEncoderConfig, Router, RouterConfig
    from sdk.membership import add_to_roster
    from sdk.wire import generate_key, public_key_b64
    from server_app import ServerSettings
    from server_app._app import create_app

    tmp = Path(sys.argv[1])
    router_cfg = {"d_model": 16, "num_layers": 1, "num_heads": 2, "dim_feedforward": 32}
    keys = [generate_key() for _ in range(2)]
    roster = tmp / "roster.json"
    tokens = [add_to_roster(roster, name=f"m{i}", public_key=public_key_b64(k))
              for i, k in enumerate(keys)]
    cfg = ServerSettings(db_path=tmp / "s.db", identity_key=tmp / "id.pem", roster_file=roster,
                         admin_token="adm", alignment={"router": router_cfg},
                         public_urls=["http://testserver"])
    with TestClient(create_app(cfg)) as tc:
        for i, (key, token) in enumerate(zip(keys, tokens)):
            enrolled = tc.post("/v1/enroll", json={"name": f"m{i}", "token": token,
                                                   "public_key": public_key_b64(key)})
            assert enrolled.status_code == 200, enrolled.text
        service = tc.app.state.rewards
        encoder = HashingEncoder(HashingEncoderConfig())
        router = Router(RouterConfig.model_validate(router_cfg), ["a", "b"], encoder.encoder_id)
        params = np.zeros(router.num_params(), dtype="<f4")
        service.store.add_version(None, params.tobytes(), params.size)
        built = {m: type(service._pipeline(m).reward_fn.selection).__name__
                 for m in ("mor", "mor_no_online", "avg_rm", "random")}
        before = sorted(m for m in ("trl", "transformers", "peft") if m in sys.modules)
        import sdk.alignment
        sdk.alignment.align  # the training side: this one must load trl
        print(json.dumps({"built": built, "trl_before": before,
                          "trl_after_grpo": "trl" in sys.modules}))
""")


def test_server_alignment_service_does_not_import_trl(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["built"] == {"mor": "MoRSelection", "mor_no_online": "MoRNoOnline",
                               "avg_rm": "AvgRM", "random": "RandomSelection"}
    assert result["trl_before"] == [], "building the server's reward pipelines imported these"
    # the check can see trl: GRPO itself, one attribute away, does import it
    assert result["trl_after_grpo"] is True
