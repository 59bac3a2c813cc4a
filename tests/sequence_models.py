"""ONNX models and config text for the sequence batcher tests (stateful models).

Only ``onnx`` and ``numpy`` are imported (through ``models``): the module is used by the
server tests (.venv) and by the client tests (.venv-client, without onnxruntime).

Three kinds of model:

* ``echo_model``: explicit control inputs. It returns what the batcher fed its own batch
  row (``OUT_<X>``) and the whole batch as seen by every row (``ALL_<X>``, shape
  ``[batch, batch]``), so a client can check START/END/READY/CORRID per slot, dummy rows,
  and which sequences shared an execution.
* ``accumulator_model``: implicit state, ``OUTPUT_STATE = INPUT + INPUT_STATE`` (or
  ``INPUT`` on a START row when ``reset_on_start``); ``OUTPUT`` is the running sum.
* ``history_model``: implicit state of variable size, ``OUTPUT_STATE = concat(INPUT_STATE,
  INPUT)``: the state grows by one element per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from models import elem_type, make_config, make_model
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "CONTROL_NAMES",
    "ControlType",
    "accumulator_config",
    "accumulator_model",
    "control",
    "corrid_control",
    "echo_config",
    "echo_model",
    "history_config",
    "history_model",
    "sequence_batching",
    "state",
]

#: The echo model's control inputs, by kind.
CONTROL_NAMES = {"START": "CONTROL_SEQUENCE_START", "END": "CONTROL_SEQUENCE_END"}
CONTROL_NAMES["READY"] = "CONTROL_SEQUENCE_READY"


@dataclass(frozen=True)
class ControlType:
    """How START/END/READY are typed: a Triton datatype and its (false, true) values."""

    datatype: str  # "FP32", "INT32" or "BOOL"
    false_true: tuple[float | int | bool, float | int | bool] = (0, 1)

    @property
    def field(self) -> str:
        return {"FP32": "fp32_false_true", "INT32": "int32_false_true"}.get(
            self.datatype, "bool_false_true"
        )

    def values_text(self) -> str:
        if self.datatype == "BOOL":
            return ", ".join("true" if v else "false" for v in self.false_true)
        return ", ".join(str(v) for v in self.false_true)

    def numpy(self, flag: bool | Sequence[bool]) -> np.ndarray:
        """The values the batcher should feed for ``flag`` (one value or a list)."""
        dtype = {"FP32": np.float32, "INT32": np.int32, "BOOL": np.bool_}[self.datatype]
        flags = np.asarray(flag, dtype=bool)
        return np.where(flags, self.false_true[1], self.false_true[0]).astype(dtype)


# ----------------------------------------------------------------------------- config text


def control(name: str, kind: str, ctype: ControlType) -> str:
    """One ``control_input`` entry for CONTROL_SEQUENCE_START / END / READY."""
    return (
        f'{{ name: "{name}" control [ {{ kind: {kind} '
        f"{ctype.field}: [ {ctype.values_text()} ] }} ] }}"
    )


def corrid_control(name: str, datatype: str) -> str:
    """A CONTROL_SEQUENCE_CORRID entry; ``datatype`` as Triton names it ("UINT64", "BYTES")."""
    config_type = "TYPE_STRING" if datatype in ("BYTES", "STRING") else f"TYPE_{datatype}"
    return (
        f'{{ name: "{name}" control [ {{ kind: CONTROL_SEQUENCE_CORRID '
        f"data_type: {config_type} }} ] }}"
    )


def state(
    input_name: str = "INPUT_STATE",
    output_name: str = "OUTPUT_STATE",
    datatype: str = "INT32",
    dims: Sequence[int] = (1,),
    *,
    zero_dims: Sequence[int] | None = None,
    file_dims: Sequence[int] | None = None,
    data_file: str = "initial_state_data",
) -> str:
    """One ``state`` entry; ``zero_dims`` / ``file_dims`` add an ``initial_state``."""
    text = (
        f'{{ input_name: "{input_name}" output_name: "{output_name}" '
        f"data_type: TYPE_{datatype} dims: [ {', '.join(str(d) for d in dims)} ]"
    )
    if zero_dims is not None or file_dims is not None:
        init_dims = zero_dims if zero_dims is not None else file_dims
        assert init_dims is not None
        source = "zero_data: true" if zero_dims is not None else f'data_file: "{data_file}"'
        text += (
            f" initial_state: {{ data_type: TYPE_{datatype} "
            f"dims: [ {', '.join(str(d) for d in init_dims)} ] {source} "
            f'name: "initial state" }}'
        )
    return text + " }"


def sequence_batching(
    controls: Sequence[str] = (),
    states: Sequence[str] = (),
    *,
    strategy: str = "",
    idle_us: int | None = None,
) -> str:
    """A ``sequence_batching { ... }`` block; ``strategy`` e.g. ``"direct { }"``."""
    parts = []
    if idle_us is not None:
        parts.append(f"max_sequence_idle_microseconds: {idle_us}")
    if strategy:
        parts.append(strategy)
    if controls:
        parts.append("control_input [ " + ", ".join(controls) + " ]")
    if states:
        parts.append("state [ " + ", ".join(states) + " ]")
    return "sequence_batching {\n  " + "\n  ".join(parts) + "\n}\n"


# ----------------------------------------------------------------------------- echo model


def _int64(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def echo_model(
    control_type: str = "FP32",
    corrid_type: str = "UINT64",
    *,
    controls: Sequence[str] = ("START", "END", "READY"),
    one_dim_controls: bool = False,
) -> onnx.ModelProto:
    """INPUT (INT32 [b,1]) plus the control inputs, echoed per row and per batch.

    Outputs: ``OUTPUT`` (= INPUT), ``OUT_<X>`` ([b,1], the row's own value) and ``ALL_<X>``
    ([b,b]: every row holds the whole column, in slot order) for X in INPUT, the
    ``controls`` and CORRID. ``one_dim_controls`` declares the control inputs as ``[b]``
    (Triton allows both ``[b]`` and ``[b,1]``).
    """
    ctrl = elem_type(control_type)
    corrid = elem_type("BYTES" if corrid_type in ("BYTES", "STRING") else corrid_type)
    nodes = [
        helper.make_node("Identity", ["INPUT"], ["OUTPUT"]),
        helper.make_node("Shape", ["INPUT"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "batch"], ["square"], axis=0),
    ]
    inputs = [helper.make_tensor_value_info("INPUT", TensorProto.INT32, ["batch", 1])]
    outputs = [helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["batch", 1])]
    columns = [("INPUT", TensorProto.INT32), *((c, ctrl) for c in controls), ("CORRID", corrid)]
    for name, et in columns:
        column = name
        if name != "INPUT":
            dims: list[int | str] = ["batch"] if one_dim_controls else ["batch", 1]
            inputs.append(helper.make_tensor_value_info(name, et, dims))
            if one_dim_controls:
                column = f"{name}_2d"
                nodes.append(helper.make_node("Unsqueeze", [name, "one"], [column]))
            nodes.append(helper.make_node("Identity", [column], [f"OUT_{name}"]))
            outputs.append(helper.make_tensor_value_info(f"OUT_{name}", et, ["batch", 1]))
        nodes.append(helper.make_node("Transpose", [column], [f"{name}_row"], perm=[1, 0]))
        nodes.append(helper.make_node("Expand", [f"{name}_row", "square"], [f"ALL_{name}"]))
        outputs.append(helper.make_tensor_value_info(f"ALL_{name}", et, ["batch", "batch"]))
    graph = helper.make_graph(
        nodes,
        f"echo_{control_type.lower()}_{corrid_type.lower()}",
        inputs,
        outputs,
        initializer=[_int64("zero", [0]), _int64("one", [1])],
    )
    return make_model(graph)


def echo_config(
    name: str,
    ctype: ControlType,
    corrid_type: str = "UINT64",
    *,
    controls: Sequence[str] = ("START", "END", "READY"),
    max_batch_size: int = 2,
    instance_count: int = 1,
    strategy: str = "",
    idle_us: int | None = 5_000_000,
) -> str:
    corrid = "BYTES" if corrid_type in ("BYTES", "STRING") else corrid_type
    outputs: list[tuple[str, str, list[int]]] = [
        ("OUTPUT", "INT32", [1]),
        ("ALL_INPUT", "INT32", [-1]),
        ("OUT_CORRID", corrid, [1]),
        ("ALL_CORRID", corrid, [-1]),
    ]
    for c in controls:
        outputs += [(f"OUT_{c}", ctype.datatype, [1]), (f"ALL_{c}", ctype.datatype, [-1])]
    batching = sequence_batching(
        [
            *(control(c, CONTROL_NAMES[c], ctype) for c in controls),
            corrid_control("CORRID", corrid),
        ],
        strategy=strategy,
        idle_us=idle_us,
    )
    return make_config(
        name,
        [("INPUT", "INT32", [1])],
        outputs,
        max_batch_size=max_batch_size,
        instance_count=instance_count,
        extra=batching,
    )


# ----------------------------------------------------------------------------- implicit state


def accumulator_model(
    *, reset_on_start: bool = True, vector_state: bool = False
) -> onnx.ModelProto:
    """INT32 running sum kept in implicit state.

    ``reset_on_start``: the seed's accumulator, OUTPUT_STATE = Where(START, INPUT, INPUT +
    INPUT_STATE) with a START control input (INT32). Otherwise OUTPUT_STATE = INPUT +
    INPUT_STATE with no control at all, so the initial state shows in the outputs.
    ``vector_state``: INPUT_STATE/OUTPUT_STATE/OUTPUT are ``[b, n]`` (INPUT broadcast).
    """
    state_dims: list[int | str] = ["batch", "n"] if vector_state else ["batch", 1]
    inputs = [
        helper.make_tensor_value_info("INPUT", TensorProto.INT32, ["batch", 1]),
        helper.make_tensor_value_info("INPUT_STATE", TensorProto.INT32, state_dims),
    ]
    nodes = [helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["sum"])]
    if reset_on_start:
        inputs.append(helper.make_tensor_value_info("START", TensorProto.INT32, ["batch", 1]))
        nodes += [
            helper.make_node("Cast", ["START"], ["start_flag"], to=TensorProto.BOOL),
            helper.make_node("Where", ["start_flag", "INPUT", "sum"], ["OUTPUT_STATE"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["sum"], ["OUTPUT_STATE"]))
    nodes.append(helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]))
    graph = helper.make_graph(
        nodes,
        "accumulator",
        inputs,
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, state_dims),
            helper.make_tensor_value_info("OUTPUT_STATE", TensorProto.INT32, state_dims),
        ],
    )
    return make_model(graph)


def accumulator_config(
    name: str,
    *,
    reset_on_start: bool = True,
    states: Sequence[str] | None = None,
    output_dims: Sequence[int] = (1,),
    output_state: bool = False,
    max_batch_size: int = 2,
    instance_count: int = 2,
    strategy: str = "",
    idle_us: int | None = 2_000_000,
) -> str:
    """``output_state`` lists OUTPUT_STATE as a client-visible output too."""
    controls = []
    if reset_on_start:
        controls.append(control("START", "CONTROL_SEQUENCE_START", ControlType("INT32")))
    outputs = [("OUTPUT", "INT32", list(output_dims))]
    if output_state:
        outputs.append(("OUTPUT_STATE", "INT32", list(output_dims)))
    return make_config(
        name,
        [("INPUT", "INT32", [1])],
        outputs,
        max_batch_size=max_batch_size,
        instance_count=instance_count,
        extra=sequence_batching(
            controls,
            states if states is not None else [state()],
            strategy=strategy,
            idle_us=idle_us,
        ),
    )


def history_model() -> onnx.ModelProto:
    """OUTPUT_STATE = concat(INPUT_STATE, INPUT) along axis 1: a state that grows."""
    graph = helper.make_graph(
        [
            helper.make_node("Concat", ["INPUT_STATE", "INPUT"], ["OUTPUT_STATE"], axis=1),
            helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
        ],
        "history",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.INT32, ["batch", 1]),
            helper.make_tensor_value_info("INPUT_STATE", TensorProto.INT32, ["batch", "n"]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["batch", "m"]),
            helper.make_tensor_value_info("OUTPUT_STATE", TensorProto.INT32, ["batch", "m"]),
        ],
    )
    return make_model(graph)


def history_config(name: str, *, max_batch_size: int = 2, instance_count: int = 1) -> str:
    return make_config(
        name,
        [("INPUT", "INT32", [1])],
        [("OUTPUT", "INT32", [-1])],
        max_batch_size=max_batch_size,
        instance_count=instance_count,
        extra=sequence_batching([], [state(dims=[-1])], idle_us=2_000_000),
    )
