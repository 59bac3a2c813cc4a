"""Which version folders of a model are served, as the config's ``version_policy`` says."""

from __future__ import annotations

from collections.abc import Sequence

from inference import model_config_pb2 as mc

__all__ = ["select_versions"]


def select_versions(policy: mc.ModelVersionPolicy, available: Sequence[int]) -> list[int]:
    """The versions to load, ascending. Default (no policy set) is ``latest { num_versions: 1 }``.

    Raises ValueError where a ``specific`` policy names versions that have no folder, as
    Triton refuses such a model rather than serving a subset.
    """
    ordered = sorted(available)
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return ordered
    if which == "specific":
        wanted = sorted(set(policy.specific.versions))
        missing = [v for v in wanted if v not in ordered]
        if missing:
            raise ValueError(
                "version_policy.specific names versions with no folder: "
                + ", ".join(str(v) for v in missing)
            )
        return wanted
    count = policy.latest.num_versions if which == "latest" else 1
    if count < 1:
        raise ValueError("version_policy.latest.num_versions must be at least 1")
    return ordered[-count:]
