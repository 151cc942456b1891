"""The workbench command: help everywhere, a tiny end-to-end run, one-line errors."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.errors import CheckpointError
from workbench.tools.bench.benchmark import SUITES
from workbench.tools.bench.suites import bench_precisions
from workbench.tools.cli.main import main


@pytest.mark.parametrize("command", [[], ["train"], ["translate"], ["evaluate"], ["average"], ["notebooks", "run"], ["bench"], ["info"]])
def test_help_on_every_command(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    assert "usage: workbench" in capsys.readouterr().out


def test_info_prints_parameter_count(capsys):
    assert main(["info", "--preset", "tiny", "--vocab-size", "100"]) == 0
    assert "parameters:" in capsys.readouterr().out


@pytest.mark.slow
def test_train_translate_evaluate_average(tmp_path, capsys, multi30k_dir):
    run = tmp_path / "run"
    code = main(["train", "--preset", "tiny", "--out", str(run), "--epochs", "2", "--limit", "300", "--vocab-size", "500",
                 "--max-tokens", "1500", "--data-dir", str(multi30k_dir)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["epochs_run"] == 2 and (run / "last.pt").exists()
    assert main(["translate", "--checkpoint", str(run), "--beam", "2", "Ein Mann fährt Fahrrad.", ""]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1] == ""  # an empty sentence translates to an empty line
    assert main(["average", str(run), "--last", "2"]) == 0
    assert capsys.readouterr().out.strip().endswith("averaged.pt")
    assert main(["evaluate", "--checkpoint", str(run / "averaged.pt"), "--split", "test_2016_flickr", "--limit", "20",
                 "--beam", "2", "--json", "--data-dir", str(multi30k_dir)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"bleu", "signature", "split", "n_sentences"} <= set(result) and result["n_sentences"] == 20
    assert result["signature"].startswith("nrefs:1|case:mixed")
    assert (tmp_path / "run" / "averaged.test_2016_flickr.first20.beam2.en.txt").exists()  # a part: named so


def _train_parser():
    from workbench.tools.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["train"]


def test_train_options_are_the_run_config_fields():
    """Every field of RunConfig and TrainConfig is a `train` option with the field's comment as its help and the
    field's default; preset and architecture choices come from the preset table and the registry."""
    from workbench.model.config import PRESETS, field_docs
    from workbench.model.registry import architectures
    from workbench.translation.run import RunConfig
    from workbench.translation.train_config import TrainConfig

    docs = {**field_docs(RunConfig), **field_docs(TrainConfig)}
    fields = {f.name: f for f in RunConfig.flat_fields()}
    options = {a.dest: a for a in _train_parser()._actions if a.dest in fields}
    assert options.keys() == fields.keys()
    for name, action in options.items():
        assert docs[name][1], f"{name} has no comment"
        assert docs[name][1].replace("%", "%%") in action.help
        assert action.default == fields[name].default, name
    assert options["preset"].choices == list(PRESETS) and options["arch"].choices == architectures()
    assert options["epochs"].default is None  # no epoch limit unless asked
    assert "--warmup" in options["warmup_steps"].option_strings  # the README's and the cards' spelling


def test_train_without_a_budget_is_refused_in_one_line(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), "--preset", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a budget" in err and "--max-minutes" in err
    assert not (tmp_path / "run").exists()


def test_run_argv_gives_back_the_run():
    from workbench.tools.cli.run_options import run_argv, run_config_from_args
    from workbench.translation.run import RunConfig

    run = RunConfig.from_flat(arch="rnn", preset="tiny", limit=30, train_src="a.de", train_tgt="a.en", val_src="v.de",
                              val_tgt="v.en", vocab_size=500,
                              max_minutes=2.5, warmup_steps=80, precision="fp32", compile=True, grad_clip=None, patience=3)
    args = _train_parser().parse_args(["--out", "x", *run_argv(run)])
    assert run_config_from_args(args) == run
    assert run_argv(run)[:2] == ["--src", "de"]  # the run's own settings are spelt out even at their defaults


def test_shipped_cards_train_commands_still_parse_and_are_their_named_recipes():
    """`workbench pretrained reproduce` runs the command on each card: it must still give the card's run, which is
    the card's named recipe (with the epoch limit of 1000 it carried, never reached), as the run itself recorded."""
    import dataclasses
    import shlex

    from workbench.tools.cli.main import parse_args
    from workbench.tools.cli.run_options import run_config_from_args
    from workbench.translation import shipped
    from workbench.translation.run import RECIPES, recipe

    for name in shipped.list_pretrained():
        card = shipped.read_card(name)
        argv = shlex.split(card["reproduce"]["train"])
        run = run_config_from_args(parse_args(argv[argv.index("train"):])[1])
        assert run.arch == card["arch"]
        assert card["recipe"] in RECIPES and run == recipe(card["recipe"], epochs=run.train.epochs)
        assert run.train.epochs is None or card["training"]["epochs"] < run.train.epochs
        trained = {k: v for k, v in card["training"]["train_config"].items() if k != "epochs"}
        named = {k: v for k, v in dataclasses.asdict(RECIPES[card["recipe"]].train).items() if k != "epochs"}
        # what fit() recorded is the recipe, field by field; the cards predate TrainConfig's precision, which replaced
        # its amp flag (autocast was never on for these CPU runs)
        assert set(trained) ^ set(named) <= {"amp", "precision"}
        assert {k: v for k, v in trained.items() if k in named} == {k: v for k, v in named.items() if k in trained}
        # the build's averaging windows need that many snapshots kept, or reproducing would skip some
        assert run.train.keep_checkpoints >= max(card.get("average_windows", [5]))


def test_a_recipe_is_the_default_and_options_beside_it_override_only_their_fields():
    from workbench.tools.cli.main import parse_args
    from workbench.tools.cli.run_options import run_config_from_args
    from workbench.translation.run import RECIPES

    run = run_config_from_args(parse_args(["train", "--out", "x", "--recipe", "cpu-small"])[1])
    assert run == RECIPES["cpu-small"]
    changed = run_config_from_args(parse_args(["--debug", "train", "--max-minutes", "41", "--out", "x",
                                               "--recipe", "cpu-gru", "--dropout", "none"])[1])
    assert changed.arch == "rnn" and changed.train.max_minutes == 41.0 and changed.dropout is None
    assert changed.train.keep_checkpoints == RECIPES["cpu-gru"].train.keep_checkpoints
    with pytest.raises(SystemExit):
        parse_args(["train", "--out", "x", "--recipe", "cpu-huge"])


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["translate", "--checkpoint", str(tmp_path / "missing.pt"), "hallo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "bad.pt")]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
    assert main(["average", str(tmp_path)]) == 2
    with pytest.raises(CheckpointError):  # --debug lets the real exception (and its traceback) through
        main(["--debug", "translate", "--checkpoint", str(tmp_path / "missing.pt"), "hallo"])


def _check_race(rounds, median_s):
    """At least 5 rounds, the order reversed every round, and each median taken over those rounds."""
    assert len(rounds) >= 5
    first = rounds[0]["order"]
    assert [r["order"] for r in rounds] == [first if i % 2 == 0 else first[::-1] for i in range(len(rounds))]
    assert set(first) == set(median_s)
    for name, value in median_s.items():
        assert value == pytest.approx(statistics.median(r["s"][name] for r in rounds), rel=1e-9)


def test_bench_quick_prints_table_and_writes_json(tmp_path, capsys, multi30k_dir, monkeypatch):
    monkeypatch.setenv("WORKBENCH_MULTI30K", str(multi30k_dir))
    assert main(["bench", "--quick", "--json", str(tmp_path / "b.json")]) == 0
    table = capsys.readouterr().out
    report = json.loads((tmp_path / "b.json").read_text())
    # where the figures come from
    assert report["suites"] == list(SUITES) and set(report) >= set(SUITES)
    assert report["torch"] == torch.__version__ and report["command"] == sys.argv
    assert {"machine", "cpu_model", "threads", "device", "commit", "dirty", "started_utc", "finished_utc"} <= set(report)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parents[1], capture_output=True, text=True)
    assert report["commit"] == (head.stdout.strip() if head.returncode == 0 else None)

    a = report["attention"]["rows"]
    assert [r["n"] for r in a] == [32, 64]
    for r in a:
        _check_race(r["rounds"], {k: v / 1e3 for k, v in r["ms"].items()})
        assert r["fused_over_nn"] == pytest.approx(r["ms"]["ours_fused"] / r["ms"]["nn.MultiheadAttention"])

    precisions = bench_precisions(torch.device("cpu"))  # fp32, and bf16 on a CPU with bf16 matrix units
    rows = report["train_step"]["rows"]
    assert report["train_step"]["precisions"] == list(precisions)
    assert [(t["preset"], t["precision"]) for t in rows] == [("tiny", p) for p in precisions]
    for t in rows:
        _check_race(t["rounds"], t["step_s"])
        assert t["ratio_ours_over_nn"] == pytest.approx(t["step_s"]["ours"] / t["step_s"]["nn.Transformer"])
        line = next(ln for ln in table.splitlines() if ln.split()[:2] == ["tiny", t["precision"]])
        assert f"{t['ratio_ours_over_nn']:.2f}" in line
    peaks = report["matmul_peak_tflops"]
    assert peaks["fp32"] > 0 and (peaks["bf16"] > 0 if "bf16" in precisions else peaks["bf16"] is None)
    pr = report["precision"]
    if "bf16" in precisions:
        (t,) = pr["train_step"]
        _check_race(t["rounds"], t["step_s"])
        assert t["bf16_speedup"] == pytest.approx(t["step_s"]["fp32"] / t["step_s"]["bf16"])
        assert t["mfu"]["bf16"] == pytest.approx(t["tflops_per_s"]["bf16"] / peaks["bf16"])
        assert pr["auto"]["precision"] in ("fp32", "bf16") and "ms in bf16" in pr["auto"]["reason"]
        assert f"speed-up {t['bf16_speedup']:.2f}x" in table
    else:
        assert pr["skipped"].startswith("no bf16 matrix units")

    c = report["capture"]
    _check_race(c["forward_rounds"], {k: v / 1e3 for k, v in c["forward_ms"].items()})
    _check_race(c["train_rounds"], {k: v / 1e3 for k, v in c["train_fwd_bwd_ms"].items()})
    assert set(c["forward_ms"]) == {"without_hook_points", "hook_points_no_hooks", "capture_all"}
    f = c["forward_ms"]
    assert c["inactive_overhead_pct"] == pytest.approx(100 * (f["hook_points_no_hooks"] / f["without_hook_points"] - 1))

    d = report["decoding"]
    assert d["output_tokens"] == 40
    for name in ("greedy", "beam4"):
        medians = {k: statistics.median(r["s"][k] for r in d[f"{name}_rounds"]) for k in ("cached", "uncached")}
        _check_race(d[f"{name}_rounds"], medians)
        assert d[f"{name}_cached_sent_per_s"] == pytest.approx(d["sentences"] / medians["cached"])
        assert d[f"{name}_cache_speedup"] == pytest.approx(medians["uncached"] / medians["cached"])

    e = report["e2e"]
    assert e["preset"] == "tiny" and e["pairs"] == 600
    assert e["precision"] in precisions and e["precision"] in e["precision_reason"]  # what fit's auto chose, and why
    assert 0 < e["src_padding_fraction"] < 0.5 and 0 < e["tgt_padding_fraction"] < 0.5  # sorted by length: little
    # the fused path really reaches a fused SDPA kernel, and the reference the same one, with the same dropout calls
    assert any("flash" in k or "efficient" in k for k in report["sdpa"]["train"])
    assert report["sdpa"]["train"] == report["sdpa"]["nn.Transformer_train"]


def test_bench_one_suite_and_unknown_suite(tmp_path, capsys):
    assert main(["bench", "--quick", "--suite", "capture", "--json", "", "--print-json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "capture" in report and "attention" not in report
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "nonsense"])


def test_notebooks_copy_command(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["notebooks", "copy", "--help"])
    assert info.value.code == 0 and "--force" in capsys.readouterr().out
    target = tmp_path / "lessons"
    assert main(["notebooks", "copy", str(target), "--only", "05"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in target.iterdir()) == ["05_masked_attention.ipynb", "05_masked_attention.py"]
    assert str(target / "05_masked_attention.ipynb") in out and f"--dir {target}" in out
    (target / "05_masked_attention.ipynb").write_text("{}")  # the user's edits
    assert main(["notebooks", "copy", str(target), "--only", "05"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "05_masked_attention" in err and "--force" in err
    assert (target / "05_masked_attention.ipynb").read_text() == "{}"
    assert main(["notebooks", "copy", str(target), "--only", "05", "--force"]) == 0
    assert (target / "05_masked_attention.ipynb").read_text() != "{}"


def test_evaluate_a_shipped_model_decodes_with_its_cards_length_penalty(capsys, multi30k_dir):
    from workbench.translation.shipped import card_alpha, read_card

    args = ["evaluate", "--checkpoint", "small-de-en", "--split", "val", "--limit", "8", "--data-dir",
            str(multi30k_dir), "--device", "cpu", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["alpha"] == card_alpha(read_card("small-de-en"))
    assert main([*args, "--alpha", "0.6"]) == 0
    assert json.loads(capsys.readouterr().out)["alpha"] == 0.6


def test_an_unforeseen_error_is_one_line_and_the_traceback_is_one_flag_away(capsys, monkeypatch):
    """The probe's finding: a library's own error (torch's, for a vocabulary of 0) printed a raw traceback."""
    import workbench.model.transformer as transformer

    def library_error(*_a, **_k):
        raise ValueError("a library's own complaint about vocab_size=7")

    monkeypatch.setattr(transformer, "build_model", library_error)
    assert main(["info", "--preset", "tiny", "--vocab-size", "7"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "--debug" in err and "vocab_size=7" in err
    with pytest.raises(ValueError):
        main(["--debug", "info", "--preset", "tiny", "--vocab-size", "7"])


@pytest.mark.parametrize("size", ["0", "4", "50000000"])
def test_info_refuses_a_vocabulary_size_no_model_can_have(capsys, size):
    """A size of 0 reached torch's own error; 5*10^7 would ask for gigabytes of embeddings before any word."""
    assert main(["info", "--preset", "tiny", "--vocab-size", size]) == 2
    err = capsys.readouterr().err
    assert f"--vocab-size {size} is out of range" in err and "8000" in err


def test_average_never_replaces_a_file_it_was_not_asked_to(tmp_path, capsys):
    """The probe's finding: `average RUN --out FILE` replaced any file (training text, the run's best.pt)."""
    import workbench as wb
    from workbench.translation.checkpoint import save_checkpoint
    from workbench.translation.tokenizer import WordTokenizer

    run = tmp_path / "run"
    tok = WordTokenizer.train([("ein hund", "a dog")])
    model = wb.build_model(wb.preset("tiny"), tok.src_vocab_size, tok.tgt_vocab_size)
    for step in (1, 2):
        save_checkpoint(run / f"ckpt_step{step:07d}.pt", model, tok, step=step)
    mine = tmp_path / "train.de"
    mine.write_text("meine Daten\n")
    assert main(["average", str(run), "--out", str(mine)]) == 2
    assert "already exists" in capsys.readouterr().err and mine.read_text() == "meine Daten\n"
    assert main(["average", str(run), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["average", str(run)]) == 0 and main(["average", str(run)]) == 0  # its own averaged.pt: replaced
    assert main(["average", str(run), "--out", str(mine), "--force"]) == 0  # asked: replaced
    assert mine.read_bytes()[:2] != b"me"


def test_pretrained_build_refuses_a_folder_that_holds_files(tmp_path, capsys):
    """The probe's finding: `pretrained build --out` wrote into any folder, and a build killed partway left new
    weights beside an old card. Refused before any work, unless --force."""
    out = tmp_path / "model"
    out.mkdir()
    (out / "card.json").write_text("{}")
    argv = ["pretrained", "build", str(tmp_path / "no-run"), "--name", "x", "--out", str(out), "--train-command", "t",
            "--title", "t"]
    assert main(argv) == 2
    assert "not empty" in capsys.readouterr().err and (out / "card.json").read_text() == "{}"
    assert main([*argv, "--force"]) != 0  # past the folder check: the run folder is missing
    assert "not empty" not in capsys.readouterr().err


def test_evaluate_in_a_folder_it_cannot_write_still_scores(tmp_path, capsys, monkeypatch, multi30k_dir):
    """The probe's finding: evaluating a checkpoint in a read-only folder failed after decoding, with no BLEU."""
    import workbench as wb
    import workbench.translation.files as files
    from workbench.translation.checkpoint import save_checkpoint

    model, tok = wb.pretrained("small-de-en")[:2]
    save_checkpoint(tmp_path / "model.pt", model, tok)

    def read_only(path, *_a, **_k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(files, "atomic_write_text", read_only)
    args = ["evaluate", "--checkpoint", str(tmp_path / "model.pt"), "--split", "val", "--limit", "4", "--beam", "1",
            "--data-dir", str(multi30k_dir), "--device", "cpu"]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n_sentences"] == 4 and result["bleu"] >= 0 and "hypotheses" not in result
    assert "not written" in result["hypotheses_error"] and "Permission denied" in result["hypotheses_error"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "sacreBLEU" in out and "were not written" in out


def test_pretrained_reproduce_refuses_in_its_own_words_and_passes_data_dir_and_resume(tmp_path, monkeypatch, capsys):
    import workbench.tools.cli.main as cli

    seen: list[list[str]] = []
    monkeypatch.setattr(cli, "main", lambda argv: seen.append(list(argv)) or 1)  # the inner `train`, not run here
    out = tmp_path / "rep"
    (out / "run").mkdir(parents=True)
    (out / "run" / "last.pt").write_bytes(b"a run's checkpoint")
    assert main(["pretrained", "reproduce", "gru-de-en", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench pretrained: error:") and "--resume" in err and "--overwrite" not in err, err
    assert (out / "run" / "last.pt").read_bytes() == b"a run's checkpoint" and not seen
    data = tmp_path / "data"
    data.mkdir()
    main(["pretrained", "reproduce", "gru-de-en", "--out", str(out), "--resume", "--data-dir", str(data)])
    assert seen[-1][0] == "train" and seen[-1][seen[-1].index("--out") + 1] == str(out / "run")
    assert seen[-1][seen[-1].index("--data-dir") + 1] == str(data) and "--resume" in seen[-1]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["pretrained", "reproduce", "gru-de-en", "--out", str(blocker / "sub")]) == 2
    assert "workbench pretrained: error: --out" in capsys.readouterr().err and len(seen) == 1


def test_book_slides_without_reports_suggests_what_slides_can_do(tmp_path, capsys):
    assert main(["book", "slides", "--from-reports", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"workbench notebooks run --out {tmp_path}" in err and "drop --from-reports" not in err, err


def test_resume_keeps_the_runs_own_settings(tmp_path, capsys, multi30k_dir):
    """A resume that names only the budget continues the run as it started (preset, data, vocabulary); one that
    names other data or another model is refused before anything changes."""
    run = tmp_path / "run"
    first = ["train", "--out", str(run), "--preset", "tiny", "--max-steps", "2", "--limit", "200", "--vocab-size", "300",
             "--max-tokens", "1500", "--no-eval-bleu", "--data-dir", str(multi30k_dir)]
    assert main(first) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for other in (["--src", "cs", "--tgt", "fr"], ["--preset", "small"], ["--vocab-size", "400"], ["--limit", "50"]):
        assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", *other]) == 2
        err = capsys.readouterr().err
        assert "--resume: the run in" in err and "was started with" in err, err
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # nothing touched
    assert main(["train", "--out", str(run), "--resume", "--max-steps", "4", "--data-dir", str(multi30k_dir)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["src"] == "de" and summary["tgt"] == "en" and summary["train_pairs"] == 200, summary
    assert json.loads((run / "complete.json").read_text())["step"] == 4


def test_course_commands_refuse_an_empty_folder_a_bad_port_and_a_data_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["notebooks", "copy", ""]) == 2  # an unset $DEST: not the current folder
    assert "the folder to copy into is empty" in capsys.readouterr().err and not list(tmp_path.iterdir())
    for port in ("99999", "-1", "http"):
        with pytest.raises(SystemExit):
            main(["book", "serve", "--port", port])
        assert "is not a port" in capsys.readouterr().err
    (tmp_path / "data.gz").write_bytes(b"x")
    assert main(["notebooks", "run", "--smoke", "--only", "02", "--out", str(tmp_path / "o"),
                 "--data-dir", str(tmp_path / "data.gz")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err and not (tmp_path / "o").exists()
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "index.html").write_text("<html></html>")
    assert main(["book", "serve", "--dir", str(tmp_path / "book"), "--bind", "999.1.1.1", "--port", "0"]) == 2
    assert "give --bind an address of this machine" in capsys.readouterr().err
