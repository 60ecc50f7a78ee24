"""Where the Dyna target's next state goes wrong on the point mass: the memory flags at a touch.

For every finished TD3 (Dyna) and MAGE run of a point-mass grid, this loads the run's final checkpoint (world model,
target actor, target critic, replay buffer) and splits the buffer's non-terminal rows in two:

* flag flips: the step touched a bonus location that was not active, so one memory flag of s' went 0 -> 1;
* ordinary: every other non-terminal row (the flags of s' equal those of s).

For each row it draws 10 next states s'^ from the world model, as a Dyna target does, and reports

* flag error: mean |flag^ - flag'| over the flags that flipped (ordinary rows: over all flags), and the share of
  samples where that error exceeds 0.5 (the sampled flag is nearer the wrong value);
* position error: mean |pos^ - pos'|;
* value error: mean |V(s'^) - V(s')| with V(s) = min_e Q'_e(s, pi'(s)), the bootstrap part of a TD3 target without
  the smoothing noise, and its mean sign (bias).

Usage:
    python benchmarks/investigations/dyna_flag_probe.py benchmarks/toy_rl5/grid \
        --out benchmarks/investigations/dyna_flags/dyna_flag_probe.md
"""

import argparse
import glob
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import mage_huber_sobolev  # noqa: E402
import td3_huber  # noqa: E402

SCRIPTS = {"td3_huber": td3_huber, "mage_huber_sobolev": mage_huber_sobolev}
SAMPLES_PER_ROW = 10
MAX_ROWS = 4000


@torch.no_grad()
def probe_run(checkpoint_path: str) -> dict[str, dict[str, float]]:
    """Flag, position and value errors of the run's world model on its own buffer, per row kind."""
    state = torch.load(checkpoint_path, weights_only=True)
    module, args, buffer = SCRIPTS[state["script"].removesuffix(".py")], state["args"], state["replay_buffer"]
    size = int(buffer["size"])
    obs, actions = buffer["obs"][:size].float(), buffer["actions"][:size].float()  # (R, S), (R, A)
    next_obs, terminated = buffer["next_obs"][:size].float(), buffer["terminations"][:size].reshape(-1) > 0
    obs_dim, act_dim = obs.shape[1], actions.shape[1]
    world_model = module.make_world_model(args["world_model"], obs_dim, act_dim, args["wm_hidden_dim"])
    world_model.load_state_dict(state["world_model"])
    actor = module.Actor(obs_dim, act_dim, args["hidden_dim"])
    actor.load_state_dict(state["target_actor"])
    critic = module.Critic(obs_dim, act_dim, args["hidden_dim"])
    critic.load_state_dict(state["target_critic"])

    def value(states: torch.Tensor) -> torch.Tensor:  # (R, S) -> (R,)
        return critic(states, actor(states)).min(0).values

    flips = (next_obs[:, 4:] != obs[:, 4:]).any(1)  # (R,)
    result = {}
    for kind, rows in (("flag flips", ~terminated & flips), ("ordinary", ~terminated & ~flips)):
        index = rows.nonzero().squeeze(1)[:MAX_ROWS]
        s, a, s_next = obs[index], actions[index], next_obs[index]
        sampled, _ = world_model.sample(s, a, SAMPLES_PER_ROW)  # (R, n, S)
        flag_error = (sampled[..., 4:] - s_next[:, None, 4:]).abs()  # (R, n, M)
        if kind == "flag flips":
            flag_error = flag_error[(s_next[:, 4:] != s[:, 4:])[:, None].expand_as(flag_error)]
        v_true = value(s_next)  # (R,)
        v_model = value(sampled.reshape(-1, obs_dim)).reshape(-1, SAMPLES_PER_ROW)  # (R, n)
        result[kind] = {
            "rows": int(rows.sum()),
            "flag_error": flag_error.mean().item(),
            "flag_wrong": (flag_error > 0.5).float().mean().item(),
            "position_error": (sampled[..., :2] - s_next[:, None, :2]).norm(dim=-1).mean().item(),
            "value_error": (v_model - v_true[:, None]).abs().mean().item(),
            "value_bias": (v_model.mean(1) - v_true).mean().item(),
            "mean_value": v_true.mean().item(),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "grid_dir", help="a run_grid.py grid dir with point-mass runs of td3_huber / mage_huber_sobolev"
    )
    parser.add_argument("--out", help="also write the Markdown table here")
    parser.add_argument("--seed", type=int, default=0, help="torch seed of the world-model draws")
    cli = parser.parse_args()
    torch.manual_seed(cli.seed)
    lines = [
        "| run | M | row kind | rows | flag error | flag wrong (> 0.5) | position error | value error | value bias | "
        "mean V(s') |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for exp_name in SCRIPTS:
        for path in sorted(
            glob.glob(
                os.path.join(cli.grid_dir, exp_name, "PointMass*", "default", "seed*", "runs", "*", "checkpoint.pt")
            )
        ):
            if not os.path.exists(os.path.join(os.path.dirname(path), "summary.json")):
                continue  # an unfinished run
            parts = os.path.relpath(path, cli.grid_dir).split(os.sep)
            num_bonus = 5 if parts[1] == "PointMass5-v0" else 3
            for kind, r in probe_run(path).items():
                lines.append(
                    f"| {exp_name} {parts[3]} | {num_bonus} | {kind} | {r['rows']} | {r['flag_error']:.3f} | "
                    f"{r['flag_wrong']:.3f} | {r['position_error']:.4f} | {r['value_error']:.3f} | "
                    f"{r['value_bias']:+.3f} | {r['mean_value']:.2f} |"
                )
    table = "\n".join(lines)
    print(table)
    if cli.out:
        with open(cli.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
