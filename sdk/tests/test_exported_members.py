"""The public surface is exactly ``queuecore.__all__`` (as encode/httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import importlib.metadata

import queuecore


def test_all_imports_are_exported():
    included_private_members = ["__version__"]
    public = {m for m in vars(queuecore) if not m.startswith("_") or m in included_private_members}
    assert sorted(queuecore.__all__) == sorted(public)
    assert len(queuecore.__all__) == len(set(queuecore.__all__))


def test_every_export_resolves():
    for name in queuecore.__all__:
        assert getattr(queuecore, name) is not None, name


def test_clients_and_exceptions_show_the_public_path():
    for name in ("QueueCore", "AsyncQueueCore", "NotFoundError", "APIConnectionError", "SyncCursorPage"):
        assert getattr(queuecore, name).__module__ == "queuecore"


def test_types_are_exported_from_both_places():
    for name in queuecore.types.__all__:
        assert getattr(queuecore, name) is getattr(queuecore.types, name)


def test_version_matches_the_distribution():
    assert queuecore.__version__ == importlib.metadata.version("queuecore") == "0.1.0"


def test_the_sdk_imports_nothing_of_the_server():
    import ast
    from pathlib import Path

    for path in Path(queuecore.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "app" or n.startswith("app.") for n in names), path
