"""The benchmark compares like with like: the reference's dropout and kernels, alternating races, a real baseline
for the hook points, and reports that say where they come from. (No timing is asserted here.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.inspect.capture import HookPoint, hooks_remaining
from workbench.tools import provenance
from workbench.tools.bench import benchmark
from workbench.tools.bench import suites as bench_suites
from workbench.tools.bench.probes import sdpa_kernels
from workbench.tools.bench.rivals import NNTransformer, dropout_sites, without_hook_points
from workbench.tools.bench.suites import race, random_batch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("cfg", [wb.preset("tiny", dropout=0.1), wb.preset("small"), wb.preset("small", norm_first=True),
                                 wb.preset("tiny", dropout=0.2, attn_dropout=0.1)],
                         ids=["tiny-p0.1", "small", "small-pre-LN", "tiny-attn-dropout"])
def test_reference_has_our_dropout_sites_and_parameter_count(cfg):
    ours, ref = wb.build_model(cfg, 300, 300), NNTransformer(cfg, 300)
    sites = dropout_sites(ours)
    # embeddings 2, encoder layer 3 (attention out, feed-forward inner, feed-forward out), decoder layer 4
    assert sites["activations"] == [cfg.dropout] * (2 + 3 * cfg.n_enc_layers + 4 * cfg.n_dec_layers)
    assert sites["attention_weights"] == [cfg.attn_dropout] * (cfg.n_enc_layers + 2 * cfg.n_dec_layers)
    assert dropout_sites(ref) == sites
    assert sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in ours.parameters())


def test_reference_dispatches_our_attention_kernel_and_dropout_calls():
    """Profiled on tiny with dropout on, both models as built (each with ``nn.Dropout``): the same fused SDPA kernels
    (by name and count) and as many dropout *sites* run (``nn.Dropout`` module calls). It does not compare how the
    masks are drawn: in training ours draws them with a cheaper CPU kernel (``kernels.py``), which the as-trained
    ratio includes and the model-only ratio leaves out."""
    torch.manual_seed(0)
    cfg = wb.preset("tiny", dropout=0.1)
    src, tgt = random_batch(300, 8, 9, 8, torch.device("cpu"))
    ours = sdpa_kernels(wb.build_model(cfg, 300, 300), src, tgt, True, torch.device("cpu"))
    ref = sdpa_kernels(NNTransformer(cfg, 300), src, tgt, True, torch.device("cpu"))
    # counted by nn.Dropout module calls, not aten::dropout: ours draw CPU masks without that op (kernels.py); the
    # same 16 sites are required, and `ref == ours` below still compares the two models count for count
    assert ours["dropout"] == 2 + 3 * 2 + 4 * 2
    fused = [k for k in ours if "flash" in k or "efficient" in k or "cudnn" in k]
    assert fused, f"our training forward reached no fused attention kernel: {ours}"
    assert ref == ours


def test_race_alternates_the_order_and_takes_medians():
    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    result = race(fns, 6, torch.device("cpu"))
    assert calls == ["a", "b"] + ["a", "b", "b", "a"] * 3  # one warm-up each, then alternating rounds
    assert [r["order"] for r in result["rounds"]] == [["a", "b"], ["b", "a"]] * 3
    for k in fns:
        times = sorted(r["s"][k] for r in result["rounds"])
        assert result["median_s"][k] == pytest.approx((times[2] + times[3]) / 2)
    with pytest.raises(ValueError, match="at least 5"):
        race(fns, 4, torch.device("cpu"))


@pytest.mark.parametrize("norm_first", [False, True])
def test_without_hook_points_is_the_same_model_minus_the_taps(norm_first):
    torch.manual_seed(0)
    model = wb.build_model(wb.preset("tiny", dropout=0.1, norm_first=norm_first), 300, 300)
    bare = without_hook_points(model)
    assert any(isinstance(m, HookPoint) for m in model.modules())
    assert not any(isinstance(m, HookPoint) for m in bare.modules())
    assert bare.state_dict().keys() == model.state_dict().keys()
    src, tgt = random_batch(300, 8, 9, 8, torch.device("cpu"))
    model.eval()
    bare.eval()
    with torch.no_grad():
        assert torch.equal(bare(src, tgt), model(src, tgt))
    for m in (model, bare):
        m.train()
        torch.manual_seed(1)  # the same dropout masks
        m(src, tgt).sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), bare.named_parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name
    with wb.capture_attention(model) as cache:  # the original keeps its hook points
        model(src, tgt)
    assert ("dec.cross", 1) in cache and hooks_remaining(model) == 0
    with pytest.raises(NotImplementedError):
        bare.decode(tgt[:, :1], bare.encode(src), bare.src_mask(src), cache=bare.init_cache())


def test_report_says_where_it_comes_from(tmp_path):
    report = benchmark.run(["sdpa"], quick=True, device="cpu", command=["workbench", "bench", "--suite", "sdpa"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout: the report names its commit
        assert report["commit"] == head.stdout.strip() and isinstance(report["dirty"], bool)
    else:
        assert report["commit"] is None
    assert report["command"] == ["workbench", "bench", "--suite", "sdpa"]
    assert report["torch"] == torch.__version__ and report["threads"] == torch.get_num_threads()
    assert report["started_utc"] <= report["finished_utc"] and report["suites"] == ["sdpa"]
    assert set(report["sdpa"]) == {"train", "eval", "nn.Transformer_train", "suite_seconds"}
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}  # not a checkout


def test_train_step_suite_races_the_presets_asked_for():
    from workbench.tools.cli.main import parse_args

    args = parse_args(["bench", "--suite", "train_step", "--preset", "tiny", "--quick"])[1]
    assert args.presets == ["tiny"]
    report = benchmark.run(args.suite, quick=True, device="cpu", command=["workbench", "bench"], presets=args.presets)
    assert {r["preset"] for r in report["train_step"]["rows"]} == {"tiny"}  # one row per number format
    row = report["train_step"]["rows"][0]
    assert row["ratio_ours_over_nn"] == row["step_s"][row["best"]["ours"]] / row["step_s"][row["best"]["nn.Transformer"]]


# -- bench/translate_multi30k.py: the documented recipe, validation first, test once --------------------------------
def _script():
    spec = importlib.util.spec_from_file_location("translate_multi30k", REPO / "bench" / "translate_multi30k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOC_PAGES = REPO / "workbench" / "book_src"  # the book's pages: the command line and benchmarks moved there


def _readme_command(starts: str, marker: str | None = None) -> list[str]:
    """The documented command line (the book's command-line and benchmarks pages) that starts with ``starts`` (and,
    if given, carries the comment ``marker``)."""
    lines = [ln for page in ("command-line.md", "benchmarks.md")
             for ln in (DOC_PAGES / page).read_text(encoding="utf-8").splitlines()]
    for i, line in enumerate(lines):
        if line.startswith(starts) and (marker is None or any(marker in x for x in lines[i : i + 4])):
            parts = [line]
            while parts[-1].split("#")[0].rstrip().endswith("\\"):
                i += 1
                parts.append(lines[i])
            return shlex.split(" ".join(p.split("#")[0].rstrip().rstrip("\\") for p in parts))
    raise AssertionError(f"no documented command starting with {starts!r}")


def test_translate_benchmark_trains_the_readme_recipe():
    """The benchmark, the README's command and RECIPES["cpu-small"] are one run; the README's benchmark command
    changes nothing but where results go."""
    from workbench.tools.cli.main import parse_args
    from workbench.tools.cli.run_options import run_config_from_args
    from workbench.translation.run import RECIPES

    script = _script()
    defaults = script.build_parser().parse_args([])
    ours = run_config_from_args(parse_args(script.train_argv(defaults))[1])
    readme = run_config_from_args(parse_args(_readme_command("workbench train --recipe cpu-small")[1:])[1])
    assert ours == readme == script.run_config(defaults) == RECIPES["cpu-small"]
    shorter = script.build_parser().parse_args(["--minutes", "41"])
    assert run_config_from_args(parse_args(script.train_argv(shorter))[1]).train.max_minutes == 41.0
    # --precision changes the recipe's number format and nothing else, in the command trained and the run judged
    bf16 = script.build_parser().parse_args(["--precision", "bf16"])
    trained = run_config_from_args(parse_args(script.train_argv(bf16))[1])
    assert trained == script.run_config(bf16) == dataclasses.replace(
        RECIPES["cpu-small"], train=dataclasses.replace(RECIPES["cpu-small"].train, precision="bf16"))
    invoked = vars(script.build_parser().parse_args(_readme_command("python bench/translate_multi30k.py")[2:]))
    assert {k: v for k, v in invoked.items() if v != vars(defaults)[k]}.keys() <= {"out", "json"}


@pytest.mark.parametrize("best", ["last checkpoint", "average of the last 5 step snapshots"])
def test_translate_benchmark_judges_the_run_as_the_release_does(best, tmp_path, monkeypatch):
    """The benchmark calls the release's one weight-choice rule on val and scores the chosen weights, rounded to
    float16 as shipped, with the release's val-then-test scoring: test is read only for that one call."""
    from workbench.tools import release
    from workbench.translation import checkpoint, data

    val, test = [("ein hund", "a dog")], [("eine katze", "a cat")]
    monkeypatch.setattr(data, "load_multi30k", lambda split, src, tgt, data_dir=None: val if split == "val" else test)
    candidates = {"last checkpoint": tmp_path / "last.pt", "average of the last 5 step snapshots": tmp_path / "a5.pt"}
    greedy = {k: 30.0 if k == best else 29.0 for k in candidates}
    chose = []

    def choose(run, pairs, average):
        chose.append((run, pairs is val, tuple(average)))
        return candidates, greedy, best

    monkeypatch.setattr(release, "choose_weights_on_val", choose)
    monkeypatch.setattr(checkpoint, "load_model", lambda path: ({"weights": Path(path)}, "tok", {}))
    monkeypatch.setattr(release, "half_roundtrip", lambda model: {**model, "float16": True})
    scored = []

    def score_val_and_test(model, tok, v, t):
        scored.append((model, v is val, t is test))
        beam4 = {"bleu": 40.0, "signature": "sig", "chrf": 60.0}
        return {"val": {"beam4": beam4}, "test_2016_flickr": {"beam4": {**beam4, "bleu": 38.5}}}, {"alpha": 1.4}

    monkeypatch.setattr(release, "score_val_and_test", score_val_and_test)
    result = _script().readout(tmp_path, "de", "en")
    assert chose == [(tmp_path, True, (5,))]
    assert scored == [({"weights": candidates[best], "float16": True}, True, True)]
    assert result["chosen_on_val"] == best and result["val_greedy_bleu"] == greedy
    assert result["headline"] == {"weights": best, "split": "test_2016_flickr", "beam": 4, "alpha": 1.4, "bleu": 38.5,
                                  "signature": "sig", "chrf": 60.0}


# -- the README's figures ------------------------------------------------------------------------------------------
def _readme_table():
    spec = importlib.util.spec_from_file_location("readme_table", REPO / "bench" / "readme_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_page_figures_are_the_committed_results():
    """The Benchmarks page's block of measured figures is exactly what bench/readme_table.py renders from
    bench/results/."""
    table = _readme_table()
    assert table.page_block() == table.render(REPO / "bench" / "results"), "run: python bench/readme_table.py --write"


def test_readme_table_renders_each_figure_with_its_file(tmp_path):
    table = _readme_table()
    rounds = [{"order": ["ours", "nn.Transformer"], "s": {"ours": 1.0, "nn.Transformer": 1.0}}] * 5
    bench = {
        "suites": ["train_step", "capture", "e2e"], "commit": "0123456789abcdef", "dirty": False, "device": "cpu",
        "cpu_model": "Some CPU", "threads": 2, "torch": "2.13.0", "command": ["workbench", "bench"],
        "train_step": {"rows": [{"preset": "tiny", "ratio_ours_over_nn": 0.8765, "rounds": rounds},
                                {"preset": "small", "ratio_ours_over_nn": 1.0349, "rounds": rounds}]},
        "capture": {"inactive_overhead_pct": 0.412, "inactive_train_overhead_pct": -0.33, "active_overhead_pct": 12.6},
        "e2e": {"preset": "small", "tokens_per_s": 4123.4, "model_tflops_per_s": 0.1104, "src_padding_fraction": 0.0501,
                "tgt_padding_fraction": 0.0512},
    }
    translate = {"headline": {"weights": "averaged", "split": "test_2016_flickr", "beam": 4, "bleu": 38.96},
                 "val": [{"weights": "averaged", "beam": 4, "bleu": 40.04}, {"weights": "last", "beam": 4, "bleu": 39.5}],
                 "args": {"arch": "transformer", "preset": "small", "src": "de", "tgt": "en", "minutes": 41.0},
                 "commit": "fedcba9876543210", "command": ["bench/translate_multi30k.py"]}
    (tmp_path / "cpu.json").write_text(json.dumps(bench))
    (tmp_path / "translate.json").write_text(json.dumps(translate))
    out = table.render(tmp_path)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out.splitlines() if line.startswith("| ")}
    # the row now says how the sides were raced ("eager" for a report without compiled variants); same figures
    as_trained = next(v for k, v in rows.items() if k.startswith("training step as trained, ours ÷ `nn.Transformer` "
                                                                  "(tiny / small; eager)"))
    assert "| 0.88 / 1.03 | `cpu.json` |" in as_trained
    assert "same dropout" not in as_trained and "different kernels" in as_trained  # the dropout kernels differ: said
    # a report without the model-only rival says so instead of inventing the ratio
    assert "not measured" in next(v for k, v in rows.items() if k.startswith("training step, model only"))
    assert "+0.4 % / -0.3 %" in next(v for k, v in rows.items() if k.startswith("hook points"))
    assert "4 123 tokens/s, 110 GFLOP/s" in next(v for k, v in rows.items() if k.startswith("end-to-end"))
    assert "5.0 % / 5.1 %" in next(v for k, v in rows.items() if k.startswith("padding"))
    assert "sacreBLEU **39.0** (beam 4, averaged weights, chosen on val: averaged 40.0, last 39.5) | `translate.json` |" in (
        next(v for k, v in rows.items() if k.startswith("small preset de→en, 41 min")))
    assert "commit 0123456789" in out and "commit fedcba9876" in out and "`workbench bench`" in out
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="other.json"):
        table.render(tmp_path)


def test_recipe_rows_say_which_number_format_trained_them(tmp_path):
    """Two runs of one recipe, fp32 and bf16, must not read as the same row twice: the format comes from the run's
    summary (what training actually ran in), and a report from before ``--precision`` names none."""
    table = _readme_table()
    base = {"headline": {"weights": "averaged", "split": "test_2016_flickr", "beam": 4, "bleu": 38.0},
            "val_greedy_bleu": {"last": 37.0},
            "run_config": {"preset": "small", "src": "de", "tgt": "en", "max_minutes": 100.0, "precision": "auto"},
            "args": {"recipe": "cpu-small"}, "commit": "fedcba9876543210", "command": ["x"]}
    for name, fmt in (("a.json", "fp32"), ("b.json", "bf16")):
        (tmp_path / name).write_text(json.dumps({**base, "train": {"precision": fmt}}))
    (tmp_path / "c.json").write_text(json.dumps(base))
    rows = [r for r in table.render(tmp_path).splitlines() if r.startswith("| small preset")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| small preset de→en, 100 min training (recipe `cpu-small`, trained in fp32)",
        "| small preset de→en, 100 min training (recipe `cpu-small`, trained in bf16)",
        "| small preset de→en, 100 min training (recipe `cpu-small`)"]


def test_training_step_columns_are_labelled_by_what_the_rows_differ_in(tmp_path):
    """A race of one preset in two precisions once rendered its columns as "small / small": the columns are labelled
    by what tells the rows apart (the precision here), and what they share is named once."""
    table = _readme_table()
    rows = [{"preset": "small", "precision": p, "ratio_ours_over_nn": r, "ratio_model_only": m, "rounds": []}
            for p, r, m in (("fp32", 0.8134, 0.9425), ("bf16", 0.6106, 0.7104))]
    report = {"suites": ["train_step"], "commit": "0123456789abcdef", "command": ["x"], "train_step": {"rows": rows}}
    (tmp_path / "cpu.json").write_text(json.dumps(report))
    out = table.render(tmp_path)
    assert "small / small" not in out
    as_trained = next(r for r in out.splitlines() if r.startswith("| training step as trained"))
    assert "(small, fp32 / bf16; eager)" in as_trained and "| 0.81 / 0.61 | `cpu.json` |" in as_trained
    assert any("model only" in r and "(small, fp32 / bf16; eager)" in r and "| 0.94 / 0.71 |" in r
               for r in out.splitlines())
    # both change: one joint label a row; an older report's single "amp" is named once
    assert table._row_labels([{"preset": "tiny", "precision": "fp32"}, {"preset": "small", "precision": "bf16"}]) == (
        "tiny fp32 / small bf16")
    assert table._row_labels([{"preset": "tiny"}, {"preset": "small"}], amp="fp32") == "tiny / small, fp32"
    with pytest.raises(ValueError, match="share a label"):  # two rows nothing tells apart
        table._row_labels([{"preset": "small", "precision": "fp32"}, {"preset": "small", "precision": "fp32"}])


def test_benchmarks_page_labels_no_two_columns_alike():
    """On the committed page, every "a / b / ..." column label of a training-step row names distinct columns."""
    page = (DOC_PAGES / "benchmarks.md").read_text(encoding="utf-8")
    labels = re.findall(r"^\| training step[^(|]*\(([^;)]*)[;)]", page, flags=re.M)
    assert labels, "found no training-step rows on the Benchmarks page"
    for label in labels:
        for part in label.split(", "):
            columns = part.split(" / ")
            assert len(set(columns)) == len(columns), f"columns labelled alike: ({label})"


def test_readme_table_renders_compiled_rivals_and_a_step_profile(tmp_path):
    table = _readme_table()
    step_s = {"ours": 0.5, "nn.Transformer": 0.66, "ours compiled": 0.69, "nn.Transformer compiled": 0.6}
    bench = {"suites": ["train_step"], "commit": "0123456789abcdef", "device": "cpu", "threads": 2, "command": ["x"],
             "train_step": {"rows": [{"preset": "small", "ratio_ours_over_nn": 0.5 / 0.6, "step_s": step_s,
                                      "rounds": []}]}}
    profile = {"command": ["python", "bench/profile_step.py"], "device": "cpu", "commit": "abcdef0123456789",
               "preset": "small", "side": "ours", "ms_per_step": 500.0,
               "groups_ms_per_step": {"matrix products": 350.0, "dropout draws": 20.0, "vocabulary loss": 11.0,
                                      "optimizer": 6.0, "attention kernel": 25.0, "rest": 88.0}}
    (tmp_path / "cpu.json").write_text(json.dumps(bench))
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    out = table.render(tmp_path)
    assert "(small; each side's fastest of eager and compiled)" in out and "| 0.83 | `cpu.json` |" in out
    assert "0.500 / 0.690 s, 0.660 / 0.600 s" in out
    assert "| 350 / 20 / 11 / 6 / 25 / 88 = 500 | `profile.json` |" in out


def test_readme_table_renders_an_attention_vs_attribution_report(tmp_path):
    table = _readme_table()
    stat = lambda v: {"mean": v, "se": 0.01, "n": 1000}  # noqa: E731
    ig = "spearman/integrated_gradients"
    report = {"sentences": 1000, "split": "test_2016_flickr", "ig_steps": 32, "commit": "abcdef0123456789",
              "device": "cpu", "cpu_model": "Some CPU", "threads": 2, "torch": "2.13.0",
              "command": ["python", "bench/attention_vs_attribution.py"],
              "agreement": {f"{ig}/cross last": stat(0.467), f"{ig}/cross mean": stat(0.465), f"{ig}/rollout": stat(0.341),
                            f"{ig}/diagonal": stat(0.478), f"{ig}/random": stat(-0.01), "align/cross last": stat(0.553),
                            "align/rollout": stat(0.156), "align/integrated_gradients": stat(0.699),
                            "align/uniform": stat(0.101)},
              "ablation": {"most_agreeing_heads": [["cross", 2, 6]] * 4, "logprob_drop_random_mean": 0.0504,
                           "logprob_drop": {"most agreeing": 0.2547, "least agreeing": -0.0066}},
              "ig_completeness": {"relative_error": 0.0406}}
    (tmp_path / "agreement.json").write_text(json.dumps(report))
    out = table.render(tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert any("0.47 / 0.47 / 0.34 / 0.48 / -0.01" in r and "1000 test_2016_flickr" in r for r in rows), rows
    assert any("0.55 / 0.16 / 0.70 / 0.10 | `agreement.json`" in r for r in rows)
    assert any("4 cross heads" in r and "0.255 / 0.050 / -0.007" in r for r in rows)
    assert any("completeness" in r and "4.1 %" in r for r in rows)
    assert "`python bench/attention_vs_attribution.py`" in out


def test_table_renders_the_model_only_ratio_and_the_ablation_controls(tmp_path):
    table = _readme_table()
    row = {"preset": "small", "ratio_ours_over_nn": 0.75, "ratio_model_only": 0.9612, "rounds": []}
    (tmp_path / "cpu.json").write_text(json.dumps({"suites": ["train_step"], "commit": "0123456789abcdef",
                                                   "command": ["x"], "train_step": {"rows": [row]}}))
    out = table.render(tmp_path)
    assert any("model only" in r and "| 0.96 | `cpu.json` |" in r for r in out.splitlines())
    stat = {"mean": 0.1, "se": 0.01}
    keys = [f"spearman/integrated_gradients/{c}" for c in ("cross last", "cross mean", "rollout", "diagonal", "random")]
    keys += [f"align/{c}" for c in ("cross last", "rollout", "integrated_gradients", "uniform")]
    report = {"sentences": 10, "split": "test_2016_flickr", "ig_steps": 32, "command": ["x"],
              "agreement": dict.fromkeys(keys, stat), "ig_completeness": {"relative_error": 0.05},
              "ablation": {"most_agreeing_heads": [["cross", 2, 6]] * 4, "logprob_drop_random_mean": 0.0504,
                           "logprob_drop_random_sets": [0.0161, 0.2362, 0.05],
                           "logprob_drop": {"most agreeing": 0.1081, "least agreeing": 0.0128,
                                            "layer-matched, least agreeing": 0.1596}}}
    (tmp_path / "cpu.json").unlink()
    (tmp_path / "agreement.json").write_text(json.dumps(report))
    ablation = next(r for r in table.render(tmp_path).splitlines() if "cross heads off" in r)
    assert "layer-matched control" in ablation and "range over 3" in ablation
    assert "| 0.108 / 0.160 / 0.050 (0.016 – 0.236) / 0.013 |" in ablation


def test_readme_table_says_when_an_attribution_report_measured_earlier_shipped_weights(tmp_path):
    from workbench.translation import shipped

    table = _readme_table()
    card = shipped.read_card("small-de-en")
    greedy = card["bleu"]["test_2016_flickr"]["greedy"]
    report = {"model": "small-de-en", "split": "test_2016_flickr", "model_card_bleu": {"greedy": greedy}}
    assert table._measured_model(report) == ", `small-de-en`"
    earlier = {**report, "model_card_bleu": {"greedy": greedy - 1.5}}
    assert "an earlier `small-de-en`" in table._measured_model(earlier)
    assert f"{greedy - 1.5:.2f}" in table._measured_model(earlier)
    # the weights' SHA-256, where the report has it, decides over the card's score
    same_weights = {**earlier, "model_sha256": card["sha256"]["model.safetensors"]}
    assert table._measured_model(same_weights) == ", `small-de-en`"
    assert "earlier" in table._measured_model({**report, "model_sha256": "0" * 64})


# -- every result file the docs cite is in the repository -------------------------------------------------------------
CITED_RESULT = re.compile(r"bench/results/[A-Za-z0-9_./-]*[A-Za-z0-9_/-]")


def _cited_results() -> dict[str, set[str]]:
    """``bench/results/...`` paths named in the README, the package, the notebooks and the bench scripts (templates with
    NAME, ``*``, ``{...}`` or ``<...>`` and a command's ``--json`` destination left out), each with the files that name
    it."""
    sources = [REPO / "README.md", *sorted((REPO / "workbench").rglob("*.py")), *sorted(DOC_PAGES.glob("*.md")),
               *sorted((REPO / "notebooks").glob("*.py")),
               *sorted((REPO / "bench").glob("*.py")), *sorted((REPO / "bench" / "results").rglob("README.md"))]
    cited: dict[str, set[str]] = {}
    for source in sources:
        text = source.read_text(encoding="utf-8")
        for match in CITED_RESULT.finditer(text):
            path = match.group(0)
            template = "NAME" in path or "..." in path or text[match.end():match.end() + 1] in ("*", "{", "<")
            destination = text[:match.start()].endswith(("--json ", "--json=", "--out ", "--out="))  # a command's output
            if template or destination or path.rstrip("/") == "bench/results":
                continue
            cited.setdefault(path, set()).add(str(source.relative_to(REPO)))
    return cited


def test_cited_result_files_are_committed():
    """A figure is only as good as the file it cites: each cited result file (or folder) is tracked by git, so a clean
    clone has it (a .gitignore pattern once kept three cited book timings out of the repository)."""
    cited = _cited_results()
    assert cited, "found no bench/results/ citations at all: the pattern is broken"
    try:
        tracked = subprocess.run(["git", "ls-files", "bench/results"], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): what is on disk is what ships
        tracked = [str(p.relative_to(REPO)) for p in (REPO / "bench" / "results").rglob("*") if p.is_file()]
    missing = {path: sorted(where) for path, where in cited.items()
               if not any(t == path or t.startswith(path.rstrip("/") + "/") for t in tracked)}
    assert not missing, f"cited but not committed (git add them, or check .gitignore): {missing}"


def test_model_only_rival_draws_dropout_and_takes_the_loss_as_the_reference_does():
    """The model-only ratio compares model code alone: its rival runs torch's dropout op as often as the reference
    (ours as trained runs none: it draws masks with its own kernel) and the reference's loss on the same batch."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    cfg = wb.preset("tiny", dropout=0.1)
    src, tgt = random_batch(300, 8, 9, 8, torch.device("cpu"))
    _, _, fns = bench_suites.train_step_pair(cfg, 300, src, tgt, torch.device("cpu"))
    assert bench_suites.MODEL_ONLY in fns

    def dropout_ops(name: str) -> int:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fns[name]()
        return sum(e.count for e in prof.key_averages() if e.key in ("aten::dropout", "aten::native_dropout"))

    ref = dropout_ops("nn.Transformer")
    assert ref > 0
    assert dropout_ops(bench_suites.MODEL_ONLY) == ref
    assert dropout_ops("ours") < ref


def test_user_loop_rival_is_use_kernels_with_the_stock_loss():
    """The user-loop ratio times what a loop of one's own over ``wb.build_model`` gets from ``wb.use_kernels``: the
    cheap dropout masks (no torch dropout op, as ours as trained) with the reference's stock loss over every position
    (torch's cross-entropy, which ours as trained does not call: it fuses the projection with its own loss)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    cfg = wb.preset("tiny", dropout=0.1)
    src, tgt = random_batch(300, 8, 9, 8, torch.device("cpu"))
    _, _, fns = bench_suites.train_step_pair(cfg, 300, src, tgt, torch.device("cpu"))

    def ops(name: str, keys: tuple[str, ...]) -> int:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fns[name]()
        return sum(e.count for e in prof.key_averages() if e.key in keys)

    dropout, loss = ("aten::dropout", "aten::native_dropout"), ("aten::cross_entropy_loss",)
    assert ops(bench_suites.USER_LOOP, dropout) == 0 < ops("nn.Transformer", dropout)
    assert ops(bench_suites.USER_LOOP, loss) == ops("nn.Transformer", loss) > 0
    assert ops("ours", loss) == 0


def _steps_report(steps: int, rho: dict[str, float], heads: list, error: float, sentences: int = 60) -> dict:
    ig = "spearman/integrated_gradients"
    return {"sentences": sentences, "seed": 0, "split": "test_2016_flickr", "ig_steps": steps, "command": ["x"],
            "commit": "0123456789abcdef", "agreement": {f"{ig}/{c}": {"mean": v} for c, v in rho.items()},
            "ablation": {"most_agreeing_heads": heads}, "ig_completeness": {"relative_error": error}}


def test_table_compares_integrated_gradients_step_counts_on_the_same_sentences(tmp_path):
    table = _readme_table()
    folder = tmp_path / "ig-steps"
    folder.mkdir()
    rho = {"cross last": 0.40, "cross mean": 0.45, "rollout": 0.37, "diagonal": 0.32}
    heads = [["cross", 2, 6], ["cross", 2, 3]]
    (folder / "a.json").write_text(json.dumps(_steps_report(32, rho, heads, 0.206)))
    (folder / "b.json").write_text(json.dumps(_steps_report(128, {**rho, "rollout": 0.41}, heads[::-1], 0.05)))
    rows = [r for r in table.render(tmp_path).splitlines() if "ig-steps/a.json, ig-steps/b.json" in r]
    assert "20.6 % / 5.0 %" in rows[0] and "32 / 128 steps, the same 60 test sentences" in rows[0]
    assert "0.40 / 0.45 / 0.37 / 0.32 ; 0.40 / 0.45 / 0.41 / 0.32" in rows[1]
    # rollout overtook the last layer, said as both orders; the head set is a set
    assert ("ranking changes: all layers > last layer > rollout > diagonal prior at 32; all layers > rollout > last "
            "layer > diagonal prior at 128, same heads") in rows[2]
    (folder / "b.json").write_text(json.dumps(_steps_report(128, rho, [["cross", 0, 1], heads[0]], 0.05)))
    assert "ranking the same, 1 of 2 heads the same" in table.render(tmp_path)
    # a report written with the site names ("dec.cross") names the same heads as one written before them ("cross")
    (folder / "b.json").write_text(json.dumps(_steps_report(128, rho, [["dec.cross", 2, 3], ["dec.cross", 2, 6]], 0.05)))
    assert "ranking the same, same heads" in table.render(tmp_path)
    (folder / "b.json").write_text(json.dumps(_steps_report(128, rho, heads, 0.05, sentences=100)))
    with pytest.raises(ValueError, match="like with like"):
        table.render(tmp_path)


def test_e2e_precision_race_alternates_and_reports_the_speedup():
    """The end-to-end race runs the recipe in every format the CPU races (fp32 and bf16 where it has bf16 units),
    alternating, and its speed-up is the ratio of the medians."""
    from workbench.tools.bench.probes import e2e_precision_race
    from workbench.tools.bench.suites import bench_precisions
    from workbench.translation.tokenizer import SubwordTokenizer

    pairs = [(f"ein hund läuft {i} mal", f"a dog runs {i} times") for i in range(40)]
    tok = SubwordTokenizer.train(pairs, vocab_size=120, joint=True)
    out = e2e_precision_race(torch.device("cpu"), tok, pairs, rounds=2)
    if len(bench_precisions(torch.device("cpu"))) < 2:
        assert "skipped" in out
        return
    assert out["order"] == ["fp32", "bf16", "bf16", "fp32"]
    assert all(len(v) == 2 and min(v) > 0 for v in out["tokens_per_s"].values())
    m = out["median_tokens_per_s"]
    assert out["bf16_speedup"] == pytest.approx(m["bf16"] / m["fp32"])
    for p, v in out["tokens_per_s"].items():  # the median of two passes is their mean, not the lower one
        assert m[p] == pytest.approx(sum(v) / 2)
