"""The template families. Importing this package registers every built-in template.

Each module holds one family's kernel text, written to teach (technique, byte and
FLOP counts, why the fusion points are where they are), and registers its template
with ``kernelrag.draft.lower.protocol.register``. A new family adds its module to
the import list below.
"""
from kernelrag.draft.lower.templates import elementwise, rowwise  # noqa: E402,F401  (registers them)
