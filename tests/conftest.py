"""Shared pytest setup: the repository root on sys.path and the `cuda` marker skip.

Marker convention (registered in pyproject.toml; pytest runs with ``--strict-markers``, so an
unregistered or misspelt marker is an error):

* ``@pytest.mark.cuda`` on each test that needs a CUDA device, never a file-wide ``pytestmark``:
  the mark sits where a reader sees the test. A test run on several devices marks only its CUDA
  case: ``pytest.param("cuda", marks=pytest.mark.cuda)``. Without ``torch.cuda.is_available()``
  those tests are skipped here (reported by ``-ra``); ``python3 -m pytest -m cuda tests`` runs
  just them on a GPU machine.
* ``@pytest.mark.slow`` on a long run (an equivalence run, a full-size build) whose coverage other, smaller
  tests already give; the comment above the mark names them. Without ``-m`` on the command line these are
  left out (counted as deselected in a one-process run; the two-worker summary does not print that count);
  ``python3 -m pytest -m slow tests`` runs just them, ``-m "slow or not slow"`` everything. A test that is
  too slow and covers what nothing else does is made smaller, not marked.

Two workers: the README's command runs the suite with pytest-xdist, ``-n 2 --dist loadfile`` (the 2-core
machine's two cores; every test file in one worker, so a module's fixtures, such as the notebooks' shared
kernel, are made once and its tests keep their order). Nothing here depends on it: ``python3 -m pytest tests``
runs the same tests in one process. Tests share no writable path (each writes under its ``tmp_path``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

#: torch's intra-op threads in the tests and in every process they start (notebook kernels, studies' arm
#: processes, the command line): the tests' models are small, so a second thread gains nothing, and a thread
#: pool whose threads must meet after every op stalls whenever another process takes a core (a run of the
#: teaching config measured ~50x slower with two threads on a shared 2-core machine). What the tests assert does
#: not depend on it; OMP_NUM_THREADS set by the caller wins, and CI's bench smoke runs with torch's default.
TEST_THREADS = "1"
os.environ.setdefault("OMP_NUM_THREADS", TEST_THREADS)  # read when torch is first imported, here or in a child
if "torch" in sys.modules:  # imported before this file (a plugin): set this process's pool too
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))


from cadencelab.replay.determinism import apply_condition  # noqa: E402

apply_condition()  # the exact device condition, before any CUDA call: the one set-up every study uses


@pytest.fixture(autouse=True)
def _device_condition():
    """Every test runs under the exact device condition and with the tests' intra-op threads; a test that changes
    the flags or the threads (pinning a process to cores sets them, so does a study's --threads) gets them back."""
    import torch

    old = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
           torch.backends.cudnn.allow_tf32)
    threads = torch.get_num_threads()
    apply_condition()
    yield
    (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
     torch.backends.cudnn.allow_tf32) = old
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out tests marked ``@pytest.mark.slow`` unless ``-m`` was given; skip tests marked
    ``@pytest.mark.cuda`` when ``torch.cuda.is_available()`` is False."""
    if not config.option.markexpr:
        slow = [item for item in items if item.get_closest_marker("slow") is not None]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


# recorded H200 chunk traces, shared by the profile and figure tests (parsed once per session)
@pytest.fixture(scope="session")
def chunk():
    """One steady Token2wav chunk per arm (B0, SRc), as recorded on the H200."""
    from cadencelab.course import data

    return {arm: data.recorded_trace(arm, "chunk") for arm in ("B0", "SRc")}


@pytest.fixture(scope="session")
def streams(chunk):
    """Each recorded chunk's device ops, labelled by kind (``profile.compare.kernel_stream``)."""
    from cadencelab.profile.compare import kernel_stream

    return {arm: kernel_stream(t, "chunk") for arm, t in chunk.items()}


@pytest.fixture(scope="module")
def models():
    """The tiny duplex language models (seeded), built once per module on one thread (the served-decoder tests;
    a module's own ``models`` fixture takes its place)."""
    pytest.importorskip("transformers")
    import torch

    from cadencelab.adapters.duplex import build_models

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_models("tiny", "cpu", 0)
    torch.set_num_threads(old)
