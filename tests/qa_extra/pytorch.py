"""Issue 38 (PyTorch): Triton's qa suites for the libtorch backend, ``BACKENDS=libtorch``
as each test.sh sets it, on the models Triton's own generators write with ``--libtorch``.

NOT_VALIDATED: the reference Triton here has no PyTorch backend, so these suites cannot be
run against it; the tests' own expected values are the specification (issue 38). Their
generators import torch: run them with a generator Python that has torch beside the
runner's pins, e.g. a venv from ../shared/triton-qa/requirements-gen.txt plus
``torch==2.13.0``, named by ``TRITON_QA_GEN_PYTHON`` (docs/decisions/046).

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

Left out, with the reason: L0_libtorch_instance_group_kind_model (its model spans two
GPUs), L0_libtorch_io_types and the rest of L0_libtorch_inference_mode (test.sh greps
of the server log: tests/integration/test_pytorch_backend.py checks the same texts),
L0_libtorch_optimized_execution / L0_libtorch_disable_cudnn (GPU-only test.sh checks).
"""

import os
import shutil
from pathlib import Path

import manifest
from manifest import SEQ_NO_DELAY, Suite, _seq_env, instance_count

_PROJECT = Path(__file__).resolve().parents[2]
manifest.GENERATORS.setdefault(
    "pytorch_runtime_models",
    [str(_PROJECT / "tests" / "framework_models" / "torch_runtime_models.py"), "{out}"],
)

manifest.GENERATORS.setdefault(
    "qa_model_repository_libtorch", ["gen_qa_models.py", "--libtorch", "--models_dir={out}"]
)
manifest.GENERATORS.setdefault(
    "qa_sequence_model_repository_libtorch",
    ["gen_qa_sequence_models.py", "--libtorch", "--models_dir={out}"],
)
manifest.GENERATORS.setdefault(
    "qa_sequence_implicit_model_repository_libtorch",
    ["gen_qa_implicit_models.py", "--libtorch", "--models_dir={out}"],
)

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
        r.copy(r.gen("qa_model_repository_libtorch", _BASE), model)
        cfg = f"{model}/config.pbtxt"
        r.sub(cfg, _BASE, model, count=1)
        for old, new in renames:  # sed 's/old/new/': the first match of each line
            r.sub(cfg, f"^(.*?){old}", rf"\g<1>{new}")


def repo_infer_libtorch(r):
    import os

    root = r.gen("qa_model_repository_libtorch")
    for model in sorted(os.listdir(root)):
        if model.startswith("libtorch"):
            r.copy(os.path.join(root, model), model)
            r.append(f"{model}/config.pbtxt", "instance_group [ { kind: KIND_CPU }]")


def _inference_mode(flag):
    def recipe(r):
        m = "libtorch_int32_int32_int32"
        r.copy(r.gen("qa_model_repository_libtorch", m), m)
        r.append(
            f"{m}/config.pbtxt",
            f'parameters: {{ key: "INFERENCE_MODE" value: {{ string_value: "{flag}" }} }}',
        )

    return recipe


def repo_sequence_libtorch(r):
    for dtype in ("int32", "bool"):
        m = f"libtorch_sequence_{dtype}"
        r.copy(r.gen("qa_sequence_model_repository_libtorch", m), m)
        r.sub(f"{m}/config.pbtxt", r"^max_batch_size:.*", "max_batch_size: 4")
        instance_count(r, m, 1)


def repo_implicit_libtorch(r):
    for dtype in ("int32", "object", "bool"):
        m = f"libtorch_nobatch_sequence_{dtype}"
        r.copy(r.gen("qa_sequence_implicit_model_repository_libtorch", m), m)
        instance_count(r, m, 4)


def repo_pytorch_python_runtime(r):
    """L0_pytorch_python_runtime/test.sh's models/ and the files it puts beside its tests:
    the data store's pytorch_model_store (addsub, neuralnet) and resnet50_libtorch, here the
    stand-ins of tests/framework_models/torch_runtime_models.py; resnet50_libtorch edited
    by test.sh's lines; neuralnet's test_data.json moved out; the runtime's model.py copied
    as py_runtime.py for unit_test.py."""
    root = r.gen("pytorch_runtime_models")
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

SUITES: list[Suite] = []
NOT_VALIDATED = [
    Suite(
        "pytorch_python_runtime",
        "L0_pytorch_python_runtime",
        str(_PROJECT / "tests" / "qa_extra" / "steps" / "pytorch_python_runtime.py"),
        ["PyTorchPythonRuntimeSteps"],
        repo_pytorch_python_runtime,
        args=["--log-verbose=1"],
        timeout=600,
        default=False,
        reference="not-validated",
        note=_NOTE + "; test.sh's steps (unit_test.py, its log greps, infer.py) as unittest tests "
        "(tests/qa_extra/steps); the data store's models stood in for, image_client's "
        "resnet50 inference replaced by a check of the stand-in TorchScript model",
    ),
    Suite(
        "libtorch_io_names",
        "L0_libtorch_io_names",
        "io_names_client.py",
        ["IONamingConvention"],
        repo_io_names,
        default=False,
        reference="not-validated",
        note=_NOTE,
    ),
    Suite(
        "infer_libtorch",
        "L0_infer",
        "infer_test.py",
        [f"InferTest::{t}" for t in INFER_LIBTORCH_TESTS],
        repo_infer_libtorch,
        env={"BACKENDS": "libtorch", "ENSEMBLES": "0", "NOBATCH": "1", "BATCH": "1"},
        args=["--exit-timeout-secs=120"],
        timeout=600,
        default=False,
        reference="not-validated",
        note=_NOTE,
    ),
    *(
        Suite(
            f"libtorch_inference_mode_{flag}",
            "common",
            "libtorch_infer_client.py",
            ["InferTest"],
            _inference_mode(flag),
            default=False,
            reference="not-validated",
            note=_NOTE,
        )
        for flag in ("true", "false")
    ),
    Suite(
        "sequence_batcher_libtorch",
        "L0_sequence_batcher",
        "sequence_batcher_test.py",
        [f"SequenceBatcherTest::{t}" for t in SEQ_NO_DELAY],
        repo_sequence_libtorch,
        env=dict(_seq_env("1"), BACKENDS="libtorch"),
        restart="test",
        timeout=180,
        default=False,
        reference="not-validated",
        note=_NOTE + "; BACKENDS=libtorch ENSEMBLES=0, model trial 1",
    ),
    Suite(
        "implicit_state_libtorch",
        "L0_sequence_batcher",
        "sequence_batcher_test.py",
        [f"SequenceBatcherTest::{t}" for t in SEQ_NO_DELAY],
        repo_implicit_libtorch,
        env=dict(_seq_env("0"), BACKENDS="libtorch", IMPLICIT_STATE="1"),
        restart="test",
        timeout=180,
        default=False,
        reference="not-validated",
        note=_NOTE + "; L0_implicit_state's libtorch part (gen_qa_implicit_models --libtorch)",
    ),
]
