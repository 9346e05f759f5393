"""Name resolution and the hot path of a candidate, for the static checks.

``SourceIndex`` reads a candidate's AST once and answers:

* ``resolve(expr)``: the dotted name an expression refers to through the file's
  imports and simple aliases (``F.softmax`` -> ``torch.nn.functional.softmax``,
  ``t = time; t.perf_counter`` -> ``time.perf_counter``), or None;
* ``kernels``: functions decorated with ``triton.jit`` (directly or under
  ``triton.autotune`` / ``triton.heuristics``);
* ``hot_path()``: the functions reachable from ``ModelNew.forward`` (module
  functions, ``self`` methods, ``forward``/``__call__``/``apply`` of referenced
  classes), never descending into kernels, and which kernels they reference.

Standard library only.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

KERNEL_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit.jit"}


@dataclass
class HotPath:
    functions: list[ast.AST] = field(default_factory=list)   # FunctionDef/Lambda nodes on the path
    kernels_referenced: set[str] = field(default_factory=set)
    extension_referenced: bool = False                        # a load_inline module is used


class SourceIndex:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.aliases: dict[str, str] = {}            # local name -> dotted module path
        self.functions: dict[str, ast.AST] = {}           # FunctionDef or Lambda
        self.classes: dict[str, ast.ClassDef] = {}
        self.kernels: dict[str, ast.AST] = {}
        self.extensions: set[str] = set()            # names bound to load_inline(...) results
        self.module_containers: set[str] = set()     # module-level dict/list/set names
        self._index()

    # ----------------------------------------------------------- indexing
    def _index(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
                if any(self._decorator_name(d) in KERNEL_DECORATORS for d in node.decorator_list):
                    self.kernels[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.functions[t.id] = node.value        # f = lambda t: ... is a function too
            elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Dict, ast.List, ast.Set)) \
                    or isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and self.resolve(node.value.func) in {"dict", "list", "set", "collections.OrderedDict",
                                                         "collections.defaultdict", "collections.deque"}:
                self.module_containers.update(t.id for t in node.targets if isinstance(t, ast.Name))
        # simple aliases (x = torch, mm = torch.matmul, k = triton.jit(f)), to a fixed point
        for _ in range(3):
            for node in ast.walk(self.tree):
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)):
                    continue
                name = node.targets[0].id
                if isinstance(node.value, ast.Call):
                    callee = self.resolve(node.value.func)
                    if callee in KERNEL_DECORATORS:
                        self.kernels[name] = node
                    elif callee and callee.endswith("cpp_extension.load_inline"):
                        self.extensions.add(name)
                    continue
                target = self.resolve(node.value)
                if target and name not in self.functions and name not in self.classes:
                    self.aliases[name] = target
                elif isinstance(node.value, ast.Name) and node.value.id in self.kernels:
                    self.kernels[name] = node

    def _decorator_name(self, dec: ast.AST) -> str | None:
        return self.resolve(dec.func if isinstance(dec, ast.Call) else dec)

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted name ``node`` refers to through imports and aliases, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return ".".join([self.aliases[node.id]] + parts[::-1])
            if node.id in {"open", "dict", "list", "set", "setattr", "getattr", "delattr", "eval", "exec",
                           "compile", "globals", "locals", "vars", "__import__", "breakpoint", "input", "id"}:
                return ".".join([node.id] + parts[::-1])
        return None

    def is_module_ref(self, node: ast.AST) -> bool:
        """True when ``node`` names an imported module (or something inside one)."""
        return self.resolve(node) is not None

    # ----------------------------------------------------------- hot path
    def model_new(self) -> ast.ClassDef | None:
        return self.classes.get("ModelNew")

    def submodules(self, cls: ast.ClassDef) -> dict[str, str]:
        """``self.X = torch.nn.Something(...)`` in the class: X -> qualified torch.nn name."""
        out = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                q = self.resolve(node.value.func)
                if q and q.startswith("torch.nn.") and q not in {"torch.nn.Parameter", "torch.nn.ParameterList",
                                                                 "torch.nn.ParameterDict", "torch.nn.Buffer"}:
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            out[t.attr] = q
        return out

    def hot_path(self) -> HotPath:
        path = HotPath()
        cls = self.model_new()
        if cls is None:
            return path
        methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        start = methods.get("forward")
        if start is None:
            return path
        seen: set[int] = set()
        todo: list[ast.AST] = [start]
        while todo:
            fn = todo.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            path.functions.append(fn)
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    if node.id in self.kernels:
                        path.kernels_referenced.add(node.id)
                    elif node.id in self.extensions:
                        path.extension_referenced = True
                    elif node.id in self.functions:
                        todo.append(self.functions[node.id])
                    elif node.id in self.classes and node.id != "ModelNew":
                        todo += [m for m in self.classes[node.id].body if isinstance(m, ast.FunctionDef)
                                 and m.name in {"forward", "__call__", "apply"}]
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id == "self" and node.attr in methods:
                    todo.append(methods[node.attr])
        return path
