"""The TensorRT plugin's conformance harness (plugin_src/plugin/tests/conformance.cpp), run from pytest.

Builds nothing: it runs the harness CMake built next to libtrt_gn_plugin.so (env TRT_GN_PLUGIN_BUILD_DIR,
else <repo>/build/plugin). The harness drives the plugin through TensorRT's plugin interfaces and, on a
GPU, enqueues it against a float64 reference; without a GPU it runs the host-side checks and exits 77.
Also checks that the plugin's C++ copy of the shared names agrees with trt_gn.spec.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from trt_gn import spec

REPO = Path(__file__).resolve().parents[1]
NAMES_HEADER = REPO / "plugin_src" / "plugin" / "trtGnPluginNames.h"
HARNESS = "trt_gn_plugin_conformance"
SKIP_RETURN_CODE = 77  # the harness: host-side checks passed, no CUDA GPU for the rest

# C++ constant in trtGnPluginNames.h -> the trt_gn.spec value it mirrors
MIRRORED = {
    "kPLUGIN_NAME": spec.PLUGIN_NAME,
    "kPLUGIN_VERSION": spec.PLUGIN_VERSION,
    "kPLUGIN_NAMESPACE": spec.PLUGIN_NAMESPACE,
    "kFIELD_NUM_GROUPS": spec.FIELD_NUM_GROUPS,
    "kFIELD_EPSILON": spec.FIELD_EPSILON,
    "kFIELD_ACTIVATION": spec.FIELD_ACTIVATION,
    "kACTIVATION_NONE": spec.ACTIVATIONS[0],
    "kACTIVATION_SILU": spec.ACTIVATIONS[1],
    "kLEGACY_PLUGIN_NAME": spec.LEGACY_PLUGIN_NAME,
    "kLEGACY_PLUGIN_VERSION": spec.LEGACY_PLUGIN_VERSION,
    "kLEGACY_PLUGIN_NAMESPACE": spec.LEGACY_PLUGIN_NAMESPACE,
    "kLEGACY_FIELD_EPSILON": spec.LEGACY_FIELD_EPSILON,
    "kLEGACY_FIELD_SWISH": spec.LEGACY_FIELD_SWISH,
    "kLEGACY_NUM_GROUPS": spec.LEGACY_NUM_GROUPS,
    "kPLUGIN_LIBRARY": spec.PLUGIN_LIBRARY,
}


def _header_constants() -> dict[str, object]:
    text = NAMES_HEADER.read_text()
    found: dict[str, object] = {}
    for name, value in re.findall(r"constexpr\s+char\s+const\s*\*\s*(\w+)\s*=\s*\"([^\"]*)\"\s*;", text):
        found[name] = value
    for name, value in re.findall(r"constexpr\s+int\s+(\w+)\s*=\s*(-?\d+)\s*;", text):
        found[name] = int(value)
    return found


def test_plugin_names_mirror_spec():
    found = _header_constants()
    assert set(found) == set(MIRRORED), f"constants in {NAMES_HEADER.name} differ from the mirrored set: {sorted(set(found) ^ set(MIRRORED))}"
    drift = {k: (found[k], v) for k, v in MIRRORED.items() if found[k] != v}
    assert not drift, f"{NAMES_HEADER.name} disagrees with trt_gn/spec.py (header, spec): {drift}"
    assert spec.ACTIVATIONS == ("none", "silu"), "the header mirrors exactly two activations, in trtgn_activation_t order"


def _build_dir() -> Path:
    env = os.environ.get("TRT_GN_PLUGIN_BUILD_DIR")
    return Path(env) if env else REPO / "build" / "plugin"


def test_plugin_conformance_harness():
    build = _build_dir()
    harness, library = build / HARNESS, build / spec.PLUGIN_LIBRARY
    missing = [str(p) for p in (harness, library) if not p.is_file()]
    if missing:
        pytest.skip(
            f"plugin not built (no TensorRT headers at configure time, or no build yet): missing {', '.join(missing)}; "
            "configure plugin_src with -DTensorRT_ROOT=<TensorRT 10+> or set TRT_GN_PLUGIN_BUILD_DIR"
        )
    proc = subprocess.run([str(harness), str(library)], capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    summary = re.search(r"conformance: (\d+) passed, (\d+) failed", output)
    assert summary, f"harness printed no summary (exit {proc.returncode}):\n{output[-4000:]}"
    failures = [line for line in output.splitlines() if line.startswith("FAIL")]
    assert proc.returncode in (0, SKIP_RETURN_CODE) and summary.group(2) == "0", (
        f"harness exit {proc.returncode}, {summary.group(0)}:\n" + "\n".join(failures[:50])
    )
    if proc.returncode == SKIP_RETURN_CODE:
        reason = next((line for line in output.splitlines() if line.startswith("SKIP")), "SKIP: no GPU")
        pytest.skip(f"{summary.group(0)} (host-side checks); {reason}")
