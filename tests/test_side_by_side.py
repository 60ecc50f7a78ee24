"""Runs and grids side by side (issue 45): two runs started in the same second get a folder each; a grid stopped by
SIGTERM or SIGHUP stops its job with a checkpoint and resumes it; a run that outlives its grid is never started twice
beside itself; aggregate.py refuses a grid job folder holding two finished runs instead of counting them as two
seeds."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import run_bookkeeping

import pytest
from helpers import ROOT, load_benchmark, read_summary

import td3_huber

aggregate = load_benchmark("aggregate")

JOB = "--no-dyna --learning-starts 100 --hidden-dim 16 --batch-size 16 --eval-episodes 1 --contraction-frequency 0"


def grid_command(total_timesteps: int, *options: str) -> list[str]:
    """run_grid.py for one tiny td3_huber job (seed 1) in ./grid, with more run_grid `options`."""
    flags = f"{JOB} --total-timesteps {total_timesteps}"
    grid = "--scripts td3_huber --env-ids PointMass-v0 --seeds 1 --grid-dir grid --threads-per-job 1".split()
    return [sys.executable, str(ROOT / "benchmarks" / "run_grid.py"), *grid, *options, "--common", flags]


def job_dir(cwd: Path) -> Path:
    return cwd / "grid" / "td3_huber" / "PointMass-v0" / "default" / "seed1"


def processes_in(folder: Path) -> list[int]:
    """The ids of the processes whose working directory is `folder` (a grid job's run)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder.resolve():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            pass
    return found


def start_grid_until_its_job_runs(cwd: Path, total_timesteps: int, *options: str) -> subprocess.Popen:
    """run_grid.py started, returned once its job's progress bar is drawn (the run's loop, which a SIGINT stops with a
    checkpoint, has begun)."""
    grid = subprocess.Popen(  # SIGHUP at its default even when the suite runs under nohup (run_grid keeps it ignored)
        grid_command(total_timesteps, *options),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    stderr, deadline = job_dir(cwd) / "stderr.txt", time.time() + 300
    while not (stderr.is_file() and "%|" in stderr.read_text()):
        if grid.poll() is not None or time.time() > deadline:
            grid.kill()
            pytest.fail(f"the job never ran: {grid.communicate()}")
        time.sleep(0.05)
    return grid


def kill_runs_in(folder: Path) -> None:
    """Stop what a failed test left running in its job folder (only this test's runs work there)."""
    for pid in processes_in(folder):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_two_runs_started_in_the_same_second_get_a_folder_each(tmp_path, monkeypatch, capsys):
    """The same flags, CleanRL's run name read from a clock that stands still while each run opens: the second run makes
    runs/<name>__2 instead of writing into the first's folder, and each folder holds its own summary, checkpoint and
    TensorBoard events, and is the path its run prints."""
    monkeypatch.chdir(tmp_path)
    opened, frozen = run_bookkeeping.Run.__init__, time.time()

    def open_in_the_same_second(run, *args, **kwargs):
        with monkeypatch.context() as clock:
            clock.setattr(time, "time", lambda: frozen)
            opened(run, *args, **kwargs)

    monkeypatch.setattr(run_bookkeeping.Run, "__init__", open_in_the_same_second)
    flags = dict(
        env_id="PointMass-v0", dyna=False, total_timesteps=150, learning_starts=100, hidden_dim=16, batch_size=16
    )
    for _ in range(2):  # conftest puts back the signal handlers Run.start installs
        td3_huber.main(td3_huber.Args(**flags, eval_episodes=1, contraction_frequency=0, cuda=False))
    name = f"PointMass-v0__td3_huber__1__{int(frozen)}"
    folders = sorted((tmp_path / "runs").iterdir())
    assert [folder.name for folder in folders] == [name, f"{name}__2"]
    for folder in folders:
        assert read_summary(folder)["eval_steps"] == [150] and (folder / "checkpoint.pt").is_file()
        assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    printed = [
        line.rsplit("outputs in ", 1)[1] for line in capsys.readouterr().out.splitlines() if "outputs in " in line
    ]
    assert printed == [os.path.join("runs", folder.name) for folder in folders]


@pytest.mark.slow
@pytest.mark.parametrize("stop, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"])
def test_a_grid_stopped_by_sigterm_or_sighup_stops_its_job_with_a_checkpoint_and_resumes_it(tmp_path, stop, status):
    """SIGTERM (or SIGHUP: a closed terminal) to run_grid.py, its job running: one line, exit status 128 + the signal's
    number, the job stopped (SIGINT: it wrote its checkpoint, and no process of it is left); the same command again
    resumes the run and finishes it, in its one folder (once: that part is the same for either signal)."""
    folder = job_dir(tmp_path)
    try:
        grid = start_grid_until_its_job_runs(tmp_path, 600)
        grid.send_signal(stop)
        stdout, stderr = grid.communicate(timeout=300)
        assert grid.returncode == status, stdout + stderr
        name = signal.Signals(stop).name
        assert stderr.splitlines() == [
            f"run_grid.py: interrupted by {name}; stopping the running jobs (a job in its training loop writes a "
            "checkpoint, one still starting stops with nothing to resume)"
        ]
        assert "1 interrupted" in stdout.splitlines()[-1]
        assert processes_in(folder) == []
        [run] = (folder / "runs").iterdir()
        assert (run / "checkpoint.pt").is_file() and not (run / "summary.json").exists()
    finally:
        kill_runs_in(folder)
    if stop == signal.SIGHUP:
        return
    again = subprocess.run(grid_command(600), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [path.name for path in (folder / "runs").iterdir()] == [run.name]
    assert read_summary(run)["eval_steps"][-1] == 600
    log = [json.loads(line) for line in (tmp_path / "grid" / "grid_log.jsonl").read_text().splitlines()]
    assert [record["status"] for record in log] == ["interrupted", "ok"] and "--resume" in log[-1]["command"]


@pytest.mark.slow
def test_a_submitit_local_grid_stopped_by_sigterm_stops_its_job_with_a_checkpoint(tmp_path):
    """The same through submitit's LocalExecutor, whose jobs a terminal's Ctrl-C reaches through the process group but
    a SIGTERM to run_grid.py does not: run_grid cancels them (SIGINT), so the run writes its checkpoint and ends."""
    folder = job_dir(tmp_path)
    try:
        grid = start_grid_until_its_job_runs(tmp_path, 1000, "--backend", "submitit-local")
        grid.send_signal(signal.SIGTERM)
        stdout, stderr = grid.communicate(timeout=300)
        assert grid.returncode == 143, stdout + stderr
        # run_grid's one line; submitit's job controller, stopped as a terminal's Ctrl-C stops it, adds its traceback
        assert (
            stderr.splitlines().count("run_grid.py: interrupted by SIGTERM; re-run this command to finish the grid")
            == 1
        )
        deadline = time.time() + 120  # the run ends on its own, after the checkpoint
        while processes_in(folder) and time.time() < deadline:
            time.sleep(0.1)
        assert processes_in(folder) == []
        [run] = (folder / "runs").iterdir()
        assert (run / "checkpoint.pt").is_file() and not (run / "summary.json").exists()
    finally:
        kill_runs_in(folder)


@pytest.mark.slow
def test_a_run_that_outlives_its_grid_is_not_started_twice(tmp_path):
    """run_grid.py killed outright (SIGKILL, which no process can handle) leaves its job's run going. The run holds the
    job's lock (it inherited it), so the same grid run again reports the job busy and starts no second run beside it."""
    folder = job_dir(tmp_path)
    try:
        grid = start_grid_until_its_job_runs(tmp_path, 100_000)
        grid.kill()
        grid.communicate()
        assert processes_in(folder), "the run should outlive its grid"
        again = subprocess.run(grid_command(100_000), cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and f"BUSY: {folder}" in again.stdout, again.stdout + again.stderr
        assert len(list((folder / "runs").iterdir())) == 1
    finally:
        kill_runs_in(folder)


def write_run(run_dir: Path, seed: int) -> None:
    run_dir.mkdir(parents=True)
    args = {"exp_name": "td3_huber", "env_id": "PointMass-v0", "seed": seed}
    summary = {"final_eval_return": 1.0, "eval_steps": [100], "eval_returns": [1.0], "args": args}
    (run_dir / "summary.json").write_text(json.dumps(summary))


def test_aggregate_refuses_a_grid_job_with_two_finished_runs(tmp_path):
    """A run_grid job folder (it holds job.json) is one seed run once: two finished runs in it (the job started beside
    an orphan of a stopped grid) are refused in one line naming the folder and the runs, not counted as two seeds."""
    grid = tmp_path / "grid"
    for seed, runs in ((1, ("a", "b")), (2, ("c",))):
        job = grid / "td3_huber" / "PointMass-v0" / "default" / f"seed{seed}"
        for name in runs:
            write_run(job / "runs" / f"PointMass-v0__td3_huber__{seed}__{name}", seed)
        (job / "job.json").write_text(json.dumps({"script": "td3_huber", "flags": []}))
    with pytest.raises(SystemExit) as refused:
        aggregate.main(aggregate.Args(str(grid), out=str(tmp_path / "out"), bootstrap_samples=10))
    job = grid / "td3_huber" / "PointMass-v0" / "default" / "seed1"
    assert str(refused.value) == (
        f"aggregate.py: error: {job} holds 2 finished runs of one grid job (seed 1: PointMass-v0__td3_huber__1__a, "
        "PointMass-v0__td3_huber__1__b), not 2 seeds; keep one and remove the others"
    )
    assert not (tmp_path / "out").exists()
