"""Triton's shared-memory extensions: client-owned regions the server reads inputs from and
writes outputs into, so that large tensors skip the socket.

``registry.py`` keeps the registered regions (system and CUDA, one name space as in
Triton); ``system.py`` opens and maps a POSIX region; ``cuda.py`` opens a CUDA IPC handle
through cuda-python, imported only when a CUDA region is registered; ``binding.py`` ties
one request's tensors to their regions for the request's lifetime (inputs as zero-copy
views, outputs written in place). Everything here lives in the process that runs the core
(the engine when frontends are split off), where the tensor bytes are consumed.
"""

from .binding import RequestRegions, bind_request, uses_shared_memory
from .registry import CudaRegionStatus, SharedMemoryRegistry, SystemRegionStatus

__all__ = [
    "CudaRegionStatus",
    "RequestRegions",
    "SharedMemoryRegistry",
    "SystemRegionStatus",
    "bind_request",
    "uses_shared_memory",
]
