"""The template families. ``kernelrag.draft.lower.families`` imports (and so registers) them.

Each module holds one family's kernel text, written to teach (technique, byte and
FLOP counts, why the fusion points are where they are), and registers its template
with ``kernelrag.draft.lower.protocol.register``. A new family adds its module to
the import list of ``kernelrag.draft.lower.families``.
"""
