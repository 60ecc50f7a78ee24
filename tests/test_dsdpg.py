"""Tests of the DSDPG scripts (dsdpg_mmd_sobolev.py, dsdpg_msmmd_sobolev.py) and of MAGE (mage_huber_sobolev.py):
estimators against independent double loops and closed forms, Sobolev targets against finite differences and a
hand-derived linear-quadratic case, the prediction set against per-sample autograd, and the scripts end to end."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import dyna_batch, error_lines, only_run_dir, read_scalars, read_summary, run_script, run_script_in_process

import dsdpg_mmd_sobolev as dsdpg
import dsdpg_msmmd_sobolev as dsdpg_ms
import mage_huber_sobolev as mage
import replay_buffer

TINY = [
    *(
        "--total-timesteps 200 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --updates-per-step 2 "
        "--batch-size 16 --eval-frequency 100 --eval-episodes 2"
    ).split()
]
TINY_FLAGS = {
    "mage_huber_sobolev.py": TINY,
    "dsdpg_mmd_sobolev.py": TINY + ["--num-samples", "4", "--num-samples-policy", "3", "--noise-dim", "8"],
    "dsdpg_msmmd_sobolev.py": TINY
    + ["--num-samples", "4", "--num-samples-policy", "3", "--noise-dim", "8", "--slice-steps", "5"],
}


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("module", [dsdpg, dsdpg_ms])
def test_critic_evaluates_as_many_critics_as_noise_draws(module):
    """The actor's loss passes critic 1's noise alone: the result is critic 1's samples of the twin evaluation."""
    torch.manual_seed(0)
    critic = module.Critic(obs_dim=3, act_dim=2, hidden_dim=8, noise_dim=4)
    obs, actions, noise = torch.randn(5, 3), torch.randn(5, 2), torch.randn(2, 5, 4)
    both = critic(obs, actions, noise)
    assert both.shape == (2, 5) and critic(obs, actions, noise[:1]).shape == (1, 5)
    torch.testing.assert_close(critic(obs, actions, noise[:1])[0], both[0])  # equal up to the matmul kernels rounding
    assert not torch.allclose(both[0], both[1])


# ESTIMATORS
def loop_kernel(u: np.ndarray, v: np.ndarray, h: float) -> float:
    return -math.sqrt(1.0 + h**2 * float(np.sum((u - v) ** 2)))


def loop_mmd2(x: np.ndarray, y: np.ndarray, h: float, estimator: str) -> float:
    n, m = len(x), len(y)
    if estimator == "biased":
        xx = sum(loop_kernel(a, b, h) for a in x for b in x) / n**2
        yy = sum(loop_kernel(a, b, h) for a in y for b in y) / m**2
    else:
        xx = sum(loop_kernel(x[i], x[j], h) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
        yy = sum(loop_kernel(y[i], y[j], h) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    xy = sum(loop_kernel(a, b, h) for a in x for b in y) / (n * m)
    return xx + yy - 2 * xy


@pytest.mark.parametrize("module", [dsdpg, dsdpg_ms])
def test_multiquadric_kernel_against_a_double_loop(module):
    torch.manual_seed(0)
    x, y = torch.randn(2, 3, 4, 5, dtype=torch.float64), torch.randn(2, 3, 6, 5, dtype=torch.float64)
    k = module.multiquadric_kernel(x, y, 2.5)
    assert k.shape == (2, 3, 4, 6)
    for i in range(4):
        for j in range(6):
            assert k[1, 2, i, j].item() == pytest.approx(loop_kernel(x[1, 2, i].numpy(), y[1, 2, j].numpy(), 2.5))


@pytest.mark.parametrize("module", [dsdpg, dsdpg_ms])
@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_mmd2_against_a_double_loop(module, estimator):
    torch.manual_seed(1)
    x, y = torch.randn(3, 7, 4, dtype=torch.float64), torch.randn(3, 5, 4, dtype=torch.float64) + 0.5
    values = module.mmd2(x, y, 3.0, estimator)
    assert values.shape == (3,)
    for b in range(3):
        assert values[b].item() == pytest.approx(loop_mmd2(x[b].numpy(), y[b].numpy(), 3.0, estimator), rel=1e-10)


def test_mmd2_of_a_set_with_itself_is_zero_and_grows_with_the_distance():
    torch.manual_seed(2)
    x = torch.randn(50, 3)
    assert dsdpg.mmd2(x, x, 100.0).item() == pytest.approx(0.0, abs=1e-3)
    base = torch.randn(200, 3)
    values = [
        dsdpg.mmd2(base, torch.randn(200, 3) + torch.tensor([shift, 0.0, 0.0]), 100.0).item()
        for shift in (0.0, 0.5, 1.0, 2.0, 4.0)
    ]
    assert all(a < b for a, b in zip(values, values[1:])), values


# MAX-SLICED MMD
def test_max_sliced_direction_finds_the_axis_the_sets_differ_along():
    torch.manual_seed(3)
    x, y = torch.randn(64, 32, 6), torch.randn(64, 32, 6)
    y[..., 4] += 3.0  # the sets differ along axis 4 only
    loss, theta = dsdpg_ms.max_sliced_mmd2(x, y, 10.0, steps=300, lr=0.05)
    assert loss.shape == (64,) and theta.shape == (64, 6)
    torch.testing.assert_close(theta.norm(dim=-1), torch.ones(64))
    assert theta[:, 4].abs().min() > 0.9
    random_direction = F.normalize(torch.randn(64, 6), dim=-1)[..., None]
    assert (loss >= dsdpg.mmd2(x @ random_direction, y @ random_direction, 10.0)).all()


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_max_sliced_search_equals_adam_on_the_sphere(estimator):
    """The closed-form search is Adam (maximising) on J(w / |w|) with w renormalised after every step."""
    torch.manual_seed(4)
    x, y = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 8, 4, dtype=torch.float64) + 0.3
    theta0 = F.normalize(torch.randn(3, 4, dtype=torch.float64), dim=-1)
    w = theta0.clone().requires_grad_()
    optimizer = torch.optim.Adam([w], lr=0.02, maximize=True)
    for _ in range(25):
        direction = F.normalize(w, dim=-1)[..., None]
        objective = dsdpg.mmd2(x @ direction, y @ direction, 5.0, estimator).sum()
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
        with torch.no_grad():
            w.copy_(F.normalize(w, dim=-1))
    _, theta = dsdpg_ms.max_sliced_mmd2(x, y, 5.0, 25, 0.02, estimator, initial_theta=theta0)
    torch.testing.assert_close(theta, w.detach(), rtol=0, atol=1e-10)


@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_max_sliced_ascent_is_the_papers_plain_gradient_ascent_on_w(estimator):
    """--slice-optimizer ascent: w <- w + lr dJ(w / |w|)/dw with autograd, w never renormalised (Algorithm 1)."""
    torch.manual_seed(4)
    x, y = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 8, 4, dtype=torch.float64) + 0.3
    theta0 = F.normalize(torch.randn(3, 4, dtype=torch.float64), dim=-1)
    w = theta0.clone().requires_grad_()
    for _ in range(25):
        direction = F.normalize(w, dim=-1)[..., None]
        (grad,) = torch.autograd.grad(dsdpg.mmd2(x @ direction, y @ direction, 5.0, estimator).sum(), w)
        w = (w + 0.3 * grad).detach().requires_grad_()
    assert (w.norm(dim=-1) > 1.0 + 1e-6).all()  # w grows: the steps are orthogonal to it
    _, theta = dsdpg_ms.max_sliced_mmd2(x, y, 5.0, 25, 0.3, estimator, initial_theta=theta0, optimizer="ascent")
    torch.testing.assert_close(theta, F.normalize(w.detach(), dim=-1), rtol=0, atol=1e-10)
    _, adam_theta = dsdpg_ms.max_sliced_mmd2(x, y, 5.0, 25, 0.3, estimator, initial_theta=theta0)
    assert not torch.allclose(theta, adam_theta)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adam", "ascent"])
def test_compiled_search_equals_the_eager_one(optimizer, monkeypatch):
    """--compile compiles the search's chunk of steps, written as the sums inductor fuses where eager code takes matrix
    products: the same directions and loss up to float32 rounding (20 steps at the toy update's shapes)."""
    torch.manual_seed(6)
    x, y, theta0 = torch.randn(2, 8, 10, 3), torch.randn(8, 19, 3), torch.randn(2, 8, 3)
    search = (x, y, 100.0, 20, 1e-3, "biased", theta0, optimizer)
    eager_loss, eager_theta = dsdpg_ms.max_sliced_mmd2(*search)
    monkeypatch.setattr(dsdpg_ms, "slicing_steps", torch.compile(dsdpg_ms.slicing_steps, fullgraph=True, dynamic=False))
    loss, theta = dsdpg_ms.max_sliced_mmd2(*search)
    torch.testing.assert_close(theta, eager_theta, rtol=0, atol=1e-5)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=0)
    assert (theta - theta0 / theta0.norm(dim=-1, keepdim=True)).abs().max() > 1e-3  # the search moved


def test_max_sliced_is_batched_and_differentiable_only_through_the_samples():
    torch.manual_seed(5)
    x = torch.randn(2, 3, 4, 5, requires_grad=True)  # (E, B, n, d)
    y = torch.randn(3, 6, 5)  # shared across E
    theta0 = torch.randn(2, 3, 5)
    loss, theta = dsdpg_ms.max_sliced_mmd2(x, y, 2.0, 10, 0.01, initial_theta=theta0)
    assert loss.shape == (2, 3) and not theta.requires_grad
    for e in range(2):
        for b in range(3):
            single, single_theta = dsdpg_ms.max_sliced_mmd2(x[e, b], y[b], 2.0, 10, 0.01, initial_theta=theta0[e, b])
            torch.testing.assert_close(single, loss[e, b])
            torch.testing.assert_close(single_theta, theta[e, b])
    loss.sum().backward()
    assert x.grad.abs().sum() > 0


# TRUNCATION
@pytest.mark.parametrize("n, p", [(20, 25.0), (20, 5.0), (20, 0.0), (7, 30.0), (10, 15.0)])
def test_truncate_top_keeps_the_smallest_returns_with_their_gradients(n, p):
    torch.manual_seed(6)
    samples = torch.randn(3, 4, n, 3)
    kept = dsdpg.truncate_top(samples, p)
    n_keep = n - round(n * p / 100)
    assert kept.shape == (3, 4, n_keep, 3)
    for i in range(3):
        for j in range(4):
            order = np.argsort(samples[i, j, :, 0].numpy())[:n_keep]
            expected = {tuple(row) for row in samples[i, j, order].numpy().round(6)}
            assert {tuple(row) for row in kept[i, j].numpy().round(6)} == expected  # whole points, not columns


# SOBOLEV TARGETS
def tiny_target_parts(obs_dim: int = 3, act_dim: int = 2):
    torch.manual_seed(7)
    world_model = dsdpg.WorldModel(obs_dim, act_dim, hidden_dim=8)
    with torch.no_grad():  # give the normaliser non-trivial statistics
        world_model.update_normaliser(
            torch.randn(50, obs_dim), torch.rand(50, act_dim) * 2 - 1, torch.randn(50, 1), torch.randn(50, obs_dim) * 2
        )
    actor = dsdpg.Actor(obs_dim, act_dim, 8).requires_grad_(False)
    critic = dsdpg.Critic(obs_dim, act_dim, 8, noise_dim=4).requires_grad_(False)
    return world_model, actor, critic


def test_sobolev_targets_match_per_sample_finite_differences(float64):
    """Each of the 2N target gradients equals the finite difference of its own target return: it fails if gradients
    of different samples are summed or the two critics are mixed."""
    world_model, actor, critic = tiny_target_parts()
    obs, actions = torch.randn(4, 3), torch.rand(4, 2) * 1.6 - 0.8
    terminations = torch.tensor([0.0, 0.0, 1.0, 0.0])

    def targets_at(a: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(123)  # the same noise at every evaluation
        return dsdpg.sobolev_targets(
            dyna_batch(obs, a, torch.zeros(4), terminations),
            world_model,
            actor,
            critic,
            0.9,
            0.2,
            0.5,
            num_samples=5,
            dyna_reward="model",
        )  # tests/test_dyna_reward.py: both modes

    targets = targets_at(actions)
    assert targets.shape == (4, 10, 3) and not targets.requires_grad
    h = 1e-6
    for j in range(2):
        step = torch.zeros(2)
        step[j] = h
        finite_difference = (targets_at(actions + step)[..., 0] - targets_at(actions - step)[..., 0]) / (2 * h)
        torch.testing.assert_close(targets[..., 1 + j], finite_difference, rtol=1e-5, atol=1e-7)
    spread = targets[:2, :, 1:].std(dim=1)  # the samples' gradients really differ from each other
    assert (spread > 1e-3).all()
    torch.testing.assert_close(targets[2, :5], targets[2, 5:])  # terminal: (y, dy/da) = (r, dr/da) for both critics
    assert not torch.allclose(targets[0, :5, 0], targets[0, 5:, 0])  # otherwise two critics, two different sets


class LinearGaussianModel:
    """s' = M s + P a + 0.1 eps, r = c . a + 0.1 eps'; its sample() follows WorldModel.sample's contract."""

    def __init__(self, m, p, c):
        self.m, self.p, self.c = m, p, c

    def sample(self, obs, actions, n, copies=1):  # copies: the cVAE's prior sharing, nothing to share here
        eps = torch.randn(obs.shape[0], n, obs.shape[1] + 1)
        next_obs = (obs @ self.m.T + actions @ self.p.T)[:, None] + 0.1 * eps[..., :-1]
        return next_obs, (actions @ self.c)[:, None] + 0.1 * eps[..., -1]


class QuadraticCritic:
    """Z_e(s, a, xi) = -(a - K_e s)^T (a - K_e s) + w_e . xi; two members, following Critic's calling contract."""

    num_critics, noise_dim = 2, 3

    def __init__(self, gains, noise_weights):
        self.gains, self.noise_weights = gains, noise_weights  # (2, A, S), (2, 3)

    def __call__(self, obs, actions, noise):
        residual = actions - obs @ self.gains.transpose(1, 2)  # (2, R, A)
        return -(residual**2).sum(-1) + (noise * self.noise_weights[:, None]).sum(-1)


def test_sobolev_targets_equal_the_hand_derived_linear_quadratic_gradients(float64):
    """Linear dynamics, linear policy pi(s) = L s, quadratic critics: dy_ck/da = c + gamma P^T [dZ_c/ds' + L^T dZ_c/da']
    with dZ_c/da' = -2 (a' - K_c s'_k) and dZ_c/ds' = 2 K_c^T (a' - K_c s'_k), evaluated at each sample's own s'_k."""
    torch.manual_seed(8)
    s_dim, a_dim, gamma = 3, 2, 0.9
    m, p, c = torch.randn(s_dim, s_dim) * 0.3, torch.randn(s_dim, a_dim), torch.randn(a_dim)
    gains, lin = torch.randn(2, a_dim, s_dim) * 0.2, torch.randn(a_dim, s_dim) * 0.1
    model, critic = LinearGaussianModel(m, p, c), QuadraticCritic(gains, torch.randn(2, 3))
    policy = lambda s: s @ lin.T  # noqa: E731 (small enough to stay inside [-1, 1]: the clip is inactive)
    obs, actions = torch.randn(5, s_dim) * 0.5, torch.rand(5, a_dim) - 0.5
    terminations = torch.zeros(5)
    torch.manual_seed(9)
    batch = dyna_batch(obs, actions, torch.zeros(5), terminations)
    targets = dsdpg.sobolev_targets(batch, model, policy, critic, gamma, 0.0, 0.5, num_samples=4)
    torch.manual_seed(9)
    eps = torch.randn(5 * 4, 1, s_dim + 1)  # the model's draw inside sobolev_targets (per-sample copies of a)
    next_obs = (obs @ m.T + actions @ p.T).repeat_interleave(4, 0) + 0.1 * eps[:, 0, :-1]  # (B*N, S)
    next_actions = next_obs @ lin.T
    for e in range(2):
        residual = next_actions - next_obs @ gains[e].T  # (B*N, A)
        dz_da = -2 * residual
        dz_ds = 2 * residual @ gains[e]
        expected = c + gamma * (dz_ds + dz_da @ lin) @ p  # (B*N, A)
        torch.testing.assert_close(targets[:, e * 4 : (e + 1) * 4, 1:], expected.reshape(5, 4, a_dim))


def test_sobolev_samples_give_per_sample_gradients_and_train_through_them(float64):
    torch.manual_seed(10)
    critic = dsdpg.Critic(3, 2, 8, noise_dim=4)
    obs, actions = torch.randn(4, 3), torch.rand(4, 2) * 2 - 1
    torch.manual_seed(11)
    predictions = dsdpg.sobolev_samples(critic, obs, actions, num_samples=5)
    assert predictions.shape == (2, 4, 5, 3)
    torch.manual_seed(11)
    noise = torch.randn(2, 4 * 5, 4).reshape(2, 4, 5, 4)  # the draw inside sobolev_samples
    for e in range(2):
        for b in range(4):
            for k in range(5):

                def z(a):
                    return critic(obs[b : b + 1], a[None].expand(2, 1, 2), noise[:, b, k][:, None])[e, 0]

                torch.testing.assert_close(predictions[e, b, k, 0], z(actions[b]))
                torch.testing.assert_close(predictions[e, b, k, 1:], torch.func.jacrev(z)(actions[b]))
    # a loss on the gradient coordinates alone reaches the parameters (double backprop), and correctly so
    loss = predictions[..., 1:].pow(2).sum()
    loss.backward()
    grad = critic.fc1.weight.grad[0, 3, 0].item()  # the weight from action input 0 to unit 0 of critic 1

    def loss_with_weight_shifted(shift: float) -> float:
        with torch.no_grad():
            critic.fc1.weight[0, 3, 0] += shift
        torch.manual_seed(11)
        value = dsdpg.sobolev_samples(critic, obs, actions, 5)[..., 1:].pow(2).sum().item()
        with torch.no_grad():
            critic.fc1.weight[0, 3, 0] -= shift
        return value

    plus, minus = loss_with_weight_shifted(1e-6), loss_with_weight_shifted(-1e-6)
    assert grad != 0.0 and grad == pytest.approx((plus - minus) / 2e-6, rel=1e-5)


def test_mage_targets_match_finite_differences(float64):
    torch.manual_seed(12)
    world_model = mage.WorldModel(3, 2, hidden_dim=8)
    actor = mage.Actor(3, 2, 8).requires_grad_(False)
    critic = mage.Critic(3, 2, 8).requires_grad_(False)
    obs, actions = torch.randn(6, 3), torch.rand(6, 2) * 1.6 - 0.8

    def targets_at(a):
        torch.manual_seed(5)
        batch = replay_buffer.ReplayBatch(obs, a, torch.zeros(6), torch.zeros(6, 3), torch.zeros(6))
        return mage.sobolev_targets(batch, world_model, actor, critic, 0.99, 0.2, 0.5, dyna_reward="model")

    targets = targets_at(actions)
    assert targets.shape == (6, 3)
    for j in range(2):
        step = torch.zeros(2)
        step[j] = 1e-6
        finite_difference = (targets_at(actions + step)[:, 0] - targets_at(actions - step)[:, 0]) / 2e-6
        torch.testing.assert_close(targets[:, 1 + j], finite_difference, rtol=1e-5, atol=1e-7)


def test_mage_loss_by_hand():
    predictions = torch.tensor([[[1.0, 0.5, -2.0]], [[0.0, 0.0, 0.0]]])  # (E=2, B=1, 1+A)
    targets = torch.tensor([[0.0, 0.0, 0.0]])
    # critic 1: value error 1 -> 0.5; gradient errors 0.5 -> 0.125 and 2 -> 1.5; critic 2: 0
    assert mage.critic_loss(predictions, targets, 5.0).item() == pytest.approx(0.5 + 5 * (0.125 + 1.5))
    # --td-loss mse, MAGE's own L2 form: value error 1 -> 1; gradient errors 0.5 -> 0.25 and 2 -> 4
    assert mage.critic_loss(predictions, targets, 5.0, "mse").item() == pytest.approx(1.0 + 5 * (0.25 + 4.0))


# END TO END
@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(TINY_FLAGS))
@pytest.mark.parametrize("env_flags", [["--env-id", "PointMass-v0"], ["--env-id", "Hopper-v4", "--obs-noise", "mult"]])
def test_scripts_run_end_to_end(tmp_path, script, env_flags):
    result = run_script(script, *env_flags, *TINY_FLAGS[script], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    scalars = read_scalars(run_dir)
    for tag in [
        "losses/qf_loss",
        "losses/actor_loss",
        "losses/qf1_values",
        "losses/qf1_action_grad_norm",
        "losses/target_action_grad_norm",
        "losses/world_model_loss",
        "charts/SPS",
        "eval/episodic_return",
    ]:
        assert scalars[tag] and all(math.isfinite(v) for _, v in scalars[tag]), tag
    if "msmmd" in script:
        assert all(v > 0 for _, v in scalars["losses/slice_gain"])
    summary = read_summary(run_dir)
    assert summary["eval_steps"] == [100, 200] and len(summary["eval_returns"]) == 2


@pytest.mark.parametrize(
    "script, flags, message",
    [
        ("dsdpg_mmd_sobolev.py", ["--truncation", "100"], "--truncation"),
        ("dsdpg_mmd_sobolev.py", ["--num-samples", "1"], "--num-samples"),
        ("dsdpg_msmmd_sobolev.py", ["--slice-lr", "0"], "--slice-lr"),
        ("mage_huber_sobolev.py", ["--grad-loss-weight", "-1"], "--grad-loss-weight"),
        ("dsdpg_msmmd_sobolev.py", ["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    ],
)
def test_bad_flags_print_one_line(tmp_path, script, flags, message):
    result = run_script_in_process(script, *flags, cwd=tmp_path)
    lines = error_lines(result)
    assert result.returncode != 0 and len(lines) == 1 and message in lines[0], result.stderr
