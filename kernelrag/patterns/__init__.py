"""Op patterns: what a KernelBench task computes, as a canonical signature.

``pattern`` holds the value and its string functions, ``canon`` maps traced fx
nodes onto canonical ops, ``trace`` traces a task (torch imported on first use).
"""
from kernelrag.patterns.pattern import (CATEGORIES, OpPattern, base_name, category_of, format_op,
                                        from_signature, heavy_ops, op_attrs, similarity, size_class,
                                        slug, split_ops, unknown)
from kernelrag.patterns.trace import op_pattern

__all__ = ["CATEGORIES", "OpPattern", "base_name", "category_of", "format_op", "from_signature",
           "heavy_ops", "op_attrs", "op_pattern", "similarity", "size_class", "slug", "split_ops",
           "unknown"]
