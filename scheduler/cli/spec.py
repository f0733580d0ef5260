"""The YAML job spec users submit (documented in docs/cli.md): reading it into a JobSpec.

This module only reads: YAML (strict: no duplicate keys), types (a string where a string
belongs), paths resolved on the submitter's machine, a profile file read here. Every rule
about the values (names, ranges, env, limits) is `synergy.scheduler.jobspec.rules`, the
same the daemon applies, so the CLI refuses a bad spec before dialing with the sentence the
daemon's INVALID_ARGUMENT would carry, prefixed with where the value came from:

    job.yaml: spec.gpus: must be at least 1, got 0
    command line: spec.gpus (--gpus): must be at least 1, got 0
"""
from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NoReturn

import yaml

from synergy.scheduler.jobspec import JobSpec, SpecError, rules
from synergy.scheduler.jobspec.spec import KIND_CPU
from synergy.scheduler.jobspec.proto import spec_to_msg
from synergy.scheduler.profiles.format import ProfileError, load_profiles

__all__ = ["FIELDS", "JobSpec", "SpecError", "load_spec", "parse_spec", "read_spec_document", "spec_document"]

FIELDS = (
    "name", "command", "working_dir", "env", "gpus", "cpus", "memory_gb",
    "model", "task", "profile", "iterations", "checkpoint_dir", "priority", "elastic", "kind",
    "profiler", "gpu_types", "loanable", "no_share", "user", "checkpoint_every_s",
)
ELASTIC_FIELDS = ("min_gpus", "max_gpus")
#: YAML field -> the JobSpec (and proto) field it fills, where the names differ.
PROTO_NAMES = {"cpus": "cpus_hint", "memory_gb": "mem_gb_hint",
               "elastic.min_gpus": "min_gpus", "elastic.max_gpus": "max_gpus"}
_YAML_NAMES = {v: k for k, v in PROTO_NAMES.items()}
#: A spec file is read whole; one larger than the largest spec the daemon accepts is a
#: mistake (a dataset, a binary), whatever its comments.
MAX_SPEC_FILE_BYTES = rules.MAX_SPEC_BYTES


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
            raise SpecError("", f"duplicate field {key!r} at line {mark.line + 1}")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_spec_document(path: str | Path) -> dict[str, Any]:
    """Read and parse a spec file into a mapping, without validating its fields."""
    origin = str(path)
    p = Path(path)
    try:
        if p.is_file() and p.stat().st_size > MAX_SPEC_FILE_BYTES:
            raise SpecError("", f"{origin}: file is larger than {MAX_SPEC_FILE_BYTES >> 10} KiB, the largest "
                                "spec synergyd accepts; is it a job spec?")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("", f"{origin}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SpecError("", f"{origin}: not a UTF-8 text file") from None
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except SpecError as exc:
        raise SpecError("", f"{origin}: {exc.problem}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError("", f"{origin}: invalid YAML{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SpecError("", f"{origin}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if doc is None:
        raise SpecError("", f"{origin}: the file is empty; a job spec needs at least 'name', 'command' and 'gpus'")
    if not isinstance(doc, dict):
        raise SpecError("", f"{origin}: a job spec must be a mapping of fields (name: ..., gpus: ...), "
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
    """Read a spec mapping into a JobSpec and check it with the shared rules.

    `labels` names the flag a YAML field came from (e.g. 'gpus' -> '--gpus'), so messages
    point at what the user actually typed. Relative `working_dir` is resolved against
    `base_dir` (default: the current directory, like sbatch); relative `checkpoint_dir`
    against the working directory, where the job itself runs; a relative `profile` file
    against `file_dir` (the spec file's folder), since the CLI reads it here.
    """
    f = _Fields(doc, origin, labels or {})
    f.reject_unknown(FIELDS)
    name = f.string("name", required=True)
    command = f.command("command")
    kind = f.string("kind")
    # A CPU-only job takes no GPU: `gpus` may be left out (it must be 0 when given).
    gpus = f.integer("gpus", required=kind != KIND_CPU)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    working_dir = f.path("working_dir", base=base) or str(base.absolute())
    checkpoint_dir = f.path("checkpoint_dir", base=Path(working_dir))
    model = f.string("model")
    elastic = f.elastic("elastic")
    spec = JobSpec(
        name=name, command=command, gpus=gpus or 0, working_dir=working_dir,
        env=tuple(sorted(f.env("env").items())),
        cpus_hint=f.number("cpus"), mem_gb_hint=f.number("memory_gb"),
        model=model, task=f.string("task"),
        checkpoint_dir=checkpoint_dir, priority=f.integer("priority") or 0,
        iterations=f.integer("iterations") or 0, min_gpus=elastic[0], max_gpus=elastic[1],
        profile=f.profile("profile", model, base=file_dir or base), kind=kind,
        profiler=f.string("profiler"), gpu_types=f.strings("gpu_types"), loanable=f.boolean("loanable"),
        no_share=f.boolean("no_share"), user=f.string("user"),
        checkpoint_every_s=f.number("checkpoint_every_s"),
    )
    try:
        rules.validate(spec)
        rules.encoded_size(spec_to_msg(spec).ByteSize())
        return spec
    except SpecError as exc:
        f.fail_path(exc.field, exc.problem)


def spec_document(spec: JobSpec) -> dict[str, Any]:
    """The spec in the YAML file's vocabulary (for `submit --dry-run`, table and JSON)."""
    return {
        "name": spec.name, "command": list(spec.command), "gpus": spec.gpus,
        "working_dir": spec.working_dir, "env": dict(spec.env),
        "cpus": spec.cpus_hint or None, "memory_gb": spec.mem_gb_hint or None,
        "model": spec.model, "task": spec.task,
        "profile": None if spec.profile is None else dict(spec.profile),
        "iterations": spec.iterations, "checkpoint_dir": spec.checkpoint_dir, "priority": spec.priority,
        "elastic": {"min_gpus": spec.min_gpus, "max_gpus": spec.max_gpus} if spec.elastic else None,
        "kind": spec.kind or None,
        "profiler": spec.profiler or None,
        "gpu_types": list(spec.gpu_types) or None,
        "loanable": spec.loanable,
        "user": spec.user or None,
        "no_share": spec.no_share or None,
        "checkpoint_every_s": spec.checkpoint_every_s or None,
    }


# -- reading typed values -----------------------------------------------------------------------
@dataclass
class _Fields:
    """Typed accessors over one mapping; every failure is a one-line SpecError naming the field
    by its proto path (and the flag or YAML key it was typed as, where that differs)."""

    doc: Mapping[str, Any]
    origin: str
    labels: Mapping[str, str]
    prefix: str = ""

    def fail(self, key: str, message: str) -> NoReturn:
        """`key` is a YAML path ("gpus", "env.HOME", "elastic.min_gpus")."""
        yaml_key = self.prefix + key
        top, _, sub = yaml_key.partition(".")
        if top == "env" and sub:
            path = f"spec.env[{sub}]"
        else:
            path = "spec." + PROTO_NAMES.get(yaml_key, yaml_key)
        self._raise(path, yaml_key, message)

    def fail_path(self, path: str, message: str) -> NoReturn:
        """`path` is a rule's proto path ("spec.gpus", "spec.env[HOME]", "spec.command[2]")."""
        field = path.removeprefix("spec.")
        if field.startswith("env[") and field.endswith("]"):
            yaml_key = f"env.{field[4:-1]}"
        else:
            yaml_key = _YAML_NAMES.get(field, field.split("[")[0])
        self._raise(path, yaml_key, message)

    def _raise(self, path: str, yaml_key: str, message: str) -> NoReturn:
        label = self.labels.get(yaml_key) or self.labels.get(yaml_key.split(".")[0])
        if label is None and yaml_key in PROTO_NAMES:
            label = yaml_key  # a YAML key named differently on the wire (cpus -> cpus_hint)
        raise SpecError("", f"{self.origin}: {path}{f' ({label})' if label else ''}: {message}")

    def reject_unknown(self, known: tuple[str, ...]) -> None:
        for key in self.doc:
            if key in known:
                continue
            if not isinstance(key, str):
                raise SpecError("", f"{self.origin}: field names must be strings, got {key!r}")
            close = _closest(key, known)
            hint = f" (did you mean {close!r}?)" if close else f"; known fields: {', '.join(known)}"
            raise SpecError("", f"{self.origin}: unknown field {self.prefix + key!r}{hint}")

    def _get(self, key: str, required: bool) -> Any:
        value = self.doc.get(key)
        if value is None and required:
            self.fail(key, "is required")
        return value

    def string(self, key: str, *, required: bool = False) -> str:
        value = self._get(key, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.fail(key, f"must be a string, got {_kind(value)}")
        return value

    def integer(self, key: str, *, required: bool = False) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {_kind(value)} {value!r}")
        return value

    def boolean(self, key: str) -> bool:
        """False when absent; YAML's true / false only (not "yes" as a string, not 1)."""
        value = self._get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {_kind(value)} {value!r}")
        return value

    def number(self, key: str) -> float:
        """0.0 when absent: the wire's "no hint"."""
        value = self._get(key, False)
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(key, f"must be a number, got {_kind(value)} {value!r}")
        return float(value)

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings (one string reads as a list of one); () when absent."""
        value = self._get(key, False)
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list):
            self.fail(key, f"must be a list of strings, got {_kind(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.fail_path(f"spec.{key}[{i}]", f"must be a string, got {_kind(item)} {item!r}")
        return tuple(value)

    def boolean(self, key: str) -> bool | None:
        """True or False; None when absent (the daemon's default rule applies)."""
        value = self._get(key, False)
        if value is not None and not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {_kind(value)} {value!r}")
        return value

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
        return tuple(argv)

    def path(self, key: str, *, base: Path) -> str:
        value = self.string(key)
        if not value.strip():
            return ""
        p = Path(value).expanduser()
        # Not resolve(): symlinks are the node's business, and the path may not exist here.
        return str(p if p.is_absolute() else (base / p).absolute())

    def profile(self, key: str, model: str, *, base: Path) -> dict[str, Any] | None:
        path = self.path(key, base=base)
        if not path:
            return None
        try:
            profiles = load_profiles(path)
        except ProfileError as exc:
            self.fail(key, f"is not a usable profile file: {exc}")
        if model in profiles:
            return profiles[model].to_dict()
        if not model and len(profiles) == 1:
            return next(iter(profiles.values())).to_dict()
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
            if not isinstance(name, str):
                self.fail(key, f"has a variable name that is not a string: {name!r}")
            if isinstance(val, bool) or val is None:
                self.fail(f"{key}.{name}", f"must be a string, got {_kind(val)} (quote values like yes, no, "
                                           "true, on, off and ~)")
            if not isinstance(val, (str, int, float)):
                self.fail(f"{key}.{name}", f"must be a string, got {_kind(val)}")
            out[name] = str(val)
        return out

    def elastic(self, key: str) -> tuple[int, int]:
        """(min_gpus, max_gpus); (0, 0) when absent. The range rules are the shared ones."""
        value = self._get(key, False)
        if value is None:
            return 0, 0
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping with min_gpus and max_gpus, got {_kind(value)}")
        sub = _Fields(value, self.origin, self.labels, prefix=f"{self.prefix}{key}.")
        sub.reject_unknown(ELASTIC_FIELDS)
        return sub.integer("min_gpus", required=True) or 0, sub.integer("max_gpus", required=True) or 0


def _kind(value: Any) -> str:
    """YAML vocabulary for a Python value's type, for messages users can act on."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _closest(key: str, known: tuple[str, ...]) -> str | None:
    hits = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return hits[0] if hits else None
