"""Shared fixtures. Tests read Multi30k from the local mirror beside the checkout (never from the network).

A test that needs something outside the package (the Multi30k mirror, Chromium, playwright, torchrun, kaleido)
asks for it with :func:`require`: missing, it skips on a developer's machine and **fails** under ``CI=true``,
where every prerequisite must be installed (``.ci/run`` does it). No test calls ``pytest.skip`` or
``pytest.importorskip`` itself; ``tests/test_ci.py`` checks that.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("WORKBENCH_MULTI30K", str(REPO.parent / "shared" / "data" / "multi30k"))


def in_ci() -> bool:
    """True when the ``CI`` environment variable says so (``true``, ``1`` or ``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(what: str, how_to_fix: str) -> NoReturn:
    """Stop the test for a missing prerequisite: a skip locally, a failure under ``CI=true``."""
    message = f"{what} is missing: {how_to_fix}"
    if in_ci():
        pytest.fail(f"prerequisite missing under CI=true (CI installs every prerequisite): {message}", pytrace=False)
    pytest.skip(message)


def require(condition: object, what: str, how_to_fix: str) -> None:
    """Go on when ``condition`` is true; else :func:`missing` (skip locally, fail under ``CI=true``)."""
    if not condition:
        missing(what, how_to_fix)


def require_module(name: str, how_to_fix: str) -> ModuleType:
    """Import ``name``, or :func:`missing` when it is not installed (the CI-aware ``pytest.importorskip``)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"the Python module {name} ({exc})", how_to_fix)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA device; deselected where torch sees none (CI never runs "
                                       "them: bench/gpu_check.sh does, on a GPU machine)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` run only where torch sees a CUDA device. Elsewhere they are deselected, not skipped:
    they are no prerequisite of CI (which has no GPU), and they are never reported as a missing one."""
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu or _cuda_available():
        return
    config.hook.pytest_deselected(items=gpu)
    items[:] = [item for item in items if item.get_closest_marker("gpu") is None]


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    path = Path(os.environ["WORKBENCH_MULTI30K"])
    require((path / "val.de.gz").exists(), f"the Multi30k mirror at {path}",
            "put shared/data/multi30k beside the checkout or set WORKBENCH_MULTI30K to a local copy")
    return path


@pytest.fixture(scope="session")
def small_pairs(multi30k_dir):
    from workbench.translation.data import load_multi30k

    return load_multi30k("train", "de", "en", data_dir=multi30k_dir, limit=3000)


@pytest.fixture(scope="session")
def subword_tokenizer(small_pairs):
    from workbench.translation.tokenizer import SubwordTokenizer

    return SubwordTokenizer.train(small_pairs, vocab_size=2000)


def tiny_inspection_model():
    """The small model the inspection tests probe (patching, sweeps, interventions): 2 encoder and 3 decoder layers,
    4 heads of width 12, vocabularies of 40, in eval mode. It seeds torch's global stream with 0 first, so the inputs
    a test draws right after it are the same every run."""
    import torch

    from workbench import build_model, preset

    torch.manual_seed(0)
    return build_model(preset("tiny", d_model=48, n_heads=4, n_enc_layers=2, n_dec_layers=3), 40, 40).eval()


@pytest.fixture(scope="module")
def minimal_pair():
    """``(model, clean, corrupt, tgt)`` for the patching tests: :func:`tiny_inspection_model`, a source of 7 tokens,
    the same source with token 2 replaced (a minimal pair: one edit), and a target prefix of 6 that starts with bos
    (id 2)."""
    import torch

    model = tiny_inspection_model()
    clean = torch.randint(4, 40, (1, 7))
    corrupt = clean.clone()
    corrupt[0, 2] = (clean[0, 2] + 5) % 36 + 4  # a one-token edit: a minimal pair
    tgt = torch.randint(4, 40, (1, 6))
    tgt[0, 0] = 2
    return model, clean, corrupt, tgt


def projected_loss_case(n_rows: int):
    """Seeded inputs of the fused projection + label-smoothed loss (``kernels.projected_label_smoothed_cross_entropy``,
    eps 0.1) and the reference: hidden (n_rows, 64), weight (8000, 64), targets (n_rows,), then the stock
    ``F.cross_entropy`` of the projected logits (summed) and its gradients of loss / n_rows for hidden and weight."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(5)
    hidden = torch.randn(n_rows, 64, requires_grad=True)
    weight = (torch.randn(8000, 64) * 0.2).requires_grad_()
    y = torch.randint(0, 8000, (n_rows,))
    ref = F.cross_entropy(hidden @ weight.t(), y, label_smoothing=0.1, reduction="sum")
    return hidden, weight, y, ref, torch.autograd.grad(ref / n_rows, (hidden, weight))


class SmokeRuns:
    """The series' notebooks executed once per test session on SMOKE parameters, on demand (``tests/test_notebooks``
    checks each one's claims, ``tests/test_book`` builds the SMOKE book from the same executed copies)."""

    def __init__(self, out: Path) -> None:
        self.out = out  # reports/NN_name/NN_name.ipynb, the layout `workbench book build --from-reports` reads
        self._results: dict[str, dict] = {}

    def __call__(self, path: Path) -> dict:
        from workbench.tools.book.runner import run_notebook

        if path.stem not in self._results:
            self._results[path.stem] = run_notebook(path, self.out, smoke=True, threads=1, timeout=300)
        return self._results[path.stem]


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory) -> SmokeRuns:
    return SmokeRuns(tmp_path_factory.mktemp("notebook_reports"))


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's Chromium; never a browser download
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage"]


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium driven by playwright, shared by the browser tests of the session."""
    playwright = require_module("playwright.sync_api", "pip install -e '.[dev]' (playwright drives Debian's Chromium)")
    require(Path(CHROMIUM).exists(), f"Chromium at {CHROMIUM}", "apt-get install chromium (never a browser download)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def offline_page(browser, allow: str = "file:", width: int = 1300, height: int = 900):
    """A page in a fresh context whose every request outside ``allow`` is aborted and recorded.

    ``allow`` is a URL prefix: local files by default, or the base URL of a site served on this machine
    (``workbench.tools.book.build.served``). Returns (context, page, requests that tried to leave, page errors);
    close the context when done.
    """
    context = browser.new_context(viewport={"width": width, "height": height})
    left: list[str] = []

    def route(r):
        if r.request.url.startswith(allow):
            r.continue_()
        else:
            left.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, left, errors


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Every test starts at the session's CPU thread count: a test that changes it (a command that trains with a
    card's thread count) must not leave later tests running at another (a product's rounding can depend on it)."""
    import torch

    before = torch.get_num_threads()
    yield
    after = torch.get_num_threads()
    torch.set_num_threads(before)
    assert after == before, f"the test left torch at {after} threads ({before} before)"

