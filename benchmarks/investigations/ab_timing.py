"""Before/after wall clock of one script, interleaved in one process: the script of another checkout (BEFORE, e.g. a
`git worktree` of an older commit) against this checkout's, run alternately so both see the same machine.

An iteration's time is measured as in timing.py: the script's main() to --learning-starts + 1 steps (the first
iteration with updates) and to --learning-starts + 1 + K steps from the same seed,
(T(start + 1 + K) - T(start + 1)) / K.

Usage:
    git worktree add /tmp/before 4d3c251
    OMP_NUM_THREADS=1 python benchmarks/investigations/ab_timing.py /tmp/before --script dsdpg_mmd_sobolev \
        --env-id Hopper-v4
"""

import importlib.util
import json
import os
import sys
from dataclasses import dataclass

import torch
import tyro

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import timing  # noqa: E402


@dataclass
class Args:
    before: tyro.conf.Positional[str]
    """the checkout holding the 'before' version of the script"""
    script: str = "dsdpg_mmd_sobolev"
    """the script (module name) to time in both checkouts"""
    env_id: str = "Hopper-v4"
    """the environment"""
    learning_starts: int = 256
    """steps before the critic updates start"""
    iterations: int = 4
    """K, the timed iterations per measurement"""
    rounds: int = 2
    """before/after alternations"""


def load(checkout: str, name: str):
    """The module `name` from `checkout` under a name of its own, importing its siblings from there."""
    spec = importlib.util.spec_from_file_location(
        f"{name}__{abs(hash(checkout))}", os.path.join(checkout, f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, checkout)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def main(args: Args) -> None:
    settings = timing.Args(env_id=args.env_id, learning_starts=args.learning_starts)
    versions = {"before": load(os.path.abspath(args.before), args.script), "after": load(timing.ROOT, args.script)}
    peak = timing.matmul_flops_per_second(settings.device)
    print(f"{torch.get_num_threads()} threads, dense fp32 matmul {peak / 1e9:.0f} GFLOP/s")
    results: dict[str, list[float]] = {name: [] for name in versions}
    for round_ in range(args.rounds):
        for name, module in versions.items():
            base = timing.run(module, settings, args.learning_starts + 1, [])
            full = timing.run(module, settings, args.learning_starts + 1 + args.iterations, [])
            results[name].append(1e3 * (full - base) / args.iterations)
            print(f"round {round_ + 1} {name}: {results[name][-1]:.0f} ms / iteration", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main(tyro.cli(Args))
