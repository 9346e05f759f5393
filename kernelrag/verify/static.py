"""Static checks of a candidate's source, before any of it runs.

Each rule reports ``Finding(rule, line, message, blocking)``. A ``StaticPolicy`` turns
rules off or down to warnings (tests use it to prove the run-time layer catches what
the static layer would have). Rules:

  try-except        any try/except: a fallback to PyTorch hides a broken kernel
  inherits-model    ModelNew must subclass nn.Module directly (not Model, not a torch module)
  torch-op          PyTorch compute on the hot path (ModelNew.forward and what it calls):
                    torch.* ops, F.*, torch.ops.*, tensor methods such as x.softmax(),
                    the @ operator, calling an nn submodule; cheap glue is allowed
  concurrency       threads, processes, asyncio: work the timer cannot see
  side-stream       CUDA streams other than the current one
  monkeypatch       assigning to (or setattr on) anything inside an imported module,
                    e.g. torch.allclose = ..., time.perf_counter = ...; global-state setters
  tensor-subclass   torch.Tensor subclasses, __torch_function__/__torch_dispatch__, modes
  file-io           open(), Path/numpy/torch file reading and writing
  forbidden-import  any import outside the allowed set (os, sys, subprocess, pickle, ctypes, gc...)
  introspection     eval/exec/globals/dynamic getattr, dunder attributes, torch private APIs
  module-reach      sys/os/builtins/subprocess/socket/ctypes/importlib/gc/inspect reached through
                    another module (warnings.sys, torch.os, numpy.ctypeslib; see ``escapes``)
  native-code       in load_inline sources: process, file, network, dynamic-loading and
                    environment calls; native code loaded any other way; C++ without a CUDA kernel
  result-cache      (warning) module-level containers mutated in functions, caches
                    keyed by data_ptr()/id() (subscripts, or `global` state next to them)
  no-kernel         no @triton.jit kernel (or load_inline __global__ kernel) reached from forward
  unused-kernel     (warning) a kernel defined but never launched
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kernelrag.verify import escapes
from kernelrag.verify.callgraph import SourceIndex
from kernelrag.verify.verdict import Finding

ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "math", "functools", "typing", "dataclasses", "itertools", "operator",
    "collections", "numbers", "enum", "abc", "__future__", "warnings", "numpy",
})
BANNED_SUBMODULES = ("torch._", "torch.multiprocessing", "torch.distributed", "torch.overrides",
                     "torch.utils._python_dispatch", "torch.testing", "torch.hub")

# torch.<name>(...) calls that are glue, not compute (allocation, views, metadata)
GLUE_TORCH = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "tensor", "as_tensor", "is_tensor", "is_floating_point", "numel", "device",
    "Size", "finfo", "iinfo", "get_default_dtype", "promote_types", "result_type", "no_grad",
    "inference_mode", "broadcast_shapes", "reshape", "flatten", "transpose", "permute", "squeeze",
    "unsqueeze", "narrow", "as_strided", "split", "chunk", "unbind", "view_as_real", "view_as_complex",
    "cuda.current_device", "cuda.current_stream", "cuda.get_device_properties", "cuda.device_count",
    "cuda.is_available", "cuda.synchronize", "cuda.device", "cuda.get_device_capability",
    "cuda.get_device_name", "get_device", "is_grad_enabled", "compiler.is_compiling",
})
# tensor methods that compute (x.softmax(), x.sum(), ...); trailing "_" variants too
OP_METHODS = frozenset("""
abs absolute acos acosh add addbmm addcdiv addcmul addmm addmv all amax amin any argmax argmin argsort
asin atan atan2 baddbmm bmm ceil clamp clamp_max clamp_min clip cos cosh cross cummax cummin cumprod
cumsum diag diff digamma div divide dot eq erf erfc erfinv exp exp2 expm1 floor floor_divide fmod frac
gather ge gelu gt hardtanh index_add index_copy index_fill index_put index_reduce index_select inner
isclose kron kthvalue le lerp lgamma log log10 log1p log2 log_softmax logaddexp logcumsumexp logical_and
logical_not logical_or logsumexp lt masked_fill masked_scatter masked_select matmul max maximum mean
median min minimum mm mode mul multiply mv nan_to_num nanmean nanmedian nansum ne neg negative norm
outer pow prod put reciprocal relu remainder renorm repeat_interleave roll round rsqrt scatter
scatter_add scatter_reduce sgn sigmoid sign silu sin sinh softmax sort sqrt square std sub subtract sum
take tan tanh tensordot topk trace tril triu true_divide trunc var where xlogy einsum conv1d conv2d
""".split())
GLOBAL_STATE_CALLS = ("torch.use_deterministic_algorithms", "torch.set_float32_matmul_precision",
                      "torch.set_flush_denormal", "torch.set_default_dtype", "torch.set_default_device",
                      "torch.set_grad_enabled", "torch.backends", "torch.utils.deterministic",
                      "torch.cuda.set_sync_debug_mode", "triton.knobs", "triton.runtime.driver.set_active")
STREAM_NAMES = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.ExternalStream",
                "torch.Stream", "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.graph",
                "torch.cuda.StreamContext", "torch.cuda.streams")
CONCURRENCY = ("threading", "_thread", "multiprocessing", "asyncio", "concurrent", "queue", "sched")
FILE_IO_NAMES = ("open", "io.", "pathlib", "torch.load", "torch.save", "torch.from_file",
                 "numpy.load", "numpy.save", "numpy.fromfile", "numpy.memmap", "numpy.loadtxt",
                 "numpy.savetxt", "numpy.genfromtxt", "torch.utils.cpp_extension.load", "shutil", "tempfile")
FILE_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "tofile"}
INTROSPECTION_CALLS = {"eval", "exec", "compile", "globals", "locals", "vars", "__import__", "breakpoint",
                       "input"}
SAFE_DUNDERS = {"__init__", "__name__", "__qualname__", "__doc__", "__future__"}
TRY_NODES = tuple(getattr(ast, n) for n in ("Try", "TryStar") if hasattr(ast, n))
COMPUTE_NAMESPACES = ("torch.nn.functional.", "torch.ops.", "torch.special.", "torch.linalg.", "torch.fft.",
                      "torch._C.")


def is_torch_compute(q: str) -> bool:
    """True for a PyTorch function that computes (torch.softmax, F.relu, torch.ops.aten.mm...)."""
    if q.startswith(COMPUTE_NAMESPACES):
        return True
    parts = q.split(".")
    return q.startswith("torch.") and parts[-1].rstrip("_") in OP_METHODS


@dataclass(frozen=True)
class StaticPolicy:
    disabled: frozenset[str] = frozenset()          # rules not checked at all
    warn_only: frozenset[str] = frozenset()         # rules reported as warnings, not blocking
    allowed_imports: frozenset[str] = ALLOWED_IMPORTS
    glue_torch_calls: frozenset[str] = GLUE_TORCH


@dataclass
class StaticReport:
    findings: list[Finding] = field(default_factory=list)
    syntax_error: str | None = None
    has_model_new: bool = False
    uses_cuda_extension: bool = False                # load_inline with a __global__ kernel
    uses_cpp_extension: bool = False                 # any load_inline: C++ is compiled at import
    uses_tl_dot: bool = False
    kernels: list[str] = field(default_factory=list)

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.blocking]


WARNING_RULES = {"result-cache", "unused-kernel"}


def check_source(source: str, policy: StaticPolicy | None = None) -> StaticReport:
    """Run every static rule over ``source``; never raises on bad code."""
    policy = policy or StaticPolicy()
    report = StaticReport()
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        report.syntax_error = f"line {exc.lineno}: {exc.msg}: {(exc.text or '').strip()}"
        return report
    idx = SourceIndex(tree)
    checker = _Checker(idx, policy, report)
    checker.run()
    report.findings.sort(key=lambda f: (not f.blocking, f.line or 0))
    return report


class _Checker:
    def __init__(self, idx: SourceIndex, policy: StaticPolicy, report: StaticReport):
        self.idx, self.policy, self.report = idx, policy, report

    def add(self, rule: str, node: ast.AST | int | None, message: str) -> None:
        if rule in self.policy.disabled:
            return
        blocking = rule not in WARNING_RULES and rule not in self.policy.warn_only
        line = node if isinstance(node, int) else getattr(node, "lineno", None)
        if any(f.rule == rule and f.line == line and f.message == message for f in self.report.findings):
            return
        self.report.findings.append(Finding(rule, line, message, blocking))

    def run(self) -> None:
        idx, report = self.idx, self.report
        report.has_model_new = idx.model_new() is not None
        report.kernels = sorted(idx.kernels)
        self.parent: dict[int, ast.AST] = {}
        for node in ast.walk(idx.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
        for node in ast.walk(idx.tree):
            self._anywhere(node)
        self._model_new_bases()
        self._hot_path()
        self._caches()

    # ------------------------------------------------------------ everywhere
    def _anywhere(self, node: ast.AST) -> None:
        idx = self.idx
        if isinstance(node, (ast.Attribute, ast.Import, ast.ImportFrom)):
            resolved = idx.resolve(node) if isinstance(node, ast.Attribute) else None
            for where, message in escapes.module_reach(node, resolved):
                self.add("module-reach", where, message)
        if isinstance(node, TRY_NODES):
            self.add("try-except", node, "try/except is not allowed: a fallback hides a failing kernel; "
                                         "let errors propagate")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self._import(node)
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                q = idx.resolve(base) or ""
                if q in {"torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase"} or q.startswith(
                        ("torch.overrides", "torch.utils._python_dispatch")):
                    self.add("tensor-subclass", node, f"class {node.name} subclasses {q}: outputs must be "
                                                      "plain torch.Tensor computed by the kernel")
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in {"__torch_function__", "__torch_dispatch__"}:
                    self.add("tensor-subclass", item, f"{item.name} defined in {node.name}: deferred or "
                                                      "intercepted tensor work is not allowed")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in _flat_targets(targets):
                while isinstance(t, ast.Subscript):
                    t = t.value
                if isinstance(t, ast.Attribute) and idx.is_module_ref(t.value):
                    self.add("monkeypatch", node, f"assignment to {idx.resolve(t)}: changing a library "
                                                  "(timers, comparisons, sync, flags) is not allowed")
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Attribute):
            q = idx.resolve(node) or ""
            if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in SAFE_DUNDERS:
                self.add("introspection", node, f"access to {node.attr} is not allowed")
            elif q.startswith("torch") and any(p.startswith("_") for p in q.split(".")):
                self.add("introspection", node, f"{q}: private torch internals are not allowed")
            self._passed_around(node, q)
            if q.startswith(STREAM_NAMES):
                self.add("side-stream", node, f"{q}: work must run on the current stream, where it is timed")
            if q.startswith(CONCURRENCY) or q.startswith("torch.multiprocessing"):
                self.add("concurrency", node, f"{q}: threads and processes are not allowed")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self._passed_around(node, idx.resolve(node) or "")

    def _passed_around(self, node: ast.AST, q: str) -> None:
        """A PyTorch compute function used as a value (partial(torch.softmax), map(F.relu, ...))."""
        if not is_torch_compute(q):
            return
        parent = self.parent.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node or isinstance(parent, ast.Attribute):
            return                                  # a direct call (hot-path rule) or a longer chain
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            return                                  # an alias: followed by name resolution
        self.add("torch-op", node, f"{q} used as a value: PyTorch must not compute any part of the result")

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if isinstance(node, ast.ImportFrom) and node.level:
            self.add("forbidden-import", node, "relative imports are not allowed")
            return
        for name in names:
            root = name.split(".")[0]
            if root in CONCURRENCY:
                self.add("concurrency", node, f"import {name}: threads, processes and event loops are not allowed")
            elif root not in self.policy.allowed_imports:
                self.add("forbidden-import", node,
                         f"import {name} is not allowed; allowed modules: {', '.join(sorted(self.policy.allowed_imports))}")
            elif name.startswith(BANNED_SUBMODULES) or (isinstance(node, ast.ImportFrom) and any(
                    f"{name}.{a.name}".startswith(BANNED_SUBMODULES) or a.name.startswith("_")
                    for a in node.names)):
                self.add("forbidden-import", node, f"import from {name}: torch internals, overrides, testing "
                                                   "and multiprocessing are not allowed")

    def _call(self, node: ast.Call) -> None:
        idx = self.idx
        q = idx.resolve(node.func) or ""
        if q in {"setattr", "delattr"} and node.args:
            if idx.is_module_ref(node.args[0]):
                self.add("monkeypatch", node, f"{q} on {idx.resolve(node.args[0])} is not allowed")
            elif len(node.args) > 1 and not isinstance(node.args[1], ast.Constant):
                self.add("introspection", node, f"{q} with a computed attribute name is not allowed")
        elif q == "getattr" and len(node.args) > 1 and (
                not isinstance(node.args[1], ast.Constant) or idx.is_module_ref(node.args[0])):
            self.add("introspection", node, "getattr on a module, or with a computed attribute name, is not allowed")
        elif q in INTROSPECTION_CALLS:
            self.add("introspection" if q != "input" else "file-io", node, f"{q}() is not allowed")
        if q.startswith(GLOBAL_STATE_CALLS):
            self.add("monkeypatch", node, f"{q}(): changing global torch/triton state is not allowed")
        if q == "open" or q.startswith(FILE_IO_NAMES):
            if not q.startswith("torch.utils.cpp_extension.load_inline"):
                self.add("file-io", node, f"{q}(): file and I/O access is not allowed")
        if isinstance(node.func, ast.Attribute) and node.func.attr in FILE_METHODS:
            self.add("file-io", node, f".{node.func.attr}(): file access is not allowed")
        loader = escapes.extension_call(q)
        if loader:
            self.add("native-code", node, loader)
        if q.endswith("cpp_extension.load_inline"):
            self._load_inline(node)
        if q in {"triton.language.dot", "triton.language.dot_scaled"} or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "dot" and q.startswith("triton")):
            self.report.uses_tl_dot = True

    def _load_inline(self, node: ast.Call) -> None:
        self.report.uses_cpp_extension = True
        parts = [kw.value for kw in node.keywords if kw.arg in {"cuda_sources", "cpp_sources"}] + node.args[1:3]
        strings = [c for part in parts for c in escapes.source_strings(part, self.idx.tree)]
        for line, message in escapes.native_calls(strings):
            self.add("native-code", line, message)
        if any("__global__" in c.value for c in strings):
            self.report.uses_cuda_extension = True
        else:
            self.add("native-code", node, "load_inline without a __global__ CUDA kernel: C++ is allowed only to "
                                          "launch a CUDA kernel")

    def _strings(self, node: ast.AST) -> str:
        """Text of string constants in ``node``, following module-level names bound to strings."""
        out = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                out.append(sub.value)
            elif isinstance(sub, ast.Name):
                for top in self.idx.tree.body:
                    if isinstance(top, ast.Assign) and any(isinstance(t, ast.Name) and t.id == sub.id
                                                           for t in top.targets):
                        out.append(self._strings(top.value))
        return " ".join(out)

    # ------------------------------------------------------------ ModelNew
    def _model_new_bases(self) -> None:
        cls = self.idx.model_new()
        if cls is None:
            return
        for base in cls.bases:
            q = self.idx.resolve(base)
            if q not in {"torch.nn.Module", "torch.nn.modules.module.Module"}:
                name = q or ast.unparse(base)
                self.add("inherits-model", cls, f"ModelNew subclasses {name}: it must subclass nn.Module "
                                                "directly and compute with its own kernels")
        for name, node in self.idx.classes.items():
            if name != "ModelNew" and any(isinstance(b, ast.Name) and b.id == "Model" for b in node.bases):
                self.add("inherits-model", node, f"class {name} subclasses Model: the reference must not be reused")

    # ------------------------------------------------------------ hot path
    def _hot_path(self) -> None:
        idx = self.idx
        cls = idx.model_new()
        if cls is None:
            return
        path = idx.hot_path()
        subs = idx.submodules(cls)
        glue = self.policy.glue_torch_calls
        for fn in path.functions:
            for node in ast.walk(fn):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    self.add("torch-op", node, "the @ operator runs PyTorch's matmul; compute it in the kernel")
                if not isinstance(node, ast.Call):
                    continue
                q = idx.resolve(node.func)
                if q and q.startswith(STREAM_NAMES):
                    continue                       # reported as side-stream
                if q and q.startswith("torch."):
                    rel = q[len("torch."):]
                    if rel not in glue and not rel.startswith(("float", "int", "bfloat", "bool", "dtype")):
                        self.add("torch-op", node, f"{q}() on the hot path: the work must be done by your "
                                                   "kernel, not by PyTorch")
                elif isinstance(node.func, ast.Attribute):
                    attr = node.func.attr
                    base = attr[:-1] if attr.endswith("_") and attr[:-1] in OP_METHODS else attr
                    recv = node.func.value
                    if isinstance(recv, ast.Name) and recv.id == "self" and attr in subs:
                        continue                     # reported below, with every other use of self.X
                    elif base in OP_METHODS and not idx.is_module_ref(recv) and not (
                            isinstance(recv, ast.Name) and recv.id in idx.extensions):
                        self.add("torch-op", node, f".{attr}() is a PyTorch op on the hot path; compute it "
                                                   "in the kernel")
        for fn in path.functions:
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                        and node.attr in subs and not isinstance(self.parent.get(id(node)), ast.Attribute):
                    self.add("torch-op", node, f"self.{node.attr} is PyTorch's {subs[node.attr]}: calling it (or "
                                               "handing it on) runs PyTorch; read its parameters and compute "
                                               "with your kernel instead")
        launched = path.kernels_referenced
        if not launched and not (path.extension_referenced and self.report.uses_cuda_extension):
            defined = ", ".join(sorted(idx.kernels)) or "none"
            self.add("no-kernel", cls, f"no @triton.jit kernel is launched from ModelNew.forward "
                                       f"(kernels defined: {defined}); the work must run in a custom kernel")
        for name, node in idx.kernels.items():
            if launched and name not in launched and not self._used_by_kernel(name):
                self.add("unused-kernel", node, f"kernel {name} is defined but never launched from forward")

    def _used_by_kernel(self, name: str) -> bool:
        """A @triton.jit helper called from another kernel counts as used."""
        for other, node in self.idx.kernels.items():
            if other != name and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                return True
        return False

    # ------------------------------------------------------------ caches
    def _caches(self) -> None:
        idx = self.idx
        containers = idx.module_containers
        for fn in ast.walk(idx.tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in idx.kernels:
                continue
            keyed = _keyed_by_identity(fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.Global) and keyed:
                    self.add("result-cache", node, f"global {', '.join(node.names)} next to data_ptr()/id(): "
                                                   "results kept across calls can be replayed; recompute them")
                if isinstance(node, (ast.Assign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Subscript):
                            root = t.value
                            if isinstance(root, ast.Name) and root.id in containers:
                                self.add("result-cache", node, f"{root.id}[...] written inside {fn.name}(): a "
                                                               "module-level cache can replay stale results")
                            elif _keyed_by_identity(t.slice):
                                self.add("result-cache", node, f"cache keyed by {ast.unparse(t.slice)}: results "
                                                               "must be recomputed for every call")
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id in containers \
                        and node.func.attr in {"append", "update", "setdefault", "add", "extend", "insert",
                                               "__setitem__", "appendleft"}:
                    self.add("result-cache", node, f"{node.func.value.id}.{node.func.attr}() inside {fn.name}(): "
                                                   "a module-level cache can replay stale results")


def _flat_targets(targets: list[ast.AST]) -> list[ast.AST]:
    out = []
    for t in targets:
        out += _flat_targets(t.elts) if isinstance(t, (ast.Tuple, ast.List)) else [t]
    return out


def _keyed_by_identity(node: ast.AST) -> bool:
    """True when a subscript key uses data_ptr() or id(): a cache keyed by where tensors live."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            if isinstance(f, ast.Attribute) and f.attr == "data_ptr" or isinstance(f, ast.Name) and f.id == "id":
                return True
    return False
