"""The YAML job spec users submit (documented in docs/cli.md), and its validation.

The CLI validates every field before it dials the daemon, so a typo costs the user one
line on stderr instead of a round trip, and the message names the field (or the flag it
came from) the way the daemon's INVALID_ARGUMENT would. The daemon validates again: this
is a courtesy, not the security boundary.
"""
from __future__ import annotations

import difflib
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, NoReturn

import yaml

from synergy.scheduler.profiles.format import TASKS, ProfileError, SensitivityProfile, load_profiles

#: A spec is a few hundred bytes; anything near this is a mistake (a dataset, a binary).
MAX_SPEC_BYTES = 1 << 20
#: Names appear in tables, logs and metric labels: keep them short and shell-safe. Job
#: names start with a letter so that `synergy describe 17` (an id) never means a name.
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,62}$")
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The agent injects SYNERGY_* (job token, daemon address, allocation) into the job's
#: environment; a user value would shadow them, so that prefix is refused up front.
RESERVED_ENV_PREFIX = "SYNERGY_"
#: Integers travel as int32 on the wire; larger values would fail inside protobuf.
INT32_MAX = 2**31 - 1
PRIORITY_RANGE = (-1000, 1000)
INT64_MAX = 2**63 - 1

FIELDS = (
    "name", "command", "working_dir", "env", "gpus", "cpus", "memory_gb",
    "model", "task", "profile", "iterations", "checkpoint_dir", "priority", "elastic",
)
ELASTIC_FIELDS = ("min_gpus", "max_gpus")


class SpecError(ValueError):
    """A job spec is malformed; the message is one line naming the source and the field."""


@dataclass(frozen=True)
class ElasticRange:
    """Lyra-style elastic range: accepted and validated, not yet scheduled (see docs)."""

    min_gpus: int
    max_gpus: int


@dataclass(frozen=True)
class JobSpec:
    name: str
    #: argv of the training process; executed directly by the agent, never via a shell.
    command: tuple[str, ...]
    gpus: int
    #: Absolute path on the agent's node (resolved against the submitter's directory).
    working_dir: str
    env: dict[str, str] = field(default_factory=dict)
    #: Optional hints in total for the job (not per GPU); the scheduler may give more or
    #: less according to the model's sensitivity profile.
    cpus: float | None = None
    memory_gb: float | None = None
    #: Profile-zoo model name and task class, used to pick a profile before profiling.
    model: str = ""
    task: str = ""
    #: A profile measured beforehand (from the spec's `profile` file); overrides the zoo.
    profile: SensitivityProfile | None = None
    #: Total training steps, for remaining-time policies (SRTF, FTF); 0 = unknown.
    iterations: int = 0
    checkpoint_dir: str = ""
    #: Reserved: carried to the daemon, ignored by the paper's policies.
    priority: int = 0
    elastic: ElasticRange | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able view (for `--json` and `--dry-run`)."""
        return {
            "name": self.name, "command": list(self.command), "gpus": self.gpus,
            "working_dir": self.working_dir, "env": dict(self.env), "cpus": self.cpus,
            "memory_gb": self.memory_gb, "model": self.model, "task": self.task,
            "profile": None if self.profile is None else self.profile.to_dict(),
            "iterations": self.iterations, "checkpoint_dir": self.checkpoint_dir, "priority": self.priority,
            "elastic": None if self.elastic is None else {
                "min_gpus": self.elastic.min_gpus, "max_gpus": self.elastic.max_gpus},
        }


# -- loading --------------------------------------------------------------------------------
class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML silently keeps the last one, which
    turns `gpus: 2 ... gpus: 8` into a job nobody meant to submit."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, str) and key in seen:
            mark = key_node.start_mark
            raise SpecError(f"duplicate field {key!r} at line {mark.line + 1}")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_spec_document(path: str | Path) -> dict[str, Any]:
    """Read and parse a spec file into a mapping, without validating its fields."""
    origin = str(path)
    p = Path(path)
    try:
        if p.is_file() and p.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{origin}: file is larger than {MAX_SPEC_BYTES >> 20} MiB; is it a job spec?")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{origin}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{origin}: not a UTF-8 text file") from None
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except SpecError as exc:
        raise SpecError(f"{origin}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{origin}: invalid YAML{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{origin}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if doc is None:
        raise SpecError(f"{origin}: the file is empty; a job spec needs at least 'name', 'command' and 'gpus'")
    if not isinstance(doc, dict):
        raise SpecError(f"{origin}: a job spec must be a mapping of fields (name: ..., gpus: ...), "
                        f"not {_kind(doc)}")
    return doc


def load_spec(path: str | Path, *, base_dir: str | Path | None = None,
              overrides: Mapping[str, Any] | None = None,
              labels: Mapping[str, str] | None = None) -> JobSpec:
    """Load, merge command-line overrides into, and validate a spec file."""
    doc = read_spec_document(path)
    for key, value in (overrides or {}).items():
        # Mappings (env, elastic) are merged key by key, so `--env A=1` adds to the file's
        # env and `--max-gpus 8` keeps its min_gpus; every other override replaces.
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return parse_spec(doc, origin=str(path), base_dir=base_dir, labels=labels,
                      file_dir=Path(path).parent)


def parse_spec(doc: Mapping[str, Any], *, origin: str, base_dir: str | Path | None = None,
               labels: Mapping[str, str] | None = None, file_dir: Path | None = None) -> JobSpec:
    """Validate a spec mapping.

    `labels` renames fields in messages (e.g. 'gpus' -> '--gpus') for values that came from
    flags, so the user is pointed at what they actually typed. Relative `working_dir` is
    resolved against `base_dir` (default: the current directory, like sbatch); relative
    `checkpoint_dir` against the working directory, where the job itself runs; a relative
    `profile` file against `file_dir` (the spec file's folder), since the CLI reads it here.
    """
    f = _Fields(doc, origin, labels or {})
    f.reject_unknown(FIELDS)
    name = f.string("name", required=True, pattern=NAME_RE,
                    hint="1-63 letters, digits, '.', '_' or '-', starting with a letter")
    command = f.command("command")
    gpus = f.integer("gpus", required=True, low=1) or 0  # required: never None here
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    working_dir = f.path("working_dir", base=base) or str(base.absolute())
    checkpoint_dir = f.path("checkpoint_dir", base=Path(working_dir)) or ""
    task = f.string("task")
    if task and task not in TASKS:
        f.fail("task", f"must be one of {', '.join(TASKS)}, got {task!r}")
    elastic = f.elastic("elastic", gpus)
    model = f.string("model", pattern=MODEL_RE, hint="a model name such as resnet18")
    profile = f.profile("profile", model, base=file_dir or base)
    return JobSpec(
        name=name, command=command, gpus=gpus, working_dir=working_dir, env=f.env("env"),
        cpus=f.number("cpus"), memory_gb=f.number("memory_gb"),
        model=model, task=task, profile=profile,
        iterations=f.integer("iterations", low=0, high=INT64_MAX) or 0, checkpoint_dir=checkpoint_dir,
        priority=f.integer("priority", low=PRIORITY_RANGE[0], high=PRIORITY_RANGE[1]) or 0,
        elastic=elastic,
    )


# -- field checks ---------------------------------------------------------------------------
@dataclass
class _Fields:
    """Typed accessors over one mapping; every failure becomes a one-line SpecError."""

    doc: Mapping[str, Any]
    origin: str
    labels: Mapping[str, str]
    prefix: str = ""

    def label(self, key: str) -> str:
        full = self.prefix + key
        return self.labels.get(full, f"field {full!r}")

    def fail(self, key: str, message: str) -> NoReturn:
        raise SpecError(f"{self.origin}: {self.label(key)} {message}")

    def reject_unknown(self, known: tuple[str, ...]) -> None:
        for key in self.doc:
            if key in known:
                continue
            if not isinstance(key, str):
                raise SpecError(f"{self.origin}: field names must be strings, got {key!r}")
            close = _closest(key, known)
            hint = f" (did you mean {close!r}?)" if close else f"; known fields: {', '.join(known)}"
            raise SpecError(f"{self.origin}: unknown field {self.prefix + key!r}{hint}")

    def _get(self, key: str, required: bool) -> Any:
        value = self.doc.get(key)
        if value is None and required:
            self.fail(key, "is required")
        return value

    def string(self, key: str, *, required: bool = False, pattern: re.Pattern[str] | None = None,
               hint: str = "") -> str:
        value = self._get(key, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {_kind(value)}")
        if "\x00" in value:
            self.fail(key, "must not contain NUL characters")
        if not value.strip():
            if required:
                self.fail(key, "must not be empty")
            return ""
        if pattern is not None and not pattern.match(value):
            self.fail(key, f"must be {hint}, got {value!r}")
        return value

    def integer(self, key: str, *, required: bool = False, low: int = -INT32_MAX,
                high: int = INT32_MAX) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            what = "a positive integer" if low == 1 else "an integer"
            self.fail(key, f"must be {what}, got {_kind(value)} {value!r}")
        if value < low:
            self.fail(key, "must be a positive integer" if low == 1 else f"must be at least {low}")
        if value > high:
            self.fail(key, f"must be at most {high}, got {value}")
        return value

    def number(self, key: str) -> float | None:
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"must be a positive number, got {_kind(value)} {value!r}")
        if not math.isfinite(value) or value <= 0:
            self.fail(key, f"must be a positive number, got {value!r}")
        if value > INT32_MAX:
            self.fail(key, f"must be at most {INT32_MAX}, got {value!r}")
        return float(value)

    def command(self, key: str) -> tuple[str, ...]:
        value = self._get(key, True)
        if isinstance(value, str):
            try:
                argv = shlex.split(value)
            except ValueError as exc:  # unbalanced quotes
                self.fail(key, f"cannot be split into arguments ({exc})")
        elif isinstance(value, list):
            argv = []
            for i, item in enumerate(value):
                # Numbers are allowed so `[train.py, --epochs, 10]` works as written.
                if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                    self.fail(key, f"item {i} must be a string, got {_kind(item)}")
                argv.append(str(item))
        else:
            self.fail(key, f"must be a list of arguments or a string, got {_kind(value)}")
        if not argv or not argv[0].strip():
            self.fail(key, "must not be empty")
        if any("\x00" in a for a in argv):
            self.fail(key, "must not contain NUL characters")
        return tuple(argv)

    def path(self, key: str, *, base: Path) -> str:
        value = self.string(key)
        if not value:
            return ""
        p = Path(value).expanduser()
        # Not resolve(): symlinks are the node's business, and the path may not exist here.
        return str(p if p.is_absolute() else (base / p).absolute())

    def profile(self, key: str, model: str, *, base: Path) -> SensitivityProfile | None:
        path = self.path(key, base=base)
        if not path:
            return None
        try:
            profiles = load_profiles(path)
        except ProfileError as exc:
            self.fail(key, f"is not a usable profile file: {exc}")
        if model in profiles:
            return profiles[model]
        if not model and len(profiles) == 1:
            return next(iter(profiles.values()))
        wanted = f"no model {model!r}" if model else "several models and no 'model' field to pick one"
        self.fail(key, f"file {path} has {wanted} (it has: {', '.join(sorted(profiles))})")

    def env(self, key: str) -> dict[str, str]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping of NAME: value, got {_kind(value)}")
        out: dict[str, str] = {}
        for name, val in value.items():
            label = f"{key}.{name}"
            if not isinstance(name, str) or not ENV_KEY_RE.match(name):
                self.fail(key, f"has an invalid variable name {name!r} (letters, digits and '_', "
                               "not starting with a digit)")
            if name.startswith(RESERVED_ENV_PREFIX):
                self.fail(label, f"is reserved: {RESERVED_ENV_PREFIX}* variables are set by synergy")
            if isinstance(val, bool) or val is None:
                self.fail(label, f"must be a string, got {_kind(val)} (quote values like yes, no, "
                                 "true, on, off and ~)")
            if not isinstance(val, (str, int, float)):
                self.fail(label, f"must be a string, got {_kind(val)}")
            val = str(val)
            if "\x00" in val:
                self.fail(label, "must not contain NUL characters")
            out[name] = val
        return out

    def elastic(self, key: str, gpus: int) -> ElasticRange | None:
        value = self._get(key, False)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping with min_gpus and max_gpus, got {_kind(value)}")
        sub = _Fields(value, self.origin, self.labels, prefix=f"{self.prefix}{key}.")
        sub.reject_unknown(ELASTIC_FIELDS)
        lo = sub.integer("min_gpus", required=True, low=1) or 0  # required: never None here
        hi = sub.integer("max_gpus", required=True, low=1) or 0
        if lo > hi:
            sub.fail("min_gpus", f"({lo}) must not exceed max_gpus ({hi})")
        if not lo <= gpus <= hi:
            self.fail(key, f"range {lo}..{hi} must contain gpus ({gpus})")
        return ElasticRange(lo, hi)


def _kind(value: Any) -> str:
    """YAML vocabulary for a Python value's type, for messages users can act on."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _closest(key: str, known: tuple[str, ...]) -> str | None:
    hits = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return hits[0] if hits else None
