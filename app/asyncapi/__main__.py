"""``python -m app.asyncapi``: write the push WebSocket's contract (``asyncapi.yaml``)."""

from __future__ import annotations

import sys

from app.asyncapi import render_yaml

sys.stdout.write(render_yaml())
