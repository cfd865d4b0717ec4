"""A fuzz corpus of fleetd.yaml and rule files, generated (never stored): ``corpus(root)``.

Every case is bytes for one file and the loader it goes to (``config`` or ``rules``):

* empty and blank files, and files that are not a mapping;
* docs/fleetd.example.yaml (made installable under ``root``: its secret files and variables
  exist) cut at every tenth byte, and the largest shipped rule pack cut at every 25th;
* alias bombs, deep nesting, recursive and undefined aliases, merge keys good and bad;
* wrong encodings: UTF-16/32 with and without a byte order mark, Latin-1, NUL bytes and
  control characters, a UTF-8 byte order mark (allowed);
* random mutations of the example (bytes flipped, deleted, lines dropped, repeated and
  swapped) from a fixed seed;
* the lax values an earlier chaos run found accepted (``port: true``, ``url: ftp://x``, ...).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "docs" / "fleetd.example.yaml"
RULE_PACK = REPO / "rules" / "gpu.yaml"
SEED = 20240611
SECRET = "s3cr3t-value-of-32-characters!!!"
ENV_SECRET = "FLEETD_FUZZ_SECRET"
ALERTING = b"alerting: {receivers: [{name: console, console: [{}]}]}\n"


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    kind: str  # "config" or "rules"
    data: bytes
    hostile: bool = False  # built to exhaust the loader: time and memory are measured


def installable_example(root: Path) -> bytes:
    """The example with /etc/fleetd under ``root`` and its secret files written; its
    ``*_env`` variables all read ``FLEETD_FUZZ_SECRET`` (the test sets it)."""
    text = EXAMPLE.read_text(encoding="utf-8").replace("/etc/fleetd/", f"{root}/etc/fleetd/")
    for match in re.finditer(r"^[ -]*(\w+)_file: *(\S+)", text, re.MULTILINE):
        secret = Path(match.group(2))
        secret.parent.mkdir(parents=True, exist_ok=True)
        value = SECRET
        if secret.name.endswith("registry-url"):
            value = "postgresql://fleetd_agent:s3cr3t@db.example/fleet"
        elif secret.name.endswith("webhook-url"):
            value = "https://hooks.example/services/s3cr3t"
        secret.write_text(value + "\n", encoding="utf-8")
    text = re.sub(r"(_env: *)\S+", rf"\g<1>{ENV_SECRET}", text)
    return text.encode("utf-8")


def corpus(root: Path) -> list[Case]:
    return list(_cases(root))


def _cases(root: Path) -> Iterator[Case]:
    example = installable_example(root)
    yield Case("example", "config", example)
    yield from _shapes()
    for cut in range(0, len(example), 10):
        yield Case(f"example-cut-{cut}", "config", example[:cut])
    pack = RULE_PACK.read_bytes()
    yield Case("pack", "rules", pack)
    for cut in range(0, len(pack), 25):
        yield Case(f"pack-cut-{cut}", "rules", pack[:cut])
    yield from _hostile()
    yield from _encodings(example)
    yield from _lax_values()
    yield from _mutations(example, random.Random(SEED))


def _shapes() -> Iterator[Case]:
    for name, data in {
        "empty": b"",
        "blank": b"\n\n  \n",
        "comment": b"# nothing here\n",
        "document-marker": b"---\n",
        "null": b"~\n",
        "list": b"- node\n- alerting\n",
        "scalar": b"fleetd\n",
        "two-documents": ALERTING + b"---\n" + ALERTING,
        "no-alerting": b"node: {name: n1}\n",
        "no-receivers": b"alerting: {route: {receiver: console}}\n",
        "no-final-newline": ALERTING.rstrip(b"\n"),
    }.items():
        yield Case(name, "config", data)
        yield Case(name, "rules", data)


def _bomb(width: int, levels: int) -> bytes:
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def _hostile() -> Iterator[Case]:
    deep = {
        "flow-lists-500": "a: " + "[" * 500 + "]" * 500,
        "flow-maps-1000": "a: " + "{b: " * 1000 + "1" + "}" * 1000,
        "flow-lists-20000": "a: " + "[" * 20000 + "]" * 20000,
        "block-maps-600": "".join(" " * i + f"k{i}:\n" for i in range(600)).rstrip("\n"),
        "block-lists-600": "".join(" " * i + "-\n" for i in range(600)).rstrip("\n"),
    }
    for name, text in deep.items():
        yield Case(name, "config", (text + "\n").encode(), hostile=True)
        yield Case(name, "rules", (text + "\n").encode(), hostile=True)
    bombs = {
        "billion-laughs": _bomb(9, 9),
        "wide-bomb": _bomb(100, 4),
        "deep-bomb": _bomb(2, 40),
        "alias-flood": b"a: &a x\nb: [" + b", ".join([b"*a"] * 5000) + b"]\n",
        "merge-bomb": b"a: &a {x: 1}\n"
        + b"".join(
            f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}\n".encode() for i in range(1, 30)
        ).replace(b"*m0", b"*a"),
        "recursive-alias": b"a: &a [1, *a]\n",
        "recursive-merge": b"a: &a {<<: *a}\n",
        "undefined-alias": b"a: *nowhere\n",
        "anchor-in-key": b"? &k [1]\n: *k\n",
        "huge-file": b"# " + b"x" * (1024 * 1024) + b"\n",
        "huge-int": b"http: {port: " + b"9" * 100_000 + b"}\n",
        "many-values": b"a: [" + b", ".join([b"1"] * 60_000) + b"]\n",
        "long-line": b"node: {name: " + b"n" * 500_000 + b"}\n",
    }
    for name, data in bombs.items():
        yield Case(name, "config", data, hostile=True)
        yield Case(name, "rules", data, hostile=True)
    merges = {
        "merge-good": ALERTING
        + b"vllm:\n  workers:\n    - &w {name: w0, url: 'http://127.0.0.1:8000', gpus: [0]}\n"
        b"    - {<<: *w, name: w1, gpus: [1]}\n",
        "merge-list": ALERTING
        + b"vllm:\n  workers:\n    - &a {name: w0, url: 'http://127.0.0.1:8000', gpus: [0]}\n"
        b"    - &b {name: w1, url: 'http://127.0.0.1:8001', gpus: [1], model: m}\n"
        b"    - {<<: [*b, *a], name: w2, gpus: [2]}\n",
        "merge-scalar": ALERTING + b"poll: {<<: 5}\n",
        "merge-twice": ALERTING + b"x: &x {interval: 5s}\npoll: {<<: *x, <<: *x}\n",
        "merge-unknown-key": ALERTING + b"x: &x {bogus: 1}\n",
    }
    for name, data in merges.items():
        yield Case(name, "config", data)


def _encodings(example: bytes) -> Iterator[Case]:
    text = example.decode("utf-8")
    ascii_text = text.encode("ascii", errors="replace").decode("ascii")
    yield Case("utf8-bom", "config", b"\xef\xbb\xbf" + example)
    yield Case("utf16-bom", "config", ascii_text.encode("utf-16"))
    yield Case("utf16le-no-bom", "config", ascii_text.encode("utf-16-le"))
    yield Case("utf32-bom", "config", ascii_text.encode("utf-32"))
    yield Case("latin1", "config", ALERTING + "node: {name: café}\n".encode("latin-1"))
    yield Case("nul-byte", "config", example[:300] + b"\x00" + example[300:])
    yield Case("nul-only", "config", b"\x00" * 64)
    yield Case("escape-char", "config", ALERTING + b"node: {name: n\x1b[31m1}\n")
    yield Case("bom-inside", "config", ALERTING + "node: {name: n\ufeff1}\n".encode())
    yield Case("crlf", "config", example.replace(b"\n", b"\r\n"))
    yield Case("cr-only", "config", example.replace(b"\n", b"\r"))
    yield Case("lone-surrogate", "config", ALERTING + b"node: {name: \xed\xa0\x80}\n")
    yield Case("rules-utf16", "rules", RULE_PACK.read_text(encoding="utf-8").encode("utf-16"))
    yield Case("rules-nul", "rules", b"rules:\n  - name: A\x00B\n")


LAX = {
    "port-true": "http: {port: true}",
    "port-big": "http: {port: 70000}",
    "port-text": "http: {port: '9477'}",
    "url-ftp": "alerting: {external_url: 'ftp://x'}",
    "webhook-ftp": "alerting: {receivers: [{name: h, webhook: [{url: 'ftp://x'}]}]}",
    "gpus-repeat-negative": (
        "vllm: {workers: [{name: w, url: 'http://127.0.0.1:8000', gpus: [3, 3, -1]}]}"
    ),
    "gpus-huge": "vllm: {workers: [{name: w, url: 'http://127.0.0.1:8000', gpus: [99999]}]}",
    "worker-url-ftp": "vllm: {workers: [{name: w, url: 'ftp://x', gpus: [0]}]}",
    "bind-bad-ipv4": "http: {bind: 999.1.1.1}",
    "bind-bad-ipv6": "http: {bind: '::g'}",
    "healthy-polls-text": "remediation: {verify: {healthy_polls: 1e21}}",
    "healthy-polls-float": "remediation: {verify: {healthy_polls: 1.0e+21}}",
    "timeout-weeks": "remediation: {drain: {timeout: 10000w}}",
    "timeout-inf": "poll: {gpu_timeout: .inf}",
    "timeout-nan": "poll: {gpu_timeout: .nan}",
    "node-name-long": "node: {name: " + "n" * 100_000 + "}",
    "node-name-space": "node: {name: 'gpu node'}",
    "bool-text": "rules: {shipped: 'yes'}",
    "bool-int": "alerting: {receivers: [{name: c, console: [{send_resolved: 1}]}]}",
    "scenario-without-simulator": "backend: {scenario: demo}",
    "state-dir-relative": "state_dir: var/lib/fleetd",
    "bad-date": "node: {name: 2001-13-45}",
    "python-tag": "node: {name: !!python/object/apply:os.system [echo]}",
    "unknown-tag": "node: !custom {name: n1}",
}


def _lax_values() -> Iterator[Case]:
    for name, line in LAX.items():
        data = line.encode() + b"\n"
        if not line.startswith("alerting"):
            data = ALERTING + data
        yield Case(f"lax-{name}", "config", data)


def _mutations(example: bytes, rng: random.Random, count: int = 150) -> Iterator[Case]:
    lines = example.splitlines(keepends=True)
    for index in range(count):
        op = rng.choice(("flip", "delete", "insert", "drop-line", "repeat-line", "swap-lines"))
        data = bytearray(example)
        if op == "flip":
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == "delete":
            start = rng.randrange(len(data))
            del data[start : start + rng.randint(1, 40)]
        elif op == "insert":
            where = rng.randrange(len(data))
            data[where:where] = rng.choice([b":", b"-", b"[", b"{", b"&a ", b"*a", b"\t", b"'"])
        else:
            chosen = list(lines)
            i, j = rng.randrange(len(chosen)), rng.randrange(len(chosen))
            if op == "drop-line":
                del chosen[i]
            elif op == "repeat-line":
                chosen.insert(i, chosen[i])
            else:
                chosen[i], chosen[j] = chosen[j], chosen[i]
            data = bytearray(b"".join(chosen))
        yield Case(f"mutation-{index}-{op}", "config", bytes(data))
