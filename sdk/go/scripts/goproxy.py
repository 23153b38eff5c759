"""Build a file:// Go module proxy (GOPROXY=file://DIR) holding the SDK's one dependency,
github.com/gorilla/websocket, from the source Debian installs under /usr/share/gocode
(package golang-github-gorilla-websocket-dev). Nothing is vendored into the repository: the proxy is
made at test time in a git-ignored directory, and go.sum's checksums (those of the public module) prove
the Debian source is the very same module.

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


def add_module(out: Path, module: str, version: str, src: Path) -> None:
    if not (src / "go.mod").is_file():
        sys.exit(f"{src}/go.mod is missing: apt-get install -y golang-github-gorilla-websocket-dev")
    at = out / module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    (at / "list").write_text(version + "\n")
    (at / f"{version}.info").write_text(json.dumps({"Version": version}) + "\n")
    (at / f"{version}.mod").write_bytes((src / "go.mod").read_bytes())
    prefix = f"{module}@{version}/"
    tmp = at / f"{version}.zip.tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(src.rglob("*")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(src).as_posix()
                if rel.startswith(("vendor/", ".git/")) or "/vendor/" in rel:
                    continue
                zf.write(path, prefix + rel)
    os.replace(tmp, at / f"{version}.zip")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    for module, version, src in MODULES:
        add_module(out, module, version, Path(src))


if __name__ == "__main__":
    main()
