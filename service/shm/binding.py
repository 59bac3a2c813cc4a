"""One request's tensors in shared memory: inputs read from their regions, outputs written
into theirs, every region held until the request is done.

The tensor parameters are Triton's: ``shared_memory_region`` (string),
``shared_memory_byte_size`` and ``shared_memory_offset`` (integers), checked with the
texts of Triton's ``ParseSharedMemoryParams``. An input in a system region becomes a
``memoryview`` of the mapping, so validation's ``np.frombuffer`` gives the model a
zero-copy view; a CUDA region is copied to the host once. An output with those
parameters is written into its region once computed, and the response then carries
only its name, datatype and shape (empty wire bytes), as Triton's does.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from wire import datatypes

from ..errors import Internal, InvalidArgument
from ..types import InferRequest, OutputTensor
from .registry import CUDA, Region, SharedMemoryRegistry

__all__ = ["RequestRegions", "bind_request", "uses_shared_memory"]

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"

# Copies of at most this many bytes run on the event loop; larger ones in a worker thread.
INLINE_COPY_BYTES = 64 * 1024


def uses_shared_memory(request: InferRequest) -> bool:
    """Whether any tensor of ``request`` names shared memory. On the hot path: a plain
    loop that stops at the first empty check (most tensors have no parameters)."""
    for tensor in request.inputs:
        params = tensor.parameters
        if params and (REGION in params or OFFSET in params or BYTE_SIZE in params):
            return True
    for output in request.outputs:
        params = output.parameters
        if params and (REGION in params or OFFSET in params or BYTE_SIZE in params):
            return True
    return False


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_parameters(tensor: str, parameters: Mapping[str, object]) -> tuple[str, int, int] | None:
    """(region, offset, byte_size) for a tensor placed in shared memory, None otherwise."""
    has_region = REGION in parameters
    region = parameters.get(REGION)
    if has_region and not isinstance(region, str):
        raise InvalidArgument(
            f"invalid value type for '{REGION}' parameter for tensor '{tensor}', "
            "expected string_param."
        )
    offset: object = 0
    for key in (OFFSET, BYTE_SIZE):
        if key not in parameters:
            continue
        if not has_region:
            raise InvalidArgument(
                f"'{key}' can not be specified without '{REGION}' parameter for tensor '{tensor}'"
            )
        if not _is_int(parameters[key]):
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter for tensor '{tensor}', "
                "expected int64_param."
            )
        if key == OFFSET:
            offset = parameters[key]
    if not has_region:
        return None
    if BYTE_SIZE not in parameters:
        raise InvalidArgument(
            f"'{BYTE_SIZE}' must be specified along with '{REGION}' parameter for tensor '{tensor}'"
        )
    assert isinstance(region, str) and _is_int(offset)
    return region, int(offset), int(parameters[BYTE_SIZE])  # type: ignore[call-overload]


@dataclasses.dataclass(slots=True)
class _Target:
    region: Region
    offset: int
    byte_size: int


def _shape_only(datatype: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """An array of ``shape`` without memory: the response needs the shape, not data."""
    dtype = datatypes.DATATYPES[datatype].numpy if datatype in datatypes.DATATYPES else np.uint8
    return np.broadcast_to(np.zeros((), dtype=dtype), shape)


class RequestRegions:
    """The regions one request holds: ``release`` once, when it is answered."""

    __slots__ = ("_held", "_registry", "outputs")

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self._registry = registry
        self._held: list[Region] = []
        self.outputs: dict[str, _Target] = {}

    def hold(self, name: str, offset: int, byte_size: int) -> _Target:
        region = self._registry.acquire(name, offset, byte_size)
        self._held.append(region)
        return _Target(region, offset, byte_size)

    def release(self) -> None:
        held, self._held = self._held, []
        for region in held:
            self._registry.release(region)

    async def write_outputs(self, outputs: list[OutputTensor]) -> list[OutputTensor]:
        """Outputs placed in shared memory written there (Triton's INTERNAL error when a
        region is too small); the response keeps their name, datatype and shape."""
        if not self.outputs:
            return outputs
        placed = []
        for output in outputs:
            target = self.outputs.get(output.name)
            if target is None:
                placed.append(output)
                continue
            data: Any = output.array
            if output.datatype == "BYTES":
                data = datatypes.serialize_bytes_tensor(data)
            size = data.nbytes if isinstance(data, np.ndarray) else len(data)
            if size > target.byte_size:
                raise Internal(
                    f"shared memory size specified with the request for output "
                    f"'{output.name}' ({target.byte_size} bytes) should be at least "
                    f"{size} bytes to hold the results"
                )
            if size > INLINE_COPY_BYTES or target.region.kind == CUDA:
                await asyncio.to_thread(target.region.write, target.offset, data)
            elif size:
                target.region.write(target.offset, data)
            shape = output.shape
            placed.append(
                OutputTensor(output.name, output.datatype, _shape_only(output.datatype, shape), b"")
            )
        return placed


async def bind_request(
    registry: SharedMemoryRegistry, model_name: str, request: InferRequest
) -> tuple[InferRequest, RequestRegions]:
    """``request`` with its shared-memory inputs read from their regions, and the regions
    it holds (outputs included). In Triton's order: inputs, then outputs."""
    regions = RequestRegions(registry)
    try:
        inputs = []
        for tensor in request.inputs:
            placement = parse_parameters(tensor.name, tensor.parameters)
            if placement is None:
                inputs.append(tensor)
                continue
            if tensor.contents is not None:
                raise InvalidArgument(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{tensor.name}' for model '{model_name}'"
                )
            target = regions.hold(*placement)
            region = target.region
            if region.kind == CUDA:
                data = await asyncio.to_thread(region.read, target.offset, target.byte_size)
            else:
                data = region.read(target.offset, target.byte_size)
            inputs.append(dataclasses.replace(tensor, raw=data))
        for output in request.outputs:
            placement = parse_parameters(output.name, output.parameters)
            if placement is None:
                continue
            if "classification" in output.parameters:
                raise InvalidArgument(
                    "output can't set both 'shared_memory_region' and 'classification'"
                )
            regions.outputs[output.name] = regions.hold(*placement)
    except BaseException:
        regions.release()
        raise
    return dataclasses.replace(request, inputs=inputs), regions
