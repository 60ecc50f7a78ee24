"""Tests of `--dyna-reward {replay,model}` in every script with a world model: under `replay` a Dyna target's value
takes the replay row's reward (so it pairs with that row's termination flag) while its action- and state-gradients
still flow through the world model's reward sample; under `model` the target is the model's (the paper's literal
reading). Gradients are checked against central differences of the model-reward target, with both world models."""

import importlib

import pytest
import torch
from helpers import dyna_batch, only_run_dir, read_scalars, run_script, tiny_target_networks

DISTRIBUTIONAL = ["mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"]
SOBOLEV = ["dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"]


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def trained_parts(module, world_model_kind: str) -> tuple:
    return tiny_target_networks(module, world_model_kind, seed=7)


def targets_of(module, obs, actions, rewards, terminations, parts, dyna_reward: str, seed: int = 123, **kwargs):
    """The script's Dyna target function under a fixed seed: (B,) / (B, 1+A) / (B, 2N, 1[+A[+S]])."""
    world_model, actor, critic = parts
    torch.manual_seed(seed)
    batch = dyna_batch(obs, actions, rewards, terminations)
    if module.__name__ == "td3_huber":
        return module.td_targets(batch, world_model, actor, critic, 0.9, 0.2, 0.5, dyna_reward=dyna_reward)
    if module.__name__ == "mage_huber_sobolev":
        return module.sobolev_targets(batch, world_model, actor, critic, 0.9, 0.2, 0.5, dyna_reward=dyna_reward)
    function = module.sobolev_targets if module.__name__ in SOBOLEV else module.return_targets
    return function(batch, world_model, actor, critic, 0.9, 0.2, 0.5, 3, dyna_reward=dyna_reward, **kwargs)


def check_dyna_rewards_replay_exactness(module, dtype: torch.dtype) -> None:
    """dyna_rewards(r, r^, "replay") is r to the bit with d/dr^ = 1. The rewards are random floats (and 0.1, 0.7, 1/3)
    against model rewards of other magnitudes, for which r^ + (r - r^) rounds away from r: a value formed through r^ is
    caught, not only one whose round trip happens to be exact (as for integer rewards like 10 and -3)."""
    generator = torch.Generator().manual_seed(5)
    replay = torch.cat([torch.tensor([0.1, 0.7, 1 / 3, -1 / 3]), torch.randn(60, generator=generator) * 3]).to(dtype)
    a = (torch.randn(64, 3, generator=generator) * 2).to(dtype).requires_grad_()
    model_rewards = torch.stack(
        [a[:, 0] ** 2 * 1e3, torch.sin(a[:, 1]), 7.3 * a[:, 2]], -1
    )  # (64, 3): one large column
    rewards = module.dyna_rewards(replay[:, None], model_rewards, "replay")  # broadcast as in the target functions
    assert rewards.dtype == dtype and rewards.shape == (64, 3)
    assert torch.equal(rewards.detach(), replay[:, None].expand(64, 3))  # exactly r, not r^ + (r - r^) rounded
    (d_model,) = torch.autograd.grad(rewards.sum(), model_rewards, retain_graph=True)
    assert torch.equal(d_model, torch.ones_like(model_rewards))  # dr/dr^ = 1
    (grad,) = torch.autograd.grad(rewards.sum(), a)
    expected = torch.stack([2e3 * a[:, 0], torch.cos(a[:, 1]), torch.full_like(a[:, 2], 7.3)], -1).detach()
    torch.testing.assert_close(grad, expected)
    assert module.dyna_rewards(replay[:, None], model_rewards, "model") is model_rewards


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dyna_rewards_has_the_replay_value_exactly_and_the_model_gradient(dtype):
    import td3_huber

    check_dyna_rewards_replay_exactness(td3_huber, dtype)


@pytest.mark.parametrize("name", ["td3_huber", "mage_huber_sobolev", *DISTRIBUTIONAL])
@pytest.mark.parametrize("world_model_kind", ["cvae", "flow"])
def test_replay_targets_take_the_replay_reward_paired_with_its_flag(name, world_model_kind, float64):
    """replay: y = r + gamma (1 - d) Z'(s'^, a') with r the replay row's reward (exactly r where d = 1); model: y takes
    the model's r^ instead, drawn by the same world-model sample; the bootstrap part is the same in both modes."""
    module = importlib.import_module(name)
    parts = trained_parts(module, world_model_kind)
    obs, actions = torch.randn(4, 3), torch.rand(4, 2) * 1.6 - 0.8
    # terminal rewards whose round trip through r^ is not exact (r^ + (r - r^) != r for most r^, unlike 10 and -3)
    rewards, terminations = torch.tensor([0.25, 0.1, -0.7, 1 / 3]), torch.tensor([0.0, 1.0, 0.0, 1.0])
    replay = targets_of(module, obs, actions, rewards, terminations, parts, "replay")
    model = targets_of(module, obs, actions, rewards, terminations, parts, "model")
    n = 1 if name in ("td3_huber", "mage_huber_sobolev") else 3
    torch.manual_seed(123)  # the world model's draw comes first in every target function
    with torch.no_grad():
        model_rewards = parts[0].sample(obs, actions, n)[1]  # (B, n), r^ of every sample
    value = lambda targets: targets if targets.dim() == 1 else targets[..., 0]  # noqa: E731
    replay_values, model_values = value(replay), value(model)
    if n == 1:
        model_rewards = model_rewards[:, 0]
    else:  # (B, 2N): both critics' N samples share the N world-model samples
        model_rewards = model_rewards.repeat(1, 2)
        rewards = rewards[:, None]
    terminal = terminations.bool()
    assert torch.equal(replay_values[terminal], rewards.expand_as(replay_values)[terminal])  # y = r, exactly
    torch.testing.assert_close(model_values[terminal], model_rewards[terminal])  # y = r^
    torch.testing.assert_close(replay_values - rewards, model_values - model_rewards)  # the same gamma Z'(s'^, a')
    assert not torch.allclose(replay_values[terminal], model_values[terminal])
    if replay.dim() > 1 and replay.shape[-1] > 1:  # gradients: the model's d r^/da in both modes
        torch.testing.assert_close(replay[..., 1:], model[..., 1:])


def finite_difference(targets_at, x: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    """Central differences of the return coordinate of targets_at(x) in each coordinate of x: (..., dim of x)."""
    columns = []
    for j in range(x.shape[-1]):
        step = torch.zeros(x.shape[-1])
        step[j] = h
        columns.append((targets_at(x + step)[..., 0] - targets_at(x - step)[..., 0]) / (2 * h))
    return torch.stack(columns, -1)


@pytest.mark.parametrize("dyna_reward", ["replay", "model"])
@pytest.mark.parametrize("world_model_kind", ["cvae", "flow"])
@pytest.mark.parametrize("name", ["mage_huber_sobolev", *SOBOLEV])
def test_target_gradients_are_central_differences_of_the_model_reward_target(
    name, world_model_kind, dyna_reward, float64
):
    """In both modes every per-sample gradient (action, and state for the complete operator) is the derivative of the
    model-reward target: the replay value is a constant of the pair, its gradient the model's d r^/da."""
    module = importlib.import_module(name)
    parts = trained_parts(module, world_model_kind)
    obs, actions = torch.randn(4, 3), torch.rand(4, 2) * 1.6 - 0.8
    rewards, terminations = torch.tensor([0.0, 10.0, 0.5, 0.0]), torch.tensor([0.0, 1.0, 0.0, 0.0])
    complete = {"complete": True} if name in SOBOLEV else {}
    targets = targets_of(module, obs, actions, rewards, terminations, parts, dyna_reward, **complete)
    model_at_action = lambda a: targets_of(module, obs, a, rewards, terminations, parts, "model", **complete)  # noqa: E731
    torch.testing.assert_close(targets[..., 1:3], finite_difference(model_at_action, actions), rtol=1e-5, atol=1e-7)
    if complete:
        model_at_state = lambda s: targets_of(module, s, actions, rewards, terminations, parts, "model", **complete)  # noqa: E731
        torch.testing.assert_close(targets[..., 3:], finite_difference(model_at_state, obs), rtol=1e-5, atol=1e-7)
    if dyna_reward == "replay":  # the replay target's own value does not move with r^: its differences differ
        replay_at_action = lambda a: targets_of(module, obs, a, rewards, terminations, parts, "replay", **complete)  # noqa: E731
        assert not torch.allclose(targets[..., 1:3], finite_difference(replay_at_action, actions), atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["td3_huber.py", "dsdpg_msmmd_sobolev.py"])
def test_both_modes_run_end_to_end_and_differ(tmp_path, script):
    flags = [
        *(
            "--env-id PointMass-v0 --total-timesteps 150 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 "
            "--batch-size 16 --updates-per-step 1 --eval-frequency 150 --eval-episodes 1 --contraction-frequency "
            "0"
        ).split()
    ]
    if "dsdpg" in script:
        flags += ["--num-samples", "3", "--num-samples-policy", "2", "--noise-dim", "4", "--slice-steps", "2"]
    losses = {}
    for mode in ("replay", "model"):
        cwd = tmp_path / mode
        cwd.mkdir()
        result = run_script(script, *flags, "--dyna-reward", mode, cwd=cwd)
        assert result.returncode == 0, result.stderr
        losses[mode] = [v for _, v in read_scalars(only_run_dir(cwd))["losses/qf_loss"]]
    assert losses["replay"] and losses["replay"] != losses["model"]
