"""Health with real dependency checks, and Prometheus metrics by route template."""

from __future__ import annotations

import app as package


class TestHealth:
    async def test_all_ok(self, client, deployment):
        response = await client.get("/v1/health")
        assert response.status_code == 200
        body = response.json()
        assert body == {
            "status": "ok",
            "checks": {
                "database": "ok",
                "redis": "ok" if deployment.settings.redis_url else "embedded",
                "logEngine": "ok",
            },
            "version": package.__version__,
        }

    async def test_database_down_is_503(self, deployment, tmp_path):
        from app.main import create_app
        from app.settings import Settings

        # A metadata URL where nothing listens: the check must really query, and say down.
        url = (
            "postgresql+asyncpg://postgres@127.0.0.1:1/none"
            if deployment.backend == "postgres"
            else f"sqlite+aiosqlite:///{tmp_path}/missing-dir/x/metadata.db"
        )
        settings = Settings(data_dir=tmp_path, database_url=url, secret_key="s" * 40)
        app = create_app(settings)
        import httpx

        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                response = await http.get("/v1/health")
        assert response.status_code == 503
        assert response.json()["status"] == "down"
        assert response.json()["checks"]["database"] == "down"


class TestMetrics:
    async def test_counts_by_route_template_and_status(self, client, prod):
        await client.get("/v1/topics/some.topic", headers=prod)
        await client.get("/v1/topics/other.topic", headers=prod)
        text = (await client.get("/metrics")).text
        assert 'queuecore_http_requests_total{method="GET",route="/v1/topics/{name}",status="404"}' in text
        assert "some.topic" not in text
        assert "queuecore_http_request_duration_seconds_bucket" in text

    async def test_token_required_when_set(self, client, deployment):
        settings = deployment.settings
        original = settings.metrics_token
        try:
            object.__setattr__(settings, "metrics_token", type(original)("m" * 20))
            assert (await client.get("/metrics")).status_code == 401
            ok = await client.get("/metrics", headers={"Authorization": "Bearer " + "m" * 20})
            assert ok.status_code == 200
        finally:
            object.__setattr__(settings, "metrics_token", original)


class TestDependencyMetrics:
    """The health checks as gauges, for the alerting rules (infra/prometheus/alerts.yml)."""

    async def test_every_store_up_and_the_engine_not_degraded(self, client, deployment):
        text = (await client.get("/metrics")).text
        assert 'queuecore_store_up{store="database"} 1.0' in text
        assert 'queuecore_store_up{store="log_engine"} 1.0' in text
        if deployment.settings.redis_url:
            assert 'queuecore_store_up{store="redis"} 1.0' in text
        else:  # an embedded limiter has no Redis to watch
            assert 'store="redis"' not in text
        engine = deployment.settings.log_engine.value
        assert f'queuecore_log_engine_degraded{{engine="{engine}"}} 0.0' in text

    async def test_stores_down_are_zero_and_the_scrape_still_answers(self, deployment, tmp_path):
        from app.main import create_app
        from app.settings import Settings

        # Nothing listens on port 1: the database and Redis checks really fail.
        url = (
            "postgresql+asyncpg://postgres@127.0.0.1:1/none"
            if deployment.backend == "postgres"
            else f"sqlite+aiosqlite:///{tmp_path}/missing-dir/x/metadata.db"
        )
        settings = Settings(
            data_dir=tmp_path, database_url=url, redis_url="redis://127.0.0.1:1/0", secret_key="s" * 40
        )
        app = create_app(settings)
        import httpx

        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                response = await http.get("/metrics")
        assert response.status_code == 200
        assert 'queuecore_store_up{store="database"} 0.0' in response.text
        assert 'queuecore_store_up{store="redis"} 0.0' in response.text
        assert 'queuecore_store_up{store="log_engine"} 1.0' in response.text


class TestGroupMetrics:
    async def test_lag_oldest_unacked_age_and_in_flight_per_group(self, client, prod):
        topic = "metrics.jobs"
        assert (
            await client.post("/v1/topics", json={"name": topic, "partitions": 2}, headers=prod)
        ).status_code == 201
        batch = {"messages": [{"data": i} for i in range(3)]}
        assert (
            await client.post(f"/v1/topics/{topic}/messages/batch", json=batch, headers=prod)
        ).status_code == 201
        base = f"/v1/topics/{topic}/groups/workers"
        member = (await client.post(f"{base}/members", json={"startFrom": "earliest"}, headers=prod)).json()
        ident = {"memberId": member["memberId"], "generationId": member["generationId"]}
        polled = await client.post(f"{base}/poll", json={**ident, "maxMessages": 2}, headers=prod)
        assert len(polled.json()["messages"]) == 2
        text = (await client.get("/metrics")).text
        lines = {
            line.split("{")[0]: line
            for line in text.splitlines()
            if f'topic="{topic}"' in line and 'group="workers"' in line
        }
        assert lines["queuecore_group_lag_messages"].endswith(" 3.0")
        assert lines["queuecore_group_in_flight_messages"].endswith(" 2.0")
        assert float(lines["queuecore_group_oldest_unacked_message_age_seconds"].rsplit(" ", 1)[1]) >= 0
        ids = [m["id"] for m in polled.json()["messages"]]
        await client.post(f"{base}/ack", json={**ident, "ids": ids}, headers=prod)
        text = (await client.get("/metrics")).text
        in_flight = [
            line
            for line in text.splitlines()
            if line.startswith("queuecore_group_in_flight_messages") and f'topic="{topic}"' in line
        ]
        assert in_flight and in_flight[0].endswith(" 0.0")


class TestTopicMetrics:
    async def test_publishes_counted_per_topic(self, client, prod, tenant):
        await client.post("/v1/topics", json={"name": "metered"}, headers=prod)
        await client.post("/v1/topics/metered/messages", json={"data": {"a": 1}}, headers=prod)
        await client.post(
            "/v1/topics/metered/messages/batch",
            json={"messages": [{"data": 1}, {"data": "xy"}]},
            headers=prod,
        )
        text = (await client.get("/metrics")).text
        labels = f'{{environment="production",project="{tenant.project_id}",topic="metered"}}'
        assert f"queuecore_topic_published_messages_total{labels} 3.0" in text
        # data bytes: {"a":1} is 7, 1 is 1, "xy" is 4
        assert f"queuecore_topic_published_bytes_total{labels} 12.0" in text
