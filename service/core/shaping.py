"""Output shaping: a model's outputs as the client sees them, from the backend's arrays.

Two steps that need only the model's configuration and the request, no state: undoing
the config's ``reshape`` (the backend computes in the reshaped form, the client sees
``dims``) and the ``classification`` extension. They are kept out of the engine's one
loop thread where they can be: for a request a frontend checked against this very version
(core/checked.py), the engine sends the backend's arrays with their datatypes checked
(``validation.typed_outputs``: a wrong type is the model's failure, counted where the
statistics are) and the frontend shapes them with the version it checked against, labels
included (``ModelSnapshot``); every other response the engine shapes itself with this same
function, so the two cannot differ.
"""

from __future__ import annotations

from ..types import InferRequest, OutputTensor
from .classification import classify_outputs, requested_classes
from .model import ModelVersion

__all__ = ["reshape_outputs", "shape_outputs"]


def reshape_outputs(model: ModelVersion, outputs: list[OutputTensor]) -> list[OutputTensor]:
    """Each output with a config ``reshape`` in its ``dims`` (batch dimension kept).

    Idempotent: an output already in its ``dims`` keeps its shape, so a response the
    engine reshaped (a response cache entry) may be shaped again. The wire bytes, if any,
    stay as they are: a reshape does not move a C-ordered array's bytes."""
    specs = model.outputs
    shaped = outputs
    for i, output in enumerate(outputs):
        spec = specs[output.name]
        if spec.reshape is None:
            continue
        if shaped is outputs:
            shaped = list(outputs)
        array = output.array
        leading = (array.shape[0],) if model.batched else ()
        shaped[i] = OutputTensor(
            output.name, output.datatype, array.reshape(leading + spec.dims), output.wire
        )
    return shaped


def shape_outputs(
    model: ModelVersion, request: InferRequest, outputs: list[OutputTensor]
) -> list[OutputTensor]:
    """``outputs`` (datatypes checked) as the client sees them: reshaped, and replaced by
    their top classes where ``request`` asked for classification."""
    outputs = reshape_outputs(model, outputs)
    if request.outputs and (counts := requested_classes(request)):
        outputs = classify_outputs(model, outputs, counts)
    return outputs
