"""Shared test helpers: run a script as a user would and read its outputs back."""

import json
import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run's TensorBoard events: tag -> [(step, value), ...]."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def only_run_dir(cwd: str | Path) -> Path:
    """The single run directory a script created under cwd/runs."""
    runs = list((Path(cwd) / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def read_summary(run_dir: str | Path) -> dict:
    with open(Path(run_dir) / "summary.json") as f:
        return json.load(f)


def run_script(script: str, *flags: str, cwd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python <script> <flags>` from cwd as a user would; outputs land in cwd/runs."""
    return subprocess.run(
        [sys.executable, str(ROOT / script), *flags], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """The non-empty stderr lines, progress-bar redraws removed."""
    return [line for line in result.stderr.replace("\r", "\n").splitlines() if line.strip() and "it/s" not in line]
