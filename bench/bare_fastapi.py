"""The yardstick of the single publish (``publish_bench.py``): a bare FastAPI POST on the same path, served
by uvicorn as QueueCore is (one worker, httptools, uvloop, no access log). Its endpoint reads the body,
parses it with orjson and answers a small JSON object: no authentication, no limiter, no storage.

    .venv/bin/uvicorn --app-dir bench bare_fastapi:app --port 18101
"""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI()


@app.post("/v1/topics/{name}/messages", status_code=201)
async def publish(name: str, request: Request) -> Response:
    message = orjson.loads(await request.body())
    answer = {"topic": name, "fields": len(message), "offset": 0, "partition": 0}
    return Response(orjson.dumps(answer), 201, media_type="application/json")
