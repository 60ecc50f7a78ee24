"""The experiment harness: benchmarks/aggregate.py on hand-written run folders, benchmarks/run_grid.py on tiny real runs
(locally and through submitit's LocalExecutor): resuming, skipping, failures, the log."""

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import run_bookkeeping

import numpy as np
import pytest
from helpers import ROOT, error_lines, load_benchmark, run_script_in_process
from rliable import library

TINY = (
    "--total-timesteps 60 --learning-starts 40 --hidden-dim 8 --wm-hidden-dim 8 --batch-size 16 "
    "--updates-per-step 1 --eval-frequency 30 --eval-episodes 1"
)


aggregate = load_benchmark("aggregate")
run_grid = load_benchmark("run_grid")


def run_tool(tool: str, *flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / tool), *flags], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def run_tool_in_process(tool: str, *flags: str, cwd: Path) -> subprocess.CompletedProcess:
    """run_tool's output and exit status without a process start (~4 s of imports for aggregate.py)."""
    return run_script_in_process(f"benchmarks/{tool}", *flags, cwd=cwd)


def write_summary(
    run_dir: Path,
    script: str,
    env: str,
    seed: int,
    steps: list[int],
    returns: list[float],
    with_nauc: bool = True,
    **noise,
) -> None:
    run_dir.mkdir(parents=True)
    args = {
        "exp_name": script,
        "env_id": env,
        "seed": seed,
        "obs_noise": "none",
        "obs_noise_scale": 0.2,
        "dyn_noise": "none",
        "dyn_noise_std": None,
        "total_timesteps": steps[-1],
        **noise,
    }
    summary = {
        "final_eval_return": returns[-1],
        "eval_steps": steps,
        "eval_returns": returns,
        "wall_time_s": 10.0 * seed,
        "args": args,
    }
    if with_nauc:
        summary["nauc"] = float(np.mean(returns))
    (run_dir / "summary.json").write_text(json.dumps(summary))


def reference_ci(values, n_boot: int, seed: int) -> tuple[float, float]:
    """Percentile bootstrap of the median, written independently of aggregate.py, with the resamples rliable's
    stratified bootstrap draws for one task: np.random.choice(n, (n, 1)) from numpy's global RNG."""
    np.random.seed(seed)
    values = np.asarray(values, dtype=float).reshape(-1, 1)
    medians = [np.median(values[np.random.choice(len(values), values.shape)]) for _ in range(n_boot)]
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def interquartile_mean(values) -> float:
    """The mean of the middle 50%: the sorted values without the lowest and highest quarter (n // 4 each)."""
    values = np.sort(values)
    return float(np.mean(values[len(values) // 4 : len(values) - len(values) // 4]))


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_noise_label():
    base = {"obs_noise": "none", "obs_noise_scale": 0.2, "dyn_noise": "none", "dyn_noise_std": None}
    assert aggregate.noise_label(base) == "none"
    assert aggregate.noise_label({**base, "obs_noise": "mult"}) == "mult"
    assert aggregate.noise_label({**base, "obs_noise": "mult", "obs_noise_scale": 0.3}) == "mult0.3"
    assert aggregate.noise_label({**base, "dyn_noise": "gauss"}) == "gauss"
    assert aggregate.noise_label({**base, "dyn_noise": "gauss", "dyn_noise_std": 0.05}) == "gauss0.05"
    assert aggregate.noise_label({**base, "obs_noise": "mult", "dyn_noise": "gauss"}) == "mult+gauss"


def test_interval_estimates_median_iqm_mean():
    values = np.random.default_rng(0).permutation(np.arange(1.0, 9.0) ** 2)  # 1, 4, ..., 64 shuffled
    estimates = aggregate.interval_estimates(values.tolist(), 1000, 7)
    assert list(estimates) == ["median", "iqm", "mean"]
    assert estimates["iqm"][0] == pytest.approx(interquartile_mean(values)) == pytest.approx((9 + 16 + 25 + 36) / 4)
    assert estimates["median"][0] == 20.5 and estimates["mean"][0] == pytest.approx(25.5)
    for estimate, lo, hi in estimates.values():
        assert lo < estimate < hi
    assert estimates["median"][1:] == pytest.approx(reference_ci(values, 1000, 7))
    assert aggregate.interval_estimates(values.tolist(), 1000, 7) == estimates  # the seed makes it reproducible
    assert aggregate.interval_estimates([5.5], 100, 0) == {name: (5.5, 5.5, 5.5) for name in ("median", "iqm", "mean")}
    assert aggregate.nauc([0.0, 1.0, 2.0, 5.0]) == 2.0


def test_cis_shrink_with_more_seeds():
    draws = np.random.default_rng(1).normal(5.0, 2.0, 50)
    few, many = (
        aggregate.interval_estimates(draws[:5].tolist(), 1000, 0),
        aggregate.interval_estimates(draws.tolist(), 1000, 0),
    )
    for name in ("median", "iqm", "mean"):
        for estimate, lo, hi in (few[name], many[name]):
            assert lo <= estimate <= hi
        assert many[name][2] - many[name][1] < 0.6 * (few[name][2] - few[name][1])
    assert many["iqm"][0] == pytest.approx(interquartile_mean(draws))


def test_score_distribution_is_rliables():
    scores = np.array([[0.0], [3.5], [3.5], [6.0], [8.0]])
    taus = np.linspace(-1.0, 9.0, 41)
    profile = aggregate.score_distribution(scores, taus)
    assert profile == pytest.approx(library.score_distributions(scores, taus))
    assert profile[0] == 1.0 and profile[-1] == 0.0 and np.all(np.diff(profile) <= 0)


@pytest.mark.slow
def test_aggregate_recovers_medians_cis_and_writes_figures(tmp_path):
    rng = np.random.default_rng(0)
    steps = [100, 200, 300, 400]
    final = {}
    for script in ("td3_huber", "dsdpg_msmmd_sobolev"):
        for noise, flags in (("none", {}), ("mult0.3", {"obs_noise": "mult", "obs_noise_scale": 0.3})):
            for seed in range(1, 6):
                returns = [float(r) for r in rng.normal(seed * np.arange(1, 5), 1.0)]
                final.setdefault((script, noise), []).append(returns)
                run_dir = tmp_path / "grid" / script / noise / f"seed{seed}" / "runs" / f"r{seed}"
                write_summary(run_dir, script, "PointMass-v0", seed, steps, returns, **flags)
    known = [1.0, 2.0, 4.0, 9.0]  # no nauc in the summary: recomputed as the curve's mean
    write_summary(
        tmp_path / "grid" / "iqn" / "r1", "iqn", "Hopper-v4", 1, steps, known, with_nauc=False, dyn_noise="gauss"
    )
    (tmp_path / "grid" / "iqn" / "unfinished").mkdir()
    (tmp_path / "grid" / "iqn" / "unfinished" / "checkpoint.pt").write_bytes(b"")

    result = run_tool("aggregate.py", "grid", "--out", "out", "--bootstrap-samples", "500", "--seed", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 unfinished run" in result.stderr
    out = tmp_path / "out"

    runs = read_csv(out / "runs.csv")
    assert len(runs) == 21
    iqn = [row for row in runs if row["script"] == "iqn"]
    assert len(iqn) == 1 and iqn[0]["noise"] == "gauss" and iqn[0]["env"] == "Hopper-v4"
    assert float(iqn[0]["nauc"]) == pytest.approx(4.0) and float(iqn[0]["final_eval_return"]) == 9.0

    table = {(row["script"], row["env"], row["noise"]): row for row in read_csv(out / "table.csv")}
    assert len(table) == 5
    for (script, noise), curves in final.items():
        row = table[(script, "PointMass-v0", noise)]
        assert int(row["n_seeds"]) == 5
        for metric, values in (("final_eval_return", [c[-1] for c in curves]), ("nauc", [np.mean(c) for c in curves])):
            assert float(row[f"{metric}_median"]) == pytest.approx(np.median(values))
            lo, hi = reference_ci(values, 500, 3)
            assert float(row[f"{metric}_ci_lo"]) == pytest.approx(lo)
            assert float(row[f"{metric}_ci_hi"]) == pytest.approx(hi)
            assert float(row[f"{metric}_iqm"]) == pytest.approx(interquartile_mean(values))
            assert float(row[f"{metric}_mean"]) == pytest.approx(np.mean(values))
            for name in ("iqm", "mean"):
                assert (
                    float(row[f"{metric}_{name}_ci_lo"])
                    <= float(row[f"{metric}_{name}"])
                    <= float(row[f"{metric}_{name}_ci_hi"])
                )
    single = table[("iqn", "Hopper-v4", "gauss")]
    assert float(single["final_eval_return_ci_lo"]) == float(single["final_eval_return_ci_hi"]) == 9.0
    assert float(single["final_eval_return_iqm_ci_lo"]) == float(single["final_eval_return_mean_ci_hi"]) == 9.0

    markdown = (out / "table.md").read_text()
    row = table[("dsdpg_msmmd_sobolev", "PointMass-v0", "mult0.3")]
    cell = f"{float(row['final_eval_return_median']):.2f} [{float(row['final_eval_return_ci_lo']):.2f}, "
    assert f"| PointMass-v0 | mult0.3 | dsdpg_msmmd_sobolev | 5 | {cell}" in markdown
    for name in ("final_return.png", "nauc.png", "curves.png", "performance_profile.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 10_000


def test_curves_align_on_common_steps_and_mixed_settings_warn(capsys):
    runs = [
        {
            "script": "s",
            "env": "e",
            "noise": "none",
            "seed": seed,
            "run_dir": str(seed),
            "eval_steps": steps,
            "eval_returns": returns,
            "args": {"seed": seed, "total_timesteps": steps[-1]},
        }
        for seed, steps, returns in ((1, [10, 20, 30], [1.0, 2.0, 3.0]), (2, [10, 20], [5.0, 6.0]))
    ]
    groups = aggregate.group_runs(runs)
    assert "differ in total_timesteps" in capsys.readouterr().err
    steps, returns = aggregate.align_curves(groups[("s", "e", "none")])
    assert steps.tolist() == [10, 20] and returns.tolist() == [[1.0, 2.0], [5.0, 6.0]]


def test_aggregate_bad_input(tmp_path):
    (tmp_path / "nothing").mkdir()
    cases = [("missing", "is not a directory"), ("nothing", "no summary.json")]
    no_final_return = {
        "args": {"exp_name": "td3_huber", "env_id": "PointMass-v0", "seed": 2},
        "eval_steps": [100],
        "eval_returns": [1.0],
    }
    for name, content, reason in (
        ("garbage", b"\x89\xff\x00garbage", "UnicodeDecodeError"),
        ("empty", b"", "JSONDecodeError"),
        ("keys", json.dumps(no_final_return).encode(), "no key 'final_eval_return'"),
    ):
        write_summary(tmp_path / name / "good", "td3_huber", "PointMass-v0", 1, [100], [1.0])
        (tmp_path / name / "bad").mkdir()
        (tmp_path / name / "bad" / "summary.json").write_bytes(content)
        cases.append((name, f"{Path(name, 'bad', 'summary.json')} is not a run summary ({reason}"))
    for runs_dir, message in cases:  # --strict: the first bad summary.json stops the aggregation
        result = run_tool_in_process("aggregate.py", runs_dir, "--out", "out", "--strict", cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith("aggregate.py: error:")
        assert message in lines[0] and "Traceback" not in result.stderr
        assert not (tmp_path / "out").exists()


def grid(*flags: str, cwd: Path, seeds=("1", "2")) -> subprocess.CompletedProcess:
    return run_tool(
        *"run_grid.py --scripts td3_huber.py --env-ids PointMass-v0 --seeds".split(),
        *seeds,
        "--common",
        TINY,
        *"--grid-dir grid --workers 2 --threads-per-job 1".split(),
        *flags,
        cwd=cwd,
    )


def log_lines(cwd: Path) -> list[dict]:
    return [json.loads(line) for line in (cwd / "grid" / "grid_log.jsonl").read_text().splitlines()]


def summaries(cwd: Path) -> list[Path]:
    return sorted((cwd / "grid").glob("td3_huber/PointMass-v0/*/seed*/runs/*/summary.json"))


@pytest.mark.slow
def test_local_grid_runs_then_skips_then_resumes(tmp_path):
    result = grid(cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p.parts[-5:-3] for p in summaries(tmp_path)] == [("default", "seed1"), ("default", "seed2")]
    log = log_lines(tmp_path)
    assert sorted(r["job"] for r in log) == [f"td3_huber PointMass-v0 default seed{s}" for s in (1, 2)]
    assert all(
        r["status"] == "ok" and r["returncode"] == 0 and "--seed" in r["command"] and r["seconds"] > 0 for r in log
    )

    again = grid(cwd=tmp_path)
    assert again.returncode == 0 and "2 skipped" in again.stdout and len(log_lines(tmp_path)) == 2

    summaries(tmp_path)[0].unlink()  # an interrupted run: checkpoint.pt without summary.json
    resumed = grid(cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(summaries(tmp_path)) == 2 and "1 skipped" in resumed.stdout
    last = log_lines(tmp_path)[-1]
    assert last["status"] == "ok" and "--resume" in last["command"] and last["job"].endswith("seed1")

    other = grid("--flag-sets", "", cwd=tmp_path, seeds=("1",))
    assert other.returncode == 0 and "1 skipped" in other.stdout
    changed = run_tool(
        *"run_grid.py --scripts td3_huber --env-ids PointMass-v0 --seeds 1 --common".split(),
        "--total-timesteps 70",
        "--grid-dir",
        "grid",
        cwd=tmp_path,
    )
    assert changed.returncode == 1 and "use another --grid-dir" in changed.stderr


@pytest.mark.slow
def test_failed_job_is_reported(tmp_path):
    result = grid("--flag-sets", "--gamma 5", cwd=tmp_path, seeds=("1",))
    assert result.returncode == 1
    assert "1 failed" in result.stdout and "FAILED" in result.stdout and "--gamma must be in [0, 1]" in result.stdout
    [failed] = [line for line in result.stdout.splitlines() if line.startswith("FAILED: ")]
    assert " && OMP_NUM_THREADS=" in failed and failed.endswith("--gamma 5")  # the command --dry-run shows, to paste
    (record,) = log_lines(tmp_path)
    assert record["status"] == "failed" and record["returncode"] == 1 and record["command"].endswith("--gamma 5")
    assert "gamma_5" in record["cwd"]


def test_bad_grid_flags_and_dry_run(tmp_path):
    for flags, message in (
        (["--scripts", "nope"], "no script 'nope'"),
        (["--common", "--seed 3"], "set by the grid"),
        (["--workers", "0"], "--workers must be >= 1"),
    ):
        result = run_tool("run_grid.py", "--env-ids", "PointMass-v0", *flags, cwd=tmp_path)
        assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    dry = grid("--flag-sets", "", "--obs-noise mult", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and len(dry.stdout.splitlines()) == 4 and not (tmp_path / "grid").exists()
    assert all(line.startswith("[new] cd ") for line in dry.stdout.splitlines())
    assert "obs-noise_mult/seed2 && OMP_NUM_THREADS=1 " in dry.stdout


def test_one_exp_name_for_several_scripts_is_refused(tmp_path):
    """--exp-name names the method in aggregate.py: given to two scripts at once (--common or a flag set) it would pool
    their runs as one method with twice the seeds, so the grid refuses it before any job; one script per name is
    fine."""
    for flags in (["--common", "--exp-name same"], ["--flag-sets", "--exp-name same"]):
        result = run_tool_in_process(
            "run_grid.py",
            "--scripts",
            "td3_huber",
            "iqn",
            "--env-ids",
            "PointMass-v0",
            *flags,
            "--dry-run",
            cwd=tmp_path,
        )
        assert result.returncode == 1 and len(error_lines(result)) == 1, result.stderr
        assert "one --exp-name would name the runs of 2 scripts alike" in result.stderr
    alone = run_tool_in_process(
        "run_grid.py",
        "--scripts",
        "td3_huber",
        "--env-ids",
        "PointMass-v0",
        "--common",
        "--exp-name x",
        "--dry-run",
        cwd=tmp_path,
    )
    assert alone.returncode == 0, alone.stderr


def fake_job(tmp_path: Path, name: str, code: str) -> "run_grid.Job":
    """A grid job whose run is `python -c code` in tmp_path/name (a second's start, no script)."""
    job_dir = tmp_path / name
    command = (sys.executable, "-c", code)
    return run_grid.Job("td3_huber", "E", "default", 1, str(job_dir), command, 1, str(tmp_path / "grid_log.jsonl"))


def test_a_job_whose_lock_another_invocation_holds_is_reported_busy_and_not_started(tmp_path):
    """job.lock held (a run of this job goes on under another run_grid, or outlived its own): reported busy, nothing
    run, no job.json written; once the lock is free the job runs."""
    import fcntl

    job = fake_job(tmp_path, "job", "open('ran', 'w')")
    job_dir = Path(job.job_dir)
    job_dir.mkdir()
    with open(job_dir / "job.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        record = run_grid.RunJob()(job)
    assert record["status"] == "busy" and not (job_dir / "ran").exists() and not (job_dir / "job.json").exists()
    assert run_grid.RunJob()(job)["status"] == "failed" and (job_dir / "ran").exists()  # ran (no summary: "failed")


def test_a_stop_of_the_grid_sends_each_running_job_one_sigint(tmp_path):
    """run_local with two jobs running (each exits 130 on SIGINT, as a script does after its checkpoint): a Ctrl-C to
    run_grid interrupts both, which end at once and are recorded as interrupted."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (conftest puts back the suite's)
    import threading

    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(130))\n"
        "open('ready', 'w').close()\n"
        "time.sleep(15)\n"  # a grid that does not forward the stop waits for this: its jobs end ok, not interrupted
    )
    jobs = [fake_job(tmp_path, f"job{i}", code) for i in (1, 2)]

    def interrupt_once_both_run() -> None:
        deadline = time.time() + 30
        while time.time() < deadline and not all((Path(job.job_dir) / "ready").exists() for job in jobs):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C (SIGTERM and SIGHUP raise the same through stopped_like_ctrl_c)

    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    start = time.time()
    records, stopped_by = run_grid.run_local(jobs, workers=2)
    assert stopped_by == signal.SIGINT and time.time() - start < 12
    assert sorted((r["status"], r["returncode"]) for r in records) == [("interrupted", 130)] * 2


@pytest.mark.slow
def test_submitit_local_grid(tmp_path):
    result = grid("--backend", "submitit-local", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(summaries(tmp_path)) == 2 and len(log_lines(tmp_path)) == 2
    assert list((tmp_path / "grid" / "submitit").glob("*_result.pkl"))


def test_split_by_gives_each_setting_its_own_group(tmp_path, capsys):
    for seed in (1, 2):
        for mode, final in (("replay", 8.0), ("model", 2.0)):
            write_summary(
                tmp_path / mode / str(seed),
                "mage_huber_sobolev",
                "E",
                seed,
                [10, 20],
                [1.0, final + seed],
                dyna_reward=mode,
            )
    merged = aggregate.group_runs(aggregate.load_runs(str(tmp_path)))
    assert list(merged) == [("mage_huber_sobolev", "E", "none")] and "differ in dyna_reward" in capsys.readouterr().err
    groups = aggregate.group_runs(aggregate.load_runs(str(tmp_path), ["dyna_reward"]))
    assert list(groups) == [
        ("mage_huber_sobolev[dyna_reward=model]", "E", "none"),
        ("mage_huber_sobolev[dyna_reward=replay]", "E", "none"),
    ]
    assert capsys.readouterr().err == ""
    assert [run["final_eval_return"] for run in groups[("mage_huber_sobolev[dyna_reward=replay]", "E", "none")]] == [
        9.0,
        10.0,
    ]


@pytest.mark.slow
def test_until_step_reads_every_run_at_one_horizon(tmp_path):
    """--until-step: the final return is the last evaluation at or before the step, the nAUC the mean of those; a run
    with none is left out with a warning; the CLI writes the truncated numbers."""
    write_summary(tmp_path / "long" / "1", "td3_huber", "E", 1, [1000, 2000, 3000], [1.0, 2.0, 9.0])
    write_summary(tmp_path / "late" / "1", "td3_huber", "E", 2, [3000], [5.0])
    runs = aggregate.load_runs(str(tmp_path / "long"), until_step=2500)
    assert runs[0]["final_eval_return"] == 2.0 and runs[0]["nauc"] == 1.5 and runs[0]["eval_steps"] == [1000, 2000]
    assert aggregate.load_runs(str(tmp_path / "long"))[0]["nauc"] == 4.0
    result = run_tool_in_process(
        "aggregate.py", str(tmp_path), "--until-step", "2000", "--out", str(tmp_path / "out"), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "1 run(s) without an evaluation at or before --until-step 2000 left out" in result.stderr
    rows = read_csv(tmp_path / "out" / "runs.csv")
    assert [(row["seed"], float(row["final_eval_return"]), float(row["nauc"])) for row in rows] == [("1", 2.0, 1.5)]
    refused = run_tool_in_process("aggregate.py", str(tmp_path), "--until-step", "0", cwd=tmp_path)
    assert refused.returncode == 1 and refused.stderr.strip() == "aggregate.py: error: --until-step must be >= 1"


def test_value_check_reads_the_logged_values_of_every_run(tmp_path, capsys):
    """value_check.py: the mean of losses/qf1_values over a run's last window of steps, its largest value (over the
    event files of a resumed run, the later file winning a step it repeats), the runs above the bound; a run without
    the tag is refused in one line; --save-values keeps them in the order a run saves its own, never over values at
    another window (a warning)."""
    from torch.utils.tensorboard import SummaryWriter

    value_check = load_benchmark("value_check")
    logs = {1: [(100, 2.0), (200, 12.0), (300, 4.0), (400, 6.0)], 2: [(100, 1.0), (200, 3.0), (300, 5.0), (400, 7.0)]}
    for seed, values in logs.items():
        run_dir = tmp_path / "grid" / str(seed)
        write_summary(run_dir, "td3_huber", "E", seed, [200, 400], [1.0, float(seed)])
        halves = (values[:3], [(300, 8.0), *values[3:]]) if seed == 2 else (values,)  # seed 2 resumed at step 300
        for part in halves:
            with SummaryWriter(str(run_dir)) as writer:
                for step, value in part:
                    writer.add_scalar("losses/qf1_values", value, step)
            time.sleep(0.05)  # distinct modification times, and SummaryWriter's file names carry the second
    table = value_check.value_table(value_check.Args(str(tmp_path / "grid"), window=200, bound=10.0))
    assert "| td3_huber | E | 1 | 5.00 | 12.00 | 1.00 |" in table  # steps 300 and 400: (4 + 6) / 2
    assert "| td3_huber | E | 2 | 7.50 | 8.00 | 2.00 |" in table  # step 300 from the later file: (8 + 7) / 2
    assert "| td3_huber | E | 2 (1 above 10) | 6.25 | 10.00 | 1.50 |" in table
    write_summary(tmp_path / "grid" / "3", "td3_huber", "E", 3, [200], [0.0])
    table = value_check.value_table(value_check.Args(str(tmp_path / "grid"), window=200))  # seed 3: no values kept
    assert "| td3_huber | E | 2 | 6.25 | 10.00 | 1.50 |" in table and "| td3_huber | E | 3 |" not in table
    assert table.endswith("summary.json or events): 1 run(s)\n- `3`\n")
    with pytest.raises(SystemExit) as refused:  # sys.exit(message): the message on stderr, exit status 1
        value_check.value_table(value_check.Args(str(tmp_path / "grid" / "3")))
    message = f"value_check.py: error: no run under {tmp_path / 'grid' / '3'} has critic values over 2000 steps"
    assert refused.value.code == f"{message} (summary.json or losses/qf1_values events)"
    saved_table = value_check.value_table(value_check.Args(str(tmp_path / "grid"), window=200, save_values=True))
    assert saved_table == table  # --save-values: the table as before, and the values now in the summaries ...
    for seed in (1, 2):
        for events in (tmp_path / "grid" / str(seed)).glob("events.out.tfevents.*"):
            events.unlink()
    assert value_check.value_table(value_check.Args(str(tmp_path / "grid"), window=200)) == table  # ... without events
    saved = json.loads((tmp_path / "grid" / "2" / "summary.json").read_text())["critic_values"]
    assert saved["mean"] == 7.5 and saved["window_steps"] == 200 and "--save-values" in saved["source"]
    assert list(saved) == ["tag", "window_steps", "mean", "max", "source"]  # the order a run saves its own values in
    summary_path = tmp_path / "grid" / "1" / "summary.json"
    saved_before = summary_path.read_text()
    with SummaryWriter(str(tmp_path / "grid" / "1")) as writer:  # events again; values at another window: not saved
        writer.add_scalar("losses/qf1_values", 1.0, 500)
    value_check.value_table(value_check.Args(str(tmp_path / "grid"), window=100, save_values=True))
    assert summary_path.read_text() == saved_before
    assert "keeps the `critic_values` saved at other settings; not saved" in capsys.readouterr().err
    summary_path = (
        tmp_path / "grid" / "3" / "summary.json"
    )  # a committed run whose events are gone: its summary's values
    saved = json.loads(summary_path.read_text())
    saved["critic_values"] = {"tag": "losses/qf1_values", "window_steps": 200, "mean": 3.0, "max": 9.0}
    summary_path.write_text(json.dumps(saved))
    table = value_check.value_table(value_check.Args(str(tmp_path / "grid"), window=200, bound=10.0))
    assert (
        "| td3_huber | E | 3 | 3.00 | 9.00 | 0.00 |" in table and "| td3_huber | E | 1 | 5.00 | 12.00 | 1.00 |" in table
    )
    for flags, error in (
        ({"window": 0}, "--window must be >= 1"),
        ({"bound": float("nan")}, "--bound must be finite, got nan"),
        ({"runs_dir": str(tmp_path / "none")}, f"{tmp_path / 'none'} is not a directory"),
    ):
        settings = {"runs_dir": str(tmp_path / "grid"), **flags}
        with pytest.raises(SystemExit) as refused:
            value_check.value_table(value_check.Args(**settings))
        assert refused.value.code == f"value_check.py: error: {error}"
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as refused:
        value_check.value_table(value_check.Args(str(tmp_path / "empty")))
    assert refused.value.code == f"value_check.py: error: no finished run (summary.json) under {tmp_path / 'empty'}"


def test_figures_name_methods_as_the_paper_and_keep_one_colour_each():
    """A method's label and colour do not depend on which other methods a grid holds; --split-by groups keep their
    method's colour with line styles of their own; unknown exp_names get distinct other colours."""
    assert aggregate.method_name("td3_huber_no_dyna") == "TD3"
    assert aggregate.method_name("dsdpg_msmmd_sobolev[dyna_reward=model]") == "DSDPG-MSMMD [dyna_reward=model]"
    assert aggregate.method_name("my_variant") == "my_variant"
    alone = aggregate.colour(["dsdpg_msmmd_sobolev"], "dsdpg_msmmd_sobolev")
    crowded = ["td3_huber", "my_variant", "iqn", "dsdpg_msmmd_sobolev", "other"]
    assert aggregate.colour(crowded, "dsdpg_msmmd_sobolev") == alone
    colours = [aggregate.colour(crowded, script) for script in crowded]
    assert len(set(colours)) == len(crowded)
    split = ["td3_huber[dyna_reward=model]", "td3_huber[dyna_reward=replay]"]
    assert len({aggregate.colour(split, script) for script in split}) == 1
    assert [aggregate.line_style(split, script) for script in split] == ["-", "--"]
    assert len({name for name, _ in aggregate.METHODS.values()}) == len({c for _, c in aggregate.METHODS.values()})


def test_the_legend_names_each_group_once_with_its_seeds_over_the_panels():
    """A group drawn in several panels with different numbers of seeds gets one legend entry with their range."""
    fig, axes = aggregate.plt.subplots(2, 1, squeeze=False)
    axes[0, 0].plot([0, 1], color="C0", label="TD3")
    axes[0, 0].plot([0, 1], color="C1", label="TD3 (Dyna)")
    axes[1, 0].plot([0, 1], color="C2", label="TD3 (Dyna)")  # the first one drawn is kept
    axes[1, 0].plot([0, 1], color="C3", label="DSDPG-MSMMD")
    axes[1, 0].plot([0, 1], color="C4", label="a curve without a count")
    seeds = {"TD3": {3}, "TD3 (Dyna)": {3, 2}, "DSDPG-MSMMD": {2}}
    aggregate.figure_legend(fig, axes, seeds)
    [legend] = fig.legends
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels == ["TD3 (3)", "TD3 (Dyna) (2-3)", "DSDPG-MSMMD (2)", "a curve without a count"]
    assert [handle.get_color() for handle in legend.legend_handles] == ["C0", "C1", "C3", "C4"]
    aggregate.plt.close(fig)


def test_the_curves_legend_counts_each_groups_seeds_in_every_panel(tmp_path, monkeypatch):
    """plot_curves labels a group with its seeds per panel: 3 on one env and 2 on another give "(2-3)"."""
    runs = [{"seed": seed, "eval_steps": [1, 2], "eval_returns": [seed, seed + 1.0]} for seed in (1, 2, 3)]
    groups = {
        ("td3_huber_no_dyna", "A-v4", "mult"): runs,
        ("td3_huber_no_dyna", "B-v4", "mult"): runs[:2],
        ("mage_huber_sobolev", "B-v4", "mult"): runs[:2],
    }
    legends = []
    monkeypatch.setattr(aggregate.plt.Figure, "savefig", lambda fig, *a, **k: legends.extend(fig.legends))
    aggregate.plot_curves(str(tmp_path / "curves.png"), groups)
    [legend] = legends
    assert [text.get_text() for text in legend.get_texts()] == ["TD3 (2-3)", "MAGE (2)"]


def test_trend_plots_the_tables_means_against_m(tmp_path, monkeypatch):
    """With runs at two or more PointMass<M>-v0, trend.png draws each method's mean final return and nAUC at its M,
    sorted by M, with the table's 95% CI as band (one M only: a point with error bars); with one M there is no
    trend.png."""
    returns = {
        ("td3_huber_no_dyna", 3): [0.0, 0.0, 3.0],
        ("td3_huber_no_dyna", 6): [1.0, 1.0, 4.0],
        ("iqn", 5): [4.0, 6.0],
    }
    for (script, m), finals in returns.items():
        for seed, final in enumerate(finals, start=1):
            write_summary(
                tmp_path / "grid" / f"{script}{m}s{seed}", script, f"PointMass{m}-v0", seed, [5, 10], [1.0, final]
            )
    drawn = []
    save = aggregate.plt.Figure.savefig

    def recorded(fig, path, **kwargs):
        drawn.append((Path(path).name, fig))
        if Path(path).name == "trend.png":  # drawn to PNG too: the one test that draws it
            save(fig, path, **kwargs)

    monkeypatch.setattr(aggregate.plt.Figure, "savefig", recorded)
    groups, _, written = aggregate.aggregate(
        aggregate.load_runs(str(tmp_path / "grid")), str(tmp_path / "out"), n_boot=50, seed=0
    )
    assert written[-1] == "trend.png" and (tmp_path / "out" / "trend.png").stat().st_size > 0
    fig = dict(drawn)["trend.png"]
    final_ax, nauc_ax = fig.axes
    rows = {(row["script"], row["env"]): row for row in read_csv(tmp_path / "out" / "table.csv")}
    td3_line = [line for line in final_ax.lines if line.get_label().startswith("TD3 (3/3)")]
    assert len(td3_line) == 1
    assert list(td3_line[0].get_xdata()) == [3, 6]
    assert list(td3_line[0].get_ydata()) == [1.0, 2.0]  # the means (not the medians, 0 and 1)
    band = final_ax.collections[0].get_paths()[0].vertices  # fill_between's polygon: lo then hi along M
    lo6, hi6 = (
        float(rows[("td3_huber_no_dyna", "PointMass6-v0")][c])
        for c in ("final_eval_return_mean_ci_lo", "final_eval_return_mean_ci_hi")
    )
    assert any(np.allclose(v, [6, lo6]) for v in band) and any(np.allclose(v, [6, hi6]) for v in band)
    iqn = [bars.lines[0] for bars in nauc_ax.containers if bars.get_label().startswith("IQN (2)")]  # errorbar's point
    assert len(iqn) == 1 and list(iqn[0].get_xdata()) == [5]
    assert iqn[0].get_ydata()[0] == pytest.approx(3.0)  # the mean of (1 + 4) / 2 and (1 + 6) / 2
    drawn.clear()
    _, _, written = aggregate.aggregate(
        [run for members in groups.values() for run in members if run["env"] == "PointMass5-v0"],
        str(tmp_path / "one_m"),
        n_boot=50,
        seed=0,
    )
    assert "trend.png" not in written and "trend.png" not in dict(drawn)


def test_a_job_dir_whose_flags_differ_only_by_flags_without_effect_is_the_jobs(tmp_path):
    """A --no-dyna job run before world-model flags were refused with it (job.json holds --wm-hidden-dim) is the same
    job as today's command without them: done, skipped, not refused; a flag that matters still is."""
    model_free = TINY.replace(" --wm-hidden-dim 8", "")
    job_dir = tmp_path / "grid" / "td3_huber" / "PointMass-v0" / "no-dyna" / "seed1"
    old_flags = ["--env-id", "PointMass-v0", "--seed", "1", *TINY.split(), "--no-dyna"]
    write_summary(job_dir / "runs" / "a_run", "td3_huber", "PointMass-v0", 1, [60], [1.0])
    (job_dir / "job.json").write_text(json.dumps({"script": "td3_huber", "flags": old_flags}))
    common = ("--common", model_free, "--flag-sets", "--no-dyna", "--grid-dir", "grid", "--dry-run")
    result = run_tool_in_process(
        *"run_grid.py --scripts td3_huber --env-ids PointMass-v0 --seeds 1".split(), *common, cwd=tmp_path
    )
    assert result.returncode == 0 and result.stdout.startswith("[done] "), result.stderr
    changed = ("--common", model_free + " --gamma 0.9", *common[2:])
    result = run_tool_in_process(
        *"run_grid.py --scripts td3_huber --env-ids PointMass-v0 --seeds 1".split(), *changed, cwd=tmp_path
    )
    assert result.returncode == 1 and "use another --grid-dir" in result.stderr


def test_a_grid_dir_that_cannot_be_written_is_one_line_before_any_job(tmp_path):
    (tmp_path / "a_file").write_text("")
    for grid_dir, message in (
        ("a_file", "--grid-dir a_file is a file, not a folder"),
        ("a_file/grid", "--grid-dir a_file/grid: cannot write there (Not a directory)"),
    ):
        result = run_tool(
            *"run_grid.py --scripts td3_huber --env-ids PointMass-v0 --seeds 1 --grid-dir".split(),
            grid_dir,
            cwd=tmp_path,
        )
        assert result.returncode == 1 and result.stderr.strip() == f"run_grid.py: error: {message}", result.stderr
        assert result.stdout == "" and sorted(path.name for path in tmp_path.iterdir()) == ["a_file"]


def test_env_ids_aggregates_only_those_envs_and_refuses_an_unknown_one(tmp_path, capsys):
    for env, final in (("PointMass3-v0", 1.0), ("PointMass5-v0", 5.0)):
        for seed in (1, 2):
            write_summary(tmp_path / "grid" / env / str(seed), "iqn", env, seed, [10, 20], [0.0, final])
    args = aggregate.Args(str(tmp_path / "grid"), out=str(tmp_path / "out"), bootstrap_samples=20)
    aggregate.main(replace(args, env_ids=["PointMass5-v0"]))
    assert [(row["env"], row["final_eval_return"]) for row in read_csv(tmp_path / "out" / "runs.csv")] == [
        ("PointMass5-v0", "5.0"),
        ("PointMass5-v0", "5.0"),
    ]
    assert "trend.png" not in capsys.readouterr().out  # one M left: no trend
    with pytest.raises(SystemExit) as refused:
        aggregate.main(replace(args, env_ids=["PointMass5-v0", "Hopper-v4"]))
    assert refused.value.code == (  # SystemExit(message): printed on stderr, exit status 1
        "aggregate.py: error: --env-ids Hopper-v4: no run has that env id (the runs have PointMass3-v0, PointMass5-v0)"
    )


GRID_SCRIPTS = ["inverted_pendulum/inverted_pendulum", "toy_rl5/toy_rl5", "toy_utd10/toy_utd10", "toy_utd10/trend"]


@pytest.mark.parametrize("script", [*GRID_SCRIPTS, "mujoco_cpu/mujoco_cpu", "mujoco_questions/mujoco_questions"])
def test_an_experiment_script_refuses_extra_arguments_before_any_work(tmp_path, script):
    """`X.sh A B` (GRID_DIR is the one argument): one line, exit 1, no grid folder started."""
    result = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / f"{script}.sh"), str(tmp_path / "grid"), "B"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    name = script.split("/")[-1]
    assert result.returncode == 1 and result.stderr == f"{name}.sh: error: one argument at most, GRID_DIR (got 2)\n"
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize("script", [*GRID_SCRIPTS, "mujoco_cpu/mujoco_cpu", "mujoco_questions/mujoco_questions"])
def test_an_experiment_scripts_relative_grid_dir_is_the_callers(tmp_path, script):
    """`bash X.sh grid` run from outside the repository (python stubbed: nothing runs) writes under the caller's ./grid,
    not the repository's: the runs would otherwise start in another folder than the one asked for."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python").write_text('#!/usr/bin/env bash\necho "$@"\n')
    (stub / "python").chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / f"{script}.sh"), "grid_here"],
        cwd=tmp_path,
        env={"PATH": f"{stub}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout + "".join(log.read_text() for log in (tmp_path / "grid_here").glob("*.log"))  # lanes: logs
    assert f"--grid-dir {tmp_path / 'grid_here'} " in printed and not (ROOT / "grid_here").exists()


def test_mujoco_cpu_lanes_each_run_every_group_their_own_first(tmp_path):
    """mujoco_cpu.sh with `python` stubbed to print its arguments: each lane calls run_grid.py once per group, its own
    groups first, then the other lane's in reverse, then the IDP seeds 4-5 of the groups other than DSDPG-MSMMD; so
    both lanes cover all 25 groups (64 runs) and neither idles while one remains. The task's settings go with each."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python").write_text('#!/usr/bin/env bash\necho "$@"\n')
    (stub / "python").chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "mujoco_cpu" / "mujoco_cpu.sh"), str(tmp_path / "grid")],
        env={"PATH": f"{stub}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr

    def groups(lane: str) -> list[tuple[str, str, str, str]]:
        found = []
        for line in (tmp_path / "grid" / f"{lane}.log").read_text().splitlines():
            words = line.split()
            value = {flag: words[words.index(flag) + 1] for flag in ("--scripts", "--env-ids", "--common")}
            seeds = " ".join(words[words.index("--seeds") + 1 : words.index("--grid-dir")])
            flag_set = line.split("--flag-sets ")[1] if "--flag-sets" in line else ""
            common = line.split("--common ")[1].split(" --flag-sets")[0]
            assert words[0] == "benchmarks/run_grid.py" and "--workers 1 --threads-per-job 1" in line
            task_steps = {"InvertedDoublePendulum-v4": 25000, "HalfCheetah-v4": 150000, "Walker2d-v4": 200000}
            assert f"--total-timesteps {task_steps[value['--env-ids']]} " in common and "--obs-noise mult" in common
            assert ("--wm-hidden-dim 256" in common) != flag_set.startswith("--no-dyna")  # no world model: no flags
            found.append((value["--env-ids"][:3], seeds, value["--scripts"], flag_set))
        return found

    lane1, lane2 = groups("lane1"), groups("lane2")  # lane 1 has 10 groups of its own, lane 2 8, then 7 extra
    assert len(lane1) == len(set(lane1)) == 25 and set(lane1) == set(lane2)
    assert lane1[10:18] == lane2[:8][::-1] and lane2[8:18] == lane1[:10][::-1] and lane1[18:] == lane2[18:]
    assert lane1[0] == ("Inv", "1 2 3", "dsdpg_msmmd_sobolev", "--compile")
    assert lane2[0] == ("Inv", "1 2 3", "td3_huber", "--no-dyna --exp-name td3_huber_no_dyna")
    assert all(group[:2] == ("Inv", "4 5") and group[2] != "dsdpg_msmmd_sobolev" for group in lane1[18:])
    per_task = {}
    for env, seeds, _, _ in lane1:
        per_task[env] = per_task.get(env, 0) + len(seeds.split())
    assert per_task == {"Inv": 8 * 5, "Hal": 6 * 3, "Wal": 3 * 2}  # 64 runs


def test_mujoco_questions_lanes_run_the_questions_in_order_and_cover_every_group(tmp_path):
    """mujoco_questions.sh with `python` stubbed: lane 1 runs question a (HalfCheetah DSDPG-MSMMD with the chosen
    search) then c (the same on IDP), lane 2 b (truncation 10 %) then d (lr 1e-4), each then the other's in reverse:
    both cover the 7 groups (21 runs), each with its task's settings and its own --exp-name. A relative GRID_DIR is the
    caller's."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python").write_text('#!/usr/bin/env bash\necho "$@"\n')
    (stub / "python").chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "mujoco_questions" / "mujoco_questions.sh"), "grid"],
        cwd=tmp_path,
        env={"PATH": f"{stub}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr

    def groups(lane: str) -> list[tuple[str, str, str]]:
        found = []
        for line in (tmp_path / "grid" / f"{lane}.log").read_text().splitlines():
            words = line.split()
            env, script = words[words.index("--env-ids") + 1], words[words.index("--scripts") + 1]
            common, flag_set = line.split("--common ")[1].split(" --flag-sets ")
            assert words[words.index("--grid-dir") + 1] == str(tmp_path / "grid")
            assert " ".join(words[words.index("--seeds") + 1 : words.index("--grid-dir")]) == "1 2 3"
            steps = {
                "InvertedDoublePendulum-v4": "25000 --updates-per-step 10",
                "HalfCheetah-v4": "150000 --updates-per-step 1",
            }
            assert (
                f"--total-timesteps {steps[env]}" in common and "--learning-rate 3e-4 --wm-learning-rate 3e-4" in common
            )
            assert "--obs-noise mult --hidden-dim 128 --wm-hidden-dim 256 --batch-size 64" in common
            found.append((env[:3], script, flag_set))
        return found

    lane1, lane2 = groups("lane1"), groups("lane2")
    assert len(lane1) == len(set(lane1)) == 7 and set(lane1) == set(lane2)
    assert lane1[2:] == lane2[:5][::-1] and lane2[5:] == lane1[:2][::-1]
    search = "--compile --slice-lr 0.3 --slice-steps 30 --exp-name dsdpg_msmmd_adam0.3x30"
    assert lane1[:2] == [("Hal", "dsdpg_msmmd_sobolev", search), ("Inv", "dsdpg_msmmd_sobolev", search)]
    assert lane2[:2] == [
        ("Inv", "mmd_critic", "--truncation 10 --exp-name mmd_critic_trunc10"),
        ("Inv", "dsdpg_mmd_sobolev", "--truncation 10 --exp-name dsdpg_mmd_trunc10"),
    ]
    lr = "--learning-rate 1e-4 --wm-learning-rate 1e-4 --exp-name"  # after the common 3e-4: the last one given wins
    assert [g[1:] for g in lane2[2:5]] == [
        ("td3_huber", f"{lr} td3_huber_lr1e-4"),
        ("mmd_critic", f"{lr} mmd_critic_lr1e-4"),
        ("dsdpg_mmd_sobolev", f"{lr} dsdpg_mmd_lr1e-4"),
    ]


def test_stability_counts_what_follows_the_first_solved_evaluation(tmp_path, monkeypatch, capsys):
    """stability.py: per run, the first evaluation >= --solved, the training episodes ending after it that reached the
    time limit or fell (over a resumed run's event files, the later file winning a step), the evaluations below
    --held after it; the critic's mean value near the first solve and --window later, the episodes in that window; a
    run that never solved; the per-script totals; other env ids left out; bad flags refused; --save keeps the numbers
    (never over those saved at other settings: a warning), which stand in once the events are gone."""
    from torch.utils.tensorboard import SummaryWriter

    stability = load_benchmark("stability")
    solved_run, never_run = tmp_path / "grid" / "1", tmp_path / "grid" / "2"
    write_summary(solved_run, "td3_huber", "E", 1, [100, 200, 300, 400], [10.0, 9400.0, 8000.0, 9360.0])
    write_summary(never_run, "td3_huber", "E", 2, [100, 200, 300, 400], [10.0, 20.0, 30.0, 40.0])
    write_summary(tmp_path / "grid" / "3", "td3_huber", "Other", 1, [100], [9400.0])  # another env: left out
    files = (
        [(150, 20.0), (200, 50.0), (220, 1000.0), (250, 30.0)],
        [(250, 1000.0), (330, 40.0), (390, 1000.0)],
    )  # resumed at 250
    for part in files:
        with SummaryWriter(str(solved_run)) as writer:
            for step, length in part:
                writer.add_scalar("charts/episodic_length", length, step)
        time.sleep(0.05)
    with SummaryWriter(str(solved_run)) as writer:  # values near 200: 195, 205; near 300: 295, 305 (span 20)
        for step, value in ((190, 50.0), (195, 4.0), (205, 6.0), (230, 100.0), (295, 7.0), (305, 9.0), (310, 50.0)):
            writer.add_scalar("losses/qf1_values", value, step)
    monkeypatch.setattr(stability, "VALUE_SPAN", 20)
    table = stability.stability_table(
        stability.Args(str(tmp_path / "grid"), env_id="E", solved=9350, held=9000, window=100)
    )
    # after 200: 220, 250 (later file), 390 full; 330 fell; in (200, 300]: 220 and 250 full
    assert "| td3_huber | 1 | 200 | 3 / 1 | 8000 at 300 | 9360 | 5 -> 8 | 2 / 0 |" in table
    assert "| td3_huber | 2 | never | | | 40 | | |" in table
    table = stability.stability_table(stability.Args(str(tmp_path / "grid"), env_id="E", window=200))
    assert "| td3_huber | 1 | 200 | 3 / 1 | 8000 at 300 | 9360 | 5 -> - | 3 / 1 |" in table  # nothing near 400
    assert "| td3_huber | 2 | 1 | 1 / 4 | 1 |" in table and "Other" not in table
    table = stability.stability_table(stability.Args(str(tmp_path / "grid"), env_id="E", solved=9350, held=7000))
    assert "| td3_huber | 1 | 200 | 3 / 1 | none | 9360 |" in table and "| td3_huber | 2 | 1 | 1 / 4 | 0 |" in table
    for flags, message in (
        ({"held": 9500}, "--held (9500) must be at most --solved (9350)"),
        ({"env_id": "F"}, f"no finished run (summary.json) of F under {tmp_path / 'grid'}"),
        ({"window": 19}, "--window must be >= 20"),
    ):
        with pytest.raises(SystemExit) as refused:
            stability.stability_table(stability.Args(str(tmp_path / "grid"), **{"env_id": "E", **flags}))
        assert refused.value.code == f"stability.py: error: {message}"
    # --save keeps the events' numbers in the summary: the same table once the events are gone, at the same settings
    saved_args = stability.Args(str(tmp_path / "grid"), env_id="E", solved=9350, held=9000, window=100, save=True)
    before = stability.stability_table(saved_args)
    assert json.loads((solved_run / "summary.json").read_text())["stability"]["fell"] == 1
    assert "stability" not in json.loads((never_run / "summary.json").read_text())  # nothing read from its events
    saved = json.loads((solved_run / "summary.json").read_text())["stability"]
    stability.stability_table(replace(saved_args, window=200))  # other settings: read, not saved over the first
    assert json.loads((solved_run / "summary.json").read_text())["stability"] == saved
    assert "keeps the `stability` saved at other settings; not saved" in capsys.readouterr().err
    for events in solved_run.glob("events.out.tfevents.*"):
        events.unlink()
    assert stability.stability_table(replace(saved_args, save=False, held=7000)) == before.replace(
        "8000 at 300", "none"
    ).replace("evaluations below 9000", "evaluations below 7000").replace("| 1 / 4 | 1 |", "| 1 / 4 | 0 |")
    with pytest.raises(SystemExit) as refused:
        stability.stability_table(replace(saved_args, window=200))
    assert refused.value.code == (
        f"stability.py: error: {solved_run} has no charts/episodic_length events (they stay on the machine that ran it)"
        " and its summary.json no `stability` at these settings"
    )


def test_episodes_counts_the_training_episodes_after_a_step(tmp_path, capsys):
    """episodes.py: per run, the training episodes ending after --after (over a resumed run's event files, the later
    file winning a step), those shorter than the time limit, their median length, their total return over their total
    length; other env ids left out; bad flags and a run without episodes refused; --save keeps the numbers (never over
    those saved at other settings: a warning), which stand in once the events are gone, at the same settings only."""
    from torch.utils.tensorboard import SummaryWriter

    episodes = load_benchmark("episodes")
    run, other = tmp_path / "grid" / "1", tmp_path / "grid" / "2"
    write_summary(run, "td3_huber", "E", 1, [100, 200], [10.0, 20.0])
    write_summary(other, "td3_huber", "Other", 1, [100], [5.0])  # another env: left out
    files = (
        [(40, 1000.0, 900.0), (60, 20.0, 30.0), (90, 50.0, 70.0)],
        [(90, 30.0, 60.0), (120, 1000.0, 2000.0), (150, 10.0, 5.0)],
    )  # resumed at 90: the later file's episode wins that step
    for part in files:
        with SummaryWriter(str(run)) as writer:
            for step, length, episode_return in part:
                writer.add_scalar("charts/episodic_length", length, step)
                writer.add_scalar("charts/episodic_return", episode_return, step)
        time.sleep(0.05)
    table = episodes.episodes_table(episodes.Args(str(tmp_path / "grid"), env_id="E", after=50))
    # after 50: lengths 20, 30, 1000, 10 (three fell, median 25), returns 30 + 60 + 2000 + 5 = 2 095 over 1 060 steps
    assert "| td3_huber | 1 | 4 | 3 | 25 | 1.98 | 20 |" in table and "Other" not in table
    assert episodes.episodes_table(episodes.Args(str(tmp_path / "grid"), env_id="E", after=40)) == table.replace(
        "after step 50", "after step 40"
    )  # the episode that ends at step 40 is not after it
    table = episodes.episodes_table(episodes.Args(str(tmp_path / "grid"), env_id="E", after=30, max_episode_steps=20))
    assert "| td3_huber | 1 | 5 | 1 | 30 | 1.45 | 20 |" in table  # 1000, 20, 30, 1000, 10: only 10 < 20
    for flags, message in (
        ({"after": -1}, "--after must be >= 0"),
        ({"max_episode_steps": 0}, "--max-episode-steps must be >= 1"),
        ({"env_id": "F"}, f"no finished run (summary.json) of F under {tmp_path / 'grid'}"),
        ({"after": 150}, f"{run} has no training episode ending after step 150"),
    ):
        with pytest.raises(SystemExit) as refused:
            episodes.episodes_table(episodes.Args(str(tmp_path / "grid"), **{"env_id": "E", **flags}))
        assert refused.value.code == f"episodes.py: error: {message}"
    saved_args = episodes.Args(str(tmp_path / "grid"), env_id="E", after=50, save=True)
    before = episodes.episodes_table(saved_args)
    saved = json.loads((run / "summary.json").read_text())["episodes"]
    assert (saved["after"], saved["episodes"], saved["fell"], saved["median_length"]) == (50, 4, 3, 25.0)
    episodes.episodes_table(replace(saved_args, after=40))  # other settings: read, not saved over the first
    assert json.loads((run / "summary.json").read_text())["episodes"] == saved
    assert "keeps the `episodes` saved at other settings; not saved" in capsys.readouterr().err
    for events in run.glob("events.out.tfevents.*"):
        events.unlink()
    assert episodes.episodes_table(replace(saved_args, save=False)) == before
    with pytest.raises(SystemExit) as refused:
        episodes.episodes_table(replace(saved_args, after=60))
    assert refused.value.code == (
        f"episodes.py: error: {run} has no charts/episodic_length events (they stay on the machine that ran it) and its"
        " summary.json no `episodes` at these settings"
    )


def test_logged_diagnostics_reduce_each_tag_per_evaluation_interval(tmp_path):
    """logged_diagnostics.py: each tag a run logged, per evaluation interval (previous evaluation, this one], reduced to
    count, min, median, max (over a resumed run's files, the later one winning a step; a value logged at an evaluation
    step in the interval it ends; values after the last evaluation and empty intervals left out); the table's range and
    first -> last interval medians from --after; the range over a script's runs; a run that logged none of the tags; a
    run without events left out; --save keeps the numbers, which then come before the events and stand in once the
    events are gone."""
    from torch.utils.tensorboard import SummaryWriter

    diagnostics = load_benchmark("logged_diagnostics")
    grid = tmp_path / "grid"
    dsdpg, td3, gone, other = grid / "1", grid / "2", grid / "3", grid / "4"
    write_summary(dsdpg, "dsdpg_x", "E", 1, [100, 200, 300, 400], [1.0, 2.0, 3.0, 4.0])
    write_summary(td3, "td3_x", "E", 1, [100, 200], [1.0, 2.0])
    write_summary(gone, "dsdpg_x", "E", 2, [100, 200], [1.0, 2.0])
    write_summary(other, "dsdpg_x", "E", 3, [100, 200], [1.0, 2.0])
    kappa = "charts/contraction_gamma_kappa"
    first_file = [(50, 9.0), (100, 0.5), (150, 1.0), (180, 3.0), (190, 2.0), (200, 5.0)]
    for part in (first_file, [(190, 8.0), (350, 4.0), (450, 99.0)]):  # resumed at 190
        with SummaryWriter(str(dsdpg)) as writer:
            for step, value in part:
                writer.add_scalar(kappa, value, step)
                writer.add_scalar("losses/qf1_values", 0.0, step)  # not a diagnostic
        time.sleep(0.05)
    with SummaryWriter(str(td3)) as writer:
        writer.add_scalar("losses/qf1_values", 5.0, 150)
    with SummaryWriter(str(other)) as writer:
        writer.add_scalar(kappa, 0.25, 150)
    values = {50: 9.0, 100: 0.5, 150: 1.0, 180: 3.0, 190: 8.0, 200: 5.0, 350: 4.0, 450: 99.0}
    reduced = diagnostics.per_interval(values, [100, 200, 300, 400])
    assert reduced == {
        "steps": [100, 200, 400],
        "count": [2, 4, 1],
        "min": [0.5, 1.0, 4.0],
        "median": [4.75, 4.0, 4.0],
        "max": [9.0, 8.0, 4.0],
    }
    assert diagnostics.per_interval({450: 1.0}, [100, 200]) is None
    table = diagnostics.diagnostics_table(diagnostics.Args(str(grid)))
    assert "| E | dsdpg_x | 1 | 0.5-9 (4.75 -> 4) |  |  |  |  |" in table
    assert "| E | td3_x | 1 |  |  |  |  |  |" in table
    assert "| E | dsdpg_x | 2 | 0.25-9 |" in table  # seeds 1 and 3; seed 2 has no events
    assert "Left out, neither events nor `logged` in summary.json: 1 run(s)\n- `3`" in table
    after_100 = diagnostics.diagnostics_table(diagnostics.Args(str(grid), after=100))
    assert "| E | dsdpg_x | 1 | 1-8 (4 -> 4) |" in after_100  # the later file's 8 at 190, not 2
    assert "| E | dsdpg_x | 1 | 4-4 (4 -> 4) |" in diagnostics.diagnostics_table(diagnostics.Args(str(grid), after=300))
    assert "| E | dsdpg_x | 1 |  |" in diagnostics.diagnostics_table(diagnostics.Args(str(grid), after=301))  # none
    saved = diagnostics.Args(str(grid), after=100, save=True)
    assert diagnostics.diagnostics_table(saved) == after_100
    summary = json.loads((dsdpg / "summary.json").read_text())
    assert summary["logged"]["tags"] == {kappa: reduced} and summary["logged"]["first_logged_step"] == 50
    assert json.loads((td3 / "summary.json").read_text())["logged"]["tags"] == {}  # read, and none logged
    assert "logged" not in json.loads((gone / "summary.json").read_text())
    summary["logged"]["tags"][kappa]["max"][-1] = 6.0  # saved numbers come before the events
    (dsdpg / "summary.json").write_text(json.dumps(summary))
    assert "| E | dsdpg_x | 1 | 4-6 (4 -> 4) |" in diagnostics.diagnostics_table(diagnostics.Args(str(grid), after=300))
    summary["logged"]["tags"][kappa]["max"][-1] = 4.0
    (dsdpg / "summary.json").write_text(json.dumps(summary))
    for events in grid.glob("*/events.out.tfevents.*"):
        events.unlink()
    assert diagnostics.diagnostics_table(replace(saved, save=False)) == after_100
    assert diagnostics.number(1324.4) == "1324" and diagnostics.number(0.012345) == "0.0123"
    for flags, message in (
        ({"after": -1}, "--after must be >= 0"),
        ({"env_id": "F"}, f"no finished run (summary.json) of F under {grid}"),
    ):
        with pytest.raises(SystemExit) as refused:
            diagnostics.diagnostics_table(diagnostics.Args(str(grid), **flags))
        assert refused.value.code == f"logged_diagnostics.py: error: {message}"
    for run in (dsdpg, td3, other):
        (run / "summary.json").unlink()
    with pytest.raises(SystemExit) as refused:
        diagnostics.diagnostics_table(diagnostics.Args(str(grid)))
    assert refused.value.code == (
        f"logged_diagnostics.py: error: no run under {grid} has its events or `logged` in its summary.json (events stay"
        " on the machine that ran it)"
    )


def test_margins_are_each_method_against_the_best_baseline_per_env_and_measure():
    """aggregate.margins: per env, a non-baseline method's mean minus the best baseline's mean, the best taken per
    measure (here MAGE by final return, TD3 by nAUC); envs without a baseline give no row; by default the baselines
    are the methods not named dsdpg*."""
    aggregate = load_benchmark("aggregate")

    def row(script: str, env: str, final: float, nauc: float) -> dict:
        return {
            "script": script,
            "env": env,
            "noise": "none",
            "n_seeds": 3,
            "final_eval_return_mean": final,
            "nauc_mean": nauc,
        }

    rows = [
        row("td3", "A", 2.0, 3.0),
        row("mage", "A", 4.0, 1.0),
        row("dsdpg_x", "A", 5.0, 2.5),
        row("dsdpg_x", "B", 1.0, 1.0),
    ]
    (found,) = aggregate.margins(rows, ["td3", "mage"])
    assert (found["script"], found["env"]) == ("dsdpg_x", "A")
    assert (found["final_eval_return_best_baseline"], found["final_eval_return_margin"]) == ("mage", 1.0)
    assert (found["nauc_best_baseline"], found["nauc_margin"]) == ("td3", -0.5)
    assert aggregate.margins(rows, []) == [found]  # td3 and mage are the default baselines: not named dsdpg*
    assert [m["script"] for m in aggregate.margins(rows, ["td3"])] == ["mage", "dsdpg_x"]


def test_evals_md_holds_every_runs_return_at_every_step_of_its_env(tmp_path):
    """aggregate.write_evals: one table per (env, noise), a row per run in the groups' order, a column per eval step
    of that env's runs, '-' where a run has no evaluation; whole numbers once a table's returns reach 100."""
    aggregate = load_benchmark("aggregate")

    def run(script: str, env: str, seed: int, steps: list[int], returns: list[float]) -> dict:
        return {
            "script": script,
            "env": env,
            "noise": "mult",
            "seed": seed,
            "run_dir": f"{script}{seed}",
            "eval_steps": steps,
            "eval_returns": returns,
            "args": {"seed": seed},
        }

    runs = [
        run("dsdpg_msmmd_sobolev", "Big-v0", 1, [10, 20], [-150.4, 9359.6]),
        run("td3_huber_no_dyna", "Big-v0", 2, [10, 20, 30], [99.5, 100.49, 9360.51]),
        run("td3_huber_no_dyna", "Big-v0", 1, [10, 20, 30], [1.0, 2.0, 3.0]),
        run("iqn", "Small-v0", 1, [5], [1.234]),
    ]
    aggregate.write_evals(tmp_path / "evals.md", aggregate.group_runs(runs))
    text = (tmp_path / "evals.md").read_text()
    big, small = text.split("Small-v0, noise mult")
    assert big.startswith("Big-v0, noise mult: evaluation return at each eval step")
    rows = [line for line in big.splitlines() if line.startswith("| ")]
    assert rows == [
        "| method | seed | 10 | 20 | 30 |",
        "| TD3 | 1 | 1 | 2 | 3 |",
        "| TD3 | 2 | 100 | 100 | 9361 |",
        "| DSDPG-MSMMD | 1 | -150 | 9360 | - |",
    ]
    assert "| IQN | 1 | 1.23 |" in small


GRID_TOOLS = {  # tool -> (its flags for grid_of_one_run's run, its flag that saves into summaries, the key it saves,
    # numbers under that key that --save does not write over: saved at other settings, or logged_diagnostics' own)
    "value_check.py": ([], "--save-values", "critic_values", {"window_steps": 1}),
    "stability.py": (["--env-id", "E"], "--save", "stability", {"solved": 1.0}),
    "episodes.py": (["--env-id", "E", "--after", "0"], "--save", "episodes", {"after": 1}),
    "logged_diagnostics.py": ([], "--save", "logged", {"tags": {}, "first_logged_step": None}),
}


def grid_of_one_run(cwd: Path) -> None:
    """cwd/grid/1: a finished run of env E that every tool of GRID_TOOLS tabulates (solved by stability.py's --solved,
    with the episodes, critic values and contraction factors it logged)."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir = cwd / "grid" / "1"
    write_summary(run_dir, "dsdpg_x", "E", 1, [100, 200], [9400.0, 9400.0])
    with SummaryWriter(str(run_dir)) as writer:
        for tag in (
            "charts/episodic_length",
            "charts/episodic_return",
            "losses/qf1_values",
            "charts/contraction_gamma_kappa",
        ):
            for step in (150, 200):
                writer.add_scalar(tag, 1000.0, step)


def files_in(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def folders_take_no_new_file(monkeypatch) -> None:
    """Every folder refuses a new file, as a read-only one does for a user other than root (permission bits do not stop
    root): the probe file of writable.write_error raises PermissionError."""

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)


@pytest.mark.parametrize("tool", GRID_TOOLS)
def test_a_grid_tool_refuses_an_out_it_cannot_write_before_making_its_table(tmp_path, monkeypatch, tool):
    """value_check, stability, episodes and logged_diagnostics: an --out in a missing folder, under a file, that is a
    folder, or in a folder that takes no new file is one line naming it and why, exit status 1, before the table is
    made (nothing printed, no file written or changed); a writable --out then holds the table printed."""
    grid_of_one_run(tmp_path)
    (tmp_path / "a_file").write_text("")
    flags = GRID_TOOLS[tool][0]
    before = files_in(tmp_path)
    for out, reason in (
        ("no/such/folder/t.md", "No such file or directory"),
        ("a_file/t.md", "Not a directory"),
        ("grid", "a folder"),
        ("t.md", "Permission denied"),
    ):
        with monkeypatch.context() as patch:
            if reason == "Permission denied":
                folders_take_no_new_file(patch)
            result = run_tool_in_process(tool, "grid", *flags, "--out", out, cwd=tmp_path)
        assert result.returncode == 1 and result.stdout == "", result.stdout
        assert error_lines(result) == [f"{tool}: error: --out {out}: cannot write there ({reason})"]
        assert files_in(tmp_path) == before
    result = run_tool_in_process(tool, "grid", *flags, "--out", "t.md", cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "t.md").read_text() == result.stdout != ""


@pytest.mark.parametrize("tool", GRID_TOOLS)
def test_a_grid_tools_save_refuses_a_summary_it_cannot_write_before_reading_events(tmp_path, monkeypatch, tool):
    """value_check's --save-values and the others' --save, where a run's summary.json cannot be replaced (its folder
    takes no new file): one line naming that summary, exit status 1, before any event file is read; nothing printed,
    nothing written."""
    grid_of_one_run(tmp_path)
    flags, save, *_ = GRID_TOOLS[tool]
    before = files_in(tmp_path)
    folders_take_no_new_file(monkeypatch)
    monkeypatch.setattr(run_bookkeeping, "logged_scalars", lambda *args: pytest.fail("an event file was read"))
    result = run_tool_in_process(tool, "grid", *flags, save, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert error_lines(result) == [f"{tool}: error: {save}: cannot write grid/1/summary.json (Permission denied)"]
    assert files_in(tmp_path) == before


@pytest.mark.parametrize("tool", GRID_TOOLS)
def test_a_grid_tools_save_asks_only_the_summaries_it_would_write(tmp_path, monkeypatch, tool):
    """A summary that already holds numbers under the tool's key, which --save never writes over, is not written, so a
    folder that takes no new file is no reason to refuse it: the table is made and nothing written."""
    grid_of_one_run(tmp_path)
    flags, save, key, kept = GRID_TOOLS[tool]
    summary_path = tmp_path / "grid" / "1" / "summary.json"
    summary_path.write_text(json.dumps({**json.loads(summary_path.read_text()), key: kept}))
    before = files_in(tmp_path)
    folders_take_no_new_file(monkeypatch)
    result = run_tool_in_process(tool, "grid", *flags, save, cwd=tmp_path)
    assert result.returncode == 0 and "| 1 |" in result.stdout, result.stderr
    assert files_in(tmp_path) == before


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--solved", "nan"], "--solved must be finite (got nan)"),
        (["--solved", "inf"], "--solved must be finite (got inf)"),
        (["--held", "nan"], "--held must be finite (got nan)"),
        (["--held=-inf"], "--held must be finite (got -inf)"),
        (["--held", "9500"], "--held (9500) must be at most --solved (9350)"),
        (["--max-episode-steps", "0"], "--max-episode-steps must be >= 1"),
        (["--window", "999"], "--window must be >= 1000"),
    ],
)
def test_stability_names_the_flag_of_each_bad_number(tmp_path, flags, message):
    """Each numeric flag of stability.py that is NaN, infinite or out of its range is refused in one line that names
    that flag (--solved nan is not blamed on --held), exit status 1, before the table is made on a grid it tabulates."""
    grid_of_one_run(tmp_path)
    result = run_tool_in_process("stability.py", "grid", "--env-id", "E", *flags, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert error_lines(result) == [f"stability.py: error: {message}"]
