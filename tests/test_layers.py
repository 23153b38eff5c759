"""The house's layers, read from the source: edge → broker → stores → kit, and the seams #34 drew.

Every ``import`` counts, type-only ones (under ``TYPE_CHECKING``) and those inside functions too: a layer
that names a type from above or beside its port depends on it all the same.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"

# What the domain may reach outside itself: the stores' ports and their errors, and the kit.
BROKER_MAY_IMPORT = (
    re.compile(r"^app\.broker(\.|$)"),
    re.compile(r"^app\.kit(\.|$)"),
    re.compile(r"^app\.stores\.errors$"),
    re.compile(r"^app\.stores\.(metadata|log|limits)\.protocol(\.|$)"),
)
# Third-party packages that belong to an edge or to a store implementation, never to the domain.
BROKER_MAY_NOT_USE = (
    "sqlalchemy",
    "fastapi",
    "starlette",
    "asyncpg",
    "aiosqlite",
    "redis",
    "nats",
    "uvicorn",
)


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import in ``path`` (``from . import x`` resolved against the package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            # ``from app.stores import metadata`` names a module as well
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def modules_under(*parts: str) -> list[Path]:
    return sorted((ROOT.joinpath(*parts)).rglob("*.py"))


def _is_module(name: str) -> bool:
    """Whether ``name`` (as yielded for ``from m import n``: ``m.n``) is a module, not a name in one."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _app_module(name: str) -> str | None:
    """The ``app`` module an import names (``m.n`` when ``n`` is a submodule of ``m``, else ``m``)."""
    if not (name == "app" or name.startswith("app.")):
        return None
    while name and not _is_module(name):
        name = name.rpartition(".")[0]
    return name or None


def test_the_broker_imports_only_ports_errors_and_the_kit() -> None:
    found = set()
    for path in modules_under("app", "broker"):
        for line, name in imports_of(path):
            module = _app_module(name)
            if module is not None and not any(rule.match(module) for rule in BROKER_MAY_IMPORT):
                found.add(f"{path.relative_to(ROOT)}:{line}: {module}")
            if name.split(".")[0] in BROKER_MAY_NOT_USE:
                found.add(f"{path.relative_to(ROOT)}:{line}: {name.split('.')[0]}")
    assert not found, "the broker reaches past its ports:\n" + "\n".join(sorted(found))


@pytest.mark.parametrize(
    ("layer", "above"),
    [
        (
            "kit",
            ("app.broker", "app.stores", "app.api", "app.dashboard", "app.main", "app.services", "app.cli"),
        ),
        ("stores", ("app.broker", "app.api", "app.dashboard", "app.main", "app.services", "app.cli")),
        ("broker", ("app.api", "app.dashboard", "app.main", "app.services", "app.cli", "app.settings")),
        ("api", ("app.dashboard", "app.main", "app.cli")),
        ("dashboard", ("app.api", "app.main", "app.cli")),
    ],
)
def test_no_layer_imports_one_above_or_beside_it(layer: str, above: tuple[str, ...]) -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in modules_under("app", layer)
        for line, name in imports_of(path)
        if (module := _app_module(name)) and any(module == a or module.startswith(a + ".") for a in above)
    }
    assert not found, f"app/{layer} imports upward or sideways:\n" + "\n".join(sorted(found))


def test_nothing_asks_which_engine_it_is() -> None:
    """Capabilities are protocol methods: no ``isinstance`` on a log engine anywhere in the app."""
    pattern = re.compile(r"isinstance\([^)]*Engine")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in modules_under("app")
        for n, text in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(text)
    ]
    assert not found, found


@pytest.mark.parametrize("tree", [("spark",), ("sdk", "src")])
def test_the_clients_import_nothing_from_the_server(tree: tuple[str, ...]) -> None:
    """The Spark connector and the Python SDK are libraries of their own: they speak to the REST API."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in modules_under(*tree)
        if ".venv" not in path.parts
        for line, name in imports_of(path)
        if name == "app" or name.startswith("app.")
    ]
    assert not found, found
