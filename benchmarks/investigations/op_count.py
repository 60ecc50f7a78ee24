"""Operations, bytes written and FLOPs per iteration (one env step with its critic updates) of the RL scripts, counted
by difference of two runs of each script's main(), to 10 steps past --learning-starts and K more, so that the first
updates' different work (the optimizers' state, RAdam's unrectified first steps) cancels; FLOPs by timing.py's own
count over 5 iterations.
An operation is one aten call; bytes written are the sizes of the outputs of those that are not views. The evaluation
at each run's end is skipped: its episodes' lengths depend on the policy, so it would not cancel in the difference.

Usage (the toy sizes of benchmarks/toy_speed/README.md):
    python benchmarks/investigations/op_count.py --env-id PointMass5-v0 \
        --scripts mage_huber_sobolev dsdpg_mmd_sobolev@truncation=5 \
        --script-flags hidden_dim=64 wm_hidden_dim=64 batch_size=64 updates_per_step=2 learning_rate=0.001
"""

import importlib
import os
import sys
from dataclasses import dataclass, field

import torch
import tyro
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import timing  # noqa: E402

sys.path.insert(0, timing.ROOT)


@dataclass
class Args:
    env_id: str = "PointMass5-v0"
    """the environment every script runs on"""
    scripts: list[str] = field(default_factory=lambda: ["mage_huber_sobolev", "dsdpg_mmd_sobolev"])
    """the scripts (module names, optionally with @name=value,... settings, as in timing.py)"""
    script_flags: list[str] = field(default_factory=list)
    """extra `name=value` settings for every script's Args"""
    learning_starts: int = 256
    """steps before the critic updates start"""
    iterations: int = 5
    """K, the counted iterations"""


class OperationCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.operations, self.bytes_written = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.operations += 1
        if all(result.alias_info is None for result in func._schema.returns):  # a view writes nothing
            self.bytes_written += sum(t.nbytes for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out


def main(args: Args) -> None:
    torch.set_num_threads(1)
    settings = timing.Args(
        env_id=args.env_id, learning_starts=args.learning_starts, script_flags=args.script_flags, flop_iterations=5
    )
    print("| script | operations | MB written | MFLOP |\n|---|---|---|---|")
    for spec in args.scripts:
        name, _, variant = spec.partition("@")
        module = importlib.import_module(name)
        importlib.import_module("run_bookkeeping").evaluate = lambda *_: [0.0]  # the scripts evaluate through it
        variant = variant.split(",") if variant else []
        counts = []
        for extra in (10, 10 + args.iterations):
            counter = OperationCount()
            with counter:
                timing.run(module, settings, settings.learning_starts + extra, variant)
            counts.append((counter.operations, counter.bytes_written))
        ops, written = ((after - before) / args.iterations for before, after in zip(*counts))
        flop = timing.flops_per_iteration(module, settings, variant)
        print(f"| {spec} | {ops:.0f} | {written / 1e6:.2f} | {flop / 1e6:.1f} |")


if __name__ == "__main__":
    main(tyro.cli(Args))
