"""Which version folders of a model are served, as the config's ``version_policy`` says."""

from __future__ import annotations

from collections.abc import Sequence

from inference import model_config_pb2 as mc

__all__ = ["missing_versions", "select_versions"]


def select_versions(policy: mc.ModelVersionPolicy, available: Sequence[int]) -> list[int]:
    """The versions to load, ascending. Default (no policy set) is ``latest { num_versions: 1 }``.

    A ``specific`` policy loads the versions it names that have a folder; the others are
    left out (``missing_versions`` names them), as Triton's core does: it logs each one
    and loads the rest, and only a policy that leaves no version at all fails the load.
    """
    ordered = sorted(available)
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return ordered
    if which == "specific":
        return sorted(set(policy.specific.versions) & set(ordered))
    count = policy.latest.num_versions if which == "latest" else 1
    if count < 1:
        raise ValueError("version_policy.latest.num_versions must be at least 1")
    return ordered[-count:]


def missing_versions(policy: mc.ModelVersionPolicy, available: Sequence[int]) -> list[int]:
    """The versions a ``specific`` policy names that have no folder, in the policy's
    order (Triton logs one error for each)."""
    if policy.WhichOneof("policy_choice") != "specific":
        return []
    present = set(available)
    return [v for v in dict.fromkeys(policy.specific.versions) if v not in present]
