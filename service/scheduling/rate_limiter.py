"""Triton's rate limiter (``--rate-limit=execution_count``): an instance executes only when
the resources its ``instance_group.rate_limiter`` names are free, across all models.

As in Triton's core (r24.10, rate_limiter.cc): a resource is per device unless ``global``;
the count available is the largest any registered instance asks for, or what
``--rate-limit-resource=name:count[:device]`` says (then a resource it does not name has
none); an instance that could never run fails its model's load with Triton's text, as
does a name used both globally and per device. When resources free up, the waiting
instance whose executions times its ``priority`` (0 counts as 1) is smallest goes first,
so a priority-2 instance gets half the turns of a priority-1 one under contention.

The instance's thread holds the resources around each execution (``hold``): a batch the
scheduler formed waits there, as a payload staged in Triton's limiter does.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from inference import model_config_pb2 as mc

__all__ = ["GLOBAL", "RateLimiter", "Reservation"]

log = logging.getLogger(__name__)

#: The device key of a global resource.
GLOBAL = -2
#: ``--rate-limit-resource`` without a device: every device.
_EVERY_DEVICE = -1

Key = tuple[int, str]  # (device or GLOBAL, resource name)


@dataclass(eq=False)
class Reservation:
    """One instance's needs, and how often it has executed (its turn order)."""

    name: str
    needs: dict[Key, int]
    priority: int
    executions: int = 0

    @property
    def scaled_priority(self) -> int:
        return self.executions * self.priority


@dataclass
class RateLimiter:
    """``explicit``: the ``--rate-limit-resource`` values (name, count, device or -1)."""

    explicit: Sequence[tuple[str, int, int]] = ()
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _registered: list[Reservation] = field(default_factory=list)
    _limits: dict[Key, int] = field(default_factory=dict)
    _allocated: dict[Key, int] = field(default_factory=dict)
    _waiting: list[Reservation] = field(default_factory=list)

    def register(self, name: str, config: mc.ModelRateLimiter, device: int) -> Reservation:
        """The reservation of instance ``name``; ValueError (Triton's text) when the
        limits cannot let it, or another registered instance, ever run."""
        needs: dict[Key, int] = {}
        for resource in config.resources:
            key = (GLOBAL if getattr(resource, "global") else device, resource.name)
            needs[key] = needs.get(key, 0) + resource.count
        reservation = Reservation(name, needs, max(config.priority, 1))
        with self._lock:
            self._registered.append(reservation)
            try:
                self._limits = self._compute_limits()
            except ValueError:
                self._registered.remove(reservation)
                self._limits = self._compute_limits()
                raise
            self._log_limits()
        return reservation

    def unregister(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation in self._registered:
                self._registered.remove(reservation)
                self._limits = self._compute_limits()
                self._log_limits()
            self._lock.notify_all()

    @contextmanager
    def hold(self, reservation: Reservation) -> Iterator[None]:
        """Wait for the reservation's resources (and its turn), keep them while the
        block runs."""
        with self._lock:
            self._waiting.append(reservation)
            try:
                while not self._may_run(reservation):
                    self._lock.wait()
            finally:
                self._waiting.remove(reservation)
            for key, count in reservation.needs.items():
                self._allocated[key] = self._allocated.get(key, 0) + count
            reservation.executions += 1
        try:
            yield
        finally:
            with self._lock:
                for key, count in reservation.needs.items():
                    self._allocated[key] -= count
                self._lock.notify_all()

    # -- under the lock ----------------------------------------------------------------

    def _log_limits(self) -> None:
        """Triton's verbose "Max Resource Map" after each change of the limits, in its
        words and escaped form (an instance-group update's effect is read from it)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        text = "\nMax Resource Map===>\n"
        for device in sorted({device for device, _ in self._limits}):
            text += f"\tDevice: {'GLOBAL' if device == GLOBAL else device}\n"
            for (on, name), count in self._limits.items():
                if on == device:
                    text += f"\t\tResource: {name}\t Count: {count}\n"
        log.debug(json.dumps(text, ensure_ascii=False), extra={"verbose": 1})

    def _fits(self, reservation: Reservation) -> bool:
        return all(
            self._allocated.get(key, 0) + count <= self._limits.get(key, 0)
            for key, count in reservation.needs.items()
        )

    def _may_run(self, reservation: Reservation) -> bool:
        if not self._fits(reservation):
            return False
        mine = reservation.scaled_priority
        return not any(
            other.scaled_priority < mine and self._fits(other)
            for other in self._waiting
            if other is not reservation and _shares(other, reservation)
        )

    def _compute_limits(self) -> dict[Key, int]:
        largest: dict[Key, int] = {}
        for reservation in self._registered:
            for key, count in reservation.needs.items():
                largest[key] = max(largest.get(key, 0), count)
        largest = dict(sorted(largest.items()))  # Triton's map order: global, then devices
        if self.explicit:
            for key, need in largest.items():
                allowed = self._explicit_count(key)
                if allowed < need:
                    raise ValueError(
                        f'Resource count for "{key[1]}" is limited to {allowed} which will '
                        "prevent scheduling of one or more model instances, the minimum "
                        f"required count is {need}"
                    )
                largest[key] = allowed
        global_names = {name for device, name in largest if device == GLOBAL}
        for device, name in largest:
            if device != GLOBAL and name in global_names:
                raise ValueError(
                    f'Resource "{name}" is present as both global and device-specific '
                    "resource in the model configuration."
                )
        return largest

    def _explicit_count(self, key: Key) -> int:
        """Triton's ParseAndValidateExplicitResources: a global resource takes the largest
        count given for its name on any device; a device's, the largest given for that
        device or for every device; a resource not named has none."""
        device, name = key
        counts = [
            count
            for given, count, on in self.explicit
            if given == name and (device == GLOBAL or on in (device, _EVERY_DEVICE))
        ]
        return max(counts, default=0)


def _shares(one: Reservation, other: Reservation) -> bool:
    """Whether two reservations compete for a resource (only then does turn order
    between them matter)."""
    return not one.needs.keys().isdisjoint(other.needs.keys())
