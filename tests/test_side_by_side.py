"""Runs side by side (issue 45): two runs started in the same second get a folder each."""

import os
import signal
import time

from helpers import read_summary

import run_bookkeeping
import td3_huber


def test_two_runs_started_in_the_same_second_get_a_folder_each(tmp_path, monkeypatch, capsys):
    """The same flags, CleanRL's run name read from a clock that stands still while each run opens: the second run makes
    runs/<name>__2 instead of writing into the first's folder, and each folder holds its own summary, checkpoint and
    TensorBoard events, and is the path its run prints."""
    monkeypatch.chdir(tmp_path)
    open_run, frozen, sigterm = run_bookkeeping.open_run, time.time(), signal.getsignal(signal.SIGTERM)

    def open_run_in_the_same_second(args, script):
        with monkeypatch.context() as clock:
            clock.setattr(time, "time", lambda: frozen)
            return open_run(args, script)

    monkeypatch.setattr(run_bookkeeping, "open_run", open_run_in_the_same_second)
    flags = dict(env_id="PointMass-v0", dyna=False, total_timesteps=150, learning_starts=100, hidden_dim=16, batch_size=16)
    try:
        for _ in range(2):
            td3_huber.main(td3_huber.Args(**flags, eval_episodes=1, contraction_frequency=0, cuda=False))
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # Run.start makes SIGTERM a KeyboardInterrupt
    name = f"PointMass-v0__td3_huber__1__{int(frozen)}"
    folders = sorted((tmp_path / "runs").iterdir())
    assert [folder.name for folder in folders] == [name, f"{name}__2"]
    for folder in folders:
        assert read_summary(folder)["eval_steps"] == [150] and (folder / "checkpoint.pt").is_file()
        assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    printed = [line.rsplit("outputs in ", 1)[1] for line in capsys.readouterr().out.splitlines() if "outputs in " in line]
    assert printed == [os.path.join("runs", folder.name) for folder in folders]
