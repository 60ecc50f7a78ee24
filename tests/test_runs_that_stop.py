"""Runs that stop and commands that must refuse, as a user meets them: a run stopped by SIGTERM resumes to its own end
with the command it printed; a finished run resumed is left alone; bad flags, paths and files give one line, a
non-zero exit and no traceback, and change nothing a run had written."""

import hashlib
import importlib
import os
import re
import signal
import subprocess
import sys
import types
from pathlib import Path

import run_bookkeeping

import helpers
import pytest
import torch
from helpers import ROOT, error_lines, only_run_dir, read_summary, run_script, run_script_in_process

import flag_extras
import td3_huber

TINY = (
    "--env-id PointMass-v0 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --batch-size 16 "
    "--updates-per-step 1 --eval-episodes 2 --contraction-frequency 0"
).split()
MODEL_FREE = [
    *" ".join(TINY).replace(" --wm-hidden-dim 16", "").split(),
    "--no-dyna",
]  # which refuses world-model flags


def train(cwd: Path, *flags: str) -> Path:
    result = run_script("td3_huber.py", *TINY, *flags, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return only_run_dir(cwd)


def hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file below a folder, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def refused(result: subprocess.CompletedProcess, message: str) -> None:
    lines = error_lines(result)
    assert result.returncode != 0 and len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_script_run_in_process_exits_and_prints_as_its_process_does(tmp_path):
    """run_script_in_process, which the refusal tests use, against a real process: the same status, stdout and stderr
    for a refusal of each kind of command the tests run in-process (an RL script, paper.py's usage error, the supervised
    toy, aggregate.py, timing.py), the same status and last line for an exception (its traceback has runpy's frames
    too), and a script's own exit status and warnings (each once; a DeprecationWarning, as it comes from __main__)."""
    (tmp_path / "raises.py").write_text("raise ValueError('broken')\n")
    (tmp_path / "exits.py").write_text(
        "import sys, warnings\nprint('out')\nfor _ in range(2):\n    warnings.warn('careful')\n"
        "warnings.warn('old', DeprecationWarning)\nsys.exit(259)\n"
    )
    commands = [
        ("td3_huber.py", ["--gamma", "1.5"]),
        ("benchmarks/paper.py", ["run", "figure-9"]),
        ("toy_supervised_sobolev.py", ["--input-noise", "-0.1"]),
        ("benchmarks/aggregate.py", ["no_such_folder"]),
        *([] if torch.cuda.is_available() else [("benchmarks/timing.py", ["--device", "cuda"])]),
        (str(tmp_path / "raises.py"), []),
        (str(tmp_path / "exits.py"), []),
    ]
    for script, flags in commands:
        in_process, process = (
            run_script_in_process(script, *flags, cwd=tmp_path),
            run_script(script, *flags, cwd=tmp_path),
        )
        assert (in_process.returncode, in_process.stdout) == (process.returncode, process.stdout), script
        assert ("Traceback" in in_process.stderr) == ("Traceback" in process.stderr), script
        if "Traceback" in process.stderr:
            assert error_lines(in_process)[-1] == error_lines(process)[-1] == "ValueError: broken"
        else:
            assert in_process.stderr == process.stderr and process.returncode != 0, script
    assert process.returncode == 259 % 256
    assert process.stderr.count("UserWarning: careful") == 1 and "DeprecationWarning: old" in process.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["exits.py", "raises.py"]


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_resumes_to_its_own_end_with_the_printed_command(tmp_path):
    command = [sys.executable, str(ROOT / "td3_huber.py"), *MODEL_FREE, "--total-timesteps", "3000"]
    command += ["--eval-frequency", "1000"]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    drawn = ""
    while not re.search(r"\| *[1-9]\d*/3000 \[", drawn):  # steps done: the loop runs, SIGTERM is handled like Ctrl-C
        character = process.stderr.read(1)
        assert character, drawn  # the run ended before it got there
        drawn += character
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    lines = error_lines(drawn + stderr)
    assert process.returncode == 1 and "interrupted at step" in lines[-1], stderr
    python, script, *printed = re.search(r"resume with: (python \S+ --resume \S+)$", lines[-1]).group(1).split()
    assert python == "python" and script == str(ROOT / "td3_huber.py")  # the script as it was run
    assert Path(
        printed[-1]
    ).is_absolute()  # so the command works wherever it is pasted (a grid job's is its own folder)
    (tmp_path / "elsewhere").mkdir()
    resumed = run_script("td3_huber.py", *printed, cwd=tmp_path / "elsewhere")  # the printed command, no budget given
    assert resumed.returncode == 0, resumed.stderr
    run_dir = only_run_dir(tmp_path)
    summary = read_summary(run_dir)
    assert summary["eval_steps"][-1] == 3000 and summary["args"]["total_timesteps"] == 3000
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["global_step"] == 3000


@pytest.mark.slow
def test_a_finished_run_is_left_alone_and_a_non_finite_checkpoint_is_refused(tmp_path):
    run_dir = train(tmp_path, "--total-timesteps", "200", "--eval-frequency", "100", "--save-model")
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    checkpoint["actor"]["net.0.weight"][0, 0] = float("nan")
    torch.save(checkpoint, run_dir / "nonfinite_checkpoint.pt")
    before = hashes(tmp_path)
    result = run_script("td3_huber.py", "--resume", str(run_dir), cwd=tmp_path)  # its budget: the checkpoint's 200
    assert result.returncode == 0 and "at step 200 of 200: nothing to do" in result.stderr, result.stderr
    refused(
        run_script_in_process("td3_huber.py", "--resume", str(run_dir / "model.pt"), cwd=tmp_path),
        "is a saved model, not a checkpoint",
    )
    for flag in ("--resume", "--evaluate"):
        result = run_script_in_process("td3_huber.py", flag, str(run_dir / "nonfinite_checkpoint.pt"), cwd=tmp_path)
        refused(result, "holds non-finite weights")
        assert "for inspection" in result.stderr
    assert hashes(tmp_path) == before
    for _ in range(2):  # a second evaluation is written beside the first
        assert (
            run_script("td3_huber.py", "--evaluate", str(run_dir), "--eval-episodes", "1", cwd=tmp_path).returncode == 0
        )
    assert hashes(tmp_path).items() >= before.items()
    assert (run_dir / "evaluation.json").is_file() and (run_dir / "evaluation-2.json").is_file()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--env-id", "Hopper-v2"], "Hopper-v2 needs mujoco-py (the paper's ids): use Hopper-v4 or Hopper-v5"),
        (["--exploration-noise", "inf"], "--exploration-noise must be finite (got inf)"),
        (["--policy-noise", "nan"], "--policy-noise must be finite (got nan)"),
        (["--learning-rate", "inf"], "--learning-rate must be finite"),
        (["--dyn-noise", "gauss", "--dyn-noise-std", "inf"], "--dyn-noise-std must be finite"),
        (["--env-id", "PointMass-v0"], "cannot write to runs/PointMass-v0__td3_huber__"),  # `runs` is a file here
    ],
)
def test_bad_flags_and_paths_give_one_line_and_write_nothing(tmp_path, flags, message):
    (tmp_path / "runs").write_text("not a folder")
    before = hashes(tmp_path)
    refused(run_script_in_process("td3_huber.py", *flags, cwd=tmp_path), message)
    assert hashes(tmp_path) == before


@pytest.mark.slow
def test_unwritable_run_folders_are_refused_before_any_work(tmp_path, monkeypatch):
    """As root, permission bits do not stop writes, so the refusal is made to happen the way a read-only folder fails:
    the writability probe raises PermissionError."""
    run_dir = train(tmp_path, "--total-timesteps", "200", "--eval-frequency", "100", "--save-model")
    before = hashes(tmp_path)

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(run_bookkeeping.tempfile, "TemporaryFile", read_only)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys, "argv", ["td3_huber.py", "--total-timesteps", "300"]
    )  # a budget given, as on a command line
    for flags in (dict(resume=str(run_dir), total_timesteps=300), dict(evaluate=str(run_dir))):
        with pytest.raises(SystemExit, match=f"cannot write to {re.escape(str(run_dir))}: Permission denied"):
            td3_huber.main(td3_huber.Args(**flags))
    assert hashes(tmp_path) == before


def test_track_honours_wandb_dir(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kwargs: calls.append(kwargs)))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    flag_extras.start_tracking(td3_huber.Args(), str(tmp_path / "runs" / "a_run"))
    monkeypatch.delenv("WANDB_DIR")
    flag_extras.start_tracking(td3_huber.Args(), str(tmp_path / "runs" / "a_run"))
    assert [call["dir"] for call in calls] == [str(tmp_path / "elsewhere"), str(tmp_path / "runs")]


DISTRIBUTIONAL_MMD = ("mmd_critic", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev")


@pytest.mark.parametrize("script", helpers.RL_SCRIPTS)
@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(seed=-1), "--seed must be in [0, 2^32) (got -1)"),
        (dict(seed=2**32), "--seed must be in [0, 2^32) (got 4294967296)"),
        (dict(obs_noise_scale=0.3), "--obs-noise-scale changes nothing without --obs-noise mult"),
        (dict(dyn_noise_std=0.05), "--dyn-noise-std changes nothing without --dyn-noise gauss"),
        (dict(kernel_bandwidth=1e200), "--kernel-bandwidth must be in [0.01, 1e6]: above 1e6, h^2 |x - y|^2 overflows"),
        (dict(kernel_bandwidth=1e7), "--kernel-bandwidth must be in [0.01, 1e6]: above 1e6, h^2 |x - y|^2 overflows"),
        (dict(kernel_bandwidth=1e-200), "--kernel-bandwidth must be in [0.01, 1e6]: below 0.01 the float32 kernel"),
        (dict(kernel_bandwidth=0.0099), "--kernel-bandwidth must be in [0.01, 1e6]"),
        (
            dict(total_timesteps=3000),
            "--total-timesteps 3000 is not above --learning-starts 5000: no update would ever",
        ),
        (dict(total_timesteps=300, learning_starts=1000), "--total-timesteps 300 is not above --learning-starts 1000"),
    ],
)
def test_flags_out_of_range_or_without_effect_are_refused(script, flags, message):
    """Each is a ValueError from check_args (one line and exit 1 in main()); their valid neighbours pass."""
    module = importlib.import_module(script)
    if "kernel_bandwidth" in flags and script not in DISTRIBUTIONAL_MMD:
        pytest.skip("no kernel")
    with pytest.raises(ValueError) as refused_flag:
        module.check_args(module.Args(**flags))
    assert str(refused_flag.value).startswith(message)
    fine = dict(
        seed=dict(seed=0 if flags.get("seed", 0) < 0 else 2**32 - 1),
        obs_noise_scale=dict(obs_noise="mult", obs_noise_scale=0.3),
        dyn_noise_std=dict(dyn_noise="gauss", dyn_noise_std=0.05),
        kernel_bandwidth=dict(kernel_bandwidth=1e6 if flags.get("kernel_bandwidth", 1) > 1 else 0.01),
        total_timesteps=dict(total_timesteps=1001, learning_starts=1000),
    )[next(iter(flags))]
    module.check_args(module.Args(**fine))


def test_the_bandwidth_floor_is_where_the_float32_kernel_stops_telling_returns_apart():
    """The floor's reason, on the real kernel: at h = 0.01, returns 0.05 apart give a float32 kernel value other than
    the diagonal's -1 (the loss sees them apart); at h = 0.001 the same returns give exactly -1 (the loss does not)."""
    mmd_critic = importlib.import_module("mmd_critic")
    returns = torch.tensor([[0.0], [0.05]])  # (n, d)
    assert mmd_critic.multiquadric_kernel(returns, returns, 0.01)[0, 1].item() != -1.0
    assert mmd_critic.multiquadric_kernel(returns, returns, 0.001)[0, 1].item() == -1.0


@pytest.mark.slow
def test_a_mujoco_v4_run_prints_no_upgrade_warning(tmp_path):
    """The v4 ids are the README's choice, said there once; gymnasium's "out of date, upgrade to v5" is not printed."""
    flags = "--env-id Hopper-v4 --no-dyna --total-timesteps 20 --learning-starts 10 --hidden-dim 8 --batch-size 8"
    result = run_script("td3_huber.py", *flags.split(), "--eval-frequency", "20", "--eval-episodes", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "out of date" not in result.stderr and "DeprecationWarning" not in result.stderr


@pytest.mark.slow
def test_a_resumed_run_that_would_never_update_is_refused(tmp_path):
    """A run stopped before learning starts, resumed with a budget that ends before it too, is refused with the run's
    own --learning-starts (the command line's default is not the run's); its checkpoint is left as it was."""
    run_dir = train(tmp_path, "--total-timesteps", "200", "--eval-frequency", "100")
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    checkpoint["global_step"] = 50  # as if stopped at step 50, before the 100 random steps were over
    torch.save(checkpoint, run_dir / "checkpoint.pt")
    (run_dir / "summary.json").unlink()
    before = hashes(tmp_path)
    refused(
        run_script_in_process("td3_huber.py", "--resume", str(run_dir), "--total-timesteps", "80", cwd=tmp_path),
        "--total-timesteps 80 is not above the run's --learning-starts 100: no update would ever run",
    )
    assert hashes(tmp_path) == before


@pytest.mark.parametrize(
    "flags",
    [
        dict(world_model="flow"),
        dict(wm_hidden_dim=16),
        dict(wm_learning_rate=1e-3),
        dict(wm_updates_per_step=2),
        dict(dyna_reward="model"),
        dict(wm_hidden_dim=16, wm_learning_rate=1e-3),
    ],
)
def test_world_model_flags_with_no_dyna_are_refused(flags):
    """td3_huber --no-dyna builds no world model, so its flags change nothing there (a tiny run with and without them:
    the same checkpoint to the bit): set, they are refused by name; with Dyna, or at their defaults, they pass."""
    with pytest.raises(ValueError) as refused_flag:
        td3_huber.check_args(td3_huber.Args(dyna=False, **flags))
    names = ", ".join(f"--{name.replace('_', '-')}" for name in flags)
    verb, them = ("changes", "it") if len(flags) == 1 else ("change", "them")
    assert str(refused_flag.value) == f"{names} {verb} nothing with --no-dyna (drop {them}, or drop --no-dyna)"
    td3_huber.check_args(td3_huber.Args(**flags))
    td3_huber.check_args(td3_huber.Args(dyna=False))


@pytest.mark.slow
def test_a_run_started_with_flags_now_refused_still_resumes(tmp_path):
    """A checkpoint written before such flags were refused (--no-dyna with --wm-hidden-dim) resumes: on resume they are
    put back to their defaults for the check, as they changed nothing."""
    result = run_script(
        "td3_huber.py", *MODEL_FREE, "--total-timesteps", "200", "--eval-frequency", "100", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    checkpoint["args"]["wm_hidden_dim"] = 16
    torch.save(checkpoint, run_dir / "checkpoint.pt")
    (run_dir / "summary.json").unlink()
    resumed = run_script("td3_huber.py", "--resume", str(run_dir), "--total-timesteps", "300", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert read_summary(run_dir)["eval_steps"] == [100, 200, 300]


@pytest.mark.parametrize("script", helpers.RL_SCRIPTS)
@pytest.mark.parametrize(
    "flags, asked",
    [
        (dict(buffer_size=10**12), "the replay buffer of --buffer-size 1000000000000 would need ~"),
        (
            dict(hidden_dim=10**8),
            "the networks of --hidden-dim 100000000, --wm-hidden-dim 1024 with their optimizer states",
        ),
        (
            dict(num_samples=10**8),
            "one update's largest tensor at --batch-size 256, --num-samples 100000000 would need ~",
        ),
    ],
)
def test_sizes_that_cannot_be_allocated_are_refused_before_any_work(tmp_path, monkeypatch, script, flags, asked):
    """An order-of-magnitude estimate of what the run would allocate, against the machine's memory, made before anything
    is allocated or written: one line with what was asked and what it needs."""
    module = importlib.import_module(script)
    if "num_samples" in flags and not hasattr(module.Args, "num_samples"):
        pytest.skip("one return per pair")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused_run:
        helpers.open_run_of(module, module.Args(env_id="PointMass-v0", cuda=False, **flags))
    message = str(refused_run.value)
    assert message.startswith(f"{script}.py: error: {asked}") and "more than the" in message, message
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("script", helpers.RL_SCRIPTS)
def test_the_paper_sizes_pass_the_memory_check(script):
    """The paper's sizes on its largest task (Humanoid: 376 observations, 17 actions; 256 wide, batch 256, a million
    transitions, 25 samples per pair at most) need ~3.5 GB: the replay buffer's 3.1 GB and a little more."""
    module = importlib.import_module(script)
    sizes = dict(hidden_dim=256, batch_size=256, buffer_size=10**6)
    args = module.Args(**sizes, **(dict(num_samples=25) if hasattr(module.Args, "num_samples") else {}))
    assert 3e9 < sum(run_bookkeeping.memory_needed(args, 376, 17).values()) < 4e9
    run_bookkeeping.check_memory(args, 376, 17)


@pytest.mark.parametrize("script", helpers.RL_SCRIPTS)
def test_a_run_that_fails_at_its_start_leaves_no_folder(tmp_path, monkeypatch, script):
    """--track without a W&B login fails as the Run opens, after the run folder was made: the folder (and `runs/`, new
    here) is removed with the one-line refusal."""

    def no_login(**kwargs):
        raise RuntimeError("api_key not configured (no-tty)")

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=no_login))
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(script)
    with pytest.raises(SystemExit, match="--track: cannot start W&B"):
        helpers.open_run_of(module, module.Args(env_id="PointMass-v0", cuda=False, track=True))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_run_that_fails_before_its_first_step_leaves_no_folder(tmp_path):
    """A failure after the Run made its folder but before the run started (here the replay buffer's allocation, made
    to fail) leaves no empty folder behind when the process exits; a `runs/` it did not make stays."""
    fails = (
        "import replay_buffer, td3_huber\n"
        "def no_memory(*args):\n    raise RuntimeError('cannot allocate the replay buffer')\n"
        "replay_buffer.ReplayBuffer.__init__ = no_memory\n"
        "td3_huber.main(td3_huber.Args(env_id='PointMass-v0', hidden_dim=16, wm_hidden_dim=16, cuda=False))"
    )
    result = subprocess.run(
        [sys.executable, "-c", fails],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 1 and "RuntimeError: cannot allocate the replay buffer" in result.stderr
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "runs" / "kept").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-c", fails],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 1 and [path.name for path in (tmp_path / "runs").iterdir()] == ["kept"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_between_the_run_folder_and_the_first_step_leaves_no_folder(tmp_path, signum):
    """The signal lands just after the Run made the fresh run's folder (networks still to build): one line, exit status
    128 + its number, and neither the run's folder nor runs/ left behind."""
    driver = tmp_path / "driver.py"
    driver.write_text(
        "import os, runpy, signal, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import run_bookkeeping\n"
        "run_bookkeeping.on_stop_signals(run_bookkeeping.stop_while_starting)"
        "  # what a script beside it gets at import\n"
        "opened = run_bookkeeping.Run.__init__\n"
        "def open_then_stop(run, *args, **kwargs):\n"
        "    opened(run, *args, **kwargs)\n"
        "    assert os.path.isdir(run.run_dir)\n"
        f"    os.kill(os.getpid(), {int(signum)})\n"
        "run_bookkeeping.Run.__init__ = open_then_stop\n"
        f"sys.argv = [{str(ROOT / 'td3_huber.py')!r}, *sys.argv[1:]]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, str(driver), *TINY, "--total-timesteps", "300"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    name = signal.Signals(signum).name
    assert result.returncode == 128 + signum
    assert error_lines(result) == [f"td3_huber.py: stopped by {name} while starting; no step was run"], result.stderr
    assert not (tmp_path / "runs").exists()
