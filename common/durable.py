"""Small durable-filesystem helpers shared by the coordinator's stores and the worker's outbox.

A rename or a new file is durable only once its directory is fsynced too; every store in
fleet calls this one function for that, so the rule lives in one place.
"""
from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """fsync a directory, making the names created, renamed or removed in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
