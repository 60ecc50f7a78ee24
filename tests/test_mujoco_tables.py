"""benchmarks/mujoco_cpu/tables.py: the MuJoCo page's and the README's tables are the tool's own, made from the
committed results/table.csv, and the tool formats, orders and refuses as it says."""

import csv

import pytest
from helpers import ROOT, load_benchmark

tables = load_benchmark("mujoco_cpu/tables")
RESULTS = ROOT / "benchmarks" / "mujoco_cpu" / "results" / "table.csv"


def test_whole_numbers_round_and_space_their_thousands():
    assert tables.whole(9359.67) == "9 360"
    assert tables.whole(-560.4) == "-560"
    assert tables.whole(1234567.0) == "1 234 567"
    assert tables.whole(0.4) == "0"
    assert tables.whole(-1500.6) == "-1 501"


def test_the_page_and_the_readme_hold_the_tools_tables_of_the_committed_results():
    table = tables.read_rows(str(RESULTS))
    page = (ROOT / "benchmarks" / "mujoco_cpu" / "README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert tables.page_table(table) in page, "benchmarks/mujoco_cpu/README.md: run benchmarks/mujoco_cpu/tables.py"
    assert tables.readme_table(table) in readme, "README.md's MuJoCo table: run benchmarks/mujoco_cpu/tables.py"


def write_table(path, rows: list[dict]) -> str:
    fields = ["script", "env", "noise", "n_seeds"] + [
        f"{metric}_{part}" for metric in ("final_eval_return", "nauc") for part in ("median", "ci_lo", "ci_hi")
    ]
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({field: row.get(field, 0.0) for field in fields})
    return str(path)


def row(script: str, env: str, median: float, seeds: int = 3) -> dict:
    return dict(
        script=script,
        env=env,
        noise="mult",
        n_seeds=seeds,
        final_eval_return_median=median,
        final_eval_return_ci_lo=median - 10,
        final_eval_return_ci_hi=median + 10,
        nauc_median=median / 2,
        nauc_ci_lo=median / 2 - 1,
        nauc_ci_hi=median / 2 + 1,
    )


def test_methods_follow_aggregates_order_and_a_task_appears_once_it_has_a_row(tmp_path):
    path = write_table(
        tmp_path / "table.csv",
        [
            row("dsdpg_msmmd_sobolev", "Walker2d-v4", 1234.4, seeds=2),
            row("td3_huber_no_dyna", "InvertedDoublePendulum-v4", 9000),
            row("dsdpg_msmmd_sobolev", "InvertedDoublePendulum-v4", 500),
            row("mage_huber_sobolev", "InvertedDoublePendulum-v4", 800),
            row("td3_huber_no_dyna", "Hopper-v4", 1.0),  # not a grid task: left out
        ],
    )
    table = tables.read_rows(path)
    assert tables.page_table(table).splitlines()[2:] == [
        "| InvertedDoublePendulum-v4 | TD3 `--no-dyna` (Huber) | 3 | 9 000 [8 990, 9 010] | 4 500 [4 499, 4 501] |",
        "| | MAGE | 3 | 800 [790, 810] | 400 [399, 401] |",
        "| | DSDPG-MSMMD | 3 | 500 [490, 510] | 250 [249, 251] |",
        "| Walker2d-v4 | DSDPG-MSMMD | 2 | 1 234 [1 224, 1 244] | 617 [616, 618] |",
    ]
    assert tables.readme_table(table).splitlines() == [
        "| method (median [95 % CI], seeds) | IDP final return | IDP nAUC | Walker2d final return |",
        "|---|---|---|---|",
        "| TD3 `--no-dyna` (Huber) | 9 000 [8 990, 9 010] (3) | 4 500 [4 499, 4 501] (3) | |",
        "| MAGE | 800 [790, 810] (3) | 400 [399, 401] (3) | |",
        "| DSDPG-MSMMD | 500 [490, 510] (3) | 250 [249, 251] (3) | 1 234 [1 224, 1 244] (2) |",
    ]


def test_a_group_the_tool_does_not_name_is_refused_in_one_line(tmp_path):
    path = write_table(tmp_path / "table.csv", [row("dsdpg_msmmd_sobolev_ascent", "HalfCheetah-v4", 1.0)])
    with pytest.raises(SystemExit) as stop:
        tables.read_rows(path)
    message = str(stop.value)
    assert "\n" not in message and "dsdpg_msmmd_sobolev_ascent on HalfCheetah-v4" in message


def test_write_replaces_only_its_table_even_when_a_task_adds_a_column():
    old = "| method (median [95 % CI], seeds) | IDP final return | IDP nAUC |\n|---|---|---|\n| MAGE | 1 (3) | 2 (3) |"
    new = (
        "| method (median [95 % CI], seeds) | IDP final return | IDP nAUC | Walker2d final return |\n|---|---|---|---|"
    )
    other = (
        "| method (median [95 % CI], seeds) | IDP final return | HalfCheetah final return |\n|---|---|---|\n"
        "| x | 1 | 2 |"
    )
    text = f"# Results\n\n{old}\n\nprose after it\n\n{other}\n"
    assert tables.replace_table(text, new, "README.md") == f"# Results\n\n{new}\n\nprose after it\n\n{other}\n"
    for count, doc in ((0, other), (2, f"{old}\n\n{old}")):  # `other` shares two of the three cells
        with pytest.raises(SystemExit) as stop:
            tables.replace_table(doc, new, "README.md")
        assert str(stop.value) == (
            f"tables.py: error: README.md has {count} tables starting "
            "'| method (median [95 % CI], seeds) | IDP final return | IDP nAUC |', not one"
        )


HEADER, FIRST_ROW = RESULTS.read_text().splitlines()[:2]
CELLS = HEADER.count(",") + 1


def first_half(line: str) -> str:
    """A line of table.csv cut after the first half of its cells."""
    return ",".join(line.split(",")[: CELLS // 2])


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "no {}: make it with aggregate.py first (see this tool's usage)"),
        ("", "{} is empty: make it again with aggregate.py"),
        (HEADER + "\n", "{} has a header but no rows: make it again with aggregate.py"),
        (f"{HEADER}\n{first_half(FIRST_ROW)}", f"{{}} is damaged: line 2 has {CELLS // 2} cells, not {CELLS}"),
        (first_half(HEADER), "{} is damaged: its header has no column nauc_median, nauc_ci_lo, nauc_ci_hi"),
        (f"{HEADER}\n{FIRST_ROW.replace(',3,', ',three,', 1)}\n", "{} is damaged: line 2's n_seeds is 'three'"),
        (f"{HEADER}\n{FIRST_ROW.replace('HalfCheetah-v4', 'Hopper-v4')}\n", "{} has no row of the grid's tasks ("),
    ],
    ids=["missing", "empty", "header-only", "half-a-row", "half-a-header", "not-a-number", "no-grid-task"],
)
def test_a_missing_or_damaged_table_csv_is_refused_in_one_line_naming_it(
    tmp_path, monkeypatch, capsys, content, problem
):
    """tables.py --write without table.csv, or with one cut short or damaged: one line naming the CSV and what is wrong
    with it (not the README), exit status 1, before any table is printed or written."""
    csv_path, page, readme = tmp_path / "table.csv", tmp_path / "page.md", tmp_path / "README.md"
    if content is not None:
        csv_path.write_text(content)
    page.write_text("the page")
    readme.write_text("the README")
    monkeypatch.setattr(tables, "TABLE_CSV", str(csv_path))
    monkeypatch.setattr(tables, "PAGE", str(page))
    monkeypatch.setattr(tables, "README", str(readme))
    with pytest.raises(SystemExit) as stop:
        tables.main(tables.Args(write=True))
    assert str(stop.value).startswith("tables.py: error: " + problem.format(csv_path)) and "\n" not in str(stop.value)
    assert capsys.readouterr().out == ""
    assert page.read_text() == "the page" and readme.read_text() == "the README"
