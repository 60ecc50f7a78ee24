"""Tests of td3_huber.py: its env, networks and targets against independent computations, the world model against a
known stochastic system, and the script end to end as a user runs it (the noise wrappers: test_noise_wrappers.py; the
replay buffer: test_replay_buffer.py)."""

import dataclasses
import math
import shutil

import run_bookkeeping

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import error_lines, only_run_dir, read_scalars, read_summary, run_script, run_script_in_process

import td3_huber
from replay_buffer import ReplayBatch
from td3_huber import Args, Critic, RunningNormaliser, WorldModel, critic_loss, make_env, td_targets

TINY = [
    *(
        "--learning-starts 200 --hidden-dim 32 --wm-hidden-dim 32 --updates-per-step 2 --eval-frequency 200 "
        "--eval-episodes 2 --batch-size 64"
    ).split()
]


# ENV HELPERS
def test_multiplicative_noise_observation_space_contains_scaled_flags():
    env = make_env(Args(env_id="PointMass-v0", obs_noise="mult", obs_noise_scale=0.3))
    assert env.observation_space.high[-1] == pytest.approx(1.3)
    assert env.observation_space.dtype == np.float32


# NETWORKS, TARGETS, LOSSES
def test_ensemble_critic_equals_two_independent_networks():
    torch.manual_seed(0)
    critic = Critic(obs_dim=3, act_dim=2, hidden_dim=8)
    obs, actions = torch.randn(5, 3), torch.randn(5, 2)
    q = critic(obs, actions)
    assert q.shape == (2, 5)
    for e in range(2):
        x = torch.cat([obs, actions], -1)
        h = F.silu(x @ critic.fc1.weight[e] + critic.fc1.bias[e])
        h = F.silu(torch.cat([h, x], -1) @ critic.fc2.weight[e] + critic.fc2.bias[e])
        torch.testing.assert_close(q[e], (h @ critic.fc3.weight[e] + critic.fc3.bias[e])[:, 0])


def test_first_critic_alone_equals_critic_one_of_the_pair_and_trains_only_the_actor():
    """The actor's loss evaluates critic 1 alone (num_critics=1) and differentiates only into the actor."""
    torch.manual_seed(0)
    critic, actor = Critic(obs_dim=3, act_dim=2, hidden_dim=8), td3_huber.Actor(3, 2, 8)
    obs = torch.randn(5, 3)
    alone = critic(obs, actor(obs), num_critics=1)
    assert alone.shape == (1, 5)
    torch.testing.assert_close(alone[0], critic(obs, actor(obs))[0])  # equal up to the matmul kernels rounding
    (-alone[0].mean()).backward(inputs=list(actor.parameters()))
    assert all(p.grad is None for p in critic.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())


def test_td_targets_take_the_minimum_and_mask_terminal_states():
    torch.manual_seed(0)
    actor, critic = td3_huber.Actor(3, 2, 8), Critic(3, 2, 8)
    rewards, next_obs = torch.tensor([1.0, -2.0, 0.5]), torch.randn(3, 3)
    terminations = torch.tensor([0.0, 1.0, 0.0])
    batch = ReplayBatch(torch.randn(3, 3), torch.randn(3, 2), rewards, next_obs, terminations)
    targets = td_targets(batch, None, actor, critic, gamma=0.9, policy_noise=0.0, noise_clip=0.5)
    with torch.no_grad():
        q = critic(next_obs, actor(next_obs))
    expected = [1.0 + 0.9 * min(q[0, 0], q[1, 0]), -2.0, 0.5 + 0.9 * min(q[0, 2], q[1, 2])]
    torch.testing.assert_close(targets, torch.tensor(expected))


def test_huber_critic_loss_by_hand():
    q = torch.tensor([[0.0, 3.0], [1.0, -1.0]])
    targets = torch.tensor([0.5, 0.0])
    # critic 1: errors 0.5 (quadratic 0.125), 3 (linear 2.5); critic 2: 0.5 (0.125), 1 (boundary 0.5)
    assert critic_loss(q, targets).item() == pytest.approx((0.125 + 2.5) / 2 + (0.125 + 0.5) / 2)
    assert critic_loss(q, targets, "huber").item() == critic_loss(q, targets).item()


def test_mse_critic_loss_by_hand():
    q = torch.tensor([[0.0, 3.0], [1.0, -1.0]])
    targets = torch.tensor([0.5, 0.0])
    # Fujimoto's TD3: the squared errors' mean per critic, summed: critic 1 (0.25 + 9) / 2, critic 2 (0.25 + 1) / 2
    assert critic_loss(q, targets, "mse").item() == pytest.approx((0.25 + 9.0) / 2 + (0.25 + 1.0) / 2)


@pytest.mark.parametrize("td_loss", ["huber", "mse"])
def test_the_critic_update_uses_the_td_loss_flag(tmp_path, monkeypatch, td_loss):
    """--td-loss reaches the loss the script's critic update computes (the call site, not only the function)."""
    seen = []
    loss = td3_huber.critic_loss

    def recorded(predictions, targets, *rest):
        seen.append(rest)
        return loss(predictions, targets, *rest)

    monkeypatch.setattr(td3_huber, "critic_loss", recorded)
    monkeypatch.chdir(tmp_path)
    args = Args(
        env_id="PointMass-v0", dyna=False, total_timesteps=120, learning_starts=100, hidden_dim=16, batch_size=16
    )
    td3_huber.main(dataclasses.replace(args, updates_per_step=1, eval_frequency=120, eval_episodes=1, td_loss=td_loss))
    assert len(seen) >= 20 and set(seen) == {(td_loss,)}  # 20 steps of 1 update (and the CPU note's priced one)
    assert read_summary(only_run_dir(tmp_path))["args"]["td_loss"] == td_loss


def test_running_normaliser_matches_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4)) * np.array([1, 10, 0.1, 0.0])
    normaliser = RunningNormaliser(4, min_std=1e-2)
    for chunk in np.split(data, [1, 2, 50, 51, 400]):
        normaliser.update(torch.as_tensor(chunk, dtype=torch.float32))
    np.testing.assert_allclose(normaliser.mean.numpy(), data.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(normaliser.std.numpy(), np.maximum(data.std(0), 1e-2), rtol=1e-5)
    x = torch.randn(7, 4)
    torch.testing.assert_close(normaliser.denormalise(normaliser.normalise(x)), x)


# WORLD MODEL
def test_world_model_normaliser_tracks_states_actions_deltas_and_rewards():
    """One running normaliser over (s, a, s' - s, r), fed one transition at a time as the training loop does: its
    statistics are each quantity's, the conditioning input uses the (s, a) part, samples map back with the (ds, r)
    part."""
    rng = np.random.default_rng(0)
    obs, actions = rng.normal(2.0, 3.0, (300, 2)), rng.uniform(-1.0, 1.0, (300, 1))
    next_obs, rewards = obs + rng.normal(0.5, 0.1, (300, 2)), rng.normal(-1.0, 4.0, (300, 1))
    model = WorldModel(obs_dim=2, act_dim=1, hidden_dim=8)
    for row in range(300):
        model.update_normaliser(
            *(torch.as_tensor(x[row], dtype=torch.float32) for x in (obs, actions, rewards, next_obs))
        )
    transitions = np.concatenate([obs, actions, next_obs - obs, rewards], 1)  # (300, 6)
    mean, std = transitions.mean(0), transitions.std(0)
    np.testing.assert_allclose(model.normaliser.mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.normaliser.std.numpy(), std, rtol=1e-5)

    s, a = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.3]])
    np.testing.assert_allclose(
        model.condition(s, a)[0].numpy(), (np.array([1.0, -2.0, 0.3]) - mean[:3]) / std[:3], rtol=1e-5
    )
    with torch.no_grad():  # the decoder outputs 1 in normalised coordinates: one std above the mean of (ds, r)
        model.decoder.out.weight.zero_()
        model.decoder.out.bias.fill_(1.0)
        sampled_next, sampled_rewards = model.sample(s, a, 3)  # (1, 3, 2), (1, 3)
    np.testing.assert_allclose(sampled_next[0].numpy(), np.tile([1.0, -2.0] + mean[3:5] + std[3:5], (3, 1)), rtol=1e-5)
    np.testing.assert_allclose(sampled_rewards[0].numpy(), np.full(3, mean[5] + std[5]), rtol=1e-5)


@pytest.mark.slow
def test_world_model_fits_a_known_stochastic_system():
    """s' = s + B a + diag(sigma) e, r = a + 0.5 x: the cVAE's samples match the mean, spread and action-gradients."""
    torch.manual_seed(0)
    b_true, sigma, reward_std = torch.tensor([0.5, -1.0]), torch.tensor([0.3, 0.6]), 0.5
    n = 20_000
    obs, actions = torch.randn(n, 2), torch.rand(n, 1) * 2 - 1
    next_obs = obs + actions * b_true + sigma * torch.randn(n, 2)
    rewards = actions[:, 0] + reward_std * torch.randn(n)
    model = WorldModel(obs_dim=2, act_dim=1, hidden_dim=64)
    model.update_normaliser(obs, actions, rewards[:, None], next_obs)
    optimizer = torch.optim.RAdam(model.parameters(), lr=1e-3)
    for _ in range(3000):
        idx = torch.randint(0, n, (256,))
        loss = model.loss(obs[idx], actions[idx], rewards[idx], next_obs[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for s, a in [((0.3, -0.5), 0.4), ((-1.0, 1.0), -0.7)]:
        s_rep = torch.tensor([s]).repeat(4000, 1)
        a_rep = torch.full((4000, 1), a, requires_grad=True)  # one action leaf per sample: per-sample gradients
        sampled_next, sampled_rewards = model.sample(s_rep, a_rep, 1)
        sampled_next, sampled_rewards = sampled_next[:, 0], sampled_rewards[:, 0]  # (4000, 2), (4000,)
        torch.testing.assert_close(sampled_next.mean(0), torch.tensor(s) + a * b_true, atol=0.06, rtol=0)
        torch.testing.assert_close(sampled_next.std(0), sigma, rtol=0.15, atol=0)
        assert sampled_rewards.mean().item() == pytest.approx(a, abs=0.06)
        assert sampled_rewards.std().item() == pytest.approx(reward_std, rel=0.2)
        for j in range(2):
            grads = torch.autograd.grad(sampled_next[:, j].sum(), a_rep, retain_graph=True)[0][:, 0]  # (4000,)
            assert grads.mean().item() == pytest.approx(b_true[j].item(), abs=0.1)
            assert grads.std().item() < 0.1  # additive noise: every sample has gradient B
        reward_grads = torch.autograd.grad(sampled_rewards.sum(), a_rep)[0][:, 0]
        assert reward_grads.mean().item() == pytest.approx(1.0, abs=0.1)


# END TO END
@pytest.mark.slow
def test_pointmass_run_logs_the_cleanrl_tags_and_writes_a_summary(tmp_path):
    result = run_script(
        *(
            "td3_huber.py --env-id PointMass-v0 --total-timesteps 600 --learning-starts 200 --hidden-dim 64 "
            "--wm-hidden-dim 64 --updates-per-step 2 --eval-frequency 200 --eval-episodes 2"
        ).split(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    scalars = read_scalars(run_dir)
    for tag in [
        "charts/episodic_return",
        "charts/episodic_length",
        "charts/SPS",
        "losses/qf_loss",
        "losses/actor_loss",
        "losses/qf1_values",
        "losses/qf2_values",
        "losses/world_model_loss",
    ]:
        assert scalars[tag], tag
    assert all(math.isfinite(v) for tag in scalars for _, v in scalars[tag])
    assert {v for _, v in scalars["charts/episodic_length"]} <= set(range(1, 26))
    assert [step for step, _ in scalars["eval/episodic_return"]] == [200, 400, 600]
    summary = read_summary(run_dir)
    assert summary["eval_steps"] == [200, 400, 600]
    assert summary["eval_returns"] == pytest.approx([v for _, v in scalars["eval/episodic_return"]])
    assert summary["final_eval_return"] == summary["eval_returns"][-1]
    assert summary["nauc"] == pytest.approx(np.mean(summary["eval_returns"]))
    assert all(r in (0.0, 5.0, 10.0) for r in summary["eval_returns"])  # 2 episodes, each 0 or 10
    assert summary["args"]["env_id"] == "PointMass-v0" and summary["args"]["dyna"] is True
    q_values = [value for _, value in scalars["losses/qf1_values"]]  # steps 200-500: all within the last 2 000 steps
    assert summary["critic_values"] == {
        "tag": "losses/qf1_values",
        "window_steps": 2000,
        "mean": pytest.approx(np.mean(q_values)),
        "max": pytest.approx(max(q_values)),
    }
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert checkpoint["global_step"] == 600 and checkpoint["replay_buffer"]["size"] == 600


@pytest.mark.slow
def test_model_free_mujoco_run_with_both_noises(tmp_path):
    result = run_script(
        *(
            "td3_huber.py --env-id Hopper-v4 --no-dyna --obs-noise mult --dyn-noise gauss --total-timesteps 400 "
            "--save-model"
        ).split(),
        *" ".join(TINY).replace(" --wm-hidden-dim 32", "").split(),  # --no-dyna refuses world-model flags
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    scalars = read_scalars(run_dir)
    assert "losses/world_model_loss" not in scalars and scalars["losses/qf_loss"]
    assert [step for step, _ in scalars["eval/episodic_return"]] == [200, 400]
    summary = read_summary(run_dir)
    assert summary["args"]["dyna"] is False and summary["args"]["obs_noise"] == "mult"
    model = torch.load(run_dir / "model.pt", weights_only=True)
    actor = td3_huber.Actor(11, 3, 32)
    actor.load_state_dict(model["actor"])
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)  # --no-dyna builds no world model
    assert "world_model" not in checkpoint and "wm_optimizer" not in checkpoint and checkpoint["global_step"] == 400


@pytest.mark.slow
def test_resume_continues_exactly_as_an_uninterrupted_run(tmp_path, monkeypatch):
    """A run checkpointed at an episode end and resumed ends with the same weights as the same run left alone."""
    monkeypatch.chdir(tmp_path)
    saved_steps = []
    save = run_bookkeeping.save_checkpoint

    def keep_every_checkpoint(path, state):
        save(path, state)
        saved_steps.append(state["global_step"])
        shutil.copy(path, tmp_path / f"kept_{state['global_step']}.pt")

    monkeypatch.setattr(run_bookkeeping, "save_checkpoint", keep_every_checkpoint)
    common = dict(
        env_id="PointMass-v0",
        total_timesteps=500,
        learning_starts=150,
        hidden_dim=32,
        wm_hidden_dim=32,
        updates_per_step=2,
        batch_size=32,
        eval_frequency=250,
        eval_episodes=2,
    )
    td3_huber.main(Args(**common, checkpoint_frequency=200))
    first_periodic = saved_steps[0]
    assert 200 <= first_periodic < 250 and saved_steps[-1] == 500
    uninterrupted = torch.load(tmp_path / "kept_500.pt", weights_only=True)

    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(tmp_path / f"kept_{first_periodic}.pt", resumed_dir / "checkpoint.pt")
    td3_huber.main(Args(resume=str(resumed_dir / "checkpoint.pt"), total_timesteps=500))
    resumed = torch.load(resumed_dir / "checkpoint.pt", weights_only=True)

    for key in ["actor", "critic", "target_critic", "world_model"]:
        for name, value in uninterrupted[key].items():
            torch.testing.assert_close(resumed[key][name], value, rtol=0, atol=0, msg=f"{key}.{name}")
    assert resumed["eval_returns"] == uninterrupted["eval_returns"]
    assert resumed["env_rng"] == uninterrupted["env_rng"]
    torch.testing.assert_close(resumed["replay_buffer"]["obs"], uninterrupted["replay_buffer"]["obs"])
    assert read_summary(resumed_dir)["eval_steps"] == [250, 500]
    kept = torch.load(tmp_path / f"kept_{first_periodic}.pt", weights_only=True)
    assert read_summary(resumed_dir)["wall_time_s"] > kept["wall_time_s"] > 0  # time before the stop is counted


@pytest.mark.slow
def test_resuming_a_checkpoint_that_does_not_fit_the_networks_fails_in_one_line(tmp_path):
    """A checkpoint whose world model has other parameter names (as an older version of the script wrote: four
    normalisers) is refused with one line naming the checkpoint, not a traceback."""
    flags = ("--env-id", "PointMass-v0", "--total-timesteps", "60", *TINY, "--learning-starts", "40")
    result = run_script("td3_huber.py", *flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    path = only_run_dir(tmp_path) / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    state["world_model"] = {
        name.replace("normaliser.", "obs_normaliser."): value for name, value in state["world_model"].items()
    }
    torch.save(state, path)
    result = run_script_in_process("td3_huber.py", "--resume", str(path), "--total-timesteps", "80", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = error_lines(result)
    assert len(lines) == 1 and "cannot resume from" in lines[0] and "obs_normaliser" in lines[0], result.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--env-id", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
        (["--env-id", "CartPole-v1"], "Discrete action space"),
        (["--env-id", "Pendulum-v1", "--dyn-noise", "gauss"], "MuJoCo"),
        (["--gamma", "1.5"], "--gamma"),
        (["--batch-size", "0"], "--batch-size"),
        (["--obs-noise-scale", "1.0"], "--obs-noise-scale"),
        (["--resume", "no/such/checkpoint.pt"], "--resume"),
    ],
)
def test_bad_input_prints_one_line_and_exits_non_zero(tmp_path, flags, message):
    result = run_script_in_process("td3_huber.py", *flags, cwd=tmp_path)
    assert result.returncode != 0
    lines = error_lines(result)
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_bad_choice_gets_a_usage_error(tmp_path):
    result = run_script("td3_huber.py", "--obs-noise", "loud", cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr and "loud" in result.stderr


@pytest.mark.slow
def test_non_finite_loss_stops_with_a_checkpoint(tmp_path):
    result = run_script(
        "td3_huber.py",
        "--env-id",
        "PointMass-v0",
        "--total-timesteps",
        "600",
        "--learning-rate",
        "1e30",
        *TINY,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    lines = error_lines(result)
    assert "non-finite loss at step" in lines[-1] and "Traceback" not in result.stderr
    state = torch.load(only_run_dir(tmp_path) / "nonfinite_checkpoint.pt", weights_only=True)
    assert state["global_step"] > 200


@pytest.mark.slow
def test_a_world_model_that_diverges_in_the_warm_up_stops_the_run_there(tmp_path):
    """The finite check covers the world model's steps before learning starts: a NaN there stops the run at the
    first check (step 100), not only once the critic starts learning (step 400 here)."""
    flags = ("--env-id", "PointMass-v0", "--total-timesteps", "500", "--wm-learning-rate", "1e30", *TINY)
    result = run_script("td3_huber.py", *flags, "--learning-starts", "400", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = error_lines(result)
    assert "non-finite loss at step 100 " in line and "world_model_loss=nan" in line
    state = torch.load(only_run_dir(tmp_path) / "nonfinite_checkpoint.pt", weights_only=True)
    assert state["global_step"] == 101
