"""Classification labels: each output's ``label_filename``, read once when a version loads.

As in Triton, the file lives in the model's directory (beside config.pbtxt), holds one
label per line (line N labels class N), and a file that cannot be read fails the load.
"""

from __future__ import annotations

from pathlib import Path

from inference import model_config_pb2 as mc

__all__ = ["read_labels"]


def read_labels(config: mc.ModelConfig, model_dir: Path) -> dict[str, tuple[str, ...]]:
    """Labels by output name, for the outputs that name a label file."""
    labels: dict[str, tuple[str, ...]] = {}
    for output in config.output:
        if not output.label_filename:
            continue
        path = model_dir / output.label_filename
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(f"failed to open text file for read {path}: {why}") from None
        labels[output.name] = tuple(text.splitlines())
    return labels
