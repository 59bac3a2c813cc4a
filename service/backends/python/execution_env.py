"""``EXECUTION_ENV_PATH``: a Python model's own environment, as Triton's python backend has it
(r24.10: python_be.cc, pb_env.cc, stub_launcher.cc).

The parameter names a conda-pack archive (``.tar.gz``) or an environment directory,
``$$TRITON_MODEL_DIRECTORY`` standing for the model's folder. An archive is extracted once
into a folder of this server's (again when the archive changes); the environment must hold
``bin/activate``. The model's worker then starts as Triton's stub does: the activate
script sourced, the environment's ``lib`` first on ``LD_LIBRARY_PATH``, and its ``python``
running the worker (which needs only numpy there: the server's own modules come on
``PYTHONPATH``).
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path

from inference import model_config_pb2 as mc

__all__ = ["KEY", "execution_env", "launcher"]

KEY = "EXECUTION_ENV_PATH"
_MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"

log = logging.getLogger(__name__)

_lock = threading.Lock()
_extracted: dict[Path, tuple[Path, float]] = {}  # archive -> (folder, its mtime then)
_base: Path | None = None


def execution_env(config: mc.ModelConfig, model_dir: Path) -> Path | None:
    """The environment folder the model's workers run in (None: the server's own);
    ValueError with Triton's text when it cannot be used."""
    if KEY not in config.parameters:
        return None
    given = config.parameters[KEY].string_value.replace(_MODEL_DIRECTORY, str(model_dir), 1)
    log.info("Using Python execution env %s", given)
    try:
        path = Path(given).resolve(strict=True)
    except OSError:
        raise ValueError(f"Failed to get the canonical path for {given}.") from None
    folder = path if path.is_dir() else _extract(path)
    activate = folder / "bin" / "activate"
    if not activate.is_file():
        raise ValueError(
            f"Path {activate} does not exist. The Python environment should contain an "
            "'activate' script."
        )
    return folder


def _extract(archive: Path) -> Path:
    """The archive's folder, extracted now unless it already was from this version."""
    global _base
    modified = archive.stat().st_mtime
    with _lock:
        known = _extracted.get(archive)
        if known is not None and known[1] == modified:
            return known[0]
        if _base is None:
            _base = Path(tempfile.mkdtemp(prefix="python-envs-"))
            atexit.register(shutil.rmtree, _base, True)
        folder = known[0] if known is not None else _base / str(len(_extracted))
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        log.debug("Extracting Python execution env %s", archive, extra={"verbose": 1})
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(folder, filter="tar")  # no absolute or escaping paths
        except (OSError, tarfile.TarError) as exc:
            raise ValueError(
                f"Failed to extract the Python execution env {archive}: {exc}"
            ) from None
        _extracted[archive] = (folder, modified)
        return folder


#: Runs ``python ARGS`` in environment $1, as Triton's stub launch does.
_LAUNCH = (
    'env_dir="$1"; shift; source "$env_dir/bin/activate" && '
    'exec env LD_LIBRARY_PATH="$env_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" python "$@"'
)


def launcher(env: Path) -> list[str]:
    """The command prefix that runs ``python ...`` inside ``env``."""
    return ["bash", "-c", _LAUNCH, "bash", str(env)]
