"""The notebook runner's papermill engine: papermill's own, with a kernel client that cannot miss a reply.

nbclient waits for a cell's ``execute_reply`` with one ``shell_channel.get_msg(timeout=...)`` call as long as the
cell's whole time limit, and for its outputs with ``iopub_channel.get_msg(timeout=None)``. On zmq's asyncio sockets
such a wait can miss the wake-up of a message that has already arrived: the runner then waits for ever on a kernel
that is idle, with the reply sitting in its socket (seen here in lesson 10's widget cell, on a loaded 2-core machine,
with the shell socket's ``zmq.EVENTS`` reporting a message ready; nbclient issue 312 reports the same with widgets).
This module makes every such wait a series of short ones: a new poll looks at the socket again, so a message that
arrived is read within :data:`POLL_SLICE` seconds, and a wait with a deadline still ends at that deadline.
"""

from __future__ import annotations

import time
from queue import Empty
from typing import Any

from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine
from papermill.log import logger
from papermill.utils import merge_kwargs, remove_args

ENGINE = "workbench"  # the name this engine is registered under with papermill
POLL_SLICE = 0.5  # seconds: the longest single wait on a kernel socket


def poll_in_slices(channel: Any, slice_s: float = POLL_SLICE) -> None:
    """Replace ``channel.get_msg`` (an async jupyter_client channel) by one that waits at most ``slice_s`` per poll."""
    wait_once = channel.get_msg

    async def get_msg(timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await wait_once(timeout=slice_s if left is None else min(slice_s, left))
            except Empty:
                if left is not None and left <= slice_s:
                    raise

    channel.get_msg = get_msg


class SlicedPollClient(PapermillNotebookClient):
    """papermill's notebook client whose shell and IOPub waits are series of short polls (:func:`poll_in_slices`)."""

    async def async_start_new_kernel_client(self) -> Any:
        kc = await super().async_start_new_kernel_client()
        poll_in_slices(kc.shell_channel)
        poll_in_slices(kc.iopub_channel)
        return kc


class SlicedPollEngine(NBClientEngine):
    """papermill's nbclient engine, running :class:`SlicedPollClient`."""

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False, stdout_file: Any = None,
                                 stderr_file: Any = None, start_timeout: int = 60, execution_timeout: int | None = None,
                                 **kwargs: Any) -> Any:
        # the arguments as papermill's NBClientEngine.execute_managed_notebook passes them to its client
        kwargs = remove_args(["input_path"], **kwargs)
        safe_kwargs = remove_args(["timeout", "startup_timeout"], **kwargs)
        final_kwargs = merge_kwargs(safe_kwargs, timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
                                    startup_timeout=start_timeout, kernel_name=kernel_name, log=logger,
                                    log_output=log_output, stdout_file=stdout_file, stderr_file=stderr_file)
        return SlicedPollClient(nb_man, **final_kwargs).execute()


def register() -> str:
    """Register the engine with papermill (idempotent); its name, for ``papermill.execute_notebook(engine_name=...)``."""
    from papermill.engines import papermill_engines

    papermill_engines.register(ENGINE, SlicedPollEngine)
    return ENGINE


__all__ = ["ENGINE", "POLL_SLICE", "SlicedPollClient", "SlicedPollEngine", "poll_in_slices", "register"]
