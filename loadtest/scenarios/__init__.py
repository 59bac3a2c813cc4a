"""Every scenario of ``python -m loadtest``; importing this package registers them all."""

from loadtest.scenarios import (
    bare_servicer,
    batching,
    ceiling,
    cpu_bench,
    engine_bench,
    gateway_bench,
    ghz,
    gpu_bench,
    gpu_probe,
    hostile_bench,
    loadgen,
    python_backend_bench,
    replicas_bench,
    scaling_bench,
    shm_bench,
    v1_bench,
)

__all__ = [
    "bare_servicer",
    "batching",
    "ceiling",
    "cpu_bench",
    "engine_bench",
    "gateway_bench",
    "ghz",
    "gpu_bench",
    "gpu_probe",
    "hostile_bench",
    "loadgen",
    "python_backend_bench",
    "replicas_bench",
    "scaling_bench",
    "shm_bench",
    "v1_bench",
]
