"""``reroute plan`` words a refusal in its own flags (``--via``, ``--strategy``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"


def test_plan_refusals_name_the_cli_flags(tmp_path: Path) -> None:
    env = {**os.environ, "REROUTE_RUN_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "services.reroute.cli", "plan", "--topology", str(NGNCS)]
    flow = ["--flow", "10.0.0.2>10.0.0.3"]
    # no fabric in this run dir: planned on the initial state, the flow on long
    short = subprocess.run([*cmd, *flow, "--to", "short"], capture_output=True, text=True, env=env)
    assert short.returncode == 1, short.stderr
    assert "(--via temporary); or --strategy bbm moves" in short.stderr, short.stderr
    via = subprocess.run(
        [*cmd, *flow, "--to", "temporary", "--via", "long"], capture_output=True, text=True, env=env
    )
    assert via.returncode == 1 and "leave out --via" in via.stderr, via.stderr
    assert "via=" not in short.stderr + via.stderr
    lock = subprocess.run(
        [*cmd, *flow, "--to", "temporary", "--lock-timeout-ms", "500"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert lock.returncode == 1, lock.stderr
    assert "--lock-timeout-ms bounds the wait" in lock.stderr, lock.stderr
    assert "it crosses no optical switch" in lock.stderr and "leave it out" in lock.stderr
