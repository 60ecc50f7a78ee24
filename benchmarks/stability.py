"""Does a solved policy stay solved? Training episodes and evaluations after a run first solves its task.

For every finished run under RUNS_DIR (found as `aggregate.py` finds them, through their summary.json): the first
evaluation at or above `--solved`, then the training episodes that end after it (`charts/episodic_length`, read back
from the run's TensorBoard files; a resumed run's later file wins a step it repeats), counted as full (they reached the
time limit, `--max-episode-steps`) or fallen (ended earlier: on InvertedDoublePendulum, the pendulum fell), and the
evaluations after it that read below `--held`. Training episodes run the behaviour policy (the actor plus exploration
noise), one per 1 000 steps while it balances: they say whether the policy keeps the task between evaluations.

Beside them, how the critic's values move while the policy first holds the task: the mean of `losses/qf1_values` (the
critic's mean prediction on the replay batches, logged every 100 steps) over the 1 000 steps centred on the first
solve and on the first solve + `--window`, with the training episodes that end in that window (full / fell).

The events stay on the machine that ran a run. `--save` writes what was read from them (the episode counts and the
values, with the settings they were counted at) into the run's summary.json as `stability`, which later tables use in
place of the events at the same settings; the grid's runs whose events were gone by then had theirs moved there once
from the page's table (`source` says so; its values rounded to whole numbers, as printed).

Usage:
    python benchmarks/stability.py benchmarks/mujoco_cpu/grid --env-id InvertedDoublePendulum-v4 \
        --out benchmarks/mujoco_cpu/stability.md --save
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
from run_bookkeeping import VALUE_TAG, logged_scalars  # noqa: E402
from run_bookkeeping import fail as fail_with  # noqa: E402

LENGTH_TAG = "charts/episodic_length"
VALUE_SPAN = 1000
"""env steps around a step over which the logged critic values are averaged"""


@dataclass
class Args:
    """Per run, what follows its first solved evaluation: training episodes full or fallen, evaluations below a bar."""

    runs_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUNS_DIR")]
    """directory searched recursively for the runs' summary.json"""
    env_id: str = "InvertedDoublePendulum-v4"
    """only the runs of this env id"""
    solved: float = 9350.0
    """an evaluation return at or above this counts as solved (InvertedDoublePendulum: ~9 360 at most)"""
    held: float = 9000.0
    """an evaluation after the first solve that reads below this counts as a drop"""
    max_episode_steps: int = 1000
    """the env's time limit: a training episode this long did not fall"""
    window: int = 5000
    """env steps after the first solve over which the critic's mean value is followed"""
    out: str | None = None
    """markdown file to write (default: print only)"""
    save: bool = False
    """write each solved run's numbers read from its events into its summary.json (`stability`, with the settings they
    were counted at), so that the table can be made again once the events are gone"""


EVENT_FIELDS = ("full", "fell", "q_solved", "q_later", "full_window", "fell_window")
"""what run_stability reads from a run's events (the rest comes from its summary)"""


def fail(message: str) -> None:
    fail_with("stability.py", message)


def mean_near(values: dict[int, float], step: int) -> float | None:
    """The mean of the logged values within VALUE_SPAN / 2 of `step` (None if none was logged there)."""
    near = [value for at, value in values.items() if abs(at - step) < VALUE_SPAN / 2]
    return float(np.mean(near)) if near else None


def run_stability(run: dict, args: Args) -> dict:
    """first_solved (env step, or None), full and fell (training episodes ending after it), drops ([(step, return)]),
    q_solved and q_later (the critic's mean value at the first solve and `args.window` steps later, or None),
    full_window and fell_window (the training episodes ending in that window)."""
    solved_at = [step for step, value in zip(run["eval_steps"], run["eval_returns"]) if value >= args.solved]
    row = {"script": run["script"], "seed": run["seed"], "final": run["final_eval_return"], "first_solved": None}
    if not solved_at:
        return row
    first = min(solved_at)
    drops = [
        (step, value)
        for step, value in zip(run["eval_steps"], run["eval_returns"])
        if step > first and value < args.held
    ]
    row.update(first_solved=first, drops=drops)
    settings = {"solved": args.solved, "max_episode_steps": args.max_episode_steps, "window": args.window}

    def read_events() -> dict:
        logged = logged_scalars(run["run_dir"], LENGTH_TAG, VALUE_TAG)
        lengths, values = logged[LENGTH_TAG], logged[VALUE_TAG]
        if not lengths:
            fail(
                f"{run['run_dir']} has no {LENGTH_TAG} events (they stay on the machine that ran it) and its"
                " summary.json no `stability` at these settings"
            )
        after = np.array([length for step, length in lengths.items() if step > first])
        fell = after[after < args.max_episode_steps]
        window = np.array([length for step, length in lengths.items() if first < step <= first + args.window])
        return {
            "full": int(len(after) - len(fell)),
            "fell": len(fell),
            "q_solved": mean_near(values, first),
            "q_later": mean_near(values, first + args.window),
            "full_window": int(np.sum(window >= args.max_episode_steps)),
            "fell_window": int(np.sum(window < args.max_episode_steps)),
        }

    counted = numbers_in_summary(run["run_dir"], "stability", settings, read_events, args.save, "stability.py")
    return {**row, **{name: counted[name] for name in EVENT_FIELDS}}


def stability_table(args: Args) -> str:
    for flag, value in (("--solved", args.solved), ("--held", args.held)):
        if not np.isfinite(value):
            fail(f"{flag} must be finite (got {value:g})")
    if not args.held <= args.solved:
        fail(f"--held ({args.held:g}) must be at most --solved ({args.solved:g})")
    if args.max_episode_steps < 1:
        fail("--max-episode-steps must be >= 1")
    if args.window < VALUE_SPAN:
        fail(f"--window must be >= {VALUE_SPAN}")
    if message := out_error(args.out):
        fail(message)
    if not os.path.isdir(args.runs_dir):
        fail(f"{args.runs_dir} is not a directory")
    runs = [run for run in load_runs(args.runs_dir) if run["env"] == args.env_id]
    if not runs:
        fail(f"no finished run (summary.json) of {args.env_id} under {args.runs_dir}")
    solved = [run for run in runs if max(run["eval_returns"]) >= args.solved]  # only these save their numbers
    if args.save and (message := unwritable_summary(solved, "stability", "--save")):
        fail(message)
    rows = [run_stability(run, args) for run in sorted(runs, key=lambda run: (run["script"], run["seed"]))]
    lines = [
        f"{args.env_id}: after each run's first evaluation >= {args.solved:g}, the training episodes that reached the"
        f" time limit ({args.max_episode_steps} steps) or fell, and the evaluations below {args.held:g}; the critic's"
        f" mean value ({VALUE_TAG}, over {VALUE_SPAN} steps) at the first solve and {args.window} steps later, and the"
        " training episodes in between.",
        "",
        "| script | seed | first solved at | training episodes after: full / fell | evaluations below after | final | "
        f"mean value at the first solve -> {args.window} steps later | training episodes in between: full / fell |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def mean_cell(mean: float | None) -> str:
        return "-" if mean is None else f"{mean:.0f}"

    for row in rows:
        if row["first_solved"] is None:
            lines.append(f"| {row['script']} | {row['seed']} | never | | | {row['final']:.0f} | | |")
            continue
        drops = ", ".join(f"{value:.0f} at {step}" for step, value in row["drops"]) or "none"
        lines.append(
            f"| {row['script']} | {row['seed']} | {row['first_solved']} | {row['full']} / {row['fell']} | {drops} | "
            f"{row['final']:.0f} | {mean_cell(row['q_solved'])} -> {mean_cell(row['q_later'])} | "
            f"{row['full_window']} / {row['fell_window']} |"
        )
    lines += ["", "| script | runs | solved | training episodes after the first solve: fell / all | runs with a drop |"]
    lines += ["|---|---|---|---|---|"]
    for script in sorted({row["script"] for row in rows}):
        mine = [row for row in rows if row["script"] == script]
        solved = [row for row in mine if row["first_solved"] is not None]
        fell, total = sum(row["fell"] for row in solved), sum(row["fell"] + row["full"] for row in solved)
        lines.append(
            f"| {script} | {len(mine)} | {len(solved)} | {fell} / {total} | "
            f"{sum(bool(row['drops']) for row in solved)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = tyro.cli(Args)
    print_table(stability_table(args), args.out)
