"""Helpers of the CLI tests: the real entry point in-process (typer's CliRunner) and on a
pseudo-terminal, and the checks of the JSON schema of DESIGN §4 (by hand: no jsonschema)."""

from __future__ import annotations

import os
import select
import subprocess
import sys

from typer.testing import CliRunner

from autodiag.cli import app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runner = CliRunner()


def cli(*args, **kw):
    return runner.invoke(app, list(args), catch_exceptions=False, **kw)


# --- JSON schema of DESIGN §4 (validated by hand: no jsonschema dependency) -------------------


def check_envelope(doc: dict, command: str) -> None:
    assert set(doc) >= {"autodiag", "command", "target", "status", "findings"}
    assert doc["command"] == command and doc["status"] in ("ok", "findings", "error")
    for f in doc["findings"]:
        assert set(f) >= {"kind", "severity", "message", "location", "stack"}


def check_graph(g: dict) -> None:
    ids = {n["id"] for n in g["nodes"]}
    assert set(g["roots"]) <= ids and set(g["order"]) <= ids
    for n in g["nodes"]:
        assert set(n) >= {"id", "name", "next", "variable", "saved", "created_at"}
        assert isinstance(n["name"], str)
        for e in n["next"]:
            assert e is None or (len(e) == 2 and e[0] in ids and isinstance(e[1], int))
        v = n["variable"]
        assert v is None or set(v) == {"name", "shape", "dtype"}
        for s in n["saved"]:
            assert set(s) >= {"name", "version"}
        c = n["created_at"]
        assert c is None or set(c) == {"file", "line", "code"}


def _entry_point() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "autodiag")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "autodiag"]


def pty_output(args: list[str], columns: int = 80, rows: int = 50, stderr: bool = False) -> bytes:
    """Run the autodiag entry point with stdout (and, with ``stderr``, stderr) on a
    pseudo-terminal of the given size; the raw bytes it wrote there."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "CI")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        _entry_point() + args,
        stdin=slave,
        stdout=slave,
        stderr=slave if stderr else subprocess.DEVNULL,
        env=env,
        close_fds=True,
        cwd=ROOT,
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                raise AssertionError("autodiag produced no output for 120 s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        proc.wait(timeout=120)
        os.close(master)
    return b"".join(chunks)
