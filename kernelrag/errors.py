"""The one exception hierarchy. Bad kernels never raise: they get a Verdict.
These are for misuse of kernelrag itself (bad settings, missing files, a store
that cannot be reached)."""


class KernelRAGError(Exception):
    """Base of every error kernelrag raises on purpose."""


class ConfigError(KernelRAGError):
    """A setting is unknown or has a bad value."""


class StoreError(KernelRAGError):
    """The knowledge store (Chroma) cannot be opened or written."""


class GraphError(KernelRAGError):
    """The reasoning graph file is corrupt or cannot be written."""


class SkillError(KernelRAGError):
    """A skill folder is missing or malformed."""


class TaskError(KernelRAGError):
    """A task file is not in KernelBench format."""


class LLMError(KernelRAGError):
    """The LLM endpoint failed or answered with something unusable."""
