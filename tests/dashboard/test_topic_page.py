"""The topic page over HTTP against a real server (the browser flows are in ``test_dashboard.py``): where
each partition's copies live, as the API's describe says it."""

from __future__ import annotations

import re
import secrets

from tests.dashboard.conftest import Dashboard
from tests.dashboard.test_sessions import signed_in

ROW = re.compile(r'<tr data-partition="(\d+)" data-server="([^"]*)">(.*?)</tr>', re.DOTALL)
CELL = re.compile(r"<td>(.*?)</td>", re.DOTALL)


class TestWhereTheCopiesLive:
    async def test_a_row_per_copy_with_its_server_zone_role_and_lag(self, dashboard: Dashboard):
        name = f"copies.{secrets.token_hex(3)}"
        async with dashboard.api() as api:
            assert (await api.post("/topics", json={"name": name, "partitions": 2})).status_code == 201
            described = (await api.get(f"/topics/{name}")).json()
        http = await signed_in(dashboard.server.url, dashboard.email, dashboard.password)
        try:
            page = await http.get(f"{dashboard.project_url()}/topics/{name}")
        finally:
            await http.aclose()
        assert page.status_code == 200
        table = page.text[page.text.index('<table id="replicas"') :]
        table = table[: table.index("</table>")]
        assert "<caption>Where the copies live</caption>" in table
        rows = [
            (int(p), server, [c.strip() for c in CELL.findall(cells)])
            for p, server, cells in ROW.findall(table)
        ]
        # The server's local engine: one copy per partition, leading, caught up, in no zone (none configured).
        expected = [
            (p["id"], r["server"], [str(p["id"]), r["server"], "—", "leader", "yes", "0"])
            for p in described["partitionDetails"]
            for r in p["replicas"]
        ]
        assert rows == expected and len(rows) == 2
