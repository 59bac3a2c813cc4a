"""Issue 27 (item 3): ensembles with ``max_batch_size: 0`` over models that batch, as
Triton's own qa runs them.

- ensemble_mix_batch_nobatch: qa/L0_infer's test_ensemble_mix_batch_nobatch on
  qa/ensemble_models' batch_to_nobatch*, nobatch_to_batch* and mix_nobatch_batch (test.sh
  copies them when BACKENDS has graphdef). ``*_nobatch`` are ``max_batch_size: 0``
  ensembles of [8, 16] over graphdef_float32_float32_float32 (max_batch_size 8, dims [16]).
  That TensorFlow model is stood in for by a python model with the same config (the ONNX
  one's, as test.sh makes its python models) running qa's python_models/add_sub;
  custom_{,nobatch_}zero_1_float32 (identity backend) by the runner's identity_delay.
- infer_ensembles_onnx: qa/L0_infer's InferTest on BACKENDS=onnx ENSEMBLES=1 for a few
  dtypes: each test also runs the simple_/sequence_/fan_ ensembles gen_qa_models.py
  --ensemble makes over the ONNX models, batching and ``_nobatch``. The ``_nobatch``
  sequence/fan ensembles (``max_batch_size: 0``, dims [16]) pass through the nop_* identity
  models, which batch (``max_batch_size: 1024``, dims [-1]). nop_* run on the identity
  backend, stood in for by identity_delay; only the nop models of the selected dtypes are
  copied (test.sh copies all 39).
- simple_ensemble: qa/L0_simple_ensemble (a batching ensemble calling ``simple`` versions
  1 and 2: per-version statistics, one requested output), a fresh server per test as
  test.sh. ``simple`` is Dockerfile.QA's docs/examples model in both versions: its ONNX
  release (v2.51's is TensorFlow), with qa's config on the ONNX platform.
  test_ensemble_sequence_flags: Triton's ensemble scheduler (r24.10) tags every step
  output with the step's sequence id and flags and adds ``sequence_id``,
  ``sequence_start`` and ``sequence_end`` to the ensemble's response once per such
  output (HTTP JSON repeats the keys; ours names each once: a JSON reader keeps one).
"""

import manifest
from manifest import SIMPLE_ONNX_REF, Suite, identity_delay

# gen_qa_model_repository: gen_qa_models.py --ensemble (configs only, every platform)
manifest.GENERATORS.setdefault(
    "qa_ensemble_model_repository", ["gen_qa_models.py", "--ensemble", "--models_dir={out}"]
)


def _custom_zero(r):
    """test.sh: custom_zero_1_float32 (max_batch_size 8, dims [-1]) and its copy
    custom_nobatch_zero_1_float32 (max_batch_size 0, dims [-1, -1])."""
    src = r.qa("custom_models/custom_zero_1_float32/config.pbtxt")
    for name in ("custom_zero_1_float32", "custom_nobatch_zero_1_float32"):
        identity_delay(r, name, src)
        r.append(f"{name}/config.pbtxt", "instance_group [ { kind: KIND_CPU }]")
    cfg = "custom_zero_1_float32/config.pbtxt"
    r.sub(cfg, r"max_batch_size: 1", "max_batch_size: 8")
    r.sub(cfg, r"dims: \[ 1 \]", "dims: [ -1 ]")
    cfg = "custom_nobatch_zero_1_float32/config.pbtxt"
    r.sub(cfg, "custom_zero_1_float32", "custom_nobatch_zero_1_float32")
    r.sub(cfg, r"max_batch_size: 1", "max_batch_size: 0")
    r.sub(cfg, r"dims: \[ 1 \]", "dims: [ -1, -1 ]")


MIX_ENSEMBLES = [
    "batch_to_nobatch_float32_float32_float32",
    "batch_to_nobatch_nobatch_float32_float32_float32",
    "nobatch_to_batch_float32_float32_float32",
    "nobatch_to_batch_nobatch_float32_float32_float32",
    "mix_nobatch_batch_float32_float32_float32",
]


def repo_mix_batch_nobatch(r):
    onnx = r.gen("qa_model_repository", "onnx_float32_float32_float32")
    m = r.python_from_onnx(
        onnx,
        name="graphdef_float32_float32_float32",
        model_py=r.qa("python_models/add_sub/model.py"),
        all_versions=True,
    )
    r.append(f"{m}/config.pbtxt", "instance_group [ { kind: KIND_CPU }]")
    for em in MIX_ENSEMBLES:
        r.copy(r.qa(f"ensemble_models/{em}"), em)
        r.mkdir(f"{em}/1")
    _custom_zero(r)


# test name -> the dtype suffix of its models (input, output0, output1)
INFER_TESTS = {
    "test_raw_fff": ("float32", "float32", "float32"),
    "test_raw_iii": ("int32", "int32", "int32"),
    "test_raw_hhh": ("float16", "float16", "float16"),
    "test_raw_ooo": ("object", "object", "object"),
    "test_raw_iff": ("int32", "float32", "float32"),
    "test_class_fff": ("float32", "float32", "float32"),
}
_NOP_TYPE = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "int32": "TYPE_INT32",
    "object": "TYPE_STRING",
}


def repo_infer_ensembles_onnx(r):
    """test.sh generate_model_repository() for BACKENDS=onnx ENSEMBLES=1, the selected dtypes."""
    suffixes = sorted({"_".join(t) for t in INFER_TESTS.values()})
    for s in suffixes:
        for m in (f"onnx_{s}", f"onnx_nobatch_{s}"):
            r.copy(r.gen("qa_model_repository", m), m)
            r.append(f"{m}/config.pbtxt", "instance_group [ { kind: KIND_CPU }]")
        for kind in ("simple", "sequence", "fan"):
            for variant in ("", "_nobatch"):
                m = f"{kind}_onnx{variant}_{s}"
                r.copy(r.gen("qa_ensemble_model_repository", m), m)
    dtypes = sorted({d for t in INFER_TESTS.values() for d in t})
    for d in dtypes:
        nop = f"nop_{_NOP_TYPE[d]}_-1"
        src = r.gen("qa_ensemble_model_repository", f"{nop}/config.pbtxt")
        identity_delay(r, nop, src)


def repo_simple_ensemble(r):
    r.copy(r.qa("L0_simple_ensemble/models"), ".")
    r.mkdir("ensemble_add_sub_int32_int32_int32/1")
    docs = r.server_file("docs/examples/model_repository/simple", ref=SIMPLE_ONNX_REF)
    for version in ("1", "2"):
        r.copy(f"{docs}/1/model.onnx", f"simple/{version}/model.onnx")
    r.sub("simple/config.pbtxt", r"^platform:.*$", 'platform: "onnxruntime_onnx"')


INFER_ENV = {"BACKENDS": "onnx", "ENSEMBLES": "1", "NOBATCH": "1", "BATCH": "1"}

SUITES = [
    Suite(
        "ensemble_mix_batch_nobatch",
        "L0_infer",
        "infer_test.py",
        ["InferTest::test_ensemble_mix_batch_nobatch"],
        repo_mix_batch_nobatch,
        env={"BACKENDS": "graphdef", "ENSEMBLES": "1"},
        args=["--exit-timeout-secs=120"],
        default=False,
        note="graphdef_float32_float32_float32 (TensorFlow) stood in for by python add_sub with "
        "the ONNX config; custom_*zero_1_float32 (identity backend) by identity_delay",
    ),
    Suite(
        "infer_ensembles_onnx",
        "L0_infer",
        "infer_test.py",
        [f"InferTest::{t}" for t in INFER_TESTS],
        repo_infer_ensembles_onnx,
        env=INFER_ENV,
        args=["--exit-timeout-secs=120"],
        timeout=600,
        default=False,
        reference="pass-ort",
        note="BACKENDS=onnx ENSEMBLES=1: onnx_*, simple_/sequence_/fan_onnx{,_nobatch}_*; nop_* "
        "(identity backend, max_batch_size 1024) stood in for by identity_delay",
    ),
    Suite(
        "simple_ensemble",
        "L0_simple_ensemble",
        "ensemble_test.py",
        [
            "EnsembleTest::test_ensemble_add_sub",
            "EnsembleTest::test_ensemble_add_sub_one_output",
            "EnsembleTest::test_ensemble_sequence_flags",
        ],
        repo_simple_ensemble,
        restart="test",
        default=False,
        reference="pass-ort",
        note="simple (TensorFlow at v2.51) as its ONNX release, versions 1 and 2",
    ),
]
