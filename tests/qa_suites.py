"""The project's own selection of Triton's qa tests, beside the runner's default one.

``TRITON_QA_EXTRA_MANIFEST=tests/qa_suites.py ../shared/triton-qa/run.sh <suite>`` runs
them (the runner's README). Each module of ``tests/qa_extra/`` (but the helpers, whose names
start with ``_``) defines ``SUITES``, a list of
the runner's ``Suite``s for one area (issue 27: flags, Python-backend semantics, ...); every
suite there was validated on the real Triton 2.51 (``../shared/triton-qa/reference/``)
before it was added. A module may also define ``NOT_VALIDATED``: suites the reference here
cannot run (its docstring says why), left out of the selection unless
``TRITON_QA_NOT_VALIDATED=1``. The runner imports this file; pytest does not collect it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

EXTRA_SUITES: list[Any] = []
_HERE = Path(__file__).parent / "qa_extra"
if str(_HERE) not in sys.path:  # the modules' shared helpers (_framework.py)
    sys.path.insert(0, str(_HERE))
for _path in sorted(_HERE.glob("*.py")):
    if _path.name.startswith("_"):  # a helper, not a suite module
        continue
    _spec = importlib.util.spec_from_file_location(f"qa_extra_{_path.stem}", _path)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    EXTRA_SUITES.extend(_module.SUITES)
    if os.environ.get("TRITON_QA_NOT_VALIDATED") == "1":
        EXTRA_SUITES.extend(getattr(_module, "NOT_VALIDATED", []))
