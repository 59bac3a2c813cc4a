"""Loading a model again when only its ``instance_group`` changed: the instances in place.

As Triton's core does (model_lifecycle.cc, backend_model.cc ``UpdateInstanceGroup``):
when the new config differs from the serving one only in ``instance_group`` and the
model's files are unchanged, the serving instances are matched against the new groups by
*signature* (their group's settings other than ``name`` and ``count``, and their device):
each one the new groups still ask for is kept, running and serving, with no
``finalize`` / ``initialize``; only the instances the new groups add are opened, and the
ones they no longer ask for are closed once their work is done.

Here the update builds a new ``ModelVersion`` around the kept instances and the added
ones (a new pool and scheduler, the same statistics), which the lifecycle swaps in like
any reload, so requests never see a half-updated model. A kept instance is then driven
by two workers for a while: the retiring version's, finishing what it accepted, and the
new version's. They share the instance's execution lock (``InstanceWorker.turn``), so it
still runs one batch at a time, and ownership (who closes it and its rate-limiter
reservation) passes to the new worker only when the new version is swapped in
(``hand_over``): a failed update closes what it opened and nothing else. The load then
waits only for the removed instances to finish their own work and close (``let_go``);
the old version's queue goes on to the new instances or to its kept ones, and its
sequences in progress go on where they are, so it retires in the background.

Not in place (a full reload, as before): files sent with the load, ensembles, a serving
version that is not ready, a different set of versions, and instances that execute in
worker processes driven from the event loop (``Remote``), which no lock covers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from inference import model_config_pb2 as mc

from ..backends.base import InstanceSpec, ModelInstance, RequestInstance
from ..scheduling.factory import create_scheduler
from ..scheduling.instances import InstancePool, InstanceWorker, Remote
from ..scheduling.rate_limiter import RateLimiter
from ..scheduling.sequence.batcher import SequenceBatchScheduler
from .instance_groups import instance_specs
from .loader import instance_workers
from .model import ModelEntry, ModelState, ModelVersion
from .warmup import warm_up, warmup_samples

__all__ = ["hand_over", "instance_only_change", "let_go", "update_instances"]

log = logging.getLogger(__name__)

Signature = tuple[bytes, str, int]


def _without_groups(config: mc.ModelConfig) -> bytes:
    rest = mc.ModelConfig()
    rest.CopyFrom(config)
    rest.ClearField("instance_group")
    return rest.SerializeToString(deterministic=True)


def _model_files(
    fingerprint: Sequence[tuple[str, int, int]], config_file: str
) -> list[tuple[str, int, int]]:
    return [entry for entry in fingerprint if entry[0] != config_file]


def instance_only_change(
    old: ModelEntry,
    config: mc.ModelConfig,
    fingerprint: Sequence[tuple[str, int, int]],
    versions: Sequence[int],
    config_file: str,
) -> bool:
    """Whether loading ``config`` over the serving ``old`` may update its instances in
    place: every version ready and kept, the files other than the config unchanged, and
    the config equal to the serving one but for ``instance_group``: the one it was
    loaded from, or the completed one the server shows (a load request's ``config`` is
    often that one, read back from ModelConfig)."""
    if old.failure or old.staged or old.calls or old.config is None or not old.versions:
        return False
    if sorted(old.versions) != sorted(versions) or config.platform == "ensemble":
        return False
    for model in old.versions.values():
        pool = model.pool
        if not model.ready or pool is None or not pool.workers:
            return False
        if any(isinstance(w.instance, Remote) for w in pool.workers):
            return False
    if _model_files(old.fingerprint, config_file) != _model_files(fingerprint, config_file):
        return False
    wanted = _without_groups(config)
    if wanted == _without_groups(old.config):
        return True
    return all(wanted == _without_groups(m.config) for m in old.versions.values())


def _signature(group: mc.ModelInstanceGroup, kind: str, device: int) -> Signature:
    """Triton's instance signature: the group's settings but its name and count, and the
    device the instance runs on."""
    settings = mc.ModelInstanceGroup()
    settings.CopyFrom(group)
    settings.ClearField("name")
    settings.ClearField("count")
    return settings.SerializeToString(deterministic=True), kind, device


def _group_of(config: mc.ModelConfig, instance_name: str) -> mc.ModelInstanceGroup:
    """The group an instance was made from (instances are named ``<group>_<n>``)."""
    groups = {group.name: group for group in config.instance_group}
    return groups[instance_name.rsplit("_", 1)[0]]


def update_instances(
    old: ModelVersion,
    config: mc.ModelConfig,
    path: Path,
    limiter: RateLimiter | None,
) -> ModelVersion:
    """A new version of ``old`` with the instance groups of ``config``: the instances whose
    signature the new groups still ask for are carried over, the others are opened here
    (and warmed up). Blocks: runs in a loader thread. On failure the version is
    UNAVAILABLE with the reason, and only what was opened here is closed."""
    completed = mc.ModelConfig()
    completed.CopyFrom(old.config)  # auto-completion is the same: only the groups differ
    completed.ClearField("instance_group")
    completed.instance_group.extend(config.instance_group)
    model = ModelVersion(old.name, old.version, completed, state=ModelState.LOADING)
    model.stats, model.labels, model.namespace = old.stats, old.labels, old.namespace
    model.inputs, model.outputs, model.declared = old.inputs, old.outputs, old.declared
    model.backend = old.backend
    assert old.pool is not None and old.backend is not None
    added: list[InstanceWorker] = []
    try:
        specs = instance_specs(completed, backend_gpu=old.backend.supports_gpu)
        serving: dict[Signature, list[InstanceWorker]] = {}
        for worker in old.pool.workers:
            spec = worker.instance.spec
            group = _group_of(old.config, spec.name)
            serving.setdefault(_signature(group, spec.kind, spec.device_id), []).append(worker)
        workers: list[InstanceWorker | None] = []
        to_open = []
        for spec in specs:
            group = _group_of(completed, spec.name)
            same = serving.get(_signature(group, spec.kind, spec.device_id))
            if same:
                kept = same.pop(0)
                worker = InstanceWorker(
                    kept.instance,
                    limiter=kept.limiter,
                    reservation=kept.reservation,
                    turn=kept.turn,
                )
                worker.handed_over = True  # the serving version's until hand_over
                model.carried.append((kept, worker))
                workers.append(worker)
            else:
                to_open.append((len(workers), spec))
                workers.append(None)
        opened = _open(old, completed, path, [spec for _, spec in to_open])
        try:
            added = instance_workers(completed, opened, limiter)
        except Exception:
            for instance in opened:
                instance.close()
            raise
        for (slot, _), worker in zip(to_open, added, strict=True):
            workers[slot] = worker
        warm_up(model, opened, warmup_samples(model, path.parent))
        pool = InstancePool([w for w in workers if w is not None])
        model.scheduler = create_scheduler(
            completed, pool, model.stats, model.declared, path.parent
        )
    except Exception as exc:  # the serving version stays; only the new instances go
        if added:
            InstancePool(added).close()
        model.carried.clear()
        model.state = ModelState.UNAVAILABLE
        model.reason = str(exc)
        log.error(
            "failed to update the instances of '%s' version %d: %s", old.name, old.version, exc
        )
        return model
    model.pool = pool
    model.removed = sum(len(rest) for rest in serving.values())
    model.state = ModelState.READY
    log.info(
        "updated the instances of '%s' version %d in place: %d kept, %d added, %d removed",
        old.name,
        old.version,
        len(model.carried),
        len(added),
        model.removed,
    )
    return model


def _open(
    old: ModelVersion, config: mc.ModelConfig, path: Path, specs: list[InstanceSpec]
) -> list[ModelInstance | RequestInstance]:
    """Open the added instances in parallel (as the loader opens a model's instances);
    the first failure, in order, is raised once all have ended, the others closed."""
    if not specs:
        return []
    backend = old.backend
    assert backend is not None
    with ThreadPoolExecutor(min(len(specs), 32)) as threads:
        futures = [threads.submit(functools.partial(backend.open, config, path, s)) for s in specs]
    errors = [error for f in futures if (error := f.exception()) is not None]
    opened = [f.result() for f in futures if f.exception() is None]
    if errors:
        for instance in opened:
            instance.close()
        raise errors[0]
    return opened


def hand_over(model: ModelVersion, previous: ModelVersion) -> list[InstanceWorker]:
    """The updated ``model`` is now the serving one in place of ``previous``: its workers
    own the kept instances (the retiring version's workers finish their work and leave
    them open). Returns the retiring version's workers of the removed instances."""
    kept = set()
    for old_worker, new_worker in model.carried:
        old_worker.handed_over = True
        new_worker.handed_over = False
        kept.add(old_worker)
    model.carried.clear()
    assert previous.pool is not None
    return [w for w in previous.pool.workers if w not in kept]


async def let_go(
    model: ModelVersion, previous: ModelVersion, removed: list[InstanceWorker]
) -> bool:
    """Right after ``hand_over``: what the load waits for before it answers. The removed
    instances finish their own work and close; work queued in ``previous`` and not yet
    taken goes on to ``model``'s instances (a shared inbox) or to the kept ones (a
    batcher), without the load waiting for it. True: the rest of ``previous`` may retire
    in the background; False: it must retire before the load answers (a batcher whose
    instances were all removed, whose queue only they can serve; a sequence batcher
    with no sequence in progress, as cheap as waiting)."""
    scheduler, pool = previous.scheduler, previous.pool
    assert pool is not None
    if isinstance(scheduler, SequenceBatchScheduler):
        # The sequences in progress stay on their instances, removed ones too, as in
        # Triton, where a removed instance lives until its sequences end: the removed
        # instances close when the old version retires, after its sequences.
        if isinstance(model.scheduler, SequenceBatchScheduler):
            model.scheduler.follow(scheduler)
        return scheduler.active_sequences() > 0
    if pool.shares_inbox:
        assert model.pool is not None
        pool.forward(model.pool)
    elif len(removed) == len(pool.workers):
        return False
    if removed:
        await pool.let_go(removed)
    return True
