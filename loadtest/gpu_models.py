"""gpu-bench's models with random weights, built on the spot (no downloads): the micro CNN,
and ResNet-50 and BERT-base in shape and arithmetic (issue 36).

The micro models (an MLP from tests/models.py, the two-layer CNN here) say what the serving
path costs; the realistic ones say what a user's model gets. Their layer counts, widths
and tensor shapes are those of the published architectures (ResNet-50 v1.5 with batch norm
folded into the convolutions, as exporters emit it for inference; BERT-base, sequence 128,
12 layers, 12 heads, hidden 768), so the device time per sample is realistic; the weights
are random, so the outputs mean nothing.

``resnet50(np.float16)`` is the FP16 variant (FP16 input, weights and output), the form
such a model takes after a half-precision conversion.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from models import make_model
from onnx import TensorProto, helper, numpy_helper

#: (blocks, bottleneck width) per ResNet-50 stage; each block's output is 4 x its width.
RESNET50_STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))
BERT_BASE = {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 30522}


class _Graph:
    """Nodes and initializers of one graph being built, with seeded random weights."""

    def __init__(self, dtype: Any, seed: int) -> None:
        self.dtype = np.dtype(dtype)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def weight(self, shape: tuple[int, ...], fan_in: int, scale: float = 1.0) -> str:
        data = self.rng.standard_normal(shape, dtype=np.float32) * (scale / np.sqrt(fan_in))
        return self.const(data)

    def const(self, data: Any) -> str:
        name = self.name("w")
        array = np.asarray(data)
        if array.dtype.kind == "f":
            array = array.astype(self.dtype)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def cnn_model(channels: int = 64, size: int = 64, seed: int = 0) -> onnx.ModelProto:
    """The micro CNN: Conv 3->c/2 (3x3) + Relu, Conv c/2->c (3x3, stride 2) + Relu, global
    pool, MatMul c->10. INPUT0 [batch, 3, size, size] -> OUTPUT0 [batch, 10], FP32."""
    g = _Graph(np.float32, seed)
    half = channels // 2
    x = g.op("Conv", ["INPUT0", g.weight((half, 3, 3, 3), 27)], pads=[1, 1, 1, 1])
    x = g.op("Relu", [x])
    w2 = g.weight((channels, half, 3, 3), half * 9)
    x = g.op("Relu", [g.op("Conv", [x, w2], pads=[1, 1, 1, 1], strides=[2, 2])])
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    g.nodes.append(
        helper.make_node("MatMul", [pooled, g.weight((channels, 10), channels)], ["OUTPUT0"])
    )
    graph = helper.make_graph(
        g.nodes,
        "cnn",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 10])],
        g.inits,
    )
    return make_model(graph)


def resnet50(dtype: Any = np.float32, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-50 v1.5: INPUT0 [batch, 3, size, size] -> OUTPUT0 [batch, classes] (logits)."""
    g = _Graph(dtype, seed=0)

    def conv(x: str, cin: int, cout: int, k: int, stride: int = 1, relu: bool = True) -> str:
        w = g.weight((cout, cin, k, k), cin * k * k, np.sqrt(2.0))
        b = g.const(np.zeros(cout, np.float32))
        pad = k // 2
        y = g.op("Conv", [x, w, b], strides=[stride, stride], pads=[pad] * 4)
        return g.op("Relu", [y]) if relu else y

    x = conv("INPUT0", 3, 64, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (blocks, width) in enumerate(RESNET50_STAGES):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            y = conv(x, cin, width, 1)
            y = conv(y, width, width, 3, stride=stride)  # v1.5: the stride on the 3x3
            y = conv(y, width, width * 4, 1, relu=False)
            short = conv(x, cin, width * 4, 1, stride=stride, relu=False) if block == 0 else x
            x = g.op("Relu", [g.op("Add", [y, short])])
            cin = width * 4
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    fc = g.weight((cin, classes), cin)
    logits = g.op("Add", [g.op("MatMul", [pooled, fc]), g.const(np.zeros(classes, np.float32))])
    g.nodes.append(helper.make_node("Identity", [logits], ["OUTPUT0"]))
    elem = TensorProto.FLOAT16 if g.dtype == np.float16 else TensorProto.FLOAT
    graph = helper.make_graph(
        g.nodes,
        f"resnet50_{g.dtype.name}",
        [helper.make_tensor_value_info("INPUT0", elem, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("OUTPUT0", elem, ["batch", classes])],
        g.inits,
    )
    return make_model(graph)


def bert_base(sequence: int = 128, **shape: int) -> onnx.ModelProto:
    """A BERT-base encoder: INPUT_IDS INT64 [batch, sequence] -> OUTPUT0 FP32 [batch, hidden]
    (the pooled [CLS] vector: tanh of a dense layer over the first token's state).

    Every token attends to every token (no padding mask: the load sends full sequences).
    ``shape`` overrides BERT_BASE's sizes (tests build a small one).
    """
    dims = {**BERT_BASE, **shape}
    hidden, heads, ffn = dims["hidden"], dims["heads"], dims["ffn"]
    head = hidden // heads
    g = _Graph(np.float32, seed=1)

    def dense(x: str, cin: int, cout: int) -> str:
        return g.op(
            "Add", [g.op("MatMul", [x, g.weight((cin, cout), cin)]), g.const(np.zeros(cout))]
        )

    def layer_norm(x: str) -> str:
        scale, bias = g.const(np.ones(hidden)), g.const(np.zeros(hidden))
        return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-12)

    def split_heads(x: str) -> str:  # [B, S, H] -> [B, heads, S, head]
        shaped = g.op("Reshape", [x, g.const(np.array([0, 0, heads, head], np.int64))])
        return g.op("Transpose", [shaped], perm=[0, 2, 1, 3])

    table = g.weight((dims["vocab"], hidden), 1, 0.02)
    positions = g.weight((sequence, hidden), 1, 0.02)
    x = layer_norm(g.op("Add", [g.op("Gather", [table, "INPUT_IDS"], axis=0), positions]))
    scale = g.const(np.array(1.0 / np.sqrt(head), np.float32))
    half, one = g.const(np.array(0.5, np.float32)), g.const(np.array(1.0, np.float32))
    root2 = g.const(np.array(np.sqrt(2.0), np.float32))
    merge = g.const(np.array([0, 0, hidden], np.int64))
    for _ in range(dims["layers"]):
        q, k, v = (split_heads(dense(x, hidden, hidden)) for _ in range(3))
        kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = g.op("Mul", [g.op("MatMul", [q, kt]), scale])
        context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        context = g.op("Transpose", [context], perm=[0, 2, 1, 3])
        attended = dense(g.op("Reshape", [context, merge]), hidden, hidden)
        x = layer_norm(g.op("Add", [x, attended]))
        up = dense(x, hidden, ffn)  # GELU, erf form: 0.5 x (1 + erf(x / sqrt 2))
        erf = g.op("Erf", [g.op("Div", [up, root2])])
        gelu = g.op("Mul", [g.op("Mul", [up, half]), g.op("Add", [erf, one])])
        x = layer_norm(g.op("Add", [x, dense(gelu, ffn, hidden)]))
    first = g.op("Gather", [x, g.const(np.array(0, np.int64))], axis=1)
    pooled = g.op("Tanh", [dense(first, hidden, hidden)])
    g.nodes.append(helper.make_node("Identity", [pooled], ["OUTPUT0"]))
    graph = helper.make_graph(
        g.nodes,
        "bert_base",
        [helper.make_tensor_value_info("INPUT_IDS", TensorProto.INT64, ["batch", sequence])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", hidden])],
        g.inits,
    )
    return make_model(graph)
