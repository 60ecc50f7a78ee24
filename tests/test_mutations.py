"""Tests that kill one-line mutations of the maths the other tests let through: the actor step's direction, the TQC
truncation as the critic update calls it, TD3's target smoothing, IQN's loss and quantile fractions, mmd_critic's
unbiased estimator, the cVAE prior's spread and its loss's KL term, the max-sliced loss's direction, the target
networks' Polyak step and the target smoothing's two flags as update_critic passes them. Each expectation is computed
independently (a loop, a hand-reproduced noise draw, a first-order prediction, the optimizer's own step recorded by a
hook); the update closures are reached as main() builds them: main() runs up to run.start, where they are read from its
frame, and stops there."""

import copy
import dataclasses
import importlib
import inspect
import math

import run_bookkeeping

import pytest
import torch
from helpers import RL_SCRIPTS, dyna_batch, tiny_target_networks
from test_losses_independent import loss_loop

import dsdpg_msmmd_sobolev
import iqn
import mmd_critic
import replay_buffer
import td3_huber

TRUNCATING = {  # script -> its target function and where critic_loss takes the targets
    "mmd_critic": ("return_targets", 1),
    "iqn": ("return_targets", 2),
    "dsdpg_mmd_sobolev": ("sobolev_targets", 1),
    "dsdpg_msmmd_sobolev": ("sobolev_targets", 1),
}
DISTRIBUTIONAL = ("mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev")


class Started(Exception):
    """Raised by the patched Run.start: main() has built its networks and updates and stops before its loop."""


def built_run(name: str, monkeypatch, tmp_path, **flags) -> dict:
    """main() of script `name` on PointMass-v0, tiny, on the CPU, run up to run.start and stopped there: its args,
    `stateful` (networks, optimizers, replay buffer by name), update_critic, update_actor, obs_dim and act_dim. `flags`
    set Args fields; those the script lacks (e.g. num_samples_policy for TD3) are left out."""
    module = importlib.import_module(name)
    captured = {}

    def start(self, stateful, device):
        built = inspect.currentframe().f_back.f_locals  # main()'s own variables, as it calls run.start
        captured.update(run=self, stateful=stateful, updates=(built["update_critic"], built["update_actor"]))
        raise Started

    monkeypatch.setattr(run_bookkeeping.Run, "start", start)
    monkeypatch.chdir(tmp_path)
    settings = dict(env_id="PointMass-v0", cuda=False, seed=0, hidden_dim=16, wm_hidden_dim=16, batch_size=16)
    settings.update(buffer_size=1000, **flags)
    fields = {field.name for field in dataclasses.fields(module.Args)}
    with pytest.raises(Started):
        module.main(module.Args(**{key: value for key, value in settings.items() if key in fields}))
    run = captured["run"]
    obs_dim, act_dim = run.env.observation_space.shape[0], run.env.action_space.shape[0]
    run.env.close()
    run.eval_env.close()
    update_critic, update_actor = captured["updates"]
    return dict(
        module=module,
        args=run.args,
        stateful=captured["stateful"],
        update_critic=update_critic,
        update_actor=update_actor,
        obs_dim=obs_dim,
        act_dim=act_dim,
    )


# THE ACTOR STEP
def critic_one_value(critic, actor, obs: torch.Tensor, draws: torch.Tensor | None) -> torch.Tensor:
    """J = mean over the batch of critic 1's value at (s, pi(s)): Q_1 (TD3, MAGE), or the mean of Z_1(s, pi(s), .) over
    the fixed noise draws / quantile levels `draws` (1, B*M[, noise_dim]) (the distributional critics)."""
    actions = actor(obs)
    if draws is None:
        return critic(obs, actions, num_critics=1)[0].mean()
    m = draws.shape[1] // obs.shape[0]
    return critic(obs.repeat_interleave(m, 0), actions.repeat_interleave(m, 0), draws)[0].mean()


@pytest.mark.parametrize("name", RL_SCRIPTS)
def test_an_actor_step_raises_the_critics_value(name, monkeypatch, tmp_path):
    """One update_actor step on a fixed batch raises critic 1's value J at the actor's actions by about the first-order
    prediction lr |dJ/dphi|^2 (the optimizer's first step, RAdam's un-adapted one, is gradient ascent with step lr):
    it fails if the actor minimises the critic (J falls) or never updates (J stays). J in float64 on copies of the
    networks, its change being small."""
    lr = 1e-2
    run = built_run(name, monkeypatch, tmp_path, learning_rate=lr, num_samples_policy=256)
    actor, critic = run["stateful"]["actor"], run["stateful"]["critic"]
    torch.manual_seed(1)
    obs = torch.randn(16, run["obs_dim"])
    draws = None  # common random numbers: the same draws before and after the step
    if name == "iqn":
        draws = torch.rand(1, 16 * 256, dtype=torch.float64)
    elif name in DISTRIBUTIONAL:
        draws = torch.randn(1, 16 * 256, critic.noise_dim, dtype=torch.float64)
    critic64, actor64 = copy.deepcopy(critic).double(), copy.deepcopy(actor).double()
    value = critic_one_value(critic64, actor64, obs.double(), draws)
    gradient = torch.autograd.grad(value, list(actor64.parameters()))
    predicted = lr * sum(g.pow(2).sum() for g in gradient).item()
    before = [p.detach().clone() for p in actor.parameters()]
    critic_before = [p.detach().clone() for p in critic.parameters()]
    run["update_actor"](obs)
    assert any(not torch.equal(p, q) for p, q in zip(actor.parameters(), before)), "the actor did not move"
    assert all(torch.equal(p, q) for p, q in zip(critic.parameters(), critic_before))  # the critic is not trained here
    with torch.no_grad():
        change = (critic_one_value(critic64, copy.deepcopy(actor).double(), obs.double(), draws) - value).item()
    assert predicted > 1e-6, predicted  # a measurable step
    assert 0.8 * predicted < change < 1.2 * predicted, (change, predicted)


# THE TQC TRUNCATION AS THE CRITIC UPDATE CALLS IT
def fill_replay_buffer(rb: replay_buffer.ReplayBuffer, obs_dim: int, act_dim: int, rows: int = 32) -> None:
    generator = torch.Generator().manual_seed(3)
    for _ in range(rows):
        obs = torch.randn(obs_dim, generator=generator)
        action = torch.rand(act_dim, generator=generator) * 2 - 1
        reward = float(torch.randn((), generator=generator))
        rb.add(obs, action, reward, obs + 0.1 * torch.randn(obs_dim, generator=generator), False)


@pytest.mark.parametrize("name", sorted(TRUNCATING))
def test_the_critic_update_trains_on_the_truncated_targets(name, monkeypatch, tmp_path):
    """update_critic hands critic_loss, per pair, exactly the 2N - round(2N p / 100) target points of smallest return (a
    sort of the targets it computed), and its loss is the loss against those, not against all 2N."""
    target_function, position = TRUNCATING[name]
    flags = dict(num_samples=4, truncation=25.0, noise_dim=8, num_cosines=8, slice_steps=3, kernel_bandwidth=1.0)
    run = built_run(name, monkeypatch, tmp_path, **flags)
    module, args = run["module"], run["args"]
    fill_replay_buffer(run["stateful"]["replay_buffer"], run["obs_dim"], run["act_dim"])
    computed, calls = [], []
    original_targets, original_loss = getattr(module, target_function), module.critic_loss

    def recorded_targets(*inputs, **keywords):
        computed.append(original_targets(*inputs, **keywords))
        return computed[-1]

    def recorded_loss(*inputs):
        calls.append(inputs)
        return original_loss(*inputs)

    monkeypatch.setattr(module, target_function, recorded_targets)
    monkeypatch.setattr(module, "critic_loss", recorded_loss)
    torch.manual_seed(4)
    qf_loss = run["update_critic"]()["qf_loss"]
    assert len(computed) == len(calls) == 1
    full, used = computed[0], calls[0][position]
    n = full.shape[1]
    assert n == 2 * args.num_samples
    keep = n - round(n * args.truncation / 100)
    assert keep == 6
    expected = []
    for points, used_points in zip(full.tolist(), used.tolist()):
        kept = sorted(points, key=lambda point: point[0])[:keep]
        assert sorted(map(tuple, used_points)) == sorted(map(tuple, kept))
        expected.append(kept)
    expected = torch.tensor(expected, dtype=full.dtype)

    def loss_against(targets: torch.Tensor) -> float:
        inputs = [x.detach() if isinstance(x, torch.Tensor) else x for x in calls[0]]
        inputs[position] = targets
        with torch.no_grad():
            loss = original_loss(*inputs)
        return (loss[0] if isinstance(loss, tuple) else loss).item()

    qf_loss = qf_loss.item()
    assert qf_loss == pytest.approx(loss_against(expected), rel=1e-5, abs=1e-7)
    assert not math.isclose(qf_loss, loss_against(full), rel_tol=1e-3)


# TD3'S TARGET SMOOTHING
def test_td3_targets_use_the_noise_clip_and_clamp_the_smoothed_action():
    """y = r + gamma (1 - d) min_c Q'_c(s', clamp(pi'(s') + clip(sigma eps, -c, c), -1, 1)), eps the draw td_targets
    makes, with sigma = 0.5 > c = 0.2 and pi'(s') near +-1, so that both the clip and the clamp bind."""
    torch.manual_seed(0)
    critic = td3_huber.Critic(3, 2, 8).requires_grad_(False)
    batch = 32
    policy_actions = torch.tensor([[0.9, -0.95], [-0.9, 0.95], [0.3, 0.99], [-0.99, -0.2]]).repeat(batch // 4, 1)
    target_actor = lambda next_obs: policy_actions  # noqa: E731 (a policy whose outputs sit near the bounds)
    rewards, next_obs = torch.randn(batch), torch.randn(batch, 3)
    terminations = (torch.arange(batch) % 5 == 0).float()
    data = replay_buffer.ReplayBatch(torch.randn(batch, 3), torch.randn(batch, 2), rewards, next_obs, terminations)
    torch.manual_seed(5)
    targets = td3_huber.td_targets(data, None, target_actor, critic, 0.9, policy_noise=0.5, noise_clip=0.2)
    torch.manual_seed(5)
    eps = torch.randn(batch, 2)  # the smoothing draw inside td_targets

    def targets_with(clip: float, low: float, high: float) -> torch.Tensor:
        actions = (policy_actions + (0.5 * eps).clamp(-clip, clip)).clamp(low, high)
        q = critic(next_obs, actions)
        return rewards + 0.9 * (1 - terminations) * torch.minimum(q[0], q[1])

    torch.testing.assert_close(targets, targets_with(0.2, -1.0, 1.0))
    assert ((0.5 * eps).abs() > 0.2).float().mean() > 0.3  # the clip binds on many draws
    assert ((policy_actions + (0.5 * eps).clamp(-0.2, 0.2)).abs() > 1).float().mean() > 0.1  # so does the clamp
    assert not torch.allclose(targets, targets_with(0.5, -1.0, 1.0))  # noise clipped at policy_noise
    assert not torch.allclose(targets, targets_with(0.2, -math.inf, math.inf))  # action not clamped


# IQN
def huber(error: float) -> float:
    return 0.5 * error * error if abs(error) <= 1 else abs(error) - 0.5


def iqn_loss_loop(quantiles: list, taus: list, targets: list) -> float:
    """README: for each transition, the sum over the N predicted quantiles of the mean over the K kept targets of
    |tau - 1{y < z}| Huber_1(y - z); mean over the batch, summed over the critics."""
    total = 0.0
    for critic_quantiles, critic_taus in zip(quantiles, taus):
        per_transition = []
        for zs, levels, ys in zip(critic_quantiles, critic_taus, targets):
            per_quantile = []
            for z, tau in zip(zs, levels):
                terms = [abs(tau - (1.0 if y < z else 0.0)) * huber(y - z) for (y,) in ys]
                per_quantile.append(sum(terms) / len(terms))
            per_transition.append(sum(per_quantile))
        total += sum(per_transition) / len(per_transition)
    return total


def test_iqn_loss_matches_the_readme_formula_with_more_targets_than_quantiles():
    """K = 7 targets, N = 4 quantiles, errors on both sides of the Huber kink: swapping the two reductions scales the
    loss by K / N."""
    generator = torch.Generator().manual_seed(0)
    quantiles = torch.randn(2, 3, 4, generator=generator, dtype=torch.float64) * 2
    taus = torch.rand(2, 3, 4, generator=generator, dtype=torch.float64)
    targets = torch.randn(3, 7, 1, generator=generator, dtype=torch.float64) * 2 + 0.5
    errors = (targets[None, :, None, :, 0] - quantiles[..., None]).abs()
    assert (errors < 1).any() and (errors > 1).any()
    loss = iqn.critic_loss(quantiles, taus, targets)
    expected = iqn_loss_loop(quantiles.tolist(), taus.tolist(), targets.tolist())
    assert loss.item() == pytest.approx(expected, rel=1e-10)


class RecordingCritic:
    """A critic that records the quantile levels it is evaluated at."""

    def __init__(self, critic):
        self.critic, self.num_critics, self.levels = critic, critic.num_critics, []

    def __call__(self, obs, actions, taus):
        self.levels.append(taus)
        return self.critic(obs, actions, taus)


def test_iqn_target_quantile_levels_are_uniform_draws():
    """The target critics are evaluated at fresh U(0, 1) levels tau'_ck, one per critic and sample: 2 x 8 x 16 distinct
    levels whose empirical law is within a Kolmogorov distance 0.1 of U(0, 1) (not a constant 0.5)."""
    world_model, actor, critic = tiny_target_networks(iqn, "cvae", seed=0)
    recorder = RecordingCritic(critic)
    torch.manual_seed(1)
    obs, actions = torch.randn(8, 3), torch.rand(8, 2) * 2 - 1
    batch = dyna_batch(obs, actions, torch.zeros(8), torch.zeros(8))
    targets = iqn.return_targets(batch, world_model, actor, recorder, 0.9, 0.2, 0.5, 16)
    assert targets.shape == (8, 32, 1) and len(recorder.levels) == 1
    levels = recorder.levels[0]
    assert levels.shape == (2, 8 * 16)
    flat = levels.flatten().sort().values
    assert flat.unique().numel() == flat.numel() and 0 < flat[0] and flat[-1] < 1
    uniform = (torch.arange(flat.numel()) + 0.5) / flat.numel()
    assert (flat - uniform).abs().max() < 0.1
    assert targets[0, :16].std() > 0 and targets[0, 16:].std() > 0


def test_iqn_predicted_quantiles_are_at_the_levels_returned():
    """return_samples' quantiles are the critics' values at the levels it returns (those the loss weights with)."""
    torch.manual_seed(2)
    critic = iqn.Critic(3, 2, 8, num_cosines=4)
    obs, actions = torch.randn(5, 3), torch.randn(5, 2)
    quantiles, taus = iqn.return_samples(critic, obs, actions, 6)
    assert taus.shape == (2, 5, 6) and taus.flatten().unique().numel() == 60
    for b in range(5):
        for j in range(6):
            value = critic(obs[b : b + 1], actions[b : b + 1], taus[:, b, j : j + 1])[:, 0]
            torch.testing.assert_close(quantiles[:, b, j], value)


# MMD_CRITIC'S ESTIMATORS
@pytest.mark.parametrize("estimator", ["biased", "unbiased"])
def test_mmd_critic_loss_on_returns_matches_a_loop(estimator):
    """mmd_critic.critic_loss on 1-D returns (its use), n = 4 predictions and m = 6 targets, against the loops."""
    generator = torch.Generator().manual_seed(0)
    predictions = torch.randn(2, 3, 4, 1, generator=generator, dtype=torch.float64)
    targets = torch.randn(3, 6, 1, generator=generator, dtype=torch.float64) + 0.4
    loss = mmd_critic.critic_loss(predictions, targets, 2.0, estimator)
    expected = loss_loop(predictions.tolist(), targets.tolist(), 2.0, estimator)
    assert loss.item() == pytest.approx(expected, rel=1e-10)


# THE CVAE PRIOR'S SPREAD
@pytest.mark.parametrize("name", RL_SCRIPTS)
def test_cvae_samples_use_the_priors_mean_plus_its_std_times_the_noise(name):
    """The latent the decoder receives is mean + exp(log_std) * eps, with the prior's (mean, log_std) at (s, a) and the
    given eps; for the DSDPG scripts also with per-sample copies (the prior computed once per group)."""
    module = importlib.import_module(name)
    world_model, _, _ = tiny_target_networks(module, "cvae", seed=0)
    torch.nn.init.normal_(world_model.prior.out.weight, std=0.5)  # a log std far from 0
    latents = []
    world_model.decoder.register_forward_pre_hook(lambda _, inputs: latents.append(inputs[0]))
    torch.manual_seed(3)
    obs, actions = torch.randn(4, 3), torch.rand(4, 2) * 2 - 1
    noise = torch.randn(4, 5, world_model.latent_dim)
    with torch.no_grad():
        mean, log_std = world_model.gaussian(world_model.prior(world_model.condition(obs, actions)))
        world_model.sample(obs, actions, 5, noise)
    assert log_std.abs().mean() > 0.1
    expected = mean[:, None] + log_std.exp()[:, None] * noise
    torch.testing.assert_close(latents[-1][..., -world_model.latent_dim :], expected)
    if "copies" in module.WorldModel.sample.__code__.co_varnames:
        rows_obs, rows_actions = obs.repeat_interleave(5, 0), actions.repeat_interleave(5, 0)
        world_model.sample(rows_obs, rows_actions, 1, noise.reshape(20, 1, -1), copies=5)
        torch.testing.assert_close(latents[-1][..., -world_model.latent_dim :], expected.reshape(20, 1, -1))


@pytest.mark.parametrize("name", RL_SCRIPTS)
def test_cvae_loss_is_reconstruction_plus_the_weighted_kl_of_encoder_to_prior(name):
    """The world model's loss on a batch, against torch.distributions: the squared reconstruction error of the decoder
    at the encoder's reparameterised draw (the same draw, by the same seed) plus kl_weight x KL(q(eps | s, a, ds, r) ||
    p(eps | s, a)) of the two diagonal Gaussians, averaged over the batch."""
    module = importlib.import_module(name)
    world_model, _, _ = tiny_target_networks(module, "cvae", seed=0)
    torch.nn.init.normal_(world_model.prior.out.weight, std=0.5)  # prior and encoder apart, with log stds far from 0
    torch.nn.init.normal_(world_model.encoder.out.weight, std=0.5)
    torch.manual_seed(4)
    obs, actions, rewards, next_obs = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1, torch.randn(6), torch.randn(6, 3)
    torch.manual_seed(5)
    loss = world_model.loss(obs, actions, rewards, next_obs)
    with torch.no_grad():
        cond = world_model.condition(obs, actions)
        target = world_model.normaliser.normalise(
            torch.cat([next_obs - obs, rewards[:, None]], -1), world_model.out_part
        )
        q_mean, q_log_std = world_model.gaussian(world_model.encoder(torch.cat([cond, target], -1)))
        p_mean, p_log_std = world_model.gaussian(world_model.prior(cond))
        q, p = torch.distributions.Normal(q_mean, q_log_std.exp()), torch.distributions.Normal(p_mean, p_log_std.exp())
        torch.manual_seed(5)
        eps = q.loc + q.scale * torch.randn_like(q.loc)
        reconstruction = (world_model.decoder(torch.cat([cond, eps], -1)) - target).pow(2).sum(-1)
        kl = torch.distributions.kl_divergence(q, p).sum(-1)
    assert kl.mean() > 0.1  # the KL term matters here
    torch.testing.assert_close(loss, (reconstruction + world_model.kl_weight * kl).mean())


# MAX-SLICED: THE LOSS ON THE UNIT DIRECTION
def test_max_sliced_loss_is_the_mmd_along_the_returned_unit_direction():
    """With --slice-optimizer ascent, w grows (|w| > 1) but the loss is the MMD^2 projected on theta = w / |w|, the
    direction returned: checked against the loops."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 3, generator=generator, dtype=torch.float64)
    y = torch.randn(3, 5, 3, generator=generator, dtype=torch.float64) * 1.5 + 0.3
    theta0 = torch.randn(2, 3, 3, generator=generator, dtype=torch.float64)
    loss, theta = dsdpg_msmmd_sobolev.max_sliced_mmd2(x, y, 0.7, 20, 0.5, "biased", theta0, "ascent")
    torch.testing.assert_close(theta.norm(dim=-1), torch.ones(2, 3, dtype=torch.float64))
    assert (theta - torch.nn.functional.normalize(theta0, dim=-1)).abs().max() > 1e-2  # the search moved
    expected = loss_loop(x.tolist(), y.tolist(), 0.7, "biased", theta.tolist())
    assert loss.mean(1).sum().item() == pytest.approx(expected, rel=1e-10)


# THE TARGET NETWORKS' POLYAK STEP
@pytest.mark.parametrize("name", RL_SCRIPTS)
def test_the_polyak_step_moves_the_targets_towards_the_online_networks(name, monkeypatch, tmp_path):
    """With tau = 0.25 and target networks made to differ from the online ones, one update_actor call leaves every
    target parameter at (1 - tau) target + tau online (the online value after the actor's optimizer step), while the
    online networks are not pulled towards the targets: the actor keeps exactly the weights its optimizer step gave it,
    the critic (not trained by update_actor) its weights."""
    tau = 0.25
    run = built_run(name, monkeypatch, tmp_path, tau=tau, num_samples_policy=4, noise_dim=8, num_cosines=8)
    stateful = run["stateful"]
    online = {"actor": stateful["actor"], "critic": stateful["critic"]}
    targets = {"actor": stateful["target_actor"], "critic": stateful["target_critic"]}
    torch.manual_seed(1)
    with torch.no_grad():
        for target in targets.values():
            for param in target.parameters():
                param.add_(torch.randn_like(param))
    before = {part: [p.clone() for p in target.parameters()] for part, target in targets.items()}
    critic_before = [p.clone() for p in online["critic"].parameters()]
    stepped = []  # the actor's weights right after its optimizer step, before the Polyak step
    stateful["actor_optimizer"].register_step_post_hook(
        lambda *_: stepped.append([p.detach().clone() for p in online["actor"].parameters()])
    )
    run["update_actor"](torch.randn(16, run["obs_dim"]))
    assert len(stepped) == 1
    for p, q in zip(online["actor"].parameters(), stepped[0]):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg="the Polyak step moved the online actor")
    for p, q in zip(online["critic"].parameters(), critic_before):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg="the Polyak step moved the online critic")
    for part, target in targets.items():
        for p, old, new in zip(target.parameters(), before[part], online[part].parameters()):
            assert not torch.allclose(old, new)  # a step that can be seen
            torch.testing.assert_close(p, (1 - tau) * old + tau * new, msg=f"target {part}")


# THE TARGET SMOOTHING AS THE CRITIC UPDATE CALLS IT
SMOOTHED_TARGETS = {  # script -> the target function update_critic calls with --policy-noise and --noise-clip
    "td3_huber": "td_targets",
    "mage_huber_sobolev": "sobolev_targets",
    "mmd_critic": "return_targets",
    "iqn": "return_targets",
    "dsdpg_mmd_sobolev": "sobolev_targets",
    "dsdpg_msmmd_sobolev": "sobolev_targets",
}


@pytest.mark.parametrize("name", RL_SCRIPTS)
def test_the_critic_update_passes_policy_noise_and_noise_clip_to_their_parameters(name, monkeypatch, tmp_path):
    """update_critic, built by main() with --policy-noise 0.3 and --noise-clip 0.7, calls the script's target function
    once with policy_noise = 0.3 and noise_clip = 0.7 (its arguments bound to its parameter names), not swapped."""
    flags = dict(policy_noise=0.3, noise_clip=0.7, num_samples=4, noise_dim=8, num_cosines=8, slice_steps=3)
    run = built_run(name, monkeypatch, tmp_path, **flags)
    module = run["module"]
    fill_replay_buffer(run["stateful"]["replay_buffer"], run["obs_dim"], run["act_dim"])
    original = getattr(module, SMOOTHED_TARGETS[name])
    signature, calls = inspect.signature(original), []

    def recorded(*args, **kwargs):
        calls.append(signature.bind(*args, **kwargs).arguments)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, SMOOTHED_TARGETS[name], recorded)
    torch.manual_seed(4)
    run["update_critic"]()
    assert len(calls) == 1
    assert (calls[0]["policy_noise"], calls[0]["noise_clip"]) == (0.3, 0.7)
