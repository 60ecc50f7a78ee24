"""The questions' tables and figure, made from the runs' summaries so that no number is copied by hand: per question,
the new group(s) of this grid beside the mujoco_cpu grid's groups at the same seeds (1-3) and settings but the one asked
about. Per group: seeds, final return and nAUC as median [95 % CI] (aggregate.py's bootstrap: rliable's stratified
bootstrap, 2 000 resamples, seed 0), on IDP the runs that solve it (an evaluation >= SOLVED) and keep it (no
evaluation below HELD after the first solve, as mujoco_cpu/stability.md counts), and per compared pair whether they
separate: CIs apart, or every run of one above every run of the other, in final return and in nAUC.

The README's rows of this grid's groups (a row per group, the mujoco_cpu table's columns) and the page's status line
(runs finished) come from the same summaries.

Usage:
    python benchmarks/mujoco_questions/tables.py            # prints the tables
    python benchmarks/mujoco_questions/tables.py --write    # and writes them into the page and README, and curves.png
"""

import functools
import json
import os
import sys
from dataclasses import dataclass

import numpy as np
import tyro

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import aggregate  # noqa: E402

PAGE = os.path.join(HERE, "README.md")
README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")
NEW, OLD = os.path.join(HERE, "grid"), os.path.join(os.path.dirname(HERE), "mujoco_cpu", "grid")
SEEDS = (1, 2, 3)
SOLVED, HELD = 9350.0, 9000.0
IDP, HC = "InvertedDoublePendulum-v4", "HalfCheetah-v4"
QUESTIONS = {  # id: (env, [(row label, grid, exp_name)], [(new row, compared row)])
    "a": (
        HC,
        [
            ("DSDPG-MSMMD, Adam 0.3 x 30", NEW, "dsdpg_msmmd_adam0.3x30"),
            ("DSDPG-MSMMD, the paper's search", OLD, "dsdpg_msmmd_sobolev"),
            ("DSDPG-MMD", OLD, "dsdpg_mmd_sobolev"),
            ("TD3 `--no-dyna` (Huber)", OLD, "td3_huber_no_dyna"),
        ],
        [(0, 1), (0, 2), (0, 3)],
    ),
    "b": (
        IDP,
        [
            ("DSDPG-MMD, truncation 10 %", NEW, "dsdpg_mmd_trunc10"),
            ("DSDPG-MMD, truncation 25 %", OLD, "dsdpg_mmd_sobolev"),
            ("MMD critic, truncation 10 %", NEW, "mmd_critic_trunc10"),
            ("MMD critic, truncation 25 %", OLD, "mmd_critic"),
            ("TD3 `--no-dyna` (Huber)", OLD, "td3_huber_no_dyna"),
        ],
        [(0, 1), (2, 3), (0, 4), (2, 4)],
    ),
    "c": (
        IDP,
        [
            ("DSDPG-MSMMD, Adam 0.3 x 30", NEW, "dsdpg_msmmd_adam0.3x30"),
            ("DSDPG-MSMMD, the paper's search", OLD, "dsdpg_msmmd_sobolev"),
            ("TD3 `--no-dyna` (Huber)", OLD, "td3_huber_no_dyna"),
        ],
        [(0, 1), (0, 2)],
    ),
    "d": (
        IDP,
        [
            ("DSDPG-MMD, lr 1e-4", NEW, "dsdpg_mmd_lr1e-4"),
            ("DSDPG-MMD, lr 3e-4", OLD, "dsdpg_mmd_sobolev"),
            ("MMD critic, lr 1e-4", NEW, "mmd_critic_lr1e-4"),
            ("MMD critic, lr 3e-4", OLD, "mmd_critic"),
            ("TD3 (Dyna), lr 1e-4", NEW, "td3_huber_lr1e-4"),
            ("TD3 (Dyna), lr 3e-4", OLD, "td3_huber"),
        ],
        [(0, 1), (2, 3), (4, 5)],
    ),
}


README_NAMES = {
    "dsdpg_msmmd_adam0.3x30": "DSDPG-MSMMD `--slice-lr 0.3 --slice-steps 30`",
    "dsdpg_mmd_trunc10": "DSDPG-MMD `--truncation 10`",
    "mmd_critic_trunc10": "MMD critic `--truncation 10`",
    "dsdpg_mmd_lr1e-4": "DSDPG-MMD at lr 1e-4",
    "mmd_critic_lr1e-4": "MMD critic at lr 1e-4",
    "td3_huber_lr1e-4": "TD3 (Dyna) at lr 1e-4",
}
"""this grid's groups (their --exp-name) as the README names them, in its row order"""
README_COLUMNS = [(IDP, "final_eval_return", "IDP final return"), (IDP, "nauc", "IDP nAUC")]
README_COLUMNS += [(HC, "final_eval_return", "HalfCheetah final return")]
"""the README's columns, those of the mujoco_cpu table it sits under"""


@dataclass
class Args:
    write: bool = False
    """write the tables and the status line into the page, the rows into README.md (each between its markers) and
    the figure to curves.png"""


def runs_of(grid: str, exp_name: str, env: str) -> list[dict]:
    """The finished runs of one group at SEEDS, by seed."""
    runs = [run for run in load(grid) if run["script"] == exp_name and run["env"] == env and run["seed"] in SEEDS]
    return sorted(runs, key=lambda run: run["seed"])


_loaded: dict[str, list[dict]] = {}


def load(grid: str) -> list[dict]:
    """Every finished run under a grid folder (read once)."""
    if grid not in _loaded:
        _loaded[grid] = aggregate.load_runs(grid) if os.path.isdir(grid) else []
    return _loaded[grid]


def solved_and_kept(run: dict) -> tuple[bool, bool]:
    """An evaluation >= SOLVED; and after the first such, none below HELD."""
    returns = run["eval_returns"]
    first = next((i for i, value in enumerate(returns) if value >= SOLVED), None)
    if first is None:
        return False, False
    return True, all(value >= HELD for value in returns[first:])


def estimate(values: list[float]) -> tuple[float, float, float]:
    return aggregate.interval_estimates(values, 2000, 0)["median"]


def whole(value: float) -> str:
    return f"{round(value):,}".replace(",", " ")


def cell(values: list[float]) -> str:
    if not values:
        return "-"
    median, lo, hi = estimate(values)
    return f"{whole(median)} [{whole(lo)}, {whole(hi)}]"


def separation(first: list[float], second: list[float]) -> str:
    """'above' / 'below' where the CIs are apart or every run of `first` is above (below) every run of `second`, else
    'not separable'."""
    if not first or not second:
        return "-"
    (_, lo1, hi1), (_, lo2, hi2) = estimate(first), estimate(second)
    if lo1 > hi2 or min(first) > max(second):
        return "above"
    if hi1 < lo2 or max(first) < min(second):
        return "below"
    return "not separable"


def question_table(key: str) -> str:
    env, rows, pairs = QUESTIONS[key]
    groups = [runs_of(grid, name, env) for _, grid, name in rows]
    header = ["group", "seeds", "final return, median [95 % CI]", "nAUC, median [95 % CI]"]
    header += ["solved / kept"] if env == IDP else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (label, grid, _), runs in zip(rows, groups):
        where = "this grid" if grid == NEW else "mujoco_cpu"
        cells = [f"{label} ({where})", ",".join(str(run["seed"]) for run in runs) or "-"]
        cells += [cell([run["final_eval_return"] for run in runs]), cell([run["nauc"] for run in runs])]
        if env == IDP:
            counts = [solved_and_kept(run) for run in runs]
            cells.append(f"{sum(s for s, _ in counts)} / {sum(k for _, k in counts)}" if runs else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for first, second in pairs:
        a, b = groups[first], groups[second]
        final = separation([r["final_eval_return"] for r in a], [r["final_eval_return"] for r in b])
        area = separation([r["nauc"] for r in a], [r["nauc"] for r in b])
        lines.append(f"- {rows[first][0]} against {rows[second][0]} ({len(a)} / {len(b)} seeds):")
        lines.append(f"  final return {final}, nAUC {area}.")
    return "\n".join(lines) + "\n"


SEARCHING = "dsdpg_msmmd_adam0.3x30"
PAPER_GAIN = {
    HC: "1.04-1.09 ([seed 3](../mujoco_cpu/diagnosis.md#slicing-and-contraction))",
    IDP: "1.008-1.020 ([seeds 1-5](../mujoco_cpu/diagnosis.md#contraction-and-slicing))",
}
"""the paper's search's slice gain in the mujoco_cpu runs, where diagnosis.md quotes it (their events are gone)"""


def slice_gain_line(env: str) -> str:
    """The slice gain (MSMMD^2 on the slice the search found over that on its random start) this grid's searching
    DSDPG-MSMMD runs logged: per run, the smallest and largest interval median (logged_diagnostics.py --save's
    `logged`), beside the paper's search's in mujoco_cpu."""
    ranges = []
    for run in runs_of(NEW, SEARCHING, env):
        with open(os.path.join(run["run_dir"], "summary.json")) as f:
            tags = json.load(f).get("logged", {}).get("tags", {})
        if medians := tags.get("losses/slice_gain", {}).get("median"):
            ranges.append(f"seed {run['seed']} {min(medians):.2f}-{max(medians):.2f}")
    found = ", ".join(ranges) or "-"
    return (
        "- Slice gain, MSMMD^2 on the slice found over that on its random start (the range of its medians per\n"
        f"  evaluation interval): {found};\n  the paper's search: {PAPER_GAIN[env]}.\n"
    )


COLOURS = {"DSDPG-MSMMD": "tab:blue", "DSDPG-MMD": "tab:orange", "MMD critic": "tab:green", "TD3": "tab:red"}
"""a method's colour in every panel; this grid's groups solid, mujoco_cpu's dashed"""


def plot(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(QUESTIONS), figsize=(5 * len(QUESTIONS), 4))
    for ax, (key, (env, rows, _)) in zip(axes, QUESTIONS.items()):
        for index, (label, grid, name) in enumerate(rows):
            runs = runs_of(grid, name, env)
            if not runs:
                continue
            steps, returns = aggregate.align_curves(runs)
            q25, median, q75 = np.percentile(returns, [25, 50, 75], axis=0)
            color = next(c for family, c in COLOURS.items() if label.startswith(family))
            style = "-" if grid == NEW else "--"
            ax.plot(steps, median, style, color=color, label=f"{label} ({len(runs)})", marker=".")
            ax.fill_between(steps, q25, q75, color=color, alpha=0.12)
        ax.set_title(f"{key}. {env}", fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left")
    axes[0].set_ylabel("evaluation return: median over seeds, 25-75 % band", fontsize=8)
    fig.suptitle("Solid: this grid; dashed: mujoco_cpu's groups at the same seeds (1-3)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def planned() -> list[tuple[str, str]]:
    """(exp_name, env) of every group this grid runs, each once."""
    groups = [(name, env) for env, rows, _ in QUESTIONS.values() for _, grid, name in rows if grid == NEW]
    return list(dict.fromkeys(groups))


def progress() -> str:
    """'complete', or 'running, N of 21 runs finished'."""
    done = sum(len(runs_of(NEW, name, env)) for name, env in planned())
    total = len(planned()) * len(SEEDS)
    return "complete" if done == total else f"running, {done} of {total} runs finished"


def status_line() -> str:
    return f"**Status: {progress()}** (the tables show the finished runs).\n"


def readme_rows() -> str:
    """A sentence and a table: a row per group of this grid, in the mujoco_cpu README table's columns, "-" where a
    group's runs on a task have not finished yet."""
    lines = [
        'Issue 69\'s variants of these methods at the same settings and seeds 1-3 ("-": not finished yet)',
        f"([mujoco_questions](benchmarks/mujoco_questions/README.md), {progress()}):",
        "",
        "| variant (median [95 % CI], seeds) | " + " | ".join(label for _, _, label in README_COLUMNS) + " |",
        "|---|" + "---|" * len(README_COLUMNS),
    ]
    for name, label in README_NAMES.items():
        cells = []
        for env, metric, _ in README_COLUMNS:
            runs = runs_of(NEW, name, env)
            empty = "-" if (name, env) in planned() else ""
            cells.append(f"{cell([run[metric] for run in runs])} ({len(runs)})" if runs else empty)
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n\n"


COST = {  # exp_name: the cost file's row that prices it
    "dsdpg_msmmd_adam0.3x30": "dsdpg_msmmd_sobolev@wm_hidden_dim=256,compile=true,slice_lr=0.3,slice_steps=30",
    "mmd_critic_trunc10": "mmd_critic@wm_hidden_dim=256,truncation=10",
    "dsdpg_mmd_trunc10": "dsdpg_mmd_sobolev@wm_hidden_dim=256,truncation=10",
    "td3_huber_lr1e-4": "td3_huber@wm_hidden_dim=256",
    "mmd_critic_lr1e-4": "mmd_critic@wm_hidden_dim=256,truncation=10",  # the learning rate costs nothing
    "dsdpg_mmd_lr1e-4": "dsdpg_mmd_sobolev@wm_hidden_dim=256,truncation=10",
}
"""the cost plan's timing row of each group (benchmarks/timing.py, cost/*.json); the truncation's dose and the
learning rate change no operation's size, so a group at lr 1e-4 is priced by its method's row"""
COST_FILES = {
    IDP: os.path.join(HERE, "cost", "idp_timing.json"),
    HC: os.path.join(HERE, "cost", "halfcheetah_timing.json"),
}
LEARNING_STEPS = {IDP: 20_000, HC: 145_000}
"""env steps once learning has started (the grid's 25 000 / 150 000 less its 5 000 random steps)"""


@functools.cache
def step_ms(name: str, env: str) -> float:
    """The cost plan's ms per env step once learning has started (the group's timing row)."""
    with open(COST_FILES[env]) as f:
        rows = {row["script"]: row for row in json.load(f)["rows"]}
    return rows[COST[name]]["ms_per_iteration"]


def hours(value: float) -> str:
    return f"{value:.1f} h"


def cost_table() -> str:
    """Per group: the plan (ms per step once learning has started, learning steps, hours for one run and for three
    seeds), the hours each finished run took (its summary's wall_time_s, which sums its resumed parts) and their ratio
    to the plan; then the grid's total so far against the plan."""
    header = ["group", "ms / step", "learning steps", "planned: one run", "three seeds", "paid: finished runs"]
    header += ["paid / planned"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    planned_total = paid_total = planned_done = 0.0
    for key, (env, rows, _) in QUESTIONS.items():
        for label, grid, name in rows:
            if grid != NEW:
                continue
            ms, steps = step_ms(name, env), LEARNING_STEPS[env]
            plan = ms * steps / 3.6e6
            paid = [run["wall_time_s"] / 3600 for run in runs_of(NEW, name, env)]
            planned_total += 3 * plan
            paid_total += sum(paid)
            planned_done += plan * len(paid)
            each = ", ".join(hours(value) for value in paid) or "-"
            ratio = f"{sum(paid) / (plan * len(paid)):.2f}" if paid else "-"
            cells = [f"{key}. {label}", f"{ms:.1f}", whole(steps), hours(plan), hours(3 * plan), each, ratio]
            lines.append("| " + " | ".join(cells) + " |")
    ratio = f"{paid_total / planned_done:.2f}" if planned_done else "-"
    lines.append(f"| all | | | | {hours(planned_total)} | {hours(paid_total)} | {ratio} |")
    return "\n".join(lines) + "\n"


def marker(key: str) -> tuple[str, str]:
    return f"<!-- {key}: tables.py writes this -->", f"<!-- end of {key} -->"


def written(path: str, blocks: dict[str, str]) -> str:
    """The text of `path` with each block written between its markers; refuses a file without them."""
    with open(path) as f:
        text = f.read()
    for key, block in blocks.items():
        begin, end = marker(key)
        if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
            raise SystemExit(f"tables.py: error: {os.path.relpath(path)} lacks the markers of {key} ({begin})")
        text = text[: text.index(begin) + len(begin)] + "\n" + block + text[text.index(end) :]
    return text


def page_blocks() -> dict[str, str]:
    """What tables.py writes into the page, by its markers' names: the status line, each question's table (with the
    slice gain under those of the searching slice) and the cost table."""
    blocks = {"status": status_line()}
    for key, (env, _, _) in QUESTIONS.items():
        blocks[f"table {key}"] = question_table(key) + (slice_gain_line(env) if key in ("a", "c") else "")
    return blocks | {"cost": cost_table()}


def main(args: Args) -> None:
    blocks, rows = page_blocks(), readme_rows()
    for key, block in [*blocks.items(), ("README", rows)]:
        print(f"## {key}\n\n{block}")
    if not args.write:
        return
    page = written(PAGE, blocks)
    readme = written(README, {"issue 69's rows": rows})  # both checked before either is written
    for path, text in ((PAGE, page), (README, readme)):
        with open(path, "w") as f:
            f.write(text)
    plot(os.path.join(HERE, "curves.png"))


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
