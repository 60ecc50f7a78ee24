"""benchmarks/wm_gradients.py: the simulator's finite-difference Jacobians and the world model's autodiff ones, each
against an independent computation, the probe leaving the rollout's state as it found it, and a run or --out it cannot
use refused in one line before the rollout."""

import dataclasses

import numpy as np
import torch
from helpers import error_lines, load_benchmark, run_script_in_process

import td3_huber

wm_gradients = load_benchmark("wm_gradients")


def idp_env(seed: int = 3):
    env = td3_huber.make_env(td3_huber.Args(env_id="InvertedDoublePendulum-v4", obs_noise="mult"))
    obs, _ = env.reset(seed=seed)
    for _ in range(3):
        obs, *_ = env.step(np.array([0.3], dtype=np.float32))
    return env, obs


def test_the_simulator_jacobian_predicts_a_small_action_change_and_leaves_the_state_as_it_was():
    """J from central differences predicts obs'(a + d) - obs'(a) to second order for d = 1e-3 (the noise factor
    applied); the env then steps from the unperturbed state exactly as an env that was never probed."""
    env, _ = idp_env()
    twin, _ = idp_env()
    factor = wm_gradients.observation_factor(env)
    assert factor != 1.0 and 0.8 <= factor <= 1.2  # --obs-noise mult's episode factor, found through the wrappers
    action = np.array([0.1])
    next_obs, reward, d_obs, d_reward = wm_gradients.simulator_jacobians(env, action, factor, 1e-5)
    moved, moved_reward, *_ = wm_gradients.simulator_jacobians(env, action + 1e-3, factor, 1e-5)
    change = moved - next_obs
    assert np.linalg.norm(change - d_obs[:, 0] * 1e-3) < 1e-2 * np.linalg.norm(change)
    assert abs(moved_reward - reward - d_reward[0] * 1e-3) < 1e-2 * abs(moved_reward - reward) + 1e-9
    probed, *_ = env.step(action.astype(np.float32))
    unprobed, *_ = twin.step(action.astype(np.float32))
    np.testing.assert_allclose(probed, unprobed, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(next_obs, probed, rtol=1e-5, atol=1e-5)  # the env's own step, through its wrappers


def test_the_model_jacobian_equals_finite_differences_of_the_world_model():
    """d s'/da and d r/da by forward-mode autodiff per latent draw against central differences of WorldModel.sample
    with the same draws (float64)."""
    torch.manual_seed(0)
    world_model = td3_huber.WorldModel(4, 2, 16).double()
    for p in world_model.parameters():
        p.data.normal_(0, 0.5)
    obs, action = torch.randn(4, dtype=torch.float64), torch.randn(2, dtype=torch.float64)
    noise = torch.randn(3, world_model.latent_dim, dtype=torch.float64)
    next_obs, rewards, d_obs, d_reward = wm_gradients.model_jacobians(world_model, obs, action, noise)
    assert next_obs.shape == (3, 4) and rewards.shape == (3,) and d_obs.shape == (3, 4, 2) and d_reward.shape == (3, 2)
    for j in range(2):
        e = torch.zeros(2, dtype=torch.float64)
        e[j] = 1e-6
        plus = world_model.sample(obs[None].expand(3, -1), (action + e)[None].expand(3, -1), 1, noise[:, None])
        minus = world_model.sample(obs[None].expand(3, -1), (action - e)[None].expand(3, -1), 1, noise[:, None])
        torch.testing.assert_close(d_obs[:, :, j], (plus[0][:, 0] - minus[0][:, 0]) / 2e-6, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(d_reward[:, j], (plus[1][:, 0] - minus[1][:, 0]) / 2e-6, rtol=1e-5, atol=1e-7)


def test_compare_is_the_relative_error_and_the_cosine():
    relative, cosine = wm_gradients.compare(np.array([[1.0, 1.0]]), np.array([[2.0, 0.0]]))
    assert np.isclose(relative, np.sqrt(2.0) / 2.0) and np.isclose(cosine, 1 / np.sqrt(2.0))


def point_mass_checkpoint(folder) -> None:
    """folder/checkpoint.pt as td3_huber writes it for a point-mass run (the keys wm_gradients reads)."""
    args = td3_huber.Args(env_id="PointMass-v0", hidden_dim=8, wm_hidden_dim=8)
    env = td3_huber.make_env(args)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    torch.save(
        {
            "script": "td3_huber.py",
            "args": dataclasses.asdict(args),
            "actor": td3_huber.Actor(obs_dim, act_dim, 8).state_dict(),
            "world_model": td3_huber.make_world_model("cvae", obs_dim, act_dim, 8).state_dict(),
        },
        folder / "checkpoint.pt",
    )


def test_a_run_it_cannot_measure_is_refused_in_one_line_before_the_rollout(tmp_path):
    """A point-mass run (no MuJoCo simulator to take finite differences of) and a damaged checkpoint: one line saying
    why, exit status 1, nothing printed; an --out it cannot write is refused before the checkpoint is read."""
    point_mass_checkpoint(tmp_path)
    result = run_script_in_process("benchmarks/wm_gradients.py", ".", "--probes", "2", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert error_lines(result) == [
        "wm_gradients.py: error: the run's env PointMass-v0 is not a MuJoCo task: this tool compares the world model"
        " with finite differences of MuJoCo's simulator, its state set back before each perturbed step"
    ]
    result = run_script_in_process("benchmarks/wm_gradients.py", ".", "--out", "no/such/folder/wm.json", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert error_lines(result) == [
        "wm_gradients.py: error: --out no/such/folder/wm.json: cannot write there (No such file or directory)"
    ]
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    result = run_script_in_process("benchmarks/wm_gradients.py", ".", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert error_lines(result) == ["wm_gradients.py: error: cannot read './checkpoint.pt' (UnpicklingError)"]
    result = run_script_in_process("benchmarks/wm_gradients.py", ".", "--out", ".", cwd=tmp_path)
    assert result.returncode == 1 and error_lines(result) == [
        "wm_gradients.py: error: --out .: cannot write there (a folder)"
    ]
    assert [path.name for path in tmp_path.iterdir()] == ["checkpoint.pt"]
