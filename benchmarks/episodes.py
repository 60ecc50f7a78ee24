"""How do a run's training episodes end? Per run, the training episodes that end after `--after` env steps.

For every finished run under RUNS_DIR of one env id (found as `aggregate.py` finds them, through their summary.json):
the training episodes that end after `--after` (`charts/episodic_length` and `charts/episodic_return`, read back from
the run's TensorBoard files; a resumed run's later file wins a step it repeats), how many ended before the time limit
(`--max-episode-steps`: on Walker2d and Hopper the body fell), their median length, and the reward per step (their
total return over their total length). On Walker2d-v4 the healthy bonus is 1 of it: what is above 1 is mostly forward
progress, less the control cost.

The events stay on the machine that ran a run. `--save` writes what was read from them (with the settings they were
counted at) into the run's summary.json as `episodes`, which later tables use in place of the events at the same
settings.

Usage:
    python benchmarks/episodes.py benchmarks/mujoco_cpu/grid --env-id Walker2d-v4 --after 50000 --save
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
from run_bookkeeping import fail as fail_with  # noqa: E402
from run_bookkeeping import logged_scalars  # noqa: E402

LENGTH_TAG = "charts/episodic_length"
RETURN_TAG = "charts/episodic_return"


@dataclass
class Args:
    """Per run, the training episodes that end after a given env step: how many, how many fell, how long, how paid."""

    runs_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUNS_DIR")]
    """directory searched recursively for the runs' summary.json"""
    env_id: str = "Walker2d-v4"
    """only the runs of this env id"""
    after: int = 50_000
    """count the training episodes that end after this env step"""
    max_episode_steps: int = 1000
    """the env's time limit: a training episode this long did not fall"""
    out: str | None = None
    """markdown file to write (default: print only)"""
    save: bool = False
    """write each run's numbers read from its events into its summary.json (`episodes`, with the settings they were
    counted at), so that the table can be made again once the events are gone"""


def fail(message: str) -> None:
    fail_with("episodes.py", message)


def run_episodes(run: dict, args: Args) -> dict:
    """episodes, fell (ended before the time limit), median_length, reward_per_step, of the training episodes that end
    after `args.after`; read from the summary's `episodes` when it was saved at these settings, else from the events."""

    def read_events() -> dict:
        logged = logged_scalars(run["run_dir"], LENGTH_TAG, RETURN_TAG)
        lengths, returns = logged[LENGTH_TAG], logged[RETURN_TAG]
        if not lengths:
            fail(
                f"{run['run_dir']} has no {LENGTH_TAG} events (they stay on the machine that ran it) and its"
                " summary.json no `episodes` at these settings"
            )
        steps = sorted(step for step in lengths if step > args.after)
        if not steps:
            fail(f"{run['run_dir']} has no training episode ending after step {args.after}")
        if any(step not in returns for step in steps):
            fail(f"{run['run_dir']} logged an episode's {LENGTH_TAG} without its {RETURN_TAG}")
        length = np.array([lengths[step] for step in steps])  # (E,)
        episode_return = np.array([returns[step] for step in steps])  # (E,)
        return {
            "episodes": len(steps),
            "fell": int(np.sum(length < args.max_episode_steps)),
            "median_length": float(np.median(length)),
            "reward_per_step": float(episode_return.sum() / length.sum()),
        }

    settings = {"after": args.after, "max_episode_steps": args.max_episode_steps}
    return numbers_in_summary(run["run_dir"], "episodes", settings, read_events, args.save, "episodes.py")


def episodes_table(args: Args) -> str:
    if args.after < 0:
        fail("--after must be >= 0")
    if args.max_episode_steps < 1:
        fail("--max-episode-steps must be >= 1")
    if message := out_error(args.out):
        fail(message)
    if not os.path.isdir(args.runs_dir):
        fail(f"{args.runs_dir} is not a directory")
    runs = [run for run in load_runs(args.runs_dir) if run["env"] == args.env_id]
    if not runs:
        fail(f"no finished run (summary.json) of {args.env_id} under {args.runs_dir}")
    if args.save and (message := unwritable_summary(runs, "episodes", "--save")):
        fail(message)
    lines = [
        f"{args.env_id}: the training episodes that end after step {args.after}, those that ended before the time limit"
        f" ({args.max_episode_steps} steps), their median length, and their total return over their total length.",
        "",
        "| script | seed | episodes | fell | median length | reward per step | final |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in sorted(runs, key=lambda run: (run["script"], run["seed"])):
        row = run_episodes(run, args)
        lines.append(
            f"| {run['script']} | {run['seed']} | {row['episodes']} | {row['fell']} | {row['median_length']:g} | "
            f"{row['reward_per_step']:.2f} | {run['final_eval_return']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = tyro.cli(Args)
    print_table(episodes_table(args), args.out)
