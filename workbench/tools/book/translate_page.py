"""The book's page "Translate in your browser": its assets, built at book-build time, and the page itself.

:func:`build_assets` writes ``_static/translate/``:

* ONNX Runtime Web (``ort.wasm.bundle.min.mjs`` and its WebAssembly, ``ort-wasm-simd-threaded.wasm``) and the BPE
  tokenizer of ``@huggingface/tokenizers`` (``tokenizers.min.mjs``), from npm: :func:`node_modules` runs ``npm ci``
  on ``workbench/web/package-lock.json`` once, into a cache folder named by the lock file's hash (outside the
  checkout), so a build installs exactly the committed versions and later builds install nothing;
* the page's own script (``workbench/web/translate.js``) and style;
* ``model/``: the shipped ``small-de-en`` exported by :func:`workbench.bridges.onnx.to_onnx` with int8 weights.

:func:`add_page` does that inside a book's source folder and writes ``translate.md``; without Node.js (``node`` and
``npm`` on the PATH) it logs one line and the book is built without the page. :func:`standalone_page` writes the
same widget as a lone ``index.html`` (for tests and the benchmark, which need no book). Nothing is fetched when the
page is read: every file it loads sits in ``_static/translate/``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

from workbench.errors import BookError

log = logging.getLogger(__name__)

WEB_SRC = Path(__file__).resolve().parents[2] / "web"
PAGE = "translate"  # the page's name in the book (translate.md -> translate.html)
EMBED = "_static/translate/embed.html"  # the widget alone, which lessons 10 and 16 show in an iframe
TITLE = "Translate in your browser"
NPM_FILES = {  # copied into _static/translate/: (package folder in node_modules, file in it)
    "ort.wasm.bundle.min.mjs": ("onnxruntime-web", "dist/ort.wasm.bundle.min.mjs"),
    "ort-wasm-simd-threaded.wasm": ("onnxruntime-web", "dist/ort-wasm-simd-threaded.wasm"),
    "tokenizers.min.mjs": ("@huggingface/tokenizers", "dist/tokenizers.min.mjs"),
}
OWN_FILES = ("translate.js", "translate.css")


class NodeMissing(BookError):
    """``node`` or ``npm`` is not on the PATH: the page cannot be built (the rest of the book can)."""


def npm_cache_dir() -> Path:
    """Where :func:`node_modules` keeps its installs: ``$WORKBENCH_NPM_CACHE``, else the user cache folder."""
    env = os.environ.get("WORKBENCH_NPM_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("attention-workbench")) / "npm"


def node_modules(cache: str | Path | None = None) -> Path:
    """``node_modules`` of ``workbench/web/package-lock.json``, installed with ``npm ci`` on first use.

    Raises:
        NodeMissing: no ``node`` or ``npm`` on the PATH.
        BookError: ``npm ci`` failed (its last lines are in the message).
    """
    npm, node = shutil.which("npm"), shutil.which("node")
    if not npm or not node:
        raise NodeMissing("Node.js is not installed (no node/npm on the PATH): install it (apt-get install nodejs npm) "
                          f"to build the page '{TITLE}'")
    lock, package = WEB_SRC / "package-lock.json", WEB_SRC / "package.json"
    key = hashlib.sha256(lock.read_bytes() + package.read_bytes()).hexdigest()[:16]
    root = Path(cache) if cache is not None else npm_cache_dir()
    folder = root / key
    if (folder / ".complete").exists():
        return folder / "node_modules"
    work = root / f"{key}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copy2(package, work / "package.json")
    shutil.copy2(lock, work / "package-lock.json")
    log.info("npm ci for the page '%s' (once per lock file, into %s)", TITLE, folder)
    # --ignore-scripts: the page needs no install script (protobufjs' only prints a notice)
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"], cwd=work,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise BookError(f"npm ci failed for {lock} (is the npm registry reachable?):\n{tail}")
    (work / ".complete").write_text(key + "\n", encoding="utf-8")
    if folder.exists():  # another build finished first: keep its copy
        shutil.rmtree(work, ignore_errors=True)
    else:
        os.replace(work, folder)
    return folder / "node_modules"


def build_assets(static: str | Path, model: str = "small-de-en", cache: str | Path | None = None) -> dict[str, int]:
    """Write ``static/translate/`` (the page's scripts, WebAssembly and model); returns each file's size in bytes.

    Raises:
        NodeMissing: no Node.js to install the page's JavaScript with.
    """
    from workbench.bridges.onnx import to_onnx
    from workbench.translation.shipped import pretrained

    modules = node_modules(cache)
    out = Path(static) / "translate"
    out.mkdir(parents=True, exist_ok=True)
    for name, (package, path) in NPM_FILES.items():
        shutil.copy2(modules / package / path, out / name)
    (out / "LICENSES.txt").write_text(_licences(modules), encoding="utf-8")
    for name in OWN_FILES:
        shutil.copy2(WEB_SRC / name, out / name)
    net, tokenizer, card = pretrained(model)
    to_onnx(net, tokenizer, out / "model", weights="int8", card=card)
    return {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}


def _licences(modules: Path) -> str:
    """Name, version and licence of each npm package the page ships, with its LICENSE text where it has one."""
    import json

    parts = []
    for package in sorted({p for p, _ in NPM_FILES.values()}):
        meta = json.loads((modules / package / "package.json").read_text(encoding="utf-8"))
        text = next((f.read_text(encoding="utf-8") for f in sorted((modules / package).glob("LICEN[CS]E*"))), "")
        parts.append(f"{meta['name']} {meta['version']} ({meta.get('license', 'see the package')}), "
                     f"{meta.get('homepage') or meta.get('repository', '')}\n{text}".rstrip())
    return "\n\n".join(parts) + "\n"


def widget_html(static: str = "_static") -> str:
    """The widget's HTML, with the tags that load its style and script from ``static``/translate/."""
    body = (WEB_SRC / "widget.html").read_text(encoding="utf-8").strip()
    # a page opened from file:// never runs a module script (Chromium refuses it), so a plain one says how to serve
    note = ('<script>if (location.protocol === "file:") { document.getElementById("wb-file-note").hidden = false; '
            'document.getElementById("wb-status").textContent = "not available from file:// (see above)"; }</script>')
    return (f'<link rel="stylesheet" href="{static}/translate/translate.css">\n{body}\n{note}\n'
            f'<script type="module" src="{static}/translate/translate.js"></script>')


def page_markdown(sizes: dict[str, int]) -> str:
    """The book page: what runs, the widget, and the sizes of what the page loads (from this build)."""
    mb = sum(sizes.values()) / 1e6
    wasm = sizes.get("ort-wasm-simd-threaded.wasm", 0) / 1e6
    weights = sizes.get("model/weights.bin", 0) / 1e6
    return f"""# {TITLE}

Type a German sentence: the shipped `small-de-en` translates it here, in your browser, with no Python and no server
work. Its encoder and one decoder step (with the key/value cache) were exported to ONNX by
`workbench export small-de-en DIR --to onnx`, and ONNX Runtime Web runs them in WebAssembly; the BPE pieces come from
the same tokenizer JSON as in Python (read by `@huggingface/tokenizers`). Greedy search and beam search (beam 4, the
length penalty $\\alpha$ of the slider, $((5 + |Y|) / 6)^\\alpha$) follow `workbench.translation.decode` step for step.

The weights are stored as int8 with one scale per output channel (a quarter of float32) and turned back into
float32 when the model loads, so the arithmetic is float32. The heatmap shows one cross-attention head: each output
piece (a row) over the source pieces (the columns); the second heatmap shows every head of the layer for one output
word. Untick heads to switch them off (their output replaced by zeros, as `wb.ablate_heads` does) and translate again.

The page loads {mb:.1f} MB once (the WebAssembly runtime {wasm:.1f} MB, the weights {weights:.1f} MB), all from this
book's `_static/translate/` folder. Browsers refuse WebAssembly to a page opened from the file system: read it served,
`workbench book serve --dir book`.

{widget_html()}
"""


def add_page(src: str | Path, cache: str | Path | None = None) -> str | None:
    """Build the page into a book's Sphinx source folder; its name, or None (one logged line) without Node.js."""
    src = Path(src)
    try:
        sizes = build_assets(src / "_static", cache=cache)
    except NodeMissing as exc:
        log.warning("book: built without the page '%s': %s", TITLE, exc)
        return None
    (src / f"{PAGE}.md").write_text(page_markdown(sizes), encoding="utf-8")
    # the widget alone, for the lessons that embed it in an iframe (EMBED, relative to a page of the book)
    (src / "_static" / "translate" / "embed.html").write_text(_html_page(widget_html(".."), "../plotly.min.js"),
                                                               encoding="utf-8")
    return PAGE


def standalone_page(folder: str | Path, cache: str | Path | None = None) -> dict[str, int]:
    """The widget alone as ``folder/index.html`` (with plotly.js), for tests and benchmarks; returns the sizes of
    the page's own assets (plotly.js, already part of every book page, not counted)."""
    import plotly

    folder = Path(folder)
    sizes = build_assets(folder / "_static", cache=cache)
    shutil.copy2(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", folder / "_static" / "plotly.min.js")
    (folder / "index.html").write_text(_html_page(widget_html(), "_static/plotly.min.js", heading=True),
                                       encoding="utf-8")
    return sizes


def _html_page(widget: str, plotly_js: str, heading: bool = False) -> str:
    title = f"<h1>{TITLE}</h1>\n" if heading else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{TITLE}</title>
<script src="{plotly_js}"></script></head>
<body style="font-family: sans-serif">{title}
{widget}
</body></html>
"""


__all__ = ["NodeMissing", "add_page", "build_assets", "node_modules", "page_markdown", "standalone_page"]
