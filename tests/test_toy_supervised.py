"""Tests of toy_supervised_sobolev.py: data, kernels, evaluation metrics and a short end-to-end run."""

import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import error_lines, run_script_in_process

ROOT = Path(__file__).resolve().parents[1]

import toy_supervised_sobolev as tss  # noqa: E402

SCRIPT = ROOT / "toy_supervised_sobolev.py"


def tiny_args(out_dir: Path, **overrides) -> tss.Args:
    settings = dict(
        out_dir=str(out_dir),
        cuda=False,
        num_steps=40,
        eval_frequency=20,
        batch_size=32,
        hidden_dim=32,
        eval_points=16,
        eval_samples=8,
        num_points=(8,),
    )
    settings.update(overrides)
    return tss.Args(**settings)


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------
def test_sinusoid_is_the_hand_formula():
    x = torch.tensor([0.0, 0.3, 1.7, 4.9])
    a = torch.tensor([0.0, 1.0, 3.0, 4.0])
    out = tss.sinusoid(x, a)
    for i in range(4):
        xi, ai = x[i].item(), a[i].item()
        expected = [ai * math.sin(xi), ai * math.cos(xi), -ai * math.sin(xi)]
        assert out[i].tolist() == pytest.approx(expected, abs=1e-6)


def test_sampled_pairs_are_exact_outputs_and_gradients():
    generator = torch.Generator().manual_seed(0)
    x, targets = tss.sample_pairs(2000, 4, generator)
    assert x.shape == (2000,) and targets.shape == (2000, 4, 2)
    assert x.min() >= 0 and x.max() <= 5
    y, dy = targets[..., 0], targets[..., 1]
    # y = a sin x and dy = a cos x  =>  a = y sin x + dy cos x
    a = y * torch.sin(x)[:, None] + dy * torch.cos(x)[:, None]
    a_int = a.round()
    assert torch.allclose(a, a_int, atol=1e-5)
    assert set(a_int.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    counts = torch.stack([(a_int == k).float().mean() for k in range(5)])
    assert torch.allclose(counts, torch.full((5,), 0.2), atol=0.02)
    assert torch.allclose(y, a_int * torch.sin(x)[:, None], atol=1e-6)
    assert torch.allclose(dy, a_int * torch.cos(x)[:, None], atol=1e-6)


def test_limited_dataset_is_fixed_per_seed_and_size():
    x1, t1 = tss.limited_dataset(seed=3, num_points=16, targets_per_x=4)
    x2, t2 = tss.limited_dataset(seed=3, num_points=16, targets_per_x=4)
    x3, _ = tss.limited_dataset(seed=4, num_points=16, targets_per_x=4)
    assert torch.equal(x1, x2) and torch.equal(t1, t2)
    assert not torch.equal(x1, x3)


def test_model_derivatives_are_per_sample():
    torch.manual_seed(0)
    model = tss.MLP(noise_dim=3, hidden_dim=16).double()
    x = torch.rand(5, 4, dtype=torch.float64) * 5  # (B, M)
    noise = torch.randn(5, 4, 3, dtype=torch.float64)
    out = tss.sobolev_outputs(model, x, noise, order=2, create_graph=False)
    assert out.shape == (5, 4, 3)
    h = 1e-4
    with torch.no_grad():
        f_plus, f_0, f_minus = model(x + h, noise), model(x, noise), model(x - h, noise)
    assert torch.allclose(out[..., 0], f_0)
    assert torch.allclose(out[..., 1], (f_plus - f_minus) / (2 * h), atol=1e-6)
    assert torch.allclose(out[..., 2], (f_plus - 2 * f_0 + f_minus) / h**2, atol=1e-3)


# ---------------------------------------------------------------------------------------------------------------
# kernels and MMD
# ---------------------------------------------------------------------------------------------------------------
def loop_mmd2(xs, ys, kernel):
    k_xx = sum(kernel(a, b) for a in xs for b in xs) / len(xs) ** 2
    k_yy = sum(kernel(a, b) for a in ys for b in ys) / len(ys) ** 2
    k_xy = sum(kernel(a, b) for a in xs for b in ys) / (len(xs) * len(ys))
    return k_xx + k_yy - 2 * k_xy


def loop_rbf_mixture(a, b):
    d2 = sum((u - v) ** 2 for u, v in zip(a, b))
    return sum(math.exp(-d2 / (2 * s**2)) for s in (0.01, 0.05, 0.1, 0.5, 1.0, 10.0, 100.0))


def loop_rational_quadratic(a, b):
    d2 = sum((u - v) ** 2 for u, v in zip(a, b))
    return (1 + d2 / 2) ** -1


@pytest.mark.parametrize(
    "kernel, loop_kernel",
    [(tss.rbf_mixture_kernel, loop_rbf_mixture), (tss.rational_quadratic_kernel, loop_rational_quadratic)],
)
def test_kernels_and_mmd_match_double_loop(kernel, loop_kernel):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 2, dtype=torch.float64) * 0.3  # (batch, n, d)
    y = torch.randn(2, 4, 2, dtype=torch.float64) * 0.3 + 0.1
    gram = kernel(x, y)
    assert gram.shape == (2, 3, 4)
    mmd = tss.mmd2(x, y, kernel)
    assert mmd.shape == (2,)
    for b in range(2):
        xs, ys = x[b].tolist(), y[b].tolist()
        for i in range(3):
            for j in range(4):
                assert gram[b, i, j].item() == pytest.approx(loop_kernel(xs[i], ys[j]), rel=1e-12)
        assert mmd[b].item() == pytest.approx(loop_mmd2(xs, ys, loop_kernel), rel=1e-10, abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# evaluation metrics
# ---------------------------------------------------------------------------------------------------------------
def test_eval_mmd_separates_truth_from_the_mean_collapsed_prediction():
    generator = torch.Generator().manual_seed(0)
    x = torch.linspace(0, 5, 128)
    shape = (128, 256)
    truth = tss.sinusoid(x[:, None], tss.sample_amplitudes(shape, generator))  # (P, S, 3)
    other_truth = tss.sinusoid(x[:, None], tss.sample_amplitudes(shape, generator))
    collapsed = tss.sinusoid(x[:, None], torch.full(shape, 2.0))  # y = 2 sin x, dy/dx = 2 cos x

    truth_vs_truth = tss.sobolev_metrics(other_truth, x, truth)
    collapsed_vs_truth = tss.sobolev_metrics(collapsed, x, truth)
    assert collapsed_vs_truth["eval_mmd"] > 0.2
    assert truth_vs_truth["eval_mmd"] < 0.05 * collapsed_vs_truth["eval_mmd"]
    # the collapsed prediction has the exact mean gradient; the truth's sample mean is off by ~ 1 / S
    assert collapsed_vs_truth["grad_mean_l2"] < 1e-10
    assert truth_vs_truth["grad_mean_l2"] < 0.02
    # mean |d2y/dx2| of the truth: E[a] * mean |sin x| over the grid
    expected = 2 * torch.sin(x).abs().mean().item()
    assert truth_vs_truth["second_derivative_norm"] == pytest.approx(expected, rel=0.05)


# ---------------------------------------------------------------------------------------------------------------
# end to end
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_short_run_writes_summary_figures_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = tiny_args(tmp_path, num_workers=1)
    summary = tss.main(args)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert set(on_disk["results"]) == {"unlimited", "n8"}
    for regime in ("unlimited", "n8"):
        for variant in tss.ALL_VARIANTS:
            metrics = on_disk["results"][regime][variant]
            for key in ("eval_mmd", "grad_mean_l2", "second_derivative_norm"):
                assert math.isfinite(metrics[key])
                assert metrics[key] == summary["results"][regime][variant][key]
            assert metrics["history"]["step"] == [0, 20, 40]
    assert set(on_disk["truth_reference"]) == {"eval_mmd", "grad_mean_l2", "second_derivative_norm"}
    for name in ("samples_unlimited", "samples_n8", "curves_unlimited", "curves_n8", "dataset_size"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000

    events = EventAccumulator(str(tmp_path / "n8" / "mmd_sobolev"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    for tag in ("eval/mmd", "eval/grad_mean_l2", "eval/second_derivative_norm", "losses/loss"):
        assert tag in scalars
    mmd_events = events.Scalars("eval/mmd")
    assert [e.step for e in mmd_events] == [0, 20, 40]
    assert mmd_events[-1].value == pytest.approx(on_disk["results"]["n8"]["mmd_sobolev"]["eval_mmd"], rel=1e-6)

    # same seed, two worker processes: the same numbers
    parallel = tss.main(tiny_args(tmp_path / "parallel", num_workers=2, unlimited=False))
    for variant in tss.ALL_VARIANTS:
        for key in ("eval_mmd", "grad_mean_l2", "second_derivative_norm"):
            assert parallel["results"]["n8"][variant][key] == on_disk["results"]["n8"][variant][key]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_steps=0), "--num-steps"),
        (dict(eval_frequency=-5), "--eval-frequency"),
        (dict(input_noise=-0.1), "--input-noise"),
        (dict(grad_weight=-1.0), "--grad-weight"),
        (dict(num_points=(16, -4)), "--num-points"),
        (dict(num_points=(16, 16)), "--num-points"),
        (dict(variants=("mmd", "mmd")), "--variants"),
        (dict(variants=()), "--variants"),
        (dict(unlimited=False, num_points=()), "nothing to run"),
        (dict(betas=(0.5, 1.0)), "--betas"),
        (dict(betas=(0.5, math.nan)), "--betas must be finite and in [0, 1) (got 0.5 nan)"),
        (dict(learning_rate=math.nan), "--learning-rate must be finite and > 0 (got nan)"),
        (dict(learning_rate=math.inf), "--learning-rate must be finite and > 0 (got inf)"),
        (dict(grad_weight=math.inf), "--grad-weight must be finite and >= 0 (got inf)"),
        (dict(input_noise=math.nan), "--input-noise must be finite and >= 0 (got nan)"),
        (dict(seed=-1), "--seed must be >= 0 (got -1)"),
    ],
)
def test_bad_values_are_reported(overrides, message):
    problem = tss.check_args(tss.Args(**overrides))
    assert problem is not None and message in problem
    assert tss.check_args(tss.Args()) is None


def test_bad_flag_value_exits_with_one_line(tmp_path):
    result = run_script_in_process(SCRIPT.name, "--input-noise", "-0.1", cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--input-noise" in lines[0]


def test_sizes_the_machine_cannot_hold_are_refused_before_any_work(tmp_path):
    """--hidden-dim 1e8 (a 1e16-weight layer): one line naming the part and the machine's memory, no output folder."""
    out_dir = tmp_path / "D"
    flags = ["--num-steps", "50", "--num-workers", "1", "--hidden-dim", "100000000", "--out-dir", str(out_dir)]
    result = run_script_in_process(SCRIPT.name, *flags, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "the weights would need ~1.6e+08 GB over 1 worker(s), more than the" in lines[0]
    assert not out_dir.exists()
    assert tss.memory_problem(tss.Args()) is None  # the paper's sizes fit


def test_a_data_set_the_machine_cannot_hold_is_refused_before_any_training(tmp_path):
    """--num-points 1e12 (36 TB of pairs at 4 targets each): one line naming the data set, no output folder, where it
    used to train the unlimited regime first and then fail to allocate."""
    out_dir = tmp_path / "D"
    flags = ["--num-points", "16", "1000000000000", "--num-workers", "1", "--out-dir", str(out_dir)]
    result = run_script_in_process(SCRIPT.name, *flags, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "the data set of --num-points 1000000000000 would need ~3.6e+04 GB over 1 worker(s)" in lines[0]
    assert not out_dir.exists()


def test_workers_are_capped_at_the_jobs_and_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # the cores this process may use
    assert tss.worker_count(tss.Args(num_workers=100), 12) == 2
    assert tss.worker_count(tss.Args(num_workers=100), 1) == 1
    assert tss.worker_count(tss.Args(num_workers=1), 12) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))
    assert tss.worker_count(tss.Args(num_workers=16), 12) == 12


def test_unknown_variant_is_rejected(tmp_path):
    result = run_script_in_process(SCRIPT.name, "--variants", "mmd_sobolev", "gan", cwd=tmp_path)
    assert result.returncode != 0
    assert "gan" in result.stderr and "Traceback" not in result.stderr


SMALLEST = "--no-cuda --batch-size 4 --hidden-dim 4 --eval-points 2 --eval-samples 2 --num-points 4".split()


def test_non_finite_float_flags_exit_with_one_line(tmp_path):
    cases = [("--learning-rate", "nan"), ("--learning-rate", "inf")]  # the other flags: test_bad_values_are_reported
    for case in cases:
        result = run_script_in_process(SCRIPT.name, *case, cwd=tmp_path)
        stdout, stderr = result.stdout, result.stderr
        lines = stderr.strip().splitlines()
        assert result.returncode != 0 and stdout == "" and len(lines) == 1, stderr
        assert lines[0] == f"toy_supervised_sobolev.py: error: {case[0]} must be " + lines[0].split(" must be ")[1]
        assert lines[0].endswith(f"(got {' '.join(case[1:])})") and "Traceback" not in stderr


def test_unwritable_output_folder_is_one_line_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out_dir = blocker / "out"  # cannot be created, even by root
    with pytest.raises(SystemExit) as exit_info:
        tss.main(tiny_args(out_dir, num_workers=1))
    assert exit_info.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"toy_supervised_sobolev.py: error: cannot write to the output folder {out_dir} (Not a directory)"]


def test_an_output_folder_that_holds_a_run_is_refused_and_left_intact(tmp_path, capsys):
    """A second run into the first one's --out-dir would overwrite its summary.json and mix its TensorBoard curves."""
    out_dir = tmp_path / "out"
    (out_dir / "unlimited" / "mmd").mkdir(parents=True)
    (out_dir / "summary.json").write_text('{"first": "run"}')
    with pytest.raises(SystemExit) as exit_info:
        tss.main(tiny_args(out_dir, num_workers=1, seed=7))
    assert exit_info.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        f"toy_supervised_sobolev.py: error: --out-dir {out_dir} is not empty (an earlier run's outputs?): give a new "
        "folder, or empty it first"
    ]
    assert (out_dir / "summary.json").read_text() == '{"first": "run"}'
    assert sorted(p.name for p in out_dir.rglob("*")) == ["mmd", "summary.json", "unlimited"]


def start_and_wait_for_training(command: list[str], cwd: Path, **popen_kwargs) -> subprocess.Popen:
    """Start the script and return once its progress bar shows trained steps (read from its stderr as it comes)."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_kwargs)
    seen, deadline = b"", time.monotonic() + 180  # three processes import torch: slow on a loaded machine
    while not re.search(rb"\| *[1-9][0-9]*/[0-9]+ \[", seen):
        assert time.monotonic() < deadline and process.poll() is None, seen.decode()
        if select.select([process.stderr], [], [], 1.0)[0]:  # a silent child fails at the deadline, never hangs
            seen += os.read(process.stderr.fileno(), 4096)
    process.already_read = seen.decode()
    return process


def finish(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=60)
    return process.returncode, process.already_read + stderr.decode()


@pytest.mark.slow
def test_sigterm_stops_training_with_one_line(tmp_path):
    out_dir = tmp_path / "out"
    command = [
        sys.executable,
        str(SCRIPT),
        *SMALLEST,
        "--num-workers",
        "1",
        "--num-steps",
        "1000000",
        "--out-dir",
        str(out_dir),
    ]
    process = start_and_wait_for_training(command, tmp_path)
    process.send_signal(signal.SIGTERM)
    returncode, stderr = finish(process)
    lines = error_lines(stderr)
    assert returncode == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr
    assert re.fullmatch(
        r"toy_supervised_sobolev\.py: error: interrupted at step [1-9][0-9]* of 8000000 \(no training finished\); "
        rf"no results to save \(TensorBoard logs so far in {re.escape(str(out_dir))}\)",
        lines[0],
    )
    assert not (out_dir / "summary.json").exists()
    assert list((out_dir / "unlimited" / "mmd_sobolev").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_ctrl_c_stops_the_worker_processes_too(tmp_path):
    """Ctrl-C reaches the whole process group: the workers leave it to the main process, which stops them."""
    out_dir = tmp_path / "out"
    command = [
        sys.executable,
        str(SCRIPT),
        *SMALLEST,
        "--num-workers",
        "2",
        "--num-steps",
        "1000000",
        "--out-dir",
        str(out_dir),
    ]
    # As a terminal's Ctrl-C finds it: SIGINT handled. A shell starts a background job (`pytest ... &`) with SIGINT
    # ignored, the child would inherit that and ignore the Ctrl-C; this test must not depend on how pytest was started.
    process = start_and_wait_for_training(
        command, tmp_path, start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    )
    os.killpg(process.pid, signal.SIGINT)
    returncode, stderr = finish(process)
    lines = error_lines(stderr)
    assert returncode == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "error: interrupted at step" in lines[0] and "(no training finished); no results to save" in lines[0]


def test_interruption_saves_the_finished_trainings(tmp_path, monkeypatch, capsys):
    real_train_job, calls = tss.train_job, []

    def train_job_interrupted_at_the_third(*job_args):
        calls.append(job_args[1:3])
        if len(calls) == 3:
            raise KeyboardInterrupt  # what Ctrl-C, or SIGTERM through the script's handler, raises
        return real_train_job(*job_args)

    monkeypatch.setattr(tss, "train_job", train_job_interrupted_at_the_third)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        tss.main(tiny_args(tmp_path, num_workers=1))
    assert exit_info.value.code == 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # restored
    lines = error_lines(capsys.readouterr().err)
    assert lines == [
        "toy_supervised_sobolev.py: error: interrupted at step 80 of 320 (2 of 8 trainings finished); "
        f"their results saved in {tmp_path / 'summary.json'}, no figures drawn"
    ]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert {regime: list(variants) for regime, variants in summary["results"].items()} == {
        "unlimited": ["mmd_sobolev", "mmd"]
    }
    assert summary["results"]["unlimited"]["mmd"]["history"]["step"] == [0, 20, 40]
    assert not list(tmp_path.glob("*.png"))
