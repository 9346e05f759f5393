"""The one exception hierarchy. Bad kernels never raise: they get a Verdict.
These are for misuse of kernelrag itself (bad settings, missing files, a store
that cannot be reached).

``exit_code`` is what the command line exits with: 2 for bad usage (a setting,
an argument, a file that is not what it should be), 1 for a job that ran and
failed (a store that cannot be opened, an LLM that does not answer, a file that
cannot be written). ``usage=True`` marks one error as bad usage."""


class KernelRAGError(Exception):
    """Base of every error kernelrag raises on purpose."""

    exit_code = 1

    def __init__(self, *args: object, usage: bool | None = None) -> None:
        super().__init__(*args)
        if usage is not None:
            self.exit_code = 2 if usage else 1


class ConfigError(KernelRAGError):
    """A setting is unknown or has a bad value."""

    exit_code = 2


class StoreError(KernelRAGError):
    """The knowledge store (Chroma) cannot be opened or written."""


class GraphError(KernelRAGError):
    """The reasoning graph file is corrupt or cannot be written."""


class SkillError(KernelRAGError):
    """A skill folder is missing or malformed."""


class TaskError(KernelRAGError):
    """A task file is not in KernelBench format."""

    exit_code = 2


class LLMError(KernelRAGError):
    """The LLM endpoint failed or answered with something unusable."""
