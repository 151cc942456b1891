"""The options of ``workbench train``, made from :class:`~workbench.translation.run.RunConfig` and its
:class:`~workbench.translation.train_config.TrainConfig`: one option per field (help from the field's comment, type, default,
choices), the run they describe (:func:`run_config_from_args`) and the way back (:func:`run_argv`)."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

from workbench.model.config import field_docs
from workbench.translation.run import RunConfig
from workbench.translation.train_config import TrainConfig

# Older spellings of run options, kept because commands in the book's command-line page and the shipped models'
# cards use them.
OPTION_ALIASES = {"warmup_steps": ["--warmup"]}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _optional(kind: type) -> Any:
    """An argparse type for an ``X | None`` field: ``none`` gives None, anything else ``kind(text)``."""
    def convert(text: str) -> Any:
        return None if text.lower() == "none" else kind(text)

    convert.__name__ = f"{kind.__name__} or none"
    return convert


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """One option per field of :class:`~workbench.translation.run.RunConfig` and of its :class:`~workbench.translation.train_config.TrainConfig`,
    grouped as the classes are; help text, type, default and choices all come from the dataclasses."""
    docs = {**field_docs(RunConfig), **{k: ("training", v[1]) for k, v in field_docs(TrainConfig).items()}}
    hints = {**typing.get_type_hints(RunConfig), **typing.get_type_hints(TrainConfig)}
    choices = RunConfig.choices()
    defaults = {f.name: f.default for f in RunConfig.flat_fields()}  # (RunConfig() itself has no budget)
    groups: dict[str, Any] = {}
    for f in RunConfig.flat_fields():
        section, comment = docs.get(f.name, ("", ""))
        group = groups.setdefault(section, parser.add_argument_group(section) if section else parser)
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = isinstance(hint, types.UnionType) and type(None) in args
        kind = next(a for a in args if a is not type(None)) if optional else hint
        if typing.get_origin(kind) is typing.Literal:  # a closed set of names (precision): strings, those choices
            kind, choices = str, {**choices, f.name: list(typing.get_args(kind))}
        kw: dict[str, Any] = {"default": defaults[f.name], "dest": f.name,
                              "help": comment.replace("%", "%%") + " (default: %(default)s)"}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _optional(kind) if optional else kind
            kw["metavar"] = "NAME" if f.name in choices else f.name.upper()
        if f.name in choices:
            kw["choices"] = choices[f.name]
        group.add_argument(_option(f.name), *OPTION_ALIASES.get(f.name, []), **kw)


def run_config_from_args(args: argparse.Namespace, resumed: bool = False) -> Any:
    """The :class:`~workbench.translation.run.RunConfig` that the options of :func:`add_run_options` describe (validated).

    ``resumed``: ``args.out`` holds the run to resume; its own settings (``run.json``) fill every option the command
    line did not give (``args.given``), so ``train --out RUN --resume --max-steps N`` continues RUN as it started."""
    from workbench.translation.run_folder import recorded_settings

    given = getattr(args, "given", None)
    recorded = recorded_settings(args.out) if resumed else {}
    return RunConfig.from_flat(**{f.name: recorded[f.name] if f.name in recorded and given is not None
                                  and f.name not in given else getattr(args, f.name)
                                  for f in RunConfig.flat_fields()})


def given_options(sub: argparse.ArgumentParser, argv: list[str], recipe: Any = None) -> set[str]:
    """The destinations ``argv`` sets explicitly on the subcommand parser ``sub`` (defaults aside), with every field
    of a ``recipe`` it names (a :class:`~workbench.translation.run.RunConfig`)."""
    actions = [(a, a.default) for a in sub._actions]
    defaults = dict(sub._defaults)
    try:
        for a, _ in actions:
            a.default = argparse.SUPPRESS
        sub._defaults.clear()
        namespace, _ = sub.parse_known_args(argv, argparse.Namespace())
    finally:
        for a, default in actions:
            a.default = default
        sub._defaults.update(defaults)
    return set(vars(namespace)) | (set(recipe.to_flat()) if recipe is not None else set())


def run_argv(run: Any) -> list[str]:
    """The options that give ``run`` (a :class:`~workbench.translation.run.RunConfig`) on the command line: the data,
    tokenizer and model settings that are set, and every field that differs from its default."""
    own = {f.name for f in dataclasses.fields(RunConfig)} - {"train"}
    defaults = {f.name: f.default for f in RunConfig.flat_fields()}
    argv: list[str] = []
    for name, value in run.to_flat().items():
        if value == defaults[name] and (name not in own or value is None):
            continue
        if isinstance(value, bool):
            argv.append(_option(name) if value else "--no-" + _option(name)[2:])
        else:
            argv += [_option(name), "none" if value is None else str(value)]
    return argv


def check_data_dir(data_dir: str | None) -> None:
    """A --data-dir that was given must exist: a mistyped one would otherwise become a download target."""
    if data_dir is not None and not Path(data_dir).is_dir():
        from workbench.errors import DataError

        what = "is a file, not a folder" if Path(data_dir).exists() else "does not exist"
        raise DataError(f"--data-dir {data_dir} {what}: give the folder that holds the Multi30k files "
                        "(train.de.gz...), or leave the option out to use $WORKBENCH_MULTI30K or the download cache")
