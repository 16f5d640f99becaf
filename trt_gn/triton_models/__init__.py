"""Model files that `trt-gn triton` copies into a Triton model repository as ``model.py``.

Each runs inside Triton's Python backend stub, whose interpreter sees neither PYTHONPATH nor the
environment that wrote the repository: what it needs (the trt_gn package, the kernels library,
the folders holding torch and diffusers) is named in the model's config.pbtxt parameters.
"""
