"""Denormal floats: every RL script computes with them flushed to zero on the CPU, which changes no output.

The world model's weights on an input that is always zero (InvertedDoublePendulum's two constraint-force coordinates,
0 at every step, so 0 after normalisation) get no gradient but weight decay, and sink below 1e-38 (the mujoco_cpu
grid's IDP checkpoints: every such weight). On x86 each operation on such an operand takes a slow path (~100 cycles):
an IDP DSDPG update ran 2 x slower for it (benchmarks/mujoco_questions, "Cost plan"). Flushed, those weights multiply
exact zeros either way, so the outputs are the same bits.
"""

import importlib

import pytest
import torch
from helpers import RL_SCRIPTS, run_script_in_process

DENORMAL = 1e-40


@pytest.fixture
def no_flush():
    """Denormals kept (the process default) for the test, and put back as they were after it."""
    was_flushing = torch.tensor([DENORMAL]).item() == 0.0
    torch.set_flush_denormal(False)
    yield
    torch.set_flush_denormal(was_flushing)


@pytest.mark.parametrize("script", RL_SCRIPTS)
def test_every_script_flushes_denormals(script, no_flush, tmp_path):
    assert torch.tensor([DENORMAL]).item() != 0.0  # kept before the run
    flags = (
        "--env-id PointMass-v0 --total-timesteps 3 --learning-starts 2 --hidden-dim 4 --wm-hidden-dim 4 --batch-size 2"
    )
    result = run_script_in_process(f"{script}.py", *flags.split(), "--eval-episodes", "1", "--no-cuda", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert torch.tensor([DENORMAL]).item() == 0.0  # the script flushed them
    assert (torch.tensor([DENORMAL]) * 3.0).item() == 0.0  # and computes with them as 0


@pytest.mark.parametrize("script", ["td3_huber", "dsdpg_msmmd_sobolev"])
def test_flushing_changes_no_output_when_only_the_weights_of_zero_inputs_are_denormal(script, no_flush):
    """The world model's sample and its action-gradient, with the weights of an always-zero state coordinate at 1e-40:
    the same bits with denormals kept and flushed."""
    module = importlib.import_module(script)
    torch.manual_seed(0)
    model = module.WorldModel(4, 2, 16)
    obs = torch.randn(64, 4)
    obs[:, 3] = 0.0  # a coordinate that is always 0 (its normalised value too: mean 0)
    model.update_normaliser(obs, torch.rand(64, 2) * 2 - 1, torch.randn(64, 1), obs + 0.1 * torch.randn(64, 4))
    with torch.no_grad():
        for net in (model.prior, model.decoder):
            for layer in net.hidden:
                layer.weight[:, 3] = DENORMAL  # the column of that coordinate in every layer that sees the input
                if layer.weight.shape[1] > net.hidden[0].weight.shape[1]:
                    layer.weight[:, -net.hidden[0].weight.shape[1] + 3] = DENORMAL
    actions = (torch.rand(8, 2) * 2 - 1).requires_grad_()
    noise = torch.randn(8, 3, model.latent_dim)
    outputs = []
    for flush in (False, True):
        torch.set_flush_denormal(flush)
        next_obs, rewards = model.sample(obs[:8], actions, 3, noise)
        (grad,) = torch.autograd.grad(next_obs.sum() + rewards.sum(), actions)
        outputs.append((next_obs.detach(), rewards.detach(), grad))
    assert (
        model.prior.hidden[0].weight[:, 3].view(torch.int32) != 0
    ).all()  # still stored: only arithmetic flushed them
    for kept, flushed in zip(*outputs):
        assert torch.equal(kept, flushed)
