"""What this build is: the git commit the banner and /varz report (nats-server's `gitCommit`)."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


@functools.cache
def git_commit() -> str:
    """The short commit hash: `PYNATSD_GIT_COMMIT` (set by image builds), else the checkout's HEAD; ""
    when neither is known (an installed wheel), which /varz omits and the banner shows as `not set`."""
    pinned = os.environ.get("PYNATSD_GIT_COMMIT", "").strip()
    if pinned:
        return pinned[:7]
    if not any((parent / ".git").exists() for parent in (_PACKAGE_DIR, *_PACKAGE_DIR.parents)):
        return ""
    try:
        done = subprocess.run(
            ["git", "-C", str(_PACKAGE_DIR), "rev-parse", "--short=7", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
