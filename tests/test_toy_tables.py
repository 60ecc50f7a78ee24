"""benchmarks/toy_utd10/tables.py: the README's point-mass table is the tool's own, made from the committed
table.csv; a bold nAUC is one whose CI lies above every deterministic critic's, and a table.csv without a group is
refused in one line."""

import csv

import pytest
from helpers import ROOT, load_benchmark

tables = load_benchmark("toy_utd10/tables")
TABLE_CSV = ROOT / "benchmarks" / "toy_utd10" / "table.csv"


def test_the_readme_holds_the_tools_table_of_the_committed_results():
    table = tables.readme_table(tables.read_rows(str(TABLE_CSV)))
    readme = (ROOT / "README.md").read_text()
    hint = "README.md's point-mass table: run benchmarks/toy_utd10/tables.py --write"
    assert tables.mujoco_tables.replace_table(readme, table, "README.md") == readme, hint  # the whole table, no more


def rows_with(nauc: dict[str, tuple[float, float, float]]) -> dict[str, dict]:
    """A row per named group, every statistic 1.0 but the nAUC mean and CI given for some."""
    rows = {}
    for script in tables.NAMES:
        row = {"n_seeds": "5", **{f"final_eval_return_{p}": "1.0" for p in ("median", "ci_lo", "ci_hi")}}
        row.update(zip(tables.NAUC_MEAN, map(str, nauc.get(script, (1.0, 0.5, 1.5)))))
        rows[script] = row
    return rows


def test_bold_is_a_ci_above_every_deterministic_critics():
    deterministic = {
        "td3_huber_no_dyna": (2.0, 1.8, 2.4),
        "td3_huber": (2.0, 1.4, 2.5),
        "mage_huber_sobolev": (1.9, 1.5, 2.3),
    }
    touching = {"mmd_critic": (3.0, 2.5, 4.0)}  # its low end meets TD3 (Dyna)'s high end: not apart
    above = {"dsdpg_mmd_sobolev": (4.5, 2.51, 4.9)}
    lines = tables.readme_table(rows_with({**deterministic, **touching, **above})).split("\n")
    by_name = {line.split(" | ")[0].removeprefix("| "): line for line in lines[2:]}
    assert "**4.50 [2.51, 4.90]**" in by_name["DSDPG-MMD"]
    assert "**" not in by_name["MMD critic"] and "3.00 [2.50, 4.00]" in by_name["MMD critic"]
    assert sum("**" in line for line in lines) == 1


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda rows: [row for row in rows if row[0] != "iqn"], "has no PointMass5-v0 row of iqn"),
        (lambda rows: rows + [rows[1]], "has two PointMass5-v0 rows of td3_huber_no_dyna"),
        (
            lambda rows: [[cell for i, cell in enumerate(row) if rows[0][i] != "nauc_mean"] for row in rows],
            "is damaged: its header has no column nauc_mean",
        ),
    ],
)
def test_a_table_without_a_group_with_one_twice_or_without_the_means_is_refused_in_one_line(tmp_path, change, message):
    with open(TABLE_CSV, newline="") as file:
        rows = list(csv.reader(file))
    changed = tmp_path / "table.csv"
    with open(changed, "w", newline="") as file:
        csv.writer(file).writerows(change(rows))
    with pytest.raises(SystemExit) as stop:
        tables.read_rows(str(changed))
    assert str(stop.value) == f"tables.py: error: {changed} {message}"
