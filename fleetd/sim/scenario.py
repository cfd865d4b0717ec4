"""Scenarios: YAML files of timed steps (set load, inject/clear faults, processes, resets).

A scenario is validated strictly through fleetd.configbase — unknown keys, wrong types,
unknown faults and bad fault parameters are errors naming file, line and key, all at once.
``ScenarioRunner`` applies the steps to a SimNode as the injected clock passes their times;
each step lands at exactly its own model time, so a FakeClock can run 24 hours in a test.

File format::

    description: one line
    model: MI355X            # or MI300X (what build_node should build for this scenario)
    seed: 0
    duration: 5m             # when the scenario is over (default: its last step)
    load_profile:            # optional: a smooth day/night load, as load steps every `every`
      base: 0.55
      amplitude: 0.3
      period: 24h
      every: 10m
    steps:
      - {at: 0s, load: 0.6}                      # gpu omitted or "all": every GPU
      - {at: 90s, gpu: 3, inject: ecc_uncorrectable, persistent: true}
      - {at: 2m, gpu: 1, inject: thermal_runaway, params: {delta_c: 50}}
      - {at: 4m, gpu: 1, clear: thermal_runaway}  # or clear: all
      - {at: 5m, gpu: 6, remove_gpu: true}        # falls off the bus; return_gpu: true
      - {at: 6m, gpu: 0, add_process: {pid: 4242, name: vllm, vram_gb: 180}}
      - {at: 7m, remove_process: 4242}
      - {at: 8m, gpu: 0, reset: true}             # an outside hive reset
      - {at: 9m, gpu: 2, release_hangs: true}
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fleetd.clock import Clock
from fleetd.configbase import Duration, StrictModel, load_yaml, validate
from fleetd.errors import ConfigError, Problem
from fleetd.logs import get_logger
from fleetd.sim import wrapper as w
from fleetd.sim.faults import FAULT_NAMES, FAULT_PARAMS
from fleetd.sim.model import SimNode, build_node
from fleetd.sim.partitions import check_modes
from fleetd.sim.physics import noise

log = get_logger(__name__)

MAX_GPUS = 8
_ACTIONS = (
    "load",
    "inject",
    "clear",
    "remove_gpu",
    "return_gpu",
    "reset",
    "add_process",
    "remove_process",
    "release_hangs",
)


class ProcessSpec(StrictModel):
    """A KFD process a step starts on the step's GPU."""

    pid: int = Field(gt=0)
    name: str = Field(min_length=1)
    vram_gb: float = Field(ge=0)


class LoadProfile(StrictModel):
    """A day/night load curve, turned into per-GPU load steps every ``every``."""

    base: float = Field(0.55, ge=0, le=1)
    amplitude: float = Field(0.3, ge=0, le=0.5)
    period: Duration = 86400.0
    every: Duration = 600.0
    spread: float = Field(0.05, ge=0, le=0.5)
    jitter: float = Field(0.05, ge=0, le=0.3)

    @field_validator("every", "period")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be longer than 0s")
        return value

    def level(self, gpu: int, t: float, seed: int) -> float:
        """The load of ``gpu`` at scenario time ``t`` (deterministic)."""
        wave = math.sin(2 * math.pi * t / self.period - math.pi / 2)
        offset = self.spread * (gpu - (MAX_GPUS - 1) / 2) / ((MAX_GPUS - 1) / 2)
        wobble = self.jitter * noise(seed, gpu, 99, t)
        return round(min(1.0, max(0.0, self.base + self.amplitude * wave + offset + wobble)), 3)


class Step(StrictModel):
    """One timed action; exactly one action key per step."""

    at: Duration
    gpu: int | Literal["all"] | None = None
    load: float | None = Field(None, ge=0, le=1)
    inject: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    persistent: bool | None = None
    clear: str | None = None
    remove_gpu: bool = False
    return_gpu: bool = False
    reset: bool = False
    add_process: ProcessSpec | None = None
    remove_process: int | None = Field(None, gt=0)
    release_hangs: bool = False

    @field_validator("gpu")
    @classmethod
    def _gpu_index(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and not 0 <= value < MAX_GPUS:
            raise ValueError(f"GPU index must be 0..{MAX_GPUS - 1} or 'all'")
        return value

    @field_validator("inject")
    @classmethod
    def _fault_kind(cls, value: str | None) -> str | None:
        if value is not None and value not in FAULT_PARAMS:
            raise ValueError(f"unknown fault {value!r}; known: {', '.join(FAULT_NAMES)}")
        return value

    @field_validator("clear")
    @classmethod
    def _clear_kind(cls, value: str | None) -> str | None:
        if value is not None and value != "all" and value not in FAULT_PARAMS:
            raise ValueError(
                f"unknown fault {value!r}; use 'all' or one of {', '.join(FAULT_NAMES)}"
            )
        return value

    @model_validator(mode="after")
    def _one_action(self) -> Step:
        chosen = [name for name in _ACTIONS if getattr(self, name) not in (None, False)]
        if len(chosen) != 1:
            raise ValueError(
                f"a step needs exactly one action ({', '.join(_ACTIONS)}); found {chosen or 'none'}"
            )
        action = chosen[0]
        if action != "inject" and (self.params or self.persistent is not None):
            raise ValueError("'params' and 'persistent' belong to an 'inject' step")
        needs_gpu = action in ("inject", "remove_gpu", "return_gpu", "reset", "add_process")
        if needs_gpu and not isinstance(self.gpu, int):
            raise ValueError(f"a step that does '{action}' needs a single 'gpu' index")
        if action == "remove_process" and self.gpu is not None:
            raise ValueError("'remove_process' acts on a pid, not on a gpu")
        return self

    @property
    def action(self) -> str:
        return next(name for name in _ACTIONS if getattr(self, name) not in (None, False))


class WorkerStep(StrictModel):
    """A timed change to a stand-in vLLM worker's engine (``fleetd.sim.vllm_worker``).

    The GPUs never see it: a hung engine is a serving fault with healthy hardware, which is
    exactly what only the vLLM counters reveal.
    """

    at: Duration
    worker: str = Field(min_length=1)
    engine: Literal["hung", "ok"] | None = None
    """``hung``: health 200, no progress (vllm-project/vllm#39863); ``ok``: progress again."""
    speed: float | None = Field(None, gt=0, le=1)
    """The engine's own speed on healthy GPUs (0.7: a slow build or setting)."""
    prompt_tokens: int | None = Field(None, gt=0, le=1_000_000)
    """Prompt tokens per request from now on (a traffic shift)."""

    @model_validator(mode="after")
    def _something(self) -> WorkerStep:
        if self.engine is None and self.speed is None and self.prompt_tokens is None:
            raise ValueError("a worker step needs engine, speed or prompt_tokens")
        return self


class PartitionSpec(StrictModel):
    """The node's GPU partition modes (valid combinations only: NPS4 needs QPX or CPX)."""

    compute: Literal["SPX", "DPX", "QPX", "CPX"] = "SPX"
    memory: Literal["NPS1", "NPS4"] = "NPS1"
    lost_on_reset: bool = False
    """Whether a hive reset returns the GPUs to SPX/NPS1 (as a reboot or driver reload does)."""
    reapply_fails: bool = False
    """Whether amdsmi's partition-setting calls fail (BUSY): a mode that will not re-apply."""

    @model_validator(mode="after")
    def _valid(self) -> PartitionSpec:
        check_modes(self.compute, self.memory)
        return self


class Scenario(StrictModel):
    """A validated scenario file."""

    name: str = ""
    description: str = ""
    model: Literal["MI355X", "MI300X"] = "MI355X"
    seed: int = 0
    library_version: str = Field(default="26.1.0", pattern=r"^\d+\.\d+\.\d+$")
    """What the node's libamd_smi.so reports (26.1.x: ROCm 7.0; 26.4.0: ROCm 7.13)."""
    partition: PartitionSpec = Field(default_factory=PartitionSpec)
    duration: Duration | None = None
    load_profile: LoadProfile | None = None
    steps: list[Step] = Field(default_factory=list)
    workers: list[WorkerStep] = Field(default_factory=list)
    """Engine changes of the stand-in vLLM workers (demo and tests); a node without stand-ins
    ignores them."""

    @model_validator(mode="after")
    def _profile_needs_duration(self) -> Scenario:
        if self.load_profile is not None and self.duration is None:
            raise ValueError("a load_profile needs a 'duration'")
        return self

    @property
    def end(self) -> float:
        """Scenario time (seconds) at which it is over."""
        if self.duration is not None:
            return self.duration
        return max((step.at for step in self.steps), default=0.0)


# ---------------------------------------------------------------------------------- loading
def scenario_names() -> list[str]:
    """Names of the scenarios shipped with fleetd."""
    folder = resources.files("fleetd.sim") / "scenarios"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A shipped scenario by name (``"demo"``), or any scenario file by path."""
    text_name = str(name_or_path)
    path = Path(text_name)
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in text_name:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                [Problem(text_name, None, None, "", f"cannot read: {exc.strerror}")]
            ) from None
        return parse_scenario(text, text_name, default_name=path.stem)
    resource = resources.files("fleetd.sim") / "scenarios" / f"{text_name}.yaml"
    if not resource.is_file():
        known = ", ".join(scenario_names())
        raise ConfigError(
            [Problem(text_name, None, None, "", f"no such scenario; shipped: {known}")]
        )
    return parse_scenario(
        resource.read_text(encoding="utf-8"), f"scenarios/{text_name}.yaml", default_name=text_name
    )


def parse_scenario(text: str, filename: str, *, default_name: str = "") -> Scenario:
    """Validate scenario YAML; every problem (fault parameters too) is reported at once."""
    data, marks = load_yaml(text, filename)
    problems: list[Problem] = []
    scenario: Scenario | None = None
    try:
        scenario = validate(Scenario, data, marks, filename)
    except ConfigError as err:
        problems.extend(err.problems)
    steps = data.get("steps") if isinstance(data, dict) else None
    for index, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict) or step.get("inject") not in FAULT_PARAMS:
            continue
        params = step.get("params", {})
        if not isinstance(params, dict):
            continue  # the Scenario model already said so
        try:
            validate(
                FAULT_PARAMS[step["inject"]],
                params,
                marks,
                filename,
                base=("steps", index, "params"),
            )
        except ConfigError as err:
            problems.extend(err.problems)
    if problems or scenario is None:
        problems.sort(key=lambda p: (p.line or 0, p.col or 0))
        raise ConfigError(problems)
    if not scenario.name and default_name:
        scenario = scenario.model_copy(update={"name": default_name})
    return scenario


# ---------------------------------------------------------------------------------- running
@dataclass(frozen=True, slots=True)
class _Action:
    at: float  # scenario seconds
    order: int
    describe: str
    apply: Callable[[SimNode, float], object]


class ScenarioRunner:
    """Applies a scenario's steps to a node as the clock passes them.

    Call ``advance()`` (or ``advance(now)``) before reading the node, e.g. once per poll:
    every step due by then is applied at its own exact time, in file order.
    """

    def __init__(self, node: SimNode, scenario: Scenario, start: float) -> None:
        self.node = node
        self.scenario = scenario
        self.start = start
        self._actions = sorted(self._plan(), key=lambda a: (a.at, a.order))
        self._next = 0
        self._lock = threading.Lock()
        self.applied: list[str] = []
        """What has happened so far, one line per step (for logs and demos)."""

    def _plan(self) -> list[_Action]:
        actions: list[_Action] = []
        profile = self.scenario.load_profile
        if profile is not None:
            count = int(self.scenario.end // profile.every) + 1
            for k in range(count):
                t = k * profile.every
                for gpu in range(len(self.node.gpus)):
                    level = profile.level(gpu, t, self.scenario.seed)
                    actions.append(_Action(t, -1, f"gpu {gpu} load {level}", _set_load(gpu, level)))
        for order, step in enumerate(self.scenario.steps):
            actions.append(_Action(step.at, order, _describe(step), _step_action(step)))
        return actions

    @property
    def done(self) -> bool:
        """True once every step has been applied."""
        return self._next >= len(self._actions)

    @property
    def next_at(self) -> float | None:
        """Absolute time of the next pending step (None when done)."""
        if self.done:
            return None
        return self.start + self._actions[self._next].at

    @property
    def end(self) -> float:
        """Absolute time at which the scenario is over."""
        return self.start + self.scenario.end

    def advance(self, now: float | None = None) -> list[str]:
        """Apply every step due by ``now`` (default: the node's clock); returns what ran."""
        now = self.node.clock.now() if now is None else now
        ran: list[str] = []
        with self._lock:  # a scheduler thread and a test may both advance
            while not self.done and self.start + self._actions[self._next].at <= now:
                action = self._actions[self._next]
                self._next += 1
                action.apply(self.node, self.start + action.at)
                ran.append(action.describe)
                if action.order >= 0:
                    log.info("sim_scenario_step", scenario=self.scenario.name, step=action.describe)
            self.applied.extend(ran)
        return ran


def _set_load(gpu: int | None, level: float) -> Callable[[SimNode, float], object]:
    def apply(node: SimNode, at: float) -> object:
        if gpu is not None and gpu >= len(node.gpus):
            return None
        node.set_load(gpu, level, at=at)
        return None

    return apply


def _step_action(step: Step) -> Callable[[SimNode, float], object]:
    gpu = step.gpu if isinstance(step.gpu, int) else None
    action = step.action
    if action == "load":
        assert step.load is not None
        return _set_load(gpu, step.load)
    if action == "inject":
        kind, params, persistent = step.inject, dict(step.params), step.persistent
        assert kind is not None and gpu is not None
        return lambda node, at: node.inject(gpu, kind, persistent=persistent, at=at, **params)
    if action == "clear":
        kind_or_all = None if step.clear == "all" else step.clear
        return lambda node, at: node.clear_faults(gpu, kind_or_all, at=at)
    if action == "remove_gpu":
        assert gpu is not None
        return lambda node, at: node.inject(gpu, "gpu_off_bus", at=at)
    if action == "return_gpu":
        return lambda node, at: node.clear_faults(gpu, "gpu_off_bus", at=at)
    if action == "reset":
        assert gpu is not None
        return lambda node, at: node.reset_hive(gpu, at=at)
    if action == "add_process":
        spec = step.add_process
        assert spec is not None and gpu is not None
        vram = int(spec.vram_gb * 1024**3)
        return lambda node, at: node.add_process(gpu, spec.pid, spec.name, vram, at=at)
    if action == "remove_process":
        pid = step.remove_process
        assert pid is not None
        return lambda node, at: node.remove_process(pid, at=at)
    return lambda node, at: node.release_hangs(gpu)


def _describe(step: Step) -> str:
    where = "all GPUs" if not isinstance(step.gpu, int) else f"gpu {step.gpu}"
    action = step.action
    if action == "load":
        return f"{where} load {step.load}"
    if action == "inject":
        extra = " (persistent)" if step.persistent else ""
        return f"{where} inject {step.inject}{extra}"
    if action == "clear":
        return f"{where} clear {step.clear}"
    if action == "add_process":
        assert step.add_process is not None
        return f"{where} start process {step.add_process.pid} ({step.add_process.name})"
    if action == "remove_process":
        return f"process {step.remove_process} exits"
    return f"{where} {action.replace('_', ' ')}"


def apply_partition(node: SimNode, spec: PartitionSpec) -> None:
    """Put the node in the scenario's partition modes and failure behaviour."""
    node.set_partition_modes(spec.compute, spec.memory)
    node.partition_lost_on_reset = spec.lost_on_reset
    node.partition_set_status = w.AMDSMI_STATUS_BUSY if spec.reapply_fails else 0


def start_scenario(
    name_or_path: str | Path,
    clock: Clock,
    *,
    seed: int | None = None,
    model: str | None = None,
) -> tuple[SimNode, ScenarioRunner]:
    """Build the scenario's node (its model and seed unless overridden) and a runner from now."""
    scenario = load_scenario(name_or_path)
    node = build_node(
        model or scenario.model, seed=scenario.seed if seed is None else seed, clock=clock
    )
    apply_partition(node, scenario.partition)
    return node, ScenarioRunner(node, scenario, start=clock.now())


__all__ = [
    "LoadProfile",
    "PartitionSpec",
    "Scenario",
    "ScenarioRunner",
    "Step",
    "WorkerStep",
    "apply_partition",
    "load_scenario",
    "parse_scenario",
    "scenario_names",
    "start_scenario",
]
