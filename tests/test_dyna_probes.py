"""The point-mass Dyna probes: benchmarks/investigations/dyna_oracle_flags.py (TD3 targets whose next states carry the
real memory flags) against a target computed by hand, and benchmarks/investigations/dyna_flag_probe.py against world
models whose errors are known (exact, or never flipping a flag) on a hand-built buffer."""

import sys

import torch
import torch.nn as nn
from helpers import ROOT, load_benchmark

sys.path.insert(0, str(ROOT))
import replay_buffer  # noqa: E402
import td3_huber  # noqa: E402

oracle = load_benchmark("investigations/dyna_oracle_flags")
probe = load_benchmark("investigations/dyna_flag_probe")
OBS_DIM, ACT_DIM, M = 7, 2, 3  # position, velocity, 3 flags


def test_oracle_flag_targets_equal_hand_computed_target():
    torch.manual_seed(0)
    world_model = td3_huber.make_world_model("cvae", OBS_DIM, ACT_DIM, 16)
    actor, critic = td3_huber.Actor(OBS_DIM, ACT_DIM, 8), td3_huber.Critic(OBS_DIM, ACT_DIM, 8)
    B = 6
    real_next = torch.cat([torch.randn(B, 4), torch.randint(0, 2, (B, M)).float()], 1)
    data = replay_buffer.ReplayBatch(
        torch.randn(B, OBS_DIM),
        torch.rand(B, ACT_DIM) * 2 - 1,
        torch.randn(B),
        real_next,
        torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
    )
    torch.manual_seed(1)
    targets = oracle.oracle_flag_td_targets(data, world_model, actor, critic, 0.9, 0.2, 0.5)
    torch.manual_seed(1)
    with torch.no_grad():
        model_next, _ = world_model.sample(data.obs, data.actions, 1)  # the same draws as inside the target
        next_obs = torch.cat([model_next[:, 0, :4], real_next[:, 4:]], 1)
        next_actions = (actor(next_obs) + (torch.randn(B, ACT_DIM) * 0.2).clamp(-0.5, 0.5)).clamp(-1, 1)
        expected = data.rewards + 0.9 * (1 - data.terminations) * critic(next_obs, next_actions).min(0).values
    assert not torch.equal(model_next[:, 0, 4:], real_next[:, 4:])  # the patch changes something
    torch.testing.assert_close(targets, expected, rtol=0, atol=0)


class RuleWorldModel(nn.Module):
    """next = (position + action, velocity, flags | (action_0 > 0.5 sets flag 0)); `flips` False: flags never change."""

    def __init__(self, flips: bool):
        super().__init__()
        self.flips = flips

    def load_state_dict(self, state: dict, strict: bool = True):
        return None

    def sample(self, obs: torch.Tensor, actions: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        nxt = rule_step(obs, actions) if self.flips else torch.cat([obs[:, :2] + actions, obs[:, 2:]], 1)
        return nxt[:, None].expand(-1, n, -1), torch.zeros(obs.shape[0], n)


def rule_step(obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    flags = obs[:, 4:].clone()
    flags[:, 0] = torch.maximum(flags[:, 0], (actions[:, 0] > 0.5).float())
    return torch.cat([obs[:, :2] + actions, obs[:, 2:4], flags], 1)


def checkpoint(tmp_path) -> str:
    """Rows: 2 non-terminal flips, 1 terminal flip (left out), 4 ordinary (one with flag 0 already set)."""
    torch.manual_seed(0)
    obs = torch.cat([torch.randn(7, 4), torch.zeros(7, M)], 1)
    obs[6, 4] = 1.0
    actions = torch.tensor([[0.9, 0.0], [0.7, 0.1], [0.8, -0.2], [0.1, 0.0], [-0.3, 0.2], [0.0, 0.0], [0.9, 0.3]])
    terminations = torch.tensor([[0.0], [0.0], [1.0], [0.0], [0.0], [0.0], [0.0]])
    actor, critic = td3_huber.Actor(OBS_DIM, ACT_DIM, 8), td3_huber.Critic(OBS_DIM, ACT_DIM, 8)
    state = {
        "script": "td3_huber.py",
        "args": {"world_model": "cvae", "wm_hidden_dim": 8, "hidden_dim": 8},
        "world_model": {},
        "target_actor": actor.state_dict(),
        "target_critic": critic.state_dict(),
        "replay_buffer": {
            "size": 7,
            "obs": obs,
            "actions": actions,
            "rewards": torch.zeros(7, 1),
            "next_obs": rule_step(obs, actions),
            "terminations": terminations,
        },
    }
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    return str(path)


def test_flag_probe_reports_zero_for_an_exact_model_and_every_flip_wrong_for_a_model_that_never_flips(
    tmp_path, monkeypatch
):
    path = checkpoint(tmp_path)
    monkeypatch.setattr(td3_huber, "make_world_model", lambda *args: RuleWorldModel(flips=True))
    exact = probe.probe_run(path)
    assert (exact["flag flips"]["rows"], exact["ordinary"]["rows"]) == (2, 4)
    for kind in exact.values():
        assert kind["flag_error"] == kind["flag_wrong"] == kind["position_error"] == 0.0
        assert kind["value_error"] < 1e-6  # the same states through the critic in batches of different shapes
    monkeypatch.setattr(td3_huber, "make_world_model", lambda *args: RuleWorldModel(flips=False))
    stuck = probe.probe_run(path)
    assert stuck["flag flips"]["flag_error"] == stuck["flag flips"]["flag_wrong"] == 1.0  # only the flipped flag counts
    assert stuck["ordinary"]["flag_error"] == 0.0 and stuck["ordinary"]["value_error"] < 1e-6
    assert stuck["flag flips"]["value_error"] > 1e-3 and stuck["flag flips"]["position_error"] == 0.0
