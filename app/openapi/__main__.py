"""``python -m app.openapi``: write the contract (``openapi.yaml``) of the app as the default settings build it."""

from __future__ import annotations

import sys

from app.main import create_app
from app.openapi import render_yaml
from app.settings import Settings

sys.stdout.write(render_yaml(create_app(Settings())))
