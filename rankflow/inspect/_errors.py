"""The error of the inspect package, in a module of its own so that every reader of
checkpoints (safetensors, PyTorch, the Hub cache) can raise it without importing another."""

from __future__ import annotations

from ..config.fields import ConfigError

__all__ = ["InspectError"]


class InspectError(ConfigError):
    """A checkpoint cannot be inspected: missing, unreadable or truncated file, unknown
    architecture, tensors that do not match the config. The message names the file
    and, where there is one, the tensor.

    Examples:
        >>> import rankflow
        >>> from rankflow.inspect import InspectError, inspect_checkpoint
        >>> try:
        ...     inspect_checkpoint("no/such/model.safetensors")
        ... except InspectError as e:
        ...     print(e)
        no/such/model.safetensors: no such file or directory
        >>> issubclass(InspectError, rankflow.ConfigError)  # the CLI prints it in one line
        True
    """
