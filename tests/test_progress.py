"""The progress line of a long run (issue 15): on a terminal, a transient status line on stderr
with the elapsed time and the backward calls and optimizer steps so far, erased before the
script writes and at the end; nothing with --quiet or when stderr is not a terminal."""

from __future__ import annotations

import os
import sys

import pytest
from cli_helpers import cli, pty_output

pytestmark = pytest.mark.skipif(
    not hasattr(os, "openpty") or sys.platform == "win32", reason="needs a POSIX pseudo-terminal"
)

SLOW = """\
import time
import autodiag as torch
w = torch.ones(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for step in range(8):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    time.sleep(0.25)
print("script says hi")
"""


def run_on_terminal(args: list[str]) -> bytes:
    """The raw bytes the entry point wrote with stdout and stderr on one pseudo-terminal."""
    return pty_output(args, stderr=True)


def test_a_long_run_shows_progress_and_erases_it(script):
    out = run_on_terminal(["check", script(SLOW), "--no-color"])
    text = out.decode("utf-8", "replace")
    assert "autodiag: running" in text and "backward call" in text, text
    assert "optimizer step" in text
    # the line is erased before the script's own output and before the report
    before_hi = text[: text.index("script says hi")]
    assert before_hi.rstrip(" \n").endswith("\x1b[2K") or "\x1b[2K" in before_hi[-20:], repr(
        before_hi[-80:]
    )
    report = text[text.index("script says hi") :]
    assert "✓ no findings" in report and "autodiag: running" not in report


def test_quiet_shows_no_progress(script):
    text = run_on_terminal(["check", script(SLOW), "--quiet", "--no-color"]).decode()
    assert "autodiag: running" not in text and "✓ no findings" in text


def test_no_progress_when_stderr_is_not_a_terminal(script):
    r = cli("check", script(SLOW))
    assert r.exit_code == 0 and "autodiag: running" not in r.stderr
