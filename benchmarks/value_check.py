"""The critics' values against what the task can pay: `losses/qf1_values` read back from a grid's TensorBoard files.

For every finished run under RUNS_DIR (found as `aggregate.py` finds them, through their summary.json), this reads the
run's event files (kept on the machine that ran it; only the summaries are committed) and reports the mean logged
Q value (the first critic's value, or its samples' mean, at the batch's replay actions) over the last `--window` env
steps, its largest logged value, and the run's final evaluation return. On the point mass every reward is 0 except
the bonus, paid once when an episode ends, so no return and no true Q value exceeds it (10): a larger logged value is
overestimation, whatever the policy.

Usage:
    python benchmarks/value_check.py benchmarks/toy_utd10/grid --bound 10 --out benchmarks/toy_utd10/value_check.md
"""

import glob
import os
import sys
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import tyro
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aggregate import load_runs  # noqa: E402

TAG = "losses/qf1_values"


@dataclass
class Args:
    """The critics' logged values of a grid's runs against the largest value the task allows."""

    runs_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUNS_DIR")]
    """directory searched recursively for the runs' summary.json"""
    window: int = 2000
    """the mean is taken over the values logged in the last `window` env steps of each run"""
    bound: float | None = None
    """the largest true value the task allows (the point mass: 10); runs whose logged values exceed it are counted"""
    out: str | None = None
    """markdown file to write (default: print only)"""


def logged_values(run_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps and values of TAG over all of a run's event files (a resumed run has several; a later one wins a step)."""
    values: dict[int, float] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*")), key=os.path.getmtime):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        if TAG in events.Tags()["scalars"]:
            values.update({event.step: event.value for event in events.Scalars(TAG)})
    steps = np.array(sorted(values), dtype=np.int64)
    return steps, np.array([values[step] for step in steps], dtype=np.float64)


def fail(message: str) -> None:
    sys.exit(f"value_check.py: error: {message}")


def value_table(args: Args) -> str:
    if args.window < 1:
        fail("--window must be >= 1")
    if args.bound is not None and not np.isfinite(args.bound):
        fail(f"--bound must be finite, got {args.bound}")
    if not os.path.isdir(args.runs_dir):
        fail(f"{args.runs_dir} is not a directory")
    runs = load_runs(args.runs_dir)
    if not runs:
        fail(f"no finished run (summary.json) under {args.runs_dir}")
    rows = []
    for run in sorted(runs, key=lambda run: (run["script"], run["seed"])):
        steps, values = logged_values(run["run_dir"])
        if not len(steps):
            fail(f"{run['run_dir']} has no {TAG} in its event files (only its summary?)")
        last = values[steps > steps[-1] - args.window]
        rows.append((run["script"], run["seed"], float(last.mean()), float(values.max()), run["final_eval_return"]))
    lines = [f"| script | seed | mean Q, last {args.window} steps | largest Q | final eval return |", "|---|---|---|---|---|"]
    lines += [f"| {script} | {seed} | {mean:.2f} | {top:.2f} | {final:.2f} |" for script, seed, mean, top, final in rows]
    lines += ["", "| script | runs | mean of the mean Q | mean of the largest Q | mean final eval return |"]
    lines += ["|---|---|---|---|---|"]
    for script in sorted({row[0] for row in rows}):
        mine = np.array([row[2:] for row in rows if row[0] == script])  # (runs, 3)
        over = f" ({(mine[:, 1] > args.bound).sum()} above {args.bound:g})" if args.bound is not None else ""
        lines.append(
            f"| {script} | {len(mine)}{over} | {mine[:, 0].mean():.2f} | {mine[:, 1].mean():.2f} | {mine[:, 2].mean():.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = tyro.cli(Args)
    table = value_table(args)
    print(table, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
