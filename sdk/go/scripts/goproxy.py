"""Build a file:// Go module proxy (GOPROXY=file://DIR) holding the SDK's one dependency,
github.com/gorilla/websocket, from the source Debian installs under /usr/share/gocode
(package golang-github-gorilla-websocket-dev). Nothing is vendored into the repository: the proxy is
made at test time in a git-ignored directory, and go.sum's checksums (those of the public module) prove
the Debian source is the very same module.

The OpenTelemetry adapter (otelqueuecore/, its own module) also needs go.opentelemetry.io/otel, /trace and
/sdk v1.1.0 and golang.org/x/sys v0.3.0 (packages golang-opentelemetry-otel-dev, golang-golang-x-sys-dev).
Debian ships OpenTelemetry's modules as one source tree without their own go.mod files, so each is cut out
of it here (its directory, less the directories of the other modules) with a go.mod written here that
requires only what its packages import. Those zips are not byte-identical to the public ones: the adapter's
test build uses a -modfile copy without go.sum, as the SDK's does.

    python3 scripts/goproxy.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

MODULES = [
    # (module path, version, source directory)
    ("github.com/gorilla/websocket", "v1.5.0", "/usr/share/gocode/src/github.com/gorilla/websocket"),
]


OTEL_SRC = "/usr/share/gocode/src/go.opentelemetry.io/otel"
OTEL = "go.opentelemetry.io/otel"
# Directories of OpenTelemetry's source tree that are modules of their own upstream (or unused here).
_OTEL_OTHERS = (
    "trace",
    "sdk",
    "metric",
    "exporters",
    "bridge",
    "example",
    "schema",
    "internal/metric",
    "internal/tools",
    "website_docs",
)
# (module path, version, source directory, directories left out, go.mod written here)
CUT_MODULES = [
    (OTEL, "v1.1.0", OTEL_SRC, _OTEL_OTHERS, f"module {OTEL}\n\ngo 1.15\n\nrequire {OTEL}/trace v1.1.0\n"),
    (
        f"{OTEL}/trace",
        "v1.1.0",
        f"{OTEL_SRC}/trace",
        (),
        f"module {OTEL}/trace\n\ngo 1.15\n\nrequire {OTEL} v1.1.0\n",
    ),
    (
        f"{OTEL}/sdk",
        "v1.1.0",
        f"{OTEL_SRC}/sdk",
        ("metric", "export"),
        (
            f"module {OTEL}/sdk\n\ngo 1.15\n\nrequire (\n\t{OTEL} v1.1.0\n\t{OTEL}/trace v1.1.0\n"
            "\tgolang.org/x/sys v0.3.0\n)\n"
        ),
    ),
    ("golang.org/x/sys", "v0.3.0", "/usr/share/gocode/src/golang.org/x/sys", (), None),
]


def add_module(
    out: Path, module: str, version: str, src: Path, skip: tuple[str, ...] = (), mod: str | None = None
) -> None:
    if mod is None and not (src / "go.mod").is_file():
        sys.exit(f"{src}/go.mod is missing: run make go-deps (it installs the golang-*-dev packages)")
    if not src.is_dir():
        sys.exit(f"{src} is missing: run make go-deps (it installs the golang-*-dev packages)")
    at = out / module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    (at / "list").write_text(version + "\n")
    (at / f"{version}.info").write_text(json.dumps({"Version": version}) + "\n")
    gomod = mod.encode() if mod is not None else (src / "go.mod").read_bytes()
    (at / f"{version}.mod").write_bytes(gomod)
    prefix = f"{module}@{version}/"
    tmp = at / f"{version}.zip.tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(src.rglob("*")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(src).as_posix()
                if rel.startswith(("vendor/", ".git/")) or "/vendor/" in rel:
                    continue
                if any(rel == d or rel.startswith(d + "/") for d in skip):
                    continue
                if mod is not None and rel in ("go.mod", "go.sum"):
                    continue
                zf.write(path, prefix + rel)
        if mod is not None:
            zf.writestr(prefix + "go.mod", gomod)
    os.replace(tmp, at / f"{version}.zip")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    for module, version, src in MODULES:
        add_module(out, module, version, Path(src))
    for module, version, src, skip, mod in CUT_MODULES:
        add_module(out, module, version, Path(src), skip, mod)


if __name__ == "__main__":
    main()
