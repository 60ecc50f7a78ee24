"""The critics' values against what the task can pay: `losses/qf1_values` read back from a grid's TensorBoard files.

For every finished run under RUNS_DIR (found as `aggregate.py` finds them, through their summary.json), this reports the
mean logged Q value (the first critic's value, or its samples' mean, at the batch's replay actions) over the last
`--window` env steps, its largest logged value, and the run's final evaluation return. The values come from the run's
summary.json (`critic_values`, written by every run since run_bookkeeping.critic_values, and moved there once from the
pages' tables for the committed runs whose events are gone) where its window is `--window`, else from the run's
TensorBoard files (kept on the machine that ran it; `--save-values` writes them into the summary, for a run from a
commit that did not). On the point mass every reward is 0 except the bonus, paid once when an episode ends, so no return
and no true Q value exceeds it (10): a larger logged value is overestimation, whatever the policy.

Usage:
    python benchmarks/value_check.py benchmarks/toy_utd10/grid --bound 10 --out benchmarks/toy_utd10/value_check.md
"""

import os
import sys
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import tyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aggregate import load_runs, numbers_in_summary, print_table, unwritable_summary  # noqa: E402
from writable import out_error  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from run_bookkeeping import VALUE_TAG, critic_values  # noqa: E402


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
    save_values: bool = False
    """write the values read from a run's events into its summary.json (`critic_values`, with their source) where it
    holds none: a run from a commit older than that field keeps its values once its events are gone"""


def run_values(run: dict, window: int, save: bool = False) -> dict | None:
    """The run's critic values over `window`: its summary's `critic_values` where they are over that window, else read
    from its event files (None where neither has them); with `save`, values read from the events of a run from a commit
    older than that field are written into its summary.json (never over values at another window: a warning)."""
    return numbers_in_summary(
        run["run_dir"],
        "critic_values",
        {"window_steps": window},
        lambda: critic_values(run["run_dir"], window),
        save,
        "value_check.py",
        " --save-values (the run predates the field)",
    )


def fail(message: str) -> None:
    sys.exit(f"value_check.py: error: {message}")


def value_table(args: Args) -> str:
    if args.window < 1:
        fail("--window must be >= 1")
    if args.bound is not None and not np.isfinite(args.bound):
        fail(f"--bound must be finite, got {args.bound}")
    if message := out_error(args.out):
        fail(message)
    if not os.path.isdir(args.runs_dir):
        fail(f"{args.runs_dir} is not a directory")
    runs = load_runs(args.runs_dir)
    if not runs:
        fail(f"no finished run (summary.json) under {args.runs_dir}")
    if args.save_values and (message := unwritable_summary(runs, "critic_values", "--save-values")):
        fail(message)
    rows, left_out = [], []
    for run in sorted(runs, key=lambda run: (run["script"], run["env"], run["seed"])):
        values = run_values(run, args.window, args.save_values)
        if values is None:
            left_out.append(run["run_dir"])
            continue
        rows.append((run["script"], run["env"], run["seed"], values["mean"], values["max"], run["final_eval_return"]))
    if not rows:
        fail(
            f"no run under {args.runs_dir} has critic values over {args.window} steps (summary.json or {VALUE_TAG} "
            "events)"
        )
    if left_out:
        print(
            f"value_check.py: {len(left_out)} run(s) without critic values left out (named under the table)",
            file=sys.stderr,
        )
    lines = [f"| script | env | seed | mean Q, last {args.window} steps | largest Q | final eval return |"]
    lines += ["|---|---|---|---|---|---|"]
    lines += [
        f"| {script} | {env} | {seed} | {mean:.2f} | {top:.2f} | {final:.2f} |"
        for script, env, seed, mean, top, final in rows
    ]
    lines += ["", "| script | env | runs | mean of the mean Q | mean of the largest Q | mean final eval return |"]
    lines += ["|---|---|---|---|---|---|"]
    for script, env in sorted({row[:2] for row in rows}):
        mine = np.array([row[3:] for row in rows if row[:2] == (script, env)])  # (runs, 3)
        over = f" ({(mine[:, 1] > args.bound).sum()} above {args.bound:g})" if args.bound is not None else ""
        lines.append(
            f"| {script} | {env} | {len(mine)}{over} | {mine[:, 0].mean():.2f} | {mine[:, 1].mean():.2f} | "
            f"{mine[:, 2].mean():.2f} |"
        )
    if left_out:
        lines += [
            "",
            f"Left out, no critic values over {args.window} steps kept (summary.json or events): {len(left_out)} "
            "run(s)",
        ]
        lines += [f"- `{os.path.relpath(run_dir, args.runs_dir)}`" for run_dir in left_out]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = tyro.cli(Args)
    print_table(value_table(args), args.out)
