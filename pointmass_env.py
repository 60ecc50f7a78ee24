"""2D point-mass toy environment with hidden bonus locations (paper appendix "Toy Reinforcement Learning").

A point mass moves in the plane. The agent controls its acceleration (one value per axis, in [-1, 1]). At the
start of each episode one of M bonus locations, arranged on a circle around the centre, is secretly made active.
Touching the active location ends the episode with reward 10; leaving the bounding box ends it with reward 0.
Touching any location sets that location's memory flag in the observation, so the agent can remember which
locations it has already visited. Sweeping M (3..6 in the paper) sets the number of modes of the return
distribution.

Parameters from the paper's table (module-level constants below):
    max episode length 25 steps (applied by gymnasium's TimeLimit wrapper via the registered id), bonus reward 10,
    reward for leaving the box 0, acceleration in [-1, 1] per axis, mass 1, agent radius 0.5, bonus radius 0.5,
    box half-width 3, start area half-width 1, friction coefficient 0.1, integration time step 0.5.

Choices the paper leaves open, fixed here:
    * Dynamics: semi-implicit Euler, velocity first, then position with the NEW velocity:
          v_{t+1} = v_t + dt * (a_t / mass - friction * v_t)
          p_{t+1} = p_t + dt * v_{t+1}
      Actions are clipped to [-1, 1] per axis before use.
    * Start state: position uniform in [-1, 1]^2, velocity zero.
    * Bonus locations: M points on a circle of radius RING_RADIUS = 2 around the centre, at angles 2*pi*k/M,
      k = 0..M-1. One of them, drawn uniformly with the env's np_random at reset, is active for the episode;
      the agent is not told which.
    * "Touching" a location: distance between the agent's centre and the location's centre
      <= AGENT_RADIUS + BONUS_RADIUS (= 1). Touches are checked after each step, never at reset.
    * Order of checks after the position update: (1) memory flags of all touched locations are set to 1 (flags
      persist for the whole episode and are reset to 0 at reset); (2) if the active location is touched: reward
      10, terminated; (3) else if the agent's centre is outside the box (|x| > 3 or |y| > 3): reward 0,
      terminated; (4) else reward 0 (there is no per-step reward or cost), not terminated.
      (2) and (3) never coincide: every point within distance 1 of a location on the radius-2 ring has
      |x|, |y| <= 3, i.e. is inside the box.
    * Observation (float32, dimension 4 + M): [x, y, vx, vy, flag_0, ..., flag_{M-1}]. The observation space is
      unbounded for position and velocity and [0, 1] for the flags.
    * info: {"active_bonus": index of the active location, "touched": bool array (M,) of this step's touches
      (all False at reset)}.
    * Rendering ("rgb_array" only, numpy only): a RENDER_SIZE x RENDER_SIZE image of the square
      [-3.5, 3.5]^2, white background, black box boundary, bonus locations as discs (active green, inactive
      grey; a visited location gets a dark outline), the agent as a blue disc.

State can be set directly for tests and analysis through the public attributes of the unwrapped env:
``pos`` (float64 array (2,)), ``vel`` (float64 array (2,)), ``flags`` (float64 array (M,) of 0/1),
``active_bonus`` (int). ``bonus_locations`` (float64 array (M, 2)) holds the location centres.

Importing this module registers the id "PointMass-v0" (M = 3; ``gymnasium.make("PointMass-v0", num_bonus=5)``
overrides M) and the ids "PointMass<M>-v0" for M = 1..8 (e.g. "PointMass5-v0"), so that the RL scripts, which take
only an env id, can choose M.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

MAX_EPISODE_STEPS = 25
BONUS_REWARD = 10.0
LEAVE_BOX_REWARD = 0.0
STEP_REWARD = 0.0
MAX_ACCELERATION = 1.0
MASS = 1.0
AGENT_RADIUS = 0.5
BONUS_RADIUS = 0.5
TOUCH_DISTANCE = AGENT_RADIUS + BONUS_RADIUS
BOX_HALF_WIDTH = 3.0
START_HALF_WIDTH = 1.0
FRICTION = 0.1
DT = 0.5
RING_RADIUS = 2.0

RENDER_SIZE = 256
VIEW_HALF_WIDTH = BOX_HALF_WIDTH + 0.5
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GREEN = (40, 180, 60)
GREY = (170, 170, 170)
OUTLINE = (60, 60, 60)
BLUE = (30, 60, 220)


class PointMassEnv(gymnasium.Env):
    """Point mass with M hidden bonus locations; see the module docstring for the full specification."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, num_bonus: int = 3, render_mode: str | None = None) -> None:
        if num_bonus < 1:
            raise ValueError(f"num_bonus must be >= 1, got {num_bonus}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.num_bonus = num_bonus
        self.render_mode = render_mode

        angles = 2.0 * np.pi * np.arange(num_bonus) / num_bonus
        self.bonus_locations = RING_RADIUS * np.stack([np.cos(angles), np.sin(angles)], axis=1)

        self.action_space = spaces.Box(-MAX_ACCELERATION, MAX_ACCELERATION, shape=(2,), dtype=np.float32)
        low = np.concatenate([np.full(4, -np.inf), np.zeros(num_bonus)]).astype(np.float32)
        high = np.concatenate([np.full(4, np.inf), np.ones(num_bonus)]).astype(np.float32)
        self.observation_space = spaces.Box(low, high, dtype=np.float32)

        self.pos = np.zeros(2)
        self.vel = np.zeros(2)
        self.flags = np.zeros(num_bonus)
        self.active_bonus = 0

    def _get_obs(self) -> np.ndarray:
        return np.concatenate([self.pos, self.vel, self.flags]).astype(np.float32)

    def _info(self, touched: np.ndarray) -> dict[str, Any]:
        return {"active_bonus": self.active_bonus, "touched": touched}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-START_HALF_WIDTH, START_HALF_WIDTH, size=2)
        self.vel = np.zeros(2)
        self.flags = np.zeros(self.num_bonus)
        self.active_bonus = int(self.np_random.integers(self.num_bonus))
        return self._get_obs(), self._info(np.zeros(self.num_bonus, dtype=bool))

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        accel = np.clip(np.asarray(action, dtype=np.float64), -MAX_ACCELERATION, MAX_ACCELERATION)
        self.vel = self.vel + DT * (accel / MASS - FRICTION * self.vel)
        self.pos = self.pos + DT * self.vel

        touched = np.linalg.norm(self.bonus_locations - self.pos, axis=1) <= TOUCH_DISTANCE
        self.flags[touched] = 1.0
        if touched[self.active_bonus]:
            reward, terminated = BONUS_REWARD, True
        elif np.any(np.abs(self.pos) > BOX_HALF_WIDTH):
            reward, terminated = LEAVE_BOX_REWARD, True
        else:
            reward, terminated = STEP_REWARD, False
        return self._get_obs(), reward, terminated, False, self._info(touched)

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        pixel = 2.0 * VIEW_HALF_WIDTH / RENDER_SIZE
        coords = -VIEW_HALF_WIDTH + (np.arange(RENDER_SIZE) + 0.5) * pixel
        x, y = np.meshgrid(coords, coords[::-1])  # row 0 is the top of the image (largest y)
        image = np.full((RENDER_SIZE, RENDER_SIZE, 3), WHITE, dtype=np.uint8)

        def fill_disc(centre: np.ndarray, radius: float, colour: tuple[int, int, int]) -> None:
            image[(x - centre[0]) ** 2 + (y - centre[1]) ** 2 <= radius**2] = colour

        image[np.abs(np.maximum(np.abs(x), np.abs(y)) - BOX_HALF_WIDTH) <= pixel] = BLACK
        for k, centre in enumerate(self.bonus_locations):
            inner_radius = BONUS_RADIUS - 3 * pixel if self.flags[k] else BONUS_RADIUS
            fill_disc(centre, BONUS_RADIUS, OUTLINE)
            fill_disc(centre, inner_radius, GREEN if k == self.active_bonus else GREY)
        fill_disc(self.pos, AGENT_RADIUS, BLUE)
        return image


REGISTERED_IDS = {"PointMass-v0": 3, **{f"PointMass{m}-v0": m for m in range(1, 9)}}
"""PointMass-v0 has 3 bonus locations; PointMass<M>-v0 has M (e.g. PointMass5-v0), so scripts select M by env id."""
for _env_id, _num_bonus in REGISTERED_IDS.items():
    if _env_id not in gymnasium.registry:
        gymnasium.register(
            id=_env_id,
            entry_point="pointmass_env:PointMassEnv",
            max_episode_steps=MAX_EPISODE_STEPS,
            kwargs={"num_bonus": _num_bonus},
        )
