"""How well a run's world model knows the action-gradients the Sobolev targets use, against the simulator itself.

DSDPG's and MAGE's targets are differentiated through the cVAE: d s'/da and d r/da of the world model stand in for the
environment's. This tool measures them on the states a trained policy visits: it rolls out the run's actor
(deterministic, in the run's own env with its noise), and at every `--every`-th step compares, for the observation the
policy saw,
  * the simulator's Jacobians, by central finite differences of MuJoCo itself (the state set back before each
    perturbed step; `--fd-step` in the [-1, 1] action units the scripts use; the next observation scaled by the
    episode's observation-noise factor, as the agent sees it), with
  * the world model's, d s'/da and d r/da by forward-mode autodiff through `WorldModel.sample`, per latent draw, and
    their mean over `--samples` draws,
beside the world model's value error (its mean next observation and reward against the simulator's). Per probe:
relative Frobenius error |J_model - J_sim| / |J_sim| and the cosine between the two (flattened), for the mean
Jacobian and for single draws (with one action dimension, as on IDP, the cosine of d r/da is only its sign), and the
Jacobians' norms; printed as medians and quartiles over the probes, written as JSON with --out.

Usage (a checkpoint.pt of any Dyna script, or its run folder; deterministic MuJoCo tasks, no --dyn-noise):
    python benchmarks/wm_gradients.py benchmarks/mujoco_cpu/grid/.../runs/<run>/ --probes 200 --out wm.json
"""

import importlib
import json
import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
import torch
import tyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from writable import out_error  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Args:
    checkpoint: tyro.conf.Positional[str]
    """checkpoint.pt (or model.pt with a world model) of a Dyna run, or its run folder"""
    probes: int = 200
    """states compared"""
    every: int = 5
    """compare at every `every`-th step of the rollout (consecutive states are nearly the same)"""
    samples: int = 64
    """latent draws of the world model per probe"""
    fd_step: float = 1e-4
    """central-difference step, in the [-1, 1] action units"""
    seed: int = 12345
    """seed of the rollout's episodes and of the latent draws"""
    out: str | None = None
    """also write the per-probe numbers and the summary as JSON here"""


def fail(message: str) -> NoReturn:
    raise SystemExit(f"wm_gradients.py: error: {message}")


def load_run(path: str):
    """The run's script module, its Args, the actor and the world model, from the checkpoint (weights only)."""
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.isfile(path):
        fail(f"no checkpoint at {path!r}")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        fail(f"cannot read {path!r} ({type(error).__name__})")
    if not isinstance(saved, dict) or "script" not in saved or saved.get("world_model") is None:
        fail(f"{path!r} holds no world model (a --no-dyna run, or not a checkpoint of these scripts)")
    sys.path.insert(0, ROOT)
    script = importlib.import_module(saved["script"].removesuffix(".py"))
    args = script.Args(**saved["args"])
    if args.dyn_noise != "none":
        fail("the run has --dyn-noise: its next state is random, finite differences of one step say nothing")
    env = script.make_env(args)
    if not all(hasattr(env.unwrapped, name) for name in ("data", "set_state")):  # what simulator_jacobians uses
        fail(
            f"the run's env {args.env_id} is not a MuJoCo task: this tool compares the world model with finite"
            " differences of MuJoCo's simulator, its state set back before each perturbed step"
        )
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    actor = script.Actor(obs_dim, act_dim, args.hidden_dim)
    actor.load_state_dict(saved["actor"])
    world_model = script.make_world_model(args.world_model, obs_dim, act_dim, args.wm_hidden_dim)
    world_model.load_state_dict(saved["world_model"])
    return script, args, env, actor.eval(), world_model.eval()


def observation_factor(env) -> float:
    """The multiplicative observation noise's factor of the current episode (1 without that noise)."""
    while hasattr(env, "env"):
        if hasattr(env, "factor") and hasattr(env, "scale"):
            return env.factor
        env = env.env
    return 1.0


def simulator_jacobians(env, action: np.ndarray, factor: float, h: float) -> tuple[np.ndarray, ...]:
    """At the env's current MuJoCo state: the next observation (as the agent sees it) and reward for `action` in
    [-1, 1]^A, and their Jacobians w.r.t. the action by central differences of the simulator: (S,), (), (S, A), (A,)."""
    sim = env.unwrapped
    qpos, qvel = sim.data.qpos.copy(), sim.data.qvel.copy()
    low, high = sim.action_space.low.astype(np.float64), sim.action_space.high.astype(np.float64)

    def step(a: np.ndarray) -> tuple[np.ndarray, float]:
        sim.set_state(qpos, qvel)
        obs, reward, *_ = sim.step(low + (a + 1.0) / 2.0 * (high - low))  # the RescaleAction wrapper's map
        return factor * np.asarray(obs, dtype=np.float64), float(reward)

    next_obs, reward = step(action.astype(np.float64))
    d_obs, d_reward = np.zeros((next_obs.shape[0], action.shape[0])), np.zeros(action.shape[0])
    for j in range(action.shape[0]):
        e = np.zeros(action.shape[0])
        e[j] = h
        (obs_plus, r_plus), (obs_minus, r_minus) = step(action + e), step(action - e)
        d_obs[:, j], d_reward[j] = (obs_plus - obs_minus) / (2 * h), (r_plus - r_minus) / (2 * h)
    sim.set_state(qpos, qvel)  # the rollout goes on from the unperturbed state
    return next_obs, reward, d_obs, d_reward


def model_jacobians(
    world_model, obs: torch.Tensor, action: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The world model's next observations, rewards and their action-Jacobians per latent draw: obs (S,), action (A,),
    noise (n, L) -> (n, S), (n,), (n, S, A), (n, A)."""

    def one_draw(a: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        next_obs, reward = world_model.sample(obs[None], a[None], 1, eps[None, None])
        return next_obs[0, 0], reward[0, 0]

    with torch.no_grad():
        values = torch.func.vmap(one_draw, in_dims=(None, 0))(action, noise)
        jacobians = torch.func.vmap(torch.func.jacfwd(one_draw), in_dims=(None, 0))(action, noise)
    return (*values, *jacobians)


def compare(model: np.ndarray, sim: np.ndarray) -> tuple[float, float]:
    """(relative Frobenius error |model - sim| / |sim|, cosine of the two flattened)."""
    model, sim = model.ravel(), sim.ravel()
    sim_norm, model_norm = np.linalg.norm(sim), np.linalg.norm(model)
    relative = float(np.linalg.norm(model - sim) / max(sim_norm, 1e-12))
    cosine = float(model @ sim / max(sim_norm * model_norm, 1e-12))
    return relative, cosine


def probe(env, actor, world_model, args: Args) -> list[dict]:
    """Roll out the deterministic policy and compare model and simulator at every `every`-th step."""
    generator = torch.Generator().manual_seed(args.seed)
    rows, step, episode = [], 0, 0
    obs, _ = env.reset(seed=args.seed)
    while len(rows) < args.probes:
        with torch.no_grad():
            action = actor(torch.as_tensor(obs)[None])[0].numpy()
        if step % args.every == 0:
            factor = observation_factor(env)
            next_obs, reward, d_obs, d_reward = simulator_jacobians(env, action, factor, args.fd_step)
            noise = torch.randn(args.samples, world_model.latent_dim, generator=generator)
            m_obs, m_reward, m_d_obs, m_d_reward = (
                t.double().numpy()
                for t in model_jacobians(world_model, torch.as_tensor(obs), torch.as_tensor(action), noise)
            )
            sim_jacobian = np.concatenate([d_obs.ravel(), d_reward])  # (S A + A,)
            single = [
                compare(np.concatenate([m_d_obs[i].ravel(), m_d_reward[i]]), sim_jacobian) for i in range(args.samples)
            ]
            rows.append(
                {
                    "episode": episode,
                    "step": step,
                    "ds_da": compare(m_d_obs.mean(0), d_obs),
                    "dr_da": compare(m_d_reward.mean(0), d_reward),
                    "single_draw": [float(np.median([s[0] for s in single])), float(np.median([s[1] for s in single]))],
                    "next_obs_error": float(
                        np.linalg.norm(m_obs.mean(0) - next_obs) / max(np.linalg.norm(next_obs - obs), 1e-12)
                    ),
                    "reward_error": float(abs(m_reward.mean() - reward)),
                    "ds_da_norm": [float(np.linalg.norm(m_d_obs.mean(0))), float(np.linalg.norm(d_obs))],
                    "dr_da_norm": [float(np.linalg.norm(m_d_reward.mean(0))), float(np.linalg.norm(d_reward))],
                }
            )
        obs, _, terminated, truncated, _ = env.step(action)
        step += 1
        if terminated or truncated:
            obs, _ = env.reset()
            episode += 1
    return rows


def quartiles(values: list[float]) -> list[float]:
    return [float(q) for q in np.percentile(values, [25, 50, 75])]


def main(args: Args) -> None:
    for name, value, least in (
        ("--probes", args.probes, 1),
        ("--every", args.every, 1),
        ("--samples", args.samples, 1),
    ):
        if value < least:
            fail(f"{name} must be >= {least} (got {value})")
    if not (0 < args.fd_step <= 0.1):
        fail(f"--fd-step must be in (0, 0.1] (got {args.fd_step})")
    if message := out_error(args.out):
        fail(message)
    script, run_args, env, actor, world_model = load_run(args.checkpoint)
    torch.set_num_threads(1)
    rows = probe(env, actor, world_model, args)
    summary = {
        "run": args.checkpoint,
        "script": script.__name__,
        "env_id": run_args.env_id,
        "probes": len(rows),
        "episodes": rows[-1]["episode"] + 1,
        "ds_da_relative_error": quartiles([r["ds_da"][0] for r in rows]),
        "ds_da_cosine": quartiles([r["ds_da"][1] for r in rows]),
        "dr_da_relative_error": quartiles([r["dr_da"][0] for r in rows]),
        "dr_da_cosine": quartiles([r["dr_da"][1] for r in rows]),
        "single_draw_relative_error": quartiles([r["single_draw"][0] for r in rows]),
        "single_draw_cosine": quartiles([r["single_draw"][1] for r in rows]),
        "next_obs_error_over_change": quartiles([r["next_obs_error"] for r in rows]),
        "reward_error": quartiles([r["reward_error"] for r in rows]),
        "ds_da_norm_simulator": quartiles([r["ds_da_norm"][1] for r in rows]),
        "dr_da_norm_simulator": quartiles([r["dr_da_norm"][1] for r in rows]),
        "dr_da_norm_model": quartiles([r["dr_da_norm"][0] for r in rows]),
    }
    print(f"{summary['script']} on {summary['env_id']}: {len(rows)} probes over {summary['episodes']} episodes")
    print("quartiles (25 / 50 / 75 %) over the probes:")
    for key in [k for k, v in summary.items() if isinstance(v, list)]:
        q1, q2, q3 = summary[key]
        print(f"  {key:30s} {q1:9.3f} {q2:9.3f} {q3:9.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"settings": vars(args), "summary": summary, "probes": rows}, f, indent=1)


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
