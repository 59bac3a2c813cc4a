"""Issue 38 (PyTorch): Triton's qa suites for the libtorch backend, ``BACKENDS=libtorch``
as each test.sh sets it, on the models Triton's own generators write with ``--libtorch``,
and the PyTorch 2 python runtime's suite.

NOT_VALIDATED: the reference Triton here has no PyTorch backend, so these suites cannot be
run against it; the tests' own expected values are the specification (issue 38). Their
generators import torch (infer_reshape's also tensorflow and onnx): run them with a
generator Python that has them, named by ``TRITON_QA_GEN_PYTHON`` — the project's venv with
the torch and tensorflow extras runs every generator here (numpy 2), or a venv from
../shared/triton-qa/requirements-gen.txt plus ``torch==2.13.0`` for the libtorch ones
(docs/decisions/046, 057).

- libtorch_io_names: qa/L0_libtorch_io_names (8 tests), the eight renamed copies of
  libtorch_float32_float32_float32 its test.sh makes.
- infer_libtorch: qa/L0_infer's InferTest with BACKENDS=libtorch ENSEMBLES=0, every
  libtorch model of gen_qa_models.py with ``instance_group [ { kind: KIND_CPU }]``.
- libtorch_inference_mode_{true,false}: qa/L0_libtorch_inference_mode's client on
  libtorch_int32_int32_int32 with INFERENCE_MODE set (its log count of "Inference Mode is
  ..." lines is a test.sh grep, checked by tests/integration/test_pytorch_backend.py).
- sequence_batcher_libtorch: qa/L0_sequence_batcher, BACKENDS=libtorch, model trial 1.
- implicit_state_libtorch: the same tests with IMPLICIT_STATE=1 on gen_qa_implicit_models
  --libtorch (L0_implicit_state's libtorch part).
- pytorch_python_runtime: qa/L0_pytorch_python_runtime, test.sh's steps as unittest tests
  (tests/qa_extra/steps/pytorch_python_runtime.py), the data store's models stood in for
  by tests/framework_models/torch_runtime_models.py.
- batcher_*_libtorch: qa/L0_batcher's runs (FIXED, delayed, preferred-only, VARIABLE,
  different shapes on var_models with its ragged libtorch_zero_1_float32).
- dyna_sequence_batcher[_batching]_libtorch: qa/L0_dyna_sequence_batcher's two phases.
- infer_zero_libtorch: qa/L0_infer_zero, BACKENDS=libtorch, with the identity ensembles.
- libtorch_shared_weights_*: qa/L0_libtorch_shared_weights' three runs (16 instances;
  the reuse-message counts test.sh greps, checked by
  tests/qa_extra/steps/libtorch_shared_weights.py). Two of them ask for KIND_GPU: see
  GPU_ONLY below.

Left out, with the reason: L0_libtorch_instance_group_kind_model (its model spans two
GPUs), L0_libtorch_io_types and the rest of L0_libtorch_inference_mode (test.sh greps
of the server log: tests/integration/test_pytorch_backend.py checks the same texts),
L0_libtorch_optimized_execution / L0_libtorch_disable_cudnn (GPU-only test.sh checks),
L0_batcher's max_queue_delay_only tests (no libtorch model: custom_zero_1_float32 only).
"""

import os
import re
import shutil
from pathlib import Path

from _framework import (
    batcher_suites,
    copy_all,
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

_PROJECT = Path(__file__).resolve().parents[2]
_STEPS = _PROJECT / "tests" / "qa_extra" / "steps"
MODELS = generator("qa_model_repository_libtorch", "gen_qa_models.py", "--libtorch")
VARIABLE = generator(
    "qa_variable_model_repository_libtorch", "gen_qa_models.py", "--libtorch", "--variable"
)
IDENTITY = generator(
    "qa_identity_model_repository_libtorch", "gen_qa_identity_models.py", "--libtorch"
)
SEQUENCE = generator(
    "qa_sequence_model_repository_libtorch", "gen_qa_sequence_models.py", "--libtorch"
)
IMPLICIT = generator(
    "qa_sequence_implicit_model_repository_libtorch", "gen_qa_implicit_models.py", "--libtorch"
)
DYNA = generator(
    "qa_dyna_sequence_model_repository_libtorch", "gen_qa_dyna_sequence_models.py", "--libtorch"
)
RESHAPE = generator(
    "qa_reshape_model_repository_frameworks",
    "gen_qa_reshape_models.py",
    "--libtorch",
    "--savedmodel",
    "--graphdef",
    "--onnx",
    "--onnx_opset=0",
    "--variable",
)
RESHAPE_ENSEMBLES = generator(
    "qa_reshape_ensemble_repository", "gen_qa_reshape_models.py", "--ensemble"
)
RUNTIME_MODELS = "pytorch_runtime_models"
generator(RUNTIME_MODELS, str(_PROJECT / "tests" / "framework_models" / "torch_runtime_models.py"))

_BASE = "libtorch_float32_float32_float32"
#: L0_libtorch_io_names/test.sh: model -> the renames its sed lines make, in order.
_IO_NAMES = {
    "libtorch_output_index": [],
    "libtorch_io_index": [("INPUT0", "INPUT__0"), ("INPUT1", "INPUT__1")],
    "libtorch_no_output_index": [("OUTPUT__0", "OUTPUT0"), ("OUTPUT__1", "OUTPUT1")],
    "libtorch_no_arguments_output_index": [
        ("INPUT0", "INPUTA"),
        ("INPUT1", "INPUTB"),
        ("OUTPUT__0", "OUTPUTA"),
        ("OUTPUT__1", "OUTPUTB"),
    ],
    "libtorch_mix_index": [("INPUT0", "INPUTA"), ("INPUT1", "INPUT__1"), ("OUTPUT__0", "OUTPUTA")],
    "libtorch_mix_arguments": [("INPUT1", "INPUTB"), ("OUTPUT__0", "OUTPUTA")],
    "libtorch_mix_arguments_index": [("INPUT1", "INPUT__1"), ("OUTPUT__0", "OUTPUT0")],
    "libtorch_unordered_index": [
        ("INPUT0", "INPUT_TMP1"),
        ("INPUT1", "INPUT0"),
        ("INPUT_TMP1", "INPUT1"),
        ("OUTPUT__0", "OUT__1"),
        ("OUTPUT__1", "OUT__0"),
    ],
}


def repo_io_names(r):
    for model, renames in _IO_NAMES.items():
        r.copy(r.gen(MODELS, _BASE), model)
        cfg = f"{model}/config.pbtxt"
        r.sub(cfg, _BASE, model, count=1)
        for old, new in renames:  # sed 's/old/new/': the first match of each line
            r.sub(cfg, f"^(.*?){old}", rf"\g<1>{new}")


def _inference_mode(flag):
    def recipe(r):
        m = "libtorch_int32_int32_int32"
        r.copy(r.gen(MODELS, m), m)
        r.append(
            f"{m}/config.pbtxt",
            f'parameters: {{ key: "INFERENCE_MODE" value: {{ string_value: "{flag}" }} }}',
        )

    return recipe


def repo_sequence_libtorch(r):
    for dtype in ("int32", "bool"):
        m = f"libtorch_sequence_{dtype}"
        r.copy(r.gen(SEQUENCE, m), m)
        r.sub(f"{m}/config.pbtxt", r"^max_batch_size:.*", "max_batch_size: 4")
        instance_count(r, m, 1)


def repo_implicit_libtorch(r):
    for dtype in ("int32", "object", "bool"):
        m = f"libtorch_nobatch_sequence_{dtype}"
        r.copy(r.gen(IMPLICIT, m), m)
        instance_count(r, m, 4)


def _ragged_zero(r):
    """test.sh's var_models/libtorch_zero_1_float32: the nobatch identity model, batching
    and ragged, with a BATCH_SCATTER_WITH_INPUT_SHAPE output."""
    m = "libtorch_zero_1_float32"
    r.copy(r.gen(IDENTITY, "libtorch_nobatch_zero_1_float32"), m)
    cfg = f"{m}/config.pbtxt"
    r.sub(cfg, "nobatch_", "")
    r.sub(cfg, r"^max_batch_size:.*", "max_batch_size: 8")
    r.sub(cfg, r'name: "INPUT__0"', 'name: "INPUT__0"\nallow_ragged_batch: true')
    r.append(
        cfg,
        'batch_output [{target_name: "OUTPUT__0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "INPUT__0" }] dynamic_batching { preferred_batch_size: [ 2, 6 ], '
        "max_queue_delay_microseconds: 10000000 }",
    )


def _as_identity(r, model, name):
    """A graphdef reshape model as test.sh's custom_* copies are: the identity backend."""
    if name != model:
        r.copy(r.path(model), name)
    r.remove(f"{name}/1")
    r.mkdir(f"{name}/1")
    cfg = f"{name}/config.pbtxt"
    r.sub(cfg, r"^platform:.*", 'backend: "identity"')
    r.sub(cfg, r"^name:.*", f'name: "{name}"')
    r.append(cfg, "instance_group [ { kind: KIND_CPU }]")


def repo_infer_reshape(r):
    """L0_infer_reshape/test.sh: qa_reshape_model_repository (libtorch, savedmodel, onnx,
    graphdef; --variable as gen_qa_model_repository makes it) and its ensembles, the
    custom_* identity copies of graphdef models test.sh makes, nop version folders. The
    graphdef models themselves (tensorflow_graphdef is not built) are stood in for by the
    identity backend the same way: their qa models are identities too."""
    copy_all(r, RESHAPE)
    copy_all(r, RESHAPE_ENSEMBLES)
    text = Path(r.qa("L0_infer_reshape/test.sh")).read_text()
    listed = re.search(r"for i in \\\n(.*?); do\n\s*cp -r models/graphdef_", text, re.S)
    assert listed is not None, "no custom_* list in L0_infer_reshape/test.sh"
    for i in listed.group(1).replace("\\", " ").split():
        _as_identity(r, f"graphdef_{i}", f"custom_{i}")
    for model in sorted(os.listdir(r.root)):
        if model.startswith("graphdef"):
            _as_identity(r, model, model)


def _shared_weights(kind, sharing):
    """L0_libtorch_shared_weights/test.sh: libtorch_nobatch_zero_1_float32 with 16
    instances of ``kind``, ENABLE_WEIGHT_SHARING when ``sharing``."""

    def recipe(r):
        m = "libtorch_nobatch_zero_1_float32"
        r.copy(r.gen(IDENTITY, m), m)
        r.append(f"{m}/config.pbtxt", f"instance_group [ {{ count: 16 kind: {kind}}}]")
        if sharing:
            r.append(
                f"{m}/config.pbtxt",
                'parameters: { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }',
            )

    return recipe


def repo_pytorch_python_runtime(r):
    """L0_pytorch_python_runtime/test.sh's models/ and the files it puts beside its tests:
    the data store's pytorch_model_store (addsub, neuralnet) and resnet50_libtorch, here the
    stand-ins of tests/framework_models/torch_runtime_models.py; resnet50_libtorch edited
    by test.sh's lines; neuralnet's test_data.json moved out; the runtime's model.py copied
    as py_runtime.py for unit_test.py."""
    root = r.gen(RUNTIME_MODELS)
    for model in ("addsub", "neuralnet", "resnet50_libtorch"):
        r.copy(os.path.join(root, model), model)
    cfg = "resnet50_libtorch/config.pbtxt"
    r.sub(cfg, r"^.*platform.*\n", "")  # sed -i "/platform/d"
    r.append(cfg, 'backend: "pytorch"\nruntime: "model.py"\ninstance_group: [{ kind: KIND_MODEL }]')
    qa_dir = r.qa("L0_pytorch_python_runtime")
    data = os.path.join(qa_dir, "neuralnet_test_data.json")
    shutil.move(r.path("neuralnet/1/test_data.json"), data)
    runtime = _PROJECT / "service" / "backends" / "pytorch" / "runtime" / "model.py"
    shutil.copy(runtime, os.path.join(qa_dir, "py_runtime.py"))


INFER_LIBTORCH_TESTS = [
    "test_raw_bbb",
    "test_raw_sss",
    "test_raw_iii",
    "test_raw_lll",
    "test_raw_fff",
    "test_raw_bii",
    "test_raw_ibb",
    "test_raw_iff",
    "test_raw_fii",
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
    "test_mix_iii",
    "test_mix_fff",
]
_NOTE = "not validated: the reference Triton here has no PyTorch backend"
#: Needs a GPU: the suite asks for KIND_GPU instances. Without one the runner rewrites
#: KIND_GPU to KIND_CPU (TRITON_QA_KEEP_KIND_GPU=1 keeps it), so here it runs the CPU
#: variant of the same check; torch's CPU build cannot place a model on cuda:0.
_GPU = "; needs a GPU (KIND_GPU): on a machine without one the runner runs it as KIND_CPU"

INFER_ZERO_TESTS = ["InferZeroTest"]
RESHAPE_TESTS = ["test_ff1", "test_ff3", "test_ii1", "test_ii2", "test_ii3", "test_oo1"]
RESHAPE_TENSORRT_TESTS = ["test_ff2", "test_ff4"]
SUITES: list[Suite] = []
NOT_VALIDATED = [
    not_validated(
        "pytorch_python_runtime",
        "L0_pytorch_python_runtime",
        str(_STEPS / "pytorch_python_runtime.py"),
        ["PyTorchPythonRuntimeSteps"],
        repo_pytorch_python_runtime,
        _NOTE + "; test.sh's steps (unit_test.py, its log greps, infer.py) as unittest tests "
        "(tests/qa_extra/steps); the data store's models stood in for, image_client's "
        "resnet50 inference replaced by a check of the stand-in TorchScript model",
        args=["--log-verbose=1"],
        timeout=600,
    ),
    not_validated(
        "libtorch_io_names",
        "L0_libtorch_io_names",
        "io_names_client.py",
        ["IONamingConvention"],
        repo_io_names,
        _NOTE,
    ),
    not_validated(
        "infer_libtorch",
        "L0_infer",
        "infer_test.py",
        [f"InferTest::{t}" for t in INFER_LIBTORCH_TESTS],
        repo_generated(MODELS, "libtorch", "instance_group [ { kind: KIND_CPU }]"),
        _NOTE,
        env={"BACKENDS": "libtorch", "ENSEMBLES": "0", "NOBATCH": "1", "BATCH": "1"},
        args=["--exit-timeout-secs=120"],
        timeout=600,
    ),
    *(
        not_validated(
            f"libtorch_inference_mode_{flag}",
            "common",
            "libtorch_infer_client.py",
            ["InferTest"],
            _inference_mode(flag),
            _NOTE,
        )
        for flag in ("true", "false")
    ),
    not_validated(
        "sequence_batcher_libtorch",
        "L0_sequence_batcher",
        "sequence_batcher_test.py",
        [f"SequenceBatcherTest::{t}" for t in SEQ_NO_DELAY],
        repo_sequence_libtorch,
        _NOTE + "; BACKENDS=libtorch ENSEMBLES=0, model trial 1",
        env=dict(_seq_env("1"), BACKENDS="libtorch"),
        restart="test",
        timeout=180,
    ),
    not_validated(
        "implicit_state_libtorch",
        "L0_sequence_batcher",
        "sequence_batcher_test.py",
        [f"SequenceBatcherTest::{t}" for t in SEQ_NO_DELAY],
        repo_implicit_libtorch,
        _NOTE + "; L0_implicit_state's libtorch part (gen_qa_implicit_models --libtorch)",
        env=dict(_seq_env("0"), BACKENDS="libtorch", IMPLICIT_STATE="1"),
        restart="test",
        timeout=180,
    ),
    *batcher_suites(
        "libtorch",
        repo_batcher_fixed(MODELS, "libtorch"),
        repo_batcher_preferred_only(MODELS, "libtorch"),
        repo_batcher_variable(VARIABLE, "libtorch", _ragged_zero),
        _NOTE + "; BACKENDS=libtorch",
    ),
    *dyna_sequence_suites("libtorch", DYNA, _NOTE + "; BACKENDS=libtorch"),
    not_validated(
        "infer_zero_libtorch",
        "L0_infer_zero",
        "infer_zero_test.py",
        INFER_ZERO_TESTS,
        repo_infer_zero(IDENTITY, "libtorch"),
        _NOTE + "; BACKENDS=libtorch, with the identity ensembles (nop_* on the identity backend)",
        env={"BACKENDS": "libtorch"},
        timeout=600,
    ),
    not_validated(
        "infer_reshape",
        "L0_infer_reshape",
        "infer_reshape_test.py",
        [f"InferReshapeTest::{t}" for t in RESHAPE_TESTS],
        repo_infer_reshape,
        _NOTE + "; the test takes no BACKENDS: libtorch, savedmodel and onnx models run "
        "together, graphdef ones stood in for by the identity backend (their generator's "
        "models are identities); its generator needs torch, tensorflow and onnx in one "
        "Python (the project's venv with both extras)",
        timeout=600,
    ),
    not_validated(
        "infer_reshape_tensorrt",
        "L0_infer_reshape",
        "infer_reshape_test.py",
        [f"InferReshapeTest::{t}" for t in RESHAPE_TENSORRT_TESTS],
        repo_infer_reshape,
        _NOTE + "; needs a GPU: these tests also infer TensorRT plan_* reshape models, which "
        "gen_qa_reshape_models --tensorrt writes on a GPU with TensorRT; not run here",
        timeout=600,
    ),
    *(
        not_validated(
            f"libtorch_shared_weights_{suffix}",
            "L0_libtorch_shared_weights",
            str(_STEPS / "libtorch_shared_weights.py"),
            ["SharedWeightsSteps"],
            _shared_weights(kind, sharing),
            _NOTE + f"; {kind}, weight sharing {'on' if sharing else 'off'}, "
            f"{reuse} reuse messages expected" + (_GPU if kind == "KIND_GPU" else ""),
            env={"EXPECTED_REUSE": str(reuse)},
            args=["--exit-on-error=false", "--exit-timeout-secs=10"],
            timeout=300,
        )
        for suffix, kind, sharing, reuse in (
            ("gpu_no_sharing", "KIND_GPU", False, 0),
            ("cpu", "KIND_CPU", True, 15),
            ("gpu", "KIND_GPU", True, 15),
        )
    ),
]
#: Suites that need a GPU to test what they name (see _GPU).
GPU_ONLY = [
    "libtorch_shared_weights_gpu_no_sharing",
    "libtorch_shared_weights_gpu",
    "infer_reshape_tensorrt",
]
