"""Generate a fused Triton kernel for an elementwise chain, from the task's traced fx graph.

Used by the offline drafter (layer L3) when no skill matches a task that is a
chain of elementwise ops. Runs on the GPU machine: imports only stdlib, torch,
triton. The task is traced on the ``meta`` device (no memory, no compute), every
node is mapped to a ``tl`` expression from a whitelist, all intermediates stay in
fp32 registers, and one program handles one BLOCK of the flattened tensor.
Anything outside the whitelist (parameters, reductions, broadcasting, several
outputs) makes ``generate_elementwise`` say what it met instead of guessing.

Scalar constants (including ones the model took from ``get_init_inputs``) are
written into the kernel as literals; the verifier checks the result, so a kernel
reused for another task with other constants fails verification, never silently.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

from kernelrag.patterns.trace import traced
from kernelrag.task import Task
from kernelrag.types import DraftResult

TRANSFORMATIONS = ["elementwise_fusion", "fp32_accumulation"]
_FLOAT_DTYPES = {"torch.float32", "torch.float16", "torch.bfloat16"}


class CodegenError(Exception):
    """The graph is not a whitelisted elementwise chain (message says which node)."""


def _lit(value) -> str:
    if isinstance(value, bool):
        raise CodegenError(f"boolean argument {value!r} is not supported")
    if isinstance(value, (int, float)):
        v = float(value)
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    raise CodegenError(f"argument {value!r} ({type(value).__name__}) is neither a tensor nor a number")


def _tanh(a: str) -> str:
    # tanh(a) = 2*sigmoid(2a) - 1: exact in fp32 and available everywhere (tl has no tanh)
    return f"(2.0 * tl.sigmoid(2.0 * {a}) - 1.0)"


def _gelu(a: str, approximate: str) -> str:
    if approximate == "tanh":
        inner = f"0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})"
        return f"(0.5 * {a} * (1.0 + {_tanh('(' + inner + ')')}))"
    return f"(0.5 * {a} * (1.0 + tl.math.erf({a} * 0.7071067811865476)))"


def _clamp(a: str, lo, hi) -> str:
    out = a
    if lo is not None:
        out = f"tl.maximum({out}, {lo})"
    if hi is not None:
        out = f"tl.minimum({out}, {hi})"
    return out


def _softplus(a: str, beta: str, threshold: str) -> str:
    return f"tl.where({a} * {beta} > {threshold}, {a}, tl.log(1.0 + tl.exp({a} * {beta})) / {beta})"


def _elu(a: str, alpha: str, scale: str = "1.0") -> str:
    return f"({scale} * tl.where({a} > 0.0, {a}, {alpha} * (tl.exp({a}) - 1.0)))"


def _pow(a: str, e) -> str:
    try:
        e = float(e)
    except (TypeError, ValueError):
        raise CodegenError(f"pow with a tensor exponent ({e}) is not supported") from None
    powers = {1.0: a, 2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})", 4.0: f"({a} * {a} * {a} * {a})",
              0.5: f"tl.sqrt({a})", -0.5: f"tl.rsqrt({a})", -1.0: f"(1.0 / {a})"}
    if float(e) not in powers:
        raise CodegenError(f"pow with exponent {e!r} is not supported (only 1, 2, 3, 4, 0.5, -0.5, -1)")
    return powers[float(e)]


# name -> (expression builder taking (positional args as code strings, kwargs as code/values))
def _unary(expr):
    return lambda a, kw: expr(a[0])


def _binary(op):
    def build(a, kw):
        x, y = a[0], a[1]
        if "alpha" in kw and op in "+-":
            y = f"({_lit(kw['alpha'])} * {y})"
        if kw.get("rounding_mode") is not None:
            raise CodegenError(f"div with rounding_mode={kw['rounding_mode']!r} is not supported")
        return f"({x} {op} {y})"
    return build


OPS = {
    "add": _binary("+"), "sub": _binary("-"), "mul": _binary("*"), "div": _binary("/"),
    "rsub": lambda a, kw: f"({a[1]} - {a[0]})",
    "neg": _unary(lambda x: f"(-{x})"),
    "pow": lambda a, kw: _pow(a[0], kw.get("exponent", a[1] if len(a) > 1 else None)),
    "square": _unary(lambda x: f"({x} * {x})"),
    "relu": _unary(lambda x: f"tl.maximum({x}, 0.0)"),
    "relu6": _unary(lambda x: _clamp(x, "0.0", "6.0")),
    "gelu": lambda a, kw: _gelu(a[0], kw.get("approximate", "none")),
    "silu": _unary(lambda x: f"({x} * tl.sigmoid({x}))"),
    "sigmoid": _unary(lambda x: f"tl.sigmoid({x})"),
    "tanh": _unary(_tanh),
    "exp": _unary(lambda x: f"tl.exp({x})"),
    "log": _unary(lambda x: f"tl.log({x})"),
    "sqrt": _unary(lambda x: f"tl.sqrt({x})"),
    "rsqrt": _unary(lambda x: f"tl.rsqrt({x})"),
    "abs": _unary(lambda x: f"tl.abs({x})"),
    "erf": _unary(lambda x: f"tl.math.erf({x})"),
    "clamp": lambda a, kw: _clamp(a[0], kw.get("min", a[1] if len(a) > 1 else None),
                                  kw.get("max", a[2] if len(a) > 2 else None)),
    "clamp_min": lambda a, kw: _clamp(a[0], kw.get("min", a[1] if len(a) > 1 else None), None),
    "clamp_max": lambda a, kw: _clamp(a[0], None, kw.get("max", a[1] if len(a) > 1 else None)),
    "hardtanh": lambda a, kw: _clamp(a[0], kw.get("min_val", a[1] if len(a) > 1 else "-1.0"),
                                     kw.get("max_val", a[2] if len(a) > 2 else "1.0")),
    "leaky_relu": lambda a, kw: (lambda s: f"tl.where({a[0]} >= 0.0, {a[0]}, {a[0]} * {s})")(
        kw.get("negative_slope", a[1] if len(a) > 1 else "0.01")),
    "elu": lambda a, kw: _elu(a[0], kw.get("alpha", a[1] if len(a) > 1 else "1.0")),
    "selu": _unary(lambda x: _elu(x, "1.6732632423543772", "1.0507009873554805")),
    "softplus": lambda a, kw: _softplus(a[0], kw.get("beta", a[1] if len(a) > 1 else "1.0"),
                                        kw.get("threshold", a[2] if len(a) > 2 else "20.0")),
    "mish": _unary(lambda x: f"({x} * {_tanh(_softplus(x, '1.0', '20.0'))})"),
    "hardsigmoid": _unary(lambda x: _clamp(f"({x} / 6.0 + 0.5)", "0.0", "1.0")),
    "hardswish": _unary(lambda x: f"({x} * {_clamp(f'({x} + 3.0)', '0.0', '6.0')} / 6.0)"),
    "softsign": _unary(lambda x: f"({x} / (1.0 + tl.abs({x})))"),
    "identity": _unary(lambda x: x),
}

_OPERATORS = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
              operator.neg: "neg", operator.pow: "pow", operator.iadd: "add", operator.isub: "sub",
              operator.imul: "mul", operator.itruediv: "div"}
_IGNORED_KWARGS = {"inplace", "out"}


def _function_name(target) -> str:
    if target in _OPERATORS:
        return _OPERATORS[target]
    name = getattr(target, "__name__", str(target)).rstrip("_")   # relu_ -> relu
    return {"true_divide": "div", "multiply": "mul", "subtract": "sub", "clip": "clamp"}.get(name, name)


def _module_op(module) -> tuple[str, dict]:
    """(op name, kwargs) for a whitelisted activation module."""
    import torch.nn as nn

    if isinstance(module, nn.ReLU6):
        return "relu6", {}
    if isinstance(module, nn.Hardtanh):
        return "hardtanh", {"min_val": module.min_val, "max_val": module.max_val}
    if isinstance(module, nn.LeakyReLU):
        return "leaky_relu", {"negative_slope": module.negative_slope}
    if isinstance(module, nn.ELU):
        return "elu", {"alpha": module.alpha}
    if isinstance(module, nn.Softplus):
        return "softplus", {"beta": module.beta, "threshold": module.threshold}
    if isinstance(module, nn.GELU):
        return "gelu", {"approximate": module.approximate}
    simple = {nn.ReLU: "relu", nn.SiLU: "silu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.SELU: "selu",
              nn.Mish: "mish", nn.Hardsigmoid: "hardsigmoid", nn.Hardswish: "hardswish",
              nn.Softsign: "softsign", nn.Identity: "identity"}
    for cls, name in simple.items():
        if type(module) is cls:
            return name, {}
    raise CodegenError(f"module {type(module).__name__} is not an elementwise op this generator knows")


@dataclass
class ElementwiseChain:
    inputs: list[str]                  # forward() argument names, in order
    body: list[str]                    # "vN = <tl expression>" lines
    result: str                        # variable holding the output
    ops: list[str] = field(default_factory=list)
    out_dtype: str = "torch.float32"


def trace_chain(task: "Task | str") -> ElementwiseChain:
    """Map the task's fx graph (traced once, on the meta device, by ``patterns.trace``) to tl
    expressions."""
    import torch
    import torch.fx

    t = traced(task)
    if t.build_error:
        raise RuntimeError(f"could not build Model(*get_init_inputs()) on the meta device: {t.build_error}")
    if t.inputs is None:
        raise RuntimeError(t.note)
    model = t.model
    if any(p.numel() for p in model.parameters()) or any(b.numel() for b in model.buffers()):
        raise CodegenError("the model has parameters or buffers; only parameter-free chains are generated")
    if t.tracer != "fx":   # data-dependent control flow and friends
        raise CodegenError(f"torch.fx cannot trace the model ({t.errors[0] if t.errors else 'no graph'})")
    gm = t.gm
    consts = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    if consts:
        raise CodegenError(f"the model reads constant tensors ({', '.join(map(str, consts))}); "
                           "only chains over the forward inputs are generated")
    outputs = [n for n in gm.graph.nodes if n.op == "output"]
    out_arg = outputs[0].args[0]
    if not isinstance(out_arg, torch.fx.Node):
        raise CodegenError("the model returns several values; only one output is generated")
    shape = tuple(out_arg.meta["tensor_meta"].shape)
    chain = ElementwiseChain(inputs=[], body=[], result="", out_dtype=str(out_arg.meta["tensor_meta"].dtype))
    names: dict[torch.fx.Node, str] = {}

    def code(arg):
        if isinstance(arg, torch.fx.Node):
            return names[arg]
        if isinstance(arg, (list, tuple)):
            raise CodegenError(f"list argument {arg!r} is not supported")
        return arg if arg is None or isinstance(arg, str) else _lit(arg)

    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        meta = node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            raise CodegenError(f"node {node.name} ({node.op} {node.target}) does not produce one tensor")
        if tuple(meta.shape) != shape:
            raise CodegenError(f"node {node.name} has shape {tuple(meta.shape)} but the output has {shape}: "
                               "broadcasting and reductions are not generated")
        if str(meta.dtype) not in _FLOAT_DTYPES:
            raise CodegenError(f"node {node.name} has dtype {meta.dtype}; only float32/16/bf16 are generated")
        if node.op == "placeholder":
            names[node] = f"a{len(chain.inputs)}"
            chain.inputs.append(node.target)
            continue
        if node.op == "call_module":
            name, kwargs = _module_op(gm.get_submodule(node.target))
            args = [code(a) for a in node.args]
        elif node.op in ("call_function", "call_method"):
            name = _function_name(node.target) if node.op == "call_function" else str(node.target).rstrip("_")
            kwargs = {k: v for k, v in node.kwargs.items() if k not in _IGNORED_KWARGS}
            args = [code(a) for a in node.args]
        else:
            raise CodegenError(f"node {node.name} is a {node.op} ({node.target}); only ops on inputs are generated")
        if name not in OPS:
            raise CodegenError(f"op {name!r} (node {node.name}) is not in the elementwise whitelist: "
                               + ", ".join(sorted(OPS)))
        kwargs = {k: code(v) if isinstance(v, torch.fx.Node) else v for k, v in kwargs.items()}
        kwargs = {k: (_lit(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and
                      k not in ("approximate", "rounding_mode") else v) for k, v in kwargs.items()}
        var = f"v{len(chain.body)}"
        chain.body.append(f"{var} = {OPS[name](args, kwargs)}")
        chain.ops.append(name)
        names[node] = var
    if not chain.inputs:
        raise CodegenError("the model takes no tensor inputs")
    chain.result = names[out_arg]
    return chain


_TEMPLATE = '''"""{title}: a fused elementwise chain ({ops}).

transformations: elementwise_fusion, fp32_accumulation
Generated from the task's traced graph. One program per BLOCK of the flattened
tensor: each of the {n_in} input(s) is read once and the output written once
({bytes_per} bytes per element at fp32, so memory-bound); every intermediate stays
in registers, computed in fp32.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_elementwise_kernel(
{kernel_args}    out_ptr,               # output, contiguous, same shape as the inputs
    n_elements,            # number of elements in the output
    BLOCK: tl.constexpr,   # elements per program
):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements   # the last program covers the tail
{loads}{body}    tl.store(out_ptr + offs, {result}.to(out_ptr.dtype.element_ty), mask=mask)


def fused_elementwise({params}):
    """Check the inputs, allocate the output, launch one program per BLOCK elements."""
{checks}    out = torch.empty({first}.shape, dtype={out_dtype}, device={first}.device)
    n_elements = out.numel()
    BLOCK = 1024
    grid = (triton.cdiv(n_elements, BLOCK),)
    fused_elementwise_kernel[grid]({call_args}out, n_elements, BLOCK=BLOCK)
    return out


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, {params}):
        return fused_elementwise({params})
'''


def render(chain: ElementwiseChain, title: str = "elementwise chain") -> str:
    params = ", ".join(chain.inputs)
    first = chain.inputs[0]
    kernel_args = "".join(f"    {f'in{i}_ptr,':<23}# input {i} ({name}), contiguous\n"
                          for i, name in enumerate(chain.inputs))
    loads = "".join(f"    a{i} = tl.load(in{i}_ptr + offs, mask=mask, other=0.0).to(tl.float32)\n"
                    for i in range(len(chain.inputs)))
    body = "".join(f"    {line}\n" for line in chain.body)
    checks = "".join(f"    {name} = {name}.contiguous()\n" for name in chain.inputs)
    checks += "".join(
        f"    if {name}.shape != {first}.shape:\n"
        f"        raise ValueError(f\"{name} has shape {{tuple({name}.shape)}}, expected {{tuple({first}.shape)}}\")\n"
        for name in chain.inputs[1:])
    return _TEMPLATE.format(
        title=title, ops=" > ".join(chain.ops) or "copy", n_in=len(chain.inputs),
        bytes_per=4 * (len(chain.inputs) + 1), kernel_args=kernel_args, loads=loads, body=body,
        result=chain.result, params=params, first=first, checks=checks, out_dtype=chain.out_dtype,
        call_args="".join(f"{name}, " for name in chain.inputs))


def generate_elementwise(task: "Task | str", pattern: str = "") -> DraftResult:
    """A fused Triton kernel for an elementwise-chain task, or ok=False saying why not."""
    try:
        task = Task.of(task)
        module = task.executed()
        for needed in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(module, needed):
                raise CodegenError(f"the task defines no {needed} (KernelBench format needs Model, "
                                   "get_inputs, get_init_inputs)")
        chain = trace_chain(task)
    except CodegenError as exc:
        return DraftResult(ok=False, method="codegen", pattern=pattern,
                           reason=f"not a generatable elementwise chain: {exc}")
    except Exception as exc:   # the task's own code failed on the meta device
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return DraftResult(ok=False, method="codegen", pattern=pattern,
                           reason=f"could not trace the task ({type(exc).__name__}: {first})")
    source = render(chain, title=pattern or " > ".join(chain.ops))
    return DraftResult(ok=True, source=source, method="codegen", transformations=list(TRANSFORMATIONS),
                       pattern=pattern, reason=f"generated a fused kernel for {' > '.join(chain.ops)}")
