"""What CleanRL's users reach for, end to end as a user runs it: --track (W&B, offline), --capture-video (MP4s read
back), --evaluate of a saved policy, and runs that stop or resume badly (damaged checkpoints, another script's
checkpoint, a run folder, a smaller step budget, SIGTERM), the CPU cost note and --help."""

import dataclasses
import importlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import run_bookkeeping

import gymnasium as gym
import helpers
import imageio
import pytest
import torch
from helpers import (
    ROOT,
    error_lines,
    only_run_dir,
    read_scalars,
    read_summary,
    read_wandb_run,
    run_script,
    run_script_in_process,
)

import td3_huber

SCRIPTS = [f"{name}.py" for name in helpers.RL_SCRIPTS]
TINY = [
    *(
        "--env-id PointMass-v0 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --batch-size 16 "
        "--updates-per-step 1 --eval-episodes 2 --contraction-frequency 0"
    ).split()
]


def train(cwd: Path, *flags: str, script: str = "td3_huber.py", env: dict | None = None) -> Path:
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *TINY, *flags],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return only_run_dir(cwd)


def video_frames(path: Path) -> tuple[int, tuple[int, ...]]:
    """(frame count, frame shape) of an MP4, decoded with ffmpeg."""
    reader = imageio.get_reader(path)
    try:
        return reader.count_frames(), reader.get_data(0).shape
    finally:
        reader.close()


@pytest.mark.slow
def test_track_writes_an_offline_wandb_run_with_the_eval_curve_and_videos(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    run_dir = train(
        tmp_path, "--total-timesteps", "300", "--eval-frequency", "150", "--track", "--capture-video", env=env
    )
    (run_file,) = (tmp_path / "runs" / "wandb").glob(f"offline-run-*-{run_dir.name}/run-{run_dir.name}.wandb")
    history, config = read_wandb_run(run_file)
    evals = [(row["global_step"], row["eval/episodic_return"]) for row in history if "eval/episodic_return" in row]
    summary = read_summary(run_dir)
    assert evals == list(zip(summary["eval_steps"], summary["eval_returns"]))
    assert any("losses/qf_loss" in row for row in history)
    videos = [row["videos/eval/path"] for row in history if row.get("videos/eval/_type") == "video-file"]
    assert len(videos) == 2 and all((run_file.parent / "files" / video).is_file() for video in videos)
    assert config["env_id"] == "PointMass-v0" and config["track"] is True  # the hyperparameters


@pytest.mark.slow
def test_capture_video_films_the_first_episode_of_every_evaluation(tmp_path):
    run_dir = train(tmp_path, "--total-timesteps", "300", "--eval-frequency", "150", "--capture-video")
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    assert [v.name.split("-episode-")[0] for v in videos] == ["eval-step-150", "eval-step-300"]
    for video in videos:
        frames, shape = video_frames(video)
        assert 2 <= frames <= 26 and shape == (256, 256, 3)  # reset frame + at most 25 steps of the point mass


def mujoco_renders() -> str | None:
    """None if MuJoCo renders headless here, else why not."""
    probe = "import gymnasium as gym; e = gym.make('Hopper-v4', render_mode='rgb_array'); e.reset(seed=0); e.render()"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")},
    )
    return None if result.returncode == 0 else (result.stderr.strip().splitlines() or ["?"])[-1]


@pytest.mark.slow
def test_capture_video_renders_mujoco_headless(tmp_path):
    reason = mujoco_renders()
    if reason is not None:
        pytest.skip(f"MuJoCo cannot render headless on this machine: {reason}")
    flags = [f for f in TINY if f != "PointMass-v0"]
    flags[flags.index("--env-id") + 1 : flags.index("--env-id") + 1] = ["Hopper-v4"]
    result = run_script(
        "td3_huber.py",
        *flags,
        *"--total-timesteps 120 --eval-frequency 120 --eval-episodes 1 --capture-video".split(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (video,) = (only_run_dir(tmp_path) / "videos").glob("*.mp4")
    frames, shape = video_frames(video)
    assert frames >= 2 and shape == (480, 480, 3)


@pytest.mark.slow
def test_evaluate_reproduces_the_final_evaluation_and_refuses_other_models(tmp_path):
    run_dir = train(tmp_path, "--total-timesteps", "250", "--eval-frequency", "250", "--save-model")
    result = run_script(
        "td3_huber.py", "--evaluate", str(run_dir), "--eval-episodes", "2", "--capture-video", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert evaluation["model"].endswith("model.pt") and evaluation["episodes"] == 2
    # the same policy, env, noise settings and evaluation seeds as the run's final evaluation
    assert evaluation["mean_return"] == pytest.approx(read_summary(run_dir)["final_eval_return"])
    assert "+-" in result.stdout and (run_dir / "videos" / "evaluate-episode-0.mp4").is_file()
    for script, flags, message in [
        ("iqn.py", [], "written by td3_huber.py"),
        ("td3_huber.py", ["--env-id", "Hopper-v4"], "a policy for PointMass-v0, not for Hopper-v4"),
        ("td3_huber.py", ["--resume", str(run_dir)], "--evaluate and --resume exclude each other"),
    ]:
        result = run_script_in_process(script, "--evaluate", str(run_dir / "model.pt"), *flags, cwd=tmp_path)
        lines = error_lines(result)
        assert result.returncode == 1 and len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.slow
def test_a_stop_while_evaluating_says_so_and_writes_nothing(tmp_path, monkeypatch):
    """Ctrl-C during --evaluate's episodes: one line that names the evaluation (not "while starting"), exit status 130,
    no evaluation.json."""
    run_dir = train(tmp_path, "--total-timesteps", "250", "--eval-frequency", "250", "--save-model")

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler runs
        raise AssertionError("the handler did not stop the evaluation")

    monkeypatch.setattr(run_bookkeeping, "evaluate", interrupted)
    result = run_script_in_process("td3_huber.py", "--evaluate", str(run_dir), cwd=tmp_path)
    assert result.returncode == 130, result.stderr
    assert error_lines(result) == ["td3_huber.py: stopped by SIGINT while evaluating; evaluation.json not written"]
    assert not (run_dir / "evaluation.json").exists()


@pytest.mark.slow
def test_evaluate_under_noise_flags_given_says_so_and_records_it(tmp_path):
    """--evaluate RUN --obs-noise mult on a run trained without noise evaluates under the noise (one line says so) and
    evaluation.json records both; without noise flags it evaluates under the run's own settings (no line)."""
    run_dir = train(tmp_path, "--total-timesteps", "250", "--eval-frequency", "250", "--save-model")
    noisy = run_script(
        "td3_huber.py", "--evaluate", str(run_dir), "--eval-episodes", "3", "--obs-noise", "mult", cwd=tmp_path
    )
    assert noisy.returncode == 0, noisy.stderr
    assert "evaluating under the noise given: --obs-noise mult (trained: none)" in noisy.stderr
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert evaluation["obs_noise"] == "mult" and evaluation["obs_noise_scale"] == 0.2
    assert evaluation["trained_noise"]["obs_noise"] == "none"
    plain = run_script("td3_huber.py", "--evaluate", str(run_dir), "--eval-episodes", "3", cwd=tmp_path)
    assert plain.returncode == 0 and "evaluating under" not in plain.stderr, plain.stderr
    again = json.loads((run_dir / "evaluation-2.json").read_text())
    assert again["obs_noise"] == "none" and again["trained_noise"] == evaluation["trained_noise"]


def test_resume_names_every_flag_given_that_it_cannot_honour_whatever_its_value(capsys):
    """A flag on the command line is named if the run's value differs, even where the value given is the default
    (`--td-loss huber` on an MSE run, `--dyna` on a --no-dyna run); what resume takes (device, step budget) and flags
    equal to the run's are not; the run keeps its settings."""
    saved = dataclasses.asdict(td3_huber.Args(td_loss="mse", dyna=False, seed=3, hidden_dim=16))
    argv = "--resume x --td-loss huber --dyna --seed 3 --no-cuda --total-timesteps 500".split()
    cli = td3_huber.Args(resume="x", seed=3, cuda=False, total_timesteps=500)  # what tyro makes of argv
    args = run_bookkeeping.resumed_args(cli, saved, argv)
    assert (args.td_loss, args.dyna, args.seed, args.hidden_dim) == ("mse", False, 3, 16)
    assert (args.total_timesteps, args.cuda) == (500, False)
    assert capsys.readouterr().err == (
        "warning: ignored on resume, the run keeps its settings: --td-loss huber (the run's: mse), "
        "--dyna (the run's: --no-dyna)\n"
    )
    run_bookkeeping.resumed_args(cli, saved, "--resume x --no-cuda --total-timesteps 500".split())
    assert capsys.readouterr().err == ""


def test_evaluate_builds_its_env_with_the_noise_given_and_names_the_flags_it_ignores(tmp_path, capsys, monkeypatch):
    """--evaluate MODEL --obs-noise mult --hidden-dim 16 --seed 5 on a run trained without noise at --hidden-dim 8,
    seed 3: the env is built with the multiplicative noise wrapper; the warning names --seed and --hidden-dim (the run's
    actor and evaluation seeds are used), not the noise or episodes; evaluation.json records the noise."""
    import noise_wrappers

    run_args = td3_huber.Args(env_id="PointMass-v0", hidden_dim=8, seed=3)
    actor = td3_huber.Actor(7, 2, 8)  # PointMass-v0: 7 observations, 2 actions
    model = {"script": "td3_huber.py", "args": dataclasses.asdict(run_args), "actor": actor.state_dict()}
    torch.save(model, tmp_path / "model.pt")
    argv = f"--evaluate {tmp_path / 'model.pt'} --obs-noise mult --hidden-dim 16 --seed 5 --eval-episodes 1".split()
    args = td3_huber.Args(evaluate=str(tmp_path / "model.pt"), obs_noise="mult", hidden_dim=16, seed=5, eval_episodes=1)
    built, make_env = [], td3_huber.make_env

    def recorded_make_env(env_args, render_mode=None):
        built.append(make_env(env_args, render_mode))
        return built[-1]

    monkeypatch.setattr(td3_huber, "make_env", recorded_make_env)  # what main() calls
    monkeypatch.setattr(sys, "argv", ["td3_huber.py", *argv])
    td3_huber.main(args)
    env = built[-1]  # the evaluation's
    wrappers = []
    while isinstance(env, gym.Wrapper):
        wrappers.append(type(env))
        env = env.env
    assert noise_wrappers.MultiplicativeObservationNoise in wrappers
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "warning: ignored by --evaluate, which uses the run's: --seed 5 (the run's: 3), --hidden-dim 16 (the run's: 8)"
    )
    assert err[1] == "evaluating under the noise given: --obs-noise mult (trained: none)"
    assert json.loads((tmp_path / "evaluation.json").read_text())["obs_noise"] == "mult"


def test_each_evaluation_has_its_own_json_and_video_names(tmp_path):
    """evaluation.json with videos/evaluate-episode-0.mp4, then -2, -3, ...: a number taken by either is skipped."""
    assert run_bookkeeping.evaluation_outputs(str(tmp_path)) == (str(tmp_path / "evaluation.json"), "evaluate")
    (tmp_path / "evaluation.json").write_text("{}")
    assert run_bookkeeping.evaluation_outputs(str(tmp_path)) == (str(tmp_path / "evaluation-2.json"), "evaluate-2")
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "evaluate-2-episode-0.mp4").write_bytes(b"")  # a video whose JSON was removed
    assert run_bookkeeping.evaluation_outputs(str(tmp_path)) == (str(tmp_path / "evaluation-3.json"), "evaluate-3")


@pytest.mark.parametrize("script", SCRIPTS)
def test_damaged_checkpoints_are_refused_in_one_line(tmp_path, script):
    """Every file once with td3_huber.py (--resume and --evaluate), garbage with the others (the same code in each)."""
    files = {"garbage.pt": random.Random(0).randbytes(2000), "empty.pt": b""}  # fixed bytes: the same file every run
    buffer = tmp_path / "whole.pt"
    torch.save({"script": script, "args": {}, "actor": torch.zeros(3)}, buffer)
    files["truncated.pt"] = buffer.read_bytes()[:300]
    cases = [(name, flag) for name in files for flag in ("--resume", "--evaluate")]
    for name, flag in cases if script == "td3_huber.py" else [("garbage.pt", "--resume")]:
        (tmp_path / name).write_bytes(files[name])
        result = run_script_in_process(script, flag, str(tmp_path / name), cwd=tmp_path)
        lines = error_lines(result)
        assert result.returncode == 1 and len(lines) == 1, result.stderr
        assert f"cannot read '{tmp_path / name}'" in lines[0] and "damaged, empty or truncated" in lines[0]


@pytest.mark.slow
def test_resume_takes_a_run_folder_and_refuses_other_scripts_and_smaller_budgets(tmp_path):
    run_dir = train(tmp_path, "--total-timesteps", "200", "--eval-frequency", "100")
    result = run_script_in_process("dsdpg_mmd_sobolev.py", "--resume", str(run_dir), cwd=tmp_path)
    lines = error_lines(result)
    assert result.returncode == 1 and len(lines) == 1 and "was written by td3_huber.py" in lines[0]
    result = run_script_in_process("td3_huber.py", "--resume", str(run_dir), "--total-timesteps", "150", cwd=tmp_path)
    lines = error_lines(result)
    assert result.returncode == 1 and len(lines) == 1 and "below the checkpoint's step 200" in lines[0]
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["global_step"] == 200  # not rewritten
    result = run_script("td3_huber.py", "--resume", str(run_dir), "--total-timesteps", "300", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert read_summary(run_dir)["eval_steps"] == [100, 200, 300]


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, flags, carried, absent",
    [
        ("td3_huber", "--no-dyna --updates-per-step 1000", ["--no-dyna"], ["--wm-", "--truncation"]),
        (
            "td3_huber",
            "--no-dyna --td-loss mse --obs-noise mult",
            ["--no-dyna", "--td-loss mse", "--obs-noise mult"],
            ["--wm-"],
        ),
        ("td3_huber", "--env-id Walker2d-v4", ["--wm-hidden-dim 64", "--wm-learning-rate 0.001"], ["--no-dyna"]),
        ("mage_huber_sobolev", "--world-model flow", ["--world-model flow", "--wm-hidden-dim 64"], ["--truncation"]),
        ("dsdpg_msmmd_sobolev", "--env-id Walker2d-v4 --obs-noise mult", ["--truncation 5", "--obs-noise mult"], []),
    ],
)
def test_the_cpu_note_suggests_the_same_algorithm_at_the_readmes_cpu_sizes(script, flags, carried, absent):
    """The suggested command keeps the run's algorithm and noise, takes the README's CPU sizes (--truncation 5 where
    the script has it), leaves out what the algorithm refuses, and parses and passes the script's checks as printed."""
    import tyro

    module = importlib.import_module(script)
    args = tyro.cli(module.Args, args=flags.split())
    command = run_bookkeeping.cpu_sized_command(args, f"{script}.py")
    assert command.startswith(
        f"python {script}.py --env-id PointMass-v0 --total-timesteps 15000 --learning-starts 1000 "
    )
    assert "--hidden-dim 64" in command and "--batch-size 64" in command and "--updates-per-step 1 " in command
    assert all(word in command for word in carried) and not any(word in command for word in absent), command
    suggested = tyro.cli(module.Args, args=command.split()[2:])
    module.check_args(suggested)
    assert suggested.updates_per_step == 1 and suggested.hidden_dim == 64


@pytest.mark.slow
def test_sigterm_checkpoints_like_ctrl_c_and_the_cpu_note_names_a_cpu_sized_run(tmp_path):
    command = [
        sys.executable,
        str(ROOT / "td3_huber.py"),
        *TINY,
        *"--total-timesteps 3000000 --eval-frequency 1000000".split(),
    ]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    drawn, shown = "", 0
    while (
        shown < 305 or "\n" not in drawn.partition("note: ")[2]
    ):  # the note, priced at steps 200-300: 3M steps are hours
        character = process.stderr.read(1)
        assert character, drawn  # the run ended before it got there
        drawn += character
        if character == "]":
            shown = int(re.findall(r"(\d+)/3000000 \[", drawn)[-1])
            assert shown < 3000, drawn  # no note by then: a machine this fast prices 3M steps under the hour
    note = "note: " + drawn.partition("note: ")[2].partition("\n")[0]
    assert re.match(
        r"note: a learning step takes \d+\.\d\d s on this CPU \(--updates-per-step 1\), so the 29997\d\d steps left",
        note,
    )
    assert "python td3_huber.py --env-id PointMass-v0 --total-timesteps 15000" in note, note
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    lines = error_lines(stderr)
    assert process.returncode == 1 and len(lines) == 1 and "interrupted at step" in lines[0], stderr
    run_dir = only_run_dir(tmp_path)
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    step = checkpoint["global_step"]
    resume = f"resume with: python {ROOT / 'td3_huber.py'} --resume {run_dir / 'checkpoint.pt'}"  # both absolute
    assert 305 <= step and lines[0] == f"td3_huber.py: error: interrupted at step {step}; {resume}"
    assert checkpoint["replay_buffer"]["size"] == step  # whole steps: the signal's step ended before the checkpoint
    result = run_script("td3_huber.py", "--resume", str(run_dir), "--total-timesteps", str(step + 20), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert read_summary(run_dir)["eval_steps"][-1] == step + 20
    assert max(s for s, _ in read_scalars(run_dir)["losses/qf_loss"]) >= 100


@pytest.mark.slow
@pytest.mark.parametrize("script", ["td3_huber.py", "dsdpg_msmmd_sobolev.py"])
def test_help_describes_the_script_and_prints_each_default_once(tmp_path, script):
    result = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert result.returncode == 0
    first_line = (ROOT / script).read_text().split('"""')[1].splitlines()[0]
    assert " ".join(first_line.split()[:6]) in " ".join(result.stdout.split())
    for flag in ("--wm-hidden-dim", "--dyn-noise-std", "--track", "--capture-video", "--evaluate", "--dyna-reward"):
        entry = result.stdout.split(flag, 1)[1].split("\n│ --", 1)[0]
        assert entry.count("(default:") == 1, (flag, entry)


def test_resume_keeps_the_runs_execution_flags_unless_given_and_ignores_flags_without_effect(tmp_path, capsys):
    """--compile, --cudagraphs and --matmul-precision are the checkpoint's unless given with --resume (a run started in
    float32 goes on in float32); a checkpoint from before --matmul-precision computed in full float32; a flag that
    changes nothing is ignored on resume with a warning, not refused; tyro's underscore spelling counts as given."""
    saved = dataclasses.asdict(td3_huber.Args(compile=True, cudagraphs=False, matmul_precision="highest"))
    cli = td3_huber.Args(resume="x")
    args = run_bookkeeping.resumed_args(cli, saved, ["--resume", "x"])
    assert (args.compile, args.cudagraphs, args.matmul_precision) == (True, False, "highest")
    given = td3_huber.Args(resume="x", compile=False, matmul_precision="high")
    args = run_bookkeeping.resumed_args(given, saved, "--resume x --no-compile --matmul_precision high".split())
    assert (args.compile, args.cudagraphs, args.matmul_precision) == (False, False, "high")
    old = {name: value for name, value in saved.items() if name != "matmul_precision"}
    assert run_bookkeeping.resumed_args(cli, old, ["--resume", "x"]).matmul_precision == "highest"
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    without_effect = td3_huber.Args(resume=str(tmp_path), obs_noise_scale=0.3)  # no --obs-noise mult on the line
    td3_huber.check_args(without_effect)  # not refused: on resume it is named as ignored (resumed_args) instead
    with pytest.raises(ValueError, match="--obs-noise-scale changes nothing"):
        td3_huber.check_args(td3_huber.Args(obs_noise_scale=0.3))  # a fresh run refuses it


def test_a_resumed_optimizer_keeps_the_capturable_setting_it_was_built_with():
    """A checkpoint of a run with CUDA graphs (capturable RAdam) resumed where the run trains eagerly (a CPU, or
    --no-cudagraphs), and the reverse's state layout: the optimizer keeps its own setting and steps (load_state_dict
    alone would take the checkpoint's capturable=True, which fails its first step on the CPU)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    built = torch.optim.RAdam(net.parameters(), lr=1e-3, foreach=True)
    net(torch.randn(4, 3)).sum().backward()
    built.step()
    saved = built.state_dict()
    for group in saved["param_groups"]:
        group["capturable"] = True  # what a graphed GPU run saves
    resumed = torch.optim.RAdam(net.parameters(), lr=1e-3, foreach=True)
    setting = [group["capturable"] for group in resumed.param_groups]
    resumed.load_state_dict(saved)
    assert all(group["capturable"] for group in resumed.param_groups)  # what load_state_dict alone leaves
    run_bookkeeping.keep_capturable(resumed, setting)
    assert not any(group["capturable"] for group in resumed.param_groups)
    assert all(state["step"].device.type == "cpu" for state in resumed.state.values())
    net(torch.randn(4, 3)).sum().backward()
    resumed.step()  # the first step after the resume runs
    assert all(state["step"].item() == 2 for state in resumed.state.values())


def test_evaluate_reads_a_model_saved_before_later_flags_existed(tmp_path):
    """A model.pt whose args lack --dyn-noise-std and --matmul-precision (older scripts): the defaults stand in for the
    one, full float32 (what such a run computed in) for the other; no KeyError."""
    run_args = dataclasses.asdict(td3_huber.Args(env_id="PointMass-v0", hidden_dim=8))
    del run_args["dyn_noise_std"], run_args["matmul_precision"]
    model = {"script": "td3_huber.py", "args": run_args, "actor": td3_huber.Actor(7, 2, 8).state_dict()}
    torch.save(model, tmp_path / "model.pt")
    args = td3_huber.Args(evaluate=str(tmp_path))
    run_args, saved = run_bookkeeping.read_saved_model(args, "td3_huber.py", ["--evaluate", str(tmp_path)])
    assert run_args.dyn_noise_std is None and run_args.matmul_precision == "highest" and "actor" in saved


def test_a_paper_id_with_capture_video_is_refused_for_its_id(tmp_path):
    """--env-id Hopper-v2 --capture-video: the v2 id's own refusal (mujoco-py), not a rendering error."""
    result = run_script_in_process("td3_huber.py", "--env-id", "Hopper-v2", "--capture-video", cwd=tmp_path)
    lines = error_lines(result)
    assert result.returncode == 1 and len(lines) == 1 and "Hopper-v2 needs mujoco-py" in lines[0], result.stderr
