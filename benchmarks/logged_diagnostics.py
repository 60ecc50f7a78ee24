"""The Sobolev backup's contraction factor, the slice search's gain and the action-gradient sizes of a grid's runs, read
back from their TensorBoard files or their summary.json.

For every finished run under RUNS_DIR (found as `aggregate.py` finds them, through their summary.json), each tag of TAGS
the run logged is reduced per evaluation interval (the env steps after one evaluation up to the next) to the number,
smallest, median and largest of its logged values. The table gives, per run and over the intervals that start at or
after `--after` env steps, each tag's smallest and largest logged value and its interval median in the first and the
last of those intervals; a second table, per script and env, the range over its runs. A script logs the tags of what it
does: the contraction factor every Dyna method (per batch, its median and its maximum), the action-gradient sizes the
Sobolev critics (MAGE, DSDPG), the slice gain DSDPG-MSMMD.

The events stay on the machine that ran a run. `--save` writes the per-interval numbers read from them into the run's
summary.json as `logged`, with the first env step the events hold (`first_logged_step`: a resumed run whose earlier
events stayed on another machine starts late), which later tables use in place of the events, so that the table can be
made again anywhere.

Usage:
    python benchmarks/logged_diagnostics.py benchmarks/mujoco_cpu/grid --env-id HalfCheetah-v4 --save
"""

import glob
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

TAGS = {
    "charts/contraction_gamma_kappa": "gamma kappa, batch median",
    "charts/contraction_gamma_kappa_max": "gamma kappa, batch max",
    "losses/slice_gain": "slice gain",
    "losses/qf1_action_grad_norm": "critic's |dQ/da|",
    "losses/target_action_grad_norm": "target's |dQ/da|",
}
"""the tags read, with their column names"""
STATS = ("count", "min", "median", "max")


@dataclass
class Args:
    """Per run, its logged contraction factor, slice gain and action-gradient sizes, per evaluation interval."""

    runs_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUNS_DIR")]
    """directory searched recursively for the runs' summary.json"""
    env_id: str | None = None
    """only the runs of this env id (default: every run)"""
    after: int = 0
    """the table keeps the evaluation intervals that start at or after this env step"""
    out: str | None = None
    """markdown file to write (default: print only)"""
    save: bool = False
    """write each run's per-interval event numbers to its summary.json (`logged`), so the table outlives the events"""


def fail(message: str) -> None:
    fail_with("logged_diagnostics.py", message)


def per_interval(values: dict[int, float], eval_steps: list[int]) -> dict | None:
    """The logged `values` (env step -> value) reduced per evaluation interval (previous evaluation, this one]: the
    intervals' end steps, and per interval the number, smallest, median and largest value; intervals without a value
    are left out, and so are values logged after the last evaluation. None if no interval has a value."""
    reduced = {"steps": [], **{stat: [] for stat in STATS}}
    for start, end in zip([0, *eval_steps[:-1]], eval_steps):
        inside = [value for step, value in values.items() if start < step <= end]
        if inside:
            reduced["steps"].append(end)
            reduced["count"].append(len(inside))
            for stat, reduce in (("min", np.min), ("median", np.median), ("max", np.max)):
                reduced[stat].append(float(f"{reduce(inside):.5g}"))
    return reduced if reduced["steps"] else None


def run_logged(run: dict, save: bool = False) -> dict | None:
    """The run's tags per evaluation interval (tag -> per_interval's dict; the tags it did not log are absent): from its
    summary's `logged`, else from its event files (None if it has neither), and with `save` written into its
    summary.json."""

    def read_events() -> dict | None:
        if not glob.glob(os.path.join(glob.escape(run["run_dir"]), "events.out.tfevents.*")):
            return None
        logged = logged_scalars(run["run_dir"], *TAGS)
        tags = {tag: reduced for tag in TAGS if (reduced := per_interval(logged[tag], run["eval_steps"])) is not None}
        first_logged_step = min((min(values) for values in logged.values() if values), default=None)
        return {"tags": tags, "first_logged_step": first_logged_step}

    # a run that logged none of TAGS saves that too; a resumed run's events may start late (first_logged_step)
    logged = numbers_in_summary(run["run_dir"], "logged", {}, read_events, save, "logged_diagnostics.py")
    return None if logged is None else logged["tags"]


def since(reduced: dict, after: int, eval_steps: list[int]) -> dict:
    """The intervals of a per_interval dict that start at or after env step `after` (an interval starts at the
    evaluation before its end, the first one at 0)."""
    start_of = dict(zip(eval_steps, [0, *eval_steps[:-1]]))
    keep = [i for i, end in enumerate(reduced["steps"]) if start_of[end] >= after]
    return {key: [values[i] for i in keep] for key, values in reduced.items()}


def number(value: float) -> str:
    """Three significant digits, and whole numbers from 1 000 on (1324, not 1.32e+03)."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def diagnostics_table(args: Args) -> str:
    if args.after < 0:
        fail("--after must be >= 0")
    if message := out_error(args.out):
        fail(message)
    if not os.path.isdir(args.runs_dir):
        fail(f"{args.runs_dir} is not a directory")
    runs = [run for run in load_runs(args.runs_dir) if args.env_id in (None, run["env"])]
    if not runs:
        fail(
            f"no finished run (summary.json){'' if args.env_id is None else ' of ' + args.env_id} under {args.runs_dir}"
        )
    if args.save and (message := unwritable_summary(runs, "logged", "--save")):
        fail(message)
    rows, left_out = [], []  # (script, env, seed, {tag: intervals since --after}); run folders
    for run in sorted(runs, key=lambda run: (run["env"], run["script"], run["seed"])):
        logged = run_logged(run, args.save)
        if logged is None:
            left_out.append(run["run_dir"])
            continue
        tags = {tag: since(reduced, args.after, run["eval_steps"]) for tag, reduced in logged.items()}
        rows.append(
            (run["script"], run["env"], run["seed"], {tag: kept for tag, kept in tags.items() if kept["steps"]})
        )
    if not rows:
        fail(
            f"no run under {args.runs_dir} has its events or `logged` in its summary.json (events stay on the machine "
            "that ran it)"
        )
    header = " | ".join(TAGS.values())
    lines = [
        f"Per run, over the evaluation intervals that start at or after env step {args.after}: each tag's"
        " smallest-largest logged value (its interval median in the first -> the last interval); a blank cell where"
        " the run logged none.",
        "",
        f"| env | script | seed | {header} |",
        "|---|---|---|" + "---|" * len(TAGS),
    ]
    for script, env, seed, tags in rows:
        cells = [
            f"{number(min(t['min']))}-{number(max(t['max']))} ({number(t['median'][0])} -> {number(t['median'][-1])})"
            if (t := tags.get(tag))
            else ""
            for tag in TAGS
        ]
        lines.append(f"| {env} | {script} | {seed} | {' | '.join(cells)} |")
    lines += ["", "Per script and env, the smallest-largest logged value over its runs:", ""]
    lines += [f"| env | script | runs | {header} |", "|---|---|---|" + "---|" * len(TAGS)]
    for env, script in sorted({(row[1], row[0]) for row in rows}):
        mine = [row[3] for row in rows if row[:2] == (script, env)]
        cells = []
        for tag in TAGS:
            logged = [tags[tag] for tags in mine if tag in tags]
            lows, highs = [min(t["min"]) for t in logged], [max(t["max"]) for t in logged]
            cells.append(f"{number(min(lows))}-{number(max(highs))}" if logged else "")
        lines.append(f"| {env} | {script} | {len(mine)} | {' | '.join(cells)} |")
    if left_out:
        lines += ["", f"Left out, neither events nor `logged` in summary.json: {len(left_out)} run(s)"]
        lines += [f"- `{os.path.relpath(run_dir, args.runs_dir)}`" for run_dir in left_out]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = tyro.cli(Args)
    print_table(diagnostics_table(args), args.out)
