"""The arithmetic reductions of the Sobolev targets and the actor step against straightforward references computed
here, in float64: the cVAE prior run once per pair (PerCopyPrior) instead of on every per-sample copy, the target
critics' input gradients taken in one backward pass instead of a one-hot batched one, and the actor run once per
state instead of on every repeated copy. Every per-sample value and gradient must agree up to float rounding."""

import importlib

import pytest
import torch
from helpers import dyna_batch, tiny_target_networks

DISTRIBUTIONAL = ["mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"]


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def tiny_parts(module, world_model_kind: str) -> tuple:
    return tiny_target_networks(module, world_model_kind, seed=3)


def reference_targets(module, obs, actions, rewards, terminations, parts, n, complete, dyna_reward):
    """The straightforward Sobolev targets: the world model on every per-sample copy (prior included), one backward
    pass per target critic, in the noise order of sobolev_targets."""
    world_model, actor, critic = parts
    batch = obs.shape[0]
    sample_actions = actions[:, None].expand(batch, n, 2).clone().requires_grad_()
    sample_obs = obs[:, None].expand(batch, n, 3).clone().requires_grad_(complete)
    next_obs, model_rewards = world_model.sample(sample_obs.flatten(0, 1), sample_actions.flatten(0, 1), 1)
    next_obs, model_rewards = next_obs[:, 0], model_rewards.reshape(batch, n)
    next_actions = actor(next_obs)
    next_actions = (next_actions + (torch.randn_like(next_actions) * 0.2).clamp(-0.5, 0.5)).clamp(-1.0, 1.0)
    noise = torch.randn(2, batch * n, critic.noise_dim)
    next_z = critic(next_obs, next_actions, noise).reshape(2, batch, n)
    rewards = module.dyna_rewards(rewards[:, None], model_rewards, dyna_reward)
    returns = rewards + 0.9 * (1.0 - terminations)[:, None] * next_z  # (E, B, N)
    inputs = (sample_actions, sample_obs) if complete else (sample_actions,)
    points = []
    for e in range(2):
        grads = torch.autograd.grad(returns[e].sum(), inputs, retain_graph=True)
        points.append(torch.cat([returns[e].detach().unsqueeze(-1), *grads], -1))  # (B, N, 1+A[+S])
    return torch.cat(points, 1)  # (B, 2N, ...): critic 1's N, then critic 2's


@pytest.mark.parametrize("dyna_reward", ["replay", "model"])
@pytest.mark.parametrize("complete", [False, True])
@pytest.mark.parametrize("world_model_kind", ["cvae", "flow"])
@pytest.mark.parametrize("name", ["dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"])
def test_sobolev_targets_equal_the_straightforward_reference(name, world_model_kind, complete, dyna_reward, float64):
    module = importlib.import_module(name)
    parts = tiny_parts(module, world_model_kind)
    obs, actions = torch.randn(5, 3), torch.rand(5, 2) * 1.6 - 0.8
    rewards, terminations = torch.tensor([0.0, 10.0, 0.5, 0.0, -1.0]), torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0])
    torch.manual_seed(11)
    batch = dyna_batch(obs, actions, rewards, terminations)
    targets = module.sobolev_targets(batch, *parts, 0.9, 0.2, 0.5, 4, dyna_reward, complete)
    torch.manual_seed(11)
    expected = reference_targets(module, obs, actions, rewards, terminations, parts, 4, complete, dyna_reward)
    assert targets.shape == expected.shape == (5, 8, 3 + 3 * complete)
    torch.testing.assert_close(targets, expected, rtol=1e-10, atol=1e-12)


def test_a_few_critic_updates_on_the_reduced_targets_equal_those_on_the_reference(float64):
    module = importlib.import_module("dsdpg_mmd_sobolev")
    parts = tiny_parts(module, "cvae")
    critics = [module.Critic(3, 2, 8, noise_dim=4) for _ in range(2)]
    critics[1].load_state_dict(critics[0].state_dict())
    optimizers = [torch.optim.RAdam(c.parameters(), lr=1e-3, foreach=True) for c in critics]
    for update in range(3):
        obs, actions = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1
        rewards, terminations = torch.randn(6), (torch.rand(6) < 0.3).double()
        for which, (critic, optimizer) in enumerate(zip(critics, optimizers)):
            torch.manual_seed(100 + update)
            if which == 0:
                batch = dyna_batch(obs, actions, rewards, terminations)
                targets = module.sobolev_targets(batch, *parts, 0.9, 0.2, 0.5, 4)
            else:
                targets = reference_targets(module, obs, actions, rewards, terminations, parts, 4, False, "replay")
            predictions = module.sobolev_samples(critic, obs, actions, 4)
            loss = module.critic_loss(predictions, module.truncate_top(targets, 25.0), 100.0, "biased")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for new, reference in zip(critics[0].parameters(), critics[1].parameters()):
        torch.testing.assert_close(new, reference, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("complete", [False, True])
def test_per_copy_prior_gives_every_row_the_gradient_of_the_prior_on_every_row(complete, float64):
    module = importlib.import_module("dsdpg_mmd_sobolev")
    torch.manual_seed(4)
    prior = module.SkipMLP(5, 16, 8)
    pairs, copies = torch.randn(4, 5), 3
    cond = pairs.repeat_interleave(copies, 0).requires_grad_()  # (12, 5): groups of identical rows
    columns = slice(0, 5) if complete else slice(3, 5)
    shared, jacobian = module.PerCopyPrior.apply(cond, prior, copies, columns)
    assert jacobian.shape == (columns.stop - columns.start, 4, 8)
    torch.testing.assert_close(shared, prior(cond))
    cotangents = torch.randn(2, 12, 8)  # batched, as under the targets' is_grads_batched backward pass
    (batched,) = torch.autograd.grad(shared, cond, cotangents, is_grads_batched=True)
    for e in range(2):
        (expected,) = torch.autograd.grad(prior(cond), cond, cotangents[e])
        torch.testing.assert_close(batched[e][:, columns], expected[:, columns])
        assert (batched[e][:, : columns.start] == 0).all()  # columns without a tangent get no gradient


@pytest.mark.parametrize("name", DISTRIBUTIONAL)
def test_the_actor_run_once_per_state_gives_the_repeated_actors_loss_and_update(name, float64):
    """The actor step evaluates pi(s) once per state and repeats it for the M critic samples: the same loss, gradient
    and RAdam step as pi evaluated on the M repeated copies of every state."""
    module = importlib.import_module(name)
    torch.manual_seed(5)
    actors = [module.Actor(3, 2, 8) for _ in range(2)]
    actors[1].load_state_dict(actors[0].state_dict())
    critic = module.Critic(3, 2, 8, 4) if name == "iqn" else module.Critic(3, 2, 8, noise_dim=4)
    obs, m = torch.randn(6, 3), 5
    policy_obs = obs.repeat_interleave(m, 0)
    draws = torch.rand(1, 6 * m) if name == "iqn" else torch.randn(1, 6 * m, 4)
    once = -critic(policy_obs, actors[0](obs).repeat_interleave(m, 0), draws)[0].mean()
    repeated = -critic(policy_obs, actors[1](policy_obs), draws)[0].mean()
    torch.testing.assert_close(once, repeated)
    for actor, loss in zip(actors, (once, repeated)):
        optimizer = torch.optim.RAdam(actor.parameters(), lr=1e-3, foreach=True)
        loss.backward(inputs=list(actor.parameters()))
        optimizer.step()
    for a, b in zip(actors[0].parameters(), actors[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
