"""Replay: pre-recorded amdsmi answers served at near-zero cost, in place of the amdsmi module.

A ``Recorder`` wraps an amdsmi module (the simulator's ``SimulatedAmdSmi``) and writes down
every call's answer — the result the Python package returns, or the exception it raises — keyed
by the function and its arguments (a processor handle by its pointer value, an enum member by
its name). ``ReplayAmdSmi`` stands where the amdsmi module goes
(``AmdSmiBackend(ReplayAmdSmi(recording))``) and serves, for each key, the recorded answers in
the order they were recorded, cycling back to the first after the last, so counters still move
(and step back once per cycle, as after a reset). Each answer is kept as compact JSON text and
decoded at each call, so the caller always gets a fresh object, as from the real package.

A call the recording never saw is answered as the real library would answer a device that
cannot: a null handle INVAL, a handle it never enumerated NOT_FOUND, anything else
NOT_SUPPORTED — never a made-up value — and is counted in ``misses``.

The file (``Recording.save``/``load``) is gzip-compressed JSON: ``format``, ``meta`` (what was
recorded: model, ticks, poll interval, seed, load), ``calls`` (key → answers as JSON text)
and ``sysfs`` (the simulated node's fake sysfs files, path → content, written back by
``Recording.write_sysfs`` for the backend's PCI presence checks). ``fleetd.replay_wiring``
records a whole daemon's calls and opens a backend over a recording.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from fleetd.sim import enums, wrapper
from fleetd.sim import exceptions as exc
from fleetd.sim.surface import AmdSmiModuleSurface

FORMAT = "fleetd-amdsmi-replay/1"
READER = "AmdSmiEventReader"
_BUILTIN_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (TypeError, ValueError, KeyError, IndexError, OSError, RuntimeError)
}


class ReplayError(ValueError):
    """A recording that cannot be read or written (path and reason in the message)."""


# ------------------------------------------------------------------------------------ keys
def _arg(value: Any) -> str:
    if isinstance(value, ctypes.c_void_p):
        return f"h{value.value or 0}"
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_arg(v) for v in value) + "]"
    if isinstance(value, bytes | bytearray):
        return "b" + bytes(value).hex()
    if isinstance(value, ctypes._SimpleCData):
        return repr(value.value)
    return repr(value)


def call_key(name: str, args: Iterable[Any], kwargs: Mapping[str, Any]) -> str:
    """``name(arg,…,k=v)``: handles by pointer value (``h<n>``), enum members by name."""
    parts = [_arg(a) for a in args]
    parts += [f"{k}={_arg(v)}" for k, v in sorted(kwargs.items())]
    return f"{name}({','.join(parts)})"


# ------------------------------------------------------------------------------ values
def encode(value: Any) -> Any:
    """An amdsmi answer as plain JSON: handles, enum members, tuples, bytes and dicts with
    non-text keys are tagged (``$handle``, ``$enum``, ``$tuple``, ``$bytes``, ``$map``)."""
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, Enum):
            return {"$enum": type(value).__name__, "name": value.name}
        return value
    if isinstance(value, ctypes.c_void_p):
        return {"$handle": value.value or 0}
    if isinstance(value, Enum):
        return {"$enum": type(value).__name__, "name": value.name}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"$map": [[encode(k), encode(v)] for k, v in value.items()]}
    raise ReplayError(f"cannot record a {type(value).__name__} answer: {value!r:.80}")


def _hook(obj: dict[str, Any]) -> Any:
    if len(obj) > 2 or not obj:
        return obj
    if "$handle" in obj:
        return wrapper.amdsmi_processor_handle(obj["$handle"])
    if "$enum" in obj:
        return getattr(enums, obj["$enum"])[obj["name"]]
    if "$tuple" in obj:
        return tuple(obj["$tuple"])
    if "$bytes" in obj:
        return bytes.fromhex(obj["$bytes"])
    if "$map" in obj:
        return {_freeze(k): v for k, v in obj["$map"]}
    return obj


def _freeze(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def decode(text: str) -> Any:
    """``encode``'s inverse, from JSON text."""
    return json.loads(text, object_hook=_hook)


def _outcome_ok(value: Any) -> str:
    return json.dumps({"ok": encode(value)}, separators=(",", ":"))


def _outcome_error(error: BaseException) -> str:
    code = getattr(error, "err_code", None)
    if isinstance(error, exc.AmdSmiLibraryException) and isinstance(code, int):
        return json.dumps({"status": code})
    name = type(error).__name__
    if name in _BUILTIN_ERRORS and type(error) is _BUILTIN_ERRORS[name]:
        return json.dumps({"raise": name, "message": str(error)})
    raise ReplayError(f"cannot record a {name} ({error}); only library statuses and builtins")


# ------------------------------------------------------------------------------ the file
@dataclass
class Recording:
    """Recorded amdsmi answers: key → answers (JSON text, in call order)."""

    calls: dict[str, list[str]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    sysfs: dict[str, str] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        document = {"format": FORMAT, "meta": self.meta, "calls": self.calls, "sysfs": self.sysfs}
        data = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as out:
            out.write(data)
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Recording:
        try:
            with gzip.open(path, "rb") as source:
                document = json.loads(source.read())
        except (OSError, ValueError) as error:
            raise ReplayError(f"{path}: not a readable replay recording: {error}") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ReplayError(f"{path}: format is not {FORMAT}")
        calls = document.get("calls")
        if not isinstance(calls, dict) or not all(
            isinstance(v, list) and v and all(isinstance(t, str) for t in v) for v in calls.values()
        ):
            raise ReplayError(f"{path}: calls: expected key → non-empty list of answers")
        # identical answers share one string (static calls repeat the same text every tick)
        shared: dict[str, str] = {}
        interned = {k: [shared.setdefault(t, t) for t in v] for k, v in calls.items()}
        return cls(
            calls=interned,
            meta=dict(document.get("meta") or {}),
            sysfs={str(k): str(v) for k, v in (document.get("sysfs") or {}).items()},
        )

    def write_sysfs(self, root: Path) -> Path:
        """The recorded fake sysfs files under ``root`` (the backend's ``pci_root``)."""
        for rel, content in self.sysfs.items():
            target = root / rel
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise ReplayError(f"sysfs path {rel!r} leaves the tree")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        return root

    @staticmethod
    def read_sysfs(root: Path) -> dict[str, str]:
        """Every file under ``root`` as relative path → content (to record a fake tree)."""
        return {
            str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()
        }


# ------------------------------------------------------------------------------ recording
class Recorder:
    """Stands in for an amdsmi module and writes down every ``amdsmi_*`` call's answer (and
    every ``AmdSmiEventReader`` construction, read and stop). Everything else is the wrapped
    module's own attribute."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._lock = threading.Lock()
        self.calls: dict[str, list[str]] = {}
        self._wrapped: dict[str, Callable[..., Any]] = {}
        self.AmdSmiEventReader = self._reader_class()

    def __getattr__(self, name: str) -> Any:
        wrapped = self._wrapped.get(name)
        if wrapped is not None:
            return wrapped
        target = getattr(self._module, name)
        if not (name.startswith("amdsmi_") and callable(target) and not isinstance(target, type)):
            return target
        wrapped = self._recorded(name)
        self._wrapped[name] = wrapped
        return wrapped

    def note(self, key: str, outcome: str) -> None:
        with self._lock:
            self.calls.setdefault(key, []).append(outcome)

    def run(self, key: str, call: Callable[[], Any], *, keep: bool = True) -> Any:
        """``call()``'s answer, written down under ``key`` (``keep`` False: only whether it
        succeeded — a constructed event reader is an object, not an answer)."""
        try:
            result = call()
        except Exception as error:
            self.note(key, _outcome_error(error))
            raise
        self.note(key, _outcome_ok(result if keep else None))
        return result

    def _recorded(self, name: str) -> Callable[..., Any]:
        module = self._module

        def call(*args: Any, **kwargs: Any) -> Any:
            key = call_key(name, args, kwargs)
            return self.run(key, lambda: getattr(module, name)(*args, **kwargs))

        call.__name__ = name
        return call

    def _reader_class(self) -> type:
        recorder, inner_cls = self, self._module.AmdSmiEventReader

        class RecordedReader:
            def __init__(self, processor_handle: Any, event_types: Any) -> None:
                types = list(event_types)
                self._handle = _arg(processor_handle)
                key = call_key(READER, (processor_handle, types), {})
                self._inner = recorder.run(
                    key, lambda: inner_cls(processor_handle, types), keep=False
                )

            def read(self, timestamp: int, num_elem: int = 10) -> Any:
                key = f"{READER}.read({self._handle},{timestamp!r},{num_elem!r})"
                return recorder.run(key, lambda: self._inner.read(timestamp, num_elem))

            def stop(self) -> None:
                recorder.run(f"{READER}.stop({self._handle})", self._inner.stop)

        RecordedReader.__name__ = READER
        return RecordedReader

    def recording(self, meta: Mapping[str, Any], sysfs: Mapping[str, str]) -> Recording:
        with self._lock:
            calls = {k: list(v) for k, v in self.calls.items()}
        return Recording(calls=calls, meta=dict(meta), sysfs=dict(sysfs))


# ------------------------------------------------------------------------------ replaying
class _Interface:
    """``amdsmi.amdsmi_interface`` of the replay: the same recorded functions."""

    def __init__(self, face: ReplayAmdSmi) -> None:
        self._face = face

    def __getattr__(self, name: str) -> Any:
        return getattr(self._face, name)


class ReplayAmdSmi(AmdSmiModuleSurface):
    """Stands in for the ``amdsmi`` module, serving a ``Recording``.

    The enum and exception classes and ``amdsmi_wrapper`` are the simulator's (the real
    package's names and values). ``calls``/``misses`` count answers served and calls the
    recording did not have (key → count); ``cpu_s`` is the CPU the replay itself spent
    (``time.thread_time`` of every call), so a benchmark can state it.
    """

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.__version__ = str(recording.meta.get("package_version", "7.0.2"))
        self._answers = recording.calls
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()
        self._wrapped: dict[str, Callable[..., Any]] = {}
        self._functions = {key.partition("(")[0] for key in recording.calls}
        self._handles = _recorded_handles(recording)
        self.calls = 0
        self.misses: dict[str, int] = {}
        self.cpu_s = 0.0
        self.AmdSmiEventReader = self._reader_class()

    @classmethod
    def load(cls, path: Path) -> ReplayAmdSmi:
        return cls(Recording.load(path))

    @property
    def amdsmi_interface(self) -> _Interface:
        return _Interface(self)

    @property
    def functions(self) -> frozenset[str]:
        """The function names the recording has answers for."""
        return frozenset(self._functions)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("amdsmi_"):
            raise AttributeError(name)
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            wrapped = self._replayed(name)
            self._wrapped[name] = wrapped
        return wrapped

    def _replayed(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.serve(call_key(name, args, kwargs), args)

        call.__name__ = name
        return call

    def serve(self, key: str, args: Iterable[Any] = ()) -> Any:
        """The next recorded answer for ``key``: its value, or its exception raised."""
        start = time.thread_time()
        try:
            with self._lock:
                answers = self._answers.get(key)
                if answers is None:
                    self.misses[key] = self.misses.get(key, 0) + 1
                else:
                    self.calls += 1
                    turn = self._next.get(key, 0)
                    self._next[key] = turn + 1
            if answers is None:
                raise self._miss(args)
            outcome = decode(answers[turn % len(answers)])
            if "ok" in outcome:
                return outcome["ok"]
            if "status" in outcome:  # the library's exception, built as the library would
                exc.check_status(int(outcome["status"]))
            error = _BUILTIN_ERRORS.get(str(outcome.get("raise")), RuntimeError)
            raise error(str(outcome.get("message", "")))
        finally:  # the replay's cost, raising included: the benchmark takes it off
            spent = time.thread_time() - start
            with self._lock:
                self.cpu_s += spent

    def _miss(self, args: Iterable[Any]) -> Exception:
        """What the library answers for a call the recording lacks (never a value)."""
        for arg in args:
            if isinstance(arg, ctypes.c_void_p):
                if not arg.value:
                    return exc.AmdSmiLibraryException(wrapper.AMDSMI_STATUS_INVAL)
                if arg.value not in self._handles:
                    return exc.AmdSmiLibraryException(wrapper.AMDSMI_STATUS_NOT_FOUND)
        return exc.AmdSmiLibraryException(wrapper.AMDSMI_STATUS_NOT_SUPPORTED)

    def _reader_class(self) -> type:
        face = self

        class ReplayReader:
            def __init__(self, processor_handle: Any, event_types: Any) -> None:
                if not isinstance(processor_handle, wrapper.amdsmi_processor_handle):
                    raise exc.AmdSmiParameterException(
                        processor_handle, wrapper.amdsmi_processor_handle
                    )
                types = list(event_types)
                self.processor_handle = processor_handle
                self._handle = _arg(processor_handle)
                face.serve(call_key(READER, (processor_handle, types), {}), (processor_handle,))

            def read(self, timestamp: int, num_elem: int = 10) -> Any:
                key = f"{READER}.read({self._handle},{timestamp!r},{num_elem!r})"
                return face.serve(key, (self.processor_handle,))

            def stop(self) -> None:
                face.serve(f"{READER}.stop({self._handle})", (self.processor_handle,))

            def __enter__(self) -> Any:
                return self

            def __exit__(self, *_: object) -> None:
                self.stop()

        ReplayReader.__name__ = READER
        return ReplayReader


def _recorded_handles(recording: Recording) -> frozenset[int]:
    """Every processor handle value an enumeration in the recording returned."""
    found: set[int] = set()
    for key, answers in recording.calls.items():
        if key.startswith(("amdsmi_get_processor_handles(", "amdsmi_get_processor_handle_from")):
            for text in set(answers):
                value = decode(text).get("ok")
                items = value if isinstance(value, list) else [value]
                found.update(
                    int(h.value) for h in items if isinstance(h, ctypes.c_void_p) and h.value
                )
    return frozenset(found)
