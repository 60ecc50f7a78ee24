"""benchmarks/paper.py: the paper's experiments as commands. Every figure and table of the paper's RL sections is
listed, the main grid has the paper's size and a cost, every experiment's smoke jobs run and aggregate, one experiment
launches end to end through submitit's LocalExecutor, and the README's table is the tool's own."""

import csv
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.figure
import pytest
import tyro
from helpers import ROOT, load_benchmark, run_script_in_process

paper = load_benchmark("paper")
run_grid = paper.run_grid

# The labels of the paper's RL figures and tables (main text and appendix "Reinforcement learning experiments" and
# "Additional experiments - RL"), and of the supervised toy's figures, as in its LaTeX source.
RL_FIGURES = (
    "toy_rl_main",
    "mujoco_grid",
    "main_curves",
    "runtime_humanoid",
    "flow_curves",
    "mujoco_grid_tqc",
    "bandwidth_curves",
    "bandwidth_bars",
    "noise_scale_curves",
    "samples_curves",
    "samples_bars",
    "wm_size",
)
SUPERVISED_FIGURES = ("toy_sup_unlimited_samples", "toy_rl_limited_data", "toy_noise_")


def paper_tool(*flags: str, cwd=ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "paper.py"), *flags],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def paper_tool_in_process(*flags: str, cwd=ROOT) -> subprocess.CompletedProcess:
    """paper_tool's output and exit status for a command that only prints or refuses (no job starts), without a
    process start."""
    return run_script_in_process("benchmarks/paper.py", *flags, cwd=cwd)


def test_list_names_every_figure_and_table():
    result = paper_tool_in_process("list")
    assert result.returncode == 0, result.stderr
    for label in RL_FIGURES + SUPERVISED_FIGURES:
        assert label in result.stdout, label
    for name in paper.NAMES:
        assert re.search(rf"^{name}: ", result.stdout, re.M), name
    assert "python toy_supervised_sobolev.py" in result.stdout
    assert re.search(
        r"^mujoco: .*\n    1080 runs, [\d,.]+ GPU-hours on an H100, [\d,.]+ CPU-hours here", result.stdout, re.M
    )


def test_readme_table_is_the_tools_own():
    table = paper_tool_in_process("list", "--markdown").stdout
    assert table.count("\n") == len(paper.NAMES) + 2
    assert table in (ROOT / "README.md").read_text(), (
        "README's 'Reproducing the paper' table differs from paper.py list --markdown"
    )


def test_mujoco_dry_run_is_the_papers_grid(tmp_path):
    result = paper_tool_in_process("run", "mujoco", "--dry-run", "--grid-dir", str(tmp_path / "grid"))
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("[new] cd ")]
    assert len(commands) == 1080 == 6 * 3 * 6 * 10
    assert not (tmp_path / "grid").exists()
    cells = {
        (re.search(r"/(\w+)\.py ", c)[1], re.search(r"--env-id (\S+)", c)[1], re.search(r"--seed (\d+)", c)[1])
        for c in commands
    }
    assert len(cells) == 360 and {env for _, env, _ in cells} == set(paper.MUJOCO)
    for command in commands:
        humanoid = "--env-id Humanoid-v4" in command
        assert ("--total-timesteps 250000" in command) == humanoid
    assert sum("--obs-noise mult" in c for c in commands) == sum("--dyn-noise gauss" in c for c in commands) == 360
    for command in commands:  # DSDPG-MSMMD at the paper's slicing search, whatever the script's default
        assert ("--slice-lr 1e-4 --slice-steps 100" in command) == ("/dsdpg_msmmd_sobolev.py " in command), command
    total = re.search(
        r"^cost: ([\d,.]+) GPU-hours on an H100 \(([\d,.]+) to run\), ([\d,.]+) CPU-hours", result.stdout, re.M
    )
    assert total and total[1] == total[2] and float(total[1].replace(",", "")) > 0


def test_every_experiment_has_a_cost_and_its_flop_counts():
    model = paper.CostModel()
    launch = run_grid.Launch(grid_dir="runs_paper")
    for name in paper.EXPERIMENTS:
        jobs = paper.experiment_jobs(name, launch)
        gpu, cpu = paper.projected(jobs, model)  # exits naming the key if a FLOP count is missing
        assert gpu > 0 and cpu > gpu, name
    # the calibration: each method's default run on Humanoid costs the paper's seconds per 1 000 iterations
    for script, seconds in paper.H100_SECONDS_PER_1000.items():
        common = paper.PAPER_FLAGS.get(script, "")
        (job,) = run_grid.build_jobs(run_grid.Args(env_ids=["Humanoid-v4"], scripts=[script], seeds=[1], common=common))
        assert model.gpu_seconds(job) == pytest.approx(seconds * (paper.DEFAULT_STEPS - 5000) / 1000)
    assert model.flops("dsdpg_mmd_sobolev Ant-v4 --num-samples 25") > model.flops("dsdpg_mmd_sobolev Ant-v4")


@pytest.mark.slow
def test_flop_table_is_timings_count():
    """One entry recounted by timing.py over two iterations (count-flops counts one): the table is the counter's."""
    timing = load_benchmark("timing")
    module = __import__("td3_huber")
    counted = timing.flops_per_iteration(module, timing.Args(env_id="PointMass3-v0", flop_iterations=2), [])
    assert paper.CostModel().flops("td3_huber PointMass3-v0") == pytest.approx(counted / 1e9, abs=1e-3)


def test_cost_keys_and_settings():
    assert (
        paper.cost_key("iqn", "Ant-v4", "--obs-noise mult --num-samples 5 --exp-name x".split())
        == "iqn Ant-v4 --num-samples 5"
    )
    assert (
        paper.cost_key("td3_huber", "E", ["--no-double-q", "--kernel-bandwidth", "10"]) == "td3_huber E --no-double-q"
    )
    assert paper.script_settings("--num-samples 25 --no-double-q --world-model flow".split()) == [
        "num_samples=25",
        "double_q=false",
        "world_model=flow",
    ]


def test_smoke_covers_every_cell_and_env():
    launch = run_grid.Launch(grid_dir="g")
    for name in paper.EXPERIMENTS:
        full = paper.experiment_jobs(name, launch)
        smoke = paper.experiment_jobs(name, launch, smoke=True)
        assert {(j.script, j.flag_slug) for j in smoke} == {(j.script, j.flag_slug) for j in full}, name
        assert {j.env_id for j in smoke} == {j.env_id for j in full}, name
        assert len(smoke) == len({(j.script, j.flag_slug) for j in full}) and {j.seed for j in smoke} == {1}


@pytest.mark.slow
def test_every_smoke_runs_and_aggregates(tmp_path, monkeypatch, capsys):
    """Every experiment's smoke jobs (each script, flag set and env it names, 1 seed, toy sizes) run with the flags
    paper.py gives them, and `paper.py run --smoke` then finds them done and aggregates each experiment. The jobs run
    in this process, as run_grid's worker would start them (job dir as working directory, job.json written): a
    subprocess per job costs ~5 s of imports for ~1 s of training. Launching them as subprocesses is
    test_submitit_local_smoke's and test_harness.py's. The figures are made but not drawn to PNG (matplotlib's layout
    and rasterising took half of this test's time): each is checked for its panels and curves here; PNGs are written
    by test_submitit_local_smoke's aggregation, test_harness.py's and its trend test (not the wide legends of the
    experiments with many groups)."""
    grid = tmp_path / "smoke"
    launch = run_grid.Launch(grid_dir=str(grid))
    figures = {}  # file name -> the figure aggregation made for it, of the experiment being aggregated
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda fig, path, **kw: figures.update({Path(path).name: fig})
    )
    for name in paper.NAMES:
        if name in (paper.TOY_SUPERVISED[0], paper.RUNTIME):
            continue
        jobs = paper.experiment_jobs(name, launch, smoke=True)
        for job in jobs:
            if run_grid.job_state(job.job_dir)[0] == "done":  # shared with an experiment before
                continue
            os.makedirs(job.job_dir)
            with open(os.path.join(job.job_dir, "job.json"), "w") as f:
                json.dump(run_grid.job_flags(job), f)
            monkeypatch.chdir(job.job_dir)
            module = importlib.import_module(job.script)
            module.main(tyro.cli(module.Args, args=list(job.command[2:])))
            assert run_grid.job_state(job.job_dir)[0] == "done", job.name
        capsys.readouterr()
        figures.clear()
        paper.run_experiment(paper.Run(experiment=name, grid_dir=str(grid), smoke=True, bootstrap_samples=100))
        printed = capsys.readouterr().out
        assert f"{len(jobs)} skipped (summary.json exists), 0 to run" in printed, name
        assert f"{name}: {len(jobs)} of {len(jobs)} runs" in printed
        out = grid / "aggregate" / name
        with open(out / "runs.csv") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == len(jobs), name
        assert {row["env"] for row in rows} == {job.env_id for job in jobs}
        assert (out / "table.md").stat().st_size > 0
        envs, noises = {row["env"] for row in rows}, {row["noise"] for row in rows}
        drawn = {"final_return.png", "nauc.png", "curves.png", "performance_profile.png"}
        point_masses = {env for env in envs if re.fullmatch(r"PointMass\d+-v0", env)}
        assert set(figures) == drawn | ({"trend.png"} if len(point_masses) >= 2 else set()), name
        for fig in figures.values():  # one panel per (env, noise), and the trend's two
            assert len(fig.axes) == (2 if fig is figures.get("trend.png") else len(envs) * len(noises)), name
        assert sum(len(ax.lines) for ax in figures["curves.png"].axes) == len(rows), name  # a median per group (1 seed)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", [paper.TOY_SUPERVISED[0], paper.RUNTIME])
def test_the_two_single_process_experiments_smoke(tmp_path, experiment):
    """The supervised toy and the runtime table are one process each, not a grid: their smokes write their outputs."""
    grid = tmp_path / "smoke"
    result = paper_tool("run", experiment, "--smoke", "--grid-dir", str(grid), "--threads-per-job", "1")
    assert result.returncode == 0, f"{experiment}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    if experiment == paper.TOY_SUPERVISED[0]:
        summary = json.loads((grid / experiment / "summary.json").read_text())
        assert set(summary["results"]) == {"unlimited", "n4"} and (grid / experiment / "dataset_size.png").is_file()
    else:
        timing = json.loads((grid / "runtime" / "humanoid.json").read_text())
        msmmd = "dsdpg_msmmd_sobolev@slice_lr=1e-4,slice_steps=100"  # the paper's slicing search
        assert [row["script"] for row in timing["rows"]] == [*run_grid.ALL_SCRIPTS[:-1], msmmd]
        assert all(row["gflop_per_iteration"] > 0 for row in timing["rows"])  # tiny timings can come out < 0


@pytest.mark.slow
def test_submitit_local_smoke(tmp_path):
    result = paper_tool(
        *"run ablation-wm-width --smoke --backend submitit-local --workers 2 --threads-per-job 1 --grid-dir".split(),
        str(tmp_path / "grid"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 of 4 runs in 4 groups" in result.stdout
    assert list((tmp_path / "grid" / "submitit").glob("*_result.pkl"))


def test_bad_input_is_one_line(tmp_path):
    unknown = paper_tool_in_process("run", "figure-9", cwd=tmp_path)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr and "figure-9" in unknown.stderr
    workers = paper_tool_in_process("run", "toy-rl", "--workers", "0", cwd=tmp_path)
    assert workers.returncode == 1 and workers.stderr.strip() == "paper.py: error: --workers must be >= 1"


def test_count_flops_with_nothing_missing_says_so(capsys):
    """The committed table holds every count the experiments need, so count-flops counts nothing and says so."""
    paper.count_flops(paper.CountFlops())
    [line] = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("nothing to count: ") and line.endswith("FLOP counts the experiments need")


@pytest.mark.parametrize("experiment", ["toy-rl", "runtime"])
def test_a_grid_dir_that_cannot_be_written_is_one_line_before_any_work(tmp_path, experiment):
    (tmp_path / "a_file").write_text("")
    for grid_dir, message in (
        ("a_file", "--grid-dir a_file is a file, not a folder"),
        ("a_file/grid", "--grid-dir a_file/grid: cannot write there (Not a directory)"),
    ):
        result = paper_tool_in_process("run", experiment, "--grid-dir", grid_dir, cwd=tmp_path)
        assert result.returncode == 1 and result.stderr.strip() == f"paper.py: error: {message}", result.stderr
        assert result.stdout == "" and sorted(path.name for path in tmp_path.iterdir()) == ["a_file"]
