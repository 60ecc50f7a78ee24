"""Tests of the conditional RealNVP world model (--world-model flow): exact log-determinant, invertibility, a fit of a
known stochastic linear system (moments and pathwise action-gradients of the samples), and runs end to end."""

import pytest
import torch
from helpers import only_run_dir, read_scalars, run_script

from dsdpg_mmd_sobolev import make_world_model
from flow_world_model import FlowWorldModel


def perturbed_flow(obs_dim: int, act_dim: int, seed: int = 0) -> FlowWorldModel:
    """A small float64 flow (with dsdpg_mmd_sobolev's normaliser) moved away from its identity-coupling
    initialisation, so every layer is non-trivial."""
    torch.manual_seed(seed)
    model = make_world_model("flow", obs_dim, act_dim, 16).double()
    assert isinstance(model, FlowWorldModel)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn_like(param))
    return model


@pytest.mark.parametrize("obs_dim, act_dim", [(3, 2), (2, 1), (1, 1)])  # D = 4, 3, 2
def test_log_det_matches_brute_force_jacobian(obs_dim: int, act_dim: int) -> None:
    model = perturbed_flow(obs_dim, act_dim)
    dim = obs_dim + 1
    x = 1.5 * torch.randn(6, dim, dtype=torch.float64)
    cond = torch.randn(6, obs_dim + act_dim, dtype=torch.float64)
    _, log_det = model.forward_transform(x, cond)  # (6,)
    for i in range(6):
        jacobian = torch.func.jacrev(lambda xi: model.forward_transform(xi[None], cond[i : i + 1])[0][0])(x[i])
        assert jacobian.shape == (dim, dim)
        torch.testing.assert_close(log_det[i], torch.linalg.slogdet(jacobian).logabsdet, rtol=1e-10, atol=1e-10)
    # meaningful: the couplings' contribution varies from point to point, and with the condition
    mix_log_det = sum(mix.log_s.sum() for mix in model.mixes)
    assert (log_det - mix_log_det).std() > 0.1
    _, log_det_other_cond = model.forward_transform(x, cond.flip(0))
    assert (log_det - log_det_other_cond).abs().max() > 0.1


@pytest.mark.parametrize("obs_dim, act_dim", [(3, 2), (2, 1), (1, 1)])
def test_inverse_round_trips(obs_dim: int, act_dim: int) -> None:
    model = perturbed_flow(obs_dim, act_dim, seed=1)
    x = 2.0 * torch.randn(64, 5, obs_dim + 1, dtype=torch.float64)  # arbitrary leading dims
    cond = torch.randn(64, 5, obs_dim + act_dim, dtype=torch.float64)
    z, _ = model.forward_transform(x, cond)
    assert (z - x).abs().max() > 0.1
    torch.testing.assert_close(model.inverse_transform(z, cond), x, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        model.forward_transform(model.inverse_transform(x, cond), cond)[0], x, rtol=1e-10, atol=1e-10
    )


def test_initial_flow_is_orthogonal_and_interface_shapes() -> None:
    torch.manual_seed(0)
    model = make_world_model("flow", 5, 2, 32)
    assert isinstance(model, FlowWorldModel)
    x, cond = torch.randn(10, 6), torch.randn(10, 7)
    z, log_det = model.forward_transform(x, cond)
    torch.testing.assert_close(z.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-5)  # product of orthogonal maps
    torch.testing.assert_close(log_det, torch.zeros(10), rtol=0.0, atol=1e-5)
    obs, actions = torch.randn(4, 5), torch.randn(4, 2).requires_grad_()
    next_obs, rewards = model.sample(obs, actions, 3)
    assert next_obs.shape == (4, 3, 5) and rewards.shape == (4, 3)
    (grad,) = torch.autograd.grad(next_obs.sum() + rewards.sum(), actions)
    assert grad.shape == (4, 2) and torch.isfinite(grad).all()
    loss = model.loss(obs, actions.detach(), torch.randn(4), torch.randn(4, 5))
    assert loss.shape == () and torch.isfinite(loss)


@pytest.mark.slow
def test_fits_linear_gaussian_system() -> None:
    """s' = s + B a + diag(sigma) e, r = a + 0.5 e': sample means, stds and per-sample d(s', r)/da match the truth."""
    torch.manual_seed(0)
    b, sigma, reward_std = torch.tensor([0.5, -1.0]), torch.tensor([0.3, 0.6]), 0.5
    n, steps = 20_000, 3000
    obs = torch.randn(n, 2)
    actions = torch.rand(n, 1) * 2 - 1
    next_obs = obs + actions * b + sigma * torch.randn(n, 2)
    rewards = actions[:, 0] + reward_std * torch.randn(n)
    model = make_world_model("flow", 2, 1, 64)
    model.update_normaliser(obs, actions, rewards[:, None], next_obs)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for _ in range(steps):
        idx = torch.randint(0, n, (256,))
        loss = model.loss(obs[idx], actions[idx], rewards[idx], next_obs[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()

    k = 4000
    for s, a in [([0.5, -0.5], 0.5), ([-1.0, 1.0], -0.4)]:
        test_obs = torch.tensor(s).repeat(k, 1)  # (k, 2)
        test_actions = torch.full((k, 1), a, requires_grad=True)  # one action leaf per sample
        sample_obs, sample_rewards = model.sample(test_obs, test_actions, 1)
        sample_obs, sample_rewards = sample_obs[:, 0], sample_rewards[:, 0]  # (k, 2), (k,)
        torch.testing.assert_close(sample_obs.mean(0), torch.tensor(s) + a * b, rtol=0.0, atol=0.06)
        torch.testing.assert_close(sample_rewards.mean(), torch.tensor(a), rtol=0.0, atol=0.06)
        torch.testing.assert_close(sample_obs.std(0), sigma, rtol=0.15, atol=0.0)
        torch.testing.assert_close(sample_rewards.std(), torch.tensor(reward_std), rtol=0.15, atol=0.0)
        outputs = [sample_obs[:, 0], sample_obs[:, 1], sample_rewards]
        for output, true_grad in zip(outputs, [b[0], b[1], torch.tensor(1.0)]):
            (grad,) = torch.autograd.grad(output.sum(), test_actions, retain_graph=True)  # (k, 1) per-sample d/da
            assert (grad.mean() - true_grad).abs() < 0.1
            assert grad.std() < 0.25


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, env_id",
    [
        ("dsdpg_msmmd_sobolev.py", "PointMass-v0"),
        ("dsdpg_mmd_sobolev.py", "Hopper-v4"),
        ("mage_huber_sobolev.py", "PointMass-v0"),
        ("mage_huber_sobolev.py", "Hopper-v4"),
    ],
)
def test_scripts_run_with_the_flow(tmp_path, script, env_id) -> None:
    flags = [
        "--world-model",
        "flow",
        "--env-id",
        env_id,
        *(
            "--total-timesteps 150 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --batch-size 16 "
            "--updates-per-step 1 --eval-frequency 150 --eval-episodes 1 --contraction-frequency 25"
        ).split(),
    ]
    if script.startswith("dsdpg"):
        flags += ["--num-samples", "3", "--slice-steps", "2"] if "msmmd" in script else ["--num-samples", "3"]
    result = run_script(script, *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    scalars = read_scalars(only_run_dir(tmp_path))
    assert scalars["losses/world_model_loss"] and scalars["charts/contraction_gamma_kappa"]
    assert all(abs(v) < 1e6 for _, v in scalars["losses/qf_loss"])
