"""What the framework backends' qa suites share (``pytorch.py``, ``tensorflow.py``): the
generators with a backend's flag, the repositories test.sh builds the same way for every
``BACKENDS`` value (a prefix: ``libtorch``, ``savedmodel``), and the not-validated
``Suite`` with its note. ``tests/qa_suites.py`` does not read it as a suite module (its name
starts with ``_``); the modules import it by name (that file puts this folder on sys.path).

Each recipe mirrors one test.sh step for one backend:

- ``repo_generated``: every model of a generated repository whose name starts with the
  prefix, with test.sh's appended lines (L0_infer's ``instance_group``, ...);
- ``repo_batcher_*``: L0_batcher's ``models``, ``preferred_batch_only_models`` and
  ``var_models`` (with its ragged ``<prefix>_zero_1_float32`` where test.sh makes one,
  and ``custom_zero_1_float32``, the identity backend, which every BACKENDS runs);
- ``repo_dyna_sequence``: L0_dyna_sequence_batcher's ``models`` (``count: 1``; the second
  phase with ``max_candidate_sequences:4`` and a 5 s queue delay);
- ``repo_infer_zero``: L0_infer_zero's identity models with the identity ensembles
  (``copy_all``: a whole generated repository, nop_* version folders made).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import manifest
from manifest import (
    BATCHER_DELAY,
    BATCHER_ENV,
    BATCHER_NO_DELAY,
    BATCHER_PREFERRED_ONLY,
    Suite,
    _delay_env,
    echoes,
    instance_count,
)

Recipe = Callable[[Any], None]


def generator(name: str, script: str, *flags: str) -> str:
    """Register a Triton generator run (``qa/common/<script> <flags> --models_dir``)."""
    manifest.GENERATORS.setdefault(name, [script, *flags, "--models_dir={out}"])
    return name


def not_validated(
    suite_id: str,
    qa_dir: str,
    file: str,
    tests: list[str],
    recipe: Recipe,
    note: str,
    **kwargs: Any,
) -> Suite:
    """A suite the reference Triton here cannot run (it has no such backend)."""
    return Suite(
        suite_id,
        qa_dir,
        file,
        tests,
        recipe,
        default=False,
        reference="not-validated",
        note=note,
        **kwargs,
    )


def copy_all(r: Any, repo: str) -> None:
    """Every model of a generated repository; a ``nop_*`` step gets the empty version
    folder test.sh's create_nop_version_dir makes (the identity backend serves it)."""
    root = r.gen(repo)
    for model in sorted(os.listdir(root)):
        r.copy(os.path.join(root, model), model)
        if model.startswith("nop_"):
            r.mkdir(f"{model}/1")


IDENTITY_ENSEMBLES = generator(
    "qa_identity_ensemble_repository", "gen_qa_identity_models.py", "--ensemble"
)


def repo_infer_zero(identity_repo: str, prefix: str) -> Recipe:
    """L0_infer_zero/test.sh: qa_identity_model_repository (the ``prefix`` backend's) and
    its identity ensembles."""

    def recipe(r: Any) -> None:
        repo_generated(identity_repo, prefix)(r)
        copy_all(r, IDENTITY_ENSEMBLES)

    return recipe


def repo_generated(repo: str, prefix: str, append: str = "") -> Recipe:
    def recipe(r: Any) -> None:
        root = r.gen(repo)
        for model in sorted(os.listdir(root)):
            if model.startswith(prefix):
                r.copy(os.path.join(root, model), model)
                if append:
                    r.append(f"{model}/config.pbtxt", append)

    return recipe


# ----------------------------------------------------------------------------- L0_batcher

_SH = "L0_batcher/test.sh"


def _batcher_model(r: Any, src: str, dynamic_batching: str, variable: bool = False) -> None:
    m = os.path.basename(src)
    r.copy(src, m)
    cfg = f"{m}/config.pbtxt"
    r.sub(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
    r.sub(cfg, r"^version_policy:.*", "version_policy: { specific { versions: [1] }}")
    r.append(cfg, dynamic_batching)
    if variable:
        r.sub(cfg, "16", "-1")


def repo_batcher_fixed(model_repo: str, prefix: str) -> Recipe:
    """test.sh's models/."""

    def recipe(r: Any) -> None:
        text = echoes(r, _SH, "models && mkdir models", "preferred_batch_only_models")
        _batcher_model(r, r.gen(model_repo, f"{prefix}_float32_float32_float32"), text)

    return recipe


def repo_batcher_preferred_only(model_repo: str, prefix: str) -> Recipe:
    """test.sh's preferred_batch_only_models/."""

    def recipe(r: Any) -> None:
        text = echoes(r, _SH, "rm -fr preferred_batch_only_models", "rm -fr var_models")
        _batcher_model(r, r.gen(model_repo, f"{prefix}_float32_float32_float32"), text)

    return recipe


def repo_batcher_variable(variable_repo: str, prefix: str, ragged: Recipe | None = None) -> Recipe:
    """test.sh's var_models/: the variable-size model ("16" -> "-1"), the identity backend's
    custom_zero_1_float32 made ragged, and ``ragged`` (the backend's own ragged model)."""

    def recipe(r: Any) -> None:
        text = echoes(r, _SH, "rm -fr var_models", "for MC in")
        _batcher_model(
            r, r.gen(variable_repo, f"{prefix}_float32_float32_float32"), text, variable=True
        )
        m = "custom_zero_1_float32"
        r.copy(r.qa(f"custom_models/{m}"), m)
        r.mkdir(f"{m}/1")
        cfg = f"{m}/config.pbtxt"
        r.append(cfg, "instance_group [ { kind: KIND_GPU count: 1 }]")
        r.sub(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
        r.sub(cfg, r"dims:.*\[.*\]", "dims: [ -1 ]")
        r.sub(cfg, r'name:.*"INPUT0"', 'name: "INPUT0"\nallow_ragged_batch: true')
        r.sub(cfg, r"^version_policy:.*", "version_policy: { specific { versions: [1] }}")
        r.append(
            cfg,
            "dynamic_batching { preferred_batch_size: [ 2, 6 ], "
            "max_queue_delay_microseconds: 10000000 }",
        )
        if ragged is not None:
            ragged(r)

    return recipe


#: test.sh's tests on var_models beyond the no-delay and delayed ones (BATCHER_TYPE=VARIABLE).
DIFFERENT_SHAPE = [
    "test_multi_batch_not_preferred_different_shape",
    "test_multi_batch_preferred_different_shape",
    "test_multi_batch_different_shape_allow_ragged",
    "test_multi_batch_different_shape",
]


def batcher_suites(
    backend: str, fixed: Recipe, preferred_only: Recipe, variable: Recipe, note: str
) -> list[Suite]:
    """L0_batcher/test.sh's runs for ``BACKENDS=<backend>``: FIXED and VARIABLE, each with
    its no-delay and delayed tests, the different-shape tests and the preferred-only ones
    (each delayed test with test.sh's TRITONSERVER_DELAY_SCHEDULER)."""
    different = {t: "" for t in DIFFERENT_SHAPE}
    different["test_multi_batch_delayed_preferred_different_shape"] = "4"
    no_delay = {t: "" for t in BATCHER_NO_DELAY}
    runs = (  # suite, tests (test -> delay, "" for none), recipe, batcher type, note
        ("batcher", no_delay, fixed, "FIXED", ""),
        ("batcher_delayed", BATCHER_DELAY, fixed, "FIXED", "; TRITONSERVER_DELAY_SCHEDULER"),
        ("batcher_preferred_only", BATCHER_PREFERRED_ONLY, preferred_only, "FIXED", ""),
        ("batcher_variable", {**no_delay, **BATCHER_DELAY}, variable, "VARIABLE", "; var_models"),
        (
            "batcher_different_shape",
            different,
            variable,
            "VARIABLE",
            "; var_models, custom_zero_1_float32 on the identity backend",
        ),
    )
    return [
        not_validated(
            f"{suite}_{backend}",
            "L0_batcher",
            "batcher_test.py",
            [f"BatcherTest::{t}" for t in tests],
            recipe,
            note + more,
            env=dict(BATCHER_ENV, BACKENDS=backend, BATCHER_TYPE=kind),
            test_env=_delay_env({t: d for t, d in tests.items() if d}),
            restart="test",
            timeout=120,
        )
        for suite, tests, recipe, kind, more in runs
    ]


# -------------------------------------------------------------- L0_dyna_sequence_batcher

DYNA_NO_BATCHING = ["test_simple_sequence", "test_length1_sequence"]
DYNA_BATCHING = [
    "test_multi_sequence_different_shape",
    "test_multi_sequence",
    "test_multi_parallel_sequence",
    "test_backlog",
    "test_backlog_fill",
    "test_backlog_fill_no_end",
    "test_backlog_sequence_timeout",
]


def repo_dyna_sequence(dyna_repo: str, prefix: str, second_phase: bool) -> Recipe:
    def recipe(r: Any) -> None:
        root = r.gen(dyna_repo)
        for model in sorted(os.listdir(root)):
            if not model.startswith(prefix):
                continue
            r.copy(os.path.join(root, model), model)
            r.sub(f"{model}/config.pbtxt", r"kind: KIND_CPU", "kind: KIND_CPU\ncount: 1")
            if second_phase:
                cfg = f"{model}/config.pbtxt"
                r.sub(cfg, r"max_candidate_sequences:.*", "max_candidate_sequences:4")
                r.sub(
                    cfg, r"max_queue_delay_microseconds:.*", "max_queue_delay_microseconds:5000000"
                )

    return recipe


def dyna_sequence_suites(backend: str, dyna_repo: str, note: str) -> list[Suite]:
    """L0_dyna_sequence_batcher/test.sh's two phases for ``BACKENDS=<backend>``: without
    batching (NO_BATCHING=1), then with the second phase's config edits."""
    phases = (  # suite, tests, second phase, NO_BATCHING, note
        ("dyna_sequence_batcher", DYNA_NO_BATCHING, False, "1", ""),
        (
            "dyna_sequence_batcher_batching",
            DYNA_BATCHING,
            True,
            "0",
            "; max_candidate_sequences 4, 5 s queue delay",
        ),
    )
    return [
        not_validated(
            f"{suite}_{backend}",
            "L0_dyna_sequence_batcher",
            "dyna_sequence_batcher_test.py",
            [f"DynaSequenceBatcherTest::{t}" for t in tests],
            repo_dyna_sequence(dyna_repo, backend, second),
            note + more,
            env={"BACKENDS": backend, "IMPLICIT_STATE": "0", "NO_BATCHING": no_batching},
            restart="test",
            timeout=300,
        )
        for suite, tests, second, no_batching, more in phases
    ]


__all__ = [
    "DYNA_BATCHING",
    "DYNA_NO_BATCHING",
    "batcher_suites",
    "dyna_sequence_suites",
    "generator",
    "instance_count",
    "not_validated",
    "repo_batcher_fixed",
    "repo_batcher_preferred_only",
    "repo_batcher_variable",
    "repo_generated",
]
