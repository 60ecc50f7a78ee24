"""Tests for the point-mass toy environment (pointmass_env.py). Expected numbers are computed by hand."""

import importlib

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import pointmass_env  # noqa: E402
from pointmass_env import PointMassEnv  # noqa: E402

# With M = 3 the locations are at angles 0, 120, 240 degrees on a circle of radius 2:
# (2, 0), (-1, sqrt(3)), (-1, -sqrt(3)). The origin is at distance 2 from each, so nothing is touched there.
SQRT3 = 1.7320508075688772


def make_env(pos=(0.0, 0.0), vel=(0.0, 0.0), active: int = 0) -> PointMassEnv:
    """An M = 3 env with the given state (position, velocity, active location)."""
    env = PointMassEnv(num_bonus=3)
    env.reset(seed=0)
    env.pos = np.array(pos, dtype=np.float64)
    env.vel = np.array(vel, dtype=np.float64)
    env.active_bonus = active
    return env


# The position/velocity bounds are +-inf by design; gymnasium's checker warns about that. Any other warning fails.
INFINITE_BOUND_WARNING = "ignore:.*A Box observation space (minimum|maximum) value is"


@pytest.mark.filterwarnings(INFINITE_BOUND_WARNING)
@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("num_bonus", [3, 5])
def test_check_env_passes(num_bonus):
    check_env(gymnasium.make("PointMass-v0", num_bonus=num_bonus).unwrapped, skip_render_check=False)


@pytest.mark.filterwarnings(INFINITE_BOUND_WARNING)
@pytest.mark.filterwarnings("error")
def test_check_env_passes_with_rendering():
    env = gymnasium.make("PointMass-v0", num_bonus=4, render_mode="rgb_array").unwrapped
    check_env(env, skip_render_check=False)


def test_registered_id_and_spaces():
    env = gymnasium.make("PointMass-v0")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (7,) and obs.dtype == np.float32
    assert env.spec.max_episode_steps == pointmass_env.MAX_EPISODE_STEPS == 25
    env5 = gymnasium.make("PointMass-v0", num_bonus=5)
    assert env5.observation_space.shape == (9,)
    assert env5.reset(seed=0)[0].shape == (9,)
    assert env5.action_space.shape == (2,)
    np.testing.assert_array_equal(env5.action_space.low, [-1.0, -1.0])
    np.testing.assert_array_equal(env5.action_space.high, [1.0, 1.0])
    env6 = gymnasium.make("PointMass6-v0")
    assert env6.unwrapped.num_bonus == 6 and env6.observation_space.shape == (10,)
    assert env6.spec.max_episode_steps == 25


@pytest.mark.filterwarnings("error")
def test_register_guard_on_reimport():
    importlib.reload(pointmass_env)  # re-registering would warn "Overriding environment"
    assert "PointMass-v0" in gymnasium.registry


def test_bonus_locations_on_ring():
    np.testing.assert_allclose(
        PointMassEnv(num_bonus=4).bonus_locations, [[2, 0], [0, 2], [-2, 0], [0, -2]], atol=1e-12
    )
    np.testing.assert_allclose(PointMassEnv(num_bonus=3).bonus_locations, [[2, 0], [-1, SQRT3], [-1, -SQRT3]])


def test_dynamics_hand_computed_step():
    env = make_env(pos=(0.1, -0.2), vel=(0.2, -0.4))
    obs, reward, terminated, truncated, info = env.step(np.array([1.0, 0.5], dtype=np.float32))
    # vx = 0.2 + 0.5*(1.0 - 0.1*0.2) = 0.69          x = 0.1 + 0.5*0.69 = 0.445
    # vy = -0.4 + 0.5*(0.5 - 0.1*(-0.4)) = -0.13      y = -0.2 + 0.5*(-0.13) = -0.265
    np.testing.assert_allclose(obs[:4], [0.445, -0.265, 0.69, -0.13], rtol=1e-6)
    np.testing.assert_allclose(env.pos, [0.445, -0.265], rtol=1e-12)
    np.testing.assert_allclose(env.vel, [0.69, -0.13], rtol=1e-12)
    assert reward == 0.0 and not terminated and not truncated
    np.testing.assert_array_equal(obs[4:], [0.0, 0.0, 0.0])
    assert not np.any(info["touched"])


def test_position_uses_new_velocity():
    env = make_env(pos=(0.0, 0.0), vel=(0.0, 0.0))
    obs, *_ = env.step(np.array([1.0, -1.0], dtype=np.float32))
    # v = 0 + 0.5*(1 - 0) = 0.5, x = 0 + 0.5*0.5 = 0.25 (with the old velocity x would stay 0).
    np.testing.assert_allclose(obs[:4], [0.25, -0.25, 0.5, -0.5], rtol=1e-6)


def test_friction_decays_velocity_without_action():
    env = make_env(pos=(0.0, 0.0), vel=(0.4, 0.0))
    env.step(np.zeros(2, dtype=np.float32))
    # v = 0.4 + 0.5*(0 - 0.1*0.4) = 0.38, x = 0.5*0.38 = 0.19
    np.testing.assert_allclose(env.vel, [0.38, 0.0], rtol=1e-12)
    np.testing.assert_allclose(env.pos, [0.19, 0.0], rtol=1e-12)


def test_actions_are_clipped():
    clipped = make_env(vel=(0.1, 0.1))
    raw = make_env(vel=(0.1, 0.1))
    obs_clipped, *_ = clipped.step(np.array([1.0, -1.0], dtype=np.float32))
    obs_raw, *_ = raw.step(np.array([5.0, -7.0], dtype=np.float32))
    np.testing.assert_array_equal(obs_raw, obs_clipped)
    # vx = 0.1 + 0.5*(1 - 0.01) = 0.595, vy = 0.1 + 0.5*(-1 - 0.01) = -0.405
    np.testing.assert_allclose(obs_raw[2:4], [0.595, -0.405], rtol=1e-6)


def test_leaving_box_terminates_with_zero_reward():
    env = make_env(pos=(0.0, 2.9), vel=(0.0, 1.0))
    obs, reward, terminated, truncated, info = env.step(np.array([0.0, 1.0], dtype=np.float32))
    # vy = 1 + 0.5*(1 - 0.1) = 1.45, y = 2.9 + 0.5*1.45 = 3.625 > 3
    assert obs[1] == pytest.approx(3.625)
    assert reward == 0.0 and terminated and not truncated
    assert not np.any(info["touched"])


def test_inside_box_edge_does_not_terminate():
    env = make_env(pos=(0.0, -2.95), vel=(0.0, 0.0))
    _, reward, terminated, _, _ = env.step(np.zeros(2, dtype=np.float32))
    assert reward == 0.0 and not terminated


def test_touching_active_bonus_gives_reward_and_terminates():
    env = make_env(pos=(1.2, 0.0), active=0)
    obs, reward, terminated, truncated, info = env.step(np.zeros(2, dtype=np.float32))
    assert reward == 10.0 and terminated and not truncated
    assert info["active_bonus"] == 0
    np.testing.assert_array_equal(info["touched"], [True, False, False])
    np.testing.assert_array_equal(obs[4:], [1.0, 0.0, 0.0])


def test_touch_distance_is_inclusive_at_one():
    at_one = make_env(pos=(1.0, 0.0), active=0)
    assert at_one.step(np.zeros(2, dtype=np.float32))[1] == 10.0
    just_outside = make_env(pos=(0.99, 0.0), active=0)
    _, reward, terminated, _, info = just_outside.step(np.zeros(2, dtype=np.float32))
    assert reward == 0.0 and not terminated and not np.any(info["touched"])


def test_touch_exactly_on_box_edge_counts_as_inside():
    # |x| = 3 is still inside the box (leaving needs |x| > 3); distance to (2, 0) is 1 -> touched.
    env = make_env(pos=(3.0, 0.0), active=0)
    _, reward, terminated, _, info = env.step(np.zeros(2, dtype=np.float32))
    assert reward == 10.0 and terminated
    assert info["touched"][0]


def test_inactive_bonus_sets_persistent_flag():
    env = make_env(pos=(-0.8, 1.5), active=0)  # distance to (-1, sqrt(3)) is about 0.31
    obs, reward, terminated, truncated, info = env.step(np.zeros(2, dtype=np.float32))
    assert reward == 0.0 and not terminated and not truncated
    np.testing.assert_array_equal(info["touched"], [False, True, False])
    np.testing.assert_array_equal(obs[4:], [0.0, 1.0, 0.0])
    env.pos = np.array([0.0, 0.0])
    for _ in range(3):
        obs, reward, terminated, _, info = env.step(np.zeros(2, dtype=np.float32))
        assert reward == 0.0 and not terminated
        assert not np.any(info["touched"])
        np.testing.assert_array_equal(obs[4:], [0.0, 1.0, 0.0])


def test_truncation_at_step_25():
    env = gymnasium.make("PointMass-v0")
    env.reset(seed=3)
    env.unwrapped.pos = np.array([0.0, 0.0])
    env.unwrapped.vel = np.array([0.0, 0.0])
    for t in range(1, 26):
        obs, reward, terminated, truncated, _ = env.step(np.zeros(2, dtype=np.float32))
        assert reward == 0.0 and not terminated
        assert truncated == (t == 25)
    np.testing.assert_array_equal(obs[:4], [0.0, 0.0, 0.0, 0.0])


def test_reset_distribution():
    env = PointMassEnv(num_bonus=5)
    actives = set()
    for seed in range(200):
        obs, info = env.reset(seed=seed)
        assert np.all(np.abs(obs[:2]) <= 1.0)
        np.testing.assert_array_equal(obs[2:], np.zeros(7))
        assert not np.any(info["touched"])
        actives.add(info["active_bonus"])
    assert actives == {0, 1, 2, 3, 4}


def test_reset_start_positions_cover_start_square():
    env = PointMassEnv()
    starts = np.array([env.reset(seed=seed)[0][:2] for seed in range(200)])
    assert starts.min() < -0.8 and starts.max() > 0.8


def test_same_seed_same_episode():
    def rollout(seed: int) -> tuple[list, int]:
        env = PointMassEnv(num_bonus=4)
        obs, info = env.reset(seed=seed)
        actions = np.random.default_rng(123).uniform(-1, 1, size=(10, 2)).astype(np.float32)
        observations = [obs]
        for action in actions:
            obs, _, terminated, _, _ = env.step(action)
            observations.append(obs)
            if terminated:
                break
        return observations, info["active_bonus"]

    first, active_first = rollout(11)
    second, active_second = rollout(11)
    assert active_first == active_second
    assert len(first) == len(second)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_render_rgb_array():
    env = PointMassEnv(num_bonus=3, render_mode="rgb_array")
    env.reset(seed=0)
    env.pos = np.array([0.0, 0.0])
    env.active_bonus = 0
    env.flags[1] = 1.0
    image = env.render()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    colours = {tuple(c) for c in image.reshape(-1, 3)}
    for colour in (
        pointmass_env.WHITE,
        pointmass_env.BLACK,
        pointmass_env.BLUE,
        pointmass_env.GREEN,
        pointmass_env.GREY,
        pointmass_env.OUTLINE,
    ):
        assert colour in colours
    centre = image.shape[0] // 2
    assert tuple(image[centre, centre]) == pointmass_env.BLUE


def test_render_none_without_render_mode():
    env = PointMassEnv()
    env.reset(seed=0)
    assert env.render() is None


@pytest.mark.parametrize("num_bonus", [0, -2])
def test_bad_num_bonus_raises(num_bonus):
    with pytest.raises(ValueError, match="num_bonus"):
        PointMassEnv(num_bonus=num_bonus)


def test_bad_render_mode_raises():
    with pytest.raises(ValueError, match="render_mode"):
        PointMassEnv(render_mode="human")
