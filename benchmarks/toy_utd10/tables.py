"""The README's point-mass table (M = 5, 10 updates per step), made from this experiment's `table.csv` so that no
number is copied by hand: a row per method, its final return as median [95 % CI], its nAUC as mean [95 % CI], bold
where that CI lies above the CIs of all three deterministic critics (TD3, TD3 (Dyna), MAGE), and its seeds.

Usage (after aggregate.py has written `benchmarks/toy_utd10/table.csv`; the page's "Command, commit, seeds"):
    python benchmarks/toy_utd10/tables.py            # prints it
    python benchmarks/toy_utd10/tables.py --write    # and writes it over the README's
"""

import importlib.util
import math
import os
from dataclasses import dataclass

import tyro

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE_CSV = os.path.join(HERE, "table.csv")
README = os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")
ENV = "PointMass5-v0"

_spec = importlib.util.spec_from_file_location("mujoco_cpu_tables", os.path.join(HERE, "..", "mujoco_cpu", "tables.py"))
mujoco_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mujoco_tables)  # its csv reader (which refuses a damaged table.csv), table writer and row
fail, markdown_row = mujoco_tables.fail, mujoco_tables.markdown_row

NAMES = {
    script: name
    for script, name in {
        **mujoco_tables.NAMES,  # the MuJoCo names, in their order, but plain TD3's and with the ascent slicing row
        "td3_huber_no_dyna": "TD3",
        "dsdpg_msmmd_sobolev_ascent": "DSDPG-MSMMD, ascent slicing",
    }.items()
    if script != "td3_mse_no_dyna"
}
"""The groups of table.csv (aggregate.py's names) as the README names them, in its row order"""
DETERMINISTIC = ("td3_huber_no_dyna", "td3_huber", "mage_huber_sobolev")
"""The rows a bold nAUC lies above"""
NAUC_MEAN = ("nauc_mean", "nauc_mean_ci_lo", "nauc_mean_ci_hi")


def read_rows(path: str) -> dict[str, dict]:
    """script -> its M = 5 row of table.csv, for every group NAMES lists; refuses a damaged file (mujoco_cpu's reader,
    and here the nAUC means too), one with a group twice and one that lacks a group."""
    rows = {}
    for row in mujoco_tables.read_csv(path):
        if row["env"] != ENV:
            continue
        if missing := [name for name in NAUC_MEAN if name not in row]:
            fail(f"{path} is damaged: its header has no column {', '.join(missing)}")
        if row["script"] in rows:
            fail(f"{path} has two {ENV} rows of {row['script']}")
        for name in NAUC_MEAN:
            try:
                value = float(row[name])
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                fail(f"{path} is damaged: {row['script']}'s {name} is {row[name]!r}")
        rows[row["script"]] = row
    if missing := [script for script in NAMES if script not in rows]:
        fail(f"{path} has no {ENV} row of {', '.join(missing)}")
    return rows


def two_places(row: dict, *names: str) -> str:
    """'2.12 [1.82, 2.44]' of a statistic and its 95 % CI"""
    value, low, high = (float(row[name]) for name in names)
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def readme_table(rows: dict[str, dict]) -> str:
    above = max(float(rows[script]["nauc_mean_ci_hi"]) for script in DETERMINISTIC)
    lines = ["| method | final return, median [95 % CI] | nAUC, mean [95 % CI] | seeds |", "|---|---|---|---|"]
    for script, name in NAMES.items():
        row = rows[script]
        final = two_places(row, "final_eval_return_median", "final_eval_return_ci_lo", "final_eval_return_ci_hi")
        area = two_places(row, *NAUC_MEAN)
        bold = float(row["nauc_mean_ci_lo"]) > above
        lines.append(markdown_row([name, final, f"**{area}**" if bold else area, row["n_seeds"]]))
    return "\n".join(lines)


@dataclass
class Args:
    write: bool = False
    """write the table over the README's instead of only printing it"""


def main(args: Args) -> None:
    table = readme_table(read_rows(TABLE_CSV))
    print(f"The README's point-mass table:\n\n{table}\n")
    if args.write:
        old = open(README).read()
        new = mujoco_tables.replace_table(old, table, "README.md")
        if new != old:
            with open(README, "w") as file:
                file.write(new)
        print(f"README.md: {'written' if new != old else 'unchanged'}")


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
