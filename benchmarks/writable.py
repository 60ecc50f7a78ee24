"""Whether a tool's output file can be written, asked before the tool does its work: the check every offline tool makes
of its --out (and aggregate.py of the summaries --save writes into), so that a path it cannot write costs no work and is
refused in one line. Light to import (no torch, no matplotlib)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_grid import write_probe_error  # noqa: E402


def write_error(path: str) -> str | None:
    """Why a file cannot be opened for writing at `path`, or None if it can: the file there must be writable (not a
    folder, not read-only), else its folder must take a new file (tried with a probe file: os.access says yes to root on
    a read-only folder)."""
    if os.path.isdir(path):
        return "a folder"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else "Permission denied"
    return write_probe_error(os.path.dirname(os.path.abspath(path)))


def out_error(out: str | None) -> str | None:
    """The error (after the tool's `name: error: `) of an --out file that cannot be written; None if it can, or without
    --out."""
    reason = write_error(out) if out else None
    return None if reason is None else f"--out {out}: cannot write there ({reason})"
