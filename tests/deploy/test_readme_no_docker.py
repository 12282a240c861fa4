"""README's "Without Docker" path, followed as written: each command of its block run in order in a fresh directory
(only the ports are moved to free ones, passed to the two `serve` commands that default to them, and `.venv/bin/chargeback` is this interpreter's), with Debian's prometheus
scraping the simulator; the doctor is clean on the simulator's policy and the portal comes up ready."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.support.billing import CLI
from tests.support.prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.prometheus


def readme_block(heading: str) -> list[str]:
    """The first indented code block after `heading` in README.md, one command per line."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n{heading}\n", 1)[1]
    block = re.search(r"\n\n((?:    .*\n)+)", section).group(1)
    return [line[4:] for line in block.splitlines() if line.strip()]


def wait_for(check, what: str, timeout_s: float = 120):
    """Poll `check` until it gives something true (the state, not a time, ends the wait)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)  # state-free: the next poll of the condition above


def doctor_as_documented(done: subprocess.CompletedProcess, as_json: subprocess.CompletedProcess):
    """The README's doctor outcome: no finding would mis-bill, or the only error is the namespace `scratch` that the
    simulator's policy leaves unclaimed on purpose (its jobs come and go). False while Prometheus has not scraped."""
    if done.returncode == 0:
        return "no finding would mis-bill" in done.stdout and done
    try:
        findings = json.loads(as_json.stdout)["findings"]
    except (ValueError, KeyError):
        return False
    errors = [(f["code"], f["detail"].split(" ", 1)[0]) for f in findings if f["severity"] == "error"]
    return done.returncode == 1 and errors == [("unclaimed-namespaces", "scratch")] and done


def test_readme_without_docker_works_as_written(tmp_path):
    commands = readme_block("## Without Docker")
    assert commands and commands[-1].startswith(".venv/bin/chargeback serve")
    ports = {"9400": str(free_port()), "9090": str(free_port()), "8000": str(free_port())}

    def moved(text: str) -> str:
        for old, new in ports.items():
            text = text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}").replace(f"--port {old}", f"--port {new}")
        return text

    (tmp_path / "deploy").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "deploy" / "prometheus-local.yml").write_text(moved((ROOT / "deploy/prometheus-local.yml").read_text()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGEBACK_")}
    background: list[subprocess.Popen] = []
    outputs: dict[str, str] = {}
    try:
        for number, line in enumerate(commands):
            words = shlex.split(moved(line), comments=True)
            if words[0] == "export":
                name, value = words[1].split("=", 1)
                env[name] = value
                continue
            if words[0] == ".venv/bin/chargeback":
                words[0] = str(CLI)
            elif shutil.which(words[0]):
                words[0] = shutil.which(words[0])
            if words[-1] == "&" or number == len(commands) - 1:  # the last command (serve) runs in the foreground
                words = [w for w in words if w != "&"]
                if words[1:2] == ["serve"]:  # the defaults the README's URLs name, moved
                    words += ["--port", ports["8000"]]
                elif words[1:3] == ["simulator", "serve"]:
                    words += ["--port", ports["9400"]]
                log = open(tmp_path / f"background-{number}.log", "w")
                background.append(subprocess.Popen(words, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
                continue

            def run(words=words):
                return subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

            if words[1:2] == ["doctor"]:  # "once Prometheus has scraped": clean, but for `scratch` when it runs
                done = wait_for(lambda w=words: doctor_as_documented(run(), run(w + ["--json"])), "the documented report")
            else:
                done = run()
                assert done.returncode == 0, (line, done.stdout, done.stderr)
            assert "Traceback" not in done.stdout + done.stderr, line
            outputs[words[1] if len(words) > 1 else words[0]] = done.stdout + done.stderr

        base = f"http://127.0.0.1:{ports['8000']}"

        def ready():
            try:
                return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, "the portal to be ready")
        assert all(p.poll() is None for p in background), "a background command of the README exited"
        password = re.search(r"password[^:]*:\s*(\S+)", outputs["user"], re.IGNORECASE).group(1)
        with httpx.Client(base_url=base, timeout=30) as client:
            form = client.get("/login")
            token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
            signed_in = client.post("/login", data={"username": "alice", "password": password, "csrf_token": token})
            assert signed_in.status_code in (200, 303) and client.cookies, signed_in.text[:500]
    finally:
        for proc in background:
            proc.terminate()
        for proc in background:
            proc.wait(timeout=30)
