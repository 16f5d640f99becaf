"""The pipeline's report: report.json (every result, for tools) and report.md (the same for people),
written into the staging folder as the last step."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from .options import STEP_VALIDATE, Step


def write_report(stage: Path, report: dict, steps: list[Step], validation_skipped, started: float) -> None:
    """Complete ``report`` (steps, skipped, verdict, seconds since ``started``, files) and write
    report.json and report.md into ``stage``."""
    report["steps"] = [dataclasses.asdict(s) for s in steps]
    report["skipped"] = [dict(step=s.name, reason=s.detail) for s in steps if s.status == "skipped"]
    report["skipped"] += [dict(step=STEP_VALIDATE, reason=s) for s in validation_skipped]
    report["passed"] = all(s.status != "failed" for s in steps)
    report["seconds"] = round(time.perf_counter() - started, 2)
    report["files"] = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file()) + [
        "report.md", "report.json"]
    (stage / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (stage / "report.md").write_text(render_markdown(report))


def render_markdown(report: dict) -> str:
    """report.md: the verdict, the steps, what was skipped and every result, from the report dict."""
    env = report["environment"]
    fusion = report["fusion"]
    verdict = "PASSED" if report["passed"] else "FAILED"
    steps_skipped = sum(s["status"] == "skipped" for s in report["steps"])
    cases_skipped = len(report["skipped"]) - steps_skipped  # validation cases the runtime could not run
    skipped = f"{steps_skipped} step(s) skipped" + (f", {cases_skipped} validation case(s) skipped" if cases_skipped else "")
    lines = [
        f"# trt-gn pipeline: {report['model']}",
        "",
        f"**{verdict}**: fused {fusion['fused']} of {fusion['group_norms']} GroupNorms "
        f"({fusion['with_silu']} with SiLU); onnxruntime validation "
        f"{'passed' if report['validation']['passed'] else 'FAILED'}; {skipped}; "
        f"{report['seconds']:.1f} s.",
        "",
        f"- model: `{report['model']}` ({report['kind']}), weights: {report['weights']}, seed {report['seed']}",
        f"- ONNX: fp32, opset {report['opset']}; engine precision: {report['precision']}",
        f"- trt_gn {report['trt_gn_version']}, Python {env['python']}, torch {env['torch']}, onnx {env['onnx']}, "
        f"onnxruntime {env['onnxruntime']}, TensorRT {env['tensorrt'] or 'not installed'}, "
        f"TensorRT-RTX {env.get('tensorrt_rtx') or 'not used'}, GPU {env['gpu'] or 'none'}",
        f"- created {report['created']}",
        "",
        "## Steps",
        "",
        "| step | status | seconds | detail |",
        "|---|---|---:|---|",
    ]
    for s in report["steps"]:
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.2f} | {_cell(s['detail'])} |")
    lines += ["", "## Skipped", ""]
    lines += [f"- {s['step']}: {s['reason']}" for s in report["skipped"]] or ["- nothing"]
    lines += ["", "## Fusion", "", "```", fusion["summary"], "```", ""]
    lines += ["| node | pattern | C | groups | eps | activation |", "|---|---|---:|---:|---:|---|"]
    for f in fusion["nodes"]:
        lines.append(f"| {f['node']} | {f['pattern']} | {f['channels']} | {f['num_groups']} | {f['epsilon']:g} | {f['activation']} |")
    lines += ["", "## Validation: original vs fused model in onnxruntime", "",
              "| provider | input shapes | output | dtype | max abs | max rel | tolerance (atol + rtol*abs(ref)) | result |",
              "|---|---|---|---|---:|---:|---|---|"]
    for c in report["validation"]["comparisons"]:
        lines.append(f"| {c['provider']} | {c['shape_case']} | {c['output']} | {c['dtype']} | {c['max_abs']:.3e} | "
                     f"{c['max_rel']:.3e} | {c['atol']:g} + {c['rtol']:g} | {'PASS' if c['passed'] else 'FAIL'} |")
    kc = report["kernel_check"]
    lines += ["", "## Kernel check: CUDA op vs float64 reference", ""]
    if kc is None:
        lines.append("Not run (see Skipped).")
    else:
        lines += [f"Device: {kc['device']}. Worst case per shape and dtype over NHWC/NCHW x none/silu.", "",
                  "| shape (N,C,H,W) | groups | eps | dtype | max abs | max rel | cases passed |",
                  "|---|---:|---:|---|---:|---:|---|"]
        groups: dict[tuple, list] = {}
        for r in kc["rows"]:
            groups.setdefault((tuple(r["shape"]), r["num_groups"], r["eps"], r["dtype"]), []).append(r)
        for (shape, g, eps, dtype), rows in groups.items():
            lines.append(f"| {'x'.join(map(str, shape))} | {g} | {eps:g} | {dtype} | {max(r['max_abs'] for r in rows):.3e} | "
                         f"{max(r['max_rel'] for r in rows):.3e} | {sum(r['passed'] for r in rows)}/{len(rows)} |")
    lines += ["", "## TensorRT", ""]
    if report["engine"] is None and report["tensorrt_comparison"] is None:
        lines.append("No engine was built (see Steps and Skipped).")
    if report["engine"] is not None:
        e = report["engine"]
        builder = "TensorRT-RTX" if e.get("builder") == "tensorrt-rtx" else "TensorRT"
        targets = f", for compute capability {', '.join(e['targets'])}" if e.get("targets") else ""
        lines.append(f"- engine `{e['plan']}`: {e['bytes'] / 2**20:.1f} MiB, {builder} {e['tensorrt']}, "
                     f"{e['precision']}{targets}, built in {e['seconds']:.1f} s, {e.get('plugin_layers')}/"
                     f"{e.get('plugin_nodes')} trt_gn nodes as plugin layers, plugin {e['plugin_library']}")
    if report["tensorrt_comparison"] is not None:
        t = report["tensorrt_comparison"]
        lines.append(f"- polygraphy (TensorRT vs onnxruntime): {'PASS' if t['passed'] else 'FAIL'}, {t['detail']} "
                     f"(log: `{t['log']}`)")
    if report["triton"] is not None:
        lines.append(f"- Triton model repository `{report['triton']['model_dir']}`; serve it with "
                     f"`{report['triton']['server_command']}`")
    lines += ["", "## Files", ""] + [f"- `{f}`" for f in report["files"]] + [""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
