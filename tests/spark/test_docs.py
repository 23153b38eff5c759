"""docs/spark.md: every Python example runs, in order, against the real server (the staging environment of
the test project, through QUEUECORE_API_KEY / QUEUECORE_BASE_URL as the page says)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.spark.support import Api, Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_page_has_examples() -> None:
    assert len(python_blocks()) >= 7


def test_examples_run(
    spark, qc_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    api = Api(qc_server.url, qc_server.keys["staging"])
    for name in ("orders", "refunds", "orders-mirror"):
        r = api.http.post("/v1/topics", json={"name": name, "partitions": 3})
        assert r.status_code == 201, r.text
    published = api.publish(
        "orders",
        [{"data": {"orderId": f"ord_{i}", "amount": 100 * i}, "partition": i % 3} for i in range(12)],
    )
    namespace: dict[str, object] = {}
    for block in python_blocks():
        # The page's relative paths, under this test's directory (Spark resolves them from the JVM's cwd).
        block = block.replace('"orders-copy"', f'"{tmp_path}/orders-copy"')
        block = block.replace('"checkpoints/', f'"{tmp_path}/checkpoints/')
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out
    assert "12 messages" in out
    assert str(sum(100 * i for i in range(12))) in out
    assert "[1, 2]" in out
    assert namespace["recent"].count() == 12  # type: ignore[attr-defined]
    copied = spark.read.parquet(str(tmp_path / "orders-copy"))
    assert sorted(r["id"] for r in copied.collect()) == sorted(str(m["id"]) for m in published)
    assert sorted(m["key"] for m in api.read_all("refunds")) == ["ord_1", "ord_2"]
    mirrored = api.read_all("orders-mirror")
    assert sorted(m["data"]["orderId"] for m in mirrored) == sorted(f"ord_{i}" for i in range(12))  # type: ignore[index]
    api.http.close()
