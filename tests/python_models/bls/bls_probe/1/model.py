"""BLS probe: CASE selects one BLS call (or misuse) and TEXT answers, as JSON, what the
model saw: each response's outputs or error, or the exception raised. The answers of the
real Triton 2.51 for each case are in ``triton_2.51.json`` beside this model."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def describe(r):
    if r.has_error():
        return {"error": r.error().message()}
    out = {}
    for t in r.output_tensors():
        a = t.as_numpy()
        out[t.name()] = [
            str(a.dtype),
            list(a.shape),
            [x.decode() if isinstance(x, bytes) else x for x in a.reshape(-1).tolist()],
        ]
    return {"outputs": out}


def t(name, arr):
    return pb_utils.Tensor(name, arr)


def run(case):
    f = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    if case == 1:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f), t("INPUT1", f)],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
            ).exec()
        )
    if case == 2:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_nope", inputs=[t("INPUT0", f)], requested_output_names=["OUTPUT0"]
            ).exec()
        )
    if case == 3:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_repeat",
                inputs=[t("IN", np.array([3], np.int32))],
                requested_output_names=["OUT"],
            ).exec()
        )
    if case == 4:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f[:3]), t("INPUT1", f[:3])],
                requested_output_names=["OUTPUT0"],
            ).exec()
        )
    if case == 5:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_failing",
                inputs=[t("INPUT0", f)],
                requested_output_names=["OUTPUT0"],
            ).exec()
        )
    if case == 6:
        return [
            describe(r)
            for r in pb_utils.InferenceRequest(
                model_name="bls_repeat",
                inputs=[t("IN", np.array([3], np.int32))],
                requested_output_names=["OUT"],
            ).exec(decoupled=True)
        ]
    if case == 7:
        return [
            describe(r)
            for r in pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f), t("INPUT1", f)],
                requested_output_names=["OUTPUT0"],
            ).exec(decoupled=True)
        ]
    if case == 8:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f), t("INPUT1", f)],
                requested_output_names=["OUTPUT1"],
            ).exec()
        )
    if case == 9:
        req = pb_utils.InferenceRequest(
            model_name="bls_echo",
            inputs=[t("INPUT0", f)],
            requested_output_names=["PARAMS", "TIMEOUT", "CORR", "FLAGS", "RID"],
            parameters={"a": 1, "b": "x", "c": True},
            correlation_id=0,
            flags=0,
            timeout=11000,
            request_id="rq",
        )
        return [req.parameters(), describe(req.exec())]
    if case == 10:
        try:
            pb_utils.InferenceRequest(
                model_name="bls_echo",
                inputs=[t("INPUT0", f)],
                requested_output_names=[],
                parameters={"a": 1.5},
            )
            return "no error"
        except Exception as e:
            return [type(e).__name__, str(e)]
    if case == 11:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd", inputs=[t("INPUT0", f)], requested_output_names=["OUTPUT0"]
            ).exec()
        )
    if case == 12:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f.astype(np.int32)), t("INPUT1", f)],
                requested_output_names=["OUTPUT0"],
            ).exec()
        )
    if case == 13:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f), t("INPUT1", f)],
                requested_output_names=["NOPE"],
            ).exec()
        )
    if case == 14:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                inputs=[t("INPUT0", f), t("INPUT1", f)],
                requested_output_names=[],
            ).exec()
        )
    if case == 15:
        return describe(
            pb_utils.InferenceRequest(
                model_name="bls_pyadd",
                model_version=7,
                inputs=[t("INPUT0", f), t("INPUT1", f)],
                requested_output_names=["OUTPUT0"],
            ).exec()
        )
    if case == 16:
        return [
            describe(r)
            for r in pb_utils.InferenceRequest(
                model_name="bls_repeat",
                inputs=[t("IN", np.array([0], np.int32))],
                requested_output_names=["OUT"],
            ).exec(decoupled=True)
        ]
    if case == 17:
        try:
            pb_utils.InferenceRequest(
                model_name="bls_echo",
                inputs=[t("INPUT0", f)],
                requested_output_names=[],
                correlation_id=1.5,
            )
            return "no error"
        except Exception as e:
            return [type(e).__name__, str(e)]
    if case == 18:
        req = pb_utils.InferenceRequest(
            model_name="bls_echo", inputs=[t("INPUT0", f)], requested_output_names=["PARAMS"]
        )
        return [
            req.parameters(),
            req.request_id(),
            req.correlation_id(),
            req.flags(),
            req.timeout(),
            sorted(req.requested_output_names()),
            req.model_name() if hasattr(req, "model_name") else "none",
        ]
    if case == 19:
        big = np.arange(300_000, dtype=np.float32)  # 1.2 MB each way: shared regions
        got = pb_utils.InferenceRequest(
            model_name="bls_identity", inputs=[t("INPUT0", big)], requested_output_names=["OUTPUT0"]
        ).exec()
        out = pb_utils.get_output_tensor_by_name(got, "OUTPUT0").as_numpy()
        return [len(out), bool(np.array_equal(out, big))]
    return "?"


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            case = int(pb_utils.get_input_tensor_by_name(r, "CASE").as_numpy()[0])
            out.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor(
                            "TEXT", np.array([json.dumps(run(case)).encode()], np.object_)
                        )
                    ]
                )
            )
        return out
