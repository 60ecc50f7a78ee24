"""Does the fast subset (`pytest -m "not slow"`) catch the unit-level mutations? Each mutation below is a one-line
change to the maths of a module (a target, a loss, an estimator, a wrapper, the dynamics, the buffer) or to the
bookkeeping that keeps a run from being lost (the exclusive run folder, run_grid's job lock and its stop forwarding);
each is applied to a copy of the repository and the fast subset is run there, stopping at the first failure. A mutation
the fast subset lets through is named, with what the full suite says of it when --full is given. Not collected by pytest
(no test_ prefix):

    python tests/check_fast_subset.py [--full]
"""

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTATIONS = [  # (file, text, replacement): replaced wherever it occurs in the top-level modules (the file named holds
    # it; a block the scripts share is mutated in every copy, as the identical-blocks test makes a change to it be made)
    ("td3_huber.py", "next_q.min(0).values if double_q", "next_q.max(0).values if double_q"),
    ("td3_huber.py", ".clamp(-noise_clip, noise_clip)", ".clamp(-2 * noise_clip, 2 * noise_clip)"),
    (
        "td3_huber.py",
        'F.huber_loss if td_loss == "huber" else F.mse_loss',
        'F.mse_loss if td_loss == "huber" else F.huber_loss',
    ),
    (
        "td3_huber.py",
        "actor_loss = -critic(obs, actor(obs), num_critics=1)[0].mean()",
        "actor_loss = critic(obs, actor(obs), num_critics=1)[0].mean()",
    ),
    ("td3_huber.py", "target_param.lerp_(param, args.tau)", "target_param.lerp_(param, 1 - args.tau)"),
    ("td3_huber.py", "p_log_std - q_log_std + ((2 * q_log_std)", "q_log_std - p_log_std + ((2 * q_log_std)"),
    ("td3_huber.py", "self.total_mean += delta * n / total", "self.total_mean += delta / total"),
    ("mage_huber_sobolev.py", "errors[..., 0] + grad_loss_weight * errors", "errors[..., 0] + errors"),
    (
        "mage_huber_sobolev.py",
        "torch.cat([returns.detach().unsqueeze(-1), grads], -1)",
        "torch.cat([returns.detach().unsqueeze(-1), grads / 2], -1)",
    ),
    ("mmd_critic.py", "return -torch.sqrt(1.0 + h**2 * sq_dist)", "return -torch.sqrt(1.0 + h * sq_dist)"),
    ("mmd_critic.py", "return k_xx / n**2 + k_yy / m**2 - 2 * k_xy", "return k_xx / n**2 + k_yy / m**2 - k_xy"),
    ("mmd_critic.py", "largest=False).indices", "largest=True).indices"),
    (
        "iqn.py",
        "(taus.unsqueeze(-1) - (errors < 0).float()).abs()",
        "(taus.unsqueeze(-1) - (errors > 0).float()).abs()",
    ),
    (
        "dsdpg_mmd_sobolev.py",
        "discount = (gamma * (1.0 - data.terminations))",
        "discount = ((1.0 - data.terminations))",
    ),
    (
        "dsdpg_mmd_sobolev.py",
        "returns = rewards + gamma * (1.0 - data.terminations)[:, None] * next_z",
        "returns = rewards + gamma * next_z",
    ),
    (
        "dsdpg_mmd_sobolev.py",
        "(torch.ones(num_critics, batch, n, device=data.obs.device), discount",
        "(torch.zeros(num_critics, batch, n, device=data.obs.device), discount",
    ),
    (
        "dsdpg_msmmd_sobolev.py",
        "discount = (gamma * (1.0 - data.terminations))",
        "discount = (gamma * (1.0 + data.terminations))",
    ),
    ("dsdpg_msmmd_sobolev.py", "grad = grad - (grad * theta).sum(-1, keepdim=True) * theta", "grad = grad + 0 * theta"),
    ("noise_wrappers.py", "uniform(1 - self.scale, 1 + self.scale)", "uniform(1 - self.scale, 1 + 2 * self.scale)"),
    ("pointmass_env.py", "self.pos = self.pos + DT * self.vel", "self.pos = self.pos + self.vel"),
    ("replay_buffer.py", "* self.fill).long()", "* (self.fill - 1)).long()"),
    # the bookkeeping a lost run would cost: a run folder another run made, a job run twice, a stop not passed on
    ("run_bookkeeping.py", "os.mkdir(name)", "os.makedirs(name, exist_ok=True)"),
    ("benchmarks/run_grid.py", "fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)", "pass"),
    ("benchmarks/run_grid.py", "                runner.interrupt()", "                pass"),
]


def survives(tree: Path, fast: bool) -> tuple[bool, float]:
    """Run the (fast or full) suite in `tree` up to its first failure: (True if it passed, seconds)."""
    start = time.time()
    marker = ["-m", "not slow"] if fast else []
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", *marker],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return result.returncode == 0, time.time() - start


def main() -> None:
    full = "--full" in sys.argv[1:]
    let_through = []
    with tempfile.TemporaryDirectory() as tmp:
        for path, text, replacement in MUTATIONS:
            tree = Path(tmp) / "tree"
            shutil.rmtree(tree, ignore_errors=True)
            shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "benchmarks", ".ci"))
            shutil.copytree(ROOT / "benchmarks", tree / "benchmarks", ignore=shutil.ignore_patterns("grid", "runs*"))
            assert text in (tree / path).read_text(), (path, text)
            for module in [tree / path] if "/" in path else tree.glob("*.py"):  # a tool's own file, else every script
                module.write_text(module.read_text().replace(text, replacement))
            passed, seconds = survives(tree, fast=True)
            verdict = "LET THROUGH" if passed else "caught"
            if passed and full:
                verdict += " (full suite: " + ("let through" if survives(tree, fast=False)[0] else "caught") + ")"
            print(f"{verdict:>12}  {seconds:5.0f} s  {path}: {text!r} -> {replacement!r}", flush=True)
            let_through += [path] if passed else []
    print(f"{len(MUTATIONS) - len(let_through)} of {len(MUTATIONS)} mutations caught by the fast subset")
    sys.exit(1 if let_through else 0)


if __name__ == "__main__":
    main()
