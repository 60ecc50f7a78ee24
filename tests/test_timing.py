"""benchmarks/timing.py end to end at tiny sizes: it times scripts by difference, counts their FLOPs and writes the
table."""

import importlib
import json
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import ROOT, load_benchmark, run_script, run_script_in_process


@pytest.mark.slow
def test_timing_table_for_two_scripts(tmp_path):
    out = tmp_path / "timing.json"
    result = run_script(
        *"benchmarks/timing.py --env-id PointMass-v0 --learning-starts 40 --seconds 1 --scripts td3_huber".split(),
        "dsdpg_msmmd_sobolev@world_model=flow,num_samples=3,slice_steps=2",
        *"--script-flags hidden_dim=8 wm_hidden_dim=8 batch_size=16 --out".split(),
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    table = json.loads(out.read_text())
    rows = {row["script"]: row for row in table["rows"]}
    assert list(rows) == ["td3_huber", "dsdpg_msmmd_sobolev@world_model=flow,num_samples=3,slice_steps=2"]
    assert rows["td3_huber"]["ratio"] == 1.0 and table["matmul_gflops"] > 0
    for row in rows.values():
        assert row["ms_per_iteration"] > 0 and row["timed_iterations"] >= 5
        assert row["gflop_per_iteration"] > 0  # critic updates really ran in the timed part
    # the distributional Sobolev update does more arithmetic than TD3's
    dsdpg = rows["dsdpg_msmmd_sobolev@world_model=flow,num_samples=3,slice_steps=2"]
    assert dsdpg["gflop_per_iteration"] > rows["td3_huber"]["gflop_per_iteration"]
    assert "| td3_huber |" in result.stdout and not (ROOT / "runs" / "timing").exists()
    # the critic update by part: TD3's targets need no backward pass, DSDPG's go back through every part
    td3_parts = {(p["part"], p["pass"]): p["gflop"] for p in rows["td3_huber"]["critic_update"]}
    assert td3_parts[("target critics", "forward")] > 0 and ("target critics", "backward") not in td3_parts
    dsdpg_parts = {(p["part"], p["pass"]): p["gflop"] for p in dsdpg["critic_update"]}
    for part in ("world model (flow)", "target actor", "target critics", "online critics"):
        assert dsdpg_parts[(part, "forward")] > 0 and dsdpg_parts[(part, "backward")] > 0, part
    assert "one critic update" in result.stdout and "| online critics | backward |" in result.stdout


def test_timing_on_cuda_is_refused_in_one_line_without_a_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: nothing to refuse")
    result = run_script_in_process("benchmarks/timing.py", "--device", "cuda", "--scripts", "td3_huber", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "timing.py: error: --device cuda: torch sees no CUDA GPU on this machine"


@pytest.mark.parametrize("sobolev", ["action", "complete"])
def test_dsdpg_critic_update_stays_at_its_arithmetic_floor(sobolev):
    """The floor counts every network once per distinct input row; the update may exceed it only by the prior's
    forward-mode pass (a few %). Running the cVAE prior on every per-sample copy again (the pre-"Speed II" update) would
    put the update ~35 % above it at paper proportions, > 10 % here."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    timing = importlib.import_module("timing")
    module = importlib.import_module("dsdpg_mmd_sobolev")
    args = timing.Args(
        env_id="PointMass-v0",
        script_flags=["hidden_dim=64", "wm_hidden_dim=256", "batch_size=32", "num_samples=4", f"sobolev={sobolev}"],
    )
    parts, floor = timing.critic_update_breakdown(module, args, [])
    total = sum(part["gflop"] for part in parts)
    assert floor <= total <= 1.1 * floor, (total, floor)
    args.script_flags = args.script_flags[:3]
    td3_parts, td3_floor = timing.critic_update_breakdown(importlib.import_module("td3_huber"), args, [])
    assert td3_floor is None and td3_parts


@pytest.mark.slow
def test_op_count_counts_an_iteration_by_difference(tmp_path):
    """benchmarks/investigations/op_count.py: an iteration with two critic updates has more operations, bytes and FLOPs
    than one with one (each counted by the difference of two runs)."""
    result = run_script(
        "benchmarks/investigations/op_count.py",
        *"--env-id PointMass-v0 --learning-starts 40 --iterations 2 --scripts td3_huber".split(),
        *(
            "td3_huber@updates_per_step=2 --script-flags updates_per_step=1 hidden_dim=8 wm_hidden_dim=8 batch_size=16"
        ).split(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("|")[2:5] for line in result.stdout.splitlines() if line.startswith("| td3_huber")]
    (ops1, mb1, mflop1), (ops2, mb2, mflop2) = [[float(value) for value in row] for row in rows]
    assert 0 < ops1 < ops2 and 0 < mb1 < mb2 and 0 < mflop1 < mflop2


timing = load_benchmark("timing")
TINY_TIMING = dict(
    env_id="PointMass-v0", script_flags=["hidden_dim=8", "wm_hidden_dim=8", "batch_size=16"], seconds=0.2
)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(scripts=["nonexistent"]), "--scripts: 'nonexistent' is not one of the RL scripts (td3_huber, "),
        (dict(script_flags=["hidden_dim"]), "'hidden_dim': a setting is name=value"),
        (dict(scripts=["iqn@num_samples"]), "'num_samples': a setting is name=value"),
        (dict(seconds=float("nan")), "--seconds must be a number > 0 (got nan)"),
        (dict(flop_iterations=0), "--flop-iterations must be >= 1 (got 0)"),
        (dict(threads=0), "--threads must be >= 1 (got 0)"),
        (dict(out="no/such/folder/timing.json"), "--out no/such/folder/timing.json: cannot write there (No such file"),
        (dict(scripts=["td3_huber@hidden_dim=0"]), "td3_huber@hidden_dim=0: hidden dims must be >= 1"),
        (
            dict(scripts=["td3_huber@buffer_size=1000000000000"]),
            "td3_huber@buffer_size=1000000000000: the replay buffer",
        ),
    ],
)
def test_bad_flags_are_one_line_before_any_work(monkeypatch, settings, message):
    """Every flag, script and script setting is checked before the first measurement (the matmul's), so a bad one costs
    no work and loses none."""

    def no_work(*args, **kwargs):
        raise AssertionError("the work started")

    monkeypatch.setattr(timing, "matmul_flops_per_second", no_work)
    with pytest.raises(SystemExit) as refused:
        timing.main(timing.Args(**{**TINY_TIMING, "scripts": ["td3_huber"], **settings}))
    assert str(refused.value).startswith(f"timing.py: error: {message}"), refused.value


def test_flops_are_counted_on_the_eager_update(monkeypatch):
    """A script timed with compile=true or cudagraphs=true (in its settings or in --script-flags) has its FLOPs counted
    on runs neither compiled nor captured: FlopCounterMode cannot count inside either."""
    module = importlib.import_module("dsdpg_msmmd_sobolev")
    seen = []
    monkeypatch.setattr(module, "main", lambda args: seen.append((args.compile, args.cudagraphs)))
    args = timing.Args(**{**TINY_TIMING, "script_flags": ["compile=true"]})
    timing.flops_per_iteration(module, args, ["cudagraphs=true", "compile=true"])
    assert seen == [(False, False), (False, False)]


@pytest.mark.slow
def test_sigterm_stops_timing_in_one_line_with_nothing_to_resume(tmp_path):
    """SIGTERM (as Ctrl-C) in the middle of a script's timed run: one line saying the measurement is lost, no --resume
    of a checkpoint in the scratch folder that is already deleted, nothing written."""
    command = [sys.executable, str(ROOT / "benchmarks" / "timing.py"), "--env-id", "PointMass-v0", "--seconds", "30"]
    command += [*"--scripts td3_huber --script-flags hidden_dim=8 wm_hidden_dim=8 batch_size=16 --out t.json".split()]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr.readline().startswith("dense fp32 matmul")  # the scripts' runs start after this line
    time.sleep(3.0)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1 and "Traceback" not in stderr and "--resume" not in stderr, stderr
    assert stderr.strip() == (
        "timing.py: error: interrupted: the measurement is lost and nothing was written (timing.py keeps nothing to "
        "resume from)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_interrupted_table_keeps_the_scripts_it_finished(tmp_path, monkeypatch):
    """--out is written after every script: interrupted in the second script's runs, the JSON holds the first one's row,
    marked incomplete, and the one line says so; an uninterrupted table is marked complete."""
    monkeypatch.chdir(tmp_path)
    args = timing.Args(**{**TINY_TIMING, "scripts": ["td3_huber", "td3_huber@hidden_dim=16"], "out": "t.json"})
    args.breakdown = False

    def interrupted_in_the_second_script(module, args, total_timesteps, variant):  # the runs' times, 1 ms a step
        if variant == ["hidden_dim=16"]:
            raise KeyboardInterrupt
        return total_timesteps / 1000

    monkeypatch.setattr(timing, "run", interrupted_in_the_second_script)
    monkeypatch.setattr(timing, "flops_per_iteration", lambda *a: 1e9)
    with pytest.raises(SystemExit) as stop:
        timing.main(args)
    assert str(stop.value) == (
        'timing.py: error: interrupted: the 1 script(s) timed so far are in t.json ("complete": false); the one in '
        "progress is lost (timing.py keeps nothing to resume from)"
    )
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["complete"] is False and [row["script"] for row in table["rows"]] == ["td3_huber"]
    assert table["rows"][0]["ratio"] == 1.0 and table["rows"][0]["ms_per_iteration"] == pytest.approx(1.0)
    timing.main(timing.Args(**{**TINY_TIMING, "scripts": ["td3_huber"], "out": "t.json", "breakdown": False}))
    assert json.loads((tmp_path / "t.json").read_text())["complete"] is True


@pytest.mark.slow
def test_a_compiled_entry_says_it_is_compiling_before_its_first_run(monkeypatch, capsys):
    """timing.py --scripts "...@compile=true" says so before the first (compiling) run, not after minutes of silence;
    an eager entry does not."""
    args = timing.Args(
        **{**TINY_TIMING, "scripts": ["dsdpg_msmmd_sobolev@compile=true", "td3_huber"], "breakdown": False}
    )
    entries = timing.check_args(args)
    said_before_first_run = []
    monkeypatch.setattr(
        timing, "timed_iterations", lambda *a: said_before_first_run.append(capsys.readouterr().err) or 5
    )
    monkeypatch.setattr(timing, "run", lambda module, args, steps, variant: float(steps))
    monkeypatch.setattr(timing, "flops_per_iteration", lambda *a: 1e9)
    timing.measure(args, entries, [])
    assert "dsdpg_msmmd_sobolev@compile=true: compiling (torch.compile" in said_before_first_run[0]
    assert "compiling" not in said_before_first_run[1]
