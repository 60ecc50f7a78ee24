"""The paper's noise settings as gymnasium wrappers, shared by every RL script: multiplicative observation noise
(`--obs-noise mult`) and Gaussian dynamics noise (`--dyn-noise gauss`). They are the experiments' environments, not
any algorithm, so they live once beside the scripts (a diff between two scripts never shows them)."""

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

import pointmass_env

DYN_NOISE_STD = {"HalfCheetah": 0.1, "Ant": 0.1, "Hopper": 5e-3, "Walker2d": 5e-3, "Humanoid": 1e-2}
"""default dynamics-noise std per env family (gymnasium's reset_noise_scale); other envs use 1e-2"""


class MultiplicativeObservationNoise(gym.ObservationWrapper):
    """obs -> n * obs with one factor n ~ U[1 - scale, 1 + scale] per episode."""

    def __init__(self, env: gym.Env, scale: float):
        super().__init__(env)
        self.scale = scale
        self.factor = 1.0
        space = env.observation_space
        bounds = np.stack(
            [space.low * (1 - scale), space.low * (1 + scale), space.high * (1 - scale), space.high * (1 + scale)]
        )
        self.observation_space = gym.spaces.Box(bounds.min(0), bounds.max(0), dtype=space.dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.factor = float(self.np_random.uniform(1 - self.scale, 1 + self.scale))
        return self.observation(obs), info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (self.factor * observation).astype(observation.dtype)


class GaussianDynamicsNoise(gym.Wrapper):
    """After every step, add N(0, std^2) to the simulator's positions and velocities and observe the perturbed state.

    MuJoCo: qpos and qvel, with free-joint and ball-joint quaternions renormalised to unit length.
    PointMass-v0: position and velocity.
    """

    def __init__(self, env: gym.Env, std: float):
        super().__init__(env)
        self.std = std
        base = env.unwrapped
        if isinstance(base, MujocoEnv):
            model = base.model
            free, ball = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
            quaternion_starts = [
                adr + 3 if jtype == free else adr  # a free joint's qpos is (x, y, z, quaternion)
                for jtype, adr in zip(model.jnt_type.tolist(), model.jnt_qposadr.tolist())
                if jtype in (free, ball)
            ]
            self.quaternion_index = np.array(
                [[i, i + 1, i + 2, i + 3] for i in quaternion_starts], dtype=np.int64
            ).reshape(-1, 4)
        elif not isinstance(base, pointmass_env.PointMassEnv):
            raise ValueError("--dyn-noise gauss needs a MuJoCo env or PointMass-v0")

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        base = self.env.unwrapped
        if isinstance(base, pointmass_env.PointMassEnv):
            base.pos = base.pos + self.np_random.normal(0.0, self.std, base.pos.shape)
            base.vel = base.vel + self.np_random.normal(0.0, self.std, base.vel.shape)
        else:
            qpos = base.data.qpos + self.np_random.normal(0.0, self.std, base.model.nq)
            qvel = base.data.qvel + self.np_random.normal(0.0, self.std, base.model.nv)
            quaternions = qpos[self.quaternion_index]
            qpos[self.quaternion_index] = quaternions / np.linalg.norm(quaternions, axis=1, keepdims=True)
            base.set_state(qpos, qvel)
            mujoco.mj_rnePostConstraint(base.model, base.data)  # contact forces, part of some observations
        return base._get_obs(), reward, terminated, truncated, info


def default_dyn_noise_std(env_id: str) -> float:
    """The dynamics-noise std of an env id: DYN_NOISE_STD of its family, else 1e-2."""
    family = env_id.split("-")[0]
    return DYN_NOISE_STD.get(family, 1e-2)
