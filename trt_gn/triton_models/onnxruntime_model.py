"""Triton Python backend model written by `trt-gn triton --backend python` (as <version>/model.py):
serves the model.onnx beside it, a trt_gn fused model that onnxruntime runs through the trt_gn
node's model-local function.

Where it runs is the instance's kind, as the config declares it: KIND_CPU instances use
onnxruntime's CPU provider; KIND_GPU instances use its CUDA provider on the instance's own device
(``model_instance_device_id``), and fail to load, saying why, where this onnxruntime has no CUDA
provider: a GPU instance never runs on the CPU unasked.

Under batching, a tensor the model shapes ``[batch]`` is ``dims: [ 1 ]`` with
``reshape: { shape: [ ] }`` in the config: requests carry ``[batch, 1]``, and the Python backend
hands the model ``[batch]`` (and its ``[batch]`` outputs back as ``[batch, 1]``). Each request runs
as sent (its batch is dimension 0 of its tensors); an error answers that request.
"""

import json
import os

import numpy as np

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"


class InstanceError(RuntimeError):
    """The instance cannot run where its config puts it."""


def session_providers(kind: str, device_id: int, available) -> list:
    """onnxruntime providers for an instance of ``kind`` ("CPU"/"GPU") on ``device_id``."""
    if kind == "CPU":
        return [CPU]
    if kind == "GPU":
        if CUDA not in available:
            raise InstanceError(f"a KIND_GPU instance needs onnxruntime's {CUDA}, which this server's onnxruntime "
                                f"does not have (it has {', '.join(available)}): install onnxruntime-gpu in the "
                                f"server's Python, or write the repository without --gpus (KIND_CPU)")
        # CPU stays listed for the nodes the CUDA provider has no kernel for (onnxruntime's own placement).
        return [(CUDA, {"device_id": int(device_id)}), CPU]
    raise InstanceError(f"instance kind {kind!r} is not supported: use KIND_CPU or KIND_GPU")


class TritonPythonModel:
    def initialize(self, args):
        import onnxruntime as ort

        folder = os.path.join(args["model_repository"], args["model_version"])
        config = json.loads(args["model_config"])
        kind, device = args["model_instance_kind"], int(args.get("model_instance_device_id", 0))
        providers = session_providers(kind, device, ort.get_available_providers())
        self.session = ort.InferenceSession(os.path.join(folder, "model.onnx"), providers=providers)
        if kind == "GPU" and CUDA not in self.session.get_providers():
            # onnxruntime goes on with the CPU when its CUDA provider fails to start: refuse that.
            raise InstanceError(f"onnxruntime could not start {CUDA} on device {device} "
                                f"(the session runs {', '.join(self.session.get_providers())})")
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        import triton_python_backend_utils as pb_utils

        responses = []
        for request in requests:
            try:
                feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
                results = self.session.run(self.outputs, feeds)
                tensors = [pb_utils.Tensor(name, np.ascontiguousarray(value))
                           for name, value in zip(self.outputs, results)]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as exc:  # one bad request must not take the model down
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses
