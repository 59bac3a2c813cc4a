"""Issue 38 (OpenVINO): Triton's qa generators for OpenVINO, run unchanged.

``gen_qa_models.py --openvino`` and the other generators write IR through the nGraph
Python API, which OpenVINO removed in 2024.0. ``gen/openvino_gen.py`` execs them under the
OpenVINO Triton's ``gen_qa_model_repository`` pins (2023.3.0) in a venv of its own, built
before run.sh with ``python3 tests/qa_extra/gen/openvino_gen.py --build`` (run.sh's network
namespace has no network); the server reads their IR (v11) with the current OpenVINO.
The repositories below are there for a recipe to take (``r.gen(name, model)``).

No suite: nothing of Triton's v2.51.0 qa drives an OpenVINO model from Python in a way that
can pass (docs/decisions/058):

- infer_test.py, infer_reshape_test.py and infer_variable_test.py have no OpenVINO case
  (BACKENDS=openvino runs nothing of them); infer_zero_test.py has no validator for it
  (KeyError);
- batcher_test.py and sequence_util.py (L0_sequence_batcher, L0_dyna_sequence_batcher)
  fail every trial named ``openvino`` ("unknown trial type: openvino"), and
  sequence_batcher_test.py also asks for ``openvino_sequence_bool``, which
  gen_qa_sequence_models.py --openvino does not write;
- L0_lifecycle's test_concurrent_model_instance_load_sanity names OpenVINO
  (``"openvino": [cpu]``) but loads openvino_float32_float32_float32 with
  max_batch_size 0 and dims ``[-1, 16]``; the generated IR has a fixed ``[8, 16]``, which
  Triton's openvino_backend r24.10 refuses too (``doesMatch`` of a static 8 and -1 is
  false), in the text this server gives. Its python/onnx part (test.sh's
  PARALLEL_BACKENDS) loads KIND_GPU instances: not on this machine;
- L0_model_config's OpenVINO cases are greps of the server log and compare_status.py runs
  from test.sh, not unittest files the runner drives.
"""

import os

import manifest

# The runner starts ``<gen python> <args>`` in qa/common; this wrapper, first among the
# args, re-execs the generator named after it under the nGraph-era OpenVINO.
_GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen", "openvino_gen.py")
for _name, _script in (
    ("qa_model_repository_openvino", "gen_qa_models.py"),
    ("qa_reshape_model_repository_openvino", "gen_qa_reshape_models.py"),
    ("qa_identity_model_repository_openvino", "gen_qa_identity_models.py"),
    ("qa_sequence_model_repository_openvino", "gen_qa_sequence_models.py"),
    ("qa_dyna_sequence_model_repository_openvino", "gen_qa_dyna_sequence_models.py"),
):
    manifest.GENERATORS.setdefault(_name, [_GEN, _script, "--openvino", "--models_dir={out}"])

SUITES: list = []
