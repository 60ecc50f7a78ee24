"""What a flag adds to the RL scripts beyond their algorithm and their run's bookkeeping (run_bookkeeping.py), written
once beside them and imported only under its flag (as CleanRL imports `cleanrl_utils.evals` under `--save-model`):
CUDA-graph capture (`--cudagraphs`, on a GPU), W&B (`--track`), video (`--capture-video`) and compilation
(`--compile`). It imports no other module of the project: run_bookkeeping.py imports it under --track and
--capture-video, the scripts under the other flags. (The flow world model, an algorithm's part, is flow_world_model.py.)
"""

import contextlib
import glob
import os
import warnings
from collections.abc import Callable
from types import ModuleType

import gymnasium as gym
import torch
import torch.nn as nn


# CUDA GRAPHS (--cudagraphs)
class CudaGraphStep:
    """A training step run as one CUDA graph (--cudagraphs), LeanRL-style. Its first `warmup` calls run eagerly on a
    side stream (optimizer states, cuBLAS workspaces and autograd buffers get allocated there), the next call is
    captured, and every later call replays the capture. The step may not sync with the host; tensor arguments are copied
    into the captured ones (nothing to copy when they are the same tensors), and the outputs are the same tensors at
    every call, overwritten by each replay."""

    def __init__(self, step: Callable, warmup: int = 3):
        self.step, self.warmup, self.graph = step, warmup, None

    def __call__(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor] | torch.Tensor:
        if self.graph is not None:
            for captured, given in zip(self.inputs, inputs):
                if given is not captured:
                    captured.copy_(given)
            self.graph.replay()
            return self.outputs
        if self.warmup > 0:
            self.warmup -= 1
            side_stream = torch.cuda.Stream()
            side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side_stream):
                outputs = self.step(*inputs)
            torch.cuda.current_stream().wait_stream(side_stream)
            return outputs
        self.graph, self.inputs = torch.cuda.CUDAGraph(), inputs
        with torch.cuda.graph(self.graph):
            self.outputs = self.step(*inputs)
        self.graph.replay()
        return self.outputs


# TRACKING (--track) AND VIDEO (--capture-video)
def start_tracking(args, run_dir: str) -> ModuleType:
    """wandb.init as CleanRL does: TensorBoard synced, hyperparameters and code saved; the W&B run's id is the run
    name, so a resumed run continues it. W&B files go to $WANDB_DIR if set, else runs/wandb/. Returns the wandb
    module."""
    run_name = os.path.basename(run_dir)
    try:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            id="".join(c if c.isalnum() or c in "-_" else "-" for c in run_name),
            resume="allow",
            save_code=True,
            dir=os.environ.get("WANDB_DIR", os.path.dirname(os.path.abspath(run_dir))),
        )
    except Exception as error:  # not installed, not logged in, no network, ...
        reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        raise ValueError(f"--track: cannot start W&B ({reason}); WANDB_MODE=offline logs locally") from None
    return wandb


def log_eval_video(wandb: ModuleType, run_dir: str, step: int) -> None:
    """Send the video of the evaluation at `step` to W&B."""
    videos = glob.glob(os.path.join(run_dir, "videos", f"eval-step-{step}-*.mp4"))
    wandb.log({"videos/eval": wandb.Video(videos[0], format="mp4")})


def headless_rendering(env_id: str) -> None:
    """For a MuJoCo env, pick MuJoCo's headless GL backend before the envs are made: MUJOCO_GL if set, else egl, else
    osmesa, the first with which `env_id` renders a frame here; a ValueError names why none does."""
    spec = gym.registry.get(env_id)
    if spec is None or "mujoco" not in str(spec.entry_point) or env_id[-3:] in ("-v2", "-v3"):
        return  # not MuJoCo, or an id make_gym_env refuses for what it is (mujoco-py's)
    errors = []
    for backend in [os.environ["MUJOCO_GL"]] if "MUJOCO_GL" in os.environ else ["egl", "osmesa"]:
        os.environ["MUJOCO_GL"] = backend
        try:
            with contextlib.closing(gym.make(env_id, render_mode="rgb_array")) as env:
                env.reset(seed=0)
                env.render()
            return
        except Exception as error:  # a missing GL library surfaces as anything from ImportError to AttributeError
            errors.append(f"MUJOCO_GL={backend}: {type(error).__name__}: {' '.join(str(error).split())}")
    raise ValueError(f"--capture-video: cannot render ({'; '.join(errors)}); see the README's 'Tracking and videos'")


def record_video(env: gym.Env, video_dir: str, episodes_per_evaluation: int, prefix: str = "rl-video") -> gym.Env:
    """`env` (made with render_mode "rgb_array") in gymnasium's RecordVideo, filming the first episode of every
    evaluation (of `episodes_per_evaluation` episodes) into `video_dir`, file names starting with `prefix`."""
    warnings.filterwarnings("ignore", ".*Overwriting existing videos")  # file names are unique but for reruns
    return gym.wrappers.RecordVideo(
        env,
        video_dir,
        episode_trigger=lambda episode: episode % episodes_per_evaluation == 0,
        name_prefix=prefix,
        disable_logger=True,
    )


# COMPILATION (--compile)
def compile_parts(actor: nn.Module, world_model: nn.Module | None) -> None:
    """torch.compile the parts never differentiated twice or under vmap that every script has: the actor and the
    world-model loss (DSDPG-MSMMD compiles its slicing search's chunk of steps itself)."""
    torch._inductor.config.fallback_random = True  # compiled code draws the same random numbers as eager code
    actor.compile()
    if world_model is not None:  # td3_huber --no-dyna has none
        world_model.loss = torch.compile(world_model.loss)
