"""Run a grid of RL-script invocations (scripts x env ids x flag sets x seeds), here or as a Slurm job array.

Every job is one `python <script>.py --env-id ENV --seed S <--common flags> <flag set>` subprocess with its own job
directory, `<grid-dir>/<script>/<env id>/<flag-set slug>/seed<S>/`, as its working directory: the script's outputs
land in `<job dir>/runs/<run name>/`, its stdout and stderr are appended to `<job dir>/stdout.txt` and `stderr.txt`.
Point `benchmarks/aggregate.py` at the grid directory afterwards.

Usage:
    python benchmarks/run_grid.py --scripts td3_huber dsdpg_msmmd_sobolev --env-ids PointMass-v0 --seeds 1 2 3 \\
        --flag-sets "" "--obs-noise mult" "--dyn-noise gauss" --common "--total-timesteps 20000" \\
        --grid-dir runs_grid/pointmass --workers 2
    python benchmarks/run_grid.py ... --dry-run                          # print the commands, run nothing
    python benchmarks/run_grid.py ... --backend slurm --slurm-partition gpu --slurm-gpus-per-task 1
    python benchmarks/aggregate.py runs_grid/pointmass --out results/pointmass

Choices:
    * Resuming: a job is done when `<job dir>/runs/*/summary.json` exists and is skipped. A job with a `checkpoint.pt`
      but no summary (an interrupted or timed-out run) is relaunched with `--resume <that checkpoint>`, so re-running
      the same command after an interruption, a crash or a cluster time limit finishes the grid without losing work.
      Each job dir keeps its flags in `job.json`; re-running a grid dir with different flags for a job is an error
      (its finished runs would otherwise be silently reused), unless they differ only by flags that change nothing
      (run_bookkeeping.flags_without_effect: e.g. world-model flags dropped from a `--no-dyna` job, which the scripts
      now refuse): those runs are the job's.
    * Bookkeeping: every finished attempt appends one JSON line (time, status, return code, seconds, command, cwd,
      the tail of stderr) to `<grid-dir>/grid_log.jsonl`, written by the job itself under a file lock, so the log is
      complete even on Slurm when the submitting process is gone. At the end the command prints how many jobs ran,
      were skipped and failed, with each failure's command and the last lines of its stderr, and exits 1 if any
      failed.
    * Concurrency: `--workers` jobs at a time (local and submitit-local), each with `--threads-per-job` CPU threads
      (OMP_NUM_THREADS and MKL_NUM_THREADS, which torch follows), by default the CPU count over the workers. Jobs
      are ordered seed-major, so an early stop still leaves whole seeds of every setting.
    * Slurm (`--backend slurm`) submits the jobs as job arrays through submitit (at most 1000 jobs per array, Slurm's
      default MaxArraySize; logs and pickles in `<grid-dir>/submitit`) and waits for them. A job is signalled 120 s
      before its time limit: it stops its run with SIGINT (the scripts then write a checkpoint) and requeues itself,
      and the requeued job resumes the run (at most 3 times; after that it is reported failed, and re-running the
      command resumes it again). Ctrl-C while waiting leaves the arrays running; re-run the command once they are
      over to finish the grid and see the summary. `--backend submitit-local` goes through the same submitit code
      with its LocalExecutor (--workers jobs at a time, the same --slurm-time-min), to try the Slurm path on one
      machine; it hides GPUs unless `--slurm-gpus-per-task` asks for some.
    * A job another invocation is running (its `job.lock` is held) is reported as busy, not started twice. The run
      inherits the lock, so a run that outlives its run_grid (killed with SIGKILL) still holds it.
    * Ctrl-C (local backend) sends one SIGINT to every running job, which then writes its checkpoint and is reported
      as interrupted; jobs not started yet are not started; the exit status is 130. SIGTERM (`kill`, a scheduler)
      and SIGHUP (a closed terminal) do the same, said in one line, with exit status 143 and 129 (a second one is
      ignored while the jobs write their checkpoints); an ignored SIGHUP (`nohup`) stays ignored. With
      submitit-local they stop the jobs through submitit (SIGINT, then the same checkpoint); Slurm's jobs keep running.
    * `--common` comes before the flag set on the command line, so a flag set can override a common flag. `--env-id`,
      `--seed` and `--resume` belong to the grid and may not appear in either. A flag set that changes the algorithm
      rather than the noise (e.g. `--no-dyna`) should also set `--exp-name`, which aggregate.py uses as the method's
      name. The values of `--common` and `--flag-sets` are taken verbatim although they look like flags:
      `--flag-sets` takes every following token up to the next option of run_grid.py. Flags that only some scripts
      accept (e.g. DSDPG's `--truncation 5`): run the command once per group of scripts with the same --grid-dir.
"""

import concurrent.futures
import contextlib
import datetime
import fcntl
import glob
import importlib
import io
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from typing import Annotated, Literal

import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_SCRIPTS = ("td3_huber", "mage_huber_sobolev", "mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev")
RESERVED_FLAGS = ("--env-id", "--seed", "--resume")
SIGNAL_DELAY_S = 120
MAX_ARRAY_SIZE = 1000
STDERR_TAIL_LINES = 5


@dataclass
class Launch:
    """How and where the jobs run: run_grid.py's options, shared with benchmarks/paper.py."""

    grid_dir: str = "runs_grid"
    """where the job directories, grid_log.jsonl and the submitit files go"""
    workers: int = 1
    """jobs running at the same time (local and submitit-local backends; Slurm uses --slurm-array-parallelism)"""
    threads_per_job: int | None = None
    """CPU threads of each job (default: the CPU count over --workers; with Slurm, --slurm-cpus-per-task)"""
    backend: Literal["local", "slurm", "submitit-local"] = "local"
    """local: subprocesses here; slurm: a Slurm job array via submitit; submitit-local: submitit's LocalExecutor"""
    slurm_partition: str | None = None
    """Slurm partition (default: the cluster's)"""
    slurm_time_min: int = 1440
    """time limit of each job in minutes; a job that reaches it is requeued and resumes from its checkpoint"""
    slurm_gpus_per_task: int = 0
    """GPUs per job"""
    slurm_cpus_per_task: int = 2
    """CPUs per job"""
    slurm_array_parallelism: int = 64
    """jobs of the array running at the same time"""


@dataclass(kw_only=True)
class Args(Launch):
    env_ids: list[str]
    """the environments (any id the scripts accept, e.g. Walker2d-v4 PointMass-v0)"""
    scripts: list[str] = field(default_factory=lambda: [s for s in ALL_SCRIPTS if os.path.exists(f"{ROOT}/{s}.py")])
    """the RL scripts at the project's top level, with or without .py"""
    seeds: list[int] = field(default_factory=lambda: list(range(1, 11)))
    """the seeds (default: the paper's 10)"""
    flag_sets: Annotated[list[str], tyro.conf.UseAppendAction] = field(default_factory=list)
    """extra flags, one quoted string per setting: --flag-sets "" "--obs-noise mult" (default: "", no extra flags)"""
    common: str = ""
    """flags for every job (e.g. "--total-timesteps 20000 --eval-frequency 1000"), before the flag set's"""
    dry_run: bool = False
    """print each job's state (run, resume, done) and command, and run nothing"""


@dataclass(frozen=True)
class Job:
    """One invocation: everything a worker on another machine needs, in plain values."""

    script: str
    env_id: str
    flag_slug: str
    seed: int
    job_dir: str
    command: tuple[str, ...]
    threads: int
    log_path: str

    @property
    def flags(self) -> tuple[str, ...]:
        """The script's flags after --env-id and --seed: the common flags, then the flag set's."""
        return self.command[6:]

    @property
    def name(self) -> str:
        return f"{self.script} {self.env_id} {self.flag_slug} seed{self.seed}"


def fail(message: str) -> None:
    """One line on stderr, exit status 1, no traceback (named after the tool run: run_grid.py or paper.py)."""
    raise SystemExit(f"{os.path.basename(sys.argv[0])}: error: {message}")


def slug(flag_set: list[str]) -> str:
    """A directory name for a flag set: "--obs-noise mult" -> "obs-noise_mult"; no flags -> "default"."""
    if not flag_set:
        return "default"
    return re.sub(r"[^\w.=+-]", "-", "_".join(token.lstrip("-") for token in flag_set))


def split_flags(text: str, what: str) -> list[str]:
    try:
        tokens = shlex.split(text)
    except ValueError as error:
        fail(f"{what} {text!r}: {error}")
    for token in tokens:
        if token.split("=", 1)[0] in RESERVED_FLAGS:
            fail(f"{what} {text!r}: {token.split('=', 1)[0]} is set by the grid")
    return tokens


def check_launch(launch: Launch) -> None:
    if launch.workers < 1:
        fail("--workers must be >= 1")
    if launch.threads_per_job is not None and launch.threads_per_job < 1:
        fail("--threads-per-job must be >= 1")
    if min(launch.slurm_time_min, launch.slurm_cpus_per_task, launch.slurm_array_parallelism) < 1:
        fail("--slurm-time-min, --slurm-cpus-per-task and --slurm-array-parallelism must be >= 1")
    if launch.slurm_gpus_per_task < 0:
        fail("--slurm-gpus-per-task must be >= 0")


def build_jobs(args: Args) -> list[Job]:
    """The grid in seed-major order; validates the flags (exits with one line on error)."""
    check_launch(args)
    scripts = list(dict.fromkeys(s[: -len(".py")] if s.endswith(".py") else s for s in args.scripts))
    for script in scripts:
        if os.path.basename(script) != script or not os.path.isfile(os.path.join(ROOT, f"{script}.py")):
            fail(f"--scripts: no script {script!r} in {ROOT}")
    for env_id in args.env_ids:
        if not env_id or env_id != os.path.basename(env_id) or env_id.startswith("."):
            fail(f"--env-ids: {env_id!r} is not an environment id")
    if not (scripts and args.env_ids and args.seeds):
        fail("--scripts, --env-ids and --seeds must each name at least one value")
    common = split_flags(args.common, "--common")
    flag_sets = {}
    for text in dict.fromkeys(args.flag_sets or [""]):
        tokens = split_flags(text, "--flag-sets")
        name = slug(tokens)
        if name in flag_sets:
            fail(f"--flag-sets: {text!r} and {shlex.join(flag_sets[name])!r} share the directory name {name}")
        flag_sets[name] = tokens
    for what, tokens in [("--common", common)] + [("--flag-sets", tokens) for tokens in flag_sets.values()]:
        if len(scripts) > 1 and "--exp-name" in {token.split("=", 1)[0] for token in tokens}:
            fail(
                f"{what} {shlex.join(tokens)!r}: one --exp-name would name the runs of {len(scripts)} scripts alike, "
                "and aggregate.py would pool them as one method: run one script per --exp-name"
            )
    if args.threads_per_job is not None:
        threads = args.threads_per_job
    elif args.backend == "slurm":
        threads = args.slurm_cpus_per_task
    else:
        threads = max(1, (os.cpu_count() or 1) // args.workers)
    grid_dir = os.path.abspath(args.grid_dir)
    jobs = []
    for seed, env_id, flag_slug, script in itertools.product(
        dict.fromkeys(args.seeds), dict.fromkeys(args.env_ids), flag_sets, scripts
    ):
        command = (
            sys.executable,
            os.path.join(ROOT, f"{script}.py"),
            "--env-id",
            env_id,
            "--seed",
            str(seed),
            *common,
            *flag_sets[flag_slug],
        )
        job_dir = os.path.join(grid_dir, script, env_id, flag_slug, f"seed{seed}")
        jobs.append(
            Job(script, env_id, flag_slug, seed, job_dir, command, threads, os.path.join(grid_dir, "grid_log.jsonl"))
        )
    return jobs


def job_flags(job: Job) -> dict:
    """What identifies a job's runs: stored in job.json (paths to python and the script are left out)."""
    return {"script": job.script, "flags": list(job.command[2:])}


def same_settings(job: Job, saved: dict) -> bool:
    """Whether a job dir's saved flags make the job's runs: the same script, and the same settings once the flags that
    change nothing are put back to their defaults (run_bookkeeping.effective_args). Imports the script (and torch)."""
    if saved.get("script") != job.script:
        return False
    sys.path.insert(0, ROOT)
    try:
        module, run_bookkeeping = importlib.import_module(job.script), importlib.import_module("run_bookkeeping")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            settings = [
                run_bookkeeping.effective_args(tyro.cli(module.Args, args=flags))
                for flags in (saved["flags"], list(job.command[2:]))
            ]
    except SystemExit:  # flags the script does not take (any more)
        return False
    finally:
        sys.path.remove(ROOT)
    return settings[0] == settings[1]


def check_job_dir(job: Job) -> None:
    """Exit if the job dir holds runs made with other flags (flags that change nothing aside)."""
    path = os.path.join(job.job_dir, "job.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved != job_flags(job) and not same_settings(job, saved):
            fail(
                f"{job.job_dir} holds runs of {shlex.join(saved['flags'])!r}, not "
                f"{shlex.join(job_flags(job)['flags'])!r}: use another --grid-dir"
            )


def job_state(job_dir: str) -> tuple[Literal["done", "resume", "new"], str | None]:
    """done (a summary.json exists), resume (the newest checkpoint.pt of a run without summary) or new."""
    if glob.glob(os.path.join(glob.escape(job_dir), "runs", "*", "summary.json")):
        return "done", None
    checkpoints = glob.glob(os.path.join(glob.escape(job_dir), "runs", "*", "checkpoint.pt"))
    if checkpoints:
        return "resume", max(checkpoints, key=os.path.getmtime)
    return "new", None


def stderr_tail(text: str) -> str:
    """The last lines of a job's stderr, progress-bar redraws removed."""
    lines = [
        line
        for line in text.replace("\r", "\n").splitlines()
        if line.strip() and not re.search(r"\d+/\d+ \[[^]]*(it/s|s/it)", line)
    ]
    return "\n".join(lines[-STDERR_TAIL_LINES:])


def append_log(job: Job, record: dict) -> None:
    """One JSON line in grid_log.jsonl, under an exclusive lock (jobs may finish at the same time on several nodes)."""
    with open(job.log_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(record) + "\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)


def unignore_sigint() -> None:
    """A shell that starts a command in the background (`cmd &`) makes it ignore SIGINT, and an ignored signal stays
    ignored across exec: the runs would then ignore the SIGINT that makes them write a checkpoint. A handled signal
    is reset to its default at exec, so handling SIGINT here gives every run its KeyboardInterrupt back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C raises KeyboardInterrupt: the grid stops the same way."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stopped_like_ctrl_c():
    """While the jobs run, SIGTERM and SIGHUP raise `Stopped` once (a further one is ignored: the jobs are writing
    their checkpoints); an ignored one (`nohup`) stays ignored. The previous handlers are restored after."""

    def stop(signum: int, frame: object) -> None:
        for name in previous:
            signal.signal(name, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {name: signal.getsignal(name) for name in (signal.SIGTERM, signal.SIGHUP)}
    previous = {name: handler for name, handler in previous.items() if handler is not signal.SIG_IGN}
    for name in previous:
        signal.signal(name, stop)
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(name, handler)


def signal_number(stop: KeyboardInterrupt) -> int:
    """The signal that stopped the grid: Stopped's, else SIGINT (Ctrl-C)."""
    return getattr(stop, "signum", signal.SIGINT)


class RunJob:
    """Runs one job to completion: the callable a local worker thread or a submitit job executes.

    `checkpoint` is submitit's hook for a job about to hit its time limit or preempted: it stops the run with SIGINT
    (the script writes its checkpoint) and resubmits the same job, which then resumes the run.
    """

    def __init__(self, under_submitit: bool = False):
        self.under_submitit = under_submitit
        self.process: subprocess.Popen | None = None
        self.interrupted = False

    def __getstate__(self) -> dict:
        return {"under_submitit": self.under_submitit, "process": None, "interrupted": False}

    def __call__(self, job: Job) -> dict:
        if self.under_submitit:  # the main thread of a submitit job
            unignore_sigint()
        os.makedirs(job.job_dir, exist_ok=True)
        record = {"job": job.name, "cwd": job.job_dir, "threads": job.threads}
        lock = open(os.path.join(job.job_dir, "job.lock"), "w")
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return {**record, "status": "busy", "command": shlex.join(job.command)}
            except OSError:
                pass  # a file system without locks: run unlocked
            return self.run_locked(job, record, lock.fileno())
        finally:
            lock.close()

    def run_locked(self, job: Job, record: dict, lock_fd: int) -> dict:
        """Run the job, which inherits the open `job.lock` (`lock_fd`): the lock is held until the run ends, even if
        this process is killed first, so the job is never started beside a run of it."""
        state, checkpoint = job_state(job.job_dir)
        if state == "done":
            return {**record, "status": "skipped", "command": shlex.join(job.command)}
        with open(os.path.join(job.job_dir, "job.json"), "w") as f:
            json.dump(job_flags(job), f, indent=2)
        command = list(job.command) + (["--resume", checkpoint] if state == "resume" else [])
        record["command"] = shlex.join(command)
        env = {**os.environ, "OMP_NUM_THREADS": str(job.threads), "MKL_NUM_THREADS": str(job.threads)}
        start = time.time()
        with (
            open(os.path.join(job.job_dir, "stdout.txt"), "a") as out,
            open(os.path.join(job.job_dir, "stderr.txt"), "a+") as err,
        ):
            err_start = err.tell()
            try:
                # Own session: a Ctrl-C at the terminal reaches run_grid only, which forwards one SIGINT per job.
                # Under submitit the run ignores SIGUSR2, Slurm's time-limit warning, which RunJob.checkpoint handles.
                self.process = subprocess.Popen(
                    command,
                    cwd=job.job_dir,
                    env=env,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    pass_fds=(lock_fd,),
                    preexec_fn=(lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN)) if self.under_submitit else None,
                )
                try:
                    returncode = self.process.wait()
                except KeyboardInterrupt:  # a submitit job's main thread: stop the run (it checkpoints) with it
                    self.interrupt()
                    self.process.wait()
                    raise
            except OSError as error:
                print(f"run_grid.py: cannot start {command[0]}: {error}", file=err)
                returncode = None
            err.seek(err_start)
            tail = stderr_tail(err.read())
        self.process = None
        state, _ = job_state(job.job_dir)
        if returncode == 0 and state != "done":
            tail += "\nrun_grid.py: the run exited 0 but wrote no summary.json"
        status = "ok" if returncode == 0 and state == "done" else "interrupted" if self.interrupted else "failed"
        record.update(
            status=status,
            returncode=returncode,
            seconds=round(time.time() - start, 2),
            time=datetime.datetime.now().isoformat(timespec="seconds"),
            stderr_tail=tail,
        )
        append_log(job, record)
        return record

    def interrupt(self) -> None:
        """Send the running script one SIGINT (it writes a checkpoint and exits)."""
        if self.process is not None and self.process.poll() is None:
            self.interrupted = True
            self.process.send_signal(signal.SIGINT)

    def checkpoint(self, job: Job):
        import submitit

        process = self.process
        if process is not None:
            self.interrupt()
            # The interrupted frame may hold the Popen's wait lock: watch the exit with waitid(WNOWAIT) instead.
            deadline, returncode = time.time() + SIGNAL_DELAY_S - 20, None
            while time.time() < deadline:
                try:
                    status = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:  # already reaped
                    returncode = process.returncode
                    break
                if status is not None:
                    returncode = status.si_status
                    break
                time.sleep(0.2)
            else:
                process.kill()
            append_log(
                job,
                {
                    "job": job.name,
                    "cwd": job.job_dir,
                    "status": "requeued",
                    "returncode": returncode,
                    "time": datetime.datetime.now().isoformat(timespec="seconds"),
                },
            )
        return submitit.helpers.DelayedSubmission(RunJob(self.under_submitit), job)


def report(done: int, total: int, record: dict) -> None:
    seconds = f" {record['seconds']:.1f}s" if "seconds" in record else ""
    print(f"[{done}/{total}] {record['status']}{seconds} {record['job']}", flush=True)


def run_local(jobs: list[Job], workers: int) -> tuple[list[dict], int | None]:
    """Worker threads, each running one subprocess at a time. Returns the records and the signal that stopped it
    (Ctrl-C's SIGINT, SIGTERM, SIGHUP), if one did."""
    runners = {job: RunJob() for job in jobs}
    records, futures = [], []
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        try:
            futures += [pool.submit(runners[job], job) for job in jobs]
            for future in concurrent.futures.as_completed(futures):
                records.append(future.result())
                report(len(records), len(jobs), records[-1])
        except KeyboardInterrupt as stop:  # the jobs first: after SIGHUP the terminal may take no message
            for future in futures:
                future.cancel()
            for runner in runners.values():
                runner.interrupt()
            with contextlib.suppress(OSError):
                name = signal.Signals(signal_number(stop)).name
                print(
                    f"run_grid.py: interrupted by {name}; stopping the running jobs (a job in its training loop writes "
                    "a checkpoint, one still starting stops with nothing to resume)",
                    file=sys.stderr,
                )
            concurrent.futures.wait(futures)
            return [f.result() for f in futures if not f.cancelled()], signal_number(stop)
    return records, None


def make_executor(args: Launch):
    """submitit's SlurmExecutor (or its LocalExecutor for submitit-local) with the --slurm-* settings, logs and pickles
    in <grid dir>/submitit."""
    import submitit

    folder = os.path.join(os.path.abspath(args.grid_dir), "submitit")
    if args.backend == "slurm":
        try:
            executor = submitit.SlurmExecutor(folder=folder)
        except RuntimeError as error:  # no srun on this machine
            fail(f"--backend slurm: {error}")
        executor.update_parameters(
            job_name="run_grid",
            time=args.slurm_time_min,
            cpus_per_task=args.slurm_cpus_per_task,
            gpus_per_task=args.slurm_gpus_per_task or None,
            ntasks_per_node=1,
            nodes=1,
            array_parallelism=args.slurm_array_parallelism,
            signal_delay_s=SIGNAL_DELAY_S,
            **({"partition": args.slurm_partition} if args.slurm_partition else {}),
        )
    else:
        executor = submitit.LocalExecutor(folder=folder)
        executor.update_parameters(
            timeout_min=args.slurm_time_min, gpus_per_node=args.slurm_gpus_per_task, signal_delay_s=SIGNAL_DELAY_S
        )
    return executor


def run_submitit(jobs: list[Job], args: Launch) -> tuple[list[dict], int | None]:
    """A Slurm job array (or submitit's LocalExecutor, at most --workers at a time), then wait for every job. Returns
    the records and the signal that stopped the waiting, if one did."""

    if not jobs:
        return [], None
    folder = os.path.join(os.path.abspath(args.grid_dir), "submitit")
    executor = make_executor(args)
    limit = len(jobs) if args.backend == "slurm" else args.workers
    pending, running, records = list(jobs), {}, []
    try:
        while args.backend == "slurm" and pending:  # arrays of at most MAX_ARRAY_SIZE jobs (Slurm's default limit)
            chunk, pending = pending[:MAX_ARRAY_SIZE], pending[MAX_ARRAY_SIZE:]
            array = executor.map_array(RunJob(under_submitit=True), chunk)
            running.update(zip(array, chunk))
            print(
                f"submitted Slurm array {array[0].job_id.split('_')[0]} ({len(array)} jobs); logs in {folder}",
                flush=True,
            )
        while pending or running:
            while pending and len(running) < limit:
                job = pending.pop(0)
                running[executor.submit(RunJob(under_submitit=True), job)] = job
            finished = [j for j in running if j.done()]
            for submitted in finished:
                job = running.pop(submitted)
                try:
                    records.append(submitted.result())
                except Exception as error:  # the submitit job died (time limit, node failure, out of memory, ...)
                    reason = (str(error).strip().splitlines() or [type(error).__name__])[-1]
                    records.append(
                        {
                            "job": job.name,
                            "cwd": job.job_dir,
                            "threads": job.threads,
                            "status": "failed",
                            "command": shlex.join(job.command),
                            "stderr_tail": f"submitit job {submitted.job_id}: {reason} (logs in {folder})",
                        }
                    )
                report(len(records), len(jobs), records[-1])
            if not finished:
                time.sleep(1)
    except KeyboardInterrupt as stop:
        if args.backend == "slurm":
            print(
                f"run_grid.py: interrupted; the {len(running)} submitted jobs keep running in Slurm; re-run this "
                f"command when they are over to finish the grid",
                file=sys.stderr,
            )
        else:
            if signal_number(stop) != signal.SIGINT:  # Ctrl-C reached the local jobs through the terminal already
                for submitted in running:
                    submitted.cancel()  # SIGINT: RunJob stops its run, which writes its checkpoint
            name = signal.Signals(signal_number(stop)).name
            with contextlib.suppress(OSError):
                print(f"run_grid.py: interrupted by {name}; re-run this command to finish the grid", file=sys.stderr)
        return records, signal_number(stop)
    return records, None


def attach_flag_values(argv: list[str]) -> list[str]:
    """tyro takes no value that looks like a flag ("--obs-noise mult") unless attached with '=': attach the values of
    --common, and those of --flag-sets (every token up to the next run_grid option), so they are taken verbatim."""
    options = {"-h", "--help"}
    for f in fields(Args):
        options |= {f"--{f.name.replace('_', '-')}", f"--no-{f.name.replace('_', '-')}"}
    out, i = [], 0
    while i < len(argv):
        token, i = argv[i], i + 1
        if token == "--common" and i < len(argv):
            out.append(f"--common={argv[i]}")
            i += 1
        elif token == "--flag-sets" and i < len(argv) and argv[i] not in options:
            while i < len(argv) and argv[i].partition("=")[0] not in options:
                out.append(f"--flag-sets={argv[i]}")
                i += 1
        else:
            out.append(token)
    return out


def print_jobs(jobs: list[Job]) -> list[str]:
    """Each job's state (new, resume, done) and the command that would run it; returns the states."""
    states = []
    for job in jobs:
        state, checkpoint = job_state(job.job_dir)
        resume = f" --resume {shlex.quote(checkpoint)}" if checkpoint else ""
        print(
            f"[{state}] cd {shlex.quote(job.job_dir)} && OMP_NUM_THREADS={job.threads} "
            f"{shlex.join(job.command)}{resume}"
        )
        states.append(state)
    return states


def write_probe_error(folder: str) -> str | None:
    """Why a file cannot be written in `folder` (which exists), or None if one can: a probe file is created and
    removed, since os.access says yes to root on a read-only folder. Shared by run_grid, aggregate and timing."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as error:
        return error.strerror or str(error)


def make_grid_dir(grid_dir: str) -> None:
    """Make the grid folder and try a file in it: one line and exit 1 if it cannot be written (before any job)."""
    path = os.path.abspath(grid_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        fail(f"--grid-dir {grid_dir} is a file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        fail(f"--grid-dir {grid_dir}: cannot write there ({error.strerror or error})")
    if reason := write_probe_error(path):
        fail(f"--grid-dir {grid_dir}: cannot write there ({reason})")


def launch(jobs: list[Job], options: Launch) -> int:
    """Runs the jobs that are not done (the others are skipped) and prints the summary. Returns the exit status: 0, 1 if
    a job failed or was busy, 128 + the signal's number if one stopped it (Ctrl-C: 130, SIGTERM: 143, SIGHUP: 129)."""
    make_grid_dir(options.grid_dir)
    states = {job: job_state(job.job_dir) for job in jobs}
    todo = [job for job in jobs if states[job][0] != "done"]
    skipped = len(jobs) - len(todo)
    print(
        f"{len(jobs)} jobs in {os.path.abspath(options.grid_dir)}: {skipped} skipped (summary.json exists), "
        f"{len(todo)} to run",
        flush=True,
    )
    with stopped_like_ctrl_c():
        if options.backend == "local":
            records, stopped_by = run_local(todo, options.workers)
        else:
            records, stopped_by = run_submitit(todo, options)
    interrupted = stopped_by is not None
    counts = {
        status: sum(r["status"] == status for r in records)
        for status in ("ok", "skipped", "failed", "busy", "interrupted")
    }
    print(
        f"done: {counts['ok']} ran, {skipped + counts['skipped']} skipped, {counts['failed']} failed"
        + (f", {counts['busy']} busy (running under another invocation)" if counts["busy"] else "")
        + (
            f", {counts['interrupted']} interrupted and {len(todo) - len(records)} not started or still running "
            f"(re-run the command to finish them)"
            if interrupted
            else ""
        )
    )
    for record in records:
        if record["status"] == "failed":
            threads = f"OMP_NUM_THREADS={record['threads']} " if "threads" in record else ""  # as --dry-run shows it
            print(f"FAILED: cd {shlex.quote(record['cwd'])} && {threads}{record['command']}")
            for line in record["stderr_tail"].splitlines():
                print(f"    {line}")
        elif record["status"] == "busy":
            print(f"BUSY: {record['cwd']} (its job.lock is held by another invocation)")
    if interrupted:
        return 128 + stopped_by
    return 1 if counts["failed"] or counts["busy"] else 0


def main(args: Args) -> None:
    unignore_sigint()
    jobs = build_jobs(args)
    for job in jobs:
        check_job_dir(job)
    if args.dry_run:
        print_jobs(jobs)
        return
    status = launch(jobs, args)
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    main(tyro.cli(Args, args=attach_flag_values(sys.argv[1:])))
