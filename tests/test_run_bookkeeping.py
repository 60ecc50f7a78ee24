"""The bookkeeping every RL script shares, on the real `Run` of a tiny td3_huber run on PointMass-v0 (opened with
`helpers.open_run_of` and started with `Run.start` as main() does, with no networks): the NaN guard stops the run at
one non-finite loss, including at the last step; every evaluation resets its episodes with distinct seeds, the same
set each time."""

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import run_bookkeeping

import gymnasium as gym
import helpers
import pytest
import torch

import td3_huber


@pytest.fixture
def started_run(tmp_path, monkeypatch):
    """A function flags -> the started `Run` of td3_huber on PointMass-v0 in tmp_path (no networks: `stateful` is
    empty); its envs and writer are closed afterwards (conftest puts back the signal handlers Run.start installs)."""
    monkeypatch.chdir(tmp_path)
    runs = []

    def start(**flags) -> run_bookkeeping.Run:
        settings = dict(env_id="PointMass-v0", cuda=False, seed=3, total_timesteps=250, learning_starts=10)
        args = td3_huber.Args(**{**settings, **flags})
        run = helpers.open_run_of(td3_huber, args)
        runs.append(run)
        assert run.start({}, torch.device("cpu")) == 0
        run.progress_bar(range(0, args.total_timesteps))
        return run

    yield start
    for run in runs:
        for closing in (run.progress, run.env, run.eval_env, run.writer):
            closing.close()


# STOPPING: CTRL-C, SIGTERM OR SIGHUP
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_during_a_step_ends_the_loop_after_that_step_and_a_second_stop_at_once(started_run, signum):
    """A signal during step 3 lets step 3 finish, then the loop raises KeyboardInterrupt with 4 steps done (the
    checkpoint's step); a second signal during a step raises it in the step, whose step is then not done."""
    for stops in (1, 2):
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as in a terminal
        run = started_run()
        assert signal.getsignal(signum) == run.stop_after_the_step  # this run's, not the one before's
        run.progress.close()
        done = []
        with pytest.raises(KeyboardInterrupt):
            for step in run.progress_bar(range(0, 250)):
                for _ in range(stops if step == 3 else 0):
                    os.kill(os.getpid(), signum)
                    time.sleep(0.01)  # the handler runs
                done.append(step)
        assert done == ([0, 1, 2, 3] if stops == 1 else [0, 1, 2])
        assert run.next_step == len(done) and not run.looping


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_an_ignored_stop_signal_stays_ignored(started_run, signum):
    """A background job of a non-interactive shell starts with SIGINT ignored, one under nohup with SIGHUP ignored: the
    run does not take it back, and handles the others."""
    signal.signal(signum, signal.SIG_IGN)
    run = started_run()
    assert signal.getsignal(signum) is signal.SIG_IGN
    assert all(signal.getsignal(s) == run.stop_after_the_step for s in run_bookkeeping.STOP_SIGNALS if s != signum)


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_while_starting_is_one_line_and_exit_status_128_plus_the_signal(signum, status, capsys, monkeypatch):
    """The handler a script has from its import of run_bookkeeping on (before torch's) to its loop."""
    monkeypatch.setattr("sys.argv", ["/somewhere/td3_huber.py", "--seed", "2"])
    with pytest.raises(SystemExit) as stopped:
        run_bookkeeping.stop_while_starting(signum, None)
    assert stopped.value.code == status
    name = signal.Signals(signum).name
    assert capsys.readouterr().err == f"td3_huber.py: stopped by {name} while starting; no step was run\n"


def test_the_stop_handler_is_installed_at_import_only_for_a_script_beside_run_bookkeeping(tmp_path):
    """`python td3_huber.py` imports run_bookkeeping (first of the project's modules) with the handler for every stop
    signal but ignored ones; a program elsewhere that imports it (a tool in benchmarks/, pytest) keeps its own."""
    probe = (
        "import signal; import run_bookkeeping as rb\n"
        "print([signal.getsignal(s) == rb.stop_while_starting for s in rb.STOP_SIGNALS])"
    )
    no_file = subprocess.run(  # `python -c` from the repository (a REPL, a notebook): no script, no handler
        [sys.executable, "-c", probe],
        cwd=helpers.ROOT,
        env={**os.environ, "PYTHONPATH": str(helpers.ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_file.stdout.strip() == "[False, False, False]", no_file.stderr
    for where, expected in ((helpers.ROOT, "[False, True, True]"), (tmp_path, "[False, False, False]")):
        script = Path(where) / f"probe_stop_handler_{os.getpid()}.py"
        script.write_text(probe)
        try:
            result = subprocess.run(  # SIGINT ignored as a background job's: it stays so
                [sys.executable, str(script)],
                env={**os.environ, "PYTHONPATH": str(helpers.ROOT)},
                capture_output=True,
                text=True,
                timeout=60,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
            )
        finally:
            script.unlink()
        assert result.stdout.strip() == expected, result.stderr


# THE NAN GUARD
def losses_with(bad_name: str | None, bad_value: float) -> dict[str, torch.Tensor]:
    """The three losses a training step records, all finite but `bad_name`'s (None: all finite)."""
    losses = dict(world_model_loss=0.7, qf_loss=1.5, actor_loss=-2.0)
    return {name: torch.tensor(bad_value if name == bad_name else value) for name, value in losses.items()}


def assert_stops(run: run_bookkeeping.Run, losses: dict[str, torch.Tensor], step: int) -> None:
    with pytest.raises(SystemExit) as stopped:
        run.check_finite(losses, step)
    assert f"non-finite loss at step {step}" in str(stopped.value)
    assert (Path(run.run_dir) / "nonfinite_checkpoint.pt").is_file()


@pytest.mark.parametrize("bad_value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("bad_name", ["world_model_loss", "qf_loss", "actor_loss"])
def test_one_non_finite_loss_among_finite_ones_stops_the_run(started_run, bad_name, bad_value):
    """At a checked step (a multiple of 100), the losses all finite pass; the same losses with one of the three made
    non-finite (NaN, +inf or -inf), the others finite, stop the run in one line and save nonfinite_checkpoint.pt."""
    run = started_run()
    run.check_finite(losses_with(None, 0.0), 200)
    assert not (Path(run.run_dir) / "nonfinite_checkpoint.pt").exists()
    assert_stops(run, losses_with(bad_name, bad_value), 200)


@pytest.mark.parametrize("total_timesteps", [250, 137])
def test_a_non_finite_loss_at_the_last_step_stops_the_run(started_run, total_timesteps):
    """The last step (total_timesteps - 1: 249 of 250 steps, 136 of 137, neither a multiple of 100, the other steps the
    guard checks) is checked: its losses all finite pass, one NaN among them stops the run."""
    run = started_run(total_timesteps=total_timesteps)
    last = total_timesteps - 1
    run.check_finite(losses_with(None, 0.0), last)
    assert_stops(run, losses_with("qf_loss", math.nan), last)


# THE EVALUATION
class ResetRecorder(gym.Wrapper):
    """Records the seed and the first observation of every reset."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.seeds, self.first_obs = [], []

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.seeds.append(seed)
        self.first_obs.append(tuple(obs.tolist()))
        return obs, info


def test_each_evaluation_resets_its_episodes_with_distinct_seeds_the_same_at_every_evaluation(started_run):
    """Run.evaluate_if_due at the two due steps of a run evaluating every 100 steps with 4 episodes: each evaluation
    resets its 4 episodes with 4 distinct integer seeds (so 4 distinct start states), and the second evaluation uses the
    same seeds, in the same order, and starts from the same states as the first."""
    run = started_run(eval_frequency=100, eval_episodes=4)
    run.eval_env = recorder = ResetRecorder(run.eval_env)
    torch.manual_seed(0)
    actor = td3_huber.Actor(recorder.observation_space.shape[0], recorder.action_space.shape[0], 8)
    for step in range(200):
        run.evaluate_if_due(actor, step)
    assert run.eval_steps == [100, 200]
    first, second = recorder.seeds[:4], recorder.seeds[4:]
    assert len(recorder.seeds) == 8 and all(isinstance(seed, int) for seed in recorder.seeds), recorder.seeds
    assert len(set(first)) == 4, first  # distinct seeds within an evaluation
    assert len(set(recorder.first_obs[:4])) == 4, recorder.first_obs[:4]  # so distinct start states
    assert second == first, (first, second)  # the same episodes at every evaluation
    assert recorder.first_obs[4:] == recorder.first_obs[:4]


# THE CPU COST NOTE
@pytest.mark.parametrize("total_timesteps, noted", [(100_000, True), (2_000, False)])
def test_the_cpu_note_is_priced_from_the_runs_own_learning_steps(
    started_run, monkeypatch, capsys, total_timesteps, noted
):
    """The first 100 steps logged from 100 steps after learning starts (10), steps 200 to 300, timed at 0.05 s each on a
    clock the test moves: 1 700 steps left at that rate are under an hour (no note), 99 700 are ~1.4 h (one note, with
    the rate, the run's updates per step, the steps left, the hours and a CPU-sized command)."""
    run = started_run(total_timesteps=total_timesteps)
    clock = iter([1000.0, 1000.0 + 100 * 0.05])
    monkeypatch.setattr(run_bookkeeping.time, "perf_counter", lambda: next(clock))
    for step in range(0, 1000, 100):
        run.log_speed(step)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    left = total_timesteps - 300
    expected = (
        f"note: a learning step takes 0.05 s on this CPU (--updates-per-step 10), so the {left} steps left will take"
    )
    assert notes == ([notes[0]] if noted else []) and (not noted or notes[0].startswith(expected + " about 1 h")), notes
    assert not noted or "python td3_huber.py --env-id PointMass-v0 --total-timesteps 15000" in notes[0]


def test_no_cpu_note_on_a_gpu(started_run, monkeypatch, capsys):
    """The note prices a CPU run only: a run started on another device (here said to be CUDA) never times its steps."""
    run = started_run(total_timesteps=10**7)
    run.writer.close(), run.progress.close()
    run.start({}, torch.device("cuda"))  # started again, on a device that is not a CPU
    run.progress_bar(range(0, run.args.total_timesteps))
    monkeypatch.setattr(run_bookkeeping.time, "perf_counter", lambda: pytest.fail("timed"))
    for step in range(0, 1000, 100):
        run.log_speed(step)
    assert "note:" not in capsys.readouterr().err


def test_logged_scalars_reads_every_tag_in_one_pass_over_a_resumed_runs_files(tmp_path, monkeypatch):
    """run_bookkeeping.logged_scalars: several tags over a resumed run's event files, each file loaded once, the later
    file winning a step it repeats; a tag the run never logged maps to {}."""
    from tensorboard.backend.event_processing import event_accumulator
    from torch.utils.tensorboard import SummaryWriter

    for part in ([("a", 1, 1.0), ("b", 1, 10.0), ("a", 2, 2.0)], [("a", 2, 3.0), ("b", 3, 30.0)]):  # resumed at 2
        with SummaryWriter(str(tmp_path)) as writer:
            for tag, step, value in part:
                writer.add_scalar(tag, value, step)
        time.sleep(0.05)  # distinct modification times, and SummaryWriter's file names carry the second
    loaded, reload = [], event_accumulator.EventAccumulator.Reload
    monkeypatch.setattr(
        event_accumulator.EventAccumulator, "Reload", lambda self: loaded.append(self.path) or reload(self)
    )
    values = run_bookkeeping.logged_scalars(str(tmp_path), "a", "b", "c")
    assert values == {"a": {1: 1.0, 2: 3.0}, "b": {1: 10.0, 3: 30.0}, "c": {}}
    assert len(loaded) == len(set(loaded)) == 2


# THE RUN FOLDER
def test_a_run_folder_is_made_exclusively(tmp_path):
    """Two runs started in the same second ask for the same folder: the second gets name__2, a third name__3; each is
    new (never one another run made), and `runs/` is reported as created only by the run that made it."""
    name = str(tmp_path / "runs" / "E__td3_huber__1__1700000000")
    first, created_first = run_bookkeeping.make_run_folder(name)
    second, created_second = run_bookkeeping.make_run_folder(name)
    third, _ = run_bookkeeping.make_run_folder(name)
    assert (first, second, third) == (name, f"{name}__2", f"{name}__3")
    assert created_first == [name, str(tmp_path / "runs")] and created_second == [f"{name}__2"]
    assert all(os.path.isdir(folder) for folder in (first, second, third))
