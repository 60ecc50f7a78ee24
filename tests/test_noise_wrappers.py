"""The noise wrappers (noise_wrappers.py, the paper's noise settings) against their statistics: one multiplicative
observation factor per episode, uniform on its range; Gaussian dynamics noise of the set std on the state, keeping
MuJoCo's quaternions unit, on the point mass too; the per-env default std."""

import math

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import noise_wrappers
import pointmass_env  # noqa: F401  (registers PointMass-v0)
from noise_wrappers import GaussianDynamicsNoise, MultiplicativeObservationNoise


def test_multiplicative_noise_is_one_factor_per_episode_inside_the_range():
    env = MultiplicativeObservationNoise(gym.make("PointMass-v0"), scale=0.2)
    factors = []
    for episode in range(200):
        obs, _ = env.reset(seed=episode)
        ratios = [obs[:2] / env.unwrapped._get_obs()[:2]]  # position only: the velocity is 0 at reset
        for _ in range(5):
            obs, *_ = env.step(env.action_space.sample())
            ratios.append(obs[:4] / env.unwrapped._get_obs()[:4])
        ratios = np.concatenate(ratios)
        np.testing.assert_allclose(ratios, ratios[0], rtol=1e-5)  # constant within the episode
        factors.append(ratios[0])
    factors = np.array(factors)
    assert factors.min() >= 0.8 and factors.max() <= 1.2
    assert factors.min() < 0.82 and factors.max() > 1.18  # the whole range is used
    assert abs(factors.mean() - 1.0) < 0.03 and abs(factors.std() - 0.4 / math.sqrt(12)) < 0.02  # U[0.8, 1.2]


def dynamics_noise_samples(env_id: str, std: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(noise added to qpos, noise added to qvel) over `steps` steps: the wrapped state minus a noiseless replay."""
    noisy = GaussianDynamicsNoise(gym.make(env_id), std)
    clean = gym.make(env_id).unwrapped
    noisy.reset(seed=0)
    clean.reset(seed=0)
    base = noisy.unwrapped
    qpos_noise, qvel_noise = [], []
    for _ in range(steps):
        clean.set_state(base.data.qpos.copy(), base.data.qvel.copy())
        action = noisy.action_space.sample() * 0.1
        obs, *_ = noisy.step(action)
        clean.step(action)
        np.testing.assert_array_equal(obs, base._get_obs())  # the observation is of the perturbed state
        qpos_noise.append(base.data.qpos - clean.data.qpos)
        qvel_noise.append(base.data.qvel - clean.data.qvel)
    return np.array(qpos_noise), np.array(qvel_noise)


def test_gaussian_dynamics_noise_has_the_set_std_on_walker():
    qpos_noise, qvel_noise = dynamics_noise_samples("Walker2d-v4", 5e-3, 300)
    for noise in (qpos_noise, qvel_noise):
        assert abs(noise.mean()) < 3 * 5e-3 / math.sqrt(noise.size)
        assert noise.std() == pytest.approx(5e-3, rel=0.05)


def test_gaussian_dynamics_noise_keeps_quaternions_unit_on_ant():
    noisy = GaussianDynamicsNoise(gym.make("Ant-v4"), std=0.1)
    noisy.reset(seed=0)
    base = noisy.unwrapped
    assert base.model.jnt_type[0] == mujoco.mjtJoint.mjJNT_FREE
    moved = []
    for _ in range(50):
        before = base.data.qvel.copy()
        noisy.step(noisy.action_space.sample())
        assert np.linalg.norm(base.data.qpos[3:7]) == pytest.approx(1.0, abs=1e-9)
        moved.append(np.abs(base.data.qvel - before).mean())
    assert np.mean(moved) > 0.05  # std 0.1 noise really reaches the velocities


def test_gaussian_dynamics_noise_on_pointmass_moves_position_and_velocity():
    noisy = GaussianDynamicsNoise(gym.make("PointMass-v0"), std=0.05)
    base = noisy.unwrapped
    pos_noise, vel_noise = [], []
    for episode in range(100):
        noisy.reset(seed=episode)
        base.pos, base.vel = np.zeros(2), np.zeros(2)  # centre, at rest: a zero action keeps it there without noise
        obs, *_ = noisy.step(np.zeros(2, dtype=np.float32))
        np.testing.assert_allclose(obs[:4], np.concatenate([base.pos, base.vel]), rtol=1e-6)
        pos_noise.append(base.pos.copy())
        vel_noise.append(base.vel.copy())
    assert np.std(pos_noise) == pytest.approx(0.05, rel=0.15)
    assert np.std(vel_noise) == pytest.approx(0.05, rel=0.15)


def test_gaussian_dynamics_noise_rejects_other_envs():
    with pytest.raises(ValueError, match="MuJoCo"):
        GaussianDynamicsNoise(gym.make("Pendulum-v1"), 0.01)


def test_default_dyn_noise_std_per_env():
    assert noise_wrappers.default_dyn_noise_std("HalfCheetah-v4") == 0.1
    assert noise_wrappers.default_dyn_noise_std("Hopper-v5") == 5e-3
    assert noise_wrappers.default_dyn_noise_std("PointMass-v0") == 1e-2
