"""The MuJoCo CPU grid's two result tables, made from aggregate.py's `results/table.csv`, so that no number is copied by
hand: the page's table (a row per task and method: seeds, final return and nAUC, each median [95 % CI]) and the
README's (a row per method, a column per task and statistic, the seeds in brackets). Both list the methods in
aggregate.py's order and round to whole numbers with a space between thousands ("9 360").

Usage (after `python benchmarks/aggregate.py benchmarks/mujoco_cpu/grid --out benchmarks/mujoco_cpu/results`):
    python benchmarks/mujoco_cpu/tables.py            # prints both
    python benchmarks/mujoco_cpu/tables.py --write    # and writes each over the old one in its file
"""

import csv
import math
import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import tyro

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from aggregate import SCRIPT_ORDER  # noqa: E402

TABLE_CSV = os.path.join(HERE, "results", "table.csv")
PAGE = os.path.join(HERE, "README.md")
README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")

TASKS = {"InvertedDoublePendulum-v4": "IDP", "HalfCheetah-v4": "HalfCheetah", "Walker2d-v4": "Walker2d"}
"""The grid's tasks in table order, with the README's short names"""
NAMES = {
    "td3_huber_no_dyna": "TD3 `--no-dyna` (Huber)",
    "td3_mse_no_dyna": "TD3-MSE `--no-dyna`",
    "td3_huber": "TD3 (Dyna)",
    "mage_huber_sobolev": "MAGE",
    "iqn": "IQN",
    "mmd_critic": "MMD critic",
    "dsdpg_mmd_sobolev": "DSDPG-MMD",
    "dsdpg_msmmd_sobolev": "DSDPG-MSMMD",
}
"""The grid's groups (aggregate.py's script names) as the page names them"""
README_COLUMNS = {"InvertedDoublePendulum-v4": ("final_eval_return", "nauc")}
"""The README's statistics per task (IDP, whose solved runs can collapse, also its nAUC); the others: final return"""
LABELS = {"final_eval_return": "final return", "nauc": "nAUC"}
NUMBERS = [f"{metric}_{part}" for metric in LABELS for part in ("median", "ci_lo", "ci_hi")]
"""The columns of table.csv the tables print, besides script, env and n_seeds"""


def whole(value: float) -> str:
    """9359.67 -> '9 360', -560.4 -> '-560': rounded, a space between thousands."""
    return f"{round(value):,}".replace(",", " ")


def markdown_row(cells: list[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def estimate(row: dict, metric: str) -> str:
    """'median [lo, hi]' of a metric's median and its 95 % CI."""
    median, low, high = (float(row[f"{metric}_{part}"]) for part in ("median", "ci_lo", "ci_hi"))
    return f"{whole(median)} [{whole(low)}, {whole(high)}]"


def fail(message: str) -> NoReturn:
    sys.exit(f"tables.py: error: {message}")


def read_csv(path: str) -> list[dict]:
    """table.csv's rows as dicts; refuses, naming the file, one that is missing, unreadable, damaged (a column the
    tables print missing, a row cut short or too long, a number that is not one) or without rows."""
    try:
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.reader(file)
            lines = [(reader.line_num, line) for line in reader if line]  # (line number, cells), blank lines skipped
    except FileNotFoundError:
        fail(f"no {path}: make it with aggregate.py first (see this tool's usage)")
    except OSError as error:
        fail(f"cannot read {path} ({error.strerror or error})")
    except (UnicodeDecodeError, csv.Error) as error:
        fail(f"{path} is damaged ({error})")
    if not lines:
        fail(f"{path} is empty: make it again with aggregate.py")
    (_, names), lines = lines[0], lines[1:]
    if missing := [name for name in ("script", "env", "n_seeds", *NUMBERS) if name not in names]:
        fail(f"{path} is damaged: its header has no column {', '.join(missing)}")
    if not lines:
        fail(f"{path} has a header but no rows: make it again with aggregate.py")
    rows = []
    for line_num, line in lines:
        if len(line) != len(names):
            fail(f"{path} is damaged: line {line_num} has {len(line)} cells, not {len(names)}")
        row = dict(zip(names, line))
        for name in ("n_seeds", *NUMBERS):
            try:
                value = float(row[name])
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or (name == "n_seeds" and not value.is_integer()):
                fail(f"{path} is damaged: line {line_num}'s {name} is {row[name]!r}")
        rows.append(row)
    return rows


def read_rows(path: str) -> dict[tuple[str, str], dict]:
    """(env, script) -> the row of table.csv, for the grid's tasks and groups; refuses a damaged table.csv (read_csv),
    one without a row of the grid's tasks, and a row whose group is unnamed."""
    table = {}
    for row in read_csv(path):
        if row["env"] not in TASKS:
            continue
        if row["script"] not in NAMES:
            fail(f"{path} has a group this tool does not name: {row['script']} on {row['env']}")
        table[row["env"], row["script"]] = row
    if not table:
        fail(f"{path} has no row of the grid's tasks ({', '.join(TASKS)})")
    return table


def ordered(scripts) -> list[str]:
    return sorted(scripts, key=SCRIPT_ORDER.index)


def page_table(table: dict[tuple[str, str], dict]) -> str:
    lines = [
        "| task | method | seeds | final return, median [95 % CI] | nAUC, median [95 % CI] |",
        "|---|---|---|---|---|",
    ]
    for env in TASKS:
        for index, script in enumerate(ordered(s for e, s in table if e == env)):
            row = table[env, script]
            task = env if index == 0 else ""
            final, area = estimate(row, "final_eval_return"), estimate(row, "nauc")
            lines.append(markdown_row([task, NAMES[script], row["n_seeds"], final, area]))
    return "\n".join(lines)


def readme_table(table: dict[tuple[str, str], dict]) -> str:
    envs = [env for env in TASKS if any(e == env for e, _ in table)]
    columns = [
        (env, metric, f"{TASKS[env]} {LABELS[metric]}")
        for env in envs
        for metric in README_COLUMNS.get(env, ("final_eval_return",))
    ]
    lines = [
        "| method (median [95 % CI], seeds) | " + " | ".join(label for _, _, label in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for script in ordered({s for _, s in table}):
        cells = []
        for env, metric, _ in columns:
            row = table.get((env, script))
            cells.append(f"{estimate(row, metric)} ({row['n_seeds']})" if row else "")
        lines.append(markdown_row([NAMES[script], *cells]))
    return "\n".join(lines)


def replace_table(text: str, table: str, path: str) -> str:
    """`text` with its markdown table whose header starts with the same three cells as `table`'s (a header that
    gains a column as a task is added is still found) replaced by `table`; refuses none or several such tables."""
    start = "|".join(table.split("|", 4)[:4]) + "|"
    lines = text.split("\n")
    found = [i for i, line in enumerate(lines) if line.startswith(start)]
    if len(found) != 1:
        fail(f"{path} has {len(found)} tables starting {start!r}, not one")
    end = found[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[: found[0]] + table.split("\n") + lines[end:])


@dataclass
class Args:
    write: bool = False
    """write each table over the old one in its file (the page and the README) instead of only printing them"""


def main(args: Args) -> None:
    table = read_rows(TABLE_CSV)
    made = (("page", PAGE, page_table(table)), ("README", README, readme_table(table)))
    for what, path, text in made:
        print(f"The {what}'s table ({os.path.relpath(path)}):\n\n{text}\n")
    if args.write:
        old = {path: open(path).read() for _, path, _ in made}
        new = {
            path: replace_table(old[path], text, os.path.relpath(path)) for _, path, text in made
        }  # both found first
        for path in new:
            if new[path] != old[path]:
                with open(path, "w") as file:
                    file.write(new[path])
            print(f"{os.path.relpath(path)}: {'written' if new[path] != old[path] else 'unchanged'}")


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
