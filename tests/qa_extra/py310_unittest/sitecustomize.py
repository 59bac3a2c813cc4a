"""Python 3.10's ``TestCase._feedErrorsToResult`` and ``_Outcome.errors`` on 3.11+.

qa/L0_model_update/instance_update_test.py's tearDown asks them whether its test failed
(to unload the model and wait before the next test); Python 3.11 removed both, so on the
runner's client Python every test would error in tearDown. Put on the test's PYTHONPATH
by tests/qa_extra/model_update.py; they answer from 3.11's ``_Outcome.success``. Where
Python still has them, nothing changes.
"""

from unittest import case as _case


def _errors(outcome):  # type: ignore[no-untyped-def]
    return [] if outcome.success else [(None, "failed")]


def _feed(self, result, errors):  # type: ignore[no-untyped-def]
    for _, detail in errors:
        result.errors.append((self, detail))


if not hasattr(_case._Outcome, "errors"):
    _case._Outcome.errors = property(_errors)
if not hasattr(_case.TestCase, "_feedErrorsToResult"):
    _case.TestCase._feedErrorsToResult = _feed
