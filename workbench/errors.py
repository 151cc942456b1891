"""Exception families of the workbench.

Every error a user can cause has its own type and a message that names the bad value and the fix.
Each family also derives from the closest built-in exception, so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class of every error raised on purpose by the workbench."""


class ConfigError(WorkbenchError, ValueError):
    """An invalid configuration value (model, training or data config)."""


class DataError(WorkbenchError, ValueError):
    """Missing, corrupt or malformed data files."""


class ChecksumError(DataError):
    """A downloaded or local data file does not match its published SHA-256."""


class CheckpointError(WorkbenchError, ValueError):
    """A checkpoint that cannot be read, is not ours, or does not fit the model."""


class InputTextError(WorkbenchError, ValueError):
    """Input text that cannot be translated or tokenized as asked."""


class DecodingError(WorkbenchError, ValueError):
    """Invalid decoding settings (beam size, maximum length...)."""


class PrecisionError(WorkbenchError, ValueError):
    """A number format the device cannot run (bf16 asked for on a processor without bf16 support)."""


class RunFolderError(WorkbenchError, ValueError):
    """A run folder that cannot be used as asked: it holds another run, another training holds its lock, there is
    no run to resume, or it cannot be written (a file, no permission, a full disk)."""


class TrainingError(WorkbenchError, RuntimeError):
    """Training cannot go on (non-finite loss, diverged run...)."""


class NotebookParameterError(WorkbenchError, ValueError):
    """A misspelt or ill-typed notebook parameter."""


class NotebookCopyError(WorkbenchError, FileExistsError):
    """Copying the notebooks would overwrite files the user has (or the target folder is a file)."""


class MaskError(WorkbenchError, TypeError):
    """An attention mask that is not boolean (a 0/1 float or integer mask would be read as additive scores)."""


class InterventionError(WorkbenchError, ValueError):
    """A head intervention that cannot be applied: unknown attention kind, layer or head, or missing means."""


class AttributionError(WorkbenchError, ValueError):
    """Attribution asked for something the model or input cannot give (bad method, positions or foil token)."""


class BookError(WorkbenchError, RuntimeError):
    """The offline book cannot be built or served (no executed notebooks, Sphinx missing or failing...)."""


class PatchingError(InterventionError):
    """Activation patching that cannot be done as asked: unknown site, unequal lengths, a cache from another model."""


class BridgeError(WorkbenchError, ValueError):
    """A model that cannot cross a bridge to or from another library (Hugging Face, CTranslate2): an unsupported
    architecture, a configuration field the other side cannot represent, unsafe or missing weights."""


class SiteNameError(PatchingError, KeyError):
    """An unknown site name (a hook point, capture key, patching site or kind): the message lists the valid names.

    Also a ``KeyError`` (caches are mappings of site names) and a ``ValueError`` (through :class:`PatchingError`).
    """

    __str__ = Exception.__str__  # one plain line, not KeyError's quoted repr
