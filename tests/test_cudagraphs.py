"""--cudagraphs and the capture-ready update: device-side replay sampling, the updates as functions of device tensors,
CudaGraphStep's bookkeeping (warm-up, capture, replay into the same output tensors), the CPU refusal.

Without a GPU the CUDA capture itself is not run (its test, the last one, is skipped). What is tested is everything
around it: a run whose updates go through CudaGraphStep, with the CUDA calls replaced by an emulation that replays a
step the way a graph does (the step recomputed from the captured input tensors, its results written into the captured
output tensors, which the loop must read), gives exactly the eager run's numbers. On a GPU:
`python -m pytest -q tests/test_cudagraphs.py -k real_capture`.
"""

import contextlib
import dataclasses
import glob
import importlib
import inspect
import json
import math
import os

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import error_lines, run_script

RL_SCRIPTS = ["td3_huber.py", "mage_huber_sobolev.py", "mmd_critic.py", "iqn.py", "dsdpg_mmd_sobolev.py",
              "dsdpg_msmmd_sobolev.py"]

TD3 = importlib.import_module("td3_huber")


@pytest.mark.parametrize("script", RL_SCRIPTS)
def test_cudagraphs_is_refused_on_cpu_in_one_line(tmp_path, script):
    result = run_script(script, "--env-id", "PointMass-v0", "--cudagraphs", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1 and "--cudagraphs needs a CUDA GPU" in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


def test_replay_sampling_on_the_device_is_uniform_below_the_fill_level():
    rb = TD3.ReplayBuffer(1, 1, capacity=10, device=torch.device("cpu"))
    for i in range(7):
        rb.add(torch.zeros(1), torch.zeros(1), float(i), torch.zeros(1), False)
    assert rb.fill.item() == rb.size == 7
    torch.manual_seed(0)
    counts = torch.bincount(rb.sample(70_000).rewards.long(), minlength=10)
    assert counts[7:].sum() == 0  # never a row above the fill level
    chi2 = ((counts[:7] - 10_000.0) ** 2 / 10_000.0).sum().item()
    assert chi2 < 22.5  # chi^2 with 6 degrees of freedom: P(> 22.5) = 0.001
    for i in range(7, 13):  # wraps: the fill level stays at the capacity
        rb.add(torch.zeros(1), torch.zeros(1), float(i), torch.zeros(1), False)
    assert rb.fill.item() == rb.size == 10
    assert set(rb.sample(5_000).rewards.long().tolist()) == {3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
    restored = TD3.ReplayBuffer(1, 1, capacity=10, device=torch.device("cpu"))
    restored.load_state_dict(rb.state_dict())
    assert restored.fill.item() == 10


class EmulatedGraph:
    """Stands in for torch.cuda.CUDAGraph: a replay recomputes the captured step from the captured input tensors and
    writes the results into the captured output tensors, in place, as a graph replay does to its static memory."""

    capturing = None  # the CudaGraphStep being called
    replays = 0

    def __init__(self):
        self.owner, self.captured = EmulatedGraph.capturing, False

    def replay(self) -> None:
        if not self.captured:  # the emulated capture ran the step once: it stands for the replay that follows a capture
            self.captured = True
            return
        EmulatedGraph.replays += 1
        outputs = self.owner.step(*self.owner.inputs)
        captured = self.owner.outputs
        if isinstance(captured, dict):
            for name, tensor in captured.items():
                tensor.copy_(outputs[name])
        else:
            captured.copy_(outputs)


class EmulatedStream:
    def wait_stream(self, stream: object) -> None:
        pass


@contextlib.contextmanager
def emulated_capture(graph: EmulatedGraph):
    yield


def run_main(module, tmp_path, monkeypatch, name: str, **overrides) -> tuple[dict, dict]:
    """main() in-process at tiny sizes; returns the TensorBoard scalars (but SPS) and summary.json."""
    tiny = dict(env_id="PointMass-v0", total_timesteps=300, learning_starts=100, hidden_dim=16, wm_hidden_dim=16,
                updates_per_step=2, batch_size=16, eval_frequency=100, eval_episodes=2, cuda=False)
    fields = {field.name for field in dataclasses.fields(module.Args)}
    for key, value in dict(num_samples=4, num_samples_policy=3, noise_dim=8, slice_steps=5).items():
        if key in fields:
            tiny[key] = value
    os.makedirs(tmp_path / name)
    monkeypatch.chdir(tmp_path / name)
    module.main(module.Args(**{**tiny, **overrides}))
    (run_dir,) = glob.glob(str(tmp_path / name / "runs" / "*"))
    events = EventAccumulator(run_dir)
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"] if tag != "charts/SPS"}
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return scalars, summary



@pytest.mark.parametrize("script", RL_SCRIPTS)
def test_graph_replayed_updates_give_the_eager_numbers(tmp_path, monkeypatch, script):
    module = importlib.import_module(script.removesuffix(".py"))
    eager_scalars, eager_summary = run_main(module, tmp_path, monkeypatch, "eager")

    class StepUnderTest(module.CudaGraphStep):
        def __call__(self, *inputs):
            EmulatedGraph.capturing = self
            return super().__call__(*inputs)

    requested = []
    radam = torch.optim.RAdam

    def cpu_radam(params, *args, capturable: bool = False, **kwargs):  # capturable RAdam runs on CUDA only
        requested.append(capturable)
        return radam(params, *args, **kwargs)

    original_check = module.check_args
    monkeypatch.setattr(module, "check_args", lambda args: original_check(dataclasses.replace(args, cudagraphs=False)))
    monkeypatch.setattr(module, "CudaGraphStep", StepUnderTest)
    monkeypatch.setattr(torch.optim, "RAdam", cpu_radam)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", EmulatedGraph)
    monkeypatch.setattr(torch.cuda, "graph", emulated_capture)
    monkeypatch.setattr(torch.cuda, "Stream", EmulatedStream)
    monkeypatch.setattr(torch.cuda, "current_stream", EmulatedStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    EmulatedGraph.replays = 0
    graph_scalars, graph_summary = run_main(module, tmp_path, monkeypatch, "graphs", cudagraphs=True)

    assert requested.count(True) == 2  # the actor's and the critic's optimizers are capturable under --cudagraphs
    # 400 critic updates and 200 actor updates, 3 warm-up calls and 1 capture each; the rest are replays
    assert EmulatedGraph.replays == (400 - 4) + (200 - 4)
    assert graph_scalars.keys() == eager_scalars.keys() and len(eager_scalars) >= 8
    for tag, values in eager_scalars.items():
        assert graph_scalars[tag] == values, tag
    assert graph_summary["eval_returns"] == eager_summary["eval_returns"]


@pytest.mark.parametrize("script", RL_SCRIPTS)
def test_the_captured_updates_hold_no_host_sync_or_python_side_effect(script):
    """What the emulation above cannot see (it reruns the Python code, a graph replays only the kernels): the update
    functions read no tensor back to the host and change no Python state, and the loop reads their results only."""
    source = inspect.getsource(importlib.import_module(script.removesuffix(".py")).main)
    updates = source[source.index("    def update_critic()"):source.index("    if args.cudagraphs:")]
    for forbidden in (".item(", ".cpu(", ".tolist(", ".numpy(", "nonlocal", "global ", "float(", "int(", "bool(", "print("):
        assert forbidden not in updates, forbidden
    assert updates.count("rb.sample(") == 1 and "num_critic_updates" not in updates


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the real capture")
@pytest.mark.parametrize("script", RL_SCRIPTS)
def test_real_capture_on_a_gpu_trains_with_finite_losses(tmp_path, monkeypatch, script):
    """On a GPU (skipped here): the updates are captured as CUDA graphs and replayed (counted), every logged scalar is
    finite, the critic's predictions move, and the run's evaluations happen, as in the eager run on the same GPU."""
    module = importlib.import_module(script.removesuffix(".py"))
    replays = []

    class CountedStep(module.CudaGraphStep):
        def __call__(self, *inputs):
            replays.append(self.graph is not None)
            return super().__call__(*inputs)

    monkeypatch.setattr(module, "CudaGraphStep", CountedStep)
    graph_scalars, graph_summary = run_main(module, tmp_path, monkeypatch, "graphs", cuda=True, cudagraphs=True)
    eager_scalars, eager_summary = run_main(module, tmp_path, monkeypatch, "eager", cuda=True)
    assert replays.count(True) == (400 - 4) + (200 - 4)
    assert graph_scalars.keys() == eager_scalars.keys()
    for tag, values in graph_scalars.items():
        assert all(math.isfinite(value) for _, value in values), tag
    q_values = [value for _, value in graph_scalars["losses/qf1_values"]]
    assert max(q_values) - min(q_values) > 1e-4
    assert len(graph_summary["eval_returns"]) == len(eager_summary["eval_returns"]) == 3
