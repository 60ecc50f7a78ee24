"""Aggregate finished runs like the paper: medians over seeds with bootstrapped 95% CIs, bar charts and learning curves,
plus the interquartile mean (IQM), the mean and performance profiles of Agarwal et al. (2021), all through `rliable`.

Every `summary.json` under RUNS_DIR (searched recursively: a `run_grid.py` grid dir, a `runs/` dir, several of
them under one parent) is one run. Runs are grouped by (script, env, noise setting); the seeds are the samples.

Usage:
    python benchmarks/aggregate.py runs_grid/pointmass --out results/pointmass
    python benchmarks/aggregate.py runs --bootstrap-samples 10000 --seed 1
    python benchmarks/aggregate.py runs_grid/pointmass --strict   # stop at the first unreadable summary.json
    python benchmarks/aggregate.py runs_grid/pointmass --env-ids PointMass5-v0   # only that env's runs

Writes to --out (default RUNS_DIR/aggregate):
    runs.csv          one row per run: script, env, noise, seed, final_eval_return, nauc, wall_time_s, run_dir
    table.csv         per (script, env, noise): n_seeds; for the final return and the nAUC the median, IQM and mean
                      with their 95% CI bounds (columns final_eval_return_median, final_eval_return_ci_lo,
                      final_eval_return_ci_hi, final_eval_return_iqm, final_eval_return_iqm_ci_lo, ..., the same for
                      nauc); median wall time
    table.md          the same as a Markdown table, "estimate [lo, hi]"
    evals.md          every run's evaluation returns: per (env, noise) a table with a row per run (method, seed) and a
                      column per eval step ("-" where a run has no evaluation at that step); whole numbers where the
                      table's largest |return| is 100 or more, two decimals otherwise
    final_return.png  one panel per (env, noise): a bar per script at the median final return, the 95% CI as error
    nauc.png          bar and every seed as a dot; the same for nAUC
    curves.png        one panel per (env, noise): median eval return against env steps per script, 25-75% band
    performance_profile.png  one panel per (env, noise): per script, the fraction of its runs whose final return
                      exceeds tau, against tau, with a 95% CI band
    trend.png         only when the runs cover two or more point masses PointMass<M>-v0: the mean final return and
                      the mean nAUC against M, one line per script (and noise) with its 95% CI band; a script run at
                      one M only is a point with its CI
    margins.csv       where an env has baselines (--baselines; default every method not named dsdpg*) and other
    margins.md        methods: per env, each other method's mean final return and mean nAUC, the best baseline's
                      (named, per measure) and the margin, the page's "margin over the best baseline"

Choices:
    * script = `args.exp_name` of the run (the script's name unless the run set --exp-name), env = `args.env_id`,
      noise = "none", "mult" (observation noise; "mult0.3" when --obs-noise-scale is not the default 0.2), "gauss"
      (dynamics noise; "gauss0.05" with an explicit --dyn-noise-std), or "mult+gauss".
    * final return = `final_eval_return`, nAUC = `nauc` of summary.json: the mean eval return over the run's eval
      points (the normalised area under the learning curve for evenly spaced evaluations), recomputed from
      `eval_returns` for a summary without it.
    * Statistics over the seeds of a group: the median (the paper's), the IQM (mean of the middle 50% of the runs,
      scipy's 25% trimmed mean, which trims floor(n / 4) runs at each end: for 3 seeds the IQM is the mean) and the
      mean.
    * CI: rliable's stratified bootstrap (`rliable.library.get_interval_estimates`, percentile method) with the group
      as its one task: the seeds are resampled with replacement `--bootstrap-samples` times. rliable draws the
      resamples from numpy's global RNG (its StratifiedBootstrap ignores `random_state`), so it is seeded with --seed
      before each (group, metric): a group's CI does not depend on what other runs are in RUNS_DIR. One seed gives
      the CI [v, v].
    * Performance profile (`rliable.library.create_performance_profile`, the same bootstrap and seed): per
      (env, noise), the fraction of a script's runs with a final return above tau, on 101 values of tau from the
      panel's lowest to its highest final return.
    * Curves: the seeds of a group are aligned on the eval steps they all have, then the median and the 25th and
      75th percentiles are taken per step.
    * Runs without summary.json (unfinished) are counted and left out; a group whose runs differ in settings other
      than the seed (e.g. --total-timesteps), or that repeats a seed, is aggregated with a warning on stderr; but a
      run_grid.py job folder (one with job.json: one seed of one setting, run once) holding two finished runs is
      refused in one line naming them (one job run twice, e.g. beside an orphan of a killed grid, is not two seeds).
    * A run that stopped on a non-finite loss (a nonfinite_checkpoint.pt and no summary.json) is not counted as
      unfinished: it is named in a warning and below the table in table.md and on stdout, so a diverged run never
      vanishes from the results without a word.
    * A summary.json that cannot be read as a run summary is left out with one warning line naming it and why, and
      the rest is aggregated; if none is left, one error line and exit status 1. --strict stops instead at the first
      such file with one error line. Not a run summary: unreadable or not UTF-8 JSON; not an object; a key missing
      (`args` with `exp_name`, `env_id`, `seed`; `final_eval_return`; `eval_steps`; `eval_returns`); a value of the
      wrong type (exp_name and env_id strings, seed an integer, the eval steps integers, the returns and nauc
      numbers, eval_steps and eval_returns lists of the same non-zero length); a NaN or infinite final_eval_return,
      nauc or eval return (a diverged run is named, not averaged in). wall_time_s may be missing, null or NaN
      (shown as n/a), but not of another type.
    * The output folder is created and checked for writing (a probe file is created and removed) before the
      bootstrap; if it cannot be created or written, one error line naming it and exit status 1.
"""

import csv
import json
import math
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import tyro
from rliable import library, metrics, plot_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_grid import write_probe_error  # noqa: E402
from writable import write_error  # noqa: E402

NOISE_ORDER = ("none", "mult", "gauss", "mult+gauss")
METHODS = {  # exp_name -> the paper's name of the method and its colour, the same in every figure
    "td3_huber_no_dyna": ("TD3", "tab:gray"),
    "td3_mse_no_dyna": ("TD3-MSE", "navy"),
    "td3_huber": ("TD3 (Dyna)", "tab:brown"),
    "mage_huber_sobolev": ("MAGE", "tab:orange"),
    "iqn": ("IQN", "tab:olive"),
    "mmd_critic": ("MMD", "tab:cyan"),
    "dsdpg_mmd_sobolev": ("DSDPG-MMD", "tab:green"),
    "dsdpg_msmmd_sobolev": ("DSDPG-MSMMD", "tab:red"),
    "dsdpg_msmmd_sobolev_ascent": ("DSDPG-MSMMD (ascent)", "tab:purple"),
    "td3_huber_model_reward": ("TD3 (Dyna), model reward", "tab:pink"),
    "mage_huber_sobolev_model_reward": ("MAGE, model reward", "tab:blue"),
}
SCRIPT_ORDER = tuple(METHODS)  # tables and figures list the methods in this order, then the others alphabetically
OTHER_COLOURS = ("black", "gold", "lime", "teal", "crimson", "sienna")
DEFAULT_OBS_NOISE_SCALE = 0.2
IGNORED_SETTINGS = ("seed", "resume", "cuda")
"""Args that may differ between the seeds of one group"""
STATISTICS = {"median": "median", "iqm": "IQM", "mean": "mean"}
"""The statistics over the seeds of a group, in the order `statistics` returns them: table.csv name, table.md name"""
METRICS = {"final_eval_return": "final return", "nauc": "nAUC"}
NONFINITE = "nonfinite_checkpoint.pt"  # what a run that stopped on a non-finite loss leaves instead of summary.json
OUTPUTS = (
    "runs.csv",
    "table.csv",
    "table.md",
    "evals.md",
    "final_return.png",
    "nauc.png",
    "curves.png",
    "performance_profile.png",
)
TREND = "trend.png"  # written besides OUTPUTS when the runs cover two or more point masses
MARGINS = ("margins.csv", "margins.md")  # written besides OUTPUTS where an env has baselines and other methods
POINT_MASS = re.compile(r"PointMass(\d+)-v0")  # the point mass with M bonus locations (PointMass-v0 is M = 3 too)


@dataclass
class Args:
    runs_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUNS_DIR")]
    """directory searched recursively for the runs' summary.json"""
    out: str | None = None
    """output directory (default: RUNS_DIR/aggregate)"""
    bootstrap_samples: int = 2000
    """bootstrap resamples of the seeds per confidence interval and performance profile"""
    seed: int = 0
    """seed of numpy's global random generator, set before each bootstrap"""
    split_by: list[str] = field(default_factory=list)
    """settings (Args names, or their flags' spelling) that split a script's runs into groups of their own, labelled
    script[name=value], e.g. --split-by dyna_reward (or dyna-reward); a name no run has is refused"""
    strict: bool = False
    """stop at the first summary.json that is not a run summary (default: leave it out with a warning)"""
    env_ids: list[str] = field(default_factory=list)
    """aggregate only the runs of these env ids (default: every run; an id no run has is refused)"""
    until_step: int | None = None
    """read every run up to this env step: its final return is its last evaluation at or before it, its nAUC the mean of
    those (to set a longer grid beside a shorter one at the same horizon)"""
    baselines: list[str] = field(default_factory=list)
    """the baselines (method names as in table.csv) of margins.md: each other method's mean final return and nAUC
    minus the best baseline's in its env (default: every method whose name does not start with dsdpg)"""


def fail(message: str) -> None:
    """One line on stderr, exit status 1, no traceback."""
    raise SystemExit(f"aggregate.py: error: {message}")


def warn(message: str) -> None:
    print(f"aggregate.py: warning: {message}", file=sys.stderr)


def noise_label(args: dict) -> str:
    """The noise setting of a run's args: none, mult, mult0.3, gauss, gauss0.05, mult+gauss, ..."""
    parts = []
    if args.get("obs_noise", "none") != "none":
        scale = args.get("obs_noise_scale", DEFAULT_OBS_NOISE_SCALE)
        parts.append(args["obs_noise"] + ("" if scale == DEFAULT_OBS_NOISE_SCALE else f"{scale:g}"))
    if args.get("dyn_noise", "none") != "none":
        std = args.get("dyn_noise_std")
        parts.append(args["dyn_noise"] + ("" if std is None else f"{std:g}"))
    return "+".join(parts) or "none"


def nauc(eval_returns: list[float]) -> float:
    """Normalised area under the learning curve: the mean eval return over the eval points."""
    return float(np.mean(eval_returns))


class NotARunSummary(Exception):
    """A summary.json that cannot be read as a run summary; the message says why."""


class NoEvaluationYet(Exception):
    """A valid run summary whose first evaluation comes after --until-step; the message names that step."""


def json_type(value) -> str:
    names = {type(None): "null", bool: "a boolean", str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def require(mapping: dict, key: str, where: str = ""):
    if key not in mapping:
        raise NotARunSummary(f"no key {key!r}{where}")
    return mapping[key]


def number(value, name: str, finite: bool = True) -> float:
    """value as a float; NotARunSummary unless it is a JSON number (finite unless `finite` is False)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NotARunSummary(f"{name} is {json_type(value)}, not a number")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if finite and not math.isfinite(value):
        raise NotARunSummary(f"{name} is {value}, not a finite number")
    return value


def integer(value, name: str) -> int:
    """value as an int; NotARunSummary unless it is a JSON integer (or a float with an integer value, like 100.0)."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        raise NotARunSummary(f"{name} is {value!r}, not an integer")
    return int(value)


def string(value, name: str) -> str:
    if not isinstance(value, str):
        raise NotARunSummary(f"{name} is {json_type(value)}, not a string")
    return value


def numbers(value, name: str, convert) -> list:
    if not isinstance(value, list) or not value:
        raise NotARunSummary(f"{name} is {'an empty list' if value == [] else json_type(value)}, not a list of numbers")
    return [convert(item, f"{name}[{i}]") for i, item in enumerate(value)]


def read_run(path: str, run_dir: str, split_by: list[str] = (), until_step: int | None = None) -> dict:
    """The run of one summary.json (see load_runs), up to env step `until_step` if given; NotARunSummary says why it is
    not a run summary."""
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise NotARunSummary(f"{type(error).__name__}: {error}") from None
    if not isinstance(summary, dict):
        raise NotARunSummary(f"the file holds {json_type(summary)}, not an object")
    args = require(summary, "args")
    if not isinstance(args, dict):
        raise NotARunSummary(f"args is {json_type(args)}, not an object")
    where = " in args"
    script = string(require(args, "exp_name", where), "args.exp_name")
    env = string(require(args, "env_id", where), "args.env_id")
    seed = integer(require(args, "seed", where), "args.seed")
    for name in ("obs_noise", "dyn_noise"):
        if name in args:
            string(args[name], f"args.{name}")
    if "obs_noise_scale" in args:
        number(args["obs_noise_scale"], "args.obs_noise_scale")
    if args.get("dyn_noise_std") is not None:
        number(args["dyn_noise_std"], "args.dyn_noise_std")
    final = number(require(summary, "final_eval_return"), "final_eval_return")
    steps = numbers(require(summary, "eval_steps"), "eval_steps", integer)
    returns = numbers(require(summary, "eval_returns"), "eval_returns", number)
    if len(steps) != len(returns):
        raise NotARunSummary(f"{len(steps)} eval_steps but {len(returns)} eval_returns")
    wall_time = summary.get("wall_time_s")
    run_nauc = number(summary["nauc"], "nauc") if "nauc" in summary else nauc(returns)
    if until_step is not None:
        kept = [(step, value) for step, value in zip(steps, returns) if step <= until_step]
        if not kept:
            raise NoEvaluationYet(f"first evaluation at step {steps[0]}")
        steps, returns = [step for step, _ in kept], [value for _, value in kept]
        final, run_nauc = returns[-1], nauc(returns)
    return {
        "script": script + "".join(f"[{name}={args.get(name)}]" for name in split_by),
        "env": env,
        "noise": noise_label(args),
        "seed": seed,
        "final_eval_return": final,
        "nauc": run_nauc,
        "wall_time_s": math.nan if wall_time is None else number(wall_time, "wall_time_s", finite=False),
        "eval_steps": steps,
        "eval_returns": returns,
        "run_dir": run_dir,
        "args": args,
    }


def numbers_in_summary(
    run_dir: str, key: str, settings: dict, read_events: Callable[[], dict | None], save: bool, tool: str, how: str = ""
) -> dict | None:
    """The numbers a tool keeps in a run's summary.json under `key`: those saved there at `settings`, else
    `read_events()` (the run's event files; None where it has none). With `save` the numbers read are written into the
    summary (atomically) with their settings and their source (saved by `tool`, `how` added), never over numbers saved
    at other settings (a warning on stderr instead)."""
    path = os.path.join(run_dir, "summary.json")
    with open(path) as f:
        summary = json.load(f)
    saved = summary.get(key)
    if saved is not None and all(saved.get(name) == value for name, value in settings.items()):
        return saved
    counted = read_events()
    if not save or counted is None:
        return counted
    if saved is not None:
        print(f"{tool}: warning: {path} keeps the `{key}` saved at other settings; not saved", file=sys.stderr)
        return counted
    unsaid = {name: value for name, value in settings.items() if name not in counted}  # settings the numbers lack
    summary[key] = {**unsaid, **counted, "source": f"the run's TensorBoard events, saved by {tool}{how}"}
    with open(path + ".tmp", "w") as f:
        json.dump(summary, f, indent=2)
    os.replace(path + ".tmp", path)
    return counted


def unwritable_summary(runs: list[dict], key: str, flag: str) -> str | None:
    """The error (after the tool's `name: error: `) of the first run whose summary.json numbers_in_summary would write
    `key` into (it holds none) but cannot: the summary must be writable and its folder take the new file that replaces
    it. None if every one can be written; asked before the tool reads any events."""
    for run in runs:
        path = os.path.join(run["run_dir"], "summary.json")
        with open(path, encoding="utf-8") as f:
            if json.load(f).get(key) is not None:
                continue
        if reason := write_error(path) or write_probe_error(run["run_dir"]):
            return f"{flag}: cannot write {path} ({reason})"
    return None


def print_table(table: str, out: str | None) -> None:
    """Print a tool's markdown table and, with --out, write it to that file too."""
    print(table, end="")
    if out:
        with open(out, "w") as f:
            f.write(table)


def load_runs(
    runs_dir: str | list[str], split_by: list[str] = (), strict: bool = False, until_step: int | None = None
) -> list[dict]:
    """One dict per summary.json under runs_dir (or under each of a list of dirs): script (with the `split_by` settings'
    values), env, noise, seed, the metrics, the curve (up to `until_step`), run_dir, args. A summary.json that is not a
    run summary is left out with a warning naming it, or, if that leaves no run, exits with one error line; with
    `strict`, the first one exits with one error line."""
    runs, bad, unfinished, too_early = [], [], 0, []
    for root, dirs, files in (w for d in ([runs_dir] if isinstance(runs_dir, str) else runs_dir) for w in os.walk(d)):
        dirs.sort()
        if "summary.json" not in files:
            if NONFINITE not in files:  # those are named by stopped_runs
                unfinished += any(f == "checkpoint.pt" or f.startswith("events.out.tfevents") for f in files)
            continue
        path = os.path.join(root, "summary.json")
        try:
            runs.append(read_run(path, root, split_by, until_step))
        except NotARunSummary as error:
            reason = " ".join(str(error).splitlines())
            if strict:
                fail(f"{path} is not a run summary ({reason})")
            bad.append((path, reason))
        except NoEvaluationYet as error:
            too_early.append((path, str(error)))
    if unfinished:
        warn(f"{unfinished} unfinished run(s) without summary.json left out")
    if too_early and not runs and not bad:
        path, first = too_early[0]
        fail(f"no run has an evaluation at or before --until-step {until_step} (the first run's: {path}, {first})")
    if too_early:
        warn(f"{len(too_early)} run(s) without an evaluation at or before --until-step {until_step} left out")
    if bad and not runs:
        path, reason = bad[0]
        where = repr(runs_dir) if isinstance(runs_dir, str) else f"the {len(runs_dir)} job folders"
        if len(bad) == 1:
            fail(f"nothing to aggregate: {path}, the only summary.json under {where}, is not a run summary ({reason})")
        fail(
            f"nothing to aggregate: none of the {len(bad)} summary.json under {where} is a run summary "
            f"(the first: {path}: {reason})"
        )
    for path, reason in bad:
        warn(f"{path} is not a run summary ({reason}); left out")
    refuse_repeated_jobs(runs)
    return runs


def refuse_repeated_jobs(runs: list[dict]) -> None:
    """Exit in one line if a run_grid.py job folder (<job dir>/runs/<run>, with <job dir>/job.json) holds more than one
    of the runs: a job is one seed of one setting, run once, so its runs would count one seed several times."""
    by_job = defaultdict(list)
    for run in runs:
        runs_folder = os.path.dirname(os.path.normpath(run["run_dir"]))
        job_dir = os.path.dirname(runs_folder)
        if os.path.basename(runs_folder) == "runs" and os.path.isfile(os.path.join(job_dir, "job.json")):
            by_job[job_dir].append(run)
    for job_dir, members in sorted(by_job.items()):
        if len(members) > 1:
            seeds = ", ".join(str(seed) for seed in sorted({run["seed"] for run in members}))
            names = ", ".join(sorted(os.path.basename(run["run_dir"]) for run in members))
            fail(
                f"{job_dir} holds {len(members)} finished runs of one grid job (seed {seeds}: {names}), not "
                f"{len(members)} seeds; keep one and remove the others"
            )


def stopped_runs(runs_dir: str) -> list[str]:
    """The run folders under runs_dir that stopped on a non-finite loss: a nonfinite_checkpoint.pt, no summary.json."""
    found = []
    for root, dirs, files in os.walk(runs_dir):
        dirs.sort()
        if NONFINITE in files and "summary.json" not in files:
            found.append(root)
    return found


def rank(order: tuple[str, ...], name: str) -> tuple[int, str]:
    """Names of `order` in that order, then the others alphabetically."""
    return (order.index(name), "") if name in order else (len(order), name)


def sort_key(key: tuple[str, str, str]) -> tuple:
    """(script, env, noise) in table order: env, then noise (paper order first), then script (paper order first)."""
    script, env, noise = key
    return env, rank(NOISE_ORDER, noise), rank(SCRIPT_ORDER, script.split("[")[0]), script


def group_runs(runs: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """{(script, env, noise): runs sorted by seed}, in table order; warns about mixed settings and repeated seeds."""
    groups = defaultdict(list)
    for run in runs:
        groups[(run["script"], run["env"], run["noise"])].append(run)
    for key, members in groups.items():
        members.sort(key=lambda run: (run["seed"], run["run_dir"]))
        seeds = [run["seed"] for run in members]
        if len(set(seeds)) < len(seeds):
            warn(f"{'/'.join(key)}: seed(s) {sorted({s for s in seeds if seeds.count(s) > 1})} appear more than once")
        names = set().union(*(run["args"] for run in members)) - set(IGNORED_SETTINGS)
        mixed = sorted(n for n in names if len({json.dumps(run["args"].get(n)) for run in members}) > 1)
        if mixed:
            warn(f"{'/'.join(key)}: the runs differ in {', '.join(mixed)}")
    return dict(sorted(groups.items(), key=lambda item: sort_key(item[0])))


def statistics(scores: np.ndarray) -> np.ndarray:
    """Median, IQM and mean of a (runs x 1 task) score matrix. The median is over the runs (rliable's
    aggregate_median is the median over tasks of the per-task means, i.e. the mean for one task)."""
    return np.array([np.median(scores), metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


def interval_estimates(
    values: list[float], n_boot: int, seed: int, confidence: float = 0.95
) -> dict[str, tuple[float, float, float]]:
    """{statistic: (estimate, lo, hi)} for the median, IQM and mean of one group's values, with rliable's
    stratified-bootstrap percentile CIs; numpy's global RNG is seeded first (rliable resamples with it)."""
    np.random.seed(seed)
    points, intervals = library.get_interval_estimates(
        {"runs": np.asarray(values, dtype=float).reshape(-1, 1)},
        statistics,
        reps=n_boot,
        confidence_interval_size=confidence,
    )
    (lo, hi), estimates = intervals["runs"], points["runs"]
    return {name: (float(estimates[i]), float(lo[i]), float(hi[i])) for i, name in enumerate(STATISTICS)}


def columns(metric: str, statistic: str) -> tuple[str, str, str]:
    """table.csv's (estimate, lo, hi) columns; the median keeps the names it had before the IQM and mean."""
    ci = f"{metric}_ci" if statistic == "median" else f"{metric}_{statistic}_ci"
    return f"{metric}_{statistic}", f"{ci}_lo", f"{ci}_hi"


def summarise(groups: dict, n_boot: int, seed: int) -> list[dict]:
    """One table row per group: n_seeds, median, IQM and mean with 95% CIs of final return and nAUC, median wall
    time."""
    rows = []
    for (script, env, noise), members in groups.items():
        row = {"script": script, "env": env, "noise": noise, "n_seeds": len(members)}
        for metric in METRICS:
            estimates = interval_estimates([run[metric] for run in members], n_boot, seed)
            for statistic, estimate in estimates.items():
                row.update(zip(columns(metric, statistic), estimate))
        row["wall_time_s_median"] = float(np.median([run["wall_time_s"] for run in members]))
        rows.append(row)
    return rows


def align_curves(members: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, returns[seed, step]) on the eval steps every run of the group has."""
    common = sorted(set.intersection(*(set(run["eval_steps"]) for run in members)))
    curves = [dict(zip(run["eval_steps"], run["eval_returns"])) for run in members]
    return np.array(common, dtype=int), np.array([[curve[s] for s in common] for curve in curves]).reshape(
        len(members), len(common)
    )


def write_csv(path: str, rows: list[dict], columns: list[str]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def duration(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "n/a"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def write_markdown(path: str, rows: list[dict], n_boot: int, seed: int) -> None:
    def cell(row: dict, metric: str, statistic: str) -> str:
        estimate, lo, hi = (row[column] for column in columns(metric, statistic))
        return f"{estimate:.2f} [{lo:.2f}, {hi:.2f}]"

    headers = [f"{label} {name}" for label in METRICS.values() for name in STATISTICS.values()]
    lines = [
        f"Median, IQM (interquartile mean) and mean over seeds [95% CI: rliable's stratified bootstrap, "
        f"percentile method, {n_boot} resamples, seed {seed}].",
        "",
        "| env | noise | script | seeds | " + " | ".join(headers) + " | wall time |",
        "|---|---|---|---|" + "---|" * len(headers) + "---|",
    ]
    for row in rows:
        cells = [cell(row, metric, statistic) for metric in METRICS for statistic in STATISTICS]
        lines.append(
            f"| {row['env']} | {row['noise']} | {row['script']} | {row['n_seeds']} | "
            + " | ".join(cells)
            + f" | {duration(row['wall_time_s_median'])} |"
        )
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_evals(path: str, groups: dict) -> None:
    """evals.md: per (env, noise), every run's evaluation return at every eval step of that env's runs."""
    lines = []
    for env, noise in dict.fromkeys((env, noise) for _, env, noise in groups):
        members = [(script, run) for (script, e, n), runs in groups.items() if (e, n) == (env, noise) for run in runs]
        steps = sorted({step for _, run in members for step in run["eval_steps"]})
        largest = max(abs(value) for _, run in members for value in run["eval_returns"])
        decimals = 0 if largest >= 100 else 2
        lines += [
            f"{env}, noise {noise}: evaluation return at each eval step",
            "",
            "| method | seed | " + " | ".join(str(step) for step in steps) + " |",
            "|---|---|" + "---:|" * len(steps),
        ]
        for script, run in members:
            curve = dict(zip(run["eval_steps"], run["eval_returns"]))
            cells = [f"{curve[step]:.{decimals}f}" if step in curve else "-" for step in steps]
            lines.append(f"| {method_name(script)} | {run['seed']} | " + " | ".join(cells) + " |")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def panels(groups: dict) -> tuple[list[str], list[str], list[str]]:
    """The envs (panel rows), noise settings (panel columns) and scripts (colours) present, in table order."""
    keys = list(groups)
    scripts = sorted({key[0] for key in keys}, key=lambda script: rank(SCRIPT_ORDER, script))
    noises = sorted({key[2] for key in keys}, key=lambda noise: rank(NOISE_ORDER, noise))
    return sorted({key[1] for key in keys}), noises, scripts


def figure(envs: list[str], noises: list[str]):
    fig, axes = plt.subplots(
        len(envs),
        len(noises),
        figsize=(1 + 3.6 * len(noises), 1.2 + 2.8 * len(envs)),
        squeeze=False,
        constrained_layout=True,
    )
    for i, env in enumerate(envs):
        for j, noise in enumerate(noises):
            axes[i, j].set_title(f"{env}, noise {noise}", fontsize=9)
    return fig, axes


def method_of(script: str) -> tuple[str | None, str]:
    """(the METHODS key a group belongs to, or None; the rest of its name): an exp_name that is a known one plus a
    suffix (dsdpg_mmd_sobolev_utd2) or plus --split-by values (td3_huber[dyna_reward=model]) is a variant of it."""
    base, bracket, split = script.partition("[")
    rest = f"[{split}" if bracket else ""
    if base in METHODS:
        return base, rest
    known = [key for key in METHODS if base.startswith(key + "_")]
    if not known:
        return None, script
    key = max(known, key=len)
    return key, (base[len(key) + 1 :] + (" " + rest if rest else "")).strip()


def method_name(script: str) -> str:
    """The paper's name of a group's method, its variant after it (a suffix in brackets, --split-by values as
    given), else the exp_name."""
    key, rest = method_of(script)
    if key is None:
        return script
    if not rest or rest.startswith("["):
        return f"{METHODS[key][0]} {rest}".strip()
    return f"{METHODS[key][0]} ({rest})"


def colour(scripts: list[str], script: str):
    """A known method's own colour (the same in every figure; its variants get it too, with line styles of their
    own), else one of OTHER_COLOURS by the order of the unknown names."""
    key, _ = method_of(script)
    if key is not None:
        return METHODS[key][1]
    unknown = [name for name in scripts if method_of(name)[0] is None]
    return OTHER_COLOURS[unknown.index(script) % len(OTHER_COLOURS)]


def line_style(scripts: list[str], script: str) -> str:
    """Solid, then dashed, dotted, ... for the groups that share a method's colour (its variants)."""
    key = method_of(script)[0]
    siblings = [name for name in scripts if method_of(name)[0] == key] if key is not None else [script]
    return ("-", "--", ":", "-.")[siblings.index(script) % 4]


def figure_legend(fig, axes, seeds: dict[str, set[int]] | None = None) -> None:
    """One legend for the figure, below the panels, so that it covers no curve; labels in the order first drawn.
    `seeds`: each label's numbers of seeds over the panels, shown after it ("TD3 (3)", or "TD3 (2-3)" where panels
    differ)."""
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if seeds:
        counts = {label: f"{min(n)}-{max(n)}" if len(n) > 1 else f"{min(n)}" for label, n in seeds.items()}
        handles = {f"{label} ({counts[label]})" if label in counts else label: h for label, h in handles.items()}
    if handles:
        per_panel = 2 if max(len(label) for label in handles) <= 24 else 1  # labels side by side per panel's width
        columns = min(len(handles), per_panel * axes.shape[1])
        fig.set_figheight(fig.get_figheight() + 0.2 * math.ceil(len(handles) / columns))  # room below, panels kept
        fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=columns, fontsize=8)


def plot_bars(path: str, groups: dict, rows: list[dict], metric: str, label: str) -> None:
    """Bars at the medians, 95% CIs as error bars, every seed as a dot; one panel per (env, noise)."""
    envs, noises, scripts = panels(groups)
    fig, axes = figure(envs, noises)
    by_key = {(row["script"], row["env"], row["noise"]): row for row in rows}
    jitter = np.random.default_rng(0)
    for i, env in enumerate(envs):
        for j, noise in enumerate(noises):
            ax = axes[i, j]
            for x, script in enumerate(scripts):
                row = by_key.get((script, env, noise))
                if row is None:
                    continue
                median = row[f"{metric}_median"]
                error = [[median - row[f"{metric}_ci_lo"]], [row[f"{metric}_ci_hi"] - median]]
                ax.bar(x, median, color=colour(scripts, script), alpha=0.75, yerr=error, capsize=4)
                values = [run[metric] for run in groups[(script, env, noise)]]
                ax.plot(x + jitter.uniform(-0.2, 0.2, len(values)), values, "k.", markersize=3)
            ax.set_xticks(
                range(len(scripts)), [method_name(script) for script in scripts], rotation=35, ha="right", fontsize=7
            )
            ax.set_ylabel(label, fontsize=8)
            ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"{label}: median over seeds,\n95% stratified-bootstrap CI (rliable), dots = seeds", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(path: str, groups: dict) -> None:
    """Median eval return against env steps with a 25-75% band per script; one panel per (env, noise)."""
    envs, noises, scripts = panels(groups)
    fig, axes = figure(envs, noises)
    seeds = defaultdict(set)  # method name: its numbers of seeds over the panels
    for (script, env, noise), members in groups.items():
        ax = axes[envs.index(env), noises.index(noise)]
        steps, returns = align_curves(members)
        if len(steps) == 0:
            warn(f"{script}/{env}/{noise}: the seeds share no eval step; no curve")
            continue
        q25, median, q75 = np.percentile(returns, [25, 50, 75], axis=0)
        name, color = method_name(script), colour(scripts, script)
        ax.plot(
            steps,
            median,
            color=color,
            linestyle=line_style(scripts, script),
            label=name,
            marker="." if len(steps) <= 12 else None,
        )
        seeds[name].add(len(members))
        ax.fill_between(steps, q25, q75, color=color, alpha=0.15)
    for ax in axes.flat:
        ax.set_xlabel("environment steps", fontsize=8)
        ax.set_ylabel("evaluation return (per episode)", fontsize=8)
        ax.tick_params(labelsize=7)
    figure_legend(fig, axes, seeds)
    fig.suptitle("Evaluation return: median over seeds\n(number of seeds), 25-75% band", fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The fraction of runs with a score above each tau: rliable's default profile, vectorised over tau (its
    np.vectorize version takes about 40 s for 6 scripts x 10 000 resamples)."""
    return np.mean(scores.reshape(-1, 1) > taus, axis=0)


def plot_performance_profiles(path: str, groups: dict, n_boot: int, seed: int) -> None:
    """Per script, the fraction of runs whose final return exceeds tau, against tau, with 95% stratified-bootstrap
    CIs (rliable); one panel per (env, noise)."""
    envs, noises, scripts = panels(groups)
    fig, axes = figure(envs, noises)
    for i, env in enumerate(envs):
        for j, noise in enumerate(noises):
            scores = {
                script: np.array([[run["final_eval_return"]] for run in groups[(script, env, noise)]])
                for script in scripts
                if (script, env, noise) in groups
            }
            if not scores:
                continue
            values = np.concatenate(list(scores.values()))
            taus = np.linspace(values.min(), values.max(), 101)
            np.random.seed(seed)
            profiles, cis = library.create_performance_profile(
                scores, taus, custom_profile_func=score_distribution, reps=n_boot
            )
            named = {method_name(script): script for script in scores}
            plot_utils.plot_performance_profiles(
                {name: profiles[script] for name, script in named.items()},
                taus,
                performance_profile_cis={name: cis[script] for name, script in named.items()},
                ax=axes[i, j],
                alpha=0.08,
                colors={name: colour(scripts, script) for name, script in named.items()},
                linestyles={name: line_style(scripts, script) for name, script in named.items()},
                xlabel="final evaluation return tau",
                ylabel="fraction of runs > tau",
                labelsize=8,
                ticklabelsize=7,
                legend=False,
            )
    figure_legend(fig, axes)
    fig.suptitle(
        "Performance profiles of the final evaluation return,\n95% stratified-bootstrap CI (rliable)", fontsize=10
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_trend(path: str, groups: dict, rows: list[dict]) -> bool:
    """The mean final return and mean nAUC against the point mass's M (PointMass<M>-v0), one line per (script, noise)
    with its 95% CI band (a script at one M: a point with its CI as error bar). Draws nothing and returns False unless
    the runs cover two or more M."""
    trend_rows = [row for row in rows if POINT_MASS.fullmatch(row["env"])]
    if len({row["env"] for row in trend_rows}) < 2:
        return False
    scripts = panels(groups)[2]
    m_of = {row["env"]: int(POINT_MASS.fullmatch(row["env"]).group(1)) for row in trend_rows}
    lines = defaultdict(list)  # (script, noise) -> its rows, in the table's order
    for row in trend_rows:
        lines[(row["script"], row["noise"])].append(row)
    alone = defaultdict(list)  # M -> the lines with that one M only, whose points are set side by side, 0.06 apart
    for key, members in lines.items():
        if len(members) == 1:
            alone[m_of[members[0]["env"]]].append(key)
    shift = {key: 0.06 * (i - (len(keys) - 1) / 2) for keys in alone.values() for i, key in enumerate(keys)}
    fig, axes = plt.subplots(1, 2, figsize=(8.2, 3.6), squeeze=False, constrained_layout=True)
    for j, (metric, label) in enumerate(METRICS.items()):
        ax = axes[0, j]
        for (script, noise), members in lines.items():
            line = sorted((m_of[row["env"]], row) for row in members)
            m = np.array([point[0] for point in line]) + shift.get((script, noise), 0.0)
            mean, lo, hi = (np.array([point[1][c] for point in line]) for c in columns(metric, "mean"))
            seeds = "/".join(str(point[1]["n_seeds"]) for point in line)
            name = method_name(script) + ("" if noise == "none" else f", noise {noise}") + f" ({seeds})"
            style = {"color": colour(scripts, script), "linestyle": line_style(scripts, script)}
            if len(m) == 1:
                ax.errorbar(m, mean, yerr=[mean - lo, hi - mean], fmt="o", capsize=4, label=name, **style)
                continue
            ax.plot(m, mean, marker="o", label=name, **style)
            ax.fill_between(m, lo, hi, color=style["color"], alpha=0.12)
        ax.set_xticks(sorted(set(m_of.values())))
        ax.set_xlabel("bonus locations M (PointMass<M>-v0)", fontsize=8)
        ax.set_ylabel(f"{label}, mean over seeds", fontsize=8)
        ax.tick_params(labelsize=7)
    figure_legend(fig, axes)
    fig.suptitle(
        "Final return and nAUC against M: mean over seeds (seeds per M), 95% stratified-bootstrap CI", fontsize=10
    )
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def prepare_out(out: str) -> None:
    """Creates the output folder and checks, before the bootstrap, that the outputs can be written there: a probe file
    is created and removed (os.access would say yes to root on a read-only folder). One error line if not."""
    if os.path.lexists(out) and not os.path.isdir(out):
        fail(f"output folder {out!r} cannot be written: it exists and is not a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as error:
        where = "" if error.filename in (None, out) else f": {error.filename!r}"
        fail(f"output folder {out!r} cannot be created ({error.strerror or error}{where})")
    if reason := write_probe_error(out):
        fail(f"output folder {out!r} cannot be written ({reason})")
    for name in (*OUTPUTS, TREND, *MARGINS):
        path = os.path.join(out, name)
        if os.path.lexists(path) and not (os.path.isfile(path) and os.access(path, os.W_OK)):
            fail(f"output folder {out!r} cannot be written: {path!r} exists and is not a writable file")


def margins(rows: list[dict], baselines: list[str]) -> list[dict]:
    """Per env, each method that is not a baseline against the best baseline of that env, by the mean final return and
    by the mean nAUC (the best taken per measure): the method's mean, the best baseline's name and mean, the margin."""
    is_baseline = (lambda name: name in baselines) if baselines else (lambda name: not name.startswith("dsdpg"))
    found = []
    for env in dict.fromkeys(row["env"] for row in rows):
        mine = [row for row in rows if row["env"] == env]
        reference = [row for row in mine if is_baseline(row["script"])]
        if not reference:
            continue
        for row in (row for row in mine if not is_baseline(row["script"])):
            margin = {"script": row["script"], "env": env, "noise": row["noise"], "n_seeds": row["n_seeds"]}
            for measure in ("final_eval_return", "nauc"):
                best = max(reference, key=lambda other: other[f"{measure}_mean"])
                margin |= {
                    f"{measure}_mean": row[f"{measure}_mean"],
                    f"{measure}_best_baseline": best["script"],
                    f"{measure}_best_baseline_mean": best[f"{measure}_mean"],
                    f"{measure}_margin": row[f"{measure}_mean"] - best[f"{measure}_mean"],
                }
            found.append(margin)
    return found


def write_margins(out: str, found: list[dict]) -> None:
    write_csv(os.path.join(out, MARGINS[0]), found, list(found[0]))
    lines = [
        "| method | env | seeds | final return, mean | best baseline | margin | nAUC, mean | best baseline | margin |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in found:
        final = f"{m['final_eval_return_mean']:.2f} | {m['final_eval_return_best_baseline']} "
        final += f"{m['final_eval_return_best_baseline_mean']:.2f} | {m['final_eval_return_margin']:+.2f}"
        nauc = f"{m['nauc_mean']:.2f} | {m['nauc_best_baseline']} {m['nauc_best_baseline_mean']:.2f} | "
        nauc += f"{m['nauc_margin']:+.2f}"
        lines.append(f"| {m['script']} | {m['env']} | {m['n_seeds']} | {final} | {nauc} |")
    with open(os.path.join(out, MARGINS[1]), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_outputs(out: str, groups: dict, n_boot: int, seed: int, baselines: list[str] = ()) -> list[str]:
    """The bootstrap, then the tables and the figures of OUTPUTS (and TREND and MARGINS where they apply), into `out`:
    the names written."""
    rows = summarise(groups, n_boot, seed)
    ordered_runs = [run for members in groups.values() for run in members]
    write_csv(
        os.path.join(out, "runs.csv"),
        ordered_runs,
        ["script", "env", "noise", "seed", "final_eval_return", "nauc", "wall_time_s", "run_dir"],
    )
    write_csv(os.path.join(out, "table.csv"), rows, list(rows[0]))
    write_markdown(os.path.join(out, "table.md"), rows, n_boot, seed)
    write_evals(os.path.join(out, "evals.md"), groups)
    plot_bars(os.path.join(out, "final_return.png"), groups, rows, "final_eval_return", "final eval return")
    plot_bars(os.path.join(out, "nauc.png"), groups, rows, "nauc", "nAUC")
    plot_curves(os.path.join(out, "curves.png"), groups)
    plot_performance_profiles(os.path.join(out, "performance_profile.png"), groups, n_boot, seed)
    written = [*OUTPUTS, TREND] if plot_trend(os.path.join(out, TREND), groups, rows) else list(OUTPUTS)
    if found := margins(rows, list(baselines)):
        write_margins(out, found)
        written += MARGINS
    return written


def aggregate(
    runs: list[dict], out: str, n_boot: int, seed: int, baselines: list[str] = ()
) -> tuple[dict, str, list[str]]:
    """The runs grouped, their outputs written to `out` (checked writable first): (the groups, table.md's text, the
    names written)."""
    prepare_out(out)
    groups = group_runs(runs)
    try:
        written = write_outputs(out, groups, n_boot, seed, baselines)
        with open(os.path.join(out, "table.md")) as f:
            return groups, f.read(), written
    except OSError as error:
        fail(f"writing the outputs to {out!r} failed ({' '.join(str(error).splitlines())})")


def main(args: Args) -> None:
    if not os.path.isdir(args.runs_dir):
        fail(f"RUNS_DIR {args.runs_dir!r} is not a directory")
    if args.bootstrap_samples < 1:
        fail("--bootstrap-samples must be >= 1")
    if args.until_step is not None and args.until_step < 1:
        fail("--until-step must be >= 1")
    split_by = [name.replace("-", "_") for name in args.split_by]  # as the flag is spelled, or as args holds it
    runs = load_runs(args.runs_dir, split_by, args.strict, args.until_step)
    stopped = stopped_runs(args.runs_dir)
    if not runs:
        if stopped:
            fail(f"no summary.json under {args.runs_dir!r}; stopped on a non-finite loss: {', '.join(stopped)}")
        fail(f"no summary.json under {args.runs_dir!r}")
    unknown = sorted(set(args.env_ids) - {run["env"] for run in runs})
    if unknown:
        have = ", ".join(sorted({run["env"] for run in runs}))
        fail(f"--env-ids {', '.join(unknown)}: no run has that env id (the runs have {have})")
    runs = [run for run in runs if run["env"] in args.env_ids] if args.env_ids else runs
    for name in split_by:
        if not any(name in run["args"] for run in runs):
            fail(f"--split-by {name}: no run has that setting (names as in summary.json's args, e.g. dyna_reward)")
    out = args.out if args.out is not None else os.path.join(args.runs_dir, "aggregate")
    unknown = sorted(set(args.baselines) - {run["script"] for run in runs})
    if unknown:
        fail(
            f"--baselines {', '.join(unknown)}: no run has that method (the runs have "
            f"{', '.join(sorted({r['script'] for r in runs}))})"
        )
    groups, table, written = aggregate(runs, out, args.bootstrap_samples, args.seed, args.baselines)
    if stopped:
        note = f"\nStopped on a non-finite loss, not in the table ({len(stopped)}): " + ", ".join(stopped) + "\n"
        for run_dir in stopped:
            warn(f"{run_dir} stopped on a non-finite loss ({NONFINITE}); not in the table")
        with open(os.path.join(out, "table.md"), "a") as f:
            f.write(note)
        table += note
    print(f"{len(runs)} runs in {len(groups)} groups; wrote {', '.join(written)} to {out}")
    print(table, end="")


if __name__ == "__main__":
    main(tyro.cli(Args))
