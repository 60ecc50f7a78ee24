"""benchmarks/mujoco_questions/tables.py: what it counts as solved and kept, and when it calls two groups apart."""

import json

import pytest
from helpers import load_benchmark

tables = load_benchmark("mujoco_questions/tables")


def run(*returns: float) -> dict:
    return {"eval_returns": list(returns)}


def test_solved_and_kept_read_the_evaluations_after_the_first_solve():
    """Solved: an evaluation >= 9 350; kept: none below 9 000 after the first such (mujoco_cpu/stability.md's count)."""
    assert tables.solved_and_kept(run(100, 9000, 9349.9)) == (False, False)
    assert tables.solved_and_kept(run(100, 9350, 9001, 9360)) == (True, True)
    assert tables.solved_and_kept(run(8000, 9360, 8999, 9360)) == (True, False)  # dropped once: not kept
    assert tables.solved_and_kept(run(500, 9360)) == (True, True)  # solved at the last evaluation


def test_two_groups_separate_when_cis_are_apart_or_every_run_is_above():
    assert tables.separation([10.0, 11.0, 12.0], [1.0, 2.0, 3.0]) == "above"
    assert tables.separation([1.0, 2.0, 3.0], [10.0, 11.0, 12.0]) == "below"
    assert tables.separation([1.0, 5.0, 9.0], [2.0, 6.0, 8.0]) == "not separable"
    assert tables.separation([4.0, 5.0, 100.0], [1.0, 2.0, 3.0]) == "above"  # every run above, whatever the CIs
    assert tables.separation([], [1.0]) == "-"


def summary(name: str, env: str, seed: int, final: float, nauc: float) -> dict:
    return {"script": name, "env": env, "seed": seed, "final_eval_return": final, "nauc": nauc, "eval_returns": []}


def test_readme_rows_and_status_count_this_grids_finished_runs(monkeypatch):
    """A row per group in the README's columns: a finished group's median with its seed count, "-" where a planned
    group has no finished run on the task, empty where the grid never runs it; the status counts runs of 21."""
    assert len(tables.planned()) == 7
    monkeypatch.setitem(tables._loaded, tables.NEW, [])
    assert tables.progress() == "running, 0 of 21 runs finished"
    runs = [summary("mmd_critic_trunc10", tables.IDP, seed, 9000.0 + seed, 5000.0) for seed in (1, 2)]
    runs += [summary("mmd_critic_trunc10", tables.IDP, 4, 0.0, 0.0)]  # a seed outside 1-3: not counted
    runs += [summary("dsdpg_msmmd_adam0.3x30", tables.HC, 1, 4321.4, 2000.0)]
    monkeypatch.setitem(tables._loaded, tables.NEW, runs)
    assert tables.progress() == "running, 3 of 21 runs finished"
    assert tables.status_line().startswith("**Status: running, 3 of 21 runs finished**")
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in tables.readme_rows().splitlines()[4:] if line}
    assert rows["MMD critic `--truncation 10`"][0] == f"{tables.cell([9001.0, 9002.0])} (2)"
    assert rows["MMD critic `--truncation 10`"][1].startswith("5 000 [5 000, 5 000] (2)")
    assert rows["MMD critic `--truncation 10`"][2] == " |"  # HalfCheetah: not in the grid
    assert rows["DSDPG-MSMMD `--slice-lr 0.3 --slice-steps 30`"] == ["-", "-", "4 321 [4 321, 4 321] (1) |"]
    assert rows["DSDPG-MMD `--truncation 10`"][:2] == ["-", "-"]


def test_written_refuses_a_file_without_its_markers(tmp_path):
    page = tmp_path / "README.md"
    begin, end = tables.marker("status")
    page.write_text(f"head\n{begin}\nold\n{end}\ntail\n")
    assert tables.written(str(page), {"status": "new\n"}) == f"head\n{begin}\nnew\n{end}\ntail\n"
    page.write_text(f"head\n{end}\n{begin}\n")  # in the wrong order
    try:
        tables.written(str(page), {"status": "new\n"})
    except SystemExit as error:
        assert "lacks the markers of status" in str(error)
    else:
        raise AssertionError("a file without the status markers was written")


def test_cost_table_prices_each_group_by_its_timing_row_and_sums_what_finished_runs_paid(monkeypatch):
    """Planned hours: the cost file's ms per step x the learning steps; paid: the finished runs' wall time."""
    ms = tables.step_ms("mmd_critic_trunc10", tables.IDP)
    plan = ms * 20_000 / 3.6e6
    run = summary("mmd_critic_trunc10", tables.IDP, 1, 9360.0, 5800.0) | {"wall_time_s": 2 * plan * 3600}
    monkeypatch.setitem(tables._loaded, tables.NEW, [run])
    lines = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in tables.cost_table().splitlines()[2:]}
    row = lines["b. MMD critic, truncation 10 %"]
    assert row[:3] == [f"{ms:.1f}", "20 000", f"{plan:.1f} h"] and row[4:] == [f"{2 * plan:.1f} h", "2.00 |"]
    assert lines["d. MMD critic, lr 1e-4"][0] == f"{ms:.1f}"  # the learning rate changes no operation's size
    assert lines["b. DSDPG-MMD, truncation 10 %"][4:] == ["-", "- |"]
    assert lines["all"][-1] == "2.00 |"


@pytest.mark.slow  # reads every mujoco_cpu summary and bootstraps each cell: ~10-20 s
def test_the_page_and_the_readme_hold_what_tables_py_makes_of_the_committed_runs():
    """Every table, the status line and the README's rows are the tool's own: a summary committed without
    `tables.py --write` fails here."""
    page, readme = (open(path).read() for path in (tables.PAGE, tables.README))
    hint = "run python benchmarks/mujoco_questions/tables.py --write"
    for key, block in tables.page_blocks().items():
        begin, end = tables.marker(key)
        assert f"{begin}\n{block}{end}" in page, f"{tables.PAGE}'s {key}: {hint}"
    assert tables.readme_rows() in readme, f"README.md's rows of issue 69's grid: {hint}"


def test_slice_gain_line_ranges_each_searching_runs_interval_medians(monkeypatch, tmp_path):
    logged = {"tags": {"losses/slice_gain": {"steps": [10, 20, 30], "median": [3.204, 4.9, 4.1]}}}
    (tmp_path / "summary.json").write_text(json.dumps({"logged": logged}))
    run = summary(tables.SEARCHING, tables.HC, 2, 4000.0, 2000.0) | {"run_dir": str(tmp_path)}
    monkeypatch.setitem(tables._loaded, tables.NEW, [run])
    line = tables.slice_gain_line(tables.HC)
    assert "evaluation interval): seed 2 3.20-4.90;" in line and tables.PAPER_GAIN[tables.HC] in line
    assert "interval): -;" in tables.slice_gain_line(tables.IDP)  # no run there yet
