"""Builders for small ONNX models and Triton-layout model directories used by the tests.

Tests build their models at run time instead of committing binaries, so each test states the
exact graph, dtype and shape it exercises. Only ``onnx`` and ``numpy`` are imported here (no
onnxruntime, no pytest): the module is imported both by server tests (.venv) and by client
tests (.venv-client, which has no onnxruntime).

Typical use::

    from models import identity_model, make_config, write_model

    write_model(repo, "identity_fp16", identity_model("FP16", ["batch", 4]),
                make_config("identity_fp16", [("INPUT0", "FP16", [4])],
                            [("OUTPUT0", "FP16", [4])], max_batch_size=8))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "DEFAULT_OPSET",
    "ONNX_TO_TRITON",
    "TRITON_TO_ONNX",
    "Dim",
    "IoSpec",
    "add_sub_model",
    "elem_type",
    "identity_model",
    "make_config",
    "make_model",
    "mlp_model",
    "mlp_reference",
    "mlp_weights",
    "numpy_dtype",
    "string_add_sub_model",
    "triton_dtype",
    "write_model",
]

#: Opset used unless a dtype needs a newer one. 17 keeps models loadable by every
#: onnxruntime the server supports (>= 1.20).
DEFAULT_OPSET = 17

#: One dimension of an ONNX value: a fixed size, a symbolic name ("batch"), or None (unnamed
#: dynamic dimension).
Dim = int | str | None

#: A config tensor: (name, Triton datatype such as "FP32" or "BYTES", config dims).
IoSpec = tuple[str, str, Sequence[int]]

#: KServe v2 / Triton datatype name -> ONNX element type, for every datatype Triton has.
TRITON_TO_ONNX: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}

#: ONNX element type -> KServe v2 / Triton datatype name (inverse of TRITON_TO_ONNX).
ONNX_TO_TRITON: dict[int, str] = {v: k for k, v in TRITON_TO_ONNX.items()}

# Triton datatype -> model-config enum name (config.pbtxt `data_type:`).
_CONFIG_TYPE: dict[str, str] = {
    **{k: f"TYPE_{k}" for k in TRITON_TO_ONNX},
    "BYTES": "TYPE_STRING",
}


def elem_type(datatype: int | str) -> int:
    """Resolve an ONNX element type given as int, ONNX name ("FLOAT16") or Triton name ("FP16").

    Accepting all three lets parametrized tests iterate over whichever naming they use.
    """
    if isinstance(datatype, int):
        if datatype not in TensorProto.DataType.values() or datatype == TensorProto.UNDEFINED:
            raise ValueError(f"not an ONNX element type: {datatype}")
        return datatype
    if datatype in TRITON_TO_ONNX:
        return TRITON_TO_ONNX[datatype]
    if datatype.startswith("TYPE_"):  # config.pbtxt spelling
        name = datatype.removeprefix("TYPE_")
        return TRITON_TO_ONNX["BYTES" if name == "STRING" else name]
    try:
        return int(TensorProto.DataType.Value(datatype))
    except ValueError:
        raise ValueError(f"unknown datatype {datatype!r}") from None


def triton_dtype(datatype: int | str) -> str:
    """Triton datatype name ("FP32", "BYTES", ...) of an ONNX element type."""
    et = elem_type(datatype)
    if et not in ONNX_TO_TRITON:
        raise ValueError(f"{TensorProto.DataType.Name(et)} has no Triton datatype")
    return ONNX_TO_TRITON[et]


def numpy_dtype(datatype: int | str) -> np.dtype[Any]:
    """numpy dtype onnx uses for an element type.

    STRING maps to object; BFLOAT16 and the float8/int4 family map to ml_dtypes types (an onnx
    dependency). onnxruntime's Python API neither takes nor returns ml_dtypes arrays
    (onnxruntime 1.31: "Numpy_type 256 can't be converted to MLDataType" / "No corresponding
    Numpy type for Tensor Type. bfloat16"). Feed the raw bits with
    ``OrtValue.ortvalue_from_numpy_with_onnx_type(arr.view(np.uint16), elem_type)`` and read
    outputs through an IOBinding bound to such an OrtValue over a preallocated buffer.
    """
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type(datatype)))


def _min_opset(op_type: str, et: int, at_least: int = DEFAULT_OPSET) -> int:
    """Lowest opset >= ``at_least`` whose ``op_type`` schema accepts tensors of ``et``.

    New element types (float8, int4, ...) only become legal inputs of an op in later opsets,
    and the checker rejects them before; older types keep DEFAULT_OPSET for ORT compatibility.
    """
    wanted = f"tensor({TensorProto.DataType.Name(et).lower()})"
    for opset in range(at_least, onnx.defs.onnx_opset_version() + 1):
        schema = onnx.defs.get_schema(op_type, opset, "")
        if any(wanted in tc.allowed_type_strs for tc in schema.type_constraints):
            return opset
    raise ValueError(f"no opset <= {onnx.defs.onnx_opset_version()} has {op_type} on {wanted}")


def make_model(graph: onnx.GraphProto, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """Wrap a graph in a checked model with the lowest IR version the opset allows.

    onnx.helper otherwise stamps its own newest IR version, which older onnxruntime builds
    refuse to load.
    """
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(
        graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets)
    )
    model.producer_name = "tests/models.py"
    onnx.checker.check_model(model, full_check=True)
    return model


def identity_model(
    datatype_onnx: int | str,
    dims: Sequence[Dim],
    *,
    input_name: str = "INPUT0",
    output_name: str = "OUTPUT0",
) -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 for any element type: the simplest round trip of a dtype and shape.

    ``dims`` is the full ONNX shape, batch dim included (e.g. ``["batch", 4]``). The opset is
    raised above DEFAULT_OPSET only for element types Identity-16 does not accept (float8 needs
    19, int4/uint4 21, float4e2m1 23, ...).
    """
    et = elem_type(datatype_onnx)
    graph = helper.make_graph(
        [helper.make_node("Identity", [input_name], [output_name], name="identity")],
        f"identity_{TensorProto.DataType.Name(et).lower()}",
        [helper.make_tensor_value_info(input_name, et, list(dims))],
        [helper.make_tensor_value_info(output_name, et, list(dims))],
    )
    return make_model(graph, _min_opset("Identity", et))


def add_sub_model(
    datatype_onnx: int | str = TensorProto.FLOAT,
    dims: Sequence[Dim] = ("batch", "n"),
    *,
    input_names: tuple[str, str] = ("INPUT0", "INPUT1"),
    output_names: tuple[str, str] = ("OUTPUT0", "OUTPUT1"),
) -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1: Triton's classic two-in/two-out test.

    Two inputs and two outputs catch mixed-up tensor ordering/naming that identity cannot.
    Builds for every type Add/Sub accept (not BOOL or STRING); onnxruntime's CPU provider runs
    all of those except BFLOAT16 (no CPU Add kernel, session creation fails).
    """
    et = elem_type(datatype_onnx)
    shape = list(dims)
    in0, in1 = input_names
    out0, out1 = output_names
    graph = helper.make_graph(
        [
            helper.make_node("Add", [in0, in1], [out0], name="add"),
            helper.make_node("Sub", [in0, in1], [out1], name="sub"),
        ],
        f"add_sub_{TensorProto.DataType.Name(et).lower()}",
        [helper.make_tensor_value_info(n, et, shape) for n in input_names],
        [helper.make_tensor_value_info(n, et, shape) for n in output_names],
    )
    return make_model(graph, _min_opset("Add", et))


def string_add_sub_model(dims: Sequence[Dim] = ("batch", 16)) -> onnx.ModelProto:
    """Triton's ``simple_string`` example as ONNX: BYTES inputs holding decimal integers,
    OUTPUT0 their sum and OUTPUT1 their difference, as decimal strings (Cast both ways)."""
    string, int32 = TensorProto.STRING, TensorProto.INT32
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["INPUT0"], ["a"], to=int32),
            helper.make_node("Cast", ["INPUT1"], ["b"], to=int32),
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Sub", ["a", "b"], ["difference"]),
            helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=string),
            helper.make_node("Cast", ["difference"], ["OUTPUT1"], to=string),
        ],
        "string_add_sub",
        [helper.make_tensor_value_info(n, string, list(dims)) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, string, list(dims)) for n in ("OUTPUT0", "OUTPUT1")],
    )
    return make_model(graph)


def mlp_weights(
    width: int = 1024, layers: int = 3, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (W [width, width], b [width]) float32 pairs ``mlp_model`` embeds, per layer.

    He-scaled normal weights keep activations O(1) through the ReLUs, so outputs neither
    vanish nor overflow whatever the depth; a fixed seed makes them reproducible.
    """
    rng = np.random.default_rng(seed)
    scale = np.float32(np.sqrt(2.0 / width))
    out = []
    for _ in range(layers):
        w = (rng.standard_normal((width, width), dtype=np.float32) * scale).astype(np.float32)
        b = (rng.standard_normal(width, dtype=np.float32) * np.float32(0.01)).astype(np.float32)
        out.append((w, b))
    return out


def mlp_model(width: int = 1024, layers: int = 3, seed: int = 0) -> onnx.ModelProto:
    """FP32 MLP: ``layers`` x (MatMul + Add), Relu between layers (not after the last).

    Input INPUT0 / output OUTPUT0, both FP32 ["batch", width] with a symbolic batch dim: a model
    with real compute and weights (~4*width^2*layers bytes) for batching, throughput and
    memory tests. Reference outputs: ``mlp_reference``.
    """
    if width < 1 or layers < 1:
        raise ValueError("width and layers must be >= 1")
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    x = "INPUT0"
    for i, (w, b) in enumerate(mlp_weights(width, layers, seed)):
        last = i == layers - 1
        initializers += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"mm{i}"], name=f"matmul{i}"))
        y = "OUTPUT0" if last else f"add{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"B{i}"], [y], name=f"add{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [y], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    graph = helper.make_graph(
        nodes,
        f"mlp_w{width}_l{layers}_s{seed}",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", width])],
        initializer=initializers,
    )
    return make_model(graph)


def mlp_reference(x: np.ndarray, width: int = 1024, layers: int = 3, seed: int = 0) -> np.ndarray:
    """numpy forward pass of ``mlp_model(width, layers, seed)``, to check served outputs.

    Compare with a tolerance (e.g. rtol=1e-4, atol=1e-4): BLAS summation order differs.
    """
    h = np.asarray(x, dtype=np.float32)
    params = mlp_weights(width, layers, seed)
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = np.maximum(h, np.float32(0))
    return h


def make_config(
    name: str,
    inputs: Sequence[IoSpec],
    outputs: Sequence[IoSpec],
    *,
    max_batch_size: int = 0,
    platform: str = "onnxruntime_onnx",
    instance_kind: str | None = "KIND_CPU",
    instance_count: int = 1,
    extra: str = "",
) -> str:
    """config.pbtxt text in Triton's format; datatypes as Triton names ("FP32", "BYTES", ...).

    ``dims`` exclude the batch dim when max_batch_size > 0, as in Triton. ``extra`` is appended
    verbatim (dynamic_batching, version_policy, parameters, ...). instance_kind=None omits
    instance_group.
    """

    def tensors(specs: Sequence[IoSpec]) -> str:
        items = []
        for tname, dtype, dims in specs:
            config_type = _CONFIG_TYPE.get(dtype) or _CONFIG_TYPE[triton_dtype(dtype)]
            items.append(
                "  {\n"
                f'    name: "{tname}"\n'
                f"    data_type: {config_type}\n"
                f"    dims: [ {', '.join(str(d) for d in dims)} ]\n"
                "  }"
            )
        return "[\n" + ",\n".join(items) + "\n]"

    lines = [f'name: "{name}"', f'platform: "{platform}"', f"max_batch_size: {max_batch_size}"]
    if inputs:
        lines.append(f"input {tensors(inputs)}")
    if outputs:
        lines.append(f"output {tensors(outputs)}")
    if instance_kind is not None:
        lines.append(f"instance_group [ {{ count: {instance_count} kind: {instance_kind} }} ]")
    text = "\n".join(lines) + "\n"
    if extra:
        text += extra if extra.endswith("\n") else extra + "\n"
    return text


def write_model(
    repo: Path,
    name: str,
    onnx_model: onnx.ModelProto | bytes,
    config_pbtxt: str | None,
    version: int = 1,
    *,
    filename: str = "model.onnx",
) -> Path:
    """Write ``repo/name/config.pbtxt`` and ``repo/name/<version>/<filename>``; return model dir.

    Call again with another ``version`` to add versions; ``config_pbtxt=None`` leaves any
    existing config alone (or writes none, for auto-complete tests). Bytes are accepted so tests
    can write deliberately corrupt models.
    """
    model_dir = Path(repo) / name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    data = onnx_model if isinstance(onnx_model, bytes) else onnx_model.SerializeToString()
    (version_dir / filename).write_bytes(data)
    if config_pbtxt is not None:
        (model_dir / "config.pbtxt").write_text(config_pbtxt, encoding="utf-8")
    return model_dir


def write_ensemble(
    repo: Path,
    name: str,
    step: str,
    inputs: Sequence[IoSpec] = (("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])),
    outputs: Sequence[IoSpec] = (("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])),
) -> Path:
    """An ensemble (``max_batch_size: 8``, version 1) of one step calling ``step`` with
    the same tensor names: add_sub's by default, so it can call add_sub or another such
    ensemble."""
    config = make_config(
        name, inputs, outputs, max_batch_size=8, platform="ensemble", instance_kind=None
    )
    maps = "".join(f'input_map {{ key: "{t[0]}" value: "{t[0]}" }} ' for t in inputs) + "".join(
        f'output_map {{ key: "{t[0]}" value: "{t[0]}" }} ' for t in outputs
    )
    config += (
        f'ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1 {maps}}} ] }}\n'
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    return repo / name
