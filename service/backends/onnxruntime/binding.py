"""Running a session through IO binding: each input crosses to the device once per batch,
each output comes back once.

``session.run`` on a CUDA session copies every input host→device inside the call from
pageable memory and every output back the same way. Binding instead:

* inputs: the merged batch is copied into a page-locked (pinned) host buffer kept per
  input and grown when a batch is larger (``PinnedBuffers``; needs ``cuda-python``, else
  the pageable array is used as it is), then bound; ORT copies pinned memory with DMA;
* outputs: bound to the instance's device, so ORT allocates them there, and copied to the
  host once after the run (``copy_outputs_to_cpu``).

``GraphRunner`` adds CUDA graphs (``enable_cuda_graph``): a graph replays fixed device
addresses, so every distinct input shape gets its own bound device buffers and graph id
(``gpu_graph_id``); the first run of a shape runs without a graph to learn the output
shapes, the next captures, later ones replay. Shapes beyond ``max_graphs`` run without one.

Everything here also runs with ``device="cpu"``, which is how the unit tests exercise it.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from ..base import Array

__all__ = ["BoundRunner", "GraphRunner", "PinnedBuffers"]

log = logging.getLogger(__name__)


def _cudart() -> Any | None:
    """cuda-python's runtime module (new and old layouts), or None."""
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


class PinnedBuffers:
    """One page-locked host buffer per input name, grown to the largest batch seen."""

    def __init__(self, runtime: Any | None = None) -> None:
        self._cudart = runtime if runtime is not None else _cudart()
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (pointer, bytes)
        if self._cudart is None:
            log.info("cuda-python is not installed: inputs are copied from pageable memory")

    @property
    def available(self) -> bool:
        return self._cudart is not None

    def stage(self, name: str, array: Array) -> Array:
        """``array`` copied into the pinned buffer for ``name`` (the array itself when no
        pinned memory can be had)."""
        if self._cudart is None or array.dtype == np.object_ or array.nbytes == 0:
            return array
        pointer, size = self._buffers.get(name, (0, 0))
        if array.nbytes > size:
            self._free(pointer)
            size = max(array.nbytes, 2 * size)
            err, pointer = self._cudart.cudaHostAlloc(size, 0)  # cudaHostAllocDefault
            if int(err) != 0:
                log.warning("cudaHostAlloc(%d) failed (%s): using pageable memory", size, err)
                self._buffers.pop(name, None)
                return array
            self._buffers[name] = (int(pointer), size)
            pointer = int(pointer)
        raw = (ctypes.c_uint8 * array.nbytes).from_address(pointer)
        staged: Array = np.frombuffer(memoryview(raw).cast("B"), dtype=array.dtype)
        staged = staged.reshape(array.shape)
        np.copyto(staged, array)
        return staged

    def _free(self, pointer: int) -> None:
        if pointer and self._cudart is not None:
            self._cudart.cudaFreeHost(pointer)

    def close(self) -> None:
        for pointer, _ in self._buffers.values():
            self._free(pointer)
        self._buffers.clear()


class BoundRunner:
    """``session.run`` through IO binding, outputs allocated on ``device``."""

    def __init__(
        self,
        session: ort.InferenceSession,
        device: str = "cpu",
        device_id: int = 0,
        pinned: PinnedBuffers | None = None,
    ) -> None:
        self._session = session
        self._device = device
        self._device_id = device_id
        self._pinned = pinned

    @property
    def description(self) -> str:
        """How inputs reach the device, for the instance's load log line."""
        if self._pinned is None:
            return "IO binding"
        memory = "pinned" if self._pinned.available else "pageable"
        return f"IO binding, inputs staged in {memory} host memory"

    def run(self, feeds: Mapping[str, Array], outputs: Sequence[str]) -> list[Array]:
        binding = self._session.io_binding()
        for name, array in feeds.items():
            staged = self._pinned.stage(name, array) if self._pinned is not None else array
            binding.bind_cpu_input(name, np.ascontiguousarray(staged))
        for name in outputs:
            binding.bind_output(name, self._device, self._device_id)
        self._session.run_with_iobinding(binding)
        results: list[Array] = binding.copy_outputs_to_cpu()
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        return results

    def close(self) -> None:
        if self._pinned is not None:
            self._pinned.close()


class _Graph:
    """Bound device buffers of one input shape, and the graph id that replays them."""

    def __init__(
        self, binding: Any, inputs: dict[str, ort.OrtValue], outputs: list[ort.OrtValue], gid: int
    ) -> None:
        self.binding = binding
        self.inputs = inputs
        self.outputs = outputs
        self.options = ort.RunOptions()
        self.options.add_run_config_entry("gpu_graph_id", str(gid))


class GraphRunner:
    """CUDA-graph execution: one captured graph per input shape (see the module docstring)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        device: str = "cuda",
        device_id: int = 0,
        max_graphs: int = 64,
    ) -> None:
        self._session = session
        self._device = device
        self._device_id = device_id
        self._max_graphs = max_graphs
        self._graphs: dict[tuple[Any, ...], _Graph] = {}
        self._no_graph = ort.RunOptions()
        self._no_graph.add_run_config_entry("gpu_graph_id", "-1")

    @property
    def graph_count(self) -> int:
        return len(self._graphs)

    @property
    def description(self) -> str:
        return f"CUDA graphs (at most {self._max_graphs} input shapes), IO binding"

    def run(self, feeds: Mapping[str, Array], outputs: Sequence[str]) -> list[Array]:
        key = (
            tuple(outputs),
            *((name, a.shape, a.dtype.str) for name, a in sorted(feeds.items())),
        )
        graph = self._graphs.get(key)
        if graph is None:
            results = self._learn(feeds, outputs)
            if len(self._graphs) < self._max_graphs:
                self._graphs[key] = self._bind(feeds, outputs, results, len(self._graphs))
            return results
        for name, array in feeds.items():
            graph.inputs[name].update_inplace(np.ascontiguousarray(array))
        self._session.run_with_iobinding(graph.binding, graph.options)
        # A device value's numpy() is a fresh host copy; a host one is a view of the bound
        # buffer, which the next run overwrites.
        copy = self._device == "cpu"
        return [np.array(v.numpy(), copy=True) if copy else v.numpy() for v in graph.outputs]

    def _learn(self, feeds: Mapping[str, Array], outputs: Sequence[str]) -> list[Array]:
        """A run without a graph: its outputs tell the shapes to allocate."""
        binding = self._session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        for name in outputs:
            binding.bind_output(name, self._device, self._device_id)
        self._session.run_with_iobinding(binding, self._no_graph)
        results: list[Array] = binding.copy_outputs_to_cpu()
        return results

    def _bind(
        self,
        feeds: Mapping[str, Array],
        names: Sequence[str],
        results: Sequence[Array],
        gid: int,
    ) -> _Graph:
        binding = self._session.io_binding()
        inputs = {}
        for name, array in feeds.items():
            # On the host ORT would wrap the caller's array, and later updates would write
            # into it: the bound buffer must be the runner's own.
            value = ort.OrtValue.ortvalue_from_numpy(
                np.array(array, copy=True, order="C"), self._device, self._device_id
            )
            binding.bind_ortvalue_input(name, value)
            inputs[name] = value
        outputs = []
        for name, result in zip(names, results, strict=True):
            value = ort.OrtValue.ortvalue_from_shape_and_type(
                list(result.shape), result.dtype, self._device, self._device_id
            )
            binding.bind_ortvalue_output(name, value)
            outputs.append(value)
        return _Graph(binding, inputs, outputs, gid)

    def close(self) -> None:
        self._graphs.clear()
