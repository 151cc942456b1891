"""The gradebook of :func:`workbench.tools.grading.grader.grade_class` as files an instructor opens: a CSV with one row per
student and item (exercise or prediction: status, the hint the student was shown), a CSV of totals with one row per
student and one column per exercise, the whole record as JSON, and a plain-text summary for the terminal."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ITEM_COLUMNS = ["student", "notebook", "file", "kind", "item", "status", "mistake", "hint"]


def item_rows(book: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per student and exercise or prediction (``ITEM_COLUMNS``); the hint is empty when it passed."""
    rows = []
    for r in book["records"]:
        base = {"student": r["student"], "notebook": r["notebook"], "file": r["file"]}
        for e in r["exercises"]:
            rows.append({**base, "kind": "exercise", "item": e["exercise"], "status": e["status"],
                         "mistake": e.get("mistake") or "", "hint": "" if e["status"] == "passed" else e["message"]})
        for p in r["predictions"]:
            rows.append({**base, "kind": "prediction", "item": p["prediction"], "status": p["status"], "mistake": "",
                         "hint": "" if p["status"] == "right" else p["message"]})
    return rows


def totals(book: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per student: each exercise's status, passed of total, predictions right of total, the notes
    (which file was read, whether each notebook ran)."""
    by_student: dict[str, dict[str, Any]] = {}
    for r in book["records"]:
        row = by_student.setdefault(r["student"], {"student": r["student"], "passed": 0, "exercises": 0,
                                                   "predictions_right": 0, "predictions": 0, "notes": []})
        for e in r["exercises"]:
            row[e["exercise"]] = e["status"]
            row["exercises"] += 1
            row["passed"] += e["status"] == "passed"
        for p in r["predictions"]:
            row[p["prediction"]] = p["status"]
            row["predictions"] += 1
            row["predictions_right"] += p["status"] == "right"
        for note in (r["note"], None if r["ran"] in (None, "ran to the end") else f"{r['notebook']}: {r['ran']}"):
            if note:
                row["notes"].append(note)
    for row in by_student.values():
        row["notes"] = "; ".join(row["notes"])
    return list(by_student.values())


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell starting so as a formula


def spreadsheet_safe(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula (a student folder named ``=HYPERLINK(...)``), prefixed
    with ``'`` so it shows as text (OWASP's advice for CSV injection); numbers and other text unchanged."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def _csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: spreadsheet_safe(v) for k, v in row.items()} for row in rows)
    return out.getvalue()


def _write_tmp(path: Path, text: str) -> Path:
    """``text`` into a hidden temporary file beside ``path``, synced; a student's text that is not valid UTF-8 (a lone
    surrogate in an error message, a file name in another encoding) is written escaped, never refused."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def write_gradebook(book: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write ``gradebook.csv`` (:func:`item_rows`), ``totals.csv`` (:func:`totals`) and ``gradebook.json`` (the whole
    record with its isolation and provenance) into ``out_dir``; returns their paths by kind. An earlier gradebook
    there is moved into ``previous-<time>/`` only once the new files are written in full."""
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = totals(book)
    items = [k for row in rows for k in row if k not in ("student", "passed", "exercises", "predictions_right",
                                                          "predictions", "notes")]
    columns = ["student", "passed", "exercises", "predictions_right", "predictions", *dict.fromkeys(items), "notes"]
    paths = {"items": out / "gradebook.csv", "totals": out / "totals.csv", "json": out / "gradebook.json"}
    texts = {"items": _csv(item_rows(book), ITEM_COLUMNS), "totals": _csv(rows, columns),
             "json": json.dumps(book, indent=1, default=str)}
    tmps: list[Path] = []
    try:
        for kind, text in texts.items():
            tmps.append(_write_tmp(paths[kind], text))
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise
    _keep_previous(out)
    for kind, tmp in zip(texts, tmps, strict=True):
        os.replace(tmp, paths[kind])
    return paths


GRADEBOOK_FILES = ("gradebook.csv", "totals.csv", "gradebook.json")


def _keep_previous(out: Path) -> None:
    """Move an earlier gradebook in ``out`` (perhaps edited by hand) into ``out/previous-YYYYmmdd-HHMMSS/``: a new
    grading never deletes one."""
    import time

    old = [out / name for name in GRADEBOOK_FILES if (out / name).exists()]
    if not old:
        return
    keep = out / f"previous-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while keep.exists():
        n += 1
        keep = out / f"previous-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    keep.mkdir()
    for path in old:
        os.replace(path, keep / path.name)


def printable(text: str) -> str:
    """``text`` with control characters (a terminal's escape sequences, carriage returns) and lone surrogates
    shown escaped: a student's error message or file name cannot rewrite or hide the instructor's summary."""
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in str(text))


def summary_table(book: dict[str, Any]) -> str:
    """Plain text for the terminal: one line per student (passed of total, predictions right, notes), then the
    exercises that did not pass with their hints (every student-made text escaped by :func:`printable`)."""
    rows = [{k: printable(v) if isinstance(v, str) else v for k, v in r.items()} for r in totals(book)]
    width = max([len(r["student"]) for r in rows] + [7])
    lines = [f"{'student':{width}s}  exercises passed  predictions right  notes"]
    for r in rows:
        lines.append(f"{r['student']:{width}s}  {r['passed']:>7d} of {r['exercises']:<6d} "
                     f"{r['predictions_right']:>7d} of {r['predictions']:<7d}  {r['notes']}")
    bad = [i for i in item_rows(book) if i["kind"] == "exercise" and i["status"] != "passed"]
    if bad:
        lines += ["", "not passed:"]
        lines += [f"  {printable(i['student']):{width}s}  {i['item']:28s} {i['status']:13s} {printable(i['hint'][:160])}"
                  for i in bad]
    lines += ["", f"isolation: {book['meta']['isolation_text']}"]
    return "\n".join(lines)
