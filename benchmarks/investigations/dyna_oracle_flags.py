"""Does the world model's next-state flag error cost TD3 (Dyna) its speed on the point mass? `td3_huber.py` with one
change patched in from outside (the script is not edited), then its own `main`:

    oracle flags: every Dyna target's next state s'^ keeps the world model's position and velocity, but its memory
    flags are the replay row's real ones (the coordinates 4: of s'). Reward and termination as the script's
    --dyna-reward says (the default `replay`: the row's r with its d).

Where the flags are the only part of s'^ the model gets wrong (benchmarks/investigations/dyna_flag_probe.py), this run
sits between TD3 with Dyna (model s'^) and TD3 --no-dyna (real s'). The run's --exp-name is td3_huber_oracle_flags
unless given.

Usage (the toy grid's flags, benchmarks/toy_rl5/toy_rl5.sh):
    OMP_NUM_THREADS=1 python benchmarks/investigations/dyna_oracle_flags.py --env-id PointMass-v0 --seed 1 \\
        --total-timesteps 15000 --learning-starts 1000 --hidden-dim 64 --wm-hidden-dim 64 --batch-size 64 \\
        --updates-per-step 2 --learning-rate 1e-3 --wm-learning-rate 1e-3 --eval-frequency 1000 --eval-episodes 20
"""

import os
import sys

import torch
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import replay_buffer  # noqa: E402
import td3_huber  # noqa: E402

FLAGS = slice(4, None)  # the point mass's observation: position (2), velocity (2), one memory flag per bonus location
script_td_targets = td3_huber.td_targets


class OracleFlags:
    """The world model, but every sample's flags are the real next state's: next_obs (B, S) of the replay rows."""

    def __init__(self, world_model: torch.nn.Module, next_obs: torch.Tensor):
        self.world_model, self.next_obs = world_model, next_obs

    def sample(
        self, obs: torch.Tensor, actions: torch.Tensor, n: int, *rest, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        next_obs, rewards = self.world_model.sample(obs, actions, n, *rest, **kwargs)  # (B, n, S), (B, n)
        real_flags = self.next_obs[:, None, FLAGS].expand(-1, n, -1)  # (B, n, M)
        return torch.cat([next_obs[..., : FLAGS.start], real_flags], -1), rewards


def oracle_flag_td_targets(data: replay_buffer.ReplayBatch, world_model, *args, **kwargs) -> torch.Tensor:
    if world_model is None:
        return script_td_targets(data, world_model, *args, **kwargs)
    return script_td_targets(data, OracleFlags(world_model, data.next_obs), *args, **kwargs)


if __name__ == "__main__":
    args = tyro.cli(td3_huber.Args)
    if not args.dyna:
        sys.exit("dyna_oracle_flags.py: error: --no-dyna has no world-model next state to patch")
    if not args.env_id.startswith("PointMass"):
        sys.exit("dyna_oracle_flags.py: error: the flags are the point mass's (--env-id PointMass-v0 or PointMass5-v0)")
    if args.exp_name == "td3_huber":
        args.exp_name = "td3_huber_oracle_flags"
    td3_huber.td_targets = oracle_flag_td_targets
    td3_huber.main(args)
