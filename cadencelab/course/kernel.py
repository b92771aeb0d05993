"""How the course's notebooks are executed: one kernel per notebook, or one shared by several.

    execute(nb, cwd)        run a notebook top to bottom in a new kernel (or ``kernel=``, a shared one);
                            returns (error or None, the kernel process's own output)
    SharedKernel(cwd)       one kernel for several notebooks, its namespace cleared between them

Every kernel talks to this process over local (unix-domain) sockets in a private temporary folder, not
TCP: nothing to eavesdrop on, and so no warning from the kernel that its traffic is unencrypted. What a
kernel process itself writes (its log, C-level prints; a cell's output goes to the notebook) goes to a
log in that folder, never to the terminal; :func:`execute` returns its end, for a failed run's error.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .sources import kernel_env

__all__ = ["KERNEL", "KERNEL_LOG_CHARS", "POLL_S", "SharedKernel", "execute"]

#: the kernel the course's notebooks run on
KERNEL = "python3"
#: how much of a kernel process's own output a run keeps (its end)
KERNEL_LOG_CHARS = 4000


#: seconds between re-polls of the kernel's shell and iopub channels (see _client_class)
POLL_S = 1.0


def _client_class():
    """NotebookClient that waits on the kernel's channels in short polls.

    nbclient waits for a cell's execute reply with one ``get_msg(timeout=<cell timeout>)``; with
    widget traffic on the channels that wait sometimes misses the arriving reply and sits out
    the whole timeout (jupyter/nbclient#312). Re-polling every ``POLL_S`` recovers within a
    second; the cell timeout still applies as a deadline.
    """
    import asyncio
    from queue import Empty
    from time import monotonic

    from nbclient import NotebookClient
    from nbclient.client import timestamp
    from nbclient.exceptions import CellExecutionComplete, CellTimeoutError
    from nbclient.util import ensure_async

    class _PollingClient(NotebookClient):
        #: where the kernel's sockets go: a path prefix in a private folder (see the module's docstring)
        ipc_prefix = ""

        def create_kernel_manager(self):
            km = super().create_kernel_manager()
            if self.ipc_prefix:
                km.transport, km.ip = "ipc", self.ipc_prefix
            return km

        async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):
            deadline = None if timeout is None else monotonic() + timeout
            error_reply = None
            while True:
                if error_reply:
                    msg = error_reply
                    msg["parent_header"] = {"msg_id": msg_id}
                else:
                    wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - monotonic()))
                    try:
                        msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=wait))
                    except Empty:
                        if deadline is not None and monotonic() >= deadline:
                            task_poll_kernel_alive.cancel()
                            await self._async_check_alive()
                            error_reply = await self._async_handle_timeout(timeout, cell)
                        continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if self.record_timing:
                    cell["metadata"]["execution"]["shell.execute_reply"] = timestamp(msg)
                try:
                    await asyncio.wait_for(task_poll_output_msg, self.iopub_timeout)
                except (asyncio.TimeoutError, Empty):
                    if self.raise_on_iopub_timeout:
                        task_poll_kernel_alive.cancel()
                        raise CellTimeoutError.error_from_timeout_and_cell(
                            "Timeout waiting for IOPub output", self.iopub_timeout, cell) from None
                    self.log.warning("Timeout waiting for IOPub output")
                task_poll_kernel_alive.cancel()
                return msg

        async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
            while True:
                try:
                    msg = await ensure_async(self.kc.iopub_channel.get_msg(timeout=POLL_S))
                except Empty:
                    continue
                if msg["parent_header"].get("msg_id") == parent_msg_id:
                    try:
                        self.process_message(msg, cell, cell_index)
                    except CellExecutionComplete:
                        return

    return _PollingClient



def _client(nb, cwd, timeout: int, kernel_name: str, km=None):
    return _client_class()(nb, km=km, timeout=timeout, kernel_name=kernel_name, allow_errors=False,
                           record_timing=True, resources={"metadata": {"path": str(cwd)}})


def _tail(log: Path, start: int = 0) -> str:
    with open(log, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", errors="replace")[-KERNEL_LOG_CHARS:]


def _failed(e: Exception, log: str) -> str:
    own = f"\nthe kernel process's own output (last {KERNEL_LOG_CHARS} characters):\n{log}" if log.strip() else ""
    return f"{type(e).__name__}: {e}{own}"


def execute(nb, cwd: str | os.PathLike, timeout: int = 300, kernel_name: str = KERNEL,
            kernel: SharedKernel | None = None, env: dict | None = None) -> tuple[str | None, str]:
    """Execute ``nb`` in place (outputs filled in) in a new kernel started in ``cwd``, or in ``kernel``.

    timeout: seconds per cell; env: variables for the kernel on top of :func:`kernel_env` (a shared
    kernel's are fixed when it starts: ``env`` must then be None or equal them, else ValueError).
    Returns ``(error, log)``: None or what went wrong (a cell raised or timed out, the kernel died or
    could not start, ...; the kernel's own output appended), and the end of what the kernel process
    itself wrote while it ran this notebook.
    """
    if kernel is not None:
        if env is not None and dict(env) != kernel.env:
            raise ValueError(f"a shared kernel keeps the environment it started with ({kernel.env}), not {env}: "
                             f"run this notebook in a new kernel")
        return kernel.execute(_client(nb, cwd, timeout, kernel_name, km=kernel.km))
    client = _client(nb, cwd, timeout, kernel_name)
    error = None
    with tempfile.TemporaryDirectory(prefix="cadencelab-kernel-") as private:
        client.ipc_prefix = os.path.join(private, "kernel")
        log = Path(private) / "kernel.log"
        with open(log, "wb") as sink:
            try:
                client.execute(env={**kernel_env(), **(env or {})}, stdout=sink, stderr=sink)
            except Exception as e:  # noqa: BLE001 - recorded in the run, not raised
                error = e
        text = _tail(log)
    return (None if error is None else _failed(error, text)), text


class SharedKernel:
    """One kernel that runs several notebooks one after another (``execute(..., kernel=k)``), each after
    ``%reset -f`` clears the namespace the previous one left: the kernel start and the imports are paid
    once. Modules stay imported between notebooks, so a run here is not a fresh kernel's: the tour gives
    every notebook a new kernel; the tests use this to run the course in one.

    ``with SharedKernel(cwd, env) as k:`` starts it in folder ``cwd`` (every notebook it runs runs there)
    with ``env`` on top of :func:`kernel_env`; leaving the block shuts it down. A kernel that died is
    started again before the next notebook.
    """

    def __init__(self, cwd: str | os.PathLike, env: dict | None = None, kernel_name: str = KERNEL):
        self.cwd, self.env, self.kernel_name, self.km, self.starts = str(cwd), dict(env or {}), kernel_name, None, 0

    def __enter__(self) -> SharedKernel:
        from jupyter_client.manager import AsyncKernelManager
        from nbclient.util import run_sync

        self._private = tempfile.TemporaryDirectory(prefix="cadencelab-kernel-")
        self.log = Path(self._private.name) / "kernel.log"
        self._sink = open(self.log, "wb")  # noqa: SIM115 - open while the kernel lives, closed in __exit__
        self.km = AsyncKernelManager(kernel_name=self.kernel_name)
        self.km.transport, self.km.ip = "ipc", os.path.join(self._private.name, "kernel")
        run_sync(self.km.start_kernel)(env={**kernel_env(), **self.env}, cwd=self.cwd, stdout=self._sink,
                                       stderr=self._sink)
        self.starts = 1
        return self

    def __exit__(self, *exc) -> None:
        from nbclient.util import run_sync

        try:
            if self.km is not None and self.km.has_kernel:
                run_sync(self.km.shutdown_kernel)(now=True)
        finally:
            self._sink.close()
            self._private.cleanup()

    def execute(self, client) -> tuple[str | None, str]:
        """Run ``client``'s notebook (a client on this kernel's manager) after clearing the namespace."""
        import nbformat
        from nbclient.util import run_sync

        if not run_sync(self.km.is_alive)():
            run_sync(self.km.restart_kernel)(now=True)
            self.starts += 1
        start = self.log.stat().st_size
        reset = _client(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%reset -f")]), self.cwd, 60,
                        self.kernel_name, km=self.km)
        error = None
        try:
            for c in (reset, client):
                try:
                    c.execute()
                finally:
                    if c.kc is not None:
                        c.kc.stop_channels()
                        c.kc = None
        except Exception as e:  # noqa: BLE001 - recorded in the run, not raised
            error = e
        self._sink.flush()
        text = _tail(self.log, start)
        return (None if error is None else _failed(error, text)), text
