"""Lowering: a traced task composed onto verified kernel templates, instead of a replayed skill.

    build      the task's forward traced with torch.fx on the meta device into a small IR
               (``ir``): primitives only (elementwise, reduce, scan, view, sources);
               softmax, the norms and the losses are decomposed on the way in
    partition  the live nodes grouped into the fewest regions the templates allow: each
               template says which nodes may join an open region (its fusion points)
    templates  one module per family under ``templates/``; each holds its Triton kernel
               text with the docstring that teaches it, and a launcher generator
    emit       one readable ``ModelNew`` module: docstring, kernels, launchers, then
               ``ModelNew``, whose ``__init__`` is the task's own ``Model.__init__`` so the
               parameters and buffers have the same names and shapes

The template sources live next to the code that fills them in (``templates/*.py``),
not under ``skills/``: a template is a kernel with holes (the fused chain, the operand
loads), and the verified kernels it produces are written back as learned skills by
``generate``, where they read like the seed skills.

How to add a family: see ``protocol`` (the ``Template`` protocol and ``register``).
"""
