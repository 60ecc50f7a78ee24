"""Tests of the paper's ablations and theory as flags: the contraction monitor, single-critic targets (--no-double-q),
no truncation, and the complete Sobolev operator (the flow world model has tests of its own)."""

import importlib

import helpers
import pytest
import torch
from helpers import dyna_batch, only_run_dir, read_scalars, read_summary, run_script

import replay_buffer
import td3_huber

SCRIPTS_WITH_WORLD_MODEL = list(helpers.RL_SCRIPTS)


class LinearModel:
    """s' = M s + P a + 0.3 eps, r = 0, following WorldModel.sample's contract (noise optional)."""

    latent_dim = 3

    def __init__(self, m: torch.Tensor, p: torch.Tensor):
        self.m, self.p = m, p

    def sample(self, obs, actions, n, noise=None):
        if noise is None:
            noise = torch.randn(obs.shape[0], n, self.latent_dim)
        next_obs = (obs @ self.m.T + actions @ self.p.T)[:, None] + 0.3 * noise
        return next_obs, torch.zeros(obs.shape[0], n)


@pytest.mark.parametrize("name", SCRIPTS_WITH_WORLD_MODEL)
def test_contraction_factor_of_linear_dynamics_and_policy_is_gamma_times_the_operator_norm(name):
    """s' = M s + P a + noise and pi(s) = K s: gamma |(df/da)^T (dpi/ds')^T|_2 = gamma |P^T K^T|_2 at every state."""
    module = importlib.import_module(name)
    torch.manual_seed(0)
    m, p, k = torch.randn(3, 3), torch.randn(3, 2), torch.randn(2, 3)
    policy = torch.nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        policy.weight.copy_(k)
    obs, actions = torch.randn(6, 3), torch.randn(6, 2)
    factors = module.contraction_factor(obs, actions, LinearModel(m, p), policy, gamma=0.97)
    expected = 0.97 * torch.linalg.matrix_norm(p.T @ k.T, ord=2)
    torch.testing.assert_close(factors, expected.expand(6))


def test_contraction_factor_sees_the_world_models_jacobian():
    """With the cVAE: the same factor from an explicit per-pair autograd Jacobian of one sample path."""
    torch.manual_seed(1)
    model = td3_huber.WorldModel(3, 2, 16)
    model.update_normaliser(torch.randn(40, 3), torch.rand(40, 2), torch.randn(40, 1), torch.randn(40, 3))
    actor = td3_huber.Actor(3, 2, 8)
    obs, actions = torch.randn(4, 3), torch.rand(4, 2) * 2 - 1
    torch.manual_seed(2)
    factors = td3_huber.contraction_factor(obs, actions, model, actor, 0.9)
    torch.manual_seed(2)
    noise = torch.randn(4, 1, model.latent_dim)
    for b in range(4):
        f = lambda a: model.sample(obs[b : b + 1], a[None], 1, noise[b : b + 1])[0][0, 0]  # noqa: E731
        df_da = torch.autograd.functional.jacobian(f, actions[b])  # (S, A)
        next_obs = f(actions[b]).detach()
        dpi_ds = torch.autograd.functional.jacobian(lambda s: actor(s[None])[0], next_obs)  # (A, S)
        expected = 0.9 * torch.linalg.matrix_norm(df_da.T @ dpi_ds.T, ord=2)
        torch.testing.assert_close(factors[b], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["td3_huber", "mage_huber_sobolev"])
def test_without_double_q_the_target_uses_critic_one(name):
    module = importlib.import_module(name)
    torch.manual_seed(3)
    actor, critic = module.Actor(3, 2, 8), module.Critic(3, 2, 8)
    batch = replay_buffer.ReplayBatch(
        torch.randn(5, 3), torch.rand(5, 2), torch.randn(5), torch.randn(5, 3), torch.zeros(5)
    )
    model = module.WorldModel(3, 2, 8)
    args = (actor, critic, 0.9, 0.0, 0.5)
    target_function = module.td_targets if name == "td3_huber" else module.sobolev_targets
    targets = {}
    for double_q in (True, False):
        torch.manual_seed(4)
        out = target_function(batch, model, *args, double_q=double_q)
        targets[double_q] = out if out.dim() == 1 else out[:, 0]
    torch.manual_seed(4)
    next_obs, _ = model.sample(batch.obs, batch.actions, 1)
    with torch.no_grad():
        q = critic(next_obs[:, 0], actor(next_obs[:, 0]))  # (2, B)
    torch.testing.assert_close(targets[False], batch.rewards + 0.9 * q[0])  # --dyna-reward replay: the row's reward
    torch.testing.assert_close(targets[True], batch.rewards + 0.9 * q.min(0).values)


@pytest.mark.slow
def test_the_monitor_is_logged_and_leaves_training_unchanged(tmp_path):
    common = [
        *(
            "--env-id PointMass-v0 --total-timesteps 160 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 "
            "--batch-size 16 --updates-per-step 1 --eval-frequency 80 --eval-episodes 2 --num-samples 3 "
            "--num-samples-policy 2 --slice-steps 2"
        ).split()
    ]
    returns = {}
    for frequency in ("20", "0"):
        cwd = tmp_path / frequency
        cwd.mkdir()
        result = run_script("dsdpg_msmmd_sobolev.py", *common, "--contraction-frequency", frequency, cwd=cwd)
        assert result.returncode == 0, result.stderr
        scalars = read_scalars(only_run_dir(cwd))
        returns[frequency] = scalars["losses/qf_loss"]
        if frequency == "20":
            assert [s for s, _ in scalars["charts/contraction_gamma_kappa"]] == [100, 120, 140]
            assert all(
                v >= m
                for (_, v), (_, m) in zip(
                    scalars["charts/contraction_gamma_kappa_max"], scalars["charts/contraction_gamma_kappa"]
                )
            )
        else:
            assert "charts/contraction_gamma_kappa" not in scalars
    assert returns["20"] == returns["0"]  # the monitor draws from a forked RNG


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("name", ["dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"])
def test_complete_sobolev_targets_match_finite_differences_in_action_and_state(name, float64):
    module = importlib.import_module(name)
    torch.manual_seed(5)
    world_model = module.WorldModel(3, 2, hidden_dim=8)
    world_model.update_normaliser(
        torch.randn(50, 3), torch.rand(50, 2) * 2 - 1, torch.randn(50, 1), torch.randn(50, 3) * 2
    )
    actor = module.Actor(3, 2, 8).requires_grad_(False)
    critic = module.Critic(3, 2, 8, noise_dim=4).requires_grad_(False)
    obs, actions, terminations = torch.randn(4, 3), torch.rand(4, 2) * 1.6 - 0.8, torch.tensor([0.0, 1.0, 0.0, 0.0])

    def targets_at(s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(77)
        return module.sobolev_targets(
            dyna_batch(s, a, torch.zeros(4), terminations),
            world_model,
            actor,
            critic,
            0.9,
            0.2,
            0.5,
            num_samples=3,
            dyna_reward="model",
            complete=True,
        )

    targets = targets_at(obs, actions)
    assert targets.shape == (4, 6, 1 + 2 + 3)
    torch.manual_seed(77)
    batch = dyna_batch(obs, actions, torch.zeros(4), terminations)
    action_only = module.sobolev_targets(batch, world_model, actor, critic, 0.9, 0.2, 0.5, 3, "model")
    torch.testing.assert_close(targets[..., :3], action_only)  # the complete operator extends the action one
    h = 1e-6
    for j in range(3):  # state-gradient block against central differences of each sample's own return
        step = torch.zeros(3)
        step[j] = h
        finite_difference = (targets_at(obs + step, actions)[..., 0] - targets_at(obs - step, actions)[..., 0]) / (
            2 * h
        )
        torch.testing.assert_close(targets[..., 3 + j], finite_difference, rtol=1e-5, atol=1e-7)
    for j in range(2):
        step = torch.zeros(2)
        step[j] = h
        finite_difference = (targets_at(obs, actions + step)[..., 0] - targets_at(obs, actions - step)[..., 0]) / (
            2 * h
        )
        torch.testing.assert_close(targets[..., 1 + j], finite_difference, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"])
def test_complete_sobolev_samples_give_per_sample_state_gradients(name, float64):
    module = importlib.import_module(name)
    torch.manual_seed(6)
    critic = module.Critic(3, 2, 8, noise_dim=4)
    obs, actions = torch.randn(2, 3), torch.rand(2, 2)
    torch.manual_seed(8)
    predictions = module.sobolev_samples(critic, obs, actions, 4, complete=True)
    assert predictions.shape == (2, 2, 4, 6)
    torch.manual_seed(8)
    noise = torch.randn(2, 2 * 4, 4).reshape(2, 2, 4, 4)
    for e in range(2):
        for b in range(2):
            for k in range(4):
                z = lambda s: critic(s[None], actions[b : b + 1], noise[:, b, k][:, None])[e, 0]  # noqa: E731
                torch.testing.assert_close(predictions[e, b, k, 3:], torch.func.jacrev(z)(obs[b]))
    predictions[..., 3:].pow(2).sum().backward()  # the state-gradient block trains the critic too
    assert critic.fc1.weight.grad[:, :3].abs().sum() > 0


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["PointMass-v0", "Hopper-v4"])
def test_complete_sobolev_runs_end_to_end(tmp_path, env_id):
    result = run_script(
        "dsdpg_msmmd_sobolev.py",
        "--env-id",
        env_id,
        *(
            "--sobolev complete --total-timesteps 150 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 "
            "--batch-size 16 --updates-per-step 1 --eval-frequency 150 --eval-episodes 1 --num-samples 3 "
            "--slice-steps 2 --truncation 0"
        ).split(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    scalars = read_scalars(only_run_dir(tmp_path))
    assert scalars["losses/qf_loss"] and scalars["losses/slice_gain"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, flags",
    [
        ("dsdpg_mmd_sobolev.py", ["--truncation", "0", "--num-samples", "3"]),
        ("mage_huber_sobolev.py", ["--no-double-q"]),
    ],
)
@pytest.mark.parametrize("env_id", ["PointMass-v0", "Hopper-v4"])
def test_overestimation_ablations_run_end_to_end(tmp_path, script, flags, env_id):
    result = run_script(
        script,
        *flags,
        "--env-id",
        env_id,
        *(
            "--total-timesteps 150 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --batch-size 16 "
            "--updates-per-step 1 --eval-frequency 150 --eval-episodes 1"
        ).split(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert read_scalars(run_dir)["losses/qf_loss"]
    run_args = read_summary(run_dir)["args"]
    assert run_args["truncation"] == 0.0 if "--truncation" in flags else run_args["double_q"] is False


@pytest.mark.slow
def test_compile_flag_trains_like_eager(tmp_path):
    """--compile (torch.compile of the actor, the world-model loss and the slicing search's steps) runs on the CPU and
    gives the eager run's numbers up to floating-point reassociation."""
    common = [
        *(
            "--env-id PointMass-v0 --total-timesteps 120 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 "
            "--batch-size 16 --updates-per-step 1 --eval-frequency 120 --eval-episodes 1 --num-samples 3 "
            "--slice-steps 2 --contraction-frequency 0"
        ).split()
    ]
    losses = {}
    for flag in ("--compile", "--no-compile"):
        cwd = tmp_path / flag
        cwd.mkdir()
        result = run_script("dsdpg_msmmd_sobolev.py", *common, flag, cwd=cwd)
        assert result.returncode == 0, result.stderr
        scalars = read_scalars(only_run_dir(cwd))
        losses[flag] = [v for tag in ("losses/world_model_loss", "losses/qf_loss") for _, v in scalars[tag]]
    assert losses["--compile"] == pytest.approx(losses["--no-compile"], rel=1e-3)
