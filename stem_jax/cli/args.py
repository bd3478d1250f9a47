"""Shared command-line flags: dataset selection and dotted config overrides."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from stem_jax import validation
from stem_jax.config import StemConfig, apply_overrides, config_fields, default_cache_dir
from stem_jax.data.registry import DATASETS, DatasetSpec, dataset_hint
from stem_jax.errors import StemError

# ---------------------------------------------------------------------------------------------
# The parser: short help pages, short errors with close matches
# ---------------------------------------------------------------------------------------------

# Sections of StemConfig in the order --help-all shows them; "seed" is the one top-level field.
CONFIG_SECTIONS = tuple(f.name for f in dataclasses.fields(StemConfig) if f.metadata.get("option", True))
# What STEM itself reads; the peer methods' sections (scr, safe) only matter with --method scr|safe.
STEM_SECTIONS = ("tracer", "guidance", "gnn", "planner", "subgraph", "encoder", "engine", "seed")
METHOD_SECTIONS = {
    "stem": STEM_SECTIONS,
    "safe": ("safe", "planner", "subgraph", "encoder", "engine", "seed"),
    "scr": ("scr", "subgraph", "encoder", "engine", "seed"),
}
DEFAULTS_NOTE = ("defaults: the best measured configuration, with θ and the KG's conventions from `stem-jax "
                 "calibrate` where stored; --engine.preset=paper: the paper's literal engine")


class StemParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help leads with the command's own flags and whose errors are short.

    * ``--help`` shows a one-line usage and every flag except the engine settings (``--tracer.*``,
      ``--engine.*``, ...: about 200 lines) and the per-dataset/LLM flags, which ``--help-all`` adds, limited to the sections the
      command (and, for ``eval``/``ask``/``serve``, the ``--method`` given before it) reads.
    * An error is one line plus where to look, not the whole usage: an unknown flag or choice names
      its closest matches among this command's flags (config flags included) or choices.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config_sections: tuple[str, ...] | None = None  # None: every section is relevant
        self.method_sections = False  # True: --help-all follows --method (eval, ask, serve)

    # ----- help -----
    def compact_usage(self) -> str:
        """``prog [options] POSITIONALS``: the full usage lists 200-odd flags."""
        positionals = [a for a in self._actions if not a.option_strings and a.help is not argparse.SUPPRESS]
        formatter = self._get_formatter()
        formatter.add_usage(None, positionals, [], prefix="")
        tail = formatter.format_help().strip()[len(self.prog):]
        return f"{self.prog} [options]{tail}"

    def config_groups(self) -> list[Any]:
        return [g for g in self._action_groups if getattr(g, "stem_section", None)]

    def shown_sections(self, method: str | None) -> tuple[str, ...]:
        if self.method_sections:
            return METHOD_SECTIONS.get(method or "stem", STEM_SECTIONS)
        return self.config_sections or CONFIG_SECTIONS

    def format_help(self, full: bool = False, method: str | None = None) -> str:  # type: ignore[override]
        for action in self._actions:  # help that names a default set_defaults may have changed
            if getattr(action, "stem_help", None) is not None:
                action.help = action.stem_help(action.default).replace("%", "%%")
        formatter = self._get_formatter()
        formatter.add_usage(self.compact_usage().replace("%", "%%"), self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        config_groups = self.config_groups()
        hidden_flags: list[str] = []  # advanced flags --help leaves out
        for group in self._action_groups:
            if group not in config_groups:
                actions = group._group_actions
                if not full:
                    actions = [a for a in actions if not getattr(a, "stem_advanced", False)]
                    hidden_flags += [a.option_strings[0] for a in group._group_actions if a not in actions]
                formatter.start_section(group.title)
                formatter.add_text(group.description)
                formatter.add_arguments(actions)
                formatter.end_section()
        if not full and (config_groups or hidden_flags):
            what = [f"{len(hidden_flags)} more flags ({', '.join(hidden_flags[:2])}, ...)"] if hidden_flags else []
            if config_groups:
                count = sum(len(g._group_actions) for g in config_groups)
                what.append(f"{count} engine settings (--tracer.theta=0.7, ...; {DEFAULTS_NOTE})")
            formatter.add_text(f"`{self.prog} --help-all` adds {' and '.join(what)}.")
        if full and config_groups:
            shown = self.shown_sections(method)
            formatter.add_text(f"engine settings, any field as --section.field=VALUE; {DEFAULTS_NOTE}.")
            for group in config_groups:
                if group.stem_section in shown:
                    formatter.start_section(group.title)
                    formatter.add_arguments(group._group_actions)
                    formatter.end_section()
            hidden = [g for g in config_groups if g.stem_section not in shown]
            if hidden:
                names = ", ".join(f"--{g.stem_section}.* ({len(g._group_actions)})" for g in hidden)
                more = (" (another --method before --help-all lists them)" if self.method_sections
                        else " (accepted, not read by this command)")
                formatter.add_text(f"not listed: {names}{more}.")
        formatter.add_text(self.epilog)
        return formatter.format_help()

    def print_help(self, file: Any = None, *, full: bool = False, method: str | None = None) -> None:  # type: ignore[override]
        self._print_message(self.format_help(full=full, method=method), file or sys.stdout)

    def format_usage(self) -> str:
        return f"usage: {self.compact_usage()}\n"

    # ----- errors -----
    def error(self, message: str) -> NoReturn:
        listing = "the commands" if self._subparsers is not None else "this command's flags"
        self.exit(2, f"{self.prog}: error: {message}\n  `{self.prog} --help` lists {listing}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            command = isinstance(action, argparse._SubParsersAction)
            name = "command" if command else "dataset" if action.dest == "dataset" else "choice"
            hint = dataset_hint(str(value)) if action.dest == "dataset" else None
            if hint:  # webqsp -> --dataset rog: the way in, not a list of names
                message = f"unknown dataset {value!r}: {hint}"
            else:
                close = closest(str(value), choices)
                guess = f"; did you mean {' or '.join(close)}?" if close else ""
                message = f"unknown {name} {value!r}{guess} (choose from {', '.join(choices)})"
            if command:  # "argument COMMAND: ..." says nothing more than "unknown command"
                raise argparse.ArgumentError(None, message)
            raise argparse.ArgumentError(action, message)

    def unrecognized(self, extras: Sequence[str]) -> NoReturn:
        """An error for arguments no flag of this command takes, with the closest flags."""
        options = [o for o in self._option_string_actions if o.startswith("--")]
        guesses: list[str] = []
        for extra in extras:
            if extra.startswith("-"):
                guesses += close_flags(extra.split("=", 1)[0], options)
        guess = ""
        if guesses:
            guess = f"; did you mean {' or '.join(dict.fromkeys(guesses))}?"
        self.error(f"unrecognized arguments: {' '.join(extras)}{guess}")  # argparse's words, which scripts match

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and getattr(self, "strict_extras", False):
            # A subcommand's leftovers: reported here, where this command's flags are known, rather
            # than by the top parser, which only knows the command names.
            self.unrecognized(extras)
        return namespace, extras

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.unrecognized(extras)
        return namespace


class StemSubParser(StemParser):
    """A subcommand's parser: leftovers are its own error (see :meth:`StemParser.parse_known_args`)."""

    strict_extras = True


def closest(word: str, candidates: Iterable[str], *, cutoff: float = 0.6, spread: float = 0.1) -> list[str]:
    """The candidates most like ``word`` (difflib ratio >= ``cutoff``), best first: only those within
    ``spread`` of the best, so one clear match is suggested alone."""
    scored = sorted(((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in candidates), reverse=True)
    scored = [(r, c) for r, c in scored if r >= cutoff]
    return [c for r, c in scored[:3] if r >= scored[0][0] - spread] if scored else []


def close_flags(flag: str, options: Iterable[str]) -> list[str]:
    """The flags of ``options`` a user most likely meant by ``flag``: the config field of that name
    (``--theta`` -> ``--tracer.theta``), else the closest spellings."""
    options = list(options)
    leaf = flag.lstrip("-").replace("-", "_")
    by_field = [o for o in options if "." in o and o.rsplit(".", 1)[1] == leaf]
    return by_field[:3] or closest(flag, options)


class _HelpAll(argparse.Action):
    """``--help-all``: the help page with the engine settings this command reads."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if isinstance(parser, StemParser):
            parser.print_help(full=True, method=getattr(namespace, "method", None))
        else:  # a plain ArgumentParser's help lists every flag already
            parser.print_help()
        parser.exit()


def add_help_all(parser: argparse.ArgumentParser) -> None:
    """``--help-all`` on ``parser``, once (the data and config flags both need it)."""
    if "--help-all" not in parser._option_string_actions:
        parser.add_argument("--help-all", action=_HelpAll,
                            help="this help with every flag, engine settings included")


@functools.cache
def _field_comments(cls: type) -> dict[str, str]:
    """The trailing ``# comment`` of each field in a config dataclass's source: its help text."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # no source (frozen install): the help shows defaults only
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s+(\w+): [^=\n]+=[^#\n]*#\s*(.+)$", source, re.M)}


def parse_hops(text: str) -> tuple[int, ...]:
    """``--hops 1,2``: :func:`stem_jax.validation.parse_hops` (the Python API's check) as an argparse type."""
    try:
        return validation.parse_hops(text, flag="--hops")
    except StemError as err:
        raise argparse.ArgumentTypeError(str(err).split("\n")[0]) from None


def positive_int(text: str) -> int:
    """A flag taking a positive whole number (``--limit``, ``--top``): :func:`stem_jax.validation.parse_limit`."""
    try:
        return validation.parse_limit(text, flag="expected")  # type: ignore[return-value]
    except StemError as err:
        raise argparse.ArgumentTypeError(str(err).split("\n")[0].removeprefix("expected: ")) from None


def non_negative_int(text: str) -> int:
    """A flag taking a whole number where 0 turns something off (``--overlap``, ``--keep-prepared``)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (0 = off), got {text!r}")
    return value


# The per-loader file flags of add_dataset_flags: (flag, type, metavar, help).
LOADER_FILE_FLAGS: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    ("--qtypes", Path, "FILE", "metaqa: relation-path type of each --questions line (the oracle needs it)"),
    ("--kb", Path, "FILE", "metaqa: KB file (default: kb.txt, else the partial KB)"),
    ("--rog-path", Path, "PATH", "rog: RoG .jsonl/.parquet file or dataset folder (WebQSP, CWQ)"),
    ("--triples", Path, "FILE", "files: head,relation,tail file (.tsv/.csv/.jsonl; default <data-dir>/triples.*)"),
    ("--entity-names", Path, "FILE", "files: id<TAB>name file for entities"),
    ("--relation-names", Path, "FILE", "files: id<TAB>name file for relations"),
    ("--delimiter", str, "SEP", "files: field separator (e.g. '|' or tab; default by extension)"),
)


def add_dataset_flags(parser: argparse.ArgumentParser, default: str = "demo") -> None:
    """The data flags. Their help says what each means per dataset; the per-loader file flags
    (--kb, --triples, ...) are marked advanced: ``--help`` leaves them to ``--help-all``."""
    add_help_all(parser)
    group = parser.add_argument_group("data")
    # The help of --dataset, --split, --hops and --limit names the default a command sets with
    # set_defaults (calibrate: dev and 150, bench: 2-hop, training commands: the training split),
    # so it is written when the help is (stem_help, see StemParser.format_help).
    live_help(group.add_argument("--dataset", choices=DATASETS, default=default, metavar="NAME"),
              lambda d: f"demo (generated), metaqa, wc2014[-p1|-p2|-c], files (your KG), rog (WebQSP, CWQ), "
              f"fb15k-237; default {d}")
    live_help(group.add_argument("--split", default="test", metavar="NAME"),
              lambda d: f"test, dev or train (default {d}; files: <split>.jsonl; wc2014: seeded 8:1:1; metaqa: no "
              "train)" if d is not None else "split to train on (default: train; dev for metaqa, which has no "
              "train QA text), hash-split by question id into train/validation; files: <data-dir>/<split>.jsonl")
    live_help(group.add_argument("--hops", type=parse_hops, default=(1, 2, 3), metavar="LIST"),
              lambda d: f"hop counts, e.g. 1,2 (default {','.join(map(str, d)) if d else 'all'}): metaqa reads those N-hop/ "
              "folders; files, rog keep all")
    group.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="files: your KG's folder (triples.tsv, <split>.jsonl); metaqa, wc2014, fb15k-237: "
                       "the folder holding metaqa/, wc2014/, fb15k-237/ (default $STEM_DATA_DIR)")
    group.add_argument("--questions", type=Path, default=None, metavar="FILE",
                       help="your own questions (files: JSONL or text; metaqa: 'question with [topic]<TAB>a1|a2')")
    advanced = [group.add_argument(flag, type=kind, default=None, metavar=metavar, help=text)
                for flag, kind, metavar, text in LOADER_FILE_FLAGS]
    live_help(group.add_argument("--limit", type=positive_int, default=None, metavar="N"),
              lambda d: "keep the first N questions per hop (quick runs)" + ("" if d is None else f"; default {d}"))
    advanced.append(group.add_argument("--strict", action="store_true",
                                       help="stop at the first bad input line instead of skipping it"))
    mark_advanced(*advanced)


def command_parser(sub: Any, name: str, *, help: str, description: str, dataset: str = "demo",
                   training: bool = False, cache: bool = True) -> argparse.ArgumentParser:
    """Subcommand ``name`` with the data flags (``dataset`` their default; the training split by default when
    ``training``), the cache flags (unless ``cache`` is off) and the config flags, in that order."""
    parser = sub.add_parser(name, help=help, description=description)
    add_dataset_flags(parser, default=dataset)
    if training:
        use_training_split(parser)
    if cache:
        add_cache_flags(parser)
    add_config_flags(parser)
    return parser


def training_parser(sub: Any, name: str, command: Callable[[argparse.Namespace], int], *,
                    help: str) -> argparse.ArgumentParser:
    """Training command ``name`` (``train-<what>``) that runs ``command`` and keeps a resumable run folder:
    :func:`command_parser` on the dataset's training split, described by ``command``'s docstring, then ``--out``
    (default ``runs/<what>-<dataset>``, :func:`run_folder`)."""
    parser = command_parser(sub, name, help=help, description=inspect.getdoc(command) or "", training=True)
    add_run_folder_flag(parser, name.removeprefix("train-") + "-<dataset>")
    parser.set_defaults(func=command)
    return parser


def use_training_split(parser: argparse.ArgumentParser) -> None:
    """``--split`` of a training command: by default the dataset's training split (what
    :func:`stem_jax.plan.factory.training_split` says: dev for MetaQA, which ships no train QA text,
    train for every other dataset); :func:`training_split_of` resolves it once the dataset is known."""
    parser.set_defaults(split=None)  # its help then describes the training split (add_dataset_flags)


def training_split_of(args: argparse.Namespace) -> str:
    """``args.split``, or the dataset's training split when --split was left out (see use_training_split)."""
    from stem_jax.plan.factory import training_split

    return training_split(args.dataset, args.split)


def live_help(action: argparse.Action, text: Callable[[Any], str]) -> None:
    """Give ``action`` a help text written from its default when the help is shown."""
    action.stem_help = text  # type: ignore[attr-defined]
    action.help = text(action.default).replace("%", "%%")


def mark_advanced(*actions: argparse.Action) -> None:
    """Flags ``--help`` leaves to ``--help-all`` (rarely needed, or for one dataset or planner only)."""
    for action in actions:
        action.stem_advanced = True  # type: ignore[attr-defined]


# A run of plain valued flags for add_valued_flags: (flag, type, default, help); the dest is argparse's own,
# from the flag's name (--graphs-per-step -> graphs_per_step).
ValuedFlag = tuple[str, Callable[[str], Any], Any, str]


def add_valued_flags(parser: Any, flags: Iterable[ValuedFlag]) -> None:
    """Add each ``(flag, type, default, help)`` of ``flags`` to ``parser`` (a parser or an argument group), in order."""
    for flag, kind, default, text in flags:
        parser.add_argument(flag, type=kind, default=default, help=text)


def add_run_folder_flag(parser: argparse.ArgumentParser, folder: str) -> None:
    """``--out DIR``: the command's run folder, by default ``runs/<folder>``, where ``folder`` may name
    ``<dataset>`` and ``<split>`` (:func:`run_folder` fills them in)."""
    parser.add_argument("--out", type=Path, default=None, help=f"run folder (default runs/{folder})")
    parser.set_defaults(run_folder=folder)


def run_folder(args: argparse.Namespace, dataset: str) -> Path:
    """``--out``, else the default run folder of :func:`add_run_folder_flag` for ``dataset`` and ``--split``."""
    if args.out is not None:
        return args.out
    return Path("runs") / args.run_folder.replace("<dataset>", dataset).replace("<split>", str(args.split))


def add_cache_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cache")
    group.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help="default $STEM_CACHE_DIR or ~/.cache/stem_jax")
    group.add_argument("--rebuild", action="store_true", help="recompute the embedding caches")
    group.add_argument("--no-progress", action="store_true", help="hide progress bars")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Every :class:`StemConfig` field as ``--section.field=VALUE``, one group per section. A
    :class:`StemParser` lists them under ``--help-all`` only (this adds that flag)."""
    add_help_all(parser)
    config = StemConfig()
    groups: dict[str, Any] = {}
    for name, default, _ in config_fields(config):
        section, _, field = name.rpartition(".")
        owner = getattr(config, section) if section else config
        section = section or name  # a top-level field (seed) is its own section
        if section not in groups:
            doc = (type(owner).__doc__ or "").strip().splitlines()[0].rstrip(".") if owner is not config else ""
            groups[section] = parser.add_argument_group(f"--{section}.*: {doc}" if doc else f"--{section}")
            groups[section].stem_section = section
        comment = _field_comments(type(owner)).get(field, "").replace("%", "%%")  # help text is %-formatted
        groups[section].add_argument(f"--{name}", dest=f"cfg:{name}", default=None,
                                     metavar=type(default).__name__.upper(),
                                     help=f"{comment} (default {default})" if comment else f"default {default}")


def config_from_args(args: argparse.Namespace) -> StemConfig:
    overrides = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg:") and v is not None}
    return apply_overrides(StemConfig(), overrides)


def check_dataset_flags(args: argparse.Namespace) -> None:
    """Flags that the chosen dataset would ignore are an error, not a silent no-op."""
    dataset = args.dataset
    only = {"questions": ("metaqa", "files"), "qtypes": ("metaqa",), "kb": ("metaqa",), "rog_path": ("rog",),
            "triples": ("files",), "entity_names": ("files",), "relation_names": ("files",), "delimiter": ("files",)}
    for dest, owners in only.items():
        if getattr(args, dest, None) is not None and dataset not in owners:
            flag = "--" + dest.replace("_", "-")
            raise StemError(f"{flag} is only read with --dataset {' or '.join(owners)}, not --dataset {dataset}\n"
                            f"  how to fix: add --dataset {owners[0]}, or drop {flag}")
    if getattr(args, "qtypes", None) is not None and getattr(args, "questions", None) is None:
        raise StemError("--qtypes describes the lines of --questions, which is missing\n"
                        "  how to fix: pass --questions FILE too, or drop --qtypes")
    if getattr(args, "questions", None) is None:
        validation.check_hops_for(dataset, getattr(args, "hops", None), flag="--hops")
    plans_given = getattr(args, "plans", None) is not None
    if (getattr(args, "planner", None) == "oracle" and not plans_given and dataset == "metaqa"
            and getattr(args, "questions", None) is not None and getattr(args, "qtypes", None) is None):
        raise StemError("the oracle planner follows each question's gold relation path, which --questions without "
                        "--qtypes does not give\n"
                        "  how to fix: pass --qtypes FILE (line i = relation-path type of question i), "
                        "or use --planner pattern")


def dataset_spec(args: argparse.Namespace, config: StemConfig) -> DatasetSpec:
    check_dataset_flags(args)
    return DatasetSpec(
        name=args.dataset, split=args.split, hops=args.hops, data_dir=args.data_dir,
        questions=args.questions, qtypes=args.qtypes, kb=args.kb, rog_path=args.rog_path,
        strict=args.strict, limit=args.limit, seed=config.seed,
        triples=getattr(args, "triples", None), entity_names=getattr(args, "entity_names", None),
        relation_names=getattr(args, "relation_names", None), delimiter=getattr(args, "delimiter", None),
    )


def cache_root(args: argparse.Namespace) -> Path:
    return validation.checked_cache_dir(args.cache_dir) if args.cache_dir else default_cache_dir()


def disable_abbreviations(parser: argparse.ArgumentParser) -> None:
    """No prefix matching anywhere (``--tracer.la=2`` must not mean ``--tracer.lam``): this parser and every
    subparser below it, however deep."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                disable_abbreviations(sub)


def annotate_defaults(parser: argparse.ArgumentParser) -> None:
    """Append ``(default: X)`` to the help of every flag with choices that does not say its default
    (``--planner`` is oracle for eval but pattern for ask): this parser and every subparser below it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                annotate_defaults(sub)
        elif (action.choices is not None and action.option_strings and action.default is not None
              and action.help not in (None, argparse.SUPPRESS) and "default" not in action.help):
            action.help = f"{action.help} (default: {action.default})"


def check_out_path(path: Path | None) -> None:
    """An ``--out`` that names an existing file is an error before any loading work."""
    if path is not None and path.exists() and not path.is_dir():
        raise StemError(f"--out {path} is a file, not a folder\n"
                        "  how to fix: pass --out a folder path (it is created if missing)")
