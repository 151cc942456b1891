"""The workbench command: help everywhere, a tiny end-to-end run, one-line errors."""

from __future__ import annotations

import json

import pytest

from workbench.cli import main
from workbench.errors import CheckpointError


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
    assert (tmp_path / "run" / "averaged.test_2016_flickr.beam2.en.txt").exists()


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


def test_bench_quick_prints_table_and_writes_json(tmp_path, capsys, multi30k_dir, monkeypatch):
    monkeypatch.setenv("WORKBENCH_MULTI30K", str(multi30k_dir))
    assert main(["bench", "--quick", "--json", str(tmp_path / "b.json")]) == 0
    table = capsys.readouterr().out
    assert "training step vs nn.Transformer" in table and "decoding" in table
    report = json.loads((tmp_path / "b.json").read_text())
    assert set(report) >= {"machine", "torch", "device", "attention", "train_step", "capture", "decoding", "e2e", "sdpa"}
    assert [r["n"] for r in report["attention"]["rows"]] == [32, 64]
    assert all(r["ms"]["ours_fused"] > 0 and r["ms"]["nn.MultiheadAttention"] > 0 for r in report["attention"]["rows"])
    assert report["train_step"]["rows"][0]["ratio_ours_over_nn"] > 0
    assert report["decoding"]["output_tokens"] == 40 and report["decoding"]["greedy_cache_speedup"] > 0
    assert report["e2e"]["tokens_per_s"] > 0 and report["e2e"]["model_tflops_per_s"] > 0
    # the fused path really reaches a fused SDPA kernel, in training and in evaluation
    assert report["sdpa"]["train"] and report["sdpa"]["eval"]


def test_bench_one_suite_and_unknown_suite(tmp_path, capsys):
    assert main(["bench", "--quick", "--suite", "capture", "--json", "", "--print-json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "capture" in report and "attention" not in report
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "nonsense"])
