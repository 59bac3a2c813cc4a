"""service.repository.ensemble_config: every load-time fault of an ensemble, and the success path.

The configs are hand-built ModelConfig messages and the composing models come from a dict,
so each test states exactly which step, tensor and config is at fault.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from inference import model_config_pb2 as mc
from service.repository.config_file import ConfigError
from service.repository.ensemble_config import composing_models, validate_ensemble

Spec = tuple[str, str, Sequence[int]]  # (name, Triton datatype, dims)


def _tensor(cls: type, spec: Spec, optional: bool = False) -> mc.ModelInput | mc.ModelOutput:
    name, datatype, dims = spec
    config_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    tensor = cls(name=name, data_type=mc.DataType.Value(config_type), dims=list(dims))
    if optional:
        tensor.optional = True
    return tensor


def _model(
    name: str,
    inputs: Sequence[Spec],
    outputs: Sequence[Spec],
    max_batch_size: int = 8,
    optional: Sequence[str] = (),
) -> mc.ModelConfig:
    return mc.ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        max_batch_size=max_batch_size,
        input=[_tensor(mc.ModelInput, s, s[0] in optional) for s in inputs],
        output=[_tensor(mc.ModelOutput, s) for s in outputs],
    )


def _step(
    model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1
) -> mc.ModelEnsembling.Step:
    return mc.ModelEnsembling.Step(
        model_name=model, model_version=version, input_map=inputs, output_map=outputs
    )


def _ensemble(
    steps: Sequence[mc.ModelEnsembling.Step],
    inputs: Sequence[Spec] = (("RAW", "FP32", [4]),),
    outputs: Sequence[Spec] = (),
    *,
    name: str = "ens",
    max_batch_size: int = 8,
) -> mc.ModelConfig:
    return mc.ModelConfig(
        name=name,
        platform="ensemble",
        max_batch_size=max_batch_size,
        input=[_tensor(mc.ModelInput, s) for s in inputs],
        output=[_tensor(mc.ModelOutput, s) for s in outputs],
        ensemble_scheduling=mc.ModelEnsembling(step=list(steps)),
    )


# The composing models, by name (every test looks them up through a dict).
MODELS: dict[str, mc.ModelConfig] = {
    "scale": _model("scale", [("INPUT0", "FP32", [4])], [("OUTPUT0", "FP32", [4])]),
    "square": _model("square", [("INPUT0", "FP32", [4])], [("OUTPUT0", "FP32", [4])]),
    "add_sub": _model(
        "add_sub",
        [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
    ),
    "flex": _model("flex", [("INPUT0", "FP32", [-1])], [("OUTPUT0", "FP32", [-1])]),
    "to_int": _model("to_int", [("INPUT0", "FP32", [4])], [("OUTPUT0", "INT32", [4])]),
    "grid": _model("grid", [("INPUT0", "FP32", [2, 2])], [("OUTPUT0", "FP32", [2, 2])]),
    "small": _model(
        "small", [("INPUT0", "FP32", [4])], [("OUTPUT0", "FP32", [4])], max_batch_size=2
    ),
    "opt": _model(
        "opt",
        [("INPUT0", "FP32", [4]), ("EXTRA", "FP32", [4])],
        [("OUTPUT0", "FP32", [4])],
        optional=["EXTRA"],
    ),
    "text": _model("text", [("INPUT0", "BYTES", [1])], [("OUTPUT0", "BYTES", [1])]),
}


class Lookup:
    """A dict-based ConfigLookup that records what it was asked."""

    def __init__(self, models: dict[str, mc.ModelConfig] | None = None) -> None:
        self.models = MODELS if models is None else models
        self.calls: list[tuple[str, int]] = []

    def __call__(self, name: str, version: int) -> mc.ModelConfig | None:
        self.calls.append((name, version))
        return self.models.get(name)


def _fails(config: mc.ModelConfig, message: str, lookup: Lookup | None = None) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        validate_ensemble(config, lookup or Lookup())


def _pipeline() -> mc.ModelConfig:
    """RAW -> scale -> SCALED -> (square -> SQUARED, add_sub(SCALED, RAW) -> PLUS, MINUS)."""
    return _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "SCALED"}),
            _step("square", {"INPUT0": "SCALED"}, {"OUTPUT0": "SQUARED"}),
            _step(
                "add_sub",
                {"INPUT0": "SCALED", "INPUT1": "RAW"},
                {"OUTPUT0": "PLUS", "OUTPUT1": "MINUS"},
            ),
        ],
        outputs=[
            ("SQUARED", "FP32", [4]),
            ("PLUS", "FP32", [4]),
            ("MINUS", "FP32", [4]),
            ("SCALED", "FP32", [4]),
        ],
    )


# --------------------------------------------------------------------------- success path


def test_valid_pipeline_returns_every_tensor_datatype() -> None:
    lookup = Lookup()
    types = validate_ensemble(_pipeline(), lookup)
    assert types == {
        "RAW": "FP32",
        "SCALED": "FP32",
        "SQUARED": "FP32",
        "PLUS": "FP32",
        "MINUS": "FP32",
    }
    assert lookup.calls == [("scale", -1), ("square", -1), ("add_sub", -1)]


def test_datatypes_follow_the_producing_model() -> None:
    config = _ensemble(
        [
            _step("to_int", {"INPUT0": "RAW"}, {"OUTPUT0": "INTS"}),
            _step("text", {"INPUT0": "WORDS"}, {"OUTPUT0": "ECHO"}),
        ],
        inputs=[("RAW", "FP32", [4]), ("WORDS", "BYTES", [1])],
        outputs=[("INTS", "INT32", [4]), ("ECHO", "BYTES", [1])],
    )
    assert validate_ensemble(config, Lookup()) == {
        "RAW": "FP32",
        "WORDS": "BYTES",
        "INTS": "INT32",
        "ECHO": "BYTES",
    }


def test_steps_listed_out_of_order_are_valid() -> None:
    """Steps run when their inputs exist: the order in the config does not matter."""
    config = _ensemble(
        [
            _step("square", {"INPUT0": "SCALED"}, {"OUTPUT0": "OUT"}),
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "SCALED"}),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    assert validate_ensemble(config, Lookup()) == {
        "RAW": "FP32",
        "OUT": "FP32",
        "SCALED": "FP32",
    }


def test_variable_dims_are_compatible_with_fixed_ones() -> None:
    config = _ensemble(
        [
            _step("flex", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("scale", {"INPUT0": "MID"}, {"OUTPUT0": "OUT"}),
        ],
        inputs=[("RAW", "FP32", [-1])],
        outputs=[("OUT", "FP32", [-1])],
    )
    assert validate_ensemble(config, Lookup()) == {"RAW": "FP32", "MID": "FP32", "OUT": "FP32"}


def test_unmapped_optional_input_is_allowed() -> None:
    config = _ensemble(
        [_step("opt", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})], outputs=[("OUT", "FP32", [4])]
    )
    assert validate_ensemble(config, Lookup()) == {"RAW": "FP32", "OUT": "FP32"}


def test_a_step_output_may_be_left_unmapped() -> None:
    config = _ensemble(
        [_step("add_sub", {"INPUT0": "RAW", "INPUT1": "RAW"}, {"OUTPUT1": "DIFF"})],
        outputs=[("DIFF", "FP32", [4])],
    )
    assert validate_ensemble(config, Lookup()) == {"RAW": "FP32", "DIFF": "FP32"}


def test_equal_max_batch_size_and_explicit_version_are_passed_to_the_lookup() -> None:
    lookup = Lookup()
    config = _ensemble(
        [_step("small", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"}, version=3)],
        outputs=[("OUT", "FP32", [4])],
        max_batch_size=2,
    )
    assert validate_ensemble(config, lookup) == {"RAW": "FP32", "OUT": "FP32"}
    assert lookup.calls == [("small", 3)]


def test_composing_models_are_listed_once_in_step_order() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "A"}),
            _step("square", {"INPUT0": "A"}, {"OUTPUT0": "B"}),
            _step("scale", {"INPUT0": "B"}, {"OUTPUT0": "C"}),
        ]
    )
    assert composing_models(config) == ["scale", "square"]


# --------------------------------------------------------------------------- faults


def test_no_steps() -> None:
    _fails(_ensemble([]), "ensemble_scheduling must have at least one step")


def test_unknown_model() -> None:
    config = _ensemble(
        [_step("nonexistent", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(config, "step 0 ('nonexistent'): model 'nonexistent' (version -1) is not available")


def test_unknown_model_version_is_named() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("square", {"INPUT0": "MID"}, {"OUTPUT0": "OUT"}, version=7),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    only_scale = Lookup({"scale": MODELS["scale"]})
    _fails(config, "step 1 ('square'): model 'square' (version 7) is not available", only_scale)


def test_self_reference() -> None:
    config = _ensemble(
        [_step("ens", {"RAW": "RAW"}, {"OUT": "OUT"})], outputs=[("OUT", "FP32", [4])]
    )
    lookup = Lookup()
    _fails(config, "step 0 ('ens'): an ensemble cannot call itself", lookup)
    assert lookup.calls == []


def test_max_batch_size_above_a_composing_models() -> None:
    config = _ensemble(
        [_step("small", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        outputs=[("OUT", "FP32", [4])],
        max_batch_size=4,
    )
    _fails(
        config,
        (
            "ensemble ens allows maximum batch size 4, but it contains model small"
            " which only allows maximum batch size to be 2"
        ),
    )


def test_mapping_an_input_the_model_does_not_have() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW", "BOGUS": "RAW"}, {"OUTPUT0": "OUT"})],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(config, "step 0 ('scale'): the model has no input 'BOGUS'")


def test_unmapped_required_input() -> None:
    config = _ensemble(
        [_step("add_sub", {"INPUT0": "RAW"}, {"OUTPUT0": "SUM"})],
        outputs=[("SUM", "FP32", [4])],
    )
    _fails(config, "step 0 ('add_sub'): inputs not mapped: INPUT1")


def test_several_unmapped_inputs_are_all_named() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("add_sub", {}, {"OUTPUT0": "SUM"}),
        ],
        outputs=[("SUM", "FP32", [4])],
    )
    _fails(config, "step 1 ('add_sub'): inputs not mapped: INPUT0, INPUT1")


def test_mapping_an_output_the_model_does_not_have() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT9": "OUT"})],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(config, "step 0 ('scale'): the model has no output 'OUTPUT9'")


def test_tensor_produced_by_two_steps() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"}),
            _step("square", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"}),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(
        config, "step 1 ('square'): ensemble tensor 'OUT' is already produced by step 0 ('scale')"
    )


def test_tensor_produced_by_a_step_and_the_ensemble_inputs() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "RAW"})],
        outputs=[("RAW", "FP32", [4])],
    )
    _fails(
        config,
        "step 0 ('scale'): ensemble tensor 'RAW' is already produced by the ensemble's inputs",
    )


def test_both_outputs_of_one_step_mapped_to_one_tensor() -> None:
    """output_map is a map from the model's outputs: two of them may name one tensor."""
    config = _ensemble(
        [_step("add_sub", {"INPUT0": "RAW", "INPUT1": "RAW"}, {"OUTPUT0": "X", "OUTPUT1": "X"})],
        outputs=[("X", "FP32", [4])],
    )
    _fails(
        config, "step 0 ('add_sub'): ensemble tensor 'X' is already produced by step 0 ('add_sub')"
    )


def test_step_input_never_produced() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("square", {"INPUT0": "GHOST"}, {"OUTPUT0": "OUT"}),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(config, "step 1 ('square'): ensemble tensor 'GHOST' is never produced")


def test_ensemble_output_never_produced() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"})],
        outputs=[("MID", "FP32", [4]), ("OUT", "FP32", [4])],
    )
    _fails(config, "ensemble output 'OUT' is not produced by any step")


def test_datatype_mismatch_between_ensemble_input_and_step() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        inputs=[("RAW", "INT32", [4])],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(
        config,
        (
            "in ensemble ens, ensemble tensor RAW: inconsistent data type: "
            "TYPE_INT32 is inferred from model ens"
            " while TYPE_FP32 is inferred from model scale"
        ),
    )


def test_datatype_mismatch_between_two_steps() -> None:
    config = _ensemble(
        [
            _step("to_int", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("square", {"INPUT0": "MID"}, {"OUTPUT0": "OUT"}),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(
        config,
        (
            "in ensemble ens, ensemble tensor MID: inconsistent data type: "
            "TYPE_INT32 is inferred from model to_int"
            " while TYPE_FP32 is inferred from model square"
        ),
    )


def test_datatype_mismatch_at_the_ensemble_output() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        outputs=[("OUT", "FP16", [4])],
    )
    _fails(
        config,
        (
            "in ensemble ens, ensemble tensor OUT: inconsistent data type: "
            "TYPE_FP16 is inferred from model ens"
            " while TYPE_FP32 is inferred from model scale"
        ),
    )


def test_shape_mismatch_between_ensemble_input_and_step() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        inputs=[("RAW", "FP32", [3])],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(
        config,
        (
            "in ensemble ens, ensemble tensor RAW: inconsistent shape: "
            "[-1,3] is inferred from model ens"
            " while [-1,4] is inferred from model scale"
        ),
    )


def test_rank_mismatch_between_two_steps() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("grid", {"INPUT0": "MID"}, {"OUTPUT0": "OUT"}),
        ],
        outputs=[("OUT", "FP32", [2, 2])],
    )
    _fails(
        config,
        (
            "in ensemble ens, ensemble tensor MID: inconsistent shape: "
            "[-1,4] is inferred from model scale"
            " while [-1,2,2] is inferred from model grid"
        ),
    )


def test_shape_mismatch_at_the_ensemble_output() -> None:
    config = _ensemble(
        [_step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        outputs=[("OUT", "FP32", [5])],
    )
    _fails(
        config,
        (
            "in ensemble ens, ensemble tensor OUT: inconsistent shape: "
            "[-1,5] is inferred from model ens"
            " while [-1,4] is inferred from model scale"
        ),
    )


def test_two_step_cycle() -> None:
    """Each step waits on the other's output: every tensor is produced, none ever exists."""
    config = _ensemble(
        [
            _step(
                "add_sub", {"INPUT0": "RAW", "INPUT1": "BACK"}, {"OUTPUT0": "X", "OUTPUT1": "OUT"}
            ),
            _step("square", {"INPUT0": "X"}, {"OUTPUT0": "BACK"}),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(config, "ensemble steps form a cycle or wait forever: 'add_sub', 'square'")


def test_a_step_feeding_itself_is_a_cycle() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step(
                "add_sub",
                {"INPUT0": "MID", "INPUT1": "LOOP"},
                {"OUTPUT0": "LOOP", "OUTPUT1": "OUT"},
            ),
        ],
        outputs=[("OUT", "FP32", [4])],
    )
    _fails(config, "ensemble steps form a cycle or wait forever: 'add_sub'")


def test_the_first_fault_in_step_order_is_reported() -> None:
    config = _ensemble(
        [
            _step("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "MID"}),
            _step("nonexistent", {"INPUT0": "MID"}, {"OUTPUT0": "A"}),
            _step("add_sub", {"INPUT0": "MID"}, {"OUTPUT0": "B"}),
        ]
    )
    _fails(config, "step 1 ('nonexistent'): model 'nonexistent' (version -1) is not available")


def test_config_error_is_a_value_error() -> None:
    """The loader catches ValueError to make the ensemble UNAVAILABLE with the message."""
    with pytest.raises(ValueError, match="is not available"):
        validate_ensemble(
            _ensemble([_step("nonexistent", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})]),
            Lookup(),
        )
