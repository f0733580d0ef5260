"""The YAML job spec loader: every field validated, one line naming it (no daemon needed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from synergy.scheduler.cli.spec import SpecError, load_spec, parse_spec, spec_document
from synergy.scheduler.profiles.format import dump_profiles
from synergy.scheduler.profiles.zoo import default_profiles

ZOO = default_profiles()

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_full_spec_round_trips(tmp_path: Path) -> None:
    prof = tmp_path / "profiles.json"
    prof.write_text(json.dumps(dump_profiles({"gnmt": ZOO["gnmt"]})))
    path = write(tmp_path, """
name: r18
command: [python, train.py, --epochs, 90, --lr, 0.1]
working_dir: /shared/r18
gpus: 2
cpus: 6
memory_gb: 120.5
model: gnmt
task: language
profile: profiles.json
iterations: 1000
checkpoint_dir: ckpt
priority: -3
env: {A: "1", B: 2}
elastic: {min_gpus: 1, max_gpus: 4}
""")
    spec = load_spec(path)
    assert spec.command == ("python", "train.py", "--epochs", "90", "--lr", "0.1")
    assert spec.gpus == 2 and spec.cpus_hint == 6.0 and spec.mem_gb_hint == 120.5
    assert spec.checkpoint_dir == "/shared/r18/ckpt"
    assert spec.env == (("A", "1"), ("B", "2"))
    assert spec.profile == ZOO["gnmt"].to_dict()
    assert (spec.min_gpus, spec.max_gpus) == (1, 4)
    assert json.loads(json.dumps(spec_document(spec)))["elastic"] == {"min_gpus": 1, "max_gpus": 4}


def test_command_string_is_split_never_shelled(tmp_path: Path) -> None:
    spec = parse_spec({"name": "a", "gpus": 1, "command": "python t.py --msg 'a b' | tee $HOME"},
                      origin="x")
    # Pipes and variables stay literal arguments: no shell ever sees them.
    assert spec.command == ("python", "t.py", "--msg", "a b", "|", "tee", "$HOME")


def test_relative_working_dir_is_taken_from_base_dir(tmp_path: Path) -> None:
    spec = parse_spec({"name": "a", "gpus": 1, "command": "x", "working_dir": "sub"}, origin="x",
                      base_dir=tmp_path)
    assert spec.working_dir == str(tmp_path / "sub")
    default = parse_spec({"name": "a", "gpus": 1, "command": "x"}, origin="x", base_dir=tmp_path)
    assert default.working_dir == str(tmp_path)


@pytest.mark.parametrize("body, message", [
    ("gpus: 0", "spec.gpus: must be at least 1, got 0"),
    ("gpus: -2", "spec.gpus: must be at least 1, got -2"),
    ("gpus: 1.5", "spec.gpus: must be an integer, got a number 1.5"),
    ("gpus: true", "spec.gpus: must be an integer, got a boolean"),
    ("gpus: '2'", "spec.gpus: must be an integer, got a string"),
    ("gpus: 99999999999", "spec.gpus: must be at most 2147483647"),
    ("name: 1abc", "spec.name: '1abc' must start with a letter"),
    ("name: [a]", "spec.name: must be a string, got a list"),
    ("command: []", "spec.command: must not be empty"),
    ("command: ''", "spec.command: must not be empty"),
    ("command: {a: 1}", "spec.command: must be a list of arguments or a string, got a mapping"),
    ("command: [python, null]", "spec.command: item 1 must be a string, got null"),
    ("command: \"python 'x\"", "spec.command: cannot be split into arguments"),
    ("command: [python, '']", "spec.command[1]: must not be empty"),
    ("cpus: .nan", "spec.cpus_hint (cpus): must be a finite number from 0"),
    ("memory_gb: lots", "spec.mem_gb_hint (memory_gb): must be a number, got a string"),
    ("task: vision", "spec.task: must be one of image, language, speech"),
    ("model: 'res net'", "spec.model: 'res net' must be a model name"),
    ("profile: missing.json", "spec.profile: is not a usable profile file"),
    ("iterations: -1", "spec.iterations: must be at least 0, got -1"),
    ("priority: 5000", "spec.priority: must be at most 1000, got 5000"),
    ("env: [A]", "spec.env: must be a mapping of NAME: value, got a list"),
    ("env: {1A: x}", "spec.env: '1A' is not a valid variable name"),
    ("env: {DEBUG: yes}", "spec.env[DEBUG]: must be a string, got a boolean (quote values"),
    ("env: {SYNERGY_JOB_TOKEN: x}", "spec.env[SYNERGY_JOB_TOKEN]: is reserved"),
    ("elastic: 4", "spec.elastic: must be a mapping with min_gpus and max_gpus"),
    ("elastic: {min_gpus: 1}", "spec.max_gpus (elastic.max_gpus): is required"),
    ("elastic: {min_gpus: 4, max_gpus: 2}", "spec.max_gpus (elastic.max_gpus): must be at least min_gpus (4), got 2"),
    ("elastic: {min_gpus: 4, max_gpus: 8}", "spec.gpus: must lie in the elastic range 4..8, got 2"),
    ("elastic: {min_gpus: 1, max_gpus: 4, step: 1}", "unknown field 'elastic.step'"),
    ("gpu: 2", "unknown field 'gpu' (did you mean 'gpus'?)"),
    ("gpus: 2\ngpus: 3", "duplicate field 'gpus' at line"),
    ("working_dir: \"/a\\0b\"", "spec.working_dir: must not contain NUL characters"),
    ("priority: -1001", "spec.priority: must be at least -1000, got -1001"),
    ("iterations: 1000000000001", "spec.iterations: must be at most 1000000000000"),
])
def test_each_bad_field_is_named_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    base = {"name": "name: ok", "command": "command: [python, t.py]", "gpus": "gpus: 2"}
    key = body.split(":")[0]
    lines = [v for k, v in base.items() if k != key] + [body]
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ")
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty"),
    ("- a\n- b\n", "a job spec must be a mapping of fields"),
    ("name: a\n  gpus: 1\n", "invalid YAML at line 2"),
    ("name: [a\n", "invalid YAML"),
    ("name: !!python/object:os.system x\n", "invalid YAML"),
])
def test_malformed_files(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, text))


def test_missing_required_fields(tmp_path: Path) -> None:
    for missing in ("name", "command", "gpus"):
        doc = {"name": "a", "command": ["x"], "gpus": 1}
        del doc[missing]
        with pytest.raises(SpecError, match=f"spec.{missing}: is required"):
            parse_spec(doc, origin="x")


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path)


def test_overrides_win_and_env_merges(tmp_path: Path) -> None:
    path = write(tmp_path, "name: a\ncommand: x\ngpus: 1\nenv: {A: '1', B: '2'}\n")
    spec = load_spec(path, overrides={"gpus": 4, "env": {"B": "3", "C": "4"}},
                     labels={"gpus": "--gpus"})
    assert spec.gpus == 4
    assert spec.env_dict == {"A": "1", "B": "3", "C": "4"}
    with pytest.raises(SpecError, match=r": spec.gpus \(--gpus\): must be at least 1, got 0$"):
        load_spec(path, overrides={"gpus": 0}, labels={"gpus": "--gpus"})


def test_profile_file_needs_a_matching_model(tmp_path: Path) -> None:
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(dump_profiles({"gnmt": ZOO["gnmt"], "alexnet": ZOO["alexnet"]})))
    doc = {"name": "a", "command": "x", "gpus": 1, "profile": str(prof)}
    with pytest.raises(SpecError, match="has several models and no 'model' field"):
        parse_spec(doc, origin="x")
    with pytest.raises(SpecError, match="has no model 'resnet18'"):
        parse_spec({**doc, "model": "resnet18"}, origin="x")
    assert parse_spec({**doc, "model": "alexnet"}, origin="x").profile == ZOO["alexnet"].to_dict()


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name and spec.command and spec.gpus >= 1


# -- the same checks through `synergy submit --dry-run` (flags over a file; no daemon) -----------
def dry_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict | None, str]:
    from synergy.scheduler.cli.main import main

    capsys.readouterr()
    code = main(["submit", "--dry-run", "--json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out)["spec"] if code == 0 else None), err


def test_flags_override_and_merge_into_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "name: a\ncommand: [python, t.py]\ngpus: 2\nenv: {A: '1'}\n"
                           "elastic: {min_gpus: 1, max_gpus: 4}\n")
    code, spec, err = dry_run(capsys, str(path), "--gpus", "3", "--env", "B=2", "--max-gpus", "8",
                              "--name", "b", "--", "python", "other.py", "--flag")
    assert code == 0, err
    assert spec["name"] == "b" and spec["gpus"] == 3
    assert spec["command"] == ["python", "other.py", "--flag"]
    assert spec["env"] == {"A": "1", "B": "2"}
    assert spec["elastic"] == {"min_gpus": 1, "max_gpus": 8}
    assert err == ""  # elastic jobs are scheduled: no note, JSON stays clean


@pytest.mark.parametrize("args, message", [
    (["--name", "a", "--gpus", "0", "--command", "x"], "command line: spec.gpus (--gpus): must be at least 1, got 0"),
    (["--name", "a", "--gpus", "1"], "submit needs a spec file or at least --command"),
    (["--name", "a", "--gpus", "1", "--env", "NOEQUALS", "--command", "x"], "--env 'NOEQUALS' must look like"),
    (["--name", "a", "--gpus", "1", "--env", "SYNERGY_X=1", "--command", "x"], "spec.env[SYNERGY_X] (--env SYNERGY_X): is reserved"),
    (["--name", "a", "--gpus", "1", "--command", "x", "--", "y"], "either with --command or after '--'"),
    (["--name", "a", "--gpus", "2", "--min-gpus", "4", "--max-gpus", "8", "--command", "x"],
     "spec.gpus (--gpus): must lie in the elastic range 4..8, got 2"),
    (["--name", "a", "--gpus", "x"], "argument --gpus: invalid int value"),
    (["--name", "a", "--gpus", "1", "--checkpoint-every", "0.5", "--checkpoint-dir", "c", "--command", "x"],
     "spec.checkpoint_every_s (--checkpoint-every): must be 0 or from 1 to 604800"),
    (["--name", "a", "--gpus", "1", "--checkpoint-every", "30", "--command", "x"],
     "spec.checkpoint_every_s (--checkpoint-every): needs checkpoint_dir"),
])
def test_flag_errors_name_the_flag(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = dry_run(capsys, *args)
    assert code == 2
    assert err.startswith("synergy: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_user_is_left_to_synergyd_unless_given_and_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`spec.user`: --user or the file's `user` (an admin submitting on someone's behalf), else
    nothing: synergyd makes the job the authenticated caller's (issue 16), never the OS name."""
    cpu = ["--name", "p", "--kind", "cpu", "--cpus", "1", "--memory-gb", "1", "--command", "x"]
    monkeypatch.setenv("LOGNAME", "dora")
    code, spec, err = dry_run(capsys, *cpu)
    assert code == 0 and spec["user"] is None, err
    code, spec, err = dry_run(capsys, *cpu, "--user", "eve")
    assert code == 0 and spec["user"] == "eve", err
    path = write(tmp_path, "name: a\ncommand: [python, t.py]\ngpus: 1\nuser: frank\n")
    code, spec, err = dry_run(capsys, str(path))
    assert code == 0 and spec["user"] == "frank", err
    code, _, err = dry_run(capsys, *cpu, "--user", "no body")
    assert code == 2 and err.strip() == ("synergy: error: command line: spec.user (--user): 'no body' must start "
                                         "with a letter or '_' and hold at most 63 letters, digits, '.', '_' or '-'")


# -- no_share (Tesserae's packing skips the job) ------------------------------------------------
def test_no_share_from_the_file_and_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load_spec(write(tmp_path, "name: a\ncommand: [python, t.py]\ngpus: 1\nno_share: true\n")).no_share
    assert not load_spec(write(tmp_path, "name: a\ncommand: [python, t.py]\ngpus: 1\n")).no_share
    code, spec, err = dry_run(capsys, "--name", "a", "--gpus", "1", "--no-share", "--command", "x")
    assert code == 0 and spec["no_share"] is True, err


@pytest.mark.parametrize("body, message", [
    ("no_share: 'yes'", "spec.no_share: must be true or false, got a string 'yes'"),
    ("no_share: 1", "spec.no_share: must be true or false, got an integer 1"),
    ("kind: cpu\ncpus: 1\nmemory_gb: 1\nno_share: true",
     "spec.no_share: a CPU-only job takes no GPU, so there is none to share"),
])
def test_bad_no_share_is_named_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    gpus = "" if "kind: cpu" in body else "gpus: 1\n"
    path = write(tmp_path, f"name: a\ncommand: [python, t.py]\n{gpus}{body}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_checkpoint_every_from_the_file_and_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "name: a\ncommand: [python, t.py]\ngpus: 1\ncheckpoint_dir: c\ncheckpoint_every_s: 600\n")
    code, spec, err = dry_run(capsys, str(path))
    assert code == 0 and spec["checkpoint_every_s"] == 600, err
    code, spec, err = dry_run(capsys, str(path), "--checkpoint-every", "30")
    assert code == 0 and spec["checkpoint_every_s"] == 30, err
