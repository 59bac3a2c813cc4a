"""Model instances, each with its own thread, and the pool that hands them out.

One thread per instance keeps an instance's executions strictly serial (sessions are not
shared between threads) while instances run in parallel; the event loop does not block
for them, but for the short executions the default scheduler runs on the loop itself
(``inline_worker``, decision 067).
A thread takes work from a queue and hands each result back through the loop's
``Mailbox`` (one wake-up for what finishes together). The batchers pick a free instance
and give it one batch (``launch``); the default scheduler lets the instances' threads
share one queue instead (``share_inbox``, ``submit``), so whichever instance frees first
takes the next request, with no step on the loop in between.

Instances that execute in worker processes of their own (``Remote``: each sends a batch
and calls back when its worker answers) take a batcher's batches from the loop instead:
work given to ``dispatch`` as steps (``batch.Steps``, ``steps=True``) merges, sends and
splits on the loop, with no thread, GIL hand-off or mailbox between the loop and the
worker (decision 030). Their threads still run the rest: the default scheduler's shared
queue, a sequence batch, and a batch whose worker must first be started again.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from queue import Empty, SimpleQueue
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..backends.base import Answer, Array, ModelInstance, RequestInstance
from ..statistics import BatchTimings
from .base import Job
from .batch import Execution, JobOutputs, Steps, drive, execute_batch
from .handoff import Mailbox, mailbox_for
from .rate_limiter import RateLimiter, Reservation

__all__ = ["SKIP", "Deliver", "InstancePool", "InstanceWorker", "Remote"]

T = TypeVar("T")
Instance = ModelInstance | RequestInstance
Deliver = Callable[[Any, BaseException | None], None]
# (work, deliver, mailbox): ``deliver(result, error)`` runs on the mailbox's loop.
_Work = tuple[Callable[[Instance], Any], Deliver, Any]
#: What a work item returns when it found nothing to do: nothing is delivered.
SKIP = object()


@runtime_checkable
class Remote(Protocol):
    """An instance whose executions run in a worker process, started from the loop."""

    def begin(self, execution: Execution, answer: Answer) -> bool:
        """Send ``execution`` to the worker; ``answer(results, error)`` runs on the loop
        when it answers. False when the worker is not there to take it (it ended, or a
        restart is due): then the batch goes to the instance's thread, which starts a
        new worker."""


def _name_os_thread(name: str) -> None:
    """Give the OS thread the instance's name (``top -H``, /proc: where the CPU goes)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass  # not Linux, or not allowed: the name is only a convenience


class InstanceWorker:
    def __init__(
        self,
        instance: Instance,
        index: int = 0,
        limiter: RateLimiter | None = None,
        reservation: Reservation | None = None,
        turn: threading.Lock | None = None,
    ) -> None:
        """``limiter``/``reservation``: with Triton's rate limiter on, each execution
        first waits for the instance's resources and its turn (``RateLimiter.hold``).
        ``turn``: the instance's execution lock, shared with the worker of the version it
        came from when an instance-group update kept the instance (core/
        instance_update.py): the old worker may still finish a request on it while this
        one takes new ones, and an instance executes one batch at a time."""
        self.instance = instance
        self.index = index
        self.limiter = limiter
        self.reservation = reservation
        self.turn = turn if turn is not None else threading.Lock()
        #: The instance went on to a newer version's worker: closing this worker (its
        #: version retiring) leaves the instance and its reservation alone.
        self.handed_over = False
        #: Closed on its own, before its pool: an instance an update removed (``let_go``).
        self.closed = False
        self.inbox: SimpleQueue[_Work | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._mailbox: Mailbox | None = None

    def start(self) -> None:
        """Start the thread (once); it serves ``inbox`` until it takes a None."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name=f"{self.instance.spec.name}", daemon=True
            )
            self._thread.start()

    def _serve(self) -> None:
        _name_os_thread(self.instance.spec.name)
        inbox, instance = self.inbox, self.instance
        limiter, reservation, turn = self.limiter, self.reservation, self.turn
        while (item := inbox.get()) is not None:
            work, deliver, mailbox = item
            try:
                with turn:
                    if limiter is not None and reservation is not None:
                        with limiter.hold(reservation):
                            result, error = work(instance), None
                    else:
                        result, error = work(instance), None
            except BaseException as exc:  # delivered to the caller, as a future would
                result, error = None, exc
            if result is not SKIP:
                mailbox.post(deliver, result, error)
            del item, work, deliver, result, error  # hold nothing while waiting

    def put(self, work: Callable[[Instance], Any], deliver: Deliver) -> None:
        """Run ``work(instance)`` in this instance's thread; ``deliver`` gets the outcome on
        the calling event loop."""
        self.start()
        mailbox = self._mailbox
        if mailbox is None:  # bound once: see InstancePool.mailbox
            mailbox = self._mailbox = mailbox_for(asyncio.get_running_loop())
        self.inbox.put((work, deliver, mailbox))

    def stop(self) -> None:
        """Ask the thread to end after the work queued before this."""
        self.inbox.put(None)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.join()
        if not self.handed_over:
            self.instance.close()


class InstancePool:
    """Free instances in FIFO order; ``launch`` runs work on one and frees it after."""

    def __init__(self, workers: Sequence[InstanceWorker]) -> None:
        self.workers = list(workers)
        for index, worker in enumerate(self.workers):
            worker.index = index
        self._free: deque[InstanceWorker] = deque(self.workers)
        self._listeners: list[Callable[[], None]] = []
        self._shared: SimpleQueue[_Work | None] | None = None
        self._started = False
        self._forwarded = False  # an instance-group update took over (``forward``)
        self._mailbox: Mailbox | None = None
        # Workers an instance-group update removed that still run a batch: they are not
        # freed again, and ``_idle`` is settled when the last one is done (``let_go``).
        self._leaving: set[InstanceWorker] = set()
        self._idle: asyncio.Future[None] | None = None
        #: Every instance executes in a worker process: dispatched steps run on the loop
        #: (not under the rate limiter, whose wait is the instance thread's).
        self.remote = bool(self.workers) and all(
            isinstance(w.instance, Remote) and w.limiter is None for w in self.workers
        )

    def on_release(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    @property
    def has_free(self) -> bool:
        return bool(self._free)

    def is_free(self, index: int) -> bool:
        return self.workers[index] in self._free

    def try_acquire(self) -> InstanceWorker | None:
        return self._free.popleft() if self._free else None

    def take(self, index: int) -> InstanceWorker | None:
        """Acquire one particular instance (sequence affinity), if it is free."""
        worker = self.workers[index]
        if worker not in self._free:
            return None
        self._free.remove(worker)
        return worker

    def release(self, worker: InstanceWorker) -> None:
        if self._leaving and worker in self._leaving:
            self._leaving.discard(worker)
            if not self._leaving and self._idle is not None and not self._idle.done():
                self._idle.set_result(None)
        else:
            self._free.append(worker)
        for listener in self._listeners:
            listener()

    def dispatch(
        self,
        worker: InstanceWorker,
        work: Callable[[Instance], Any],
        deliver: Deliver,
        steps: bool = False,
    ) -> None:
        """Run ``work`` on an acquired worker; the worker returns to the pool when its
        thread is done (before ``deliver`` runs), even if every caller has gone away.
        ``steps``: ``work`` returns ``batch.Steps``, run on the loop for a remote pool."""

        def done(result: Any, error: BaseException | None) -> None:
            self.release(worker)
            deliver(result, error)

        if not steps:
            worker.put(work, done)
        elif self.remote:
            self._advance(worker, work(worker.instance), done, None, None)
        else:
            worker.put(lambda instance: drive(instance, work(instance)), done)

    def _advance(
        self,
        worker: InstanceWorker,
        steps: Steps,
        done: Deliver,
        results: dict[str, Array] | None,
        error: BaseException | None,
    ) -> None:
        """Take ``steps`` on from the last answer to its next execution, or to its end."""
        try:
            # At the start ``results`` is None, as a generator's first send must be.
            execution = steps.throw(error) if error is not None else steps.send(results)  # type: ignore[arg-type]
        except StopIteration as end:
            done(end.value, None)
            return
        except BaseException as exc:  # delivered to the caller, as in a thread
            done(None, exc)
            return

        def answer(results: dict[str, Array] | None, error: BaseException | None) -> None:
            self._advance(worker, steps, done, results, error)

        remote: Remote = worker.instance  # type: ignore[assignment]
        try:
            taken = remote.begin(execution, answer)
        except Exception as exc:  # writing the inputs failed: the batch gets it
            answer(None, exc)
            return
        if not taken:  # its worker must start again: in the instance's thread
            executing = worker.instance.execute  # type: ignore[union-attr]
            worker.put(lambda _: executing(*execution), answer)

    def launch(self, worker: InstanceWorker, work: Callable[[Instance], T]) -> asyncio.Future[T]:
        """``dispatch`` with a future for the outcome."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)

        self.dispatch(worker, work, settle)
        return future

    def launch_jobs(
        self, worker: InstanceWorker, jobs: Sequence[Job]
    ) -> asyncio.Future[tuple[list[JobOutputs], BatchTimings]]:
        return self.launch(worker, lambda instance: execute_batch(instance, jobs))

    def share_inbox(self) -> None:
        """From now on the instances' threads take work from one queue (``submit``): the
        first to be free runs the next item. Free/acquire bookkeeping is then unused."""
        if self._shared is None:
            self._shared = SimpleQueue()
            for worker in self.workers:
                worker.inbox = self._shared
            self._free.clear()

    @property
    def shares_inbox(self) -> bool:
        return self._shared is not None

    def _start_shared(self) -> None:
        if not self._started:  # the threads start with the first request, all at once
            self._started = True
            for worker in self.workers:
                worker.start()

    def forward(self, to: InstancePool) -> None:
        """An instance-group update swapped in ``to`` (both share an inbox): the work
        queued here, and any submitted here from now on, goes to ``to``'s queue, whose
        instances (the kept ones among them) run it, in order; each thread here ends
        after the item it runs now. The work items are the scheduler's, whichever
        instance runs them, so their callers are answered and counted as before."""
        ours, theirs = self._shared, to._shared
        assert ours is not None and theirs is not None, "forward needs shared inboxes"
        to._start_shared()
        self._shared, self._started, self._forwarded = theirs, True, True
        while True:
            try:
                item = ours.get_nowait()
            except Empty:
                break
            if item is not None:
                theirs.put(item)
        for _ in self.workers:
            ours.put(None)

    async def let_go(self, workers: Sequence[InstanceWorker]) -> None:
        """Close ``workers`` (instances an update removed) once each has finished what
        it runs now: none is handed out again (``forward`` has already ended the threads
        of a shared inbox), the others keep serving. Their instances close and their
        rate-limiter reservations go."""
        leaving = [w for w in workers if not w.closed]
        if self._shared is None:
            for worker in leaving:
                if worker in self._free:
                    self._free.remove(worker)
                else:
                    self._leaving.add(worker)
            if self._leaving:
                self._idle = asyncio.get_running_loop().create_future()
                await self._idle
        await asyncio.to_thread(self._close_workers, leaving)

    def _close_workers(self, workers: Sequence[InstanceWorker]) -> None:
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join()
            if worker.closed:
                continue
            worker.closed = True
            if worker.handed_over:  # a newer version's worker serves this instance now
                continue
            with worker.turn:  # after any execution an older version's worker runs on it
                worker.instance.close()
            if worker.limiter is not None and worker.reservation is not None:
                worker.limiter.unregister(worker.reservation)

    def submit(self, work: Callable[[Instance], Any], deliver: Deliver) -> None:
        """Queue ``work`` for whichever instance is free first (after ``share_inbox``).
        A remote pool's too, in the threads: one request per execution pays the
        worker's round trip in full, and its system calls cost the loop more than the
        thread, which makes them without the GIL (decision 030)."""
        shared = self._shared
        assert shared is not None, "submit needs share_inbox()"
        if not self._started:
            self._start_shared()
        shared.put((work, deliver, self.mailbox()))

    def inline_worker(self) -> InstanceWorker | None:
        """A worker whose instance the caller (the loop's thread) may execute on now, its
        ``turn`` taken (the caller releases it): only with a shared inbox that nothing
        waits in (work queued before goes first), never after ``forward`` (the instances
        may be leaving), and only an instance no thread executes on now."""
        shared = self._shared
        if shared is None or self._forwarded or not shared.empty():
            return None
        for worker in self.workers:
            if worker.turn.acquire(blocking=False):
                if not worker.closed:  # looked at under the turn its closing takes
                    return worker
                worker.turn.release()
        return None

    def mailbox(self) -> Mailbox:
        """The mailbox of the loop this pool serves, bound at its first request: on
        Python 3.11 ``asyncio.get_running_loop`` makes a getpid system call (0.35 us
        here), which the per-request path should not pay twice."""
        mailbox = self._mailbox
        if mailbox is None:
            mailbox = self._mailbox = mailbox_for(asyncio.get_running_loop())
        return mailbox

    async def aclose(self) -> None:
        """Wait for running executions and free the instances, off the event loop."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Every thread gets its stop (even from a shared queue), then each instance not
        closed or handed over closes and gives back its reservation."""
        self._close_workers(self.workers)
