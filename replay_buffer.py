"""The replay buffer of the RL scripts, the same in every one of them, written once beside them and imported (as
CleanRL's scripts import `cleanrl_utils.buffers`): uniform replay of real transitions, kept on the training device and
saved whole in the run's checkpoint."""

from typing import NamedTuple

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


class ReplayBatch(NamedTuple):
    obs: torch.Tensor  # (B, S)
    actions: torch.Tensor  # (B, A)
    rewards: torch.Tensor  # (B,)
    next_obs: torch.Tensor  # (B, S)
    terminations: torch.Tensor  # (B,) 1.0 where the episode terminated (not truncated)


class ReplayBuffer:
    """Uniform replay of real transitions, stored on the training device, one tensor per field of ReplayBatch. Batches
    are drawn on the device below a fill level kept there too, so sampling never waits for the host (CUDA graphs)."""

    def __init__(self, obs_dim: int, act_dim: int, capacity: int, device: torch.device):
        self.capacity = capacity
        self.obs = torch.zeros(capacity, obs_dim, device=device)
        self.actions = torch.zeros(capacity, act_dim, device=device)
        self.rewards = torch.zeros(capacity, device=device)
        self.next_obs = torch.zeros(capacity, obs_dim, device=device)
        self.terminations = torch.zeros(capacity, device=device)
        self.pos = 0
        self.size = 0
        self.fill = torch.zeros((), dtype=torch.float64, device=device)  # self.size, on the device

    def add(
        self, obs: ArrayLike, action: ArrayLike, reward: float, next_obs: ArrayLike, terminated: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Store one transition (the env's arrays or tensors); return the row stored, as the buffer's float32 tensors
        on its device, obs (S,), action (A,), reward (1,) and next_obs (S,): what a world model's normaliser takes."""
        device, dtype = self.obs.device, self.obs.dtype
        obs, action, next_obs = (torch.as_tensor(x, dtype=dtype, device=device) for x in (obs, action, next_obs))
        self.obs[self.pos] = obs
        self.actions[self.pos] = action
        self.rewards[self.pos] = float(reward)
        self.next_obs[self.pos] = next_obs
        self.terminations[self.pos] = float(terminated)
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.fill.fill_(self.size)
        return obs, action, torch.tensor([float(reward)], dtype=dtype, device=device), next_obs

    def sample(self, batch_size: int) -> ReplayBatch:
        idx = (torch.rand(batch_size, dtype=torch.float64, device=self.obs.device) * self.fill).long()  # (B,) < size
        return ReplayBatch(
            self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.terminations[idx]
        )

    def state_dict(self) -> dict:
        """The filled rows, copied: a saved view would drag the whole preallocated storage into the checkpoint."""
        rows = {name: getattr(self, name)[: self.size].to("cpu", copy=True) for name in ReplayBatch._fields}
        return {"pos": self.pos, "size": self.size, **rows}

    def load_state_dict(self, state: dict) -> None:
        self.pos, self.size = state["pos"], state["size"]
        self.fill.fill_(self.size)
        for name in ReplayBatch._fields:
            getattr(self, name)[: self.size] = state[name]
