"""L0_model_namespacing (issue 28, item 8): ``--model-namespacing=true`` on two model
repositories that hold models of the same name.

test.sh runs each test of test.py (``ModelNamespacePoll.test_x`` and
``ModelNamespaceExplicit.test_x``) on a fresh server, after copying the test's own folder
``qa/L0_model_namespacing/test_x`` (``addsub_repo/``, ``subadd_repo/``) to ``test_dir`` and
adding a ``1/`` folder to every model; the server gets ``--model-repository`` for both
repositories and ``NAMESPACE_TESTING_DIRCTORY`` tells the test where ``test_dir`` is (it moves
a model between the repositories). The runner builds one repository ``{repo}`` per suite,
once, and passes fixed ``args``: so there is one suite per test, and its recipe builds
``test_dir`` beside ``{repo}`` (which stays empty: a third repository without models, as the
runner always passes ``--model-repository {repo}``) and then fills in the suite's ``args`` and
``env`` with the paths it made. The runner reads ``suite.args``/``suite.env`` after the recipe
has run, so this needs no change to the runner.

test.sh exports ``PYTHONDONTWRITEBYTECODE=1`` so that no ``__pycache__`` appears in a model
folder ("which will cause unintended model reload in POLLING model"); the reference's Python
stub here writes one all the same (``1/__pycache__/model.cpython-311.pyc``, just after the first
load), so its first poll reloads every model, and ``test_dynamic_resolution`` then moves
``composing_model`` away in the middle of that reload (the poll never finishes; the test fails).
The recipe puts an empty *file* named ``__pycache__`` in each Python model's version folder:
Python then cannot write bytecode there (it skips that silently), as test.sh intends.

Counts (8 suites of one test each, ``model_namespacing_*``): the reference Triton 2.51 here
passes 8/8 (7/8 without the ``__pycache__`` file: ``model_namespacing_poll_dynamic_resolution``
fails as above), this project 8/8.

Environment as test.sh exports it: ``TRITON_QA_ROOT_DIR`` (test.py imports ``common/`` from
there) and ``TRITON_QA_PYTHON_MODEL_DIR`` (the models' ``model.py`` import ``python_addsub``
/ ``python_subadd`` from there; the servers' Python stubs inherit it).
"""

from __future__ import annotations

import os
from typing import Any

from manifest import Suite

_TESTS = (
    "test_duplication",
    "test_dynamic_resolution",
    "test_ensemble_duplication",
    "test_no_duplication",
)
_MODES = {
    "ModelNamespacePoll": ["--model-control-mode=POLL", "--repository-poll-secs=2"],
    "ModelNamespaceExplicit": ["--model-control-mode=EXPLICIT"],
}


def _namespacing_suite(test_class: str, test_name: str) -> Any:
    mode = "poll" if test_class == "ModelNamespacePoll" else "explicit"
    short = test_name.removeprefix("test_")
    suite = Suite(
        f"model_namespacing_{mode}_{short}",
        "L0_model_namespacing",
        "test.py",
        [f"{test_class}::{test_name}"],
        lambda r: None,
        restart="test",
        timeout=120,
        default=False,
        note=(
            "two repositories built beside {repo} (left empty); args/env set by the recipe; "
            "a __pycache__ file in each Python model's version folder (no bytecode written)"
        ),
    )

    def recipe(r: Any) -> None:
        test_dir = os.path.join(os.path.dirname(r.root), "test_dir")
        source = r.qa(f"L0_model_namespacing/{test_name}")
        for repository in sorted(os.listdir(source)):
            for model in sorted(os.listdir(os.path.join(source, repository))):
                r.copy(os.path.join(source, repository, model), f"../test_dir/{repository}/{model}")
                r.mkdir(f"../test_dir/{repository}/{model}/1")
                if os.path.exists(r.path(f"../test_dir/{repository}/{model}/1/model.py")):
                    # test.sh's PYTHONDONTWRITEBYTECODE: no __pycache__ in a polled model
                    r.write(f"../test_dir/{repository}/{model}/1/__pycache__", "")
        suite.args[:] = [
            "--model-namespacing=true",
            f"--model-repository={test_dir}/addsub_repo",
            f"--model-repository={test_dir}/subadd_repo",
            *_MODES[test_class],
        ]
        suite.env.update(
            NAMESPACE_TESTING_DIRCTORY=test_dir,
            TRITON_QA_ROOT_DIR=r.qa("").rstrip("/"),
            TRITON_QA_PYTHON_MODEL_DIR=r.qa("L0_model_namespacing"),
            PYTHONDONTWRITEBYTECODE="1",
        )

    suite.repo = recipe
    return suite


SUITES = [_namespacing_suite(c, t) for c in _MODES for t in _TESTS]
