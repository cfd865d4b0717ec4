"""Print /usr/share/doc/fleetd/copyright: fleetd's licence, then every Python distribution
bundled in the package's virtual environment with its licence, read from its own metadata.

scripts/build-deb.sh runs it with the package's interpreter, so the list is the environment
actually shipped; each distribution's licence text stays in its .dist-info directory, whose
path the list gives. COPYRIGHT_YEARS (e.g. 2025-2026) dates fleetd's own notice.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import Distribution, distributions
from pathlib import Path

HEADER = """\
fleetd: per-node health daemon for AMD Instinct GPU servers serving vLLM.

Copyright: {years} the fleetd authors
License: Apache-2.0
 On Debian systems the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.

fleetd runs in its own Python virtual environment, /usr/lib/fleetd/venv, which bundles the
Python distributions below (name, version, licence as the distribution declares it, and the
licence files it ships, under {site}):
"""


def licence(dist: Distribution) -> str:
    """License-Expression, else a one-line License field, else the licence classifiers."""
    meta = dist.metadata
    expression = meta.get("License-Expression")
    if expression:
        return str(expression)
    field = str(meta.get("License") or "").strip()
    if field and "\n" not in field and len(field) <= 80:
        return field
    classifiers = [
        c.rsplit("::", 1)[-1].strip()
        for c in meta.get_all("Classifier") or []
        if c.startswith("License ::")
    ]
    return " / ".join(classifiers) or "see its licence files"


def licence_files(dist: Distribution, site: Path) -> list[str]:
    files = []
    for entry in dist.files or []:
        name = Path(str(entry)).name.upper()
        if name.startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS")):
            files.append(str(Path(dist.locate_file(entry)).relative_to(site)))
    return sorted(files)


def bundled(site: Path) -> list[Distribution]:
    """The distributions installed in ``site`` (not the system's site-packages)."""
    found = [d for d in distributions() if Path(d.locate_file("")).resolve() == site.resolve()]
    return sorted(found, key=lambda d: str(d.metadata["Name"]).lower())


def main() -> None:
    site = (
        Path(sys.argv[1])
        if len(sys.argv) > 1
        else Path(sys.prefix).joinpath(
            "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages"
        )
    )
    installed = "/usr/lib/fleetd/venv/" + str(site).split("/usr/lib/fleetd/venv/", 1)[-1]
    years = os.environ.get("COPYRIGHT_YEARS", "")
    out = [HEADER.format(site=installed, years=years)]
    for dist in bundled(site):
        if dist.metadata["Name"] == "fleetd":
            continue  # the header
        name, version = dist.metadata["Name"], dist.version
        files = ", ".join(licence_files(dist, site)) or "none"
        out.append(f" {name} {version}: {licence(dist)}\n   licence files: {files}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
