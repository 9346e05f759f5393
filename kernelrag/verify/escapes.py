"""Static checks of the routes out of the process that need no exotic code (VERIFY.md 21-23).

* ``module_reach``: an attribute chain that reaches ``sys``, ``os``, ``builtins``,
  ``subprocess``, ``socket``, ``ctypes``, ``importlib``, ``gc`` or ``inspect`` through
  any other module (``warnings.sys.modules["os"]``, ``typing.sys``, ``torch.os``,
  ``numpy.ctypeslib``), or such a name imported from an allowed module
  (``from warnings import sys``). Any ``.sys``/``.os``/... attribute counts, whatever
  it is read from: kernels have no use for them.
* ``native_calls``: in the C++/CUDA sources handed to ``load_inline``, calls that run
  programs, open files or sockets, load libraries or read the environment, and the
  headers that declare them. Each finding carries the Python line of the string
  plus the line inside it.
* ``extension_calls``: native code loaded any other way (``cpp_extension.load``,
  ``torch.ops.load_library``...).

The OS sandbox is the backstop; these make the common escapes fail before anything runs.
Standard library only.
"""
from __future__ import annotations

import ast
import re
from typing import Iterator

REACH = frozenset({"sys", "os", "builtins", "subprocess", "socket", "ctypes", "ctypeslib", "importlib",
                   "gc", "inspect", "posix", "_os", "_sys", "__builtins__", "_ctypes", "_posixsubprocess",
                   "_socket", "runpy", "pty", "signal", "resource", "mmap", "shutil", "pickle", "marshal"})
NATIVE_CALLS = re.compile(
    r"(?<![\w.>])(?:::)?(system|popen|_popen|fork|vfork|clone|execl|execlp|execle|execv|execvp|execve|execvpe|"
    r"posix_spawnp?|fopen|fopen64|freopen|open|open64|openat|creat|fdopen|socket|connect|getaddrinfo|"
    r"gethostbyname|dlopen|dlsym|dlmopen|getenv|secure_getenv|setenv|putenv|syscall|ptrace|kill|unlink|"
    r"rename|chmod|chown|mkdir|rmdir|pthread_create|Py_Initialize|PyRun_\w*|PyImport_\w*|PyEval_\w*)\s*\(")
NATIVE_CLASSES = re.compile(r"\bstd::(ifstream|ofstream|fstream|filebuf|thread|jthread|filesystem|system)\b")
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
NATIVE_HEADERS = re.compile(
    r"#\s*include\s*[<\"](fstream|filesystem|thread|cstdio|stdio\.h|unistd\.h|dlfcn\.h|spawn\.h|"
    r"sys/[\w/]+\.h|netinet/[\w/]+\.h|arpa/[\w/]+\.h|netdb\.h|fcntl\.h|signal\.h|csignal|Python\.h)[>\"]")
EXTENSION_LOADERS = ("torch.utils.cpp_extension.", "torch.ops.load_library", "torch.classes.load_library",
                     "torch._C._jit", "triton.runtime.build", "triton.backends")


def module_reach(node: ast.AST, resolved: str | None) -> Iterator[tuple[ast.AST, str]]:
    """(node, message) for each forbidden module reached at ``node``."""
    if isinstance(node, ast.Attribute) and node.attr in REACH:
        through = resolved.rsplit(".", 1)[0] if resolved else ast.unparse(node.value)[:60]
        yield node, (f"{through}.{node.attr} reaches the {node.attr} module through another object; "
                     f"{node.attr} is not available to kernels")
    elif isinstance(node, ast.ImportFrom) and node.module:
        for alias in node.names:
            if alias.name in REACH:
                yield node, f"from {node.module} import {alias.name}: {alias.name} is not available to kernels"
    elif isinstance(node, ast.Import):
        for alias in node.names:
            inner = [p for p in alias.name.split(".")[1:] if p in REACH]
            if inner:
                yield node, f"import {alias.name} reaches {inner[0]}: not available to kernels"


def native_calls(strings: list[ast.Constant]) -> Iterator[tuple[int, str]]:
    """(line, message) for each forbidden call or header in C++/CUDA source strings."""
    for const in strings:
        text = COMMENTS.sub(lambda m: "\n" * m.group().count("\n"), const.value)
        for pattern, what in ((NATIVE_CALLS, "call"), (NATIVE_CLASSES, "type"), (NATIVE_HEADERS, "header")):
            for m in pattern.finditer(text):
                line = const.lineno + text.count("\n", 0, m.start())
                name = m.group(1)
                yield line, (f"C++ {what} {name!r} in a load_inline source: native code may not run programs, "
                             "touch files, sockets or the environment, or load libraries")


def extension_call(qualified: str) -> str | None:
    """Why a call loads native code other than through load_inline (None when it does not)."""
    if qualified.endswith("cpp_extension.load_inline"):
        return None
    if qualified.startswith(EXTENSION_LOADERS):
        return f"{qualified}(): native code may only come from load_inline sources with a __global__ kernel"
    return None


def source_strings(node: ast.AST, module: ast.Module) -> list[ast.Constant]:
    """String constants in ``node``, following module-level names bound to strings."""
    out: list[ast.Constant] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.append(sub)
        elif isinstance(sub, ast.Name):
            for top in module.body:
                if isinstance(top, ast.Assign) and any(isinstance(t, ast.Name) and t.id == sub.id
                                                       for t in top.targets):
                    out += source_strings(top.value, module)
    return out
