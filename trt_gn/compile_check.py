"""torch.compile for the benchmarks, with a check that the compiled code, not eager PyTorch, runs.

Dynamo falls back to eager without an error in some cases: a function that reaches its recompile
limit (8 compiles of one code object by default: one benchmark function over many shapes and
dtypes gets there), a frame it skips, an error with `suppress_errors` set. A benchmark that times
such a fallback reports eager time under a compiled name. So `CheckedCompile` counts the graphs its
backend compiles: the first call must compile at least one, later identical calls none, and
`raised_recompile_limits()` raises the limits and turns hitting one into an error.

Device-agnostic: the same code compiles CPU tensors (the tests) and CUDA tensors (the benchmarks).
"""

from __future__ import annotations

import contextlib
import time

from .errors import EXIT_FAILED, Error

RECOMPILE_LIMIT = 1024


class CompileFallbackError(Error, RuntimeError):
    """A function meant to run compiled ran eager, failed to compile, or recompiled when it should not
    (the measurement failed: exit 1)."""

    exit_code = EXIT_FAILED


def _first_existing(cfg, names: tuple[str, ...]) -> str | None:
    # torch renamed cache_size_limit to recompile_limit (the old names stay as aliases in newer versions)
    return next((n for n in names if hasattr(cfg, n)), None)


@contextlib.contextmanager
def raised_recompile_limits(limit: int = RECOMPILE_LIMIT):
    """Within: dynamo's per-code and accumulated recompile limits at `limit`, hitting one an error
    (not a silent eager fallback), and compile errors raised (suppress_errors off)."""
    import torch._dynamo.config as cfg

    patches = {}
    for names, value in ((("recompile_limit", "cache_size_limit"), limit),
                         (("accumulated_recompile_limit", "accumulated_cache_size_limit"), limit),
                         (("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit"), True),
                         (("suppress_errors",), False)):
        name = _first_existing(cfg, names)
        if name is not None:
            patches[name] = value
    with cfg.patch(patches):
        yield


def graph_break_count() -> int:
    """Graph breaks dynamo has counted in this process so far."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


class CheckedCompile:
    """torch.compile(fn) through a backend that counts the graphs it compiles.

    Call `first_call(*args)` once (it compiles, and calls again to see that the guards hold), then
    call the object like fn; `check_settled()` after the calls that count raises if any of them
    compiled again. `graphs` (compiled so far), `graph_breaks` (during the first call) and
    `compile_s` (wall time of the first call) describe the compile.
    """

    def __init__(self, fn, name: str, *, backend: str = "inductor", fullgraph: bool = True, dynamic: bool = False,
                 mode: str | None = None):
        import torch
        from torch._dynamo import lookup_backend

        self.name = name
        self.graphs = 0
        self.graph_breaks = 0
        self.compile_s = 0.0
        self._settled: int | None = None
        if mode not in (None, "default"):
            # what torch.compile(mode=...) builds: Inductor with the mode's options (reduce-overhead:
            # CUDA graphs); other backends take no mode
            if backend != "inductor":
                raise ValueError(f"mode {mode!r} needs the inductor backend, not {backend!r}")
            inner = torch._TorchCompileInductorWrapper(mode, None, dynamic)
        else:
            inner = lookup_backend(backend)

        def counting_backend(gm, example_inputs):
            self.graphs += 1
            return inner(gm, example_inputs)

        if hasattr(inner, "reset"):  # dynamo's reset() resets the backends it has seen (CUDA graph trees)
            counting_backend.reset = inner.reset

        self._compiled = torch.compile(fn, backend=counting_backend, fullgraph=fullgraph, dynamic=dynamic)

    def first_call(self, *args, **kwargs):
        """Compile on these arguments; raise CompileFallbackError where nothing was compiled (the call
        ran eager), compiling failed, or a second identical call compiled again."""
        if self._settled is not None:
            raise CompileFallbackError(f"{self.name}: first_call() was already made")
        breaks = graph_break_count()
        start = time.perf_counter()
        try:
            out = self._compiled(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - every failure to compile is reported the same way, with its cause
            first = (str(e).strip().splitlines() or [""])[0]
            raise CompileFallbackError(f"{self.name}: torch.compile failed: {type(e).__name__}: {first}") from e
        self.compile_s = time.perf_counter() - start
        self.graph_breaks = graph_break_count() - breaks
        if self.graphs == 0:
            raise CompileFallbackError(
                f"{self.name}: torch.compile compiled no graph, so the call ran eager (a recompile limit reached, "
                "or dynamo skipped the code)")
        compiled = self.graphs
        out = self._compiled(*args, **kwargs)
        if self.graphs != compiled:
            raise CompileFallbackError(f"{self.name}: a second identical call compiled again ({compiled} -> "
                                       f"{self.graphs} graphs): its timings would include compiles")
        self._settled = self.graphs
        return out

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def check_settled(self) -> None:
        """Raise CompileFallbackError unless first_call() ran and nothing compiled since."""
        if self._settled is None:
            raise CompileFallbackError(f"{self.name}: called before first_call()")
        if self.graphs != self._settled:
            raise CompileFallbackError(f"{self.name}: compiled {self.graphs - self._settled} more graph(s) after "
                                       "the first call: those calls' times include compiles or eager fallbacks")
