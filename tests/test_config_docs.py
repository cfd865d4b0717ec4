"""docs/fleetd.example.yaml and docs/configuration.md stay true to the config schema.

The example must load (``load_config`` and ``fleetd config check``) and show every key of
``FleetdConfig``; the reference must be exactly what ``fleetd config reference`` generates.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field, field_validator, model_validator

from fleetd.cli.fleetd_main import main
from fleetd.config import FleetdConfig, load_config
from fleetd.configbase import CHECKS_ATTRIBUTE, Duration, Secret, StrictModel, documents
from fleetd.configdoc import collect_sections, reference_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs"
EXAMPLE = DOCS / "fleetd.example.yaml"
REFERENCE = DOCS / "configuration.md"
SECRET_VALUE = "s3cr3t-value-of-32-characters!!!"
DATABASE_URL = "postgresql://fleetd_agent:s3cr3t@db.example/fleet"  # a URL-valued secret
ALERTING = "alerting: {receivers: [{name: console, console: [{}]}]}\n"  # a file needs it
WEBHOOK_URL = "https://hooks.example/services/s3cr3t"  # webhook URLs must be http(s) URLs

_ACTIVE_KEY = re.compile(r"^(?P<indent> *)(?P<dash>- +)?(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?:\s|$)")
_COMMENTED_KEY = re.compile(
    r"^(?P<hash> *#)(?P<gap> +)(?P<dash>- +)?(?P<key>[a-z_][a-z0-9_]*):(?:\s|$)"
)


# ------------------------------------------------------------------------------------ helpers
def installable_example(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example with /etc/fleetd moved under ``root``, its secret files and variables made.

    Secrets in the example come from ``*_file`` and ``*_env``; load_config reads them.
    """
    text = EXAMPLE.read_text(encoding="utf-8").replace("/etc/fleetd/", f"{root}/etc/fleetd/")
    for match in re.finditer(r"^[ -]*(\w+)_file: *(\S+)", text, re.MULTILINE):
        secret = Path(match.group(2))
        secret.parent.mkdir(parents=True, exist_ok=True)
        value = DATABASE_URL if secret.name.endswith("registry-url") else SECRET_VALUE
        if secret.name.endswith("webhook-url"):
            value = WEBHOOK_URL
        secret.write_text(value + "\n", encoding="utf-8")
    for match in re.finditer(r"^[ -]*\w+_env: *(\S+)", text, re.MULTILINE):
        monkeypatch.setenv(match.group(1), SECRET_VALUE)
    path = root / "fleetd.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def outline(text: str) -> tuple[set[str], set[str]]:
    """Dotted key paths (list items add no index) of active and commented-out YAML keys.

    Indentation decides nesting for both: a commented key's indentation is where its text
    would start once the ``#`` is removed.
    """
    active: set[str] = set()
    commented: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        found = _ACTIVE_KEY.match(line)
        target = active
        if found is not None:
            indent = len(found["indent"]) + len(found["dash"] or "")
        else:
            found = _COMMENTED_KEY.match(line)
            if found is None:
                continue
            target = commented
            indent = len(found["hash"]) - 1 + len(found["gap"]) - 1 + len(found["dash"] or "")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([key for _, key in stack] + [found["key"]])
        target.add(path)
        stack.append((indent, found["key"]))
    return active, commented


def schema_keys(
    model: type[BaseModel], prefix: str = "", ancestry: tuple[type[BaseModel], ...] = ()
) -> Iterator[tuple[str, bool]]:
    """(dotted path, is a secret) of every key under ``model``; a model nested in itself
    (a route's routes) is listed once."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}{key}"
        yield path, _mentions(info.annotation, Secret)
        sub = _section(info.annotation)
        if sub is not None and sub not in (*ancestry, model):
            yield from schema_keys(sub, path + ".", (*ancestry, model))


def _mentions(tp: object, target: type) -> bool:
    return tp is target or target in getattr(tp, "__args__", ())


def _section(tp: object) -> type[BaseModel] | None:
    for candidate in (tp, *getattr(tp, "__args__", ())):
        for inner in (candidate, *getattr(candidate, "__args__", ())):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


# ------------------------------------------------------------------------------------ example
def test_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(installable_example(tmp_path, monkeypatch))
    assert config.remediation.mode == "dry-run"  # what a new install must run
    assert config.api.token is not None and config.api.token.reveal() == SECRET_VALUE
    assert config.registry.url is not None
    assert [r.name for r in config.alerting.receivers] == [
        "oncall",
        "chat",
        "incidents",
        "alertmanager",
        "audit",
        "console",
    ]


def test_example_passes_fleetd_config_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = installable_example(tmp_path, monkeypatch)
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().startswith(f"{path}: OK (")


def test_config_check_also_checks_the_rule_files_it_names(tmp_path: Path) -> None:
    local = tmp_path / "rules.d"
    local.mkdir()
    (local / "site.yaml").write_text("rules:\n  - name: X\n    expr: fleetd_gpu_up ==\n")
    path = tmp_path / "fleetd.yaml"
    path.write_text(f"rules: {{local_dir: {local}}}\n{ALERTING}")
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert f"{local / 'site.yaml'}:2:5: rules[0].severity: required key is missing" in result.output


def test_config_check_reports_the_file_and_its_rule_files_problems_at_once(
    tmp_path: Path,
) -> None:
    """A wrong poll interval does not hide the rule files' problems: one run lists all."""
    local = tmp_path / "rules.d"
    local.mkdir()
    site = local / "site.yaml"
    site.write_text(
        "rules:\n  - name: X\n    expr: fleetd_gpu_up ==\n    severity: info\n"
        "disable: [GpuMisssing]\n"
    )
    path = tmp_path / "fleetd.yaml"
    path.write_text(f"poll: {{interval: 7q}}\nrules: {{local_dir: {local}}}\n{ALERTING}")
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"{path}:1:8: poll.interval: invalid duration '7q': use seconds or text like '30s', "
        "'5m', '1h30m'",
        f"{site}:3:27: rules[0].expr: unexpected end of expression",
        f"{site}:5:11: disable[0]: no rule named 'GpuMisssing' to disable; "
        "did you mean 'GpuMissing'?",
        f"{path}: 3 problem(s), 0 warning(s)",
    ]


def test_config_check_says_which_rules_it_checked_when_the_rules_section_is_wrong(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_text(f"rules: {{local_dir: 7, shipped: true}}\n{ALERTING}")
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-2:] == [
        f"{path}: rules.packs and rules.local_dir not checked: the rules: section could not "
        "be read; only the shipped packs were checked",
        f"{path}: 1 problem(s), 0 warning(s)",
    ]


def test_config_check_warns_of_a_rule_on_a_metric_fleetd_never_writes(tmp_path: Path) -> None:
    local = tmp_path / "rules.d"
    local.mkdir()
    site = local / "site.yaml"
    site.write_text(
        "rules:\n  - name: HotspotTooHot\n"
        '    expr: fleetd_gpu_temprature_celsius{sensor="hotspot"} > 90\n'
        "    severity: warning\n"
    )
    path = tmp_path / "fleetd.yaml"
    path.write_text(f"rules: {{local_dir: {local}}}\n{ALERTING}")
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"{site}:3:11: rules[0].expr: warning: rule 'HotspotTooHot' reads "
        "'fleetd_gpu_temprature_celsius', a metric fleetd never writes: the rule can never "
        "fire; did you mean 'fleetd_gpu_temperature_celsius'?",
        f"{path}: 0 problem(s), 1 warning(s)",
    ]


def test_example_workers_match_the_vllm_unit_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm@N.service serves GPU N on port 800N (systemd/vllm@.service)."""
    config = load_config(installable_example(tmp_path, monkeypatch))
    workers = config.vllm.workers
    assert len(workers) == 8
    for index, worker in enumerate(workers):
        assert worker.gpus == [index]
        assert worker.unit == f"vllm@{index}.service"
        assert worker.url == f"http://127.0.0.1:800{index}"


def test_example_shows_every_key_of_the_schema() -> None:
    active, commented = outline(EXAMPLE.read_text(encoding="utf-8"))
    shown = active | commented
    # the root route takes no matchers (it matches everything): child routes show its keys
    shown |= {p.replace("alerting.route.routes.", "alerting.route.", 1) for p in shown}
    missing = []
    for path, secret in schema_keys(FleetdConfig):
        variants = {path, f"{path}_file", f"{path}_env"} if secret else {path}
        if not variants & shown:
            missing.append(path)
    assert missing == []


def test_commented_keys_in_the_example_are_real_keys() -> None:
    """A commented-out key is never validated by loading, so check its name here."""
    _, commented = outline(EXAMPLE.read_text(encoding="utf-8"))
    known = set()
    for path, secret in schema_keys(FleetdConfig):
        known |= {path, f"{path}_file", f"{path}_env"} if secret else {path}
    # keys of a child route are those of the route itself
    known |= {p.replace("alerting.route.", "alerting.route.routes.", 1) for p in known}
    assert sorted(commented - known) == []


def test_outline_follows_indentation_of_commented_keys() -> None:
    text = (
        "a:\n"
        "  b: 1      # trailing: not a key\n"
        "  # c:\n"
        "  #   d: 2\n"
        "  list:\n"
        "    - e: 1\n"
        "      # f: 2\n"
        "# Prose: not a key\n"
        "g: 3\n"
    )
    active, commented = outline(text)
    assert active == {"a", "a.b", "a.list", "a.list.e", "g"}
    assert commented == {"a.c", "a.c.d", "a.list.f"}


# ------------------------------------------------------------------------------------ reference
def test_configuration_md_is_the_generated_reference() -> None:
    expected = reference_markdown()
    assert REFERENCE.read_text(encoding="utf-8") == expected, (
        "docs/configuration.md is out of date: run "
        "`python -m fleetd config reference > docs/configuration.md`"
    )


def test_config_reference_command_prints_the_reference() -> None:
    result = CliRunner().invoke(main, ["config", "reference"])
    assert result.exit_code == 0, result.output
    assert result.output == reference_markdown()


def test_every_key_is_in_the_reference_with_a_description() -> None:
    undescribed = [
        f"{section.path}.{field.key}"
        for section in collect_sections()
        for field in section.fields
        if not field.description
    ]
    assert undescribed == []
    text = REFERENCE.read_text(encoding="utf-8")
    for section in collect_sections():
        for field in section.fields:
            assert f"| `{field.key}` |" in text


def test_every_section_says_what_it_is() -> None:
    """Each section's text is its class docstring: a section without one is a blank heading."""
    assert [s.model.__name__ for s in collect_sections() if not s.text] == []


def test_descriptions_live_on_the_fields() -> None:
    """The docstring under a field is pydantic's ``description`` (no side table to drift)."""
    assert FleetdConfig.model_fields["state_dir"].description
    assert "SQLite" in str(FleetdConfig.model_fields["state_dir"].description)


class _Inner(StrictModel):
    """A nested section."""

    depth: int = Field(default=2, ge=1, le=9)
    """How deep it goes."""


class _Sample(StrictModel):
    """A made-up section to exercise the generator."""

    wait: Duration = 300.0
    """How long to wait."""
    odd: int = Field(default=3, description="An odd number.")
    password: Secret | None = None
    inner: _Inner = Field(default_factory=_Inner)
    items: list[_Inner] = Field(default_factory=list)

    @field_validator("odd")
    @classmethod
    @documents("must be odd")
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError("must be odd")
        return value

    @model_validator(mode="after")
    @documents("wait must be at least odd (…)")
    def _consistent(self) -> _Sample:
        if self.wait < self.odd:
            raise ValueError(f"wait must be at least odd ({self.odd})")
        return self


def test_the_generator_reads_types_defaults_limits_and_checks_from_the_code() -> None:
    text = reference_markdown(_Sample)
    assert "A made-up section to exercise the generator." in text
    assert "| `wait` | duration | `5m` |  | How long to wait. |" in text
    assert "| `odd` | integer | `3` | must be odd | An odd number. |" in text
    assert "| `password` | secret | unset |" in text
    assert "`password_file` / `password_env`" in text
    assert "| `inner` | [section](#inner) | see its section |" in text
    assert "| `items` | list of [sections](#inner) | `[]` |" in text
    assert "| `depth` | integer | `2` | ≥ 1; ≤ 9 | How deep it goes. |" in text
    assert "* wait must be at least odd (…)" in text
    # a nested model is documented once, at its first path
    assert text.count('<a id="inner"></a>') == 1
    assert inspect.getdoc(_Inner) == "A nested section."


def _models(root: type[BaseModel]) -> Iterator[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for info in model.model_fields.values():
            todo += [t for t in _types_in(info.annotation) if issubclass(t, BaseModel)]


def _types_in(annotation: object) -> Iterator[type]:
    from typing import get_args

    if isinstance(annotation, type):
        yield annotation
    for arg in get_args(annotation):
        yield from _types_in(arg)


def test_every_validator_says_what_it_enforces() -> None:
    """The reference's checks come from ``@documents`` beside each validator (configdoc
    reads no source code): a validator without one would go unmentioned, so none may."""
    undocumented = []
    for model in _models(FleetdConfig):
        decorators = model.__pydantic_decorators__
        for name, dec in [
            *decorators.field_validators.items(),
            *decorators.model_validators.items(),
        ]:
            func = getattr(dec.func, "__func__", dec.func)
            if not hasattr(func, CHECKS_ATTRIBUTE):
                undocumented.append(f"{model.__name__}.{name}")
    assert not undocumented, f"validators without @documents(...): {undocumented}"


def test_the_generator_reads_no_source_code() -> None:
    import fleetd.configdoc as configdoc

    source = Path(configdoc.__file__).read_text(encoding="utf-8")
    assert "import ast" not in source and "getsource" not in source
