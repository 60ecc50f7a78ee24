"""benchmarks/aggregate.py on broken input: summary.json files that are not run summaries are left out with one
warning each (--strict: the first stops it), and an output folder that cannot be written is refused with one line
before the bootstrap; a refused run changes nothing in the grid folder."""

import hashlib
import json
import os
from pathlib import Path

import pytest
from test_harness import aggregate, read_csv, run_tool, run_tool_in_process, write_summary

FAST = ("--bootstrap-samples", "20")


def good_grid(grid: Path) -> None:
    """Three seeds of one group."""
    for seed in (1, 2, 3):
        write_summary(grid / f"seed{seed}", "td3_huber", "PointMass-v0", seed, [10, 20], [0.0, float(seed)])


def add_bad(grid: Path, name: str, content: bytes) -> Path:
    (grid / name).mkdir(parents=True)
    (grid / name / "summary.json").write_bytes(content)
    return Path(grid.name, name, "summary.json")


def tree(folder: Path) -> dict[str, str]:
    """Every file (its sha256) and folder under `folder`, by relative path."""
    entries = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            entries[os.path.relpath(os.path.join(root, name), folder)] = "folder"
        for name in files:
            entries[os.path.relpath(os.path.join(root, name), folder)] = hashlib.sha256(
                Path(root, name).read_bytes()
            ).hexdigest()
    return entries


def stderr_lines(result) -> list[str]:
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()


@pytest.mark.slow
def test_bad_summary_is_left_out_with_one_warning(tmp_path):
    good_grid(tmp_path / "grid")
    bad = add_bad(tmp_path / "grid", "corrupt", b'{"final_eval_return": ')
    result = run_tool_in_process("aggregate.py", "grid", "--out", "out", *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert stderr_lines(result) == [
        f"aggregate.py: warning: {bad} is not a run summary (JSONDecodeError: Expecting value: line 1 column 23 "
        "(char 22)); left out"
    ]
    runs = read_csv(tmp_path / "out" / "runs.csv")
    assert sorted(row["seed"] for row in runs) == ["1", "2", "3"]
    assert [row["n_seeds"] for row in read_csv(tmp_path / "out" / "table.csv")] == ["3"]
    assert result.stdout.startswith(
        "3 runs in 1 groups; wrote runs.csv, table.csv, table.md, evals.md, final_return.png"
    )
    for name in aggregate.OUTPUTS:
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_strict_stops_at_the_first_bad_summary(tmp_path):
    good_grid(tmp_path / "grid")
    bad = add_bad(tmp_path / "grid", "corrupt", b"\x89\xff\x00garbage")
    before = tree(tmp_path / "grid")
    result = run_tool_in_process("aggregate.py", "grid", "--strict", *FAST, cwd=tmp_path)
    assert result.returncode == 1
    assert stderr_lines(result) == [
        f"aggregate.py: error: {bad} is not a run summary (UnicodeDecodeError: 'utf-8' codec can't decode byte 0x89 "
        "in position 0: invalid start byte)"
    ]
    assert tree(tmp_path / "grid") == before  # no grid/aggregate either


def test_only_bad_summaries_is_an_error(tmp_path):
    no_final = {"args": {"exp_name": "td3_huber", "env_id": "E", "seed": 1}, "eval_steps": [1], "eval_returns": [1.0]}
    first = add_bad(tmp_path / "grid", "a", json.dumps(no_final).encode())
    add_bad(tmp_path / "grid", "b", b"")
    before = tree(tmp_path / "grid")
    result = run_tool_in_process("aggregate.py", "grid", *FAST, cwd=tmp_path)
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "aggregate.py: error: nothing to aggregate: none of the 2 summary.json under 'grid' is a run summary "
        f"(the first: {first}: no key 'final_eval_return')"
    ]
    assert tree(tmp_path / "grid") == before
    with pytest.raises(SystemExit) as stopped:  # the same in-process, for one file
        aggregate.load_runs(str(tmp_path / "grid" / "b"))
    path = tmp_path / "grid" / "b" / "summary.json"
    assert str(stopped.value) == (
        f"aggregate.py: error: nothing to aggregate: {path}, the only summary.json under {str(path.parent)!r}, is not "
        "a run summary (JSONDecodeError: Expecting value: line 1 column 1 (char 0))"
    )


GOOD = {
    "final_eval_return": 2.0,
    "eval_steps": [10, 20],
    "eval_returns": [1.0, 2.0],
    "nauc": 1.5,
    "wall_time_s": 3.0,
    "args": {"exp_name": "td3_huber", "env_id": "E", "seed": 2, "obs_noise": "none", "dyn_noise_std": None},
}


def changed(path: str, value) -> dict:
    """GOOD with the key at `path` (a.b for a key of args) set to value, or removed if value is ..."""
    summary = json.loads(json.dumps(GOOD))
    *parents, key = path.split(".")
    mapping = summary
    for parent in parents:
        mapping = mapping[parent]
    if value is ...:
        del mapping[key]
    else:
        mapping[key] = value
    return summary


@pytest.mark.parametrize(
    "content, reason",
    [
        ([GOOD], "the file holds a list, not an object"),
        (changed("args", ...), "no key 'args'"),
        (changed("args", "td3"), "args is a string, not an object"),
        (changed("args.env_id", ...), "no key 'env_id' in args"),
        (changed("args.exp_name", 3), "args.exp_name is a number, not a string"),
        (changed("args.seed", "1"), "args.seed is '1', not an integer"),
        (changed("args.seed", 1.5), "args.seed is 1.5, not an integer"),
        (changed("args.obs_noise_scale", "big"), "args.obs_noise_scale is a string, not a number"),
        (changed("final_eval_return", ...), "no key 'final_eval_return'"),
        (changed("final_eval_return", "2.0"), "final_eval_return is a string, not a number"),
        (changed("final_eval_return", True), "final_eval_return is a boolean, not a number"),
        (changed("final_eval_return", float("nan")), "final_eval_return is nan, not a finite number"),
        (changed("final_eval_return", float("-inf")), "final_eval_return is -inf, not a finite number"),
        (changed("eval_returns", ...), "no key 'eval_returns'"),
        (changed("eval_returns", [1.0, float("inf")]), "eval_returns[1] is inf, not a finite number"),
        (changed("eval_returns", [1.0, None]), "eval_returns[1] is null, not a number"),
        (changed("eval_returns", []), "eval_returns is an empty list, not a list of numbers"),
        (changed("eval_returns", 2.0), "eval_returns is a number, not a list of numbers"),
        (changed("eval_returns", [2.0]), "2 eval_steps but 1 eval_returns"),
        (changed("eval_steps", [10, "20"]), "eval_steps[1] is '20', not an integer"),
        (changed("nauc", None), "nauc is null, not a number"),
        (changed("nauc", float("nan")), "nauc is nan, not a finite number"),
        (changed("wall_time_s", "3 s"), "wall_time_s is a string, not a number"),
    ],
)
def test_what_is_not_a_run_summary(tmp_path, capsys, content, reason):
    write_summary(tmp_path / "good", "td3_huber", "E", 1, [10], [1.0])
    bad = add_bad(tmp_path, "bad", json.dumps(content).encode())
    runs = aggregate.load_runs(str(tmp_path))
    assert [run["seed"] for run in runs] == [1]
    path = tmp_path.parent / bad
    assert capsys.readouterr().err == f"aggregate.py: warning: {path} is not a run summary ({reason}); left out\n"
    with pytest.raises(SystemExit) as stopped:
        aggregate.load_runs(str(tmp_path), strict=True)
    assert str(stopped.value) == f"aggregate.py: error: {path} is not a run summary ({reason})"


def test_what_is_still_a_run_summary(tmp_path):
    """Missing, null or NaN wall time (n/a), a missing nauc (recomputed), integer-valued float steps, int returns."""
    for i, summary in enumerate(
        [
            changed("wall_time_s", ...),
            changed("wall_time_s", None),
            changed("wall_time_s", float("nan")),
            changed("nauc", ...),
            changed("eval_steps", [10.0, 20.0]),
            changed("eval_returns", [1, 2]),
        ]
    ):
        add_bad(tmp_path, str(i), json.dumps(summary).encode())
    runs = aggregate.load_runs(str(tmp_path))
    assert len(runs) == 6 and all(run["nauc"] == 1.5 and run["eval_steps"] == [10, 20] for run in runs)
    assert [str(run["wall_time_s"]) for run in runs[:3]] == ["nan", "nan", "nan"]


def unwritable_cases(tmp_path: Path) -> list[tuple[str, list[str], str]]:
    """(RUNS_DIR, flags, the error line) per output folder that cannot be written. Root writes into read-only
    folders, so the chmod cases run only for other users; the others make the path unwritable for root too."""
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "clash" / "runs.csv").mkdir(parents=True)
    good_grid(tmp_path / "grid_with_a_file")
    (tmp_path / "grid_with_a_file" / "aggregate").write_text("not a folder")
    cases = [
        ("grid", ["--out", "a_file/out"], "output folder 'a_file/out' cannot be created (Not a directory)"),
        ("grid", ["--out", "a_file"], "output folder 'a_file' cannot be written: it exists and is not a folder"),
        (
            "grid",
            ["--out", "a_file/deeper/out"],
            "output folder 'a_file/deeper/out' cannot be created (Not a directory: 'a_file/deeper')",
        ),
        (
            "grid",
            ["--out", "clash"],
            "output folder 'clash' cannot be written: 'clash/runs.csv' exists and is not a writable file",
        ),
        (
            "grid_with_a_file",
            [],
            "output folder 'grid_with_a_file/aggregate' cannot be written: it exists and is not a folder",
        ),
    ]
    if os.geteuid() != 0:
        (tmp_path / "read_only").mkdir()
        os.chmod(tmp_path / "read_only", 0o555)
        cases.append(
            ("grid", ["--out", "read_only"], "output folder 'read_only' cannot be written (Permission denied)")
        )
        os.chmod(tmp_path / "grid", 0o555)  # the default output folder grid/aggregate cannot be created
        cases.append(("grid", [], "output folder 'grid/aggregate' cannot be created (Permission denied)"))
    return cases


@pytest.mark.slow
def test_unwritable_output_folder_is_refused_before_the_bootstrap(tmp_path, monkeypatch):
    good_grid(tmp_path / "grid")
    cases = unwritable_cases(tmp_path)
    before = {runs_dir: tree(tmp_path / runs_dir) for runs_dir in ("grid", "grid_with_a_file")}
    try:
        for runs_dir, flags, message in cases[:1] + cases[-1:]:  # as a user runs it: one line, no traceback
            result = run_tool("aggregate.py", runs_dir, *flags, *FAST, cwd=tmp_path)
            assert result.returncode == 1 and stderr_lines(result) == [f"aggregate.py: error: {message}"]
            assert tree(tmp_path / runs_dir) == before[runs_dir]
        monkeypatch.chdir(tmp_path)  # every case in-process, where reaching the bootstrap fails the test
        monkeypatch.setattr(aggregate, "summarise", lambda *_: pytest.fail("the bootstrap started"))
        for runs_dir, flags, message in cases:
            with pytest.raises(SystemExit) as stopped:
                aggregate.main(aggregate.Args(runs_dir, out=flags[1] if flags else None, bootstrap_samples=20))
            assert str(stopped.value) == f"aggregate.py: error: {message}"
            assert tree(tmp_path / runs_dir) == before[runs_dir]
    finally:
        for folder in ("grid", "read_only"):
            if (tmp_path / folder).exists():
                os.chmod(tmp_path / folder, 0o755)


@pytest.mark.slow
def test_default_output_folder_in_the_grid(tmp_path):
    """Outputs default to RUNS_DIR/aggregate, and a rerun overwrites them (aggregate/ holds no summary.json)."""
    good_grid(tmp_path / "grid")
    for _ in range(2):
        result = run_tool_in_process("aggregate.py", "grid", *FAST, cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        assert len(read_csv(tmp_path / "grid" / "aggregate" / "runs.csv")) == 3


@pytest.mark.slow
def test_run_stopped_on_nonfinite_loss_is_named_not_dropped(tmp_path):
    """A run that stopped on a NaN (nonfinite_checkpoint.pt, no summary.json) is named in a warning, below the table
    in table.md and on stdout, and is not counted among the unfinished runs."""
    good_grid(tmp_path / "grid")
    stopped = tmp_path / "grid" / "seed4" / "runs" / "PointMass-v0__td3_huber__4__1"
    stopped.mkdir(parents=True)
    (stopped / "nonfinite_checkpoint.pt").write_bytes(b"x")
    (stopped / "events.out.tfevents.1.host").write_bytes(b"")
    result = run_tool_in_process("aggregate.py", "grid", "--out", "out", *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    relative = os.path.join("grid", "seed4", "runs", stopped.name)
    assert stderr_lines(result) == [
        f"aggregate.py: warning: {relative} stopped on a non-finite loss (nonfinite_checkpoint.pt); not in the table"
    ]
    note = f"Stopped on a non-finite loss, not in the table (1): {relative}"
    assert note in (tmp_path / "out" / "table.md").read_text().splitlines()
    assert note in result.stdout.splitlines()
    assert [row["n_seeds"] for row in read_csv(tmp_path / "out" / "table.csv")] == ["3"]


def test_only_stopped_runs_is_one_error_naming_them(tmp_path):
    stopped = tmp_path / "grid" / "seed1" / "runs" / "PointMass-v0__td3_huber__1__1"
    stopped.mkdir(parents=True)
    (stopped / "nonfinite_checkpoint.pt").write_bytes(b"x")
    result = run_tool_in_process("aggregate.py", "grid", "--out", "out", *FAST, cwd=tmp_path)
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "aggregate.py: error: no summary.json under 'grid'; stopped on a non-finite loss: "
        + os.path.join("grid", "seed1", "runs", stopped.name)
    ]


@pytest.mark.slow
def test_split_by_takes_the_flag_spelling_and_refuses_a_setting_no_run_has(tmp_path):
    for seed, reward in ((1, "replay"), (2, "model")):
        write_summary(
            tmp_path / "grid" / f"s{seed}", "td3_huber", "PointMass-v0", seed, [10, 20], [0.0, 1.0], dyna_reward=reward
        )
    result = run_tool_in_process(
        "aggregate.py", "grid", "--out", "out", "--split-by", "dyna-reward", *FAST, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    groups = sorted(row["script"] for row in read_csv(tmp_path / "out" / "table.csv"))
    assert groups == ["td3_huber[dyna_reward=model]", "td3_huber[dyna_reward=replay]"]
    result = run_tool_in_process(
        "aggregate.py", "grid", "--out", "out2", "--split-by", "dyna-rewrd", *FAST, cwd=tmp_path
    )
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "aggregate.py: error: --split-by dyna_rewrd: no run has that setting (names as in summary.json's args, "
        "e.g. dyna_reward)"
    ]


@pytest.mark.slow
def test_until_step_before_every_first_evaluation_says_so(tmp_path):
    good_grid(tmp_path / "grid")  # evaluations at steps 10 and 20
    result = run_tool_in_process("aggregate.py", "grid", "--out", "out", "--until-step", "5", *FAST, cwd=tmp_path)
    assert result.returncode == 1
    [line] = stderr_lines(result)
    assert line.startswith(
        "aggregate.py: error: no run has an evaluation at or before --until-step 5 (the first run's: "
    )
    assert line.endswith("summary.json, first evaluation at step 10)") and "not a run summary" not in line
    write_summary(tmp_path / "grid" / "early", "td3_huber", "PointMass-v0", 4, [5, 20], [1.0, 2.0])
    result = run_tool_in_process("aggregate.py", "grid", "--out", "out", "--until-step", "5", *FAST, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert stderr_lines(result) == [
        "aggregate.py: warning: 3 run(s) without an evaluation at or before --until-step 5 left out"
    ]
