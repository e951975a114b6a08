"""The learner's continuous loop: wait for ready groups, train, checkpoint + mark consumed, publish.

One iteration (a *step*):
1. wait until ``groups_per_step`` ready groups exist that no step since the last checkpoint took;
2. build the batch (samples, advantages, stale samples dropped) against the learner's version;
3. pack and take one optimizer step (in a worker thread, so signals and the store stay served);
4. on checkpoint steps: write the checkpoint atomically, then in ONE transaction record it and
   mark every group trained since the previous checkpoint consumed;
5. on publishing steps (always checkpoint steps too): save ``policy-v{N}`` and load it through the
   gateway;
6. store the step's metrics and write them to TensorBoard.

Exactly once, whatever moment the process dies at: the model state and the consumed groups only
ever move together (step 4), and a restart loads the checkpoint the store's newest row names. A
version is published only after the checkpoint that produced it is committed, so a restart never
retrains into a different adapter under a published version; one committed but not yet published
is published on restart.

SIGTERM / SIGINT stop it gracefully: the current step finishes, groups trained since the last
checkpoint are checkpointed and committed, then it returns.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from learner.adapter_probe import probe_ids_from
from learner.advantages import group_advantages
from learner.checkpoint import (
    load_checkpoint,
    prune_checkpoints,
    remove_orphans,
    save_checkpoint,
)
from learner.config import LearnerConfig
from learner.groups import ReadyGroup, build_batch, run_temperature
from learner.intake import GroupCheck, GroupIntake, trained_policy, wait_for_run
from learner.metrics import Metrics, MetricsSink, StepTimes, step_metrics, step_summary, why_nothing_trained
from learner.mismatch import call_records, is_alarming
from learner.progress import LearnerError, LearnerResult, Learning, Progress
from learner.prometheus import LearnerExporter
from learner.publish import GatewayUnreachable, Published, Publisher, publication_metrics
from learner.ranks import tell_followers
from learner.served_settings import resolve_max_staleness, resolve_token_budget
from learner.session_advantages import RunningBaselines, batch_session_advantages
from learner.trainer import Trainer, build_trainer, train_batch
from store.store import Store
from store.training import CheckpointRecord

logger = logging.getLogger("learner")
MISMATCH_ALARM = (
    "step %d: the learner's log-probs of tokens its own version sampled differ from the engine's by "
    "%.4f nats per token (loss.mismatch_alarm %.4f): the engine is not computing what the learner "
    "trains (a bfloat16 engine, another chat template, an adapter the engine did not apply); compare "
    "the engine's dtype on /health with the learner's, or serve with --dtype float32"
)


async def run_learner(
    config: LearnerConfig,
    store: Store,
    run: str,
    *,
    publisher: Publisher | None = None,
    stop: asyncio.Event | None = None,
    on_step: Callable[[Metrics], None] | None = None,
    handle_signals: bool = True,
) -> LearnerResult:
    """Train on the run's ready groups until ``max_steps`` (0: forever) or ``stop`` is set.

    ``config`` must have its paths resolved (``learner.config.resolve_paths``). ``publisher``
    overrides the one built from the config (tests pass one on the in-process gateway).
    """
    stop = stop or asyncio.Event()
    restore = install_signal_handlers(stop) if handle_signals else (lambda: None)
    own_publisher = config.publish.enabled and publisher is None
    if not config.publish.enabled:
        publisher = None
    elif own_publisher:
        publisher = Publisher.of(config.publish)
    sink = exporter = None
    try:
        trainer = await asyncio.to_thread(build_trainer, config)  # under torchrun, with the other ranks
        config = await resolve_max_staleness(await resolve_token_budget(config, publisher, trainer), publisher)
        tell_followers("budget", (trainer.adapter, config.batch.token_budget))
        run_id = await wait_for_run(store, run, config.poll_interval_s, stop)
        if run_id is None:
            return LearnerResult(0, 0, "stopped")
        progress = await resume(store, run_id, config, trainer)
        tell_followers("resume", (trainer.adapter, progress.resumed_from))
        policy = await trained_policy(store, run)
        if publisher is not None:
            publisher.policy = policy  # it publishes that policy's versions only
            await sync_published(publisher, trainer, config, progress)
        exporter = serve_exporter(config.metrics_port)
        sink = MetricsSink(store, run_id, Path(config.tensorboard_dir), exporter and exporter.policy(policy))
        learning = Learning(config, store, run, run_id, trainer)
        reason = await _train(learning, publisher, sink, progress, stop, on_step)
        if progress.pending:  # graceful stop: keep the work done since the last checkpoint
            await checkpoint(learning, progress)
        return LearnerResult(progress.step, progress.version, reason)
    finally:
        tell_followers("stop")
        restore()
        if sink is not None:
            sink.close()
        if exporter is not None:
            exporter.close()
        if own_publisher and publisher is not None:
            await publisher.close()


async def train_from_url(config: LearnerConfig, database_url: str, run: str) -> LearnerResult:
    """``harnessrl train``: the loop on the store at ``database_url`` (already migrated)."""
    store = Store.from_url(database_url)
    try:
        return await run_learner(config, store, run)
    finally:
        await store.close()


async def _train(
    learning: Learning,
    publisher: Publisher | None,
    sink: MetricsSink,
    progress: Progress,
    stop: asyncio.Event,
    on_step: Callable[[Metrics], None] | None,
) -> str:
    intake = await open_intake(learning)
    baselines = RunningBaselines()  # per user, in memory: a restart starts them again (leave-one-out first)
    while not learning.config.max_steps or progress.step < learning.config.max_steps:
        waited = time.perf_counter()
        groups = await intake.next_groups({g.group_id for g in progress.pending}, stop)
        if groups is None:
            return "stopped"
        metrics = await take_step(
            learning, publisher, sink, progress, intake, baselines, groups, time.perf_counter() - waited
        )
        if on_step is not None:
            on_step(metrics)
        if stop.is_set():
            return "stopped"
    return "max_steps"


async def open_intake(learning: Learning) -> GroupIntake:
    """The run's ready groups, checked at its sampling temperature and the model's vocabulary."""
    check = GroupCheck(
        await _sampling_temperature(learning.store, learning.run_id, learning.config),
        _vocab_size(learning.trainer.model),
    )
    return GroupIntake(learning.store, learning.run_id, learning.config, check)


async def take_step(
    learning: Learning,
    publisher: Publisher | None,
    sink: MetricsSink,
    progress: Progress,
    intake: GroupIntake,
    baselines: RunningBaselines,
    groups: list[ReadyGroup],
    wait_s: float,
) -> Metrics:
    """One step on ``groups``: train, checkpoint and publish when due, record the metrics (returned)."""
    config, store, run_id, trainer = learning.config, learning.store, learning.run_id, learning.trainer
    started = time.perf_counter()
    version = progress.version
    advantages = None  # GRPO's, per group
    rewards = [[r.reward for r in g.rollouts] for g in groups]
    if config.batch.advantage == "session":  # live sessions: a running baseline per user
        advantages = batch_session_advantages(rewards, [g.users for g in groups], baselines)
    elif config.batch.advantage == "maxrl":  # per group, (r - mean) / mean (the intake refused rewards outside [0, 1])
        advantages = group_advantages(rewards, maxrl=True)
    batch = build_batch(
        groups,
        version,
        config.batch.max_staleness,
        config.batch.scale_by_std,
        intake.check.temperature,
        advantages,
        echo=config.loss.echo_weight > 0,  # groups without reward spread still teach ECHO their tool results
    )
    if progress.changed:  # stepped since the last publish: the weights are no published version
        batch = replace(batch, version=None)
    lr = trainer.lr
    per_call: dict[int, np.ndarray] = {}
    result, too_long = await asyncio.to_thread(_lead_step, trainer, batch, config, per_call)
    progress.step += 1
    if batch.version is not None:  # per token, what the step's mismatch metrics sum up
        await store.mismatch.save(run_id, call_records(per_call, progress.step, batch.version))
        await sink.record_mismatch(batch.version)
    progress.pending.extend(groups)
    if progress.probe_ids is None and batch.samples:
        progress.probe_ids = probe_ids_from(batch.samples[0].sample.input_ids)
    progress.changed = progress.changed or bool(result.get("optimizer_stepped"))
    if config.publishes_at(progress.step) and progress.changed:  # cut a new version
        progress.version, progress.changed = progress.version + 1, False
    if config.checkpoints_at(progress.step):
        await checkpoint(learning, progress)
    step_s = time.perf_counter() - started
    cut = progress.version > version
    published = await _publish(publisher, trainer, config, progress, cut) if publisher else None
    times = StepTimes(step_s, wait_s, published.swap_s if published else None)
    metrics = step_metrics(progress.step, version, lr, batch, too_long, result, times, intake.quarantined)
    metrics.update(publication_metrics(published))  # where a publication's time goes: writing, probe, gateway
    intake.quarantined = 0
    metrics["mismatch_alarmed"] = is_alarming(metrics, config.loss.mismatch_alarm)  # the viewer's banner
    await sink.record(progress.step, metrics)
    logger.info("%sstep %d: %s", _label(learning), progress.step, step_summary(metrics))
    if (nothing := why_nothing_trained(metrics)) is not None:
        logger.warning("%sstep %d %s", _label(learning), progress.step, nothing)
    if metrics["mismatch_alarmed"]:
        logger.warning(
            _label(learning) + MISMATCH_ALARM, progress.step, metrics["mismatch_mean_abs"], config.loss.mismatch_alarm
        )
    return metrics


def _label(learning: Learning) -> str:
    """Beside other policies, each log line names its run; alone, the lines stay as they were."""
    return f"[{learning.run}] " if learning.trainer.adapter != "default" else ""


def _lead_step(trainer: Trainer, batch, config: LearnerConfig, per_call: dict[int, np.ndarray]):
    tell_followers("batch", (trainer.adapter, batch))  # under torchrun the other ranks take their share of it
    return train_batch(trainer, batch, config, per_call)


def serve_exporter(port: int | None) -> LearnerExporter | None:
    """The learner process's Prometheus endpoint (every policy's series), when metrics_port asks for one."""
    if not port:
        return None
    exporter = LearnerExporter()
    try:
        exporter.serve(port)
    except OSError as exc:
        raise LearnerError(
            f"cannot serve learner metrics on 127.0.0.1:{port}: {exc}; "
            f"set metrics_port to a free port, or 0 for none (train --metrics-port PORT)"
        ) from None
    logger.info("Prometheus metrics on http://127.0.0.1:%d/metrics", port)
    return exporter


async def _sampling_temperature(store: Store, run_id: int, config: LearnerConfig) -> float:
    """The temperature the run's calls sampled at; the config's for a run from before sampling was fixed."""
    recorded = await run_temperature(store, run_id)
    if recorded is None:
        return config.temperature
    if recorded == 0:
        raise LearnerError(
            "this run samples greedily (temperature 0): an evaluation run, with no sampled "
            "distribution to train on; train on a run created with a temperature above 0"
        )
    if config.temperature not in (1.0, recorded):
        logger.warning(
            "the run samples at temperature %g: the learner takes its log-probs at that, not at the configured %g",
            recorded,
            config.temperature,
        )
    return recorded


def _vocab_size(model) -> int | None:
    embeddings = getattr(model, "get_input_embeddings", lambda: None)()
    return getattr(embeddings, "num_embeddings", None)


async def resume(store: Store, run_id: int, config: LearnerConfig, trainer: Trainer) -> Progress:
    """Load the checkpoint the store last committed (if any); drop leftovers newer than it."""
    record = await store.training.latest_checkpoint(run_id)
    step, progress = 0, Progress(version=config.lora.init_version)  # a published warm start's version
    if record is not None:
        state = await asyncio.to_thread(
            load_checkpoint,
            Path(record.path),
            trainer.model,
            trainer.optimizer,
            trainer.scheduler,
            trainer.adapter,
        )
        if state.step != record.step:
            raise LearnerError(
                f"checkpoint {record.path} holds step {state.step} but the store recorded step "
                f"{record.step} there: two runs share this checkpoint dir; give each its own"
            )
        step = record.step
        progress = Progress(
            step=step, version=record.version, changed=bool(state.meta.get("changed")), resumed_from=record.path
        )
        logger.info("resumed run at step %d (version %d) from %s", step, record.version, record.path)
    for orphan in remove_orphans(Path(config.checkpoint.dir), step):
        logger.info("removed uncommitted checkpoint %s", orphan)
    return progress


async def checkpoint(learning: Learning, progress: Progress) -> None:
    """Write the checkpoint, then commit it together with the groups it consumes."""
    config, trainer = learning.config, learning.trainer
    step, groups, version = progress.step, progress.pending, progress.version
    last = groups[-1] if groups else None
    meta = {
        "run": learning.run,
        "group_ids": [g.group_id for g in groups],
        "changed": progress.changed,
        "last_ready_at": last.ready_at.isoformat() if last and last.ready_at else None,
        "config": config.model_dump(mode="json"),  # the admin key is a secret, never dumped
    }
    path = await asyncio.to_thread(
        save_checkpoint,
        Path(config.checkpoint.dir),
        step,
        version,
        trainer.model,
        trainer.optimizer,
        trainer.scheduler,
        meta,
    )
    record = CheckpointRecord(
        step,
        version,
        str(path),
        tuple(meta["group_ids"]),
        last.ready_at if last else None,
        last.group_id if last else None,
    )
    await learning.store.training.commit_checkpoint(learning.run_id, record)
    progress.pending = []
    prune_checkpoints(Path(config.checkpoint.dir), step, config.checkpoint.keep)


async def _publish(
    publisher: Publisher, trainer: Trainer, config: LearnerConfig, progress: Progress, cut: bool
) -> Published | None:
    """Publish the version this step cut (``cut``); a gateway that is down is retried next time."""
    if not (cut or progress.unpublished):
        return None
    if not config.checkpoints_at(progress.step):
        return None  # a failed publication waits for the next checkpointed step
    version = progress.version
    try:
        published = await publisher.publish(trainer.model, version, progress.probe_ids)
    except GatewayUnreachable as exc:
        logger.warning(
            "could not publish %s-v%d, will publish a newer version later: %s", publisher.policy, version, exc
        )
        progress.unpublished = True
        return None
    progress.unpublished = False
    logger.info("published %s in %.2f s", published.name, published.swap_s)
    return published


async def sync_published(publisher: Publisher, trainer: Trainer, config: LearnerConfig, progress: Progress) -> None:
    """On start: publish the resumed version if the gateway lacks it (a crash between commit and
    publication); refuse a gateway that already serves a newer version than this learner holds."""
    step, want = progress.step, progress.version
    current = await publisher.current_version()
    if current > want:
        raise LearnerError(
            f"the gateway at {config.publish.gateway_url} serves {publisher.policy}-v{current}, newer than this run's "
            f"learner (v{want} at step {step}): another learner publishes policy {publisher.policy!r}, or this run's "
            f"checkpoints were reset. Versions are per policy: give each run a policy of its own "
            f"(`harnessrl run --policy NAME`), or set publish = false"
        )
    if want > current:
        published = await publisher.publish(trainer.model, want)
        logger.info("published %s (committed before the last stop, not yet served)", published.name)


def install_signal_handlers(stop: asyncio.Event) -> Callable[[], None]:
    """SIGTERM/SIGINT set ``stop``; returns a function that restores the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not supported on this platform / loop
            pass
    return lambda: [loop.remove_signal_handler(sig) for sig in installed]
