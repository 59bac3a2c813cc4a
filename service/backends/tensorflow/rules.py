"""The TensorFlow backend's rules without TensorFlow (tensorflow_backend r24.10).

* ``parse_options``: the model ``parameters`` Triton's ``ParseParameters`` reads
  (TF_SIGNATURE_DEF, TF_GRAPH_TAG, TF_NUM_INTRA_THREADS, TF_NUM_INTER_THREADS,
  TF_USE_PER_SESSION_THREADS, MAX_SESSION_SHARE_COUNT) with its checks and texts.
* ``choose_signature``: the SignatureDef to serve: TF_SIGNATURE_DEF, else
  ``serving_default``, else (only when the parameter is unset) the first signature that is
  not the init or train op's, with Triton's warnings; its error text otherwise.
* ``check_config``: ValidateTRITONTFModel's name and datatype checks, with its texts.
* ``tensor_spec``: a signature entry as the config sees it. Triton names a tensor by its
  signature *key* (``INPUT0``), never by the graph tensor the key maps to
  (``serving_default_INPUT0:0``); a shape of unknown rank is rank 0, which Triton fills
  from the config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inference import model_config_pb2 as mc
from wire import datatypes

from ...errors import Internal, InvalidArgument
from ...types import TensorSpec
from ..pytorch.options import _bool, _int  # Triton's common ParseParameter, shared

__all__ = [
    "DEFAULT_SIGNATURE",
    "DEFAULT_TAG",
    "TF_ENVIRONMENT",
    "SignatureTensor",
    "TfOptions",
    "check_config",
    "choose_signature",
    "datatype_of",
    "parse_options",
    "tensor_spec",
]

DEFAULT_SIGNATURE = "serving_default"
DEFAULT_TAG = "serve"

#: What TensorFlow reads from the environment once, when it is imported: ``backend.py`` sets
#: each before the import unless the environment already sets it (the operator's word wins).
#:
#: * TF_CPP_MIN_LOG_LEVEL 2: TensorFlow's C++ info lines off.
#: * TF_ENABLE_ONEDNN_OPTS 0: TensorFlow's own Eigen kernels rather than its oneDNN ones
#:   (decision 062). oneDNN's MatMul caches its weights in the layout the first batch
#:   size's primitive wants and reorders all of them again on every call whose batch size
#:   wants another layout; under a dynamic batcher (batch sizes that vary, a batch of 1
#:   usually first) that cost a served MLP ~1.8x the server CPU a request (0.14-0.2 of its
#:   in-process throughput against 0.39 with Eigen's kernels).
TF_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}

_INIT_OP = "__saved_model_init_op"
_TRAIN_OP = "__saved_model_train_op"

#: TensorFlow's DataType enum names -> the wire datatype (Triton's ConvertDataType);
#: anything else fails the load ("unsupported datatype").
_DATATYPES = {
    "DT_BOOL": "BOOL",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_HALF": "FP16",
    "DT_FLOAT": "FP32",
    "DT_DOUBLE": "FP64",
    "DT_STRING": "BYTES",
}


@dataclass(frozen=True)
class TfOptions:
    signature_def: str = ""  # TF_SIGNATURE_DEF; "" = serving_default, then any
    graph_tag: str = ""  # TF_GRAPH_TAG; "" = serve
    intra_op_threads: int = 0  # TF_NUM_INTRA_THREADS; 0 = the instance's share of cores
    inter_op_threads: int = 0  # TF_NUM_INTER_THREADS; 0 = the instance's share of cores
    per_session_threads: bool = True  # TF_USE_PER_SESSION_THREADS (see decision 048)
    lines: tuple[str, ...] = field(default=(), compare=False)


def parse_options(config: mc.ModelConfig) -> TfOptions:
    """Triton's ``ModelState::ParseParameters`` (InvalidArgument with its texts)."""
    share = _int(config, "MAX_SESSION_SHARE_COUNT")
    if share is not None and share <= 0:
        raise InvalidArgument(
            "parameter 'MAX_SESSION_SHARE_COUNT' must be positive number for TensorFlow "
            f"model '{config.name}'"
        )
    intra = _int(config, "TF_NUM_INTRA_THREADS")
    if intra is not None and intra < 0:
        raise InvalidArgument(
            "parameter 'TF_NUM_INTRA_THREADS' must be non-negative number for TensorFlow "
            f"model '{config.name}'"
        )
    inter = _int(config, "TF_NUM_INTER_THREADS")
    per_session = _bool(config, "TF_USE_PER_SESSION_THREADS")
    params = config.parameters
    return TfOptions(
        signature_def=params["TF_SIGNATURE_DEF"].string_value
        if "TF_SIGNATURE_DEF" in params
        else "",
        graph_tag=params["TF_GRAPH_TAG"].string_value if "TF_GRAPH_TAG" in params else "",
        intra_op_threads=intra or 0,
        inter_op_threads=max(inter or 0, 0),
        per_session_threads=True if per_session is None else per_session,
    )


@dataclass(frozen=True)
class Chosen:
    key: str
    warnings: tuple[str, ...] = ()


def choose_signature(model: str, keys: Sequence[str], wanted: str) -> Chosen:
    """The SignatureDef key to serve (``TRITONTF_ModelCreateFromSavedModel``)."""
    use = wanted or DEFAULT_SIGNATURE
    if use in keys:
        return Chosen(use)
    if not wanted:
        for key in keys:
            if key not in (_INIT_OP, _TRAIN_OP):
                return Chosen(
                    key,
                    (f"unable to find serving signature '{use}", f"using signature '{key}'"),
                )
    raise Internal(f"unable to load model '{model}', expected '{use}' signature")


def datatype_of(model: str, kind: str, key: str, dtype_name: str) -> str:
    datatype = _DATATYPES.get(dtype_name)
    if datatype is None:
        raise Internal(
            f"unable to process {kind} '{key}' for '{model}', unsupported datatype '{dtype_name}'"
        )
    return datatype


@dataclass(frozen=True)
class SignatureTensor:
    """One entry of the SignatureDef: the config's name (the key), the graph tensor fed or
    fetched, the datatype, and the shape (``None``: unknown rank)."""

    key: str
    tensor: str
    datatype: str
    shape: tuple[int, ...] | None


def tensor_spec(
    entry: SignatureTensor,
    configured: Sequence[mc.ModelInput] | Sequence[mc.ModelOutput],
    batched: bool,
) -> TensorSpec:
    """What the config is checked against. A tensor the SignatureDef gives no shape (unknown
    rank) takes the config's own, as Triton's ValidateTRITONTFModel does."""
    if entry.shape is not None:
        return TensorSpec(entry.key, entry.datatype, entry.shape)
    for tensor in configured:
        if tensor.name == entry.key:
            dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
            return TensorSpec(entry.key, entry.datatype, ((-1,) if batched else ()) + tuple(dims))
    return TensorSpec(entry.key, entry.datatype, ())


def check_config(
    config: mc.ModelConfig, inputs: Sequence[SignatureTensor], outputs: Sequence[SignatureTensor]
) -> None:
    """The config's tensors against the SignatureDef: every name a key of it
    (CheckAllowedModelInput / Output), every datatype the key's. A tensor without a
    datatype is auto-complete's to fill; the shapes, the input count and the controls are
    the shared ``check_against_signature``'s."""
    for kind, configured, entries in (
        ("input", config.input, inputs),
        ("output", config.output, outputs),
    ):
        known = {e.key: e for e in entries}
        for tensor in configured:
            entry = known.get(tensor.name)
            if entry is None:
                raise InvalidArgument(
                    f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: "
                    + ", ".join(sorted(known))
                )
            if tensor.data_type == mc.TYPE_INVALID:
                continue
            expected = mc.DataType.Name(tensor.data_type)
            provided = datatypes.config_type_for(entry.datatype)
            if expected != provided:
                raise InvalidArgument(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{expected} for {kind} '{tensor.name}', model provides {provided}"
                )
