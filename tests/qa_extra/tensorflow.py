"""Issue 38 (TensorFlow): Triton's qa suites for SavedModels, ``BACKENDS=savedmodel`` as
each test.sh names the backend, on the models Triton's generators write with
``--savedmodel`` (TF1 graphs saved with ``simple_save``: signature keys ``INPUT0`` ... map
to graph tensors of other names, which is what the name mapping must get right).

NOT_VALIDATED: the reference Triton here has no TensorFlow backend; the tests' own expected
values are the specification (issue 38). The generators import TensorFlow: run them with a
generator Python that has it (e.g. a venv of the ``tensorflow`` extra, which runs
gen_qa_models.py's TF paths with numpy 2), named by ``TRITON_QA_GEN_PYTHON``
(docs/decisions/048).

- infer_savedmodel: qa/L0_infer's InferTest with BACKENDS=savedmodel ENSEMBLES=0, every
  savedmodel model of gen_qa_models.py with ``instance_group [ { kind: KIND_CPU }]``
  (the version tests included: savedmodel_int32_int32_int32 has three versions).
- batcher_savedmodel / batcher_delayed_savedmodel: qa/L0_batcher, BACKENDS=savedmodel, its
  models/ repository (savedmodel_float32_float32_float32, preferred sizes 2 and 6); the
  delayed tests with test.sh's TRITONSERVER_DELAY_SCHEDULER.
- sequence_batcher_savedmodel: qa/L0_sequence_batcher, BACKENDS=savedmodel (its test.sh's
  datatypes for savedmodel: float32 and bool), model trial 1.
- sequence_batcher_savedmodel_nobatch: the same, the nobatch models, trial 0 (4 instances).
- batcher_{preferred_only,variable,different_shape}_savedmodel: L0_batcher's other runs
  (var_models: the variable-size savedmodel and custom_zero_1_float32 on the identity
  backend; test.sh makes no ragged savedmodel model).
- dyna_sequence_batcher[_batching]_savedmodel: qa/L0_dyna_sequence_batcher's two phases,
  BACKENDS=savedmodel, on gen_qa_dyna_sequence_models --savedmodel.
- infer_zero_savedmodel: qa/L0_infer_zero, BACKENDS=savedmodel, on gen_qa_identity_models
  --savedmodel with the identity ensembles.

Left out: graphdef (``tensorflow_graphdef`` is not built), the ensembles of L0_infer
(ENSEMBLES=1 needs graphdef models too), gen_qa_implicit_models (no savedmodel models).
"""

from _framework import (
    batcher_suites,
    dyna_sequence_suites,
    generator,
    instance_count,
    not_validated,
    repo_batcher_fixed,
    repo_batcher_preferred_only,
    repo_batcher_variable,
    repo_generated,
    repo_infer_zero,
)
from manifest import SEQ_NO_DELAY, Suite, _seq_env

MODELS = generator("qa_model_repository_savedmodel", "gen_qa_models.py", "--savedmodel")
VARIABLE = generator(
    "qa_variable_model_repository_savedmodel", "gen_qa_models.py", "--savedmodel", "--variable"
)
SEQUENCE = generator(
    "qa_sequence_model_repository_savedmodel", "gen_qa_sequence_models.py", "--savedmodel"
)
DYNA = generator(
    "qa_dyna_sequence_model_repository_savedmodel",
    "gen_qa_dyna_sequence_models.py",
    "--savedmodel",
)
IDENTITY = generator(
    "qa_identity_model_repository_savedmodel", "gen_qa_identity_models.py", "--savedmodel"
)


def repo_sequence_savedmodel(r):
    for dtype in ("float32", "bool"):
        m = f"savedmodel_sequence_{dtype}"
        r.copy(r.gen(SEQUENCE, m), m)
        r.sub(f"{m}/config.pbtxt", r"^max_batch_size:.*", "max_batch_size: 4")
        instance_count(r, m, 1)


def repo_sequence_savedmodel_nobatch(r):
    for dtype in ("float32", "bool"):
        m = f"savedmodel_nobatch_sequence_{dtype}"
        r.copy(r.gen(SEQUENCE, m), m)
        instance_count(r, m, 4)


INFER_SAVEDMODEL_TESTS = [
    "test_raw_bbb",
    "test_raw_sss",
    "test_raw_iii",
    "test_raw_lll",
    "test_raw_hhh",
    "test_raw_fff",
    "test_raw_hff",
    "test_raw_bii",
    "test_raw_ibb",
    "test_raw_ibs",
    "test_raw_iff",
    "test_raw_fii",
    "test_raw_ihs",
    "test_raw_ooo",
    "test_raw_oii",
    "test_raw_oio",
    "test_raw_ooi",
    "test_raw_ioo",
    "test_raw_iio",
    "test_raw_ioi",
    "test_class_bbb",
    "test_class_sss",
    "test_class_iii",
    "test_class_lll",
    "test_class_fff",
    "test_class_iff",
    "test_mix_bbb",
    "test_mix_sss",
    "test_mix_iii",
    "test_mix_lll",
    "test_mix_fff",
    "test_mix_iff",
    "test_raw_version_latest_1",
    "test_raw_version_latest_2",
    "test_raw_version_all",
    "test_raw_version_specific_1",
    "test_raw_version_specific_1_3",
]
_NOTE = "not validated: the reference Triton here has no TensorFlow backend"

SUITES: list[Suite] = []
NOT_VALIDATED = [
    not_validated(
        "infer_savedmodel",
        "L0_infer",
        "infer_test.py",
        [f"InferTest::{t}" for t in INFER_SAVEDMODEL_TESTS],
        repo_generated(MODELS, "savedmodel", "instance_group [ { kind: KIND_CPU }]"),
        _NOTE,
        env={"BACKENDS": "savedmodel", "ENSEMBLES": "0", "NOBATCH": "1", "BATCH": "1"},
        args=["--exit-timeout-secs=120"],
        timeout=600,
    ),
    *batcher_suites(
        "savedmodel",
        repo_batcher_fixed(MODELS, "savedmodel"),
        repo_batcher_preferred_only(MODELS, "savedmodel"),
        repo_batcher_variable(VARIABLE, "savedmodel"),
        _NOTE + "; BACKENDS=savedmodel",
    ),
    *(
        not_validated(
            suite,
            "L0_sequence_batcher",
            "sequence_batcher_test.py",
            [f"SequenceBatcherTest::{t}" for t in SEQ_NO_DELAY],
            recipe,
            _NOTE + f"; BACKENDS=savedmodel ENSEMBLES=0, model trial {trial}",
            env=dict(_seq_env(trial), BACKENDS="savedmodel"),
            restart="test",
            timeout=180,
        )
        for suite, recipe, trial in (
            ("sequence_batcher_savedmodel", repo_sequence_savedmodel, "1"),
            ("sequence_batcher_savedmodel_nobatch", repo_sequence_savedmodel_nobatch, "0"),
        )
    ),
    *dyna_sequence_suites("savedmodel", DYNA, _NOTE + "; BACKENDS=savedmodel"),
    not_validated(
        "infer_zero_savedmodel",
        "L0_infer_zero",
        "infer_zero_test.py",
        ["InferZeroTest"],
        repo_infer_zero(IDENTITY, "savedmodel"),
        _NOTE + "; BACKENDS=savedmodel, with the identity ensembles (nop_* on the identity "
        "backend)",
        env={"BACKENDS": "savedmodel"},
        timeout=600,
    ),
]
